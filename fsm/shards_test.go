package fsm

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
)

// shardGroup bootstraps a group (max 5, replication r) with members a, b, c,
// each owning its own shard.
func shardGroup(t testing.TB, r int) *applier {
	a := newApplier(t, Options{})
	cfg := testConfig("g1", 5)
	cfg.Replication = r
	a.must(EncodeBootstrap(cfg))
	for _, id := range []string{"a", "b", "c"} {
		a.must(EncodeAddMember(mem(id)))
	}
	return a
}

// shard returns f's shard id, failing the test if it is missing.
func shard(t testing.TB, f *FSM, id string) Shard {
	t.Helper()
	sh, ok := f.Shard(id)
	if !ok {
		t.Fatalf("no shard %q:\n%s", id, textDump(f))
	}
	return sh
}

func TestShardCommands(t *testing.T) {
	tests := []struct {
		name    string
		r       int      // replication of the group (members a, b, c)
		setup   [][]byte // applied first, each must succeed
		cmd     []byte
		wantErr error
		check   func(t *testing.T, f *FSM, r *ApplyResult)
	}{
		{name: "join places on the fewest loaded", r: 2, cmd: EncodeAddMember(mem("d")), check: func(t *testing.T, f *FSM, r *ApplyResult) {
			// a [a b], b [b c], c [a c]: loads 2,2,2; d joins: d + a.
			if sh := shard(t, f, "d"); sh.Owner != "d" || len(sh.Replicas) != 2 || !sh.hosts("d") {
				t.Fatalf("shard d %+v", sh)
			}
			if i := slices.IndexFunc(r.Shards, func(c ShardChange) bool { return c.ID == "d" }); i < 0 || r.Shards[i].Before.ID != "" {
				t.Fatalf("changes %+v", r.Shards)
			}
		}},
		{name: "replication 1 keeps one copy", r: 1, cmd: EncodeAddOrigins("x"), check: func(t *testing.T, f *FSM, _ *ApplyResult) {
			for _, id := range []string{"a", "b", "c"} {
				if sh := shard(t, f, id); sh.Owner != id || !slices.Equal(sh.Replicas, []string{id}) {
					t.Fatalf("shard %+v", sh)
				}
			}
		}},
		{name: "replication above the group size", r: 5, cmd: EncodeAddOrigins("x"), check: func(t *testing.T, f *FSM, _ *ApplyResult) {
			for _, sh := range f.Shards() {
				if !slices.Equal(sh.Replicas, []string{"a", "b", "c"}) {
					t.Fatalf("shard %+v", sh)
				}
			}
		}},
		{name: "join with shards", r: 3, cmd: EncodeAddMemberShards(mem("d"), []string{"s2", "s1", "s1"}), check: func(t *testing.T, f *FSM, r *ApplyResult) {
			if got := f.OwnedBy("d"); !slices.Equal(got, []string{"s1", "s2"}) {
				t.Fatalf("d owns %v", got)
			}
			if _, ok := f.Shard("d"); ok {
				t.Fatal("explicit shards: no default shard")
			}
		}},
		{name: "join owning none", r: 2, cmd: EncodeAddMemberShards(mem("d"), nil), check: func(t *testing.T, f *FSM, r *ApplyResult) {
			if len(f.OwnedBy("d")) != 0 || len(f.Shards()) != 3 || f.ReplicaLoad("d") != 1 {
				t.Fatalf("d owns %v hosts %v", f.OwnedBy("d"), f.HostedBy("d"))
			}
		}},
		{name: "join with another's shard", r: 2, cmd: EncodeAddMemberShards(mem("d"), []string{"d", "b"}), wantErr: ErrShardConflict},
		{name: "join with a bad shard id", r: 2, cmd: EncodeAddMemberShards(mem("d"), []string{""}), wantErr: ErrInvalidCommand},
		{name: "join with too many shards", r: 2, cmd: EncodeAddMemberShards(mem("d"), ids("s", MaxShardsPerCommand+1)), wantErr: ErrInvalidCommand},
		{name: "rejoin with own shard", r: 2, cmd: EncodeAddMemberShards(mem("b"), []string{"b"}), check: noShardChange},
		{name: "old-style rejoin brings nothing", r: 2, setup: [][]byte{EncodeSetStatus("b", StatusFailed)}, cmd: EncodeAddMember(mem("b")),
			check: func(t *testing.T, f *FSM, r *ApplyResult) {
				if m, _ := f.Member("b"); m.Status != StatusActive || len(f.Shards()) != 3 {
					t.Fatalf("member %+v shards %v", m, f.Shards())
				}
			}},
		{name: "old-style join of a node whose shard stayed", r: 2, setup: [][]byte{EncodeRemoveMember("b")}, cmd: EncodeAddMember(mem("b")),
			check: func(t *testing.T, f *FSM, r *ApplyResult) {
				if sh := shard(t, f, "b"); sh.Owner == "" || len(f.Shards()) != 3 {
					t.Fatalf("shard b %+v", sh)
				}
			}},
		{name: "fail keeps replicas", r: 3, cmd: EncodeSetStatus("b", StatusFailed), check: func(t *testing.T, f *FSM, r *ApplyResult) {
			if f.ReplicaLoad("b") != 3 || !slices.Equal(f.OwnedBy("b"), []string{"b"}) || len(r.Shards) != 0 {
				t.Fatalf("b hosts %v owns %v; changes %+v", f.HostedBy("b"), f.OwnedBy("b"), r.Shards)
			}
		}},
		{name: "repair", r: 2, setup: [][]byte{EncodeAddMember(mem("d")), EncodeSetStatus("b", StatusFailed)}, cmd: EncodeRepairMember("b"),
			check: func(t *testing.T, f *FSM, r *ApplyResult) {
				if f.ReplicaLoad("b") != 0 || len(f.OwnedBy("b")) != 0 || len(f.Shards()) != 4 {
					t.Fatalf("b hosts %v owns %v", f.HostedBy("b"), f.OwnedBy("b"))
				}
				if sh := shard(t, f, "b"); sh.Owner == "b" || len(sh.Replicas) != 2 {
					t.Fatalf("shard b %+v", sh)
				}
				if f.ShardReplicasMoved() == 0 {
					t.Fatal("no move counted")
				}
			}},
		{name: "repair again", r: 2, setup: [][]byte{EncodeSetStatus("b", StatusFailed), EncodeRepairMember("b")}, cmd: EncodeRepairMember("b"), check: noShardChange},
		{name: "repair active", r: 2, cmd: EncodeRepairMember("b"), wantErr: ErrMemberActive},
		{name: "repair unknown", r: 2, cmd: EncodeRepairMember("zz"), wantErr: ErrUnknownMember},
		{name: "repaired member comes back", r: 2, setup: [][]byte{EncodeSetStatus("b", StatusFailed), EncodeRepairMember("b")}, cmd: EncodeSetStatus("b", StatusActive),
			check: func(t *testing.T, f *FSM, r *ApplyResult) {
				if f.ReplicaLoad("b") != 2 || len(f.OwnedBy("b")) != 1 {
					t.Fatalf("b hosts %v owns %v", f.HostedBy("b"), f.OwnedBy("b"))
				}
			}},
		{name: "leave gives everything away", r: 1, cmd: EncodeSetStatus("c", StatusLeaving), check: func(t *testing.T, f *FSM, r *ApplyResult) {
			if f.ReplicaLoad("c") != 0 || shard(t, f, "c").Owner != "a" {
				t.Fatalf("c hosts %v; shard c %+v", f.HostedBy("c"), shard(t, f, "c"))
			}
			if len(r.Shards) != 1 || !slices.Equal(r.Shards[0].Removed(), []string{"c"}) || !slices.Equal(r.Shards[0].Added(), []string{"a"}) {
				t.Fatalf("changes %+v", r.Shards)
			}
		}},
		{name: "remove keeps the shards", r: 3, cmd: EncodeRemoveMember("a"), check: func(t *testing.T, f *FSM, r *ApplyResult) {
			if len(f.Shards()) != 3 || shard(t, f, "a").Owner == "a" {
				t.Fatalf("shards %+v", f.Shards())
			}
		}},
		{name: "split moves the movers' shards out", r: 2, setup: [][]byte{EncodeAddMemberShards(mem("d"), []string{"d", "d2"})}, cmd: EncodeSplit([]string{"d", "c"}, "g2"),
			check: func(t *testing.T, f *FSM, r *ApplyResult) {
				want := map[string][]string{"c": {"c"}, "d": {"d", "d2"}}
				if !reflect.DeepEqual(r.MovedOut, want) {
					t.Fatalf("moved out %v, want %v", r.MovedOut, want)
				}
				if ids := shardIDs(f); !slices.Equal(ids, []string{"a", "b"}) {
					t.Fatalf("shards %v", ids)
				}
			}},
		{name: "absorb with shards", r: 2, cmd: EncodeAbsorbShards([]Member{mem("y"), mem("x")}, "g2", []OwnedShards{{Member: "x", Shards: []string{"x", "old"}}}),
			check: func(t *testing.T, f *FSM, r *ApplyResult) {
				// x brings two, y none: balancing gives y one of them.
				if !slices.Equal(f.OwnedBy("x"), []string{"x"}) || !slices.Equal(f.OwnedBy("y"), []string{"old"}) {
					t.Fatalf("x owns %v, y owns %v", f.OwnedBy("x"), f.OwnedBy("y"))
				}
				if c := r.Shards[slices.IndexFunc(r.Shards, func(c ShardChange) bool { return c.ID == "old" })]; c.Before.ID != "" {
					t.Fatalf("change %+v", c)
				}
			}},
		{name: "absorb with defaults", r: 2, cmd: EncodeAbsorb([]Member{mem("y"), mem("x")}, "g2"), check: func(t *testing.T, f *FSM, r *ApplyResult) {
			if !slices.Equal(f.OwnedBy("x"), []string{"x"}) || !slices.Equal(f.OwnedBy("y"), []string{"y"}) {
				t.Fatalf("x owns %v, y owns %v", f.OwnedBy("x"), f.OwnedBy("y"))
			}
		}},
		{name: "absorb shards of a stranger", r: 2, cmd: EncodeAbsorbShards([]Member{mem("x")}, "g2", []OwnedShards{{Member: "z", Shards: []string{"z"}}}), wantErr: ErrInvalidCommand},
		{name: "absorb member listed twice", r: 2, cmd: EncodeAbsorbShards([]Member{mem("x")}, "g2", []OwnedShards{{Member: "x"}, {Member: "x", Shards: []string{"x"}}}), wantErr: ErrInvalidCommand},
		{name: "absorb shard brought twice", r: 2, cmd: EncodeAbsorbShards([]Member{mem("x"), mem("y")}, "g2", []OwnedShards{{Member: "x", Shards: []string{"s"}}, {Member: "y", Shards: []string{"s"}}}), wantErr: ErrInvalidCommand},
		{name: "orphans are adopted", r: 2, setup: [][]byte{EncodeRemoveMember("a"), EncodeRemoveMember("b"), EncodeSetStatus("c", StatusFailed), EncodeRepairMember("c")},
			cmd: EncodeAddMemberShards(mem("d"), []string{"a"}), check: func(t *testing.T, f *FSM, r *ApplyResult) {
				for _, sh := range f.Shards() {
					if sh.Owner != "d" || !slices.Equal(sh.Replicas, []string{"d"}) {
						t.Fatalf("shards %+v", f.Shards())
					}
				}
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a := shardGroup(t, tc.r)
			for _, e := range tc.setup {
				a.must(e)
				checkInvariants(t, a.f)
			}
			r := applyCase(t, a, tc.cmd, tc.wantErr)
			if tc.check != nil {
				tc.check(t, a.f, r)
			}
		})
	}
}

func noShardChange(t *testing.T, f *FSM, r *ApplyResult) {
	t.Helper()
	if len(r.Shards) != 0 {
		t.Fatalf("changes %+v", r.Shards)
	}
}

// shardIDs returns the ids of f's shards.
func shardIDs(f *FSM) []string {
	var out []string
	for _, sh := range f.Shards() {
		out = append(out, sh.ID)
	}
	return out
}

// TestShardJoinBalance follows joins into a group with R = 3: every join
// brings one shard and takes replicas from the most loaded members, with
// as many moves as the balance needs and no more.
func TestShardJoinBalance(t *testing.T) {
	a := newApplier(t, Options{})
	cfg := testConfig("g", 8)
	cfg.Replication = 3
	a.must(EncodeBootstrap(cfg))
	for i, id := range ids("m", 8) {
		moved := a.f.ShardReplicasMoved()
		r := a.must(EncodeAddMember(mem(id)))
		checkInvariants(t, a.f)
		// Every member hosts 3 replicas of n shards over n members.
		n := i + 1
		for _, m := range a.f.ActiveMembers() {
			if got, want := a.f.ReplicaLoad(m), min(3, n); got != want {
				t.Fatalf("join %d: %s hosts %d, want %d", i, m, got, want)
			}
		}
		if got := a.f.ShardReplicasMoved() - moved; got != replicaMoves(r.Shards) {
			t.Fatalf("join %d: counter +%d, changes say %d", i, got, replicaMoves(r.Shards))
		}
		if n > 3 && replicaMoves(r.Shards) != 2 { // the joiner has 1 (its own) and needs 2 more
			t.Fatalf("join %d: %d moves: %+v", i, replicaMoves(r.Shards), r.Shards)
		}
	}
}

// model is the world outside one group's FSM in TestShardProperties: the
// shards that splits took away, by the node carrying them.
type model struct {
	rng      *rand.Rand
	a        *applier
	all      map[string]bool     // every shard id ever added
	carried  map[string][]string // node outside → shards it took in a split
	fresh    int                 // next fresh node number
	log      [][]byte
	maxSize  int
	replicas int
}

// step applies e, calls ok (if set) when it succeeded, checks the
// invariants and that no shard was lost, and returns the result.
func (m *model) step(t *testing.T, e []byte, ok func()) *ApplyResult {
	t.Helper()
	f := m.a.f
	failedHost := map[string][]string{} // failed before and after: never gains
	for _, mm := range f.Members() {
		if mm.Status == StatusFailed {
			failedHost[mm.ID] = f.HostedBy(mm.ID)
		}
	}
	owned := map[string][]string{}
	for _, mm := range f.Members() {
		owned[mm.ID] = f.OwnedBy(mm.ID)
	}
	m.log = append(m.log, e)
	r := m.a.apply(e)
	if r.Err != nil && !errorsIsAny(r.Err, ErrGroupFull, ErrShardConflict) {
		t.Fatalf("entry %d (%s): %v", len(m.log), MsgType(e[0]), r.Err)
	}
	if r.Err == nil && ok != nil {
		ok()
	}
	checkInvariants(t, f)
	for id, before := range failedHost {
		if mm, ok := f.Member(id); ok && mm.Status == StatusFailed {
			if _, gained := diffSorted(before, f.HostedBy(id)); len(gained) > 0 {
				t.Fatalf("failed member %s gained replicas %v", id, gained)
			}
		}
	}
	for node, shards := range r.MovedOut {
		if !slices.Equal(shards, owned[node]) {
			t.Fatalf("split: %s took %v, owned %v", node, shards, owned[node])
		}
		m.carried[node] = shards
	}
	// No shard lost: each is in the FSM or carried by exactly one node.
	where := map[string]int{}
	for _, sh := range f.Shards() {
		where[sh.ID]++
	}
	for _, shards := range m.carried {
		for _, id := range shards {
			where[id]++
		}
	}
	for id := range m.all {
		if where[id] != 1 {
			t.Fatalf("shard %s is in %d places\n%s", id, where[id], textDump(f))
		}
	}
	if len(where) != len(m.all) {
		t.Fatalf("%d shards, %d ever added", len(where), len(m.all))
	}
	return r
}

// pick returns a random element of xs ("" if empty).
func (m *model) pick(xs []string) string {
	if len(xs) == 0 {
		return ""
	}
	return xs[m.rng.IntN(len(xs))]
}

// byStatus returns the ids of the members with status st.
func (m *model) byStatus(st Status) []string {
	var out []string
	for _, mm := range m.a.f.Members() {
		if mm.Status == st {
			out = append(out, mm.ID)
		}
	}
	return out
}

// join adds a node: a fresh one with its own shard (old-style or explicit),
// or one that split away earlier with the shards it carries.
func (m *model) join(t *testing.T) {
	var back []string
	for node := range m.carried {
		if _, ok := m.a.f.Member(node); !ok {
			back = append(back, node)
		}
	}
	slices.Sort(back)
	if node := m.pick(back); node != "" && m.rng.IntN(2) == 0 {
		m.step(t, EncodeAddMemberShards(mem(node), m.carried[node]), func() { delete(m.carried, node) })
		return
	}
	id := fmt.Sprintf("n%03d", m.fresh)
	m.fresh++
	e := EncodeAddMember(mem(id)) // a format-1 entry: the default shard
	if m.rng.IntN(2) == 0 {
		e = EncodeAddMemberShards(mem(id), []string{id})
	}
	m.step(t, e, func() { m.all[id] = true })
}

// TestShardProperties runs random histories of joins, failures, repairs,
// leaves, removals, rejoins, splits and merges for R = 1, 2, 3 and group
// sizes 1–7, checking after every command the placement invariants
// (checkShards), that failed members never gain replicas, that no shard is
// ever lost, and at the end that a second FSM replaying the log and FSMs
// restored from snapshots taken along the way end byte for byte equal.
func TestShardProperties(t *testing.T) {
	for r := 1; r <= 3; r++ {
		for size := 1; size <= 7; size++ {
			for seed := range uint64(3) {
				t.Run(fmt.Sprintf("R%d/M%d/%d", r, size, seed), func(t *testing.T) {
					shardHistory(t, r, size, seed, 150)
				})
			}
		}
	}
}

func shardHistory(t *testing.T, r, size int, seed uint64, n int) {
	m := &model{
		rng: rand.New(rand.NewPCG(seed, uint64(r*10+size))), a: newApplier(t, Options{}),
		all: map[string]bool{}, carried: map[string][]string{},
		maxSize: size, replicas: r,
	}
	cfg := testConfig("g", size)
	cfg.Replication = r
	m.step(t, EncodeBootstrap(cfg), nil)
	type snap struct {
		at    int
		bytes []byte
	}
	var snaps []snap
	for len(m.log) < n {
		f := m.a.f
		active, failed, leaving := m.byStatus(StatusActive), m.byStatus(StatusFailed), m.byStatus(StatusLeaving)
		switch x := m.rng.IntN(100); {
		case x < 25 || f.Size() == 0:
			m.join(t)
		case x < 40 && len(active) > 0:
			m.step(t, EncodeSetStatus(m.pick(active), StatusFailed), nil)
		case x < 50 && len(failed) > 0:
			m.step(t, EncodeRepairMember(m.pick(failed)), nil)
		case x < 60 && len(failed)+len(leaving) > 0: // back, with its data or after a repair
			id := m.pick(append(failed, leaving...))
			if m.rng.IntN(2) == 0 {
				m.step(t, EncodeAddMember(mem(id)), nil)
			} else {
				m.step(t, EncodeSetStatus(id, StatusActive), nil)
			}
		case x < 68 && len(active) > 0:
			m.step(t, EncodeSetStatus(m.pick(active), StatusLeaving), nil)
		case x < 76:
			all := append(append(active, failed...), leaving...)
			m.step(t, EncodeRemoveMember(m.pick(all)), nil)
		case x < 84 && f.Size() > 1:
			var movers []string
			for _, mm := range f.Members() {
				if m.rng.IntN(2) == 0 && len(movers) < f.Size()-1 {
					movers = append(movers, mm.ID)
				}
			}
			if len(movers) > 0 {
				m.step(t, EncodeSplit(movers, "g2"), nil)
			}
		case x < 90: // a merge: fresh nodes with their own shards
			var ms []Member
			var owned []OwnedShards
			for range 1 + m.rng.IntN(2) {
				id := fmt.Sprintf("n%03d", m.fresh)
				m.fresh++
				ms = append(ms, mem(id))
				owned = append(owned, OwnedShards{Member: id, Shards: []string{id, id + "-b"}})
			}
			m.step(t, EncodeAbsorbShards(ms, "g3", owned), func() {
				for _, o := range owned {
					for _, id := range o.Shards {
						m.all[id] = true
					}
				}
			})
		case x < 95:
			snapshot, err := f.Snapshot()
			if err != nil {
				t.Fatal(err)
			}
			snaps = append(snaps, snap{len(m.log), persist(t, snapshot)})
		case len(failed)+len(active) > 0:
			m.step(t, EncodeSetStatus(m.pick(append(failed, active...)), StatusActive), nil)
		}
	}
	// Determinism: a second FSM replaying the log, and FSMs restored from the
	// snapshots then replaying the rest, end in the same state.
	b := newApplier(t, Options{})
	for _, e := range m.log {
		b.apply(e)
	}
	sameState(t, m.a.f, b.f, "replay")
	for _, s := range snaps {
		c := restore(t, s.bytes)
		checkInvariants(t, c)
		rest := &applier{t: t, f: c, index: uint64(s.at)}
		for _, e := range m.log[s.at:] {
			rest.apply(e)
		}
		sameState(t, m.a.f, c, fmt.Sprintf("restored at %d", s.at))
	}
}

// TestShardEvents: OnChange reports shard placement changes; a Restore
// says to resynchronize.
func TestShardEvents(t *testing.T) {
	var events []Event
	a := newApplier(t, Options{OnChange: func(ev Event) { events = append(events, ev) }})
	cfg := testConfig("g", 4)
	cfg.Replication = 2
	a.must(EncodeBootstrap(cfg))
	a.must(EncodeAddMember(mem("a")))
	r := a.must(EncodeAddMember(mem("b")))
	ev := events[len(events)-1]
	if !reflect.DeepEqual(ev.Shards, r.Shards) || len(ev.Shards) != 2 {
		t.Fatalf("event %+v, result %+v", ev.Shards, r.Shards)
	}
	// a's shard gains b; b's arrives on b and a.
	want := []ShardChange{
		{ID: "a", Before: Shard{ID: "a", Owner: "a", Replicas: []string{"a"}}, After: Shard{ID: "a", Owner: "a", Replicas: []string{"a", "b"}}},
		{ID: "b", After: Shard{ID: "b", Owner: "b", Replicas: []string{"a", "b"}}},
	}
	if !reflect.DeepEqual(r.Shards, want) {
		t.Fatalf("changes %+v, want %+v", r.Shards, want)
	}
	if !slices.Equal(r.Shards[0].Added(), []string{"b"}) || len(r.Shards[0].Removed()) != 0 {
		t.Fatalf("added %v removed %v", r.Shards[0].Added(), r.Shards[0].Removed())
	}
	// The event's changes are its own: changing them changes nothing else.
	ev.Shards[0].After.Replicas[0] = "zz"
	if r.Shards[0].After.Replicas[0] != "a" || shard(t, a.f, "a").Replicas[0] != "a" {
		t.Fatal("event shares memory with the result or the state")
	}
	got := shard(t, a.f, "a")
	got.Replicas[0] = "zz"
	if shard(t, a.f, "a").Replicas[0] != "a" {
		t.Fatal("Shard shares memory with the state")
	}
	n := len(events)
	a.must(EncodeSetStatus("b", StatusFailed)) // placement unchanged
	if ev := events[len(events)-1]; len(events) != n+1 || len(ev.Shards) != 0 {
		t.Fatalf("events %+v", events[n:])
	}
}

// legacySnapshot returns snapshot b without its placement and shard records,
// as a build from before shards wrote it.
func legacySnapshot(t testing.TB, b []byte) []byte {
	t.Helper()
	out, off, records := slices.Clone(b[:5]), 5, uint64(0)
	for {
		l, n := binary.Uvarint(b[off+1:])
		if n <= 0 {
			t.Fatal("bad snapshot")
		}
		end := off + 1 + n + int(l)
		if b[off] == recEnd {
			break
		}
		if b[off] != recPlacement && b[off] != recShard {
			out = append(out, b[off:end]...)
			records++
		}
		off = end
	}
	var e bytes.Buffer
	if err := writeRecord(&e, recEnd, snapEnd{Records: records, CRC: crc32.Checksum(out, crc32.MakeTable(crc32.Castagnoli))}); err != nil {
		t.Fatal(err)
	}
	return append(out, e.Bytes()...)
}

// oldEntry encodes a format-1 entry of type mt with body v, as a build from
// before shards wrote it.
func oldEntry(t testing.TB, mt MsgType, v any) []byte {
	t.Helper()
	b, err := encodeBody([]byte{byte(mt), FormatV1}, v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// oldConfig is Config as builds from before shards had it.
type oldConfig struct {
	Group        string `json:"group"`
	MaxGroupSize int    `json:"max_group_size"`
	Filter       any    `json:"filter"`
	LRUEntries   int    `json:"lru_entries"`
	LRU          any    `json:"lru"`
	IDFilter     any    `json:"id_filter"`
}

// TestOldEntriesAndSnapshots: log entries and snapshots written before
// shards existed replay to a group where every member owns its own shard
// with one copy, and the two ways agree.
func TestOldEntriesAndSnapshots(t *testing.T) {
	c := testConfig("g", 5)
	old := newApplier(t, Options{})
	old.must(oldEntry(t, MsgBootstrap, struct{ Config oldConfig }{oldConfig{c.Group, c.MaxGroupSize, c.Filter, c.LRUEntries, c.LRU, c.IDFilter}}))
	for _, id := range []string{"c", "a", "d", "b"} {
		old.must(oldEntry(t, MsgAddMember, struct{ Member Member }{mem(id)}))
	}
	old.must(EncodeSetStatus("d", StatusFailed))
	old.must(EncodeSetStatus("c", StatusLeaving))
	old.must(EncodeAddOrigins("x", "y"))
	if cfg, _ := old.f.Config(); cfg != c || cfg.ReplicationFactor() != 1 {
		t.Fatalf("config %+v", cfg)
	}
	checkInvariants(t, old.f)
	for _, id := range []string{"a", "b", "d"} {
		if sh := shard(t, old.f, id); sh.Owner != id || !slices.Equal(sh.Replicas, []string{id}) {
			t.Fatalf("shard %+v", sh)
		}
	}
	if sh := shard(t, old.f, "c"); sh.Owner != "a" { // given away by the leave
		t.Fatalf("shard %+v", sh)
	}
	// A format-1 body carrying the new fields (as no build writes it) is
	// read as format 1: the fields are dropped, as older builds drop them.
	e := oldEntry(t, MsgAddMember, AddMemberCommand{Member: mem("e"), Shards: []string{"zz"}})
	if cmd, err := DecodeCommand(e); err != nil || cmd.(*AddMemberCommand).Shards != nil {
		t.Fatalf("decoded %+v, %v", cmd, err)
	}

	// The snapshot an old build took restores to the same state.
	snap, err := old.f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	b := legacySnapshot(t, persist(t, snap))
	if bytes.Contains(b, []byte{recPlacement}) && bytes.Equal(b, persist(t, snap)) {
		t.Fatal("legacySnapshot kept the records")
	}
	restored := restore(t, b)
	checkInvariants(t, restored)
	if !reflect.DeepEqual(restored.Shards(), old.f.Shards()) || !bytes.Equal(legacySnapshot(t, stateBytes(t, restored)), legacySnapshot(t, stateBytes(t, old.f))) {
		t.Fatalf("legacy snapshot restored\n%s\nreplayed\n%s", textDump(restored), textDump(old.f))
	}
	if restored.ShardReplicasMoved() != 0 { // not known to older builds
		t.Fatalf("moves %d", restored.ShardReplicasMoved())
	}

	// Leaves before the snapshot are only known to the log: those shards
	// are not in the old snapshot.
	old.must(EncodeRemoveMember("b"))
	snap, _ = old.f.Snapshot()
	restored = restore(t, legacySnapshot(t, persist(t, snap)))
	checkInvariants(t, restored)
	if _, ok := restored.Shard("b"); ok || len(restored.Shards()) != len(old.f.Shards())-1 {
		t.Fatalf("restored %v, replayed %v", restored.Shards(), old.f.Shards())
	}
}

// TestShardFormat checks the compatibility decisions of the log format:
// the extended commands keep format 1 (which older builds apply exactly as
// this one does) unless they use a new field; format 2, and RepairMember
// (not ignorable: a member that missed a repair would keep placing replicas
// on the repaired member), stop older builds; snapshots' new record kinds
// are not ignorable either.
func TestShardFormat(t *testing.T) {
	r3 := testConfig("g", 5)
	r3.Replication = 3
	for _, tc := range []struct {
		entry   []byte
		version uint8
	}{
		{EncodeBootstrap(testConfig("g", 5)), FormatV1},
		{EncodeBootstrap(r3), FormatV2},
		{EncodeAddMember(mem("a")), FormatV1},
		{EncodeAddMemberShards(mem("a"), nil), FormatV2},
		{EncodeAddMemberShards(mem("a"), []string{"a"}), FormatV2},
		{EncodeAbsorb([]Member{mem("a")}, "g"), FormatV1},
		{EncodeAbsorbShards([]Member{mem("a")}, "g", nil), FormatV2},
		{EncodeRepairMember("a"), FormatV1},
	} {
		if tc.entry[1] != tc.version {
			t.Errorf("%s: format %d, want %d", MsgType(tc.entry[0]), tc.entry[1], tc.version)
		}
		// An older build decodes the command with format 1 only.
		old := func(version uint8, body []byte) (Command, error) {
			return v1[AddMemberCommand](version, body)
		}
		if _, err := old(tc.entry[1], tc.entry[2:]); tc.version == FormatV2 && !errors.Is(err, ErrUnsupportedVersion) {
			t.Errorf("%s: an older build reads format 2: %v", MsgType(tc.entry[0]), err)
		}
	}
	if MsgRepairMember.Ignorable() || MsgRepairMember != 10 || MsgRepairMember.String() != "repair-member" {
		t.Errorf("repair-member type %d ignorable %v", MsgRepairMember, MsgRepairMember.Ignorable())
	}
	// A format this build does not know halts it, as for any command.
	a := shardGroup(t, 2)
	e := EncodeAddMemberShards(mem("d"), []string{"d"})
	e[1] = 4
	if r := a.apply(e); !errors.Is(r.Err, ErrHalted) || !errors.Is(r.Err, ErrUnsupportedVersion) {
		t.Fatalf("format 4: %v", r.Err)
	}
	for _, k := range []uint8{recPlacement, recShard} {
		if k&recIgnorable != 0 {
			t.Errorf("record kind %d is ignorable", k)
		}
	}
	// A build from before shards sees kinds 6 and 7 as unknown and not
	// ignorable: it halts (as TestUnknownSnapshotRecords shows for kind 100).
}

// TestShardBootstrapConflicts: the replication is fixed at bootstrap; 0 and
// 1 are the same.
func TestShardBootstrapConflicts(t *testing.T) {
	c := testConfig("g", 5)
	a := newApplier(t, Options{})
	a.must(EncodeBootstrap(c))
	one := c
	one.Replication = 1
	a.must(EncodeBootstrap(one))
	two := c
	two.Replication = 2
	if r := a.apply(EncodeBootstrap(two)); !errors.Is(r.Err, ErrConfigConflict) {
		t.Fatalf("err %v", r.Err)
	}
	bad := c
	bad.Replication = -1
	if r := newApplier(t, Options{}).apply(EncodeBootstrap(bad)); !errors.Is(r.Err, ErrInvalidCommand) {
		t.Fatalf("err %v", r.Err)
	}
}

// TestRestoreCorruptShards: shard records that break the invariants are
// refused as corrupt.
func TestRestoreCorruptShards(t *testing.T) {
	a := shardGroup(t, 2)
	for name, mutate := range map[string]func(s *state){
		"replica not a member":  func(s *state) { s.shards["a"] = Shard{ID: "a", Owner: "a", Replicas: []string{"a", "zz"}} },
		"owner not a replica":   func(s *state) { s.shards["a"] = Shard{ID: "a", Owner: "c", Replicas: []string{"a", "b"}} },
		"too few replicas":      func(s *state) { s.shards["a"] = Shard{ID: "a", Owner: "a", Replicas: []string{"a"}} },
		"replicas out of order": func(s *state) { s.shards["a"] = Shard{ID: "a", Owner: "a", Replicas: []string{"b", "a"}} },
		"no owner":              func(s *state) { s.shards["a"] = Shard{ID: "a"} },
		"bad id":                func(s *state) { s.shards[""] = Shard{Owner: "a", Replicas: []string{"a", "b"}} },
	} {
		st, err := a.f.current().clone()
		if err != nil {
			t.Fatal(err)
		}
		mutate(st)
		var b bytes.Buffer
		if err := writeSnapshot(&b, st, 9); err != nil {
			t.Fatal(err)
		}
		if _, _, _, err := readSnapshot(&b); !errors.Is(err, ErrCorruptSnapshot) {
			t.Errorf("%s: %v", name, err)
		}
	}
}
