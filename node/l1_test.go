package node_test

import (
	"context"
	"fmt"
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

// TestL1Admission runs a hot set and then a one-time scan through a live
// cluster whose LRU lists hold 16 paths (a window of 160 uses): with
// l1_admission frequency the scan's paths, each used once in its window,
// never enter the LRU list, so the hot paths stay in the L1 filters and
// are found at L1 through another node; with lru the scan pushes them out
// and they are found only below L1 (L2 or the group multicast, L3).
func TestL1Admission(t *testing.T) {
	for _, tc := range []struct {
		admission string
		wantHotL1 func(hits, hot int) bool
	}{
		{namespace.L1AdmitFrequency, func(hits, hot int) bool { return hits == hot }},
		{namespace.L1AdmitLRU, func(hits, _ int) bool { return hits == 0 }},
	} {
		t.Run(tc.admission, func(t *testing.T) {
			t.Cleanup(func() { goleak.VerifyNone(t, goleakOptions()...) })
			log := rpctest.Logger(t)
			_, nodes := startJoined(t, log, 3, func(c *node.Config) {
				c.LRUEntries = 16
				c.L1Admission = tc.admission
				c.Placement = namespace.PlacementColocate // every file with /d, on one shard
			})
			checkGroup(t, 30*time.Second, nodes, []string{"n1", "n2", "n3"})
			shardsSettled(t, time.Minute, nodes, []string{"n1", "n2", "n3"}, 3)
			c := client.New(client.Options{Addrs: nodeAddrs(nodes), HomeCacheSize: -1})
			defer c.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			mustMkdir(t, ctx, c, "/d")
			var hot, scan []string
			for i := range 100 {
				scan = append(scan, fmt.Sprintf("/d/s%03d", i))
			}
			for i := range 8 {
				hot = append(hot, fmt.Sprintf("/d/h%d", i))
			}
			for _, p := range append(append([]string{}, scan...), hot...) {
				mustCreate(t, ctx, c, p)
			}
			// Every lookup through another node than the home is a use at
			// the home (its local check).
			var d rpc.LookupResponse
			if err := c.Call(ctx, nodetest.RPCAddr(nodes[0].Config()), rpc.MethodLookup, &rpc.LookupRequest{Path: "/d"}, &d); err != nil {
				t.Fatal(err)
			}
			var via *node.Node
			for _, n := range nodes {
				if n.ID() != d.Leader {
					via = n
					break
				}
			}
			lookup := func(p string) string {
				t.Helper()
				var r rpc.LookupResponse
				if err := c.Call(ctx, nodetest.RPCAddr(via.Config()), rpc.MethodLookup, &rpc.LookupRequest{Path: p}, &r); err != nil {
					t.Fatalf("lookup %s through %s: %v", p, via.ID(), err)
				}
				return r.Level
			}
			for range 20 { // the hot set: 160 uses, a window's worth
				for _, p := range hot {
					lookup(p)
				}
			}
			for _, p := range scan { // the scan: each path once
				lookup(p)
			}
			for _, n := range nodes {
				n.NS().SyncFilters()
			}
			hits := 0
			levels := map[string]int{}
			for _, p := range hot {
				l := lookup(p)
				levels[l]++
				if l == rpc.LevelL1 {
					hits++
				}
			}
			var lruLen int
			for _, n := range nodes {
				lruLen += n.NS().Stats().LRULen
			}
			t.Logf("%s: hot paths through %s (home %s): levels %v; LRU lists hold %d paths", tc.admission, via.ID(), d.Leader, levels, lruLen)
			if !tc.wantHotL1(hits, len(hot)) {
				t.Errorf("%s: %d of %d hot paths found at L1 after the scan (levels %v)", tc.admission, hits, len(hot), levels)
			}
		})
	}
}
