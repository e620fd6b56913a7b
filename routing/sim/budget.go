package sim

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/bits"
	"slices"

	"github.com/cespare/xxhash/v2"

	"github.com/ghba/ghba/routing"
	"github.com/ghba/ghba/routing/workload"
)

// Replicas by memory budget.
//
// G-HBA (§2.2) stores on each server only its segment: about (N−M')/M'
// replicas of the local filters of servers outside its group, which the
// group's members hold between them exactly once so that the group's L3
// multicast sees every filter of the system (§2.1, §2.3). HBA stores all N−1
// replicas on every server. The memory-budget policy spans the two: a
// server holds its segment in any case, and its memory budget B (bytes of
// L2 replicas per server, segment included; GHBAConfig.MemoryBudget) buys
// further replicas, kept while the replicas' total bytes stay ≤ B, in this
// order (ExtraOrder):
//
//  1. the local filters of its group-mates, all of them, sorted by id;
//  2. the other servers outside its group (those not in its segment), by
//     RendezvousScore(holder, origin), highest first, so that for every
//     origin the servers that hold an extra replica of it are an even,
//     pseudo-random share of all servers.
//
// A replica's size is its bit array: the local filters' Geometry.M/8 bytes
// (ReplicaBytes). Budget 0 is G-HBA exactly; a budget of N−1 replicas is
// HBA's L2 (every server holds every other server's filter, and L3 resolves
// only what a multiple hit or a stale replica leaves to it).
//
// Extra replicas live in L2 only: L2 probes the segment replicas, the
// extras and the server's own live local filter together under the
// unique-hit rule (segment Bloom filter array, G-HBA §2.2). L3 is
// unchanged: every member answers from its segment and local filter, so
// that each filter of the system is counted once across the group. An
// extra replica is kept fresh like a segment replica (G-HBA §2.3, "Updating
// Replica"): the owner's propagation, past the threshold, reaches every
// holder, one message each.

// RendezvousScore ranks origin among the extra replicas holder may take:
// xxHash-64 of holder, a zero byte and origin. Highest first; ties
// (practically absent) break by origin id. The server's budget policy ranks
// with the same hash, so that the simulator places extras where a real
// cluster does.
func RendezvousScore(holder, origin string) uint64 {
	return xxhash.Sum64String(holder + "\x00" + origin)
}

// ExtraOrder returns the origins holder adds beyond its segment, in the
// order a growing memory budget admits them: its group-mates (mates, holder
// itself skipped) sorted by id, then every origin of outside (the servers
// outside its group) that segment does not report as held, by
// RendezvousScore(holder, origin) descending. A budget that allows r
// replicas in all gives the first r − |segment| of them.
func ExtraOrder(holder string, mates, outside []string, segment func(origin string) bool) []string {
	out := make([]string, 0, len(mates)+len(outside))
	for _, o := range mates {
		if o != holder {
			out = append(out, o)
		}
	}
	slices.Sort(out)
	type scored struct {
		id    string
		score uint64
	}
	rest := make([]scored, 0, len(outside))
	for _, o := range outside {
		if o != holder && !segment(o) {
			rest = append(rest, scored{o, RendezvousScore(holder, o)})
		}
	}
	slices.SortFunc(rest, func(a, b scored) int {
		if c := cmp.Compare(b.score, a.score); c != 0 {
			return c
		}
		return cmp.Compare(a.id, b.id)
	})
	for _, s := range rest {
		out = append(out, s.id)
	}
	return out
}

// BudgetReplicas is the number of replicas a memory budget of budget bytes
// holds at replicaBytes each (segment included). It is 0 for budget 0.
func BudgetReplicas(budget, replicaBytes int64) int {
	if budget <= 0 || replicaBytes <= 0 {
		return 0
	}
	return int(budget / replicaBytes)
}

// ReplicaBytes is the size of one local-filter replica in a G-HBA
// simulation of servers servers whose trace starts with initialFiles paths
// (InitialFiles): the bit array of a filter sized, as every simulation
// sizes its local filters, for the mean initial files per server at
// bitsPerFile bits each (0 means 8), in bytes.
func ReplicaBytes(initialFiles, servers int, bitsPerFile float64) (int64, error) {
	if servers < 1 {
		return 0, fmt.Errorf("sim: %d servers: %w", servers, ErrConfig)
	}
	if bitsPerFile == 0 {
		bitsPerFile = 8
	}
	capacity := max(1, (initialFiles+servers-1)/servers) // cluster.capacity
	g, err := routing.NewGeometry(capacity, bitsPerFile, 0, routing.HashXX)
	if err != nil {
		return 0, fmt.Errorf("sim: replica geometry: %w", ErrConfig)
	}
	return int64(g.M / 8), nil
}

// SegmentReplicas returns the fewest and the most segment replicas a
// server holds when n servers form Groups(n, m): a group of g members
// shares the n−g outside servers evenly (routing.Assignment), ⌊(n−g)/g⌋ to
// ⌈(n−g)/g⌉ each.
func SegmentReplicas(n, m int) (lo, hi int) {
	gs := Groups(n, m)
	if len(gs) == 0 {
		return 0, 0
	}
	lo = n
	for _, g := range gs {
		k := len(g)
		lo = min(lo, (n-k)/k)
		hi = max(hi, (n-k+k-1)/k)
	}
	return lo, hi
}

var errInitialDone = errors.New("initial population read")

// InitialFiles streams src up to its first timed record and returns the
// number of distinct paths of the initial population, the count that sizes
// every local filter (ReplicaBytes). For a generated source it costs the
// generation of the namespace only.
func InitialFiles(ctx context.Context, src Source) (int, error) {
	seen := make(map[string]struct{})
	err := src(ctx, func(r workload.Record) error {
		if r.Op != workload.OpExists {
			return errInitialDone
		}
		seen[r.Path] = struct{}{}
		return nil
	})
	if err != nil && !errors.Is(err, errInitialDone) {
		return 0, err
	}
	return len(seen), nil
}

// setupExtras gives every server the extra replicas m.cfg.MemoryBudget
// allows beyond the segment setup assigned it (m.seg, m.held): it sets m.l2
// and m.extras, adds the extras to m.held and their update messages (one per
// extra holder and propagation) to m.updMsgs.
func (m *ghbaModel) setupExtras(c *cluster) error {
	m.replicaBytes = int64(m.segGeo.M / 8)
	allowed := BudgetReplicas(m.cfg.MemoryBudget, m.replicaBytes)
	m.l2 = make([]serverSet, c.n)
	m.extras = make([]int, c.n)
	for s := range c.n {
		m.l2[s] = m.seg[s]
		room := allowed - m.held[s]
		if room <= 0 {
			continue
		}
		g := m.groupOf[s]
		mates := make([]string, 0, len(m.groups[g]))
		for _, o := range m.groups[g] {
			mates = append(mates, c.ids[o])
		}
		outside := make([]string, 0, c.n-len(mates))
		for o := range c.n {
			if m.groupOf[o] != g {
				outside = append(outside, c.ids[o])
			}
		}
		seg := m.seg[s]
		order := ExtraOrder(c.ids[s], mates, outside, func(id string) bool { return seg.has(m.index[id]) })
		order = order[:min(room, len(order))]
		if len(order) == 0 {
			continue
		}
		m.l2[s] = slices.Clone(seg)
		for _, id := range order {
			o := m.index[id]
			m.l2[s].add(o)
			m.updMsgs[o]++
		}
		m.extras[s] = len(order)
		m.held[s] += len(order)
	}
	return nil
}

// l2Probe is server s's L2, the segment Bloom filter array of G-HBA §2.2
// widened by the extra replicas of its memory budget: segment replicas,
// extras and its own live local filter under the unique-hit rule. Without
// extras it is segProbe.
func (m *ghbaModel) l2Probe(s int, k routing.Key) routing.Result {
	return m.arrayProbe(s, m.l2[s], k)
}

// extraStats fills the budget fields of a result.
func (m *ghbaModel) extraStats(r *GHBAResult) {
	r.MemoryBudget = m.cfg.MemoryBudget
	r.ReplicaBytes = m.replicaBytes
	var held, extra int
	for s, h := range m.held {
		held += h
		extra += m.extras[s]
	}
	r.ReplicaMemoryMean = float64(held) * float64(m.replicaBytes) / float64(m.n)
	r.ExtraReplicasMean = float64(extra) / float64(m.n)
}

// serverSet is a set of servers 0..n−1 as a bitset.
type serverSet []uint64

func newServerSet(n int) serverSet { return make(serverSet, (n+63)/64) }

func (s serverSet) add(i int)      { s[i>>6] |= 1 << (i & 63) }
func (s serverSet) has(i int) bool { return s[i>>6]>>(i&63)&1 != 0 }

// union adds every member of o to s.
func (s serverSet) union(o serverSet) {
	for i := range s {
		s[i] |= o[i]
	}
}

// intersect returns the size of s ∩ o and its smallest member (−1 if empty).
func (s serverSet) intersect(o serverSet) (n, first int) {
	first = -1
	for i, w := range s {
		w &= o[i]
		if w == 0 {
			continue
		}
		if first < 0 {
			first = i<<6 + bits.TrailingZeros64(w)
		}
		n += bits.OnesCount64(w)
	}
	return n, first
}
