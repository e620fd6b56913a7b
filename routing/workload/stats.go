package workload

import (
	"math"
	"slices"
	"time"
)

// Summary describes a trace: operations per kind, distinct paths and
// clients, the time span, and the popularity curve of HBA Fig. 5 (the share
// of accesses taken by the most accessed x% of the metadata). Build one with
// Stats or with NewSummary and Add; it is not safe for concurrent use.
type Summary struct {
	// Records counts every record, exists records included.
	Records int
	// Ops counts records per Op (index by Op; Ops[OpExists] counts the
	// declared namespace).
	Ops [NumOps]int
	// First and Last are the times of the first and last timed records.
	First, Last time.Duration

	counts  map[string]int // path → timed records naming it as Path
	clients map[int]struct{}
	sorted  []int // access counts, descending; nil when stale
}

// NewSummary returns an empty Summary.
func NewSummary() *Summary {
	return &Summary{counts: make(map[string]int), clients: make(map[int]struct{})}
}

// Stats summarizes records.
func Stats(records []Record) *Summary {
	s := NewSummary()
	for _, r := range records {
		s.Add(r)
	}
	return s
}

// Add accounts for one record. Exists records and rename targets register a
// path without an access; every timed record counts one access to its Path
// and one for its client.
func (s *Summary) Add(r Record) {
	s.Records++
	if r.Op.Valid() {
		s.Ops[r.Op]++
	}
	s.sorted = nil
	if r.Op == OpExists {
		if _, ok := s.counts[r.Path]; !ok {
			s.counts[r.Path] = 0
		}
		return
	}
	if s.Accesses() == 1 {
		s.First = r.Time
	}
	s.Last = r.Time
	s.counts[r.Path]++
	if r.Path2 != "" {
		if _, ok := s.counts[r.Path2]; !ok {
			s.counts[r.Path2] = 0
		}
	}
	s.clients[r.Client] = struct{}{}
}

// Accesses returns the number of timed records.
func (s *Summary) Accesses() int { return s.Records - s.Ops[OpExists] }

// Paths returns the number of distinct paths named by the trace (declared,
// accessed or renamed to).
func (s *Summary) Paths() int { return len(s.counts) }

// AccessedPaths returns the number of distinct paths with at least one
// timed access.
func (s *Summary) AccessedPaths() int {
	n := 0
	for _, c := range s.sortedCounts() {
		if c == 0 {
			break
		}
		n++
	}
	return n
}

// Clients returns the number of distinct clients of timed records.
func (s *Summary) Clients() int { return len(s.clients) }

// Duration returns Last − First.
func (s *Summary) Duration() time.Duration { return s.Last - s.First }

// Share returns the y of HBA Fig. 5 for x: the share of all accesses taken
// by the ⌈x·Paths⌉ most accessed paths, x in [0, 1]. "x percent of file or
// directory metadata receives y percent of the total metadata accesses"
// (HBA §5); paths that are declared but never accessed count in the
// denominator, as they do in a file system.
func (s *Summary) Share(x float64) float64 {
	total := s.Accesses()
	if total == 0 || !(x > 0) {
		return 0
	}
	counts := s.sortedCounts()
	n := int(math.Ceil(math.Min(x, 1) * float64(len(counts))))
	sum := 0
	for _, c := range counts[:n] {
		sum += c
	}
	return float64(sum) / float64(total)
}

func (s *Summary) sortedCounts() []int {
	if s.sorted == nil {
		s.sorted = make([]int, 0, len(s.counts))
		for _, c := range s.counts {
			s.sorted = append(s.sorted, c)
		}
		slices.SortFunc(s.sorted, func(a, b int) int { return b - a })
	}
	return s.sorted
}
