package fsm

import (
	"fmt"
	"slices"
	"testing"

	"github.com/ghba/ghba/routing"
)

// TestMigrationCounts checks light-weight migration (G-HBA §2.4): when a
// member joins a group of M' holding T replicas, each existing member hands
// over about current − T/(M'+1) replicas (±1), the newcomer ends with
// ⌊T/(M'+1)⌋, the counter grows by the number of moves, and a leave reverses
// it.
func TestMigrationCounts(t *testing.T) {
	for _, total := range []int{0, 1, 7, 120, 301} {
		t.Run(fmt.Sprint(total), func(t *testing.T) {
			a := newApplier(t, Options{})
			a.must(EncodeBootstrap(testConfig("g", 16)))
			a.must(EncodeAddOrigins(ids("x", total)...))
			members := ids("m", 16)
			for i, m := range members {
				before := map[string]int{}
				for _, e := range members[:i] {
					before[e] = a.f.Load(e)
				}
				migrated := a.f.ReplicasMigrated()
				r := a.must(EncodeAddMember(mem(m)))
				checkInvariants(t, a.f)
				if got, want := a.f.Load(m), total/(i+1); got != want {
					t.Fatalf("join %d: newcomer holds %d, want %d", i, got, want)
				}
				gave := map[string]int{}
				for _, mv := range r.Moves {
					if mv.To != m {
						t.Fatalf("join %d: move %+v not to the newcomer", i, mv)
					}
					gave[mv.From]++
				}
				if i == 0 {
					if gave[""] != total || a.f.ReplicasMigrated() != 0 {
						t.Fatalf("first member: %v, migrated %d", gave, a.f.ReplicasMigrated())
					}
					continue
				}
				ideal := float64(total) / float64(i+1) // (N − M')/(M'+1)
				for _, e := range members[:i] {
					want := float64(before[e]) - ideal
					if d := float64(gave[e]) - want; d < -1 || d > 1 {
						t.Fatalf("join %d: %s held %d, gave %d, want %.2f±1", i, e, before[e], gave[e], want)
					}
					if a.f.Load(e) != before[e]-gave[e] {
						t.Fatalf("join %d: %s load %d", i, e, a.f.Load(e))
					}
				}
				if got := a.f.ReplicasMigrated() - migrated; got != uint64(len(r.Moves)) {
					t.Fatalf("join %d: counter +%d, moves %d", i, got, len(r.Moves))
				}
			}
			// Leaving reverses it: the leaver's replicas spread over the rest.
			for i := len(members) - 1; i > 0; i-- {
				load := a.f.Load(members[i])
				r := a.must(EncodeSetStatus(members[i], StatusLeaving))
				if len(r.Moves) != load {
					t.Fatalf("leave %d: %d moves for %d replicas", i, len(r.Moves), load)
				}
				for _, mv := range r.Moves {
					if mv.From != members[i] || mv.To == "" || mv.To == members[i] {
						t.Fatalf("leave %d: move %+v", i, mv)
					}
				}
				checkInvariants(t, a.f)
			}
			if a.f.Load(members[0]) != total {
				t.Fatalf("last member holds %d of %d", a.f.Load(members[0]), total)
			}
		})
	}
}

// TestBalanceUnderChurn interleaves joins, failures, rejoins, leaves and
// origin churn and checks the invariants after every step.
func TestBalanceUnderChurn(t *testing.T) {
	a := newApplier(t, Options{})
	a.must(EncodeBootstrap(testConfig("g", 8)))
	a.must(EncodeAddMember(mem("m0")))
	a.must(EncodeAddOrigins(ids("x", 50)...))
	step := func(e []byte) {
		t.Helper()
		a.must(e)
		checkInvariants(t, a.f)
	}
	for round := range 5 {
		for i := 1; i < 8; i++ {
			step(EncodeAddMember(mem(fmt.Sprintf("m%d", i))))
			step(EncodeAddOrigins(fmt.Sprintf("y%d-%d", round, i)))
		}
		step(EncodeSetStatus("m3", StatusFailed))
		step(EncodeRemoveOrigins(ids("x", 5+round)...))
		step(EncodeSetStatus("m5", StatusFailed))
		step(EncodeAddOrigins(ids("z", 10+round)...))
		step(EncodeAddMember(mem("m3"))) // back with its data
		step(EncodeSetStatus("m5", StatusActive))
		step(EncodeSetStatus("m6", StatusLeaving))
		step(EncodeRemoveMember("m6"))
		step(EncodeSetOrigins(append(ids("x", 30), ids("w", round)...)))
		for i := 1; i < 8; i++ {
			if _, ok := a.f.Member(fmt.Sprintf("m%d", i)); ok && i%2 == 0 {
				step(EncodeRemoveMember(fmt.Sprintf("m%d", i)))
			}
		}
	}
	if a.f.ReplicasMigrated() == 0 {
		t.Fatal("no migration counted")
	}
}

// TestSplitAndMerge follows a group through a split into two groups (each
// with its own FSM, as each has its own Raft) and a merge back, checking
// that at every stage each group holds exactly one replica of every node
// outside it (g-hba-survey §VI).
func TestSplitAndMerge(t *testing.T) {
	others := ids("x", 30) // nodes of third groups
	ga := newApplier(t, Options{})
	ga.must(EncodeBootstrap(testConfig("A", 6)))
	for _, m := range ids("a", 6) {
		ga.must(EncodeAddMember(mem(m)))
	}
	ga.must(EncodeSetOrigins(others))
	checkInvariants(t, ga.f)

	// Split: a003..a005 leave A and form B.
	moved := ids("a", 6)[3:]
	r := ga.must(EncodeSplit(moved, "B"))
	for _, mv := range r.Moves {
		if slices.Contains(moved, mv.To) {
			t.Fatalf("split gave a replica to a departing member: %+v", mv)
		}
	}
	gb := newApplier(t, Options{})
	gb.must(EncodeBootstrap(testConfig("B", 6)))
	var ms []Member
	for _, m := range moved {
		ms = append(ms, mem(m))
	}
	gb.must(EncodeAbsorb(ms, "A"))
	gb.must(EncodeSetOrigins(append(slices.Clone(others), ids("a", 3)...)))
	for _, g := range []*applier{ga, gb} {
		checkInvariants(t, g.f)
		want := append(slices.Clone(others), ids("a", 6)...)
		for _, m := range g.f.Members() {
			want = slices.DeleteFunc(want, func(s string) bool { return s == m.ID })
		}
		slices.Sort(want)
		if !slices.Equal(g.f.Origins(), want) {
			t.Fatalf("group %v: origins %v, want %v", g.f.Members(), g.f.Origins(), want)
		}
		if lo, hi := g.f.Balance(); lo != 11 || hi != 11 { // 33 origins over 3
			t.Fatalf("balance %d..%d", lo, hi)
		}
	}

	// Merge: B (3) and A (3) total 6 ≤ M: A absorbs B's members.
	migrated := ga.f.ReplicasMigrated()
	r = ga.must(EncodeAbsorb(ms, "B"))
	checkInvariants(t, ga.f)
	if !slices.Equal(ga.f.Origins(), others) || ga.f.Size() != 6 {
		t.Fatalf("after merge: origins %v size %d", ga.f.Origins(), ga.f.Size())
	}
	if lo, hi := ga.f.Balance(); lo != 5 || hi != 5 {
		t.Fatalf("after merge: balance %d..%d", lo, hi)
	}
	// The absorbed nodes stop being origins (3 removals), then take their
	// share (5 each) from the members: 15 migrated.
	var removed, gained int
	for _, mv := range r.Moves {
		switch {
		case mv.To == "" && slices.Contains(moved, mv.Origin):
			removed++
		case slices.Contains(moved, mv.To) && mv.From != "":
			gained++
		}
	}
	if removed != 3 || gained != 15 {
		t.Fatalf("merge moves: %d origin removals, %d migrations: %v", removed, gained, r.Moves)
	}
	if got := ga.f.ReplicasMigrated() - migrated; got < 15 {
		t.Fatalf("merge migrated %d", got)
	}
	// The exported IDBFA decodes and points each origin to its holder.
	data, version := ga.f.IDBFA()
	x, err := routing.DecodeIDBFA(data)
	if err != nil || x.Version() != version {
		t.Fatalf("idbfa: %v v%d/%d", err, x.Version(), version)
	}
	for _, o := range others {
		h, _ := ga.f.HolderOf(o)
		if res := x.Lookup(o); res.Hit() && res.ID != h {
			t.Fatalf("idbfa sends %q to %q, holder %q", o, res.ID, h)
		}
	}
}
