package routing

import (
	"cmp"
	"slices"
	"sort"
	"strings"
)

// Move records one replica changing holder inside a group: the filter of
// Origin (a node of another group) moves from member From to member To.
// From is empty when the replica had no holder (the group was empty) and To
// is empty when the group's last member left.
type Move struct {
	Origin, From, To string
}

// Assignment decides which member of one G-HBA group holds the replica of
// each origin (a node outside the group), G-HBA §2.3–2.4. Within a group a
// replica resides on exactly one member, and every member holds about
// (N − M')/M' of them.
//
// The assignment is deterministic: the same sequence of operations gives the
// same state and the same moves on every node, with no randomness and no
// dependence on map iteration order, so it can run inside a replicated
// state machine (the group's Raft FSM). It keeps the group balanced: after
// any sequence of operations the number of replicas held by any two members
// differs by at most one.
//
// An Assignment is not safe for concurrent use.
type Assignment struct {
	members    []string            // sorted
	held       map[string][]string // member → sorted origins it holds
	holder     map[string]string   // origin → member ("" when unassigned)
	unassigned []string            // sorted origins with no holder (no members)
}

// NewAssignment returns an empty assignment: no members, no origins.
func NewAssignment() *Assignment {
	return &Assignment{held: make(map[string][]string), holder: make(map[string]string)}
}

// insertSorted inserts s into the sorted slice xs (no duplicates).
func insertSorted(xs []string, s string) []string {
	i, found := slices.BinarySearch(xs, s)
	if found {
		return xs
	}
	return slices.Insert(xs, i, s)
}

// removeSorted removes s from the sorted slice xs.
func removeSorted(xs []string, s string) []string {
	i, found := slices.BinarySearch(xs, s)
	if !found {
		return xs
	}
	return slices.Delete(xs, i, i+1)
}

// leastLoaded returns the member holding the fewest replicas, the smallest
// id among ties, skipping skip. It returns "" when there is none.
func (a *Assignment) leastLoaded(skip string) string {
	best, bestN := "", -1
	for _, m := range a.members {
		if m == skip {
			continue
		}
		if n := len(a.held[m]); bestN < 0 || n < bestN {
			best, bestN = m, n
		}
	}
	return best
}

// mostLoaded returns the member holding the most replicas, the smallest id
// among ties. It returns "" when there are no members.
func (a *Assignment) mostLoaded() string {
	best, bestN := "", -1
	for _, m := range a.members {
		if n := len(a.held[m]); n > bestN {
			best, bestN = m, n
		}
	}
	return best
}

// set makes member m (or nobody, m == "") the holder of origin o, which must
// currently have no holder recorded in held/unassigned.
func (a *Assignment) set(o, m string) {
	a.holder[o] = m
	if m == "" {
		a.unassigned = insertSorted(a.unassigned, o)
		return
	}
	a.held[m] = insertSorted(a.held[m], o)
}

// unset forgets the holder of o in held/unassigned (not in holder).
func (a *Assignment) unset(o string) {
	m := a.holder[o]
	if m == "" {
		a.unassigned = removeSorted(a.unassigned, o)
		return
	}
	a.held[m] = removeSorted(a.held[m], o)
}

// move transfers origin o to member to and returns the Move.
func (a *Assignment) move(o, to string) Move {
	from := a.holder[o]
	a.unset(o)
	a.set(o, to)
	return Move{Origin: o, From: from, To: to}
}

// handoverOrder returns the origins of donor sorted by the order in which
// the donor gives them to newcomer: a hash of origin and newcomer, then the
// origin. The paper lets each member "randomly offload" replicas (G-HBA
// §2.4); this pseudo-random but deterministic order spreads the hand-over
// over the origin space the same way on every node.
func handoverOrder(origins []string, newcomer string) []string {
	type ranked struct {
		h uint64
		o string
	}
	rs := make([]ranked, len(origins))
	buf := make([]byte, 0, 64)
	for i, o := range origins {
		buf = append(append(append(buf[:0], o...), 0), newcomer...)
		rs[i] = ranked{HashBytes(HashXX, buf).h1, o}
	}
	slices.SortFunc(rs, func(x, y ranked) int {
		if x.h != y.h {
			return cmp.Compare(x.h, y.h)
		}
		return strings.Compare(x.o, y.o)
	})
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.o
	}
	return out
}

// firstInHandover returns handoverOrder(origins, newcomer)[0] without
// sorting; origins must not be empty.
func firstInHandover(origins []string, newcomer string) string {
	best, bestH := "", uint64(0)
	buf := make([]byte, 0, 64)
	for i, o := range origins {
		buf = append(append(append(buf[:0], o...), 0), newcomer...)
		h := HashBytes(HashXX, buf).h1
		if i == 0 || h < bestH || h == bestH && o < best {
			best, bestH = o, h
		}
	}
	return best
}

// AddMember adds member m to the group and performs the light-weight
// migration of G-HBA §2.4: with T replicas and M' members before the join,
// each existing member hands the newcomer about
// current − T/(M'+1) = current − (N − M')/(M'+1) of its replicas, just
// enough for every member to end with ⌊T/(M'+1)⌋ or ⌈T/(M'+1)⌉. The
// newcomer receives ⌊T/(M'+1)⌋ replicas, the fewest that keep the group
// balanced (plus any replicas that had no holder). The members that keep
// the larger share are the most loaded ones, ties broken by id. It returns
// the moves in a deterministic order (by donor id, then hand-over order);
// adding an existing member does nothing and returns nil.
func (a *Assignment) AddMember(m string) []Move {
	if _, ok := a.held[m]; ok {
		return nil
	}
	donors := slices.Clone(a.members)
	a.members = insertSorted(a.members, m)
	a.held[m] = nil
	var moves []Move
	for _, o := range slices.Clone(a.unassigned) {
		moves = append(moves, a.move(o, m))
	}
	if len(donors) == 0 {
		return moves
	}
	total := len(a.holder)
	k := len(a.members)
	q, r := total/k, total%k
	// The r donors with the most replicas (ties: smaller id) keep q+1, the
	// others keep q; the newcomer ends with q.
	order := slices.Clone(donors)
	sort.SliceStable(order, func(i, j int) bool {
		return len(a.held[order[i]]) > len(a.held[order[j]])
	})
	keep := make(map[string]int, len(order))
	for i, d := range order {
		keep[d] = q
		if i < r {
			keep[d] = q + 1
		}
	}
	for _, d := range donors {
		give := len(a.held[d]) - keep[d]
		if give <= 0 {
			continue
		}
		for _, o := range handoverOrder(a.held[d], m)[:give] {
			moves = append(moves, a.move(o, m))
		}
	}
	return moves
}

// RemoveMember removes member m from the group: each replica it held goes,
// in origin order, to the member holding the fewest replicas (ties: smaller
// id), which keeps the group balanced (G-HBA §2.4, "a similar process but in
// a reverse direction"). When m was the last member its replicas become
// unassigned (moves with an empty To) until a member joins. Removing an
// unknown member does nothing and returns nil.
func (a *Assignment) RemoveMember(m string) []Move {
	origins, ok := a.held[m]
	if !ok {
		return nil
	}
	a.members = removeSorted(a.members, m)
	delete(a.held, m)
	moves := make([]Move, 0, len(origins))
	for _, o := range origins {
		to := a.leastLoaded("")
		a.holder[o] = to
		if to == "" {
			a.unassigned = insertSorted(a.unassigned, o)
		} else {
			a.held[to] = insertSorted(a.held[to], o)
		}
		moves = append(moves, Move{Origin: o, From: m, To: to})
	}
	return moves
}

// AddOrigin records a replica of origin o (a node of another group) and
// returns its holder: the member holding the fewest replicas, ties broken by
// the smaller id. An origin already present keeps its holder. With no
// members the origin stays unassigned and AddOrigin returns "".
func (a *Assignment) AddOrigin(o string) string {
	if h, ok := a.holder[o]; ok {
		return h
	}
	h := a.leastLoaded("")
	a.set(o, h)
	return h
}

// RemoveOrigin forgets origin o and returns the member that held it; false
// when o was unknown. To stay balanced it may also move one replica (from
// the most loaded member to the one that lost o); RemoveOrigin does not
// report that move, so a caller that transfers filters must use
// RemoveOriginMoves instead.
func (a *Assignment) RemoveOrigin(o string) (string, bool) {
	h, _, ok := a.RemoveOriginMoves(o)
	return h, ok
}

// RemoveOriginMoves is RemoveOrigin that also returns the rebalancing moves
// (at most one): when the former holder would hold two replicas fewer than
// the most loaded member, that member hands it one replica, the first in
// hand-over order.
func (a *Assignment) RemoveOriginMoves(o string) (string, []Move, bool) {
	h, ok := a.holder[o]
	if !ok {
		return "", nil, false
	}
	a.unset(o)
	delete(a.holder, o)
	if h == "" {
		return "", nil, true
	}
	donor := a.mostLoaded()
	if len(a.held[donor])-len(a.held[h]) <= 1 {
		return h, nil, true
	}
	return h, []Move{a.move(firstInHandover(a.held[donor], h), h)}, true
}

// HolderOf returns the member holding origin o's replica; false when o is
// unknown or has no holder (the group has no members).
func (a *Assignment) HolderOf(o string) (string, bool) {
	h := a.holder[o]
	return h, h != ""
}

// Held returns the origins whose replicas member m holds, sorted.
func (a *Assignment) Held(m string) []string { return slices.Clone(a.held[m]) }

// Load returns the number of replicas member m holds.
func (a *Assignment) Load(m string) int { return len(a.held[m]) }

// Members returns the group's members, sorted.
func (a *Assignment) Members() []string { return slices.Clone(a.members) }

// HasMember reports whether m is a member.
func (a *Assignment) HasMember(m string) bool {
	_, ok := a.held[m]
	return ok
}

// Origins returns every origin, assigned or not, sorted.
func (a *Assignment) Origins() []string {
	out := make([]string, 0, len(a.holder))
	for o := range a.holder {
		out = append(out, o)
	}
	slices.Sort(out)
	return out
}

// Len returns the number of origins.
func (a *Assignment) Len() int { return len(a.holder) }

// Balance returns the smallest and largest number of replicas held by a
// member; (0, 0) without members.
func (a *Assignment) Balance() (min, max int) {
	for i, m := range a.members {
		n := len(a.held[m])
		if i == 0 || n < min {
			min = n
		}
		if n > max {
			max = n
		}
	}
	return min, max
}

// Clone returns an independent deep copy.
func (a *Assignment) Clone() *Assignment {
	c := &Assignment{
		members:    slices.Clone(a.members),
		held:       make(map[string][]string, len(a.held)),
		holder:     make(map[string]string, len(a.holder)),
		unassigned: slices.Clone(a.unassigned),
	}
	for m, os := range a.held {
		c.held[m] = slices.Clone(os)
	}
	for o, h := range a.holder {
		c.holder[o] = h
	}
	return c
}

// HashHolder is the hash-placement baseline G-HBA §2.3 argues against:
// members[hash(origin) mod len(members)], with the xxHash of HashPath. When
// the member list changes most origins change holder (G-HBA Fig. 5); compare
// with Assignment's light-weight migration. Pass members sorted for a result
// that does not depend on the caller's order. It returns "" for no members.
func HashHolder(origin string, members []string) string {
	if len(members) == 0 {
		return ""
	}
	return members[HashPath(HashXX, origin).h1%uint64(len(members))]
}
