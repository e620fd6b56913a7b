package node_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
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

// TestGHBAGroups runs G-HBA on groups of three, two and two: each node
// holds the replicas its group's FSM assigns it ((N−M')/M' ± 1, all
// origins outside the group covered exactly once) and nothing else in its
// L2 array; every path is found through every node without the L4 step;
// killing a node re-assigns the replicas it held to its group-mates, its
// paths are served by its shard's new leader once the shard has failed
// over (unavailable before that, never not-found) and the others still
// resolve; restarted, it serves its paths again.
func TestGHBAGroups(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t, goleakOptions()...) })
	specs := []groupSpec{{"a1", "ga"}, {"a2", "ga"}, {"a3", "ga"}, {"b1", "gb"}, {"b2", "gb"}, {"c1", "gc"}, {"c2", "gc"}}
	groups := map[string][]string{}
	for _, s := range specs {
		groups[s.group] = append(groups[s.group], s.id)
	}
	log := rpctest.Logger(t)
	nodes := startGroups(t, log, specs, func(_ int, c *node.Config) {
		c.LRUEntries = 0 // no L1: exercise the segments and the multicast
	})
	byID := map[string]*node.Node{}
	for _, n := range nodes {
		byID[n.ID()] = n
	}
	members := func(g string) []*node.Node {
		var out []*node.Node
		for _, id := range groups[g] {
			out = append(out, byID[id])
		}
		return out
	}
	for g, ids := range groups {
		checkGroup(t, 30*time.Second, members(g), ids)
	}
	// Every node holds (N−M')/M' ± 1 replicas, its group's members hold
	// each outside origin exactly once, and its L2 array holds exactly its
	// replicas.
	checkSegments := func(live []*node.Node) {
		t.Helper()
		rpctest.Eventually(t, 60*time.Second, "segments assigned and loaded", func() error {
			cover := map[string]map[string]int{} // group → origin → holders
			for _, n := range live {
				held, ok := n.Directory().(namespace.Segments).Held()
				g := n.GroupName()
				mates := 0
				for _, m := range live {
					if m.GroupName() == g {
						mates++
					}
				}
				ideal := float64(len(specs)-len(groups[g])) / float64(mates)
				if !ok || float64(len(held)) < ideal-1 || float64(len(held)) > ideal+1 {
					return fmt.Errorf("%s holds %v (known %v), want (N−M')/M' = %.2f ± 1", n.ID(), held, ok, ideal)
				}
				if cover[g] == nil {
					cover[g] = map[string]int{}
				}
				for _, o := range held {
					cover[g][o]++
				}
				ids := slices.Sorted(maps.Keys(n.NS().FilterSync().L2))
				if !slices.Equal(ids, held) {
					return fmt.Errorf("%s: L2 array %v, assigned %v", n.ID(), ids, held)
				}
				for _, o := range held {
					if byID[o].GroupName() == n.GroupName() {
						return fmt.Errorf("%s holds %s of its own group", n.ID(), o)
					}
				}
			}
			for g, c := range cover {
				if len(c) != len(specs)-len(groups[g]) {
					return fmt.Errorf("group %s covers %d origins, want %d", g, len(c), len(specs)-len(groups[g]))
				}
				for o, k := range c {
					if k != 1 {
						return fmt.Errorf("group %s holds %s %d times", g, o, k)
					}
				}
			}
			return nil
		})
	}
	checkSegments(nodes)

	client := client.New(client.Options{Addrs: nodeAddrs(nodes), HomeCacheSize: -1})
	defer client.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	mustMkdir(t, ctx, client, "/d")
	var paths []string
	for i := range 60 {
		p := fmt.Sprintf("/d/f%02d", i)
		mustCreate(t, ctx, client, p)
		paths = append(paths, p)
	}
	lookupAt := func(n *node.Node, p string) (*rpc.LookupResponse, error) {
		var r rpc.LookupResponse
		err := client.Call(ctx, nodetest.RPCAddr(n.Config()), rpc.MethodLookup, &rpc.LookupRequest{Path: p}, &r)
		return &r, err
	}
	levels := map[string]int{}
	homes := map[string]string{}
	// Filters travel by push within propagate_interval; wait until every
	// node resolves every path below L4 at least once, counting levels
	// on the final pass.
	rpctest.Eventually(t, 60*time.Second, "every path found through every node without L4", func() error {
		clear(levels)
		for _, n := range nodes {
			n.NS().SyncFilters()
		}
		for _, n := range nodes {
			for _, p := range paths {
				r, err := lookupAt(n, p)
				if err != nil {
					return fmt.Errorf("lookup %s at %s: %w", p, n.ID(), err)
				}
				if h, ok := homes[p]; ok && h != r.Home {
					t.Fatalf("%s: home %s through %s, %s before", p, r.Home, n.ID(), h)
				}
				homes[p] = r.Home
				levels[r.Level]++
			}
		}
		if levels[rpc.LevelL4] > 0 {
			return fmt.Errorf("levels %v", levels)
		}
		return nil
	})
	t.Logf("levels over %d lookups: %v", len(nodes)*len(paths), levels)
	if levels[rpc.LevelL3] == 0 || levels[rpc.LevelL2]+levels[rpc.LevelL1] == 0 {
		t.Errorf("levels %v: want L1/L2 and L3 hits", levels)
	}
	// A name that does not exist: through the node that leads its
	// directory's shard, the directory's entries answer with no multicast;
	// through the others, the levels in turn end at the same answer.
	dirHome := ""
	if r, err := lookupAt(nodes[0], "/d"); err != nil {
		t.Fatal(err)
	} else {
		dirHome = r.Home
	}
	for _, n := range nodes {
		before := n.NS().Stats().Multicasts
		if _, err := lookupAt(n, "/d/nope"); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("lookup /d/nope at %s: %v, want it not to exist", n.ID(), err)
		}
		if m := n.NS().Stats().Multicasts - before; n.ID() == dirHome && m != 0 {
			t.Errorf("lookup /d/nope at %s, /d's home: %d multicasts, want none", n.ID(), m)
		}
	}

	// Kill a3: its group-mates take over the replicas it held (a group of
	// three keeps its Raft quorum).
	victim := byID["a3"]
	vcfg := victim.Config()
	nodetest.Shutdown(t, victim)
	live := slices.DeleteFunc(slices.Clone(nodes), func(n *node.Node) bool { return n == victim })
	checkSegments(live)
	for _, n := range live {
		for _, p := range paths {
			r, err := lookupAt(n, p)
			switch {
			case homes[p] == "a3" && err != nil:
				if errors.Is(err, fs.ErrNotExist) || !errors.Is(err, rpc.ErrUnavailable) {
					t.Errorf("lookup %s (homed on killed a3) at %s: %v, want its shard or unavailable", p, n.ID(), err)
				}
			case err != nil:
				t.Errorf("lookup %s at %s with a3 down: %v", p, n.ID(), err)
			case r.Home != homes[p]:
				t.Errorf("lookup %s at %s: home %s, want %s", p, n.ID(), r.Home, homes[p])
			}
		}
	}
	// With 3 replicas in a3's group its shard fails over: every one of its
	// paths is served again, through every live node, before a3 returns.
	rpctest.Eventually(t, 60*time.Second, "a3's paths served by its shard's new leader", func() error {
		for _, n := range live {
			for _, p := range paths {
				if homes[p] != "a3" {
					continue
				}
				if r, err := lookupAt(n, p); err != nil {
					return fmt.Errorf("lookup %s at %s: %w", p, n.ID(), err)
				} else if r.Home != "a3" || r.Leader == "a3" {
					return fmt.Errorf("lookup %s at %s: shard %s led by %s", p, n.ID(), r.Home, r.Leader)
				}
			}
		}
		return nil
	})
	restarted := nodetest.Start(t, vcfg, log)
	nodes[slices.Index(nodes, victim)] = restarted
	byID["a3"] = restarted
	checkSegments(nodes)
	rpctest.Eventually(t, 60*time.Second, "a3's paths served again", func() error {
		for _, n := range nodes {
			for _, p := range paths {
				if _, err := lookupAt(n, p); err != nil {
					return fmt.Errorf("lookup %s at %s: %w", p, n.ID(), err)
				}
			}
		}
		return nil
	})
	client.Close()
	for _, n := range slices.Backward(nodes) {
		nodetest.Shutdown(t, n)
	}
}

// groupSpec is a node of a fixed group.
type groupSpec struct{ id, group string }

// startGroups starts a node per spec in its fixed group (max_group_size
// 3): the first node of a group bootstraps it, every node after the first
// joins through the first one's Serf. tweak, if not nil, adjusts the i-th
// node's configuration before it starts.
func startGroups(t *testing.T, log *slog.Logger, specs []groupSpec, tweak func(i int, c *node.Config)) []*node.Node {
	t.Helper()
	founded := map[string]bool{}
	var first node.Config
	var nodes []*node.Node
	for i, s := range specs {
		c := nodetest.Config(t, s.id)
		c.Group, c.MaxGroupSize = s.group, 3
		c.Bootstrap = !founded[s.group] // the first node of a group creates it
		founded[s.group] = true
		if i == 0 {
			first = c
		} else {
			c.RetryJoin = []string{nodetest.SerfAddr(first)}
		}
		if tweak != nil {
			tweak(i, &c)
		}
		nodes = append(nodes, nodetest.Start(t, c, log))
	}
	return nodes
}

// nodeAddrs returns the RPC addresses of nodes.
func nodeAddrs(nodes []*node.Node) []string {
	addrs := make([]string, len(nodes))
	for i, n := range nodes {
		addrs[i] = nodetest.RPCAddr(n.Config())
	}
	return addrs
}

// createSpread creates count files /d/fNN through client (balanced
// placement spreads them), fails unless they landed on at least minShards
// shards, and waits until every create has reached its child's shard (a
// create across shards is acknowledged when the parent's shard committed
// it). It returns the paths.
func createSpread(t *testing.T, ctx context.Context, client *client.Client, nodes []*node.Node, count, minShards int) []string {
	t.Helper()
	// Every node's shard led by its owner first: a create placed on a
	// shard whose first leader is still being elected would fail.
	rpctest.Eventually(t, 30*time.Second, "every shard led by its owner", func() error {
		ss := nodes[0].Shards(ctx)
		if len(ss) != len(nodes) {
			return fmt.Errorf("%d shards: %+v", len(ss), ss)
		}
		for _, s := range ss {
			if s.Leader == "" || s.Leader != s.Owner {
				return fmt.Errorf("shard %s: leader %q, owner %q", s.Shard, s.Leader, s.Owner)
			}
		}
		return nil
	})
	mustMkdir(t, ctx, client, "/d")
	var paths []string
	homes := map[string]int{}
	for i := range count {
		p := fmt.Sprintf("/d/f%02d", i)
		r, err := client.Create(ctx, &rpc.CreateRequest{Path: p, Mode: 0o644})
		if err != nil {
			t.Fatalf("create %s: %v", p, err)
		}
		homes[r.Inode.Home]++
		paths = append(paths, p)
	}
	if len(homes) < minShards {
		t.Fatalf("balanced placement used %d shards (%v), want at least %d", len(homes), homes, minShards)
	}
	rpctest.Eventually(t, 30*time.Second, "every create delivered", func() error {
		for _, n := range nodes {
			if s := n.NS().Stats(); s.Prepared != 0 || s.Marks != 0 {
				return fmt.Errorf("%s: %d prepared parts, %d paths in flux", n.ID(), s.Prepared, s.Marks)
			}
		}
		return nil
	})
	return paths
}
