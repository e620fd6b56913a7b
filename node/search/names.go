// Package search holds the stages of a plain query ("ghba find QUERY"),
// after the application modules paper's "Searching Files" module: the
// search "is based on the file name" first, then on "related file
// name[s]", then on the files' text.
//
// A Matcher decides the name stages for one base name at a time; it is
// built once per query and is safe for concurrent use.
package search

import (
	"path"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Stages of a match, in the order a plain query tries them.
const (
	// StageExact: the base name is the query.
	StageExact = "exact"
	// StageRelated: the base name is related to the query (Matcher).
	StageRelated = "related"
	// StageText: the file's text matches (the full-text index).
	StageText = "text"
)

// Matcher matches base names against one query.
type Matcher struct {
	query  string
	lower  string
	stem   string
	tokens []string
	maxEd  int
}

// NewMatcher returns the matcher of query (a base name or words; leading
// and trailing spaces are ignored).
func NewMatcher(query string) *Matcher {
	q := strings.TrimSpace(query)
	lower := strings.ToLower(q)
	return &Matcher{
		query:  q,
		lower:  lower,
		stem:   Stem(lower),
		tokens: Tokens(q),
		maxEd:  maxEdits(utf8.RuneCountInString(lower)),
	}
}

// maxEdits is the edit distance a related name may have from a query of n
// runes: 0 below 4 runes, 1 up to 7, 2 beyond (a short name with one
// edit is mostly another word).
func maxEdits(n int) int {
	switch {
	case n < 4:
		return 0
	case n < 8:
		return 1
	}
	return 2
}

// Stage returns the stage at which base name name matches the query:
// StageExact, StageRelated, or "" when it does not match. A name is
// related when, ignoring case, it equals the query, has the same stem
// (the name up to its first dot: "report" for "report.final.pdf"), is
// within a small edit distance of it (1 for queries of 4 to 7 runes, 2
// beyond), or holds every word of the query among its own words
// (Tokens).
func (m *Matcher) Stage(name string) string {
	if m.query == "" {
		return ""
	}
	if name == m.query {
		return StageExact
	}
	lower := strings.ToLower(name)
	switch {
	case lower == m.lower,
		m.stem != "" && Stem(lower) == m.stem,
		m.maxEd > 0 && withinEdits(lower, m.lower, m.maxEd),
		len(m.tokens) > 0 && containsAll(Tokens(name), m.tokens):
		return StageRelated
	}
	return ""
}

// Stem returns name up to its first dot (a leading dot, as in ".bashrc",
// does not count): "report" for "report.final.pdf"; "" for a name that is
// only dots.
func Stem(name string) string {
	base := path.Base(name)
	if strings.Trim(base, ".") == "" {
		return ""
	}
	if i := strings.IndexByte(base[1:], '.'); i >= 0 {
		return base[:i+1]
	}
	return base
}

// Tokens splits s into lower-case words: runs of letters or digits, also
// split where a lower-case letter is followed by an upper-case one
// ("readMe_v2.txt": read, me, v2, txt).
func Tokens(s string) []string {
	var out []string
	var cur []rune
	prev := rune(0)
	flush := func() {
		if len(cur) > 0 {
			out = append(out, strings.ToLower(string(cur)))
			cur = cur[:0]
		}
	}
	for _, r := range s {
		switch {
		case !unicode.IsLetter(r) && !unicode.IsDigit(r):
			flush()
		case unicode.IsUpper(r) && unicode.IsLower(prev):
			flush()
			cur = append(cur, r)
		default:
			cur = append(cur, r)
		}
		prev = r
	}
	flush()
	return out
}

// containsAll reports whether every word of want is in have.
func containsAll(have, want []string) bool {
	for _, w := range want {
		found := false
		for _, h := range have {
			if h == w {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// withinEdits reports whether a and b are at most k single-rune edits
// (insert, delete, substitute) apart, in O(k·n) time with a banded
// Levenshtein table.
func withinEdits(a, b string, k int) bool {
	ra, rb := []rune(a), []rune(b)
	if d := len(ra) - len(rb); d > k || -d > k {
		return false
	}
	const inf = 1 << 30
	prev := make([]int, len(rb)+1)
	cur := make([]int, len(rb)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(ra); i++ {
		lo, hi := max(1, i-k), min(len(rb), i+k)
		for j := range cur {
			cur[j] = inf
		}
		if lo == 1 {
			cur[0] = i
		}
		best := inf
		for j := lo; j <= hi; j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			v := min(prev[j-1]+cost, prev[j]+1, cur[j-1]+1)
			cur[j] = v
			best = min(best, v)
		}
		if best > k && (lo > 1 || cur[0] > k) {
			return false
		}
		prev, cur = cur, prev
	}
	return prev[len(rb)] <= k
}
