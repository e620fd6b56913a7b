package fsm

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"

	"github.com/hashicorp/raft"
)

// memSink is an in-memory raft.SnapshotSink.
type memSink struct {
	bytes.Buffer
	closed, cancelled bool
}

func (s *memSink) ID() string    { return "mem" }
func (s *memSink) Cancel() error { s.cancelled = true; return nil }
func (s *memSink) Close() error  { s.closed = true; return nil }

// persist snapshots f and returns the persisted bytes.
func persist(t testing.TB, snap raft.FSMSnapshot) []byte {
	t.Helper()
	var sink memSink
	if err := snap.Persist(&sink); err != nil || !sink.closed || sink.cancelled {
		t.Fatalf("persist: %v closed=%v cancelled=%v", err, sink.closed, sink.cancelled)
	}
	snap.Release()
	return sink.Bytes()
}

// restore returns a fresh FSM restored from b.
func restore(t testing.TB, b []byte) *FSM {
	t.Helper()
	f := New(Options{})
	if err := f.Restore(io.NopCloser(bytes.NewReader(b))); err != nil {
		t.Fatalf("restore: %v", err)
	}
	return f
}

// genLog generates n entries of a random group history, using a reference
// FSM to choose mostly meaningful commands (plus refused and bad ones). The
// group's replication is seed mod 4 (0: a Bootstrap from before shards).
func genLog(t testing.TB, seed uint64, n, maxSize int) [][]byte {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	pool := ids("n", 40)
	pick := func(xs []string) string { return xs[rng.IntN(len(xs))] }
	some := func(xs []string, k int) []string {
		var out []string
		for range k {
			out = append(out, pick(xs))
		}
		return out
	}
	ref := newApplier(t, Options{})
	var log [][]byte
	add := func(e []byte) {
		log = append(log, e)
		ref.apply(e)
	}
	cfg := func(max int) Config {
		c := testConfig("g", max)
		c.Replication = int(seed % 4)
		return c
	}
	add(EncodeBootstrap(cfg(maxSize)))
	for len(log) < n {
		members := ref.f.ActiveMembers()
		var all []string
		for _, m := range ref.f.Members() {
			all = append(all, m.ID)
		}
		if len(all) == 0 {
			all = pool[:1]
		}
		origins := ref.f.Origins()
		if len(origins) == 0 {
			origins = pool[:1]
		}
		switch r := rng.IntN(100); {
		case r < 14:
			add(EncodeAddMember(mem(pick(pool))))
		case r < 20: // with shards: its own, another's (refused if owned), none
			id := pick(pool)
			shards := some(append([]string{id}, pool...)[:1+rng.IntN(3)], rng.IntN(3))
			if inc := rng.IntN(3); inc > 0 { // with the incarnation of its data dir (one of two)
				add(EncodeAddMemberIncarnation(mem(id), shards, fmt.Sprintf("%s@%d", id, inc)))
			} else {
				add(EncodeAddMemberShards(mem(id), shards))
			}
		case r < 27:
			add(EncodeRemoveMember(pick(all)))
		case r < 40:
			st := []Status{StatusActive, StatusLeaving, StatusFailed}[rng.IntN(3)]
			add(EncodeSetStatus(pick(all), st))
		case r < 58:
			add(EncodeAddOrigins(some(pool, 1+rng.IntN(6))...))
		case r < 68:
			add(EncodeRemoveOrigins(some(origins, 1+rng.IntN(3))...))
		case r < 75:
			var want []string
			for _, id := range pool {
				if !slices.Contains(all, id) && rng.IntN(3) > 0 {
					want = append(want, id)
				}
			}
			add(EncodeSetOrigins(want))
		case r < 82:
			add(EncodeSplit(some(all, 1+rng.IntN(2)), "g2"))
		case r < 89:
			var ms []Member
			for _, id := range some(pool, 1+rng.IntN(3)) {
				if !slices.ContainsFunc(ms, func(m Member) bool { return m.ID == id }) {
					ms = append(ms, mem(id))
				}
			}
			add(EncodeAbsorb(ms, "g3"))
		case r < 90:
			add(EncodeBootstrap(cfg(maxSize + rng.IntN(2))))
		case r < 92:
			add(EncodeRepairMember(pick(all)))
		case r < 94: // a garbage body: refused by every member alike
			e := Encode(&AddOriginsCommand{Origins: some(pool, 2)})
			e[2+rng.IntN(len(e)-2)] ^= byte(1 + rng.IntN(255))
			add(e)
		case r < 95: // from a newer build, marked ignorable: skipped
			add([]byte{byte(IgnorableFlag) | byte(1+rng.IntN(127)), FormatV1, 0x80})
		default:
			if len(members) > 0 && rng.IntN(2) == 0 {
				add(EncodeSetStatus(pick(members), StatusFailed))
			} else {
				add(EncodeAddMember(mem(pick(pool))))
			}
		}
	}
	return log
}

func TestReplayIdentical(t *testing.T) {
	for seed := range uint64(4) {
		log := genLog(t, seed, 400, 3+int(seed)*3)
		a, b := newApplier(t, Options{}), newApplier(t, Options{})
		ok := 0
		for i, e := range log {
			ra, rb := a.apply(e), b.apply(e)
			if fmt.Sprint(ra.Err) != fmt.Sprint(rb.Err) || !slices.Equal(ra.Moves, rb.Moves) || ra.Type != rb.Type {
				t.Fatalf("seed %d entry %d: results differ: %+v vs %+v", seed, i, ra, rb)
			}
			if ra.Err == nil {
				ok++
			}
			checkInvariants(t, a.f)
		}
		sameState(t, a.f, b.f, fmt.Sprintf("seed %d", seed))
		if ok < len(log)/3 {
			t.Fatalf("seed %d: only %d of %d entries succeeded", seed, ok, len(log))
		}
		if a.f.ReplicasMigrated() == 0 || len(a.f.Members()) == 0 {
			t.Logf("seed %d: %s", seed, textDump(a.f))
		}
	}
}

// TestSnapshotRestoreEveryPoint snapshots after every entry of a log,
// restores into a fresh FSM, checks the state is identical, and replays the
// rest of the log into the restored FSM: it must end where the original
// ends. The snapshot is persisted after the next entry was applied, so
// Persist must see the point-in-time state.
func TestSnapshotRestoreEveryPoint(t *testing.T) {
	log := genLog(t, 42, 160, 5)
	full := newApplier(t, Options{})
	for _, e := range log {
		full.apply(e)
	}
	a := newApplier(t, Options{})
	for k := 0; k <= len(log); k++ {
		snap, err := a.f.Snapshot()
		if err != nil {
			t.Fatal(err)
		}
		want := stateBytes(t, a.f)
		wantIndex := a.f.AppliedIndex()
		if k < len(log) {
			a.apply(log[k])
		}
		b := restore(t, persist(t, snap))
		if !bytes.Equal(want, stateBytes(t, b)) {
			t.Fatalf("point %d: restored state differs", k)
		}
		if b.AppliedIndex() != wantIndex {
			t.Fatalf("point %d: applied %d, want %d", k, b.AppliedIndex(), wantIndex)
		}
		checkInvariants(t, b)
		rest := &applier{t: t, f: b, index: wantIndex}
		for _, e := range log[k:] {
			rest.apply(e)
		}
		sameState(t, full.f, b, fmt.Sprintf("replay after restore at %d", k))
	}
}

// TestRestoreReplaces restores a snapshot into an FSM that already has a
// different state: nothing of the old state may survive.
func TestRestoreReplaces(t *testing.T) {
	src := group3(t)
	snap, _ := src.f.Snapshot()
	b := persist(t, snap)

	dst := newApplier(t, Options{})
	dst.must(EncodeBootstrap(testConfig("other", 9)))
	dst.must(EncodeAddMember(mem("zz")))
	dst.must(EncodeAddOrigins("q1", "q2"))
	if err := dst.f.Restore(io.NopCloser(bytes.NewReader(b))); err != nil {
		t.Fatal(err)
	}
	sameState(t, src.f, dst.f, "restore over existing state")
	if _, ok := dst.f.Member("zz"); ok {
		t.Fatal("old member survived")
	}
	// An empty FSM's snapshot restores to empty.
	empty := New(Options{})
	snap, _ = empty.Snapshot()
	e := restore(t, persist(t, snap))
	if e.Bootstrapped() || len(e.Members()) != 0 {
		t.Fatal("empty snapshot restored state")
	}
	sameState(t, empty, e, "empty")
	// So does a group with origins but no active member.
	g := group3(t)
	for _, id := range []string{"a", "b", "c"} {
		g.must(EncodeSetStatus(id, StatusFailed))
	}
	snap, _ = g.f.Snapshot()
	sameState(t, g.f, restore(t, persist(t, snap)), "no active member")
}

func TestRestoreCorrupt(t *testing.T) {
	src := group3(t)
	src.must(EncodeAddMember(mem("d")))
	snap, _ := src.f.Snapshot()
	good := persist(t, snap)

	bad := map[string][]byte{
		"empty":      nil,
		"magic":      append([]byte("XXXX"), good[4:]...),
		"format":     append(append([]byte("GHBS"), 9), good[5:]...),
		"truncated":  good[:len(good)/2],
		"no end":     good[:len(good)-8],
		"trailing":   append(slices.Clone(good), 0),
		"flipped":    flip(good, len(good)/3),
		"flipped 2":  flip(good, 12),
		"flipped -2": flip(good, len(good)-2),
	}
	for name, b := range bad {
		dst := group3(t) // a fresh one each: an unknown format halts it
		before := stateBytes(t, dst.f)
		err := dst.f.Restore(io.NopCloser(bytes.NewReader(b)))
		if !errors.Is(err, ErrCorruptSnapshot) {
			t.Fatalf("%s: err %v", name, err)
		}
		if !bytes.Equal(before, stateBytes(t, dst.f)) {
			t.Fatalf("%s: failed restore changed the state", name)
		}
	}
}

func flip(b []byte, i int) []byte {
	c := slices.Clone(b)
	c[i] ^= 0x40
	return c
}

// errSink fails every write.
type errSink struct{ memSink }

func (s *errSink) Write([]byte) (int, error) { return 0, errors.New("disk full") }

func TestPersistErrorCancels(t *testing.T) {
	a := group3(t)
	snap, _ := a.f.Snapshot()
	var sink errSink
	if err := snap.Persist(&sink); err == nil || !sink.cancelled || sink.closed {
		t.Fatalf("err %v cancelled=%v closed=%v", err, sink.cancelled, sink.closed)
	}
}

func TestRebuildAssignmentRefusesUnbalanced(t *testing.T) {
	if _, err := rebuildAssignment([]string{"a", "b"}, map[string][]string{"a": {"x", "y", "z"}}, nil); !errors.Is(err, ErrCorruptSnapshot) {
		t.Fatalf("err %v", err)
	}
	a, err := rebuildAssignment([]string{"a", "b", "c"}, map[string][]string{"a": {"x"}, "b": {"v", "w"}, "c": {"y", "z"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(a.Held("b"), []string{"v", "w"}) || a.Len() != 5 {
		t.Fatalf("held %v", a.Held("b"))
	}
}

func TestOnChange(t *testing.T) {
	var events []Event
	a := newApplier(t, Options{OnChange: func(ev Event) {
		events = append(events, ev)
	}})
	a.must(EncodeBootstrap(testConfig("g", 4)))
	a.must(EncodeAddMember(mem("a")))
	a.must(EncodeAddOrigins("x", "y", "z"))
	r := a.must(EncodeAddMember(mem("b")))
	a.apply(EncodeAddMember(mem("b")))    // no change: no event
	a.apply(EncodeRemoveMember("nobody")) // refused: no event
	if len(events) != 4 {
		t.Fatalf("%d events: %+v", len(events), events)
	}
	last := events[3]
	if last.Index != r.Index || last.Type != MsgAddMember || !slices.Equal(last.Moves, r.Moves) || len(last.Moves) != 1 {
		t.Fatalf("event %+v, result %+v", last, r)
	}
	snap, _ := a.f.Snapshot()
	b := persist(t, snap)
	if err := a.f.Restore(io.NopCloser(bytes.NewReader(b))); err != nil {
		t.Fatal(err)
	}
	if ev := events[len(events)-1]; !ev.Restored || ev.Index != a.index {
		t.Fatalf("restore event %+v", ev)
	}
}

// TestConcurrentReads runs the getters and snapshots while commands apply
// (for the race detector).
func TestConcurrentReads(t *testing.T) {
	log := genLog(t, 7, 300, 6)
	a := newApplier(t, Options{OnChange: func(ev Event) {}})
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range 3 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				for _, m := range a.f.Members() {
					a.f.Held(m.ID)
					a.f.Member(m.ID)
				}
				for _, o := range a.f.Origins() {
					a.f.HolderOf(o)
				}
				a.f.Balance()
				a.f.IDBFA()
				a.f.Config()
				a.f.AppliedIndex()
				a.f.ReplicasMigrated()
			}
		})
	}
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			snap, _ := a.f.Snapshot()
			var sink memSink
			_ = snap.Persist(&sink)
		}
	})
	for _, e := range log {
		a.apply(e)
	}
	close(stop)
	wg.Wait()
}
