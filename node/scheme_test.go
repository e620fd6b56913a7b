package node_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"slices"
	"strings"
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

// TestSchemeHBA runs scheme hba (HBA §3) on two groups of two with no
// filter memory to spare and no L1: every node still holds a replica of
// every shard's filter it does not lead (HBA replicates them all, whatever
// the budget), so every path is found through every node at L2, with no
// group multicast (L3) and no L4 step.
func TestSchemeHBA(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t, goleakOptions()...) })
	specs := []groupSpec{{"a1", "ga"}, {"a2", "ga"}, {"b1", "gb"}, {"b2", "gb"}}
	log := rpctest.Logger(t)
	nodes := startGroups(t, log, specs, func(_ int, c *node.Config) {
		c.Scheme = namespace.SchemeHBA
		c.LRUEntries = 0
		c.FilterMemoryMB = 0
	})
	checkGroup(t, 30*time.Second, nodes[:2], []string{"a1", "a2"})
	checkGroup(t, 30*time.Second, nodes[2:], []string{"b1", "b2"})
	all := []string{"a1", "a2", "b1", "b2"}
	rpctest.Eventually(t, 60*time.Second, "every shard's filter led or replicated on every node", func() error {
		for _, n := range nodes {
			n.NS().SyncFilters()
			have := slices.Collect(maps.Keys(n.NS().FilterSync().L2))
			for _, r := range n.Status().Replicas {
				if r.Leading {
					have = append(have, r.Shard)
				}
			}
			for _, s := range all {
				if !slices.Contains(have, s) {
					return fmt.Errorf("%s: neither leads nor holds a replica of %s (has %v)", n.ID(), s, have)
				}
			}
		}
		return nil
	})

	c := client.New(client.Options{Addrs: nodeAddrs(nodes), HomeCacheSize: -1})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	mustMkdir(t, ctx, c, "/d")
	var paths []string
	for i := range 24 {
		p := fmt.Sprintf("/d/f%02d", i)
		mustCreate(t, ctx, c, p)
		paths = append(paths, p)
	}
	levels := map[string]int{}
	rpctest.Eventually(t, 60*time.Second, "every path found through every node at L2 or its home", func() error {
		clear(levels)
		for _, n := range nodes {
			n.NS().SyncFilters()
		}
		for _, n := range nodes {
			for _, p := range paths {
				var r rpc.LookupResponse
				if err := c.Call(ctx, nodetest.RPCAddr(n.Config()), rpc.MethodLookup, &rpc.LookupRequest{Path: p}, &r); err != nil {
					return fmt.Errorf("lookup %s at %s: %w", p, n.ID(), err)
				}
				levels[r.Level]++
			}
		}
		if levels[rpc.LevelL3]+levels[rpc.LevelL4] > 0 {
			return fmt.Errorf("levels %v", levels)
		}
		return nil
	})
	t.Logf("levels over %d lookups: %v", len(nodes)*len(paths), levels)
	if levels[rpc.LevelL2] == 0 {
		t.Errorf("levels %v: want L2 hits", levels)
	}
	var multicasts uint64
	for _, n := range nodes {
		multicasts += n.NS().Stats().Multicasts
	}
	t.Logf("multicasts over the run: %d", multicasts)
}

// TestSchemeAuto runs scheme auto (the default) on two groups of two, with
// no L1: the nodes whose memory budget holds every other shard's filter
// route as HBA (status "hba"): a path that is nowhere costs them no group
// multicast (L3), while the node with no budget to spare holds its G-HBA
// segment alone and routes with the multicast ("ghba"). Existing paths
// are found through every node.
func TestSchemeAuto(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t, goleakOptions()...) })
	specs := []groupSpec{{"a1", "ga"}, {"a2", "ga"}, {"b1", "gb"}, {"b2", "gb"}}
	log := rpctest.Logger(t)
	nodes := startGroups(t, log, specs, func(i int, c *node.Config) {
		c.LRUEntries = 0
		c.FilterMemoryMB = 64
		if specs[i].id == "b2" {
			c.FilterMemoryMB = 0
		}
	})
	checkGroup(t, 30*time.Second, nodes[:2], []string{"a1", "a2"})
	checkGroup(t, 30*time.Second, nodes[2:], []string{"b1", "b2"})
	rpctest.Eventually(t, 60*time.Second, "a1, a2 and b1 route as HBA, b2 as G-HBA", func() error {
		for _, n := range nodes {
			n.NS().SyncFilters()
			want := namespace.SchemeHBA
			if n.ID() == "b2" {
				want = namespace.SchemeGHBA
			}
			if st := n.Status(); st.Routing != want || st.Scheme != namespace.SchemeAuto {
				return fmt.Errorf("%s: scheme %q, routing %q; want auto, %s", n.ID(), st.Scheme, st.Routing, want)
			}
		}
		return nil
	})

	c := client.New(client.Options{Addrs: nodeAddrs(nodes), HomeCacheSize: -1})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var paths []string
	for d := range 4 {
		mustMkdir(t, ctx, c, fmt.Sprintf("/d%d", d))
		for i := range 6 {
			p := fmt.Sprintf("/d%d/f%d", d, i)
			mustCreate(t, ctx, c, p)
			paths = append(paths, p)
		}
	}
	for _, n := range nodes {
		for _, p := range paths {
			var r rpc.LookupResponse
			if err := c.Call(ctx, nodetest.RPCAddr(n.Config()), rpc.MethodLookup, &rpc.LookupRequest{Path: p}, &r); err != nil {
				t.Fatalf("lookup %s at %s: %v", p, n.ID(), err)
			}
		}
	}
	for _, n := range nodes {
		before := n.NS().Stats().Multicasts
		for d := range 4 {
			p := fmt.Sprintf("/d%d/missing", d)
			var r rpc.LookupResponse
			err := c.Call(ctx, nodetest.RPCAddr(n.Config()), rpc.MethodLookup, &rpc.LookupRequest{Path: p}, &r)
			if !errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("lookup %s at %s: %v, want not found", p, n.ID(), err)
			}
		}
		m := n.NS().Stats().Multicasts - before
		t.Logf("%s (routing %s): %d multicasts for 4 paths that are nowhere", n.ID(), n.NS().Routing(), m)
		switch {
		case n.ID() != "b2" && m != 0:
			t.Errorf("%s routes as HBA but sent %d multicasts", n.ID(), m)
		case n.ID() == "b2" && m == 0:
			t.Errorf("b2 holds its segment alone but sent no multicast")
		}
	}
}

// TestSchemeMismatchRefused starts a node with scheme hba that joins a
// group running ghba: the group's leader refuses it, the joiner stops with
// ErrSchemeMismatch and a message naming the scheme to set, and the group
// does not change.
func TestSchemeMismatchRefused(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t, goleakOptions()...) })
	log := rpctest.Logger(t)
	cfgs, nodes := startJoined(t, log, 1, func(c *node.Config) { c.Scheme = namespace.SchemeGHBA })
	checkGroup(t, 30*time.Second, nodes, []string{"n1"})
	c2 := nodetest.Config(t, "n2")
	c2.Scheme = namespace.SchemeHBA
	c2.RetryJoin = []string{nodetest.SerfAddr(cfgs[0])}
	n2 := nodetest.Start(t, c2, log)
	select {
	case <-n2.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("n2 with scheme hba still running 30s after joining a ghba group")
	}
	err := n2.Err()
	if !errors.Is(err, node.ErrSchemeMismatch) {
		t.Fatalf("n2 stopped with %v, want ErrSchemeMismatch", err)
	}
	for _, want := range []string{`"hba"`, `"ghba"`, "scheme: ghba"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %s", err, want)
		}
	}
	t.Logf("n2: %v", err)
	if got := fsmMemberIDs(nodes[0]); !slices.Equal(got, []string{"n1"}) {
		t.Errorf("group members %v after the refused join, want [n1]", got)
	}
	// A node with the default scheme, auto, takes its segments as ghba
	// does: the same group takes it.
	c3 := nodetest.Config(t, "n3")
	c3.RetryJoin = []string{nodetest.SerfAddr(cfgs[0])}
	n3 := nodetest.Start(t, c3, log)
	checkGroup(t, 30*time.Second, []*node.Node{nodes[0], n3}, []string{"n1", "n3"})
}
