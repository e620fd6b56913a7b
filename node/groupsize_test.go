package node_test

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ghba/ghba/node"
	"github.com/ghba/ghba/node/nodetest"
	"github.com/ghba/ghba/routing"
	"github.com/ghba/ghba/rpc/client"
	"github.com/ghba/ghba/rpc/rpctest"
	"go.uber.org/goleak"
)

// TestGroupSizeAuto runs 4 auto nodes with max_group_size auto (R = 2)
// whose leaders see, through the Tuning hook on top of what they measure,
// a multicast that costs much per member: the model chooses M = 2 and the
// group of 4 splits into 2 + 2 without any joiner. Then the multicast's
// cost stops growing with the members: the leaders choose M = 4 and the
// two groups merge back into one. Paths stay reachable through it all,
// and Groups shows the M each leader applies and its inputs.
func TestGroupSizeAuto(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t, goleakOptions()...) })
	log := rpctest.Logger(t)
	var perMsg atomic.Value
	perMsg.Store(50.0)
	tun := nodetest.Tuning()
	tun.GroupSizeInterval = 200 * time.Millisecond
	tun.GroupSizeInputs = func(in *routing.GroupSizeInputs) {
		in.PLRU, in.PL2, in.RTT, in.PerMsg = 0.5, 0.9, 0.2, perMsg.Load().(float64)
	}
	var first *node.Config
	var nodes []*node.Node
	for i := 1; i <= 4; i++ {
		c := autoConfig(t, i, 0, first)
		c.MaxGroupSize, c.Replication = node.GroupSizeAuto, 2
		if first == nil {
			first = &c
		}
		nodes = append(nodes, nodetest.Start(t, c, log, node.WithTuning(tun)))
	}
	groups := checkGroups(t, 2*time.Minute, nodes, 2, 2)
	t.Logf("M = 2: groups %v", groups)
	cl := client.New(client.Options{Addrs: []string{nodetest.RPCAddr(nodes[0].Config())}, HomeCacheSize: -1})
	defer cl.Close()
	paths := makePaths(t, cl, 12)
	statEverywhere(t, 30*time.Second, nodes, paths)
	wantSizes(t, nodes, 2)

	perMsg.Store(0.0)
	groups = checkGroups(t, 2*time.Minute, nodes, 4, 1)
	t.Logf("M = 4: groups %v", groups)
	var splits, merges uint64
	for _, n := range nodes {
		splits += n.Status().Splits
		merges += n.Status().Merges
	}
	if splits < 1 || merges < 1 {
		t.Errorf("%d splits and %d merges, want at least one of each", splits, merges)
	}
	statEverywhere(t, 30*time.Second, nodes, paths)
	wantSizes(t, nodes, 4)
	shardsInGroupsR(t, time.Minute, nodes, 2)
	waitSettled(t, time.Minute, nodes)
	cl.Close()
	for _, n := range slices.Backward(nodes) {
		nodetest.Shutdown(t, n)
	}
}

// wantSizes waits until Groups through every node shows each group with
// the maximum size m, chosen by its leader, with the model's inputs.
func wantSizes(t *testing.T, nodes []*node.Node, m int) {
	t.Helper()
	rpctest.Eventually(t, 30*time.Second, fmt.Sprintf("every group shows max_group_size auto %d", m), func() error {
		for _, n := range nodes {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			r := n.Groups(ctx)
			cancel()
			for _, g := range r.Groups {
				c := g.SizeChoice
				if !g.Auto || g.MaxGroupSize != m || c == nil || c.M != m || c.Servers != 4 || len(c.Gamma) == 0 {
					return fmt.Errorf("%s: group %s: auto %v, max %d, choice %+v", n.ID(), g.Group, g.Auto, g.MaxGroupSize, c)
				}
			}
		}
		return nil
	})
}
