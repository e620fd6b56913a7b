package namespace_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/ghba/ghba/node/nodetest"
	"github.com/ghba/ghba/rpc/rpctest"
)

// TestFilterPropagation: a node's local and LRU filters reach the other
// nodes' arrays as deltas; a replica that missed a delta refuses the next
// one and pulls the full filter; a restarted node's replicas are replaced.
func TestFilterPropagation(t *testing.T) {
	rt := nodetest.SmallRouting()
	rt.PropagateInterval = time.Hour // only the threshold triggers pushes
	rt.PropagateThreshold = 0.001
	c := nodetest.NewNamespaces(t, nodetest.NamespacesOptions{Nodes: 2, Routing: rt})
	a, b := c.NS("n1"), c.NS("n2")
	// Files homed on n1 only.
	for i := range 200 {
		a.LocalAdd(fmt.Sprintf("/prop/%d", i))
	}
	rpctest.Eventually(t, 5*time.Second, "threshold push arrived", func() error { return c.FiltersInSync() })
	sent := a.Stats().PushesSent
	if sent == 0 {
		t.Fatalf("no pushes counted")
	}
	r := b.L2Query("/prop/7")
	if !r.Hit() || r.ID != "n1" {
		t.Fatalf("n2's L2 array: %+v", r)
	}
	// n2's replica of n1 loses a version: the next delta does not apply,
	// n2 pulls the full filter.
	b.ResetL2Replica("n1")
	for i := range 50 {
		a.LocalAdd(fmt.Sprintf("/prop2/%d", i))
	}
	rpctest.Eventually(t, 5*time.Second, "replica repaired", func() error { return c.FiltersInSync() })
	if b.Stats().VersionMismatches == 0 || b.Stats().PullsSent == 0 {
		t.Errorf("no mismatch/pull counted: %+v", b.Stats())
	}
	r = b.L2Query("/prop/7")
	if !r.Hit() {
		t.Errorf("after repair: %+v", r)
	}
	// A restart rebuilds n1's filter from its store (where none of these
	// paths exist) with version 0; n2's replica follows.
	c.Restart("n1")
	c.WaitFilters()
	r = b.L2Query("/prop/7")
	if r.Hit() {
		t.Errorf("stale replica after the origin restarted: %+v", r)
	}
	// The interval triggers a push of small changes.
	rt2 := nodetest.SmallRouting()
	rt2.PropagateThreshold = 1
	rt2.PropagateInterval = 20 * time.Millisecond
	c2 := nodetest.NewNamespaces(t, nodetest.NamespacesOptions{Nodes: 2, Routing: rt2})
	c2.NS("n1").LocalAdd("/tiny")
	t.Cleanup(func() {
		if t.Failed() {
			for _, id := range c2.IDs {
				ns := c2.NS(id)
				t.Logf("%s: %+v; needFull %v; stats %+v", id, ns.FilterSync(), ns.NeedFull(), ns.Stats())
			}
		}
	})
	rpctest.Eventually(t, 5*time.Second, "interval push arrived", func() error { return c2.FiltersInSync() })
}
