package search

// StageRank orders the stages as a plain query runs them: StageExact (0),
// StageRelated (1), StageText (2); any other stage (a match of conditions
// only) comes last.
func StageRank(stage string) int {
	switch stage {
	case StageExact:
		return 0
	case StageRelated:
		return 1
	case StageText:
		return 2
	}
	return 3
}
