package main

// Multi-process tests of replicated shards (docs/design.md, "Replicated
// shards"): agent processes with replication 3, killed with SIGKILL and
// restarted, some with their data directory deleted. Skipped with -short.
//
//	nice -n 10 go test -tags hashicorpmetrics -race -run 'ProcessWipe|ProcessKillRestart/R=3' -count=1 -v ./cmd/ghba/

import (
	"context"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/ghba/ghba/rpc"
)

// waitFailover waits until the shard named after v (which v led) has a
// new leader among live and a sample of its paths answers through every
// live node; it returns how long that took from the call.
func (c *procCluster) waitFailover(m *procModel, v *procNode, live []*procNode) time.Duration {
	c.t.Helper()
	start := time.Now()
	sample := procSample(m.homedOn(v.id), 8)
	c.waitFor("shard "+v.id+" failed over", procReadyTimeout, func() { c.checkRunning(live...) }, func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), procRPCTimeout)
		defer cancel()
		ss, err := c.client(live[0]).Shards(ctx)
		if err != nil {
			return false, err.Error()
		}
		i := slices.IndexFunc(ss.Shards, func(s rpc.ShardInfo) bool { return s.Shard == v.id })
		if i < 0 || ss.Shards[i].Leader == "" || ss.Shards[i].Leader == v.id {
			return false, fmt.Sprintf("shards %+v", ss.Shards)
		}
		for j, p := range sample {
			n := live[j%len(live)]
			if _, err := c.client(n).Stat(ctx, p); err != nil {
				return false, fmt.Sprintf("stat %s via %s: %v", p, n.id, err)
			}
		}
		return true, ""
	})
	d := time.Since(start)
	c.t.Logf("shard %s failed over in %v (from the check's start)", v.id, d.Round(time.Millisecond))
	return d
}

// replicaFiles returns, for every shard replica node n hosts, the paths
// its store holds.
func (c *procCluster) replicaFiles(n *procNode) (map[string]int64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), procRPCTimeout)
	defer cancel()
	st, err := c.client(n).Status(ctx, n.rpcAddr())
	if err != nil {
		return nil, err
	}
	out := map[string]int64{}
	for _, r := range st.Replicas {
		out[r.Shard] = r.Files
	}
	return out, nil
}

// TestProcessWipeRestart: R=3, one group of 3 agent processes. node2 is
// killed with SIGKILL while clients write, its data directory deleted, and
// it is started again from the same config. It comes back empty, with a
// new incarnation: every shard's leader adds its new replica, which
// catches up (snapshot or log) before it votes, and removes the lost one;
// the cluster is back to 3 caught-up replicas of every shard, and every
// acknowledged write is readable. Then node3 is killed too: the shards it
// led fail over to node1 and the rebuilt node2, and every path still
// answers — node2's replicas hold the data, not just the name.
func TestProcessWipeRestart(t *testing.T) {
	c := newProcClusterR(t, 3, 3)
	c.startAll()
	m := c.rootedModel()
	c.populate(m, c.nodes, procTops("w", 3), 3, 6)
	c.verify("before any fault", m, c.nodes, nil)
	v := c.nodes[1]
	live := []*procNode{c.nodes[0], c.nodes[2]}

	c.killUnderWriters(m, "wipe", v)
	c.waitFailover(m, v, live)

	if err := os.RemoveAll(v.dataDir); err != nil {
		t.Fatal(err)
	}
	t.Logf("deleted %s's data directory", v.id)
	c.start(v)
	c.waitReady(v.id+" back, empty, and every shard at 3 caught-up replicas", c.nodes...)
	c.resolveUncertain(m, c.nodes)
	c.verify("after "+v.id+" came back without its data", m, c.nodes, nil)
	m.settled()

	// node2's replicas hold what the leaders hold.
	ctx, cancel := context.WithTimeout(context.Background(), procRPCTimeout)
	ss, err := c.client(c.nodes[0]).Shards(ctx)
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	files, err := c.replicaFiles(v)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range ss.Shards {
		if got, ok := files[s.Shard]; !ok || got != s.Files {
			t.Errorf("%s's replica of shard %s holds %d paths (hosted %v); its leader %s holds %d", v.id, s.Shard, got, ok, s.Leader, s.Files)
		}
	}

	// Lose node3 too: node1 and the rebuilt node2 are a majority of every
	// shard.
	v3 := c.nodes[2]
	c.kill(v3)
	survivors := []*procNode{c.nodes[0], v}
	c.waitFailover(m, v3, survivors)
	c.verify("with "+v3.id+" killed after "+v.id+" was rebuilt", m, survivors, nil)
	c.populate(m, survivors, []string{"/after-wipe"}, 1, 4)
	c.start(v3)
	c.waitReady(v3.id+" restarted", c.nodes...)
	c.verify("whole again", m, c.nodes, nil)
}
