package fsm

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/ghba/ghba/routing"
	"github.com/hashicorp/raft"
)

// testConfig is a small valid group configuration.
func testConfig(group string, max int) Config {
	f, _ := routing.NewGeometry(1000, 8, 0, routing.HashXX)
	l, _ := routing.NewGeometry(100, 20, 0, routing.HashXX)
	id, _ := routing.NewGeometry(64, 16, 0, routing.HashXX)
	return Config{Group: group, MaxGroupSize: max, Filter: f, LRUEntries: 100, LRU: l, IDFilter: id}
}

// mem returns a member with addresses derived from its id.
func mem(id string) Member {
	return Member{ID: id, RPCAddr: id + ":1", RaftAddr: id + ":2", SerfAddr: id + ":3", HTTPAddr: id + ":4"}
}

// ids returns n ids prefix0..prefix(n-1), zero-padded so they sort.
func ids(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%03d", prefix, i)
	}
	return out
}

// applier feeds entries to an FSM with increasing indexes.
type applier struct {
	t     testing.TB
	f     *FSM
	index uint64
}

func newApplier(t testing.TB, opts Options) *applier {
	return &applier{t: t, f: New(opts)}
}

// apply applies one entry and returns its result.
func (a *applier) apply(data []byte) *ApplyResult {
	a.t.Helper()
	a.index++
	resp := a.f.Apply(&raft.Log{Index: a.index, Term: 1, Type: raft.LogCommand, Data: data})
	r, ok := resp.(*ApplyResult)
	if !ok {
		a.t.Fatalf("Apply returned %T", resp)
	}
	if r.Index != a.index {
		a.t.Fatalf("result index %d, want %d", r.Index, a.index)
	}
	return r
}

// must applies one entry that must succeed.
func (a *applier) must(data []byte) *ApplyResult {
	a.t.Helper()
	r := a.apply(data)
	if r.Err != nil {
		a.t.Fatalf("apply %s: %v", MsgType(data[0]), r.Err)
	}
	return r
}

// stateBytes is the canonical encoding of f's state without the applied
// index: equal states give equal bytes.
func stateBytes(t testing.TB, f *FSM) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := writeSnapshot(&b, f.current(), 0); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// textDump renders f's state for readable diffs.
func textDump(f *FSM) string {
	var b strings.Builder
	cfg, ok := f.Config()
	fmt.Fprintf(&b, "bootstrapped=%v cfg=%+v migrated=%d idbfa=v%d shard moves=%d\n", ok, cfg, f.ReplicasMigrated(), f.IDBFAVersion(), f.ShardReplicasMoved())
	for _, m := range f.Members() {
		fmt.Fprintf(&b, "member %+v held=%v\n", m, f.Held(m.ID))
	}
	fmt.Fprintf(&b, "origins=%v\n", f.Origins())
	for _, sh := range f.Shards() {
		fmt.Fprintf(&b, "shard %s owner=%s replicas=%v creator=%q\n", sh.ID, sh.Owner, sh.Replicas, sh.Creator)
	}
	return b.String()
}

// sameState fails the test when a and b differ.
func sameState(t testing.TB, a, b *FSM, what string) {
	t.Helper()
	if !bytes.Equal(stateBytes(t, a), stateBytes(t, b)) {
		t.Fatalf("%s: states differ:\n%s\nvs\n%s", what, textDump(a), textDump(b))
	}
}

// checkInvariants verifies the group invariants of f: every origin held by
// exactly one active member (or by none when there is no active member),
// balance within one, origins never members, and the IDBFA equal to the one
// built from scratch from the assignment.
func checkInvariants(t testing.TB, f *FSM) {
	t.Helper()
	s := f.current()
	if !s.bootstrapped {
		return
	}
	active := f.ActiveMembers()
	var want []string
	for _, m := range f.Members() {
		if m.Status == StatusActive {
			want = append(want, m.ID)
		}
	}
	if !slices.Equal(active, want) {
		t.Fatalf("assignment members %v, active members %v", active, want)
	}
	origins := f.Origins()
	count := 0
	for _, m := range active {
		for _, o := range f.Held(m) {
			if h, ok := f.HolderOf(o); !ok || h != m {
				t.Fatalf("origin %q in Held(%q) but HolderOf says %q,%v", o, m, h, ok)
			}
			count++
		}
	}
	if len(active) > 0 && count != len(origins) {
		t.Fatalf("%d origins held, %d origins", count, len(origins))
	}
	for _, o := range origins {
		if _, ok := f.Member(o); ok {
			t.Fatalf("origin %q is a member", o)
		}
	}
	if lo, hi := f.Balance(); hi-lo > 1 {
		t.Fatalf("balance %d..%d", lo, hi)
	}
	// The IDBFA must be exactly the one built from the assignment.
	ref := routing.NewIDBFA(s.cfg.IDFilter)
	for _, m := range active {
		if err := ref.AddMember(m); err != nil {
			t.Fatal(err)
		}
		for _, o := range f.Held(m) {
			if err := ref.Assign(m, o); err != nil {
				t.Fatal(err)
			}
		}
	}
	got, _ := f.IDBFA()
	exp := ref.AppendBinary(nil)
	// Skip the version (bytes 16..24) and the CRC (last 4 bytes).
	if len(got) != len(exp) || !bytes.Equal(got[:16], exp[:16]) || !bytes.Equal(got[24:len(got)-4], exp[24:len(exp)-4]) {
		t.Fatalf("IDBFA does not match the assignment")
	}
	for _, o := range origins {
		h, ok := f.HolderOf(o)
		r := s.idb.Lookup(o)
		if ok && r.Positives == 1 && r.ID != h {
			t.Fatalf("IDBFA names %q for %q, holder %q", r.ID, o, h)
		}
		if ok && r.Positives == 0 {
			t.Fatalf("IDBFA misses %q held by %q", o, h)
		}
	}
	checkShards(t, f)
}

// checkShards verifies the shard placement invariants of f: every shard has
// min(R, active + its failed replicas) distinct replicas, all active or
// failed members, its owner among them (no owner only without replicas,
// when no member is active); leaving members host and own nothing; the
// replica loads and the ownership counts of the active members are within
// one; the getters agree with Shards.
func checkShards(t testing.TB, f *FSM) {
	t.Helper()
	cfg, _ := f.Config()
	r := cfg.ReplicationFactor()
	active := f.ActiveMembers()
	load, owned := map[string]int{}, map[string]int{}
	hosted, owns := map[string][]string{}, map[string][]string{}
	for _, sh := range f.Shards() {
		if got, ok := f.Shard(sh.ID); !ok || !got.equal(sh) {
			t.Fatalf("Shard(%q) = %+v, %v; Shards has %+v", sh.ID, got, ok, sh)
		}
		failed := 0
		for i, m := range sh.Replicas {
			if i > 0 && m <= sh.Replicas[i-1] {
				t.Fatalf("shard %+v: replicas not sorted and distinct", sh)
			}
			mm, ok := f.Member(m)
			if !ok || mm.Status == StatusLeaving {
				t.Fatalf("shard %+v: replica %q is %+v, %v", sh, m, mm, ok)
			}
			if mm.Status == StatusFailed {
				failed++
			}
			load[m]++
			hosted[m] = append(hosted[m], sh.ID)
		}
		if want := min(r, len(active)+failed); len(sh.Replicas) != want {
			t.Fatalf("shard %+v: %d replicas, want %d (R %d, %d active)\n%s", sh, len(sh.Replicas), want, r, len(active), textDump(f))
		}
		if sh.Owner == "" {
			if len(sh.Replicas) > 0 || len(active) > 0 {
				t.Fatalf("shard %+v has no owner with %d active members", sh, len(active))
			}
			continue
		}
		if !slices.Contains(sh.Replicas, sh.Owner) {
			t.Fatalf("shard %+v: owner not a replica", sh)
		}
		owned[sh.Owner]++
		owns[sh.Owner] = append(owns[sh.Owner], sh.ID)
	}
	for _, m := range f.Members() {
		if m.Status == StatusLeaving && (load[m.ID] > 0 || owned[m.ID] > 0) {
			t.Fatalf("leaving member %q hosts %d and owns %d shards", m.ID, load[m.ID], owned[m.ID])
		}
		if !slices.Equal(f.HostedBy(m.ID), hosted[m.ID]) || !slices.Equal(f.OwnedBy(m.ID), owns[m.ID]) || f.ReplicaLoad(m.ID) != load[m.ID] {
			t.Fatalf("member %q: HostedBy %v OwnedBy %v ReplicaLoad %d; shards say %v %v", m.ID, f.HostedBy(m.ID), f.OwnedBy(m.ID), f.ReplicaLoad(m.ID), hosted[m.ID], owns[m.ID])
		}
	}
	if len(active) == 0 {
		return
	}
	for _, c := range []struct {
		what  string
		count map[string]int
	}{{"replica load", load}, {"ownership", owned}} {
		lo, hi := c.count[active[0]], c.count[active[0]]
		for _, m := range active {
			lo, hi = min(lo, c.count[m]), max(hi, c.count[m])
		}
		if hi-lo > 1 {
			t.Fatalf("%s of the active members %d..%d\n%s", c.what, lo, hi, textDump(f))
		}
	}
}

// applyCase applies cmd, the command under test of a table-driven case,
// and checks the outcome: with wantErr, that the command was refused with
// it and changed nothing; without, that it succeeded; in both cases the
// result's type and index and the invariants. It returns the result.
func applyCase(t *testing.T, a *applier, cmd []byte, wantErr error) *ApplyResult {
	t.Helper()
	before := stateBytes(t, a.f)
	r := a.apply(cmd)
	if wantErr != nil {
		if !errors.Is(r.Err, wantErr) {
			t.Fatalf("err %v, want %v", r.Err, wantErr)
		}
		if r.Moves != nil || r.Shards != nil || r.MovedOut != nil || !bytes.Equal(before, stateBytes(t, a.f)) {
			t.Fatalf("refused command changed the state or reported changes: moves %v shards %+v", r.Moves, r.Shards)
		}
	} else if r.Err != nil {
		t.Fatalf("err %v", r.Err)
	}
	if r.Type != MsgType(cmd[0]) || a.f.AppliedIndex() != a.index {
		t.Fatalf("type %v index %d", r.Type, a.f.AppliedIndex())
	}
	checkInvariants(t, a.f)
	return r
}

// errorsIsAny reports whether err matches any of targets.
func errorsIsAny(err error, targets ...error) bool {
	for _, t := range targets {
		if errors.Is(err, t) {
			return true
		}
	}
	return false
}
