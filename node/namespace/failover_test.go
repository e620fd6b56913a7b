package namespace_test

import (
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ghba/ghba/node/namespace"
	"github.com/ghba/ghba/node/nodetest"
	"github.com/ghba/ghba/rpc"
	"github.com/ghba/ghba/rpc/rpctest"
)

// Fail-over of replicated shards (docs/design.md, "Replicated shards"):
// with three replicas of every shard, a node that dies takes nothing with
// it. The shards it led elect leaders among their surviving replicas, and
// a transaction it coordinated is finished (or aborted) by the next leader
// of its shard.

// TestFailoverKeepsWrites: writers create files through every node while
// one node is stopped; writes may fail only as unavailable while its
// shards elect new leaders, every acknowledged write is readable through
// the surviving nodes, new writes succeed once the fail-over is done, and
// everything is there after the node returns.
func TestFailoverKeepsWrites(t *testing.T) {
	c := nodetest.NewNamespaces(t, nodetest.NamespacesOptions{Nodes: 3, Replication: 3})
	for _, d := range []string{"/a", "/b", "/c"} {
		mustOK(t, via(c, "n1").mkdir(d, false), "mkdir %s", d)
	}
	var (
		mu      sync.Mutex
		acked   []string
		stopped atomic.Bool
	)
	running := []string{"n1", "n3"}
	halt := rpctest.Loop(t, 6, func(w, i int) {
		ids := c.IDs
		if stopped.Load() {
			ids = running
		}
		p := fmt.Sprintf("/%c/w%d-%d", "abc"[i%3], w, i)
		err := via(c, ids[i%len(ids)]).create(p)
		switch {
		case err == nil:
			mu.Lock()
			acked = append(acked, p)
			mu.Unlock()
		case errors.Is(err, fs.ErrNotExist) || !errors.Is(err, rpc.ErrUnavailable):
			t.Errorf("create %s: %v (want success or unavailable)", p, err)
		}
	})
	count := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(acked)
	}
	rpctest.Eventually(t, 20*time.Second, "writes before the stop", func() error {
		if count() < 100 {
			return fmt.Errorf("%d acknowledged", count())
		}
		return nil
	})
	stopped.Store(true)
	c.Stop("n2")
	before := count()
	rpctest.Eventually(t, 30*time.Second, "writes after the fail-over", func() error {
		if count() < before+100 {
			return fmt.Errorf("%d acknowledged since the stop", count()-before)
		}
		return nil
	})
	halt()
	t.Logf("%d writes acknowledged, %d after n2 stopped", count(), count()-before)
	tree := map[string]bool{"/a": true, "/b": true, "/c": true}
	for _, p := range acked {
		tree[p] = false
	}
	c.SettleAll()
	checkTree(c, t, tree)
	c.Start("n2")
	c.SettleAll()
	c.WaitFilters()
	checkTree(c, t, tree)
}

// TestCoordinatorFailover: the node leading a directory's shard dies in
// the middle of creating a child homed on another shard. After its commit
// point, the next leader of its shard finds the commit record and the
// file exists everywhere; before it, the next leader has no record, the
// child's shard discards its prepared part, and the name can be created
// again. Nothing waits for the dead node to return.
func TestCoordinatorFailover(t *testing.T) {
	cases := []struct {
		name   string
		point  string
		exists bool
	}{
		{"after the commit point", namespace.HookCommitted, true},
		{"before the commit point", namespace.HookPrepared, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := nodetest.NewNamespaces(t, nodetest.NamespacesOptions{Nodes: 3, Replication: 3})
			mustOK(t, via(c, "n1").mkdir("/t", false), "mkdir")
			p := homeOf(c, t, "/t")
			armed := crashHook(c.NS(p), tc.point, nil)
			x, err := createRemoteChild(t, c, p, "/t", armed)
			if !errors.Is(err, rpc.ErrUnavailable) {
				t.Fatalf("crashed create: %v", err)
			}
			c.Stop(p) // the coordinator's node dies with the transaction in its memory
			var live []string
			for _, id := range c.IDs {
				if id != p {
					live = append(live, id)
				}
			}
			rpctest.Eventually(t, 30*time.Second, "the outcome of "+x+" decided by shard "+p+"'s next leader", func() error {
				for _, id := range live {
					_, err := via(c, id).stat(x)
					switch {
					case tc.exists && err != nil, !tc.exists && !errors.Is(err, fs.ErrNotExist):
						return fmt.Errorf("stat %s via %s: %v", x, id, err)
					}
				}
				return nil
			})
			if !tc.exists {
				mustOK(t, via(c, live[0]).create(x), "create %s again", x)
			}
			c.SettleAll()
			c.Start(p)
			c.SettleAll()
			for _, id := range c.IDs {
				if _, err := via(c, id).stat(x); err != nil {
					t.Errorf("stat %s via %s after %s returned: %v", x, id, p, err)
				}
			}
		})
	}
}

// TestLeaderFromReplica: a node whose view of the cluster does not name a
// shard's new leader yet (gossip is late) asks a node that hosts one of
// the shard's replicas, which names the leader its replica knows: the
// request is served, without waiting for gossip.
func TestLeaderFromReplica(t *testing.T) {
	c := nodetest.NewNamespaces(t, nodetest.NamespacesOptions{Nodes: 3, Replication: 3,
		Tuning: namespace.Tuning{LeaderWait: 100 * time.Millisecond}})
	mustOK(t, via(c, "n1").mkdir("/d", false), "mkdir /d")
	home := homeOf(c, t, "/d")
	c.Stop(home)
	live := slices.DeleteFunc(slices.Clone(c.IDs), func(id string) bool { return id == home })
	// Wait until a surviving replica leads the shard, then make the
	// Directory forget who: the nodes know only the shard's replicas.
	rpctest.Eventually(t, 20*time.Second, "a new leader of "+home, func() error {
		_, err := via(c, live[0]).stat("/d")
		return err
	})
	c.Dir.UpdateShard(home, func(si *namespace.ShardInfo) { si.Leader = "" })
	for _, id := range live {
		if _, err := via(c, id).stat("/d"); err != nil {
			t.Errorf("stat /d via %s with no leader in the Directory: %v", id, err)
		}
		if err := via(c, id).create("/d/f-" + id); err != nil {
			t.Errorf("create under /d via %s with no leader in the Directory: %v", id, err)
		}
	}
}

// TestRequestWaitsForGossipAfterStart: a node whose view of the cluster is
// that of a node just started (no other node up yet, no other host of any
// shard, no leader) receives a request for a shard it hosts a replica of
// and another node leads. It waits for gossip, bounded by LeaderWait,
// instead of answering at once that the shard has no reachable leader (a
// request the CI's TestProcessOperations once saw fail right after a
// restart).
func TestRequestWaitsForGossipAfterStart(t *testing.T) {
	c := nodetest.NewNamespaces(t, nodetest.NamespacesOptions{Nodes: 3, Replication: 3, RaftTimeout: 2 * time.Second})
	mustOK(t, via(c, "n1").mkdir("/d", false), "mkdir /d")
	if err := c.HandOver("n1", "n2"); err != nil { // "/" is homed on shard n1
		t.Fatal(err)
	}
	restore := c.Dir.Blind("n1")
	rpctest.Eventually(t, 5*time.Second, "n1 sees n2 down", func() error {
		if up, _ := c.NS("n1").SeesPeer("n2"); up {
			return errors.New("n2 up")
		}
		return nil
	})
	base := c.NS("n1").Stats().LeaderWaits
	stat := make(chan error, 1)
	go func() {
		_, err := via(c, "n1").readdir("/", "", 10)
		stat <- err
	}()
	// The request must still be waiting when gossip arrives: poll for its
	// wait to start, then give the view back.
	rpctest.Eventually(t, 5*time.Second, "the request waits for a leader", func() error {
		select {
		case err := <-stat:
			t.Fatalf("readdir / through n1 answered before gossip came back: %v", err)
		default:
		}
		if c.NS("n1").Stats().LeaderWaits == base {
			return errors.New("not waiting yet")
		}
		return nil
	})
	restore()
	if err := <-stat; err != nil {
		t.Fatalf("readdir / through n1 once gossip came back: %v", err)
	}
}
