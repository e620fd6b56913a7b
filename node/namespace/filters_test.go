package node

import (
	"fmt"
	"testing"
	"time"

	"github.com/ghba/ghba/routing"
)

// TestFilterPropagation: a node's local and LRU filters reach the other
// nodes' arrays as deltas; a replica that missed a delta refuses the next
// one and pulls the full filter; a restarted node's replicas are replaced.
func TestFilterPropagation(t *testing.T) {
	cfg := nsTestConfig()
	cfg.PropagateInterval = time.Hour // only the threshold triggers pushes
	cfg.PropagateThreshold = 0.001
	c := newNSCluster(t, 2, cfg)
	a, b := c.ns("n1"), c.ns("n2")
	// Files homed on n1 only.
	for i := range 200 {
		a.localAdd(fmt.Sprintf("/prop/%d", i))
	}
	deadline := time.Now().Add(5 * time.Second)
	for !c.filtersInSync() {
		if time.Now().After(deadline) {
			t.Fatal("threshold push did not arrive")
		}
		time.Sleep(10 * time.Millisecond)
	}
	sent := a.Stats().PushesSent
	if sent == 0 {
		t.Fatalf("no pushes counted")
	}
	k := routing.HashPath(a.hash, "/prop/7")
	b.arrMu.RLock()
	r := b.l2.QueryKey(k)
	b.arrMu.RUnlock()
	if !r.Hit() || r.ID != "n1" {
		t.Fatalf("n2's L2 array: %+v", r)
	}
	// n2's replica of n1 loses a version: the next delta does not apply,
	// n2 pulls the full filter.
	b.arrMu.Lock()
	_ = b.l2.Replace("n1", routing.NewFilter(b.localGeo))
	b.arrMu.Unlock()
	for i := range 50 {
		a.localAdd(fmt.Sprintf("/prop2/%d", i))
	}
	deadline = time.Now().Add(5 * time.Second)
	for !c.filtersInSync() {
		if time.Now().After(deadline) {
			t.Fatal("replica not repaired")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if b.Stats().VersionMismatches == 0 || b.Stats().PullsSent == 0 {
		t.Errorf("no mismatch/pull counted: %+v", b.Stats())
	}
	b.arrMu.RLock()
	r = b.l2.QueryKey(k)
	b.arrMu.RUnlock()
	if !r.Hit() {
		t.Errorf("after repair: %+v", r)
	}
	// A restart rebuilds n1's filter from its store (where none of these
	// paths exist) with version 0; n2's replica follows.
	c.restartNode("n1")
	c.waitFilters()
	b.arrMu.RLock()
	r = b.l2.QueryKey(k)
	b.arrMu.RUnlock()
	if r.Hit() {
		t.Errorf("stale replica after the origin restarted: %+v", r)
	}
	// The interval triggers a push of small changes.
	cfg2 := nsTestConfig()
	cfg2.PropagateThreshold = 1
	cfg2.PropagateInterval = 20 * time.Millisecond
	c2 := newNSCluster(t, 2, cfg2)
	c2.ns("n1").localAdd("/tiny")
	deadline = time.Now().Add(5 * time.Second)
	for !c2.filtersInSync() {
		if time.Now().After(deadline) {
			for _, id := range c2.ids {
				ns := c2.ns(id)
				ns.localMu.RLock()
				lv, lch := ns.local.Filter().Version(), ns.local.Filter().ChangedBits()
				ns.localMu.RUnlock()
				ns.lruMu.Lock()
				rv, rch := ns.lru.Filter().Version(), ns.lru.Filter().ChangedBits()
				ns.lruMu.Unlock()
				ns.arrMu.RLock()
				ids := ns.l2.IDs()
				var vs []uint64
				for _, o := range ids {
					v1, _ := ns.l2.Version(o)
					v2, _ := ns.l1.Version(o)
					vs = append(vs, v1, v2)
				}
				ns.arrMu.RUnlock()
				ns.prop.mu.Lock()
				t.Logf("%s: local v%d ch%d lru v%d ch%d; replicas %v %v; needFull %v; stats %+v", id, lv, lch, rv, rch, ids, vs, ns.prop.needFull, ns.Stats())
				ns.prop.mu.Unlock()
			}
			t.Fatal("interval push did not arrive")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
