package shard_test

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/ghba/ghba/node/shard"
	"github.com/ghba/ghba/node/store"
	"github.com/ghba/ghba/rpc/rpctest"
)

// createText creates file p with text.
func createText(p, text string) *store.Batch {
	var b store.Batch
	b.RequireInodeAbsent(p)
	b.PutInode(p, store.Inode{Type: store.TypeFile, Mode: 0o644, Nlink: 1, Size: int64(len(text)), Text: text, Version: 1})
	b.PutEntry(path.Dir(p), store.Entry{Name: path.Base(p), Type: store.TypeFile, Home: shardID})
	return &b
}

// setText replaces the text of file p ("" removes it).
func setText(p, text string) *store.Batch {
	var b store.Batch
	b.PutInode(p, store.Inode{Type: store.TypeFile, Mode: 0o644, Nlink: 1, Size: int64(len(text)), Text: text, Version: 2})
	return &b
}

// waitTexts waits until every replica of rs finds exactly want for words
// below root.
func waitTexts(t *testing.T, rs []*replica, words, root string, want ...string) {
	t.Helper()
	slices.Sort(want)
	for _, r := range rs {
		rpctest.Eventually(t, waitFor, fmt.Sprintf("%s finds %q below %s", r.id(), words, root), func() error {
			got, total, err := r.rep.SearchText(ctxFor(t, waitFor), words, root, 0, 0)
			if err != nil {
				return err
			}
			slices.Sort(got)
			if !slices.Equal(got, want) || int(total) != len(want) {
				return fmt.Errorf("found %v (total %d), want %v", got, total, want)
			}
			return nil
		})
	}
}

// TestTextIndex checks that every replica's text index follows the log:
// creates, text changes, removals and a directory re-key; that a clean
// restart keeps the index and a lost one is rebuilt from the store; and
// that a replica that catches up by a snapshot indexes what it holds.
func TestTextIndex(t *testing.T) {
	noLeaks(t)
	c := newCluster(t, 3, withTuning(func(tun *shard.Tuning) {
		tun.SnapshotThreshold, tun.TrailingLogs, tun.SnapshotInterval = 32, 8, 20*time.Millisecond
	}))
	c.mustApply(mkdir("/"), mkdir("/docs"),
		createText("/docs/raft.md", "Raft elects a leader; the leader replicates its log."),
		createText("/docs/bloom.md", "A Bloom filter answers membership queries."),
		create("/docs/plain"),
		createText("/notes", "the leader of the cluster"))
	all := c.open()
	waitTexts(t, all, "leader", "/", "/docs/raft.md", "/notes")
	waitTexts(t, all, "leader log", "/", "/docs/raft.md")
	waitTexts(t, all, "leader", "/docs", "/docs/raft.md")

	// A text replaced and one removed; a file removed.
	c.mustApply(setText("/notes", "nothing to see"), setText("/docs/bloom.md", ""), remove("/docs/raft.md"))
	waitTexts(t, all, "leader", "/")
	waitTexts(t, all, "membership", "/")
	waitTexts(t, all, "nothing", "/", "/notes")

	// A directory re-keyed: its texts are found under the new path.
	c.mustApply(createText("/docs/gossip.md", "Serf spreads membership by gossip"))
	if err := c.waitLeader().rep.Rekey(ctxFor(t, waitFor), "/docs", "/papers", nil); err != nil {
		t.Fatalf("rekey: %v", err)
	}
	waitTexts(t, all, "gossip", "/", "/papers/gossip.md")

	// A clean restart keeps the index; entries applied while the replica
	// was down are indexed when the log is replayed to it.
	follower := c.others(c.waitLeader())[0]
	follower.close()
	c.mustApply(createText("/later", "written while a follower was down"))
	follower.open()
	c.converged()
	waitTexts(t, []*replica{follower}, "gossip", "/", "/papers/gossip.md")
	waitTexts(t, []*replica{follower}, "follower written", "/", "/later")

	// An index lost (a crash before it was first written, a damaged
	// disk) is rebuilt from the store at the next open.
	follower.close()
	if err := os.RemoveAll(filepath.Join(follower.dir, "text")); err != nil {
		t.Fatal(err)
	}
	follower.open()
	waitTexts(t, []*replica{follower}, "gossip", "/", "/papers/gossip.md")
	waitTexts(t, []*replica{follower}, "nothing", "/", "/notes")

	// A new replica that installs a snapshot indexes the texts it holds.
	c.writeUntilSnapshot(c.converged().Applied, "/s")
	r := c.add(startNode(t, "n4"))
	c.converged()
	if last := raftStat(t, r, "last_snapshot_index"); last == 0 {
		t.Error("n4 caught up without a snapshot")
	}
	waitTexts(t, []*replica{r}, "gossip", "/", "/papers/gossip.md")
	waitTexts(t, []*replica{r}, "follower", "/", "/later")
}
