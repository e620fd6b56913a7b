package cachesim

import "github.com/ghba/ghba/routing/nexus"

// predictor learns from one access stream (one client's, or every
// client's with server-oriented grouping) and predicts the successors of a
// path: the prefetch group on a miss.
//
// The successor predictors of Nexus §2 (after Amer and Long) see the stream
// with immediate repeats collapsed (X X → X): a path is never its own
// successor, as in Nexus's graph (edges (i, j) need i ≠ j, Fig. 6).
type predictor interface {
	observe(p int32)
	// predict appends up to k successors of p, the likeliest first.
	predict(dst []int32, p int32, k int) []int32
}

// firstSuccessor predicts the path that followed p the first time p was
// accessed (Nexus §2, item 1); lastSuccessor the path that followed it the
// last time (item 2).
type successorPredictor struct {
	last  bool // overwrite: Last Successor
	succ  map[int32]int32
	prev  int32
	known bool
}

func newSuccessor(last bool) *successorPredictor {
	return &successorPredictor{last: last, succ: make(map[int32]int32)}
}

func (s *successorPredictor) observe(p int32) {
	if s.known && s.prev != p {
		if _, ok := s.succ[s.prev]; s.last || !ok {
			s.succ[s.prev] = p
		}
	}
	s.prev, s.known = p, true
}

func (s *successorPredictor) predict(dst []int32, p int32, k int) []int32 {
	if q, ok := s.succ[p]; ok && k > 0 {
		dst = append(dst, q)
	}
	return dst
}

// noahPredictor is Noah, the stable successor (Nexus §2, item 3; Amer and
// Long 2001): like Last Successor, but the current prediction changes to
// the last successor only after it was the successor S times in a row. The
// first successor seen is the initial prediction (with none, Noah could
// not predict before S repetitions).
type noahPredictor struct {
	s     int32
	state map[int32]noahState
	prev  int32
	known bool
}

type noahState struct {
	cur, last, run int32
}

func newNoah(s int) *noahPredictor {
	return &noahPredictor{s: int32(max(1, s)), state: make(map[int32]noahState)}
}

func (n *noahPredictor) observe(p int32) {
	if n.known && n.prev != p {
		st, ok := n.state[n.prev]
		switch {
		case !ok:
			st = noahState{cur: p, last: p, run: 1}
		case st.last == p:
			st.run++
		default:
			st.last, st.run = p, 1
		}
		if st.run >= n.s {
			st.cur = st.last
		}
		n.state[n.prev] = st
	}
	n.prev, n.known = p, true
}

func (n *noahPredictor) predict(dst []int32, p int32, k int) []int32 {
	if st, ok := n.state[p]; ok && k > 0 {
		dst = append(dst, st.cur)
	}
	return dst
}

// recentPopularity is Recent Popularity, best j-out-of-k (Nexus §2, item 4;
// Amer, Long and Burns 2002): of the last k successors of p, the one seen
// at least j times is predicted (the most frequent; among equals the most
// recent). Nothing is predicted when no successor reaches j.
type recentPopularity struct {
	j, k  int
	ring  map[int32][]int32 // last k successors, oldest first
	prev  int32
	known bool
}

func newRecentPopularity(j, k int) *recentPopularity {
	return &recentPopularity{j: max(1, j), k: max(1, k), ring: make(map[int32][]int32)}
}

func (r *recentPopularity) observe(p int32) {
	if r.known && r.prev != p {
		s := r.ring[r.prev]
		if len(s) >= r.k {
			copy(s, s[1:])
			s = s[:len(s)-1]
		}
		r.ring[r.prev] = append(s, p)
	}
	r.prev, r.known = p, true
}

func (r *recentPopularity) predict(dst []int32, p int32, k int) []int32 {
	s := r.ring[p]
	if k <= 0 || len(s) == 0 {
		return dst
	}
	best, bestN := int32(-1), 0
	for i := len(s) - 1; i >= 0; i-- { // most recent first: ties keep it
		n := 0
		for _, q := range s {
			if q == s[i] {
				n++
			}
		}
		if n > bestN {
			best, bestN = s[i], n
		}
	}
	if bestN >= r.j {
		dst = append(dst, best)
	}
	return dst
}

// succCounts counts the successors of one context, at most pgCap of them
// (a new successor of a full context replaces the least counted, least
// recent one).
type succCounts []succCount

type succCount struct {
	to  int32
	n   uint32
	seq uint64
}

const pgCap = 16

func (s *succCounts) add(to int32, seq uint64) {
	l := *s
	for i := range l {
		if l[i].to == to {
			l[i].n++
			l[i].seq = seq
			return
		}
	}
	if len(l) < pgCap {
		*s = append(l, succCount{to, 1, seq})
		return
	}
	w := 0
	for i := range l {
		if l[i].n < l[w].n || (l[i].n == l[w].n && l[i].seq < l[w].seq) {
			w = i
		}
	}
	l[w] = succCount{to, 1, seq}
}

// best returns the most counted successor (ties: the most recent) not in
// excl.
func (s succCounts) best(excl []int32) (int32, bool) {
	b := -1
	for i := range s {
		skip := false
		for _, x := range excl {
			if s[i].to == x {
				skip = true
				break
			}
		}
		if skip {
			continue
		}
		if b < 0 || s[i].n > s[b].n || (s[i].n == s[b].n && s[i].seq > s[b].seq) {
			b = i
		}
	}
	if b < 0 {
		return 0, false
	}
	return s[b].to, true
}

// pgPredictor is probability-based successor group prediction (Nexus §2,
// item 5; Amer, Long and Burns 2002). On a miss of X the group starts as
// {X} and repeatedly gains the path with the highest conditional
// probability of coming next given that the group's members were just
// accessed together, in order: first Y maximizing P(Y | X) (counts of
// immediate successors of X), then Z maximizing P(Z | X, Y) (counts of what
// followed the sequence X Y). PG1 prefetches Y, PG2 prefetches Y and Z: the
// prefetch group sizes 1 and 2 of the paper's evaluation (§5.3), the
// parameter Nexus's group size 2 is compared with. P(Z | X, Y) needs counts
// per pair of paths — the per-3-tuple statistics §4.4.2 describes — and a
// third prefetch would need 4-tuples, which is why the paper stops at PG2.
type pgPredictor struct {
	pairs   map[int32]*succCounts  // X → successors
	triples map[uint64]*succCounts // (X, Y) → successors
	prev1   int32                  // last path
	prev2   int32                  // the one before (−1: none)
	known   bool
	seq     uint64
	excl    [3]int32
}

func newPG() *pgPredictor {
	return &pgPredictor{pairs: make(map[int32]*succCounts), triples: make(map[uint64]*succCounts), prev2: -1}
}

func pairKey(x, y int32) uint64 { return uint64(uint32(x))<<32 | uint64(uint32(y)) }

func (g *pgPredictor) observe(p int32) {
	if g.known && g.prev1 == p {
		return
	}
	g.seq++
	if g.known {
		s := g.pairs[g.prev1]
		if s == nil {
			s = new(succCounts)
			g.pairs[g.prev1] = s
		}
		s.add(p, g.seq)
		if g.prev2 >= 0 {
			k := pairKey(g.prev2, g.prev1)
			t := g.triples[k]
			if t == nil {
				t = new(succCounts)
				g.triples[k] = t
			}
			t.add(p, g.seq)
		}
		g.prev2 = g.prev1
	}
	g.prev1, g.known = p, true
}

func (g *pgPredictor) predict(dst []int32, x int32, k int) []int32 {
	if k <= 0 {
		return dst
	}
	s := g.pairs[x]
	if s == nil {
		return dst
	}
	g.excl[0] = x
	y, ok := s.best(g.excl[:1])
	if !ok {
		return dst
	}
	dst = append(dst, y)
	if k < 2 {
		return dst
	}
	if t := g.triples[pairKey(x, y)]; t != nil {
		g.excl[1] = y
		if z, ok := t.best(g.excl[:2]); ok {
			dst = append(dst, z)
		}
	}
	return dst
}

// nexusPredictor is Nexus: the relationship graph of package nexus.
type nexusPredictor struct {
	g *nexus.Graph[int32]
}

func (n nexusPredictor) observe(p int32) { n.g.Access(p) }

func (n nexusPredictor) predict(dst []int32, p int32, k int) []int32 {
	return n.g.AppendSuccessors(dst, p, k)
}
