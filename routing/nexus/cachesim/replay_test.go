package cachesim

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/ghba/ghba/routing/nexus"
	"github.com/ghba/ghba/routing/workload"
)

// TestPolicyHits: hits of every policy on hand-made single-client
// sequences. The cache holds round(fraction × distinct paths) entries.
func TestPolicyHits(t *testing.T) {
	tests := []struct {
		name     string
		seq      string
		spec     Spec
		hits     int64
		prefetch int64 // prefetched entries
		used     int64
	}{
		{"lru fits", "ABCABC", Spec{Algorithm: LRU, Fraction: 1}, 3, 0, 0},
		{"lru cyclic over capacity", "ABCABC", Spec{Algorithm: LRU, Fraction: 2.0 / 3}, 0, 0, 0},
		{"lru single entry", "AABBA", Spec{Algorithm: LRU, Fraction: 0.5}, 2, 0, 0},
		{"mru keeps the old", "ABCABC", Spec{Algorithm: MRU, Fraction: 2.0 / 3}, 2, 0, 0},
		{"lfu keeps the frequent", "AABCA", Spec{Algorithm: LFU, Fraction: 2.0 / 3}, 2, 0, 0},
		{"lru loses the frequent", "AABCA", Spec{Algorithm: LRU, Fraction: 2.0 / 3}, 1, 0, 0},
		{"opt bypasses the farthest", "ABCABC", Spec{Algorithm: OPT, Fraction: 2.0 / 3}, 2, 0, 0},
		{"opt evicts the farthest", "ABCBA", Spec{Algorithm: OPT, Fraction: 2.0 / 3}, 2, 0, 0},
		{"lru cyclic 4 over 2", "ABCDABCD", Spec{Algorithm: LRU, Fraction: 0.5}, 0, 0, 0},
		{"first successor prefetches", "ABCDABCD", Spec{Algorithm: FirstSuccessor, Fraction: 0.5}, 2, 2, 2},
		{"last successor prefetches", "ABCDABCD", Spec{Algorithm: LastSuccessor, Fraction: 0.5}, 2, 2, 2},
		{"noah prefetches", "ABCDABCD", Spec{Algorithm: Noah, Fraction: 0.5}, 2, 2, 2},
		{"recent popularity needs j", "ABCDABCD", Spec{Algorithm: RecentPopularity, Fraction: 0.5}, 0, 0, 0},
		{"pg1", "ABCDABCD", Spec{Algorithm: PG, Group: 1, Fraction: 0.5}, 2, 2, 2},
		{"pg2", "ABCDABCD", Spec{Algorithm: PG, Group: 2, Fraction: 0.75}, 2, 4, 2},
		{"nexus group 1", "ABCDABCD", Spec{Algorithm: Nexus, Group: 1, Fraction: 0.5}, 2, 2, 2},
		// A misses: B, C prefetched and hit; D misses: A, B prefetched.
		{"nexus group 2", "ABCDABCD", Spec{Algorithm: Nexus, Group: 2, Fraction: 0.75}, 2, 4, 2},
		// "A?B" (§4.4.1): B always follows A at distance 2, with fresh
		// paths in between; a 3-entry cache misses A every round. From
		// round 3 on, A→B (9 + 9) outweighs A→? (10) and Nexus prefetches
		// B; PG only sees A's immediate successors.
		{"nexus sees past the immediate successor", "AcBdeAfBghAiBjkAlBmn", Spec{Algorithm: Nexus, Group: 1, Window: 2, Fraction: 3.0 / 14}, 2, 4, 2},
		{"pg does not", "AcBdeAfBghAiBjkAlBmn", Spec{Algorithm: PG, Group: 1, Fraction: 3.0 / 14}, 0, 6, 0},
		{"lru neither", "AcBdeAfBghAiBjkAlBmn", Spec{Algorithm: LRU, Fraction: 3.0 / 14}, 0, 0, 0},
		{"single-entry cache never prefetches", "ABCDABCD", Spec{Algorithm: FirstSuccessor, Fraction: 0.25}, 0, 0, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := runOne(t, letters(t, tc.seq), Options{}, tc.spec)
			if r.Hits != tc.hits || r.Prefetched != tc.prefetch || r.PrefetchUsed != tc.used {
				t.Errorf("%s on %s: %d hits, %d prefetched, %d used; want %d, %d, %d",
					tc.spec.Name(), tc.seq, r.Hits, r.Prefetched, r.PrefetchUsed, tc.hits, tc.prefetch, tc.used)
			}
			if r.Accesses != int64(len(tc.seq)) {
				t.Errorf("%d accesses", r.Accesses)
			}
			if r.PrefetchUsed+r.PrefetchWasted > r.Prefetched {
				t.Errorf("used %d + wasted %d > prefetched %d", r.PrefetchUsed, r.PrefetchWasted, r.Prefetched)
			}
		})
	}
}

// TestConsistencyAndResponseTime works the response-time model by hand on
// a write that invalidates another client's copy (Fig. 16).
func TestConsistencyAndResponseTime(t *testing.T) {
	tr := FromRecords(parseTrace(t, "0:x 1:x 1:create:x 0:x"))
	opt := Options{ServerFraction: 1, Latency: Latency{Memory: time.Microsecond, Network: 100 * time.Microsecond,
		Disk: time.Millisecond, Bandwidth: 8e9, MetadataBytes: 1000}} // 1 µs per item
	tests := []struct {
		spec          Spec
		hits          int64
		invalidations int64
		mean          time.Duration
	}{
		// 0:x miss, disk: 200 + 1 + 1000 µs; 1:x miss, server memory:
		// 200 + 1 + 1; the create hits but goes to the server (202) and
		// invalidates client 0's copy (+200); 0:x misses again (202).
		{Spec{Algorithm: LRU, Fraction: 1}, 1, 1, (1201 + 202 + 402 + 202) * time.Microsecond / 4},
		// Without write-invalidate the last access hits the stale copy.
		{Spec{Algorithm: LRU, Fraction: 1, NoConsistency: true}, 2, 0, (1201 + 202 + 202 + 1) * time.Microsecond / 4},
		{Spec{Algorithm: OPT, Fraction: 1}, 1, 1, (1201 + 202 + 402 + 202) * time.Microsecond / 4},
	}
	for _, tc := range tests {
		r := runOne(t, tr, opt, tc.spec)
		if r.Hits != tc.hits || r.Invalidations != tc.invalidations || r.MeanResponse() != tc.mean {
			t.Errorf("%+v: %d hits, %d invalidations, mean %v; want %d, %d, %v",
				tc.spec, r.Hits, r.Invalidations, r.MeanResponse(), tc.hits, tc.invalidations, tc.mean)
		}
		if want := 2 * float64(tc.invalidations) / 4; r.ConsistencyMessages() != want {
			t.Errorf("%d consistency messages per access, want %v", r.Invalidations, want)
		}
		if r.ServerRequests != 4-tc.hits+1 || r.DiskReads != 1 {
			t.Errorf("%d server requests, %d disk reads", r.ServerRequests, r.DiskReads)
		}
	}
}

// TestAsyncPrefetch: the prefetched item's disk read delays the demand
// access unless AsyncPrefetch.
func TestAsyncPrefetch(t *testing.T) {
	tr := letters(t, "ABCDABCD")
	lat := Latency{Network: 100 * time.Microsecond, Disk: time.Millisecond, Bandwidth: 1e9}
	spec := Spec{Algorithm: FirstSuccessor, Fraction: 0.5}
	// Tiny server cache (1 of 4 paths): every item is a disk read.
	sync := runOne(t, tr, Options{ServerFraction: 0.25, Latency: lat}, spec)
	async := runOne(t, tr, Options{ServerFraction: 0.25, Latency: lat, AsyncPrefetch: true}, spec)
	if sync.Prefetched != 2 || sync.DiskReads != async.DiskReads || sync.Hits != async.Hits {
		t.Fatalf("sync %+v, async %+v", sync, async)
	}
	if d := sync.ResponseNanos - async.ResponseNanos; d != 2*float64(time.Millisecond) {
		t.Errorf("synchronous prefetch costs %v more, want 2 disk reads", time.Duration(d))
	}
}

// TestRemovals: unlink drops the issuing client's copy; a deleted path is
// not prefetched.
func TestRemovals(t *testing.T) {
	r := runOne(t, FromRecords(parseTrace(t, "0:a 0:unlink:a 0:create:a 0:a")), Options{}, Spec{Algorithm: LRU, Fraction: 1})
	if r.Hits != 2 { // the unlink and the last stat
		t.Errorf("%d hits, want 2", r.Hits)
	}
	r = runOne(t, FromRecords(parseTrace(t, "0:a 0:rename:a>b 0:a")), Options{}, Spec{Algorithm: LRU, Fraction: 1})
	if r.Hits != 1 {
		t.Errorf("rename: %d hits, want 1", r.Hits)
	}
	for _, tc := range []struct {
		trace    string
		prefetch int64
	}{
		// Two entries: A is evicted before it comes back.
		{"0:A 0:B 0:C 1:B 0:D 0:A", 1},        // A's successor B is prefetched
		{"0:A 0:B 0:C 1:unlink:B 0:D 0:A", 0}, // B was deleted meanwhile
		{"0:A 0:B 0:C 1:unlink:B 1:create:B 0:D 0:A", 1},
	} {
		r := runOne(t, FromRecords(parseTrace(t, tc.trace)), Options{}, Spec{Algorithm: FirstSuccessor, Fraction: 0.5})
		if r.Prefetched != tc.prefetch {
			t.Errorf("%s: %d prefetched, want %d", tc.trace, r.Prefetched, tc.prefetch)
		}
	}
}

func TestNextUse(t *testing.T) {
	tr := FromRecords(parseTrace(t, "0:a 1:a 0:b 1:create:a 0:a 0:unlink:a 0:a"))
	n := int64(math.MaxInt64)
	tests := []struct {
		consistency bool
		want        []int64
	}{
		// Client 0's copy of a is invalidated by client 1's create (3)
		// before its next access (4); the unlink (5) removes it.
		{true, []int64{n, 3, n, n, 5, n, n}},
		{false, []int64{4, 3, n, n, 5, n, n}},
	}
	for _, tc := range tests {
		if got := tr.NextUse(tc.consistency); !slices.Equal(got, tc.want) {
			t.Errorf("consistency %v: %v, want %v", tc.consistency, got, tc.want)
		}
	}
}

func TestTrace(t *testing.T) {
	tr := FromRecords(append([]workload.Record{{Op: workload.OpExists, Path: "/z"}},
		parseTrace(t, "0:a 5:b 0:b 5:readdir:a 0:rename:a>c")...))
	if len(tr.Accesses) != 5 || tr.Clients != 2 || tr.WorkingSet != 2 || tr.Paths != 3 ||
		!slices.Equal(tr.ClientWorkingSet, []int{2, 2}) || !slices.Equal(tr.ClientIDs, []int{0, 5}) ||
		tr.Reads != 4 || tr.Writes != 1 {
		t.Errorf("trace %+v", tr)
	}
	if a := tr.Accesses[4]; !a.IsWrite() || !a.Removes() || a.Path2 != 2 || a.Local != 0 {
		t.Errorf("rename access %+v", a)
	}
	if _, err := Load(context.Background(), func(context.Context, func(workload.Record) error) error { return nil }); !errors.Is(err, ErrConfig) {
		t.Errorf("empty trace: %v", err)
	}
	boom := errors.New("boom")
	if _, err := Load(context.Background(), func(context.Context, func(workload.Record) error) error { return boom }); !errors.Is(err, boom) {
		t.Errorf("source error: %v", err)
	}
}

func TestRunErrors(t *testing.T) {
	tr := letters(t, "ABAB")
	for name, tc := range map[string]struct {
		opt  Options
		spec Spec
	}{
		"fraction 0":     {Options{}, Spec{Algorithm: LRU}},
		"fraction 2":     {Options{}, Spec{Algorithm: LRU, Fraction: 2}},
		"pg3":            {Options{}, Spec{Algorithm: PG, Group: 3, Fraction: 0.5}},
		"nexus window":   {Options{}, Spec{Algorithm: Nexus, Window: -1, Fraction: 0.5}},
		"nexus group":    {Options{}, Spec{Algorithm: Nexus, Group: -1, Fraction: 0.5}},
		"algorithm":      {Options{}, Spec{Algorithm: numAlgorithms, Fraction: 0.5}},
		"noah":           {Options{NoahS: -1}, Spec{Algorithm: LRU, Fraction: 0.5}},
		"rp":             {Options{RPJ: 3, RPK: 2}, Spec{Algorithm: LRU, Fraction: 0.5}},
		"server":         {Options{ServerFraction: 2}, Spec{Algorithm: LRU, Fraction: 0.5}},
		"bandwidth":      {Options{Latency: Latency{Bandwidth: -1}}, Spec{Algorithm: LRU, Fraction: 0.5}},
		"graph capacity": {Options{MaxOutEdges: -1}, Spec{Algorithm: Nexus, Fraction: 0.5}},
	} {
		if _, err := Run(context.Background(), tr, tc.opt, []Spec{tc.spec}); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: %v, want ErrConfig", name, err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	big := randomTrace(rand.New(rand.NewPCG(1, 1)), 70000, 4, 50, 0)
	if _, err := Run(ctx, big, Options{}, []Spec{{Algorithm: LRU, Fraction: 0.5}}); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v", err)
	}
}

// randomTrace draws n accesses by the given clients over paths paths,
// skewed so that caches hit; writes is the share of creates and unlinks.
func randomTrace(rng *rand.Rand, n, clients, paths int, writes float64) *Trace {
	b := NewBuilder()
	for i := 0; i < n; i++ {
		p := rng.IntN(paths)
		if rng.IntN(2) == 0 {
			p = rng.IntN(max(1, paths/5))
		}
		r := workload.Record{Time: time.Duration(i + 1), Client: rng.IntN(clients), Op: workload.OpStat,
			Path: fmt.Sprintf("/p%d", p)}
		if rng.Float64() < writes {
			r.Op = workload.OpCreate
			if rng.IntN(2) == 0 {
				r.Op = workload.OpUnlink
			}
		}
		b.Add(r)
	}
	return b.Trace()
}

// refLRU is a straightforward LRU per client (a slice, most recent last)
// with the replay's rules: writes invalidate other clients' copies, unlink
// removes the issuer's.
func refLRU(tr *Trace, fraction float64) int64 {
	caches := make([][]int32, tr.Clients)
	var hits int64
	drop := func(c int, p int32) {
		if i := slices.Index(caches[c], p); i >= 0 {
			caches[c] = slices.Delete(caches[c], i, i+1)
		}
	}
	for _, a := range tr.Accesses {
		c := int(a.Client)
		capacity := max(1, int(math.Round(fraction*float64(tr.ClientWorkingSet[c]))))
		if i := slices.Index(caches[c], a.Path); i >= 0 {
			hits++
			caches[c] = append(slices.Delete(caches[c], i, i+1), a.Path)
		} else {
			if len(caches[c]) >= capacity {
				caches[c] = caches[c][1:]
			}
			caches[c] = append(caches[c], a.Path)
		}
		if a.IsWrite() {
			for o := range caches {
				if o != c {
					drop(o, a.Path)
				}
			}
		}
		if a.Removes() {
			drop(c, a.Path)
		}
	}
	return hits
}

// TestLRUMatchesReference is a property test: on random multi-client
// traces with writes, LRU's hits equal the reference implementation's.
func TestLRUMatchesReference(t *testing.T) {
	for seed := uint64(0); seed < 30; seed++ {
		rng := rand.New(rand.NewPCG(seed, 3))
		tr := randomTrace(rng, 2000, 1+rng.IntN(4), 20+rng.IntN(200), 0.1*rng.Float64())
		for _, f := range []float64{0.05, 0.1, 0.3, 0.5, 1} {
			r := runOne(t, tr, Options{}, Spec{Algorithm: LRU, Fraction: f})
			if want := refLRU(tr, f); r.Hits != want {
				t.Fatalf("seed %d fraction %v: %d hits, reference %d", seed, f, r.Hits, want)
			}
		}
	}
}

// TestOPTBeatsDemandPolicies is a property test: Belady's MIN hits at least
// as often as every policy without prefetching, with and without
// consistency control.
func TestOPTBeatsDemandPolicies(t *testing.T) {
	for seed := uint64(0); seed < 30; seed++ {
		rng := rand.New(rand.NewPCG(seed, 4))
		tr := randomTrace(rng, 1500, 1+rng.IntN(3), 10+rng.IntN(100), 0.1*rng.Float64())
		for _, f := range []float64{0.1, 0.3, 0.5} {
			for _, nc := range []bool{false, true} {
				var specs []Spec
				for _, a := range []Algorithm{OPT, LRU, LFU, MRU} {
					specs = append(specs, Spec{Algorithm: a, Fraction: f, NoConsistency: nc})
				}
				rs, err := Run(context.Background(), tr, Options{}, specs)
				if err != nil {
					t.Fatal(err)
				}
				for _, r := range rs[1:] {
					if r.Hits > rs[0].Hits {
						t.Fatalf("seed %d fraction %v no-consistency %v: %s %d hits > OPT %d",
							seed, f, nc, r.Spec.Name(), r.Hits, rs[0].Hits)
					}
				}
			}
		}
	}
}

// programs is a trace with the structure Nexus exploits (§4.4.1): each
// client repeatedly runs one of a few programs — fixed sequences of paths,
// like a compiler loading its headers — where a step is often followed by
// a varying input file before the next step ("A?B"); noise paths come in
// between, and the clients' streams interleave.
func programs(seed uint64) *Trace {
	rng := rand.New(rand.NewPCG(seed, 5))
	const clients, progs, progLen = 4, 30, 8
	b := NewBuilder()
	type state struct {
		prog, pos int
		input     bool // the next access is an input file
	}
	st := make([]state, clients)
	for i := range st {
		st[i].prog = -1
	}
	for i := 0; i < 40000; i++ {
		c := rng.IntN(clients)
		s := &st[c]
		var path string
		switch {
		case rng.IntN(8) == 0:
			path = fmt.Sprintf("/noise/%d", rng.IntN(5000))
		case s.input:
			path = fmt.Sprintf("/input/%d", rng.IntN(2000))
			s.input = false
		default:
			if s.prog < 0 || s.pos == progLen {
				s.prog, s.pos = rng.IntN(progs), 0
			}
			path = fmt.Sprintf("/prog%d/%d", s.prog, s.pos)
			s.pos++
			s.input = rng.IntN(2) == 0
		}
		b.Add(workload.Record{Time: time.Duration(i + 1), Client: c, Op: workload.OpOpen, Path: path})
	}
	return b.Trace()
}

// TestNexusOnStructuredTrace: on program-like streams, group prefetching
// beats LRU, Nexus beats PG, and client-oriented grouping beats
// server-oriented (§4.5.3, Fig. 10). (OPT stays ahead here: see
// docs/simulation.md for when Nexus beats it.)
func TestNexusOnStructuredTrace(t *testing.T) {
	tr := programs(1)
	specs := []Spec{
		{Algorithm: LRU, Fraction: 0.1},
		{Algorithm: PG, Group: 1, Fraction: 0.1},
		{Algorithm: PG, Group: 2, Fraction: 0.1},
		{Algorithm: Nexus, Fraction: 0.1},
		{Algorithm: Nexus, Fraction: 0.1, Grouping: ServerOriented},
		{Algorithm: OPT, Fraction: 0.1},
	}
	rs, err := Run(context.Background(), tr, Options{}, specs)
	if err != nil {
		t.Fatal(err)
	}
	hit := map[string]float64{}
	for _, r := range rs {
		key := r.Spec.Name()
		if r.Spec.Grouping == ServerOriented {
			key += "-server"
		}
		hit[key] = r.HitRate()
		t.Logf("%-14s hit %.4f prefetched %d used %d wasted %d response %v", key, r.HitRate(), r.Prefetched,
			r.PrefetchUsed, r.PrefetchWasted, r.MeanResponse())
	}
	if !(hit["pg1"] > hit["lru"] && hit["pg2"] > hit["pg1"] && hit["nexus"] > hit["pg2"] &&
		hit["nexus"] > hit["nexus-server"]) {
		t.Errorf("hit rates %v: want lru < pg1 < pg2 < nexus, nexus-server < nexus", hit)
	}
}

// TestRunDeterministic: the same run gives the same results; specs sharing
// predictors do not disturb each other.
func TestRunDeterministic(t *testing.T) {
	tr := programs(2)
	all := []Spec{
		{Algorithm: Nexus, Fraction: 0.1, Group: 1},
		{Algorithm: Nexus, Fraction: 0.3, Group: 3, Window: 2, Assignment: nexus.Exponential},
		{Algorithm: PG, Group: 2, Fraction: 0.2},
		{Algorithm: LFU, Fraction: 0.2},
	}
	a, err := Run(context.Background(), tr, Options{}, all)
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range all {
		if b := runOne(t, tr, Options{}, s); b != a[i] {
			t.Errorf("%+v alone: %+v, with others: %+v", s, b, a[i])
		}
	}
}

func TestNames(t *testing.T) {
	var names []string
	for a := LRU; a < numAlgorithms; a++ {
		names = append(names, Spec{Algorithm: a, Group: 2}.Name())
	}
	want := []string{"lru", "lfu", "mru", "first_successor", "last_successor", "noah", "recent_popularity", "pg2", "nexus", "opt"}
	if !slices.Equal(names, want) {
		t.Errorf("names %v", names)
	}
	if s := (Spec{Algorithm: Nexus}); s.group() != nexus.DefaultGroup {
		t.Errorf("Nexus default group %d", s.group())
	}
	if ClientOriented.String() != "client" || ServerOriented.String() != "server" || Algorithm(99).String() == "" {
		t.Errorf("strings")
	}
}
