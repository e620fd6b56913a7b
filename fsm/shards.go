package fsm

import (
	"cmp"
	"maps"
	"slices"
)

// placer changes the shard placement of a mutable state (a clone), keeping
// the replica and ownership counts of every member in step with s.shards.
// Every choice it makes is a function of the state alone: ties are broken
// by id, maps are read in sorted order.
type placer struct {
	s      *state
	r      int             // R
	active []string        // the active members, sorted
	isAct  map[string]bool // set of active
	load   map[string]int  // replicas hosted, per member
	owned  map[string]int  // shards owned, per member
}

// placer returns a placer for s; s.members and s.asg must be up to date.
func (s *state) placer() *placer {
	p := &placer{
		s:      s,
		r:      s.cfg.ReplicationFactor(),
		active: s.asg.Members(),
		isAct:  make(map[string]bool),
		load:   make(map[string]int),
		owned:  make(map[string]int),
	}
	for _, id := range p.active {
		p.isAct[id] = true
	}
	for _, sh := range s.shards {
		p.count(sh, 1)
	}
	return p
}

// count adds d times sh's replicas and owner to the counts.
func (p *placer) count(sh Shard, d int) {
	for _, m := range sh.Replicas {
		p.load[m] += d
	}
	if sh.Owner != "" {
		p.owned[sh.Owner] += d
	}
}

// set makes sh the placement of shard sh.ID (new or not). No replicas are
// stored as nil, so that equal states encode alike.
func (p *placer) set(sh Shard) {
	if len(sh.Replicas) == 0 {
		sh.Replicas = nil
	}
	if old, ok := p.s.shards[sh.ID]; ok {
		p.count(old, -1)
	}
	p.count(sh, 1)
	p.s.shards[sh.ID] = sh
}

// sortedIDs returns the ids of the shards, sorted.
func (p *placer) sortedIDs() []string { return slices.Sorted(maps.Keys(p.s.shards)) }

// canHost reports whether member id may keep a replica: it is active, or
// failed and not yet repaired (a failed member never gains one).
func (p *placer) canHost(id string) bool {
	m, ok := p.s.members[id]
	return ok && (m.Status == StatusActive || m.Status == StatusFailed)
}

// target is the number of replicas sh should have: min(R, the active
// members plus the failed members among its replicas).
func (p *placer) target(sh Shard) int {
	n := len(p.active)
	for _, m := range sh.Replicas {
		if !p.isAct[m] {
			n++
		}
	}
	return min(p.r, n)
}

// byLoad orders members by replicas hosted, then id.
func (p *placer) byLoad(a, b string) int {
	return cmp.Or(cmp.Compare(p.load[a], p.load[b]), cmp.Compare(a, b))
}

// fill returns sh with its replicas made valid and complete: replicas that
// may not host dropped, then the active members hosting the fewest
// replicas (ties by id) added up to target; an owner that is not a replica
// is replaced by pickOwner.
func (p *placer) fill(sh Shard) Shard {
	reps := slices.DeleteFunc(slices.Clone(sh.Replicas), func(m string) bool { return !p.canHost(m) })
	if !slices.Contains(reps, sh.Owner) {
		sh.Owner = ""
	}
	sh.Replicas = reps
	if need := p.target(sh) - len(reps); need > 0 {
		var cand []string
		for _, m := range p.active {
			if !slices.Contains(reps, m) {
				cand = append(cand, m)
			}
		}
		slices.SortFunc(cand, p.byLoad)
		reps = append(reps, cand[:min(need, len(cand))]...)
	}
	slices.Sort(reps)
	sh.Replicas = reps
	if sh.Owner == "" && len(reps) > 0 {
		sh.Owner = p.pickOwner(reps)
	}
	return sh
}

// pickOwner returns the replica that should own a shard that lost its
// owner: an active one if any, owning the fewest shards, ties by id.
func (p *placer) pickOwner(reps []string) string {
	return slices.MinFunc(reps, func(a, b string) int {
		if p.isAct[a] != p.isAct[b] {
			if p.isAct[a] {
				return -1
			}
			return 1
		}
		return cmp.Or(cmp.Compare(p.owned[a], p.owned[b]), cmp.Compare(a, b))
	})
}

// addShard adds shard id, owned by the active member owner: the owner and
// the R−1 active members hosting the fewest replicas. A new shard records
// creator as its Creator; a shard that is in the group without an owner
// (an orphan) is adopted and keeps its Creator.
func (p *placer) addShard(id, owner, creator string) {
	sh, ok := p.s.shards[id]
	if !ok {
		sh.Creator = creator
	}
	sh.ID, sh.Owner = id, owner
	if !sh.hosts(owner) {
		sh.Replicas = append(slices.Clone(sh.Replicas), owner)
		slices.Sort(sh.Replicas)
	}
	p.set(p.fill(sh))
}

// depart takes member id out of every shard: its replicas are replaced
// (fill), and each shard it owned gets the replica that owns the fewest.
// Shards are handled in id order, each seeing the counts the previous ones
// left.
func (p *placer) depart(id string) {
	for _, sid := range p.sortedIDs() {
		sh := p.s.shards[sid]
		if !sh.hosts(id) && sh.Owner != id {
			continue
		}
		sh.Replicas = slices.DeleteFunc(slices.Clone(sh.Replicas), func(m string) bool { return m == id })
		if sh.Owner == id {
			sh.Owner = ""
		}
		p.set(p.fill(sh))
	}
}

// hostsOrOwns reports whether member id hosts or owns any shard.
func (s *state) hostsOrOwns(id string) bool {
	for _, sh := range s.shards {
		if sh.Owner == id || sh.hosts(id) {
			return true
		}
	}
	return false
}

// balance restores the placement invariants after the members changed:
//
//  1. every shard gets valid, complete replicas and an owner (fill);
//  2. ownership: while the active member owning the most shards owns two
//     more than the one owning the fewest, the first gives the second one
//     shard (see moveOwner);
//  3. replicas: while the most loaded active member hosts two more
//     replicas than the least loaded, one replica moves from a member
//     hosting more to one hosting fewer (see moveReplica). Failed members
//     keep theirs.
//
// Every step strictly lowers a sum of squared counts, so balance ends; step
// 3 keeps the ownership counts within one, and always finds a move while
// the loads differ by two (see moveReplica).
func (p *placer) balance() {
	ids := p.sortedIDs()
	for _, id := range ids {
		if sh := p.fill(p.s.shards[id]); !sh.equal(p.s.shards[id]) {
			p.set(sh)
		}
	}
	for p.moveOwner(ids) {
	}
	for p.moveReplica(ids) {
	}
}

// moveOwner moves the ownership of one shard from the active member owning
// the most to the one owning the fewest (ties by id), if they differ by
// two or more. It prefers the shard named after the recipient, then one
// the recipient hosts, then the smallest id; a recipient that does not host
// the shard takes the donor's replica. It reports whether it moved one.
func (p *placer) moveOwner(ids []string) bool {
	if len(p.active) < 2 {
		return false
	}
	byOwned := func(a, b string) int { return cmp.Or(cmp.Compare(p.owned[a], p.owned[b]), cmp.Compare(a, b)) }
	to := slices.MinFunc(p.active, byOwned)
	from := slices.MaxFunc(p.active, func(a, b string) int {
		return cmp.Or(cmp.Compare(p.owned[a], p.owned[b]), cmp.Compare(b, a)) // ties: the smallest id
	})
	if p.owned[from]-p.owned[to] < 2 {
		return false
	}
	pick, rank := "", 3
	for _, id := range ids {
		sh := p.s.shards[id]
		if sh.Owner != from {
			continue
		}
		r := 2
		switch {
		case id == to:
			r = 0
		case sh.hosts(to):
			r = 1
		}
		if r < rank {
			pick, rank = id, r
		}
	}
	p.give(pick, from, to)
	return true
}

// give makes member to the owner of shard id, owned by from; if to does not
// host it, it takes from's replica.
func (p *placer) give(id, from, to string) {
	sh := p.s.shards[id]
	sh.Owner = to
	if !sh.hosts(to) {
		sh.Replicas = replace(sh.Replicas, from, to)
	}
	p.set(sh)
}

// moveReplica moves one replica from an active member (from) to another
// hosting at least two fewer (to). The pairs are tried the most loaded
// giver first, then the least loaded taker (ties by id), the smallest
// shard id first:
//
//  1. a replica of a shard from hosts but does not own, and to does not
//     host, moves;
//  2. failing that for every pair, a shard from owns and to does not host
//     moves with its ownership — if from owns more shards than to, alone;
//     otherwise with a shard to owns and from hosts given to from in
//     exchange, so the ownership counts stay within one.
//
// One of the two always applies to the first pair: were neither possible,
// from would own every shard it hosts and to does not (d ≥ 2 + t of them,
// t being the shards to hosts and from does not), to would own only
// shards among those t, and so from would own at least two more than to,
// which ownership balancing rules out. It reports whether it moved one.
func (p *placer) moveReplica(ids []string) bool {
	asc := slices.SortedFunc(slices.Values(p.active), p.byLoad)
	desc := slices.SortedFunc(slices.Values(p.active), func(a, b string) int {
		return cmp.Or(cmp.Compare(p.load[b], p.load[a]), cmp.Compare(a, b))
	})
	type pair struct{ from, to string }
	var pairs []pair
	for _, from := range desc {
		for _, to := range asc {
			if p.load[from]-p.load[to] < 2 {
				break
			}
			pairs = append(pairs, pair{from, to})
		}
	}
	first := func(keep func(Shard) bool) string {
		for _, id := range ids {
			if keep(p.s.shards[id]) {
				return id
			}
		}
		return ""
	}
	for _, pr := range pairs {
		if id := first(func(sh Shard) bool { return sh.Owner != pr.from && sh.hosts(pr.from) && !sh.hosts(pr.to) }); id != "" {
			sh := p.s.shards[id]
			sh.Replicas = replace(sh.Replicas, pr.from, pr.to)
			p.set(sh)
			return true
		}
	}
	for _, pr := range pairs {
		id := first(func(sh Shard) bool { return sh.Owner == pr.from && !sh.hosts(pr.to) })
		if id == "" {
			continue
		}
		if p.owned[pr.from] > p.owned[pr.to] {
			p.give(id, pr.from, pr.to)
			return true
		}
		if back := first(func(sh Shard) bool { return sh.Owner == pr.to && sh.hosts(pr.from) }); back != "" {
			p.give(id, pr.from, pr.to)
			p.give(back, pr.to, pr.from)
			return true
		}
	}
	return false
}

// replace returns a sorted copy of reps with from replaced by to.
func replace(reps []string, from, to string) []string {
	out := slices.Clone(reps)
	out[slices.Index(out, from)] = to
	slices.Sort(out)
	return out
}

// diffShards returns the changes from shards a to shards b, sorted by id;
// the changes share no memory with a or b.
func diffShards(a, b map[string]Shard) []ShardChange {
	ids := slices.Sorted(maps.Keys(a))
	for id := range b {
		if _, ok := a[id]; !ok {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	var out []ShardChange
	for _, id := range ids {
		before, after := a[id], b[id]
		if !before.equal(after) {
			out = append(out, ShardChange{ID: id, Before: before.clone(), After: after.clone()})
		}
	}
	return out
}

// cloneChanges returns a copy of cs that shares no memory with it.
func cloneChanges(cs []ShardChange) []ShardChange {
	if cs == nil {
		return nil
	}
	out := make([]ShardChange, len(cs))
	for i, c := range cs {
		out[i] = ShardChange{ID: c.ID, Before: c.Before.clone(), After: c.After.clone()}
	}
	return out
}

// replicaMoves counts the replicas the changes moved from one member to
// another: per shard present before and after, the fewer of the replicas
// added and removed. A new shard's placement, a replica added because the
// group grew and one dropped without replacement are not moves.
func replicaMoves(cs []ShardChange) uint64 {
	n := uint64(0)
	for _, c := range cs {
		if c.Before.ID != "" && c.After.ID != "" {
			n += uint64(min(len(c.Added()), len(c.Removed())))
		}
	}
	return n
}

// movedOut returns, for the changes that took shards out of the group,
// each former owner's shards (nil if none left).
func movedOut(cs []ShardChange) map[string][]string {
	var out map[string][]string
	for _, c := range cs {
		if c.After.ID == "" {
			if out == nil {
				out = make(map[string][]string)
			}
			out[c.Before.Owner] = append(out[c.Before.Owner], c.ID)
		}
	}
	return out
}
