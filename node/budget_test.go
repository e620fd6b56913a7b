package node_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/ghba/ghba/node"
	"github.com/ghba/ghba/node/namespace"
	"github.com/ghba/ghba/node/nodetest"
	"github.com/ghba/ghba/rpc"
	"github.com/ghba/ghba/rpc/client"
	"github.com/ghba/ghba/rpc/rpctest"
	"go.uber.org/goleak"
)

// TestFilterMemoryBudget runs G-HBA on groups ga (a1, a2, a3) and gb (b1,
// b2) with filters of 300 KB. The members of ga have a budget of 1 MiB,
// room for two replicas in their L2 array: each holds its segment and
// fills the rest with its group-mates' filters (by id). The members of gb
// have a budget for every filter: they hold every other shard's and route
// like HBA, every path they are asked for in one hop at L2, never the
// group multicast, also for paths created after the replicas were first
// pulled (the extra holders get the changes pushed, as subscribers). The
// status reports the extra replicas and the budget.
func TestFilterMemoryBudget(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t, goleakOptions()...) })
	specs := []groupSpec{{"a1", "ga"}, {"a2", "ga"}, {"a3", "ga"}, {"b1", "gb"}, {"b2", "gb"}}
	budgetMiB := []int{1, 1, 1, 64, 64}
	nodes := startGroups(t, rpctest.Logger(t), specs, func(i int, c *node.Config) {
		c.FilterCapacity = 300_000 // 300 KB per replica
		c.FilterMemoryMB = budgetMiB[i]
		c.LRUEntries = 0 // no L1: every lookup tests the L2 array
		c.Placement = namespace.PlacementBalanced
	})
	checkGroup(t, 30*time.Second, nodes[:3], []string{"a1", "a2", "a3"})
	checkGroup(t, 30*time.Second, nodes[3:], []string{"b1", "b2"})

	wantL2 := func(n *node.Node) ([]string, error) {
		held, ok := n.Directory().(namespace.Segments).Held()
		if !ok {
			return nil, fmt.Errorf("%s: no segment yet", n.ID())
		}
		want := map[string]bool{}
		for _, o := range held {
			want[o] = true
		}
		if n.GroupName() == "gb" {
			for _, s := range specs {
				want[s.id] = s.id != n.ID()
			}
		} else {
			for _, s := range specs[:3] { // mates by id, while there is room
				if len(want) < 2 && s.id != n.ID() {
					want[s.id] = true
				}
			}
		}
		var out []string
		for id, ok := range want {
			if ok {
				out = append(out, id)
			}
		}
		slices.Sort(out)
		return out, nil
	}
	rpctest.Eventually(t, 60*time.Second, "L2 arrays hold the segment and the budget's replicas", func() error {
		for _, n := range nodes {
			want, err := wantL2(n)
			if err != nil {
				return err
			}
			if got := slices.Sorted(maps.Keys(n.NS().FilterSync().L2)); !slices.Equal(got, want) {
				return fmt.Errorf("%s (%s): L2 array %v, want %v", n.ID(), n.GroupName(), got, want)
			}
		}
		return nil
	})
	rpctest.Eventually(t, 60*time.Second, "replicas loaded", func() error {
		for _, n := range nodes {
			n.NS().SyncFilters()
		}
		return replicasCurrent(nodes)
	})
	for _, n := range nodes {
		st := n.Status()
		held, _ := n.Directory().(namespace.Segments).Held()
		if st.L2Members != st.ExtraReplicas+len(held) || st.FilterMemoryBudget != int64(n.Config().FilterMemoryMB)<<20 {
			t.Errorf("%s: status l2_members %d, extra_replicas %d, segment %d, budget %d", n.ID(), st.L2Members, st.ExtraReplicas, len(held), st.FilterMemoryBudget)
		}
	}

	client := client.New(client.Options{Addrs: nodeAddrs(nodes), HomeCacheSize: -1})
	defer client.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// A push of the changes reaches every holder, the extra ones too: once
	// every create has reached its child's shard and every leader has
	// pushed (SyncFilters waits for its pushes), every replica is at its
	// origin's version. On a starved machine a push can time out; the
	// next SyncFilters pushes again, so the test waits for a few rounds.
	paths := createSpread(t, ctx, client, nodes, 60, 4)
	rpctest.Eventually(t, 30*time.Second, "replicas at their origin's version after the creates", func() error {
		for _, n := range nodes {
			n.NS().SyncFilters()
		}
		return replicasCurrent(nodes)
	})
	for _, n := range nodes[3:] {
		before := n.NS().Stats().Multicasts
		for _, p := range paths {
			var r rpc.LookupResponse
			if err := client.Call(ctx, nodetest.RPCAddr(n.Config()), rpc.MethodLookup, &rpc.LookupRequest{Path: p}, &r); err != nil {
				t.Fatalf("lookup %s at %s: %v", p, n.ID(), err)
			}
			if r.Level != rpc.LevelL2 || r.Hops > 1 {
				t.Errorf("lookup %s at %s: level %s, %d hops; want L2 in at most one hop", p, n.ID(), r.Level, r.Hops)
			}
		}
		if m := n.NS().Stats().Multicasts - before; m != 0 {
			t.Errorf("%s sent %d L3 multicasts, want none", n.ID(), m)
		}
	}
}

// replicasCurrent reports an error unless every replica in every node's L2
// array is at the version of its shard's filter at the shard's leader.
func replicasCurrent(nodes []*node.Node) error {
	local := map[string]uint64{}
	for _, n := range nodes {
		maps.Copy(local, n.NS().FilterSync().Local)
	}
	for _, n := range nodes {
		for id, v := range n.NS().FilterSync().L2 {
			if want, ok := local[id]; !ok || v != want {
				return fmt.Errorf("%s holds %s's filter at version %d, its leader is at %d (led: %v; leaders' versions %v)", n.ID(), id, v, want, ok, local)
			}
		}
	}
	return nil
}
