package shard_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/ghba/ghba/node/raftmux"
	"github.com/ghba/ghba/node/shard"
	"github.com/ghba/ghba/node/store"
	"github.com/ghba/ghba/routing"
	"github.com/ghba/ghba/rpc/rpctest"
)

// writeTree writes the test tree: directory /d with n files, of which
// every third is removed again.
func writeTree(c *cluster, n int) {
	c.t.Helper()
	c.mustApply(mkdir("/d"))
	for i := range n {
		c.mustApply(create(fmt.Sprintf("/d/f%03d", i)))
	}
	for i := 0; i < n; i += 3 {
		c.mustApply(remove(fmt.Sprintf("/d/f%03d", i)))
	}
}

// raftStat returns a numeric statistic of r's Raft.
func raftStat(t testing.TB, r *replica, name string) uint64 {
	t.Helper()
	v, err := strconv.ParseUint(r.rep.Stats()[name], 10, 64)
	if err != nil {
		t.Fatalf("%s: raft statistic %s: %v", r.id(), name, err)
	}
	return v
}

// TestRestart closes a replica and opens it again from its directory: its
// store and filter come back, and the entries Raft replays (the whole log,
// or the log after a snapshot) are skipped, not applied again; a follower
// applies exactly the entries written while it was down. With each log
// store.
func TestRestart(t *testing.T) {
	type test struct {
		name     string
		replicas int
		snapshot bool // the replica snapshots (and truncates its log) first
		follower bool // restart a follower while the others write
		logs     string
	}
	var tests []test
	for _, logs := range shard.LogStores {
		tests = append(tests,
			test{name: "single", replicas: 1},
			test{name: "single after snapshot", replicas: 1, snapshot: true},
			test{name: "follower", replicas: 3, follower: true},
			test{name: "follower after snapshot", replicas: 3, follower: true, snapshot: true},
			test{name: "leader of three", replicas: 3})
		for i := len(tests) - 5; i < len(tests); i++ {
			tests[i].logs, tests[i].name = logs, logs+"/"+tests[i].name
		}
	}
	noLeaks(t) // (for the parallel subtests: when they are all done)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := newCluster(t, tc.replicas, withLogStore(tc.logs), withTuning(func(tun *shard.Tuning) { tun.TrailingLogs = 4 }))
			writeTree(c, 30)
			before := c.converged()
			r := c.waitLeader()
			if tc.follower {
				r = c.reps[len(c.reps)-1]
			}
			if tc.snapshot {
				if err := shard.TakeSnapshot(r.rep); err != nil {
					t.Fatal(err)
				}
			}
			r.close()
			down := 0
			if tc.follower {
				for i := range 10 {
					c.mustApply(create(fmt.Sprintf("/down/f%d", i)))
					down++
				}
			}
			r.open()
			if !r.rep.HasState() {
				t.Error("HasState false after reopening")
			}
			if err := r.rep.Bootstrap(); err != nil {
				t.Errorf("Bootstrap of a reopened replica: %v", err)
			}
			// Raft replays the log in order: once this entry is applied,
			// everything before it was replayed.
			c.mustApply(create("/after"))
			after := c.converged()
			if got, want := r.rep.Store().Stats().LogEntries, uint64(down+1); got != want {
				t.Errorf("the reopened replica applied %d entries, want %d (those written since it closed)", got, want)
			}
			if len(after.Inodes) != len(before.Inodes)+down+1 {
				t.Errorf("%d inodes after reopening, %d before, %d written since", len(after.Inodes), len(before.Inodes), down+1)
			}
			for p, ino := range before.Inodes {
				if !reflect.DeepEqual(after.Inodes[p], ino) {
					t.Errorf("%s: %+v after reopening, %+v before", p, after.Inodes[p], ino)
				}
			}
			if tc.snapshot {
				if last := raftStat(t, r, "last_snapshot_index"); last == 0 {
					t.Error("no snapshot after reopening")
				}
			}
		})
	}
}

// TestSnapshotInstall lets the leader of a shard snapshot and truncate its
// log (SnapshotThreshold, TrailingLogs), with a directory re-keyed before,
// then adds brand-new replicas: they catch up by installing the snapshot,
// hold what the leader holds with a filter that knows every path, and
// come back from their directories after a restart.
func TestSnapshotInstall(t *testing.T) {
	noLeaks(t)
	c := newCluster(t, 1, withTuning(func(tun *shard.Tuning) {
		tun.SnapshotThreshold, tun.TrailingLogs, tun.SnapshotInterval = 32, 8, 20*time.Millisecond
	}), withStore(func(o *store.Options) { o.RekeyStepKeys = 7 }))
	writeTree(c, 60)
	l := c.waitLeader()
	if err := l.rep.Rekey(ctxFor(t, waitFor), "/d", "/e", nil); err != nil {
		t.Fatalf("rekey: %v", err)
	}
	rekeyed := c.converged().Applied
	for i := range 40 {
		c.mustApply(create(fmt.Sprintf("/e/g%03d", i)))
	}
	// The leader's log no longer holds the re-key.
	c.writeUntilSnapshot(rekeyed, "/e/s")
	applied := c.converged().Applied

	for _, id := range []string{"n2", "n3"} {
		r := c.add(startNode(t, id))
		s := c.converged()
		if last := raftStat(t, r, "last_snapshot_index"); last == 0 {
			t.Errorf("%s caught up without a snapshot", id)
		}
		// It applied the log after the snapshot only.
		if n := r.rep.Store().Stats().LogEntries; n >= applied/2 {
			t.Errorf("%s applied %d log entries of %d", id, n, applied)
		}
		if _, ok := s.Inodes["/e/f001"]; !ok || s.Rekeys != 0 {
			t.Errorf("%s: /e/f001 missing or %d re-keys pending", id, s.Rekeys)
		}
		for p := range s.Inodes {
			if len(p) > 2 && p[:3] == "/d/" {
				t.Errorf("%s: %s is still under the re-keyed directory", id, p)
			}
		}
	}
	newest := c.reps[len(c.reps)-1]
	newest.reopen()
	c.mustApply(create("/e/after-restart"))
	c.converged()
	if n := newest.rep.Store().Stats().LogEntries; n != 1 {
		t.Errorf("the reopened replica applied %d entries, want 1", n)
	}

	// A replica that falls behind the leader's log while it is down gets
	// a snapshot too: it replaces what its store held (removed paths
	// leave its filter).
	lagging := c.reps[1]
	behind := raftStat(t, lagging, "last_log_index")
	lagging.close()
	for i := range 40 {
		c.mustApply(remove(fmt.Sprintf("/e/g%03d", i)))
	}
	c.writeUntilSnapshot(behind, "/e/h")
	written := c.converged().Applied - behind
	lagging.open()
	s := c.converged()
	if n := lagging.rep.Store().Stats().LogEntries; n >= written {
		t.Errorf("the lagging replica applied %d entries of the %d written while it was down: no snapshot", n, written)
	}
	if _, ok := s.Inodes["/e/g000"]; ok {
		t.Error("/e/g000 was removed")
	}
}

// writeUntilSnapshot creates files prefix0, prefix1, … until the leader's
// log starts after index (it snapshotted past it, and truncated its log
// up to TrailingLogs entries before the snapshot).
func (c *cluster) writeUntilSnapshot(index uint64, prefix string) {
	c.t.Helper()
	for i := 0; ; i++ {
		if last := raftStat(c.t, c.waitLeader(), "last_snapshot_index"); last > index+c.tune.TrailingLogs {
			return
		}
		if i == 2000 {
			c.t.Fatalf("no snapshot past %d after %d writes", index, i)
		}
		c.mustApply(create(fmt.Sprintf("%s%d", prefix, i)))
	}
}

// TestRestoreDuringRekey restores a replica from a copy of a store taken
// while a re-key was half done (as a snapshot's Persist may be): the
// restore completes the re-key and the replica ends as the one that made
// the copy, filter included.
func TestRestoreDuringRekey(t *testing.T) {
	noLeaks(t)
	c := newCluster(t, 1, withStore(func(o *store.Options) { o.RekeyStepKeys = 1 }))
	writeTree(c, 12)
	l := c.waitLeader()
	// Hold the filter: the re-key stops at the first inode it moves,
	// before its last step.
	locked, release := make(chan struct{}), make(chan struct{})
	go l.rep.Filter(func(*routing.CountingFilter) { close(locked); <-release })
	<-locked
	rekeyed := make(chan error, 1)
	go func() { rekeyed <- l.rep.Rekey(context.Background(), "/d", "/e", nil) }()
	rpctest.Eventually(t, waitFor, "the re-key started", func() error {
		rks, err := l.rep.Store().PendingRekeys(context.Background())
		if err == nil && len(rks) == 0 {
			err = errors.New("no re-key pending")
		}
		return err
	})
	var backup bytes.Buffer
	if _, err := l.rep.Store().Backup(context.Background(), &backup); err != nil {
		t.Fatal(err)
	}
	close(release)
	if err := <-rekeyed; err != nil {
		t.Fatalf("rekey: %v", err)
	}
	want, err := stateOf(l)
	if err != nil {
		t.Fatal(err)
	}

	fresh := c.newReplica(startNode(t, "n2"))
	if err := shard.RestoreSnapshot(fresh.rep, io.NopCloser(&backup)); err != nil {
		t.Fatalf("restore: %v", err)
	}
	got, err := stateOf(fresh)
	if err != nil {
		t.Fatal(err)
	}
	if d := want.diff(got); d != "" {
		t.Errorf("restored during a re-key: %s", d)
	}
}

// TestReopenAfterInterruptedRestore reopens a replica whose store was left
// by a restore that did not finish (as when the process stops while it
// installs a snapshot): the store refuses every call until a restore
// succeeds, so the replica restores it from its newest snapshot, replays
// the log after it, and comes back whole; without a snapshot, Open fails.
func TestReopenAfterInterruptedRestore(t *testing.T) {
	noLeaks(t) // (for the parallel subtests: when they are all done)
	for _, snapshot := range []bool{true, false} {
		t.Run(fmt.Sprintf("snapshot=%v", snapshot), func(t *testing.T) {
			t.Parallel()
			c := newCluster(t, 1, withTuning(func(tun *shard.Tuning) { tun.TrailingLogs = 4 }))
			writeTree(c, 30)
			r := c.waitLeader()
			if snapshot {
				if err := shard.TakeSnapshot(r.rep); err != nil {
					t.Fatal(err)
				}
			}
			for i := range 10 {
				c.mustApply(create(fmt.Sprintf("/d/g%d", i)))
			}
			before := c.converged()
			r.close()
			interruptRestore(t, r.dir, c.store)

			if !snapshot {
				layer, err := r.node.mux.Layer("shard/" + shardID)
				if err != nil {
					t.Fatal(err)
				}
				_, err = shard.Open(context.Background(), shard.Options{Shard: shardID, NodeID: r.id(), Dir: r.dir,
					Transport: raftmux.NewTransport(layer, rpctest.HCLogger(t, "transport")), Geometry: geometry, Store: c.store})
				if !errors.Is(err, store.ErrRestoreIncomplete) {
					t.Errorf("Open: %v, want ErrRestoreIncomplete", err)
				}
				return
			}
			r.open()
			c.mustApply(create("/after"))
			after := c.converged()
			if _, ok := after.Inodes["/after"]; !ok {
				t.Error("/after missing")
			}
			delete(after.Inodes, "/after")
			if d := keyDiff(before.Inodes, after.Inodes); len(after.Inodes) != len(before.Inodes) || d != "[]" {
				t.Errorf("%d inodes, %d before: %s", len(after.Inodes), len(before.Inodes), d)
			}
			if err := r.rep.Halted(); err != nil {
				t.Errorf("halted: %v", err)
			}
		})
	}
}

// interruptRestore leaves the store of the closed replica in dir as a
// restore that did not finish does: a damaged copy of itself is refused
// once the old contents are gone.
func interruptRestore(t *testing.T, dir string, opts store.Options) {
	t.Helper()
	ctx := context.Background()
	st := openStore(t, dir, opts)
	var backup bytes.Buffer
	if _, err := st.Backup(ctx, &backup); err != nil {
		t.Fatal(err)
	}
	if err := st.Restore(ctx, bytes.NewReader(backup.Bytes()[:backup.Len()/2])); !errors.Is(err, store.ErrRestoreIncomplete) {
		t.Fatalf("restoring half a backup: %v", err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestLogStoreKept: a replica keeps the log store it was created with
// when opened with another configured.
func TestLogStoreKept(t *testing.T) {
	noLeaks(t)
	for _, tc := range []struct{ created, then, file string }{
		{shard.LogStoreBoltDB, shard.LogStoreWAL, "raft.db"},
		{shard.LogStoreWAL, shard.LogStoreBoltDB, "wal"},
	} {
		t.Run(tc.created, func(t *testing.T) {
			c := newCluster(t, 1, withLogStore(tc.created))
			writeTree(c, 10)
			before := c.converged()
			r := c.reps[0]
			r.close()
			c.logs = tc.then
			r.open()
			c.waitLeader()
			c.mustApply(create("/after"))
			after := c.converged()
			if len(after.Inodes) != len(before.Inodes)+1 {
				t.Errorf("%d inodes after reopening with %s, %d before and 1 written since", len(after.Inodes), tc.then, len(before.Inodes))
			}
			if _, err := os.Stat(filepath.Join(r.dir, "raft", tc.file)); err != nil {
				t.Errorf("the %s log is gone: %v", tc.created, err)
			}
		})
	}
}
