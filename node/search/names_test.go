package search

import (
	"slices"
	"testing"
)

func TestStage(t *testing.T) {
	tests := []struct {
		query, name, want string
	}{
		{"report.pdf", "report.pdf", StageExact},
		{"report.pdf", "Report.PDF", StageRelated},       // case
		{"report.pdf", "report.docx", StageRelated},      // same stem
		{"report.pdf", "report.final.pdf", StageRelated}, // same stem
		{"report.pdf", "repotr.pdf", StageRelated},       // 2 edits in a long query
		{"report.pdf", "summary.pdf", ""},
		{"main.go", "man.go", StageRelated},                     // 1 edit in 7 runes
		{"main.go", "mian.go", ""},                              // a swap is 2 edits
		{"notes", "nodes", StageRelated},                        // 1 edit, 5 runes
		{"cat", "cut", ""},                                      // short: no edits
		{"cat", "cat.txt", StageRelated},                        // same stem
		{"budget 2024", "Budget_2024_final.xlsx", StageRelated}, // every word
		{"budget 2024", "budget_2023.xlsx", ""},
		{"readme", "README.md", StageRelated},
		{"readMe", "read_me_first.txt", StageRelated}, // words read, me
		{".bashrc", ".bashrc", StageExact},
		{"bash", ".bash_profile", StageRelated}, // word bash
		{"", "anything", ""},
	}
	for _, tt := range tests {
		if got := NewMatcher(tt.query).Stage(tt.name); got != tt.want {
			t.Errorf("query %q, name %q: %q, want %q", tt.query, tt.name, got, tt.want)
		}
	}
}

func TestWithinEdits(t *testing.T) {
	tests := []struct {
		a, b string
		k    int
		want bool
	}{
		{"kitten", "sitting", 3, true},
		{"kitten", "sitting", 2, false},
		{"abc", "abc", 0, true},
		{"abc", "abd", 0, false},
		{"", "ab", 2, true},
		{"", "abc", 2, false},
		{"flaw", "lawn", 2, true},
		{"héllo", "hello", 1, true},
	}
	for _, tt := range tests {
		if got := withinEdits(tt.a, tt.b, tt.k); got != tt.want {
			t.Errorf("withinEdits(%q, %q, %d) = %v", tt.a, tt.b, tt.k, got)
		}
	}
}

func TestStemAndTokens(t *testing.T) {
	for name, want := range map[string]string{"report.final.pdf": "report", ".bashrc": ".bashrc", "Makefile": "Makefile", "..": "", ".x.y": ".x"} {
		if got := Stem(name); got != want {
			t.Errorf("Stem(%q) = %q, want %q", name, got, want)
		}
	}
	if got := Tokens("readMe_v2.txt"); !slices.Equal(got, []string{"read", "me", "v2", "txt"}) {
		t.Errorf("Tokens = %q", got)
	}
}
