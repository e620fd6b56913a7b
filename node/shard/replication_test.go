package shard_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/ghba/ghba/node/raftmux"
	"github.com/ghba/ghba/node/shard"
	"github.com/ghba/ghba/node/store"
	"github.com/ghba/ghba/rpc"
	"github.com/ghba/ghba/rpc/rpctest"
)

// TestReplicasConverge writes through the leader of a three-replica shard
// (sequential and concurrent batches): every replica ends with the same
// store contents, applied index and filter.
func TestReplicasConverge(t *testing.T) {
	noLeaks(t)
	c := newCluster(t, 3)
	c.mustApply(mkdir("/d"))
	for i := range 20 {
		c.mustApply(create(fmt.Sprintf("/d/f%02d", i)))
	}
	var wg sync.WaitGroup
	errs := make(chan error, 8*10)
	for w := range 8 {
		wg.Go(func() {
			for i := range 10 {
				if err := c.waitLeader().rep.Apply(context.Background(), create(fmt.Sprintf("/w%d/f%d", w, i))); err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("concurrent apply: %v", err)
	}
	for i := range 5 {
		c.mustApply(remove(fmt.Sprintf("/d/f%02d", i)))
	}
	s := c.converged()
	if want := 1 + 20 + 80 - 5; len(s.Inodes) != want || s.Counts.Total() != int64(want) {
		t.Errorf("%d inodes (counts %+v), want %d", len(s.Inodes), s.Counts, want)
	}
	if len(s.Entries["/d"]) != 15 {
		t.Errorf("/d has %d entries, want 15", len(s.Entries["/d"]))
	}
	l := c.waitLeader()
	if err := l.rep.Barrier(ctxFor(t, waitFor)); err != nil {
		t.Errorf("Barrier on the leader: %v", err)
	}
	if !l.rep.LastContact().IsZero() {
		t.Errorf("the leader's last contact is %v, want zero", l.rep.LastContact())
	}
	for _, r := range c.reps {
		if ix := r.rep.Indexes(); ix.Applied != s.Applied || ix.Applied > ix.Commit || ix.Commit > ix.Last {
			t.Errorf("%s: indexes %+v, store applied %d", r.id(), ix, s.Applied)
		}
		if err := r.rep.Halted(); err != nil {
			t.Errorf("%s halted: %v", r.id(), err)
		}
		if term := shard.ParseTerm(r.rep.Stats()); term == 0 || term != r.rep.Term() {
			t.Errorf("%s: term %d in its stats, %d", r.id(), term, r.rep.Term())
		}
		if r.rep.Shard() != shardID || r.rep.HasState() { // (state when opened: none)
			t.Errorf("%s: shard %q, has state %v", r.id(), r.rep.Shard(), r.rep.HasState())
		}
		if r != l && r.rep.LastContact().IsZero() {
			t.Errorf("follower %s never heard from its leader", r.id())
		}
	}
}

// TestPreconditionFailures applies batches whose preconditions fail
// through each replica in turn as the leader: each fails with the same
// error on every replica (errors.Is the store's sentinel), changes nothing
// but the applied index, and the replicas do not diverge.
func TestPreconditionFailures(t *testing.T) {
	noLeaks(t)
	c := newCluster(t, 3)
	c.mustApply(mkdir("/d"), create("/d/a"), create("/d/b"))
	c.mustApply(func() *store.Batch {
		var b store.Batch
		b.SetMeta("m", []byte("v1"))
		return &b
	}())

	tests := []struct {
		name  string
		batch func() *store.Batch
		want  []error
	}{
		{"inode absent", func() *store.Batch { return create("/d/a") }, []error{store.ErrExists, fs.ErrExist}},
		{"inode exists", func() *store.Batch { return remove("/d/zz") }, []error{store.ErrNotFound, fs.ErrNotExist}},
		{"inode version", func() *store.Batch {
			var b store.Batch
			b.RequireInodeVersion("/d/a", 7)
			b.PutInode("/d/a", store.Inode{Type: store.TypeFile, Version: 8})
			return &b
		}, []error{store.ErrConflict}},
		{"entry absent", func() *store.Batch {
			var b store.Batch
			b.RequireEntryAbsent("/d", "b")
			b.PutEntry("/d", store.Entry{Name: "b", Type: store.TypeDir, Home: shardID})
			return &b
		}, []error{store.ErrExists}},
		{"dir empty", func() *store.Batch {
			var b store.Batch
			b.RequireDirEmpty("/d")
			b.DeleteInode("/d")
			return &b
		}, []error{store.ErrNotEmpty}},
		{"meta equals", func() *store.Batch {
			var b store.Batch
			b.RequireMeta("m", []byte("v0"))
			b.SetMeta("m", []byte("v2"))
			return &b
		}, []error{store.ErrConflict}},
		{"second precondition after mutations", func() *store.Batch {
			var b store.Batch
			b.PutInode("/d/new", store.Inode{Type: store.TypeFile})
			b.DeleteInode("/d/a")
			b.RequireInodeExists("/d/a")
			b.RequireInodeAbsent("/d/b")
			return &b
		}, []error{store.ErrExists}},
	}
	results := make(map[string]string) // by test: the error's text
	for _, leader := range c.reps {
		if l := c.waitLeader(); l != leader {
			if err := l.rep.TransferLeadership(ctxFor(t, waitFor), leader.id(), leader.node.addr); err != nil {
				t.Fatalf("transfer leadership to %s: %v", leader.id(), err)
			}
			if got := c.waitLeader(); got != leader {
				t.Fatalf("%s leads, want %s", got.id(), leader.id())
			}
		}
		for _, tc := range tests {
			before := c.converged()
			err := leader.rep.Apply(ctxFor(t, waitFor), tc.batch())
			for _, want := range tc.want {
				if !errors.Is(err, want) {
					t.Errorf("%s on %s: %v, want %v", tc.name, leader.id(), err, want)
				}
			}
			if _, ok := errors.AsType[*store.PreconditionError](err); !ok {
				t.Errorf("%s on %s: %v is not a *store.PreconditionError", tc.name, leader.id(), err)
			}
			if errors.Is(err, rpc.ErrUnavailable) || errors.Is(err, rpc.ErrOutcomeUnknown) {
				t.Errorf("%s on %s: %v is a replication error", tc.name, leader.id(), err)
			}
			if prev, seen := results[tc.name]; seen && err != nil && prev != err.Error() {
				t.Errorf("%s: %q on %s, %q before", tc.name, err, leader.id(), prev)
			} else if err != nil {
				results[tc.name] = err.Error()
			}
			c.unchanged(tc.name, before, true)
		}
	}
}

// TestApplyRefusedBeforeAppend checks the errors of batches that never
// reach the log: an invalid batch, a follower's Apply (NotLeader with the
// leader's id) and ctx already done.
func TestApplyRefusedBeforeAppend(t *testing.T) {
	noLeaks(t)
	c := newCluster(t, 3)
	c.mustApply(mkdir("/d"))
	before := c.converged()
	leader := c.waitLeader()

	var bad store.Batch
	bad.PutInode("relative/path", store.Inode{Type: store.TypeFile})
	if err := leader.rep.Apply(ctxFor(t, waitFor), &bad); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("invalid batch: %v, want store.ErrInvalid", err)
	}
	for _, r := range c.others(leader) {
		err := r.rep.Apply(ctxFor(t, waitFor), create("/d/follower"))
		if !errors.Is(err, rpc.ErrNotLeader) || !errors.Is(err, rpc.ErrUnavailable) || errors.Is(err, rpc.ErrOutcomeUnknown) {
			t.Errorf("Apply on follower %s: %v, want NotLeader (and not outcome unknown)", r.id(), err)
		}
		if id, _, ok := rpc.NotLeaderHint(err); !ok || id != leader.id() {
			t.Errorf("Apply on follower %s: hint %q (%v), want %s", r.id(), id, ok, leader.id())
		}
		nl, _ := errors.AsType[*rpc.NotLeaderError](err)
		if nl == nil || nl.Shard != shardID {
			t.Errorf("Apply on follower %s: %#v, want a NotLeaderError of shard %s", r.id(), nl, shardID)
		}
		if err := r.rep.Rekey(ctxFor(t, waitFor), "/d", "/e", nil); !errors.Is(err, rpc.ErrNotLeader) {
			t.Errorf("Rekey on follower %s: %v, want NotLeader", r.id(), err)
		}
		if err := r.rep.Barrier(ctxFor(t, waitFor)); !errors.Is(err, rpc.ErrNotLeader) {
			t.Errorf("Barrier on follower %s: %v, want NotLeader", r.id(), err)
		}
	}
	if after := c.converged(); before.diff(after) != "" {
		t.Errorf("refused batches changed the state: %s", before.diff(after))
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := leader.rep.Apply(ctx, create("/d/cancelled")); err == nil || !errors.Is(err, rpc.ErrOutcomeUnknown) && !errors.Is(err, context.Canceled) {
		t.Errorf("Apply with ctx done: %v", err)
	}
}

// TestOpenFails checks Open's failures: missing options are refused; an
// Open that fails later returns its error and closes what it opened,
// the transport included (its raft multiplexer id is free again).
func TestOpenFails(t *testing.T) {
	noLeaks(t)
	n := startNode(t, "n1")
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		opts  func(*shard.Options)
		trans bool // Open takes the transport over
	}{
		{"no node id", func(o *shard.Options) { o.NodeID = "" }, false},
		{"no transport", func(o *shard.Options) { o.Transport = nil }, false},
		{"dir is a file", func(o *shard.Options) { o.Dir = file }, true},
		{"bad store options", func(o *shard.Options) { o.Store.MemTableSize = 1 }, true},
		{"unknown log store", func(o *shard.Options) { o.LogStore = "rocksdb" }, true},
	}
	for _, tc := range tests {
		layer, err := n.mux.Layer("shard/" + shardID)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		trans := raftmux.NewTransport(layer, rpctest.HCLogger(t, "transport"))
		opts := shard.Options{Shard: shardID, NodeID: n.id, Dir: t.TempDir(), Transport: trans, Geometry: geometry}
		tc.opts(&opts)
		r, err := shard.Open(context.Background(), opts)
		if err == nil || r != nil {
			t.Fatalf("%s: Open returned %v, %v", tc.name, r, err)
		}
		if tc.name == "unknown log store" && !errors.Is(err, shard.ErrLogStore) {
			t.Errorf("%s: %v, want ErrLogStore", tc.name, err)
		}
		if !tc.trans {
			_ = trans.Close()
		}
	}
}

// TestConcurrentResults applies, from many writers at once, creates of
// the same paths and re-keys of another subtree, so that the state
// machine applies several commands per batch: each create of a path
// succeeds exactly once and fails with ErrExists otherwise, every re-key
// succeeds, and the replicas converge.
func TestConcurrentResults(t *testing.T) {
	noLeaks(t)
	c := newCluster(t, 3)
	c.mustApply(mkdir("/r0"), create("/r0/a"), create("/r0/b"))
	l := c.waitLeader()
	const writers, paths, rekeys = 8, 20, 6
	var wins [paths]atomic.Int32
	var wg sync.WaitGroup
	for range writers {
		wg.Go(func() {
			for k := range paths {
				err := l.rep.Apply(ctxFor(t, waitFor), create(fmt.Sprintf("/x/f%d", k)))
				switch {
				case err == nil:
					wins[k].Add(1)
				case !errors.Is(err, store.ErrExists):
					t.Errorf("create /x/f%d: %v", k, err)
				}
			}
		})
	}
	wg.Go(func() {
		for i := range rekeys {
			if err := l.rep.Rekey(ctxFor(t, waitFor), fmt.Sprintf("/r%d", i), fmt.Sprintf("/r%d", i+1), nil); err != nil {
				t.Errorf("rekey %d: %v", i, err)
			}
		}
	})
	wg.Wait()
	for k := range paths {
		if n := wins[k].Load(); n != 1 {
			t.Errorf("/x/f%d created %d times", k, n)
		}
	}
	s := c.converged()
	for _, p := range []string{fmt.Sprintf("/r%d", rekeys), fmt.Sprintf("/r%d/a", rekeys), fmt.Sprintf("/r%d/b", rekeys)} {
		if _, ok := s.Inodes[p]; !ok {
			t.Errorf("%s missing after the re-keys", p)
		}
	}
	if len(s.Inodes) != 3+paths {
		t.Errorf("%d inodes, want %d", len(s.Inodes), 3+paths)
	}
	// The point: entries were applied several to a store transaction.
	if st := l.rep.Store().Stats(); st.LogTxns >= st.LogEntries {
		t.Errorf("%d entries applied in %d transactions", st.LogEntries, st.LogTxns)
	} else {
		t.Logf("%d entries applied in %d transactions", st.LogEntries, st.LogTxns)
	}
}

// TestRecode recodes a subtree through the log (a chmod of a directory)
// and re-keys it into a place with other codes: every replica rewrites
// the codes of every inode under the directory, and only those.
func TestRecode(t *testing.T) {
	noLeaks(t)
	c := newCluster(t, 3, withStore(func(o *store.Options) { o.RekeyStepKeys = 3 }))
	c.mustApply(mkdir("/d"), mkdir("/d/sub"), mkdir("/q"))
	for i := range 10 {
		c.mustApply(create(fmt.Sprintf("/d/f%d", i)), create(fmt.Sprintf("/d/sub/g%d", i)))
	}
	l := c.waitLeader()
	code := store.AncestorCode{Depth: 1, Mode: 0o100, UID: 1000, GID: 1000}
	if err := l.rep.Recode(ctxFor(t, waitFor), "/d", &code); err != nil {
		t.Fatal(err)
	}
	s := c.converged()
	for p, ino := range s.Inodes {
		under := strings.HasPrefix(p, "/d/")
		if has := len(ino.Ancestors) == 1 && ino.Ancestors[0] == code; has != under {
			t.Errorf("%s: codes %v", p, ino.Ancestors)
		}
	}
	// mv /d /q/e, /q being 0750 (gid 7): codes from above are the chain,
	// /d's own code moves one level down.
	qcode := store.AncestorCode{Depth: 1, Mode: 0o110, GID: 7}
	if err := l.rep.Rekey(ctxFor(t, waitFor), "/d", "/q/e", []store.AncestorCode{qcode}); err != nil {
		t.Fatal(err)
	}
	s = c.converged()
	moved := code
	moved.Depth = 2
	if got := s.Inodes["/q/e/sub/g4"].Ancestors; len(got) != 2 || got[0] != qcode || got[1] != moved {
		t.Errorf("/q/e/sub/g4: codes %v, want [%v %v]", got, qcode, moved)
	}
	if got := s.Inodes["/q/e"].Ancestors; len(got) != 1 || got[0] != qcode {
		t.Errorf("/q/e: codes %v", got)
	}
	// A code for another depth is the entry's result on every replica.
	if err := l.rep.Recode(ctxFor(t, waitFor), "/q/e", &code); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("recode with a wrong depth: %v", err)
	}
}

// TestRekey re-keys a directory through the log: every replica moves its
// inodes and entries and updates its filter; a refused re-key is the
// entry's result on every replica and changes nothing.
func TestRekey(t *testing.T) {
	noLeaks(t)
	c := newCluster(t, 3, withStore(func(o *store.Options) { o.RekeyStepKeys = 3 }))
	c.mustApply(mkdir("/d"), mkdir("/d/sub"), mkdir("/busy"))
	for i := range 10 {
		c.mustApply(create(fmt.Sprintf("/d/f%d", i)), create(fmt.Sprintf("/d/sub/g%d", i)))
	}
	l := c.waitLeader()
	if err := l.rep.Rekey(ctxFor(t, waitFor), "/d", "/e", nil); err != nil {
		t.Fatal(err)
	}
	s := c.converged()
	for p := range s.Inodes {
		if strings.HasPrefix(p, "/d/") || p == "/d" {
			t.Errorf("%s left behind", p)
		}
	}
	if len(s.Entries["/e/sub"]) != 10 || len(s.Entries["/e"]) != 11 {
		t.Errorf("entries of /e: %d, of /e/sub: %d", len(s.Entries["/e"]), len(s.Entries["/e/sub"]))
	}
	for _, r := range c.reps {
		if !r.rep.TestKey(geometry.Key("/e/sub/g3")) {
			t.Errorf("%s: the filter lacks a re-keyed path", r.id())
		}
	}
	tests := []struct {
		name     string
		old, new string
		want     error
	}{
		{"destination exists", "/e", "/busy", store.ErrExists},
		{"into itself", "/e", "/e/sub/x", store.ErrInvalid},
		{"the root", "/", "/x", store.ErrInvalid},
		{"relative", "e", "/x", store.ErrInvalid},
	}
	for _, tc := range tests {
		before := c.converged()
		err := c.waitLeader().rep.Rekey(ctxFor(t, waitFor), tc.old, tc.new, nil)
		if !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
		c.unchanged(tc.name, before, true)
	}
}
