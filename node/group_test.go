package node_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ghba/ghba/node"
	"github.com/ghba/ghba/node/nodetest"
	"github.com/ghba/ghba/rpc"
	"github.com/ghba/ghba/rpc/client"
	"github.com/ghba/ghba/rpc/rpctest"
	"go.uber.org/goleak"
)

// autoConfig returns the config of auto node i (1-based) of a test
// cluster with max_group_size m; node 1 bootstraps, the others retry_join
// it.
func autoConfig(t *testing.T, i, m int, first *node.Config) node.Config {
	t.Helper()
	c := nodetest.Config(t, fmt.Sprintf("n%d", i))
	c.MaxGroupSize = node.GroupSize(m)
	if first == nil {
		c.Bootstrap = true
	} else {
		c.RetryJoin = []string{nodetest.SerfAddr(*first)}
	}
	return c
}

// checkGroups waits until nodes form exactly wantGroups groups of at most
// maxSize: every node joined exactly one group and no switch is pending;
// in each group one established leader whose FSM members and Raft voters
// are the group's nodes, the same FSM members on every member; and every
// node's Serf view gossips each node's group (no moving tag). It returns
// the groups by name.
func checkGroups(t *testing.T, d time.Duration, nodes []*node.Node, maxSize, wantGroups int) map[string][]string {
	t.Helper()
	var out map[string][]string
	rpctest.Eventually(t, d, fmt.Sprintf("%d groups of at most %d", wantGroups, maxSize), func() error {
		byGroup := map[string][]*node.Node{}
		for _, n := range nodes {
			g, joined, pending := n.Membership()
			if !joined || g == "" || pending {
				return fmt.Errorf("%s: joined %t group %q pending switch %v", n.ID(), joined, g, pending)
			}
			byGroup[g] = append(byGroup[g], n)
		}
		if len(byGroup) != wantGroups {
			return fmt.Errorf("%d groups: %v", len(byGroup), groupIDs(byGroup))
		}
		for g, ns := range byGroup {
			if len(ns) > maxSize {
				return fmt.Errorf("group %s has %d members", g, len(ns))
			}
			var ids []string
			for _, n := range ns {
				ids = append(ids, n.ID())
			}
			l, err := leaderOf(ns...)
			if err != nil {
				return fmt.Errorf("group %s: %w", g, err)
			}
			for _, n := range ns {
				if got := fsmMemberIDs(n); !sameSet(got, ids) {
					return fmt.Errorf("group %s: %s FSM members %v, want %v", g, n.ID(), got, ids)
				}
			}
			voters, err := voterIDs(l)
			if err != nil {
				return err
			}
			if !sameSet(voters, ids) {
				return fmt.Errorf("group %s: raft voters %v, want %v", g, voters, ids)
			}
		}
		for _, n := range nodes {
			for _, m := range n.SerfMembers() {
				for _, o := range nodes {
					if o.ID() == m.Name && (m.Tags[node.TagGroup] != o.GroupName() || m.Tags[node.TagMoving] != "") {
						return fmt.Errorf("%s sees %s in group %q (moving %q), it is in %q", n.ID(), m.Name, m.Tags[node.TagGroup], m.Tags[node.TagMoving], o.GroupName())
					}
				}
			}
			for _, p := range n.Directory().Peers() {
				for _, o := range nodes {
					if o.ID() == p.ID && (p.Group != o.GroupName() || !p.Up) {
						return fmt.Errorf("%s's directory: %+v, it is in %q", n.ID(), p, o.GroupName())
					}
				}
			}
		}
		out = groupIDs(byGroup)
		return nil
	})
	return out
}

func groupIDs(byGroup map[string][]*node.Node) map[string][]string {
	out := map[string][]string{}
	for g, ns := range byGroup {
		for _, n := range ns {
			out[g] = append(out[g], n.ID())
		}
		sort.Strings(out[g])
	}
	return out
}

// statEverywhere waits until every path is stat-able through every node.
func statEverywhere(t *testing.T, d time.Duration, nodes []*node.Node, paths []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	for _, n := range nodes {
		c := client.New(client.Options{Addrs: []string{nodetest.RPCAddr(n.Config())}, HomeCacheSize: -1})
		rpctest.Eventually(t, d, "stat through "+n.ID(), func() error {
			for _, p := range paths {
				if _, err := c.Stat(ctx, p); err != nil {
					return fmt.Errorf("stat %s through %s: %w", p, n.ID(), err)
				}
			}
			return nil
		})
		c.Close()
	}
}

// watchMissing stats paths through the node at addr in a loop until the
// returned function is called; that function returns the paths a stat
// reported missing (a path may be briefly unavailable, never missing) and
// the number of stats.
func watchMissing(t *testing.T, addr string, paths []string) func() ([]string, int) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var missing []string
	stats := 0
	wg.Go(func() {
		c := client.New(client.Options{Addrs: []string{addr}, HomeCacheSize: -1})
		defer c.Close()
		for ctx.Err() == nil {
			for _, p := range paths {
				sctx, scancel := context.WithTimeout(ctx, 2*time.Second)
				_, err := c.Stat(sctx, p)
				scancel()
				stats++
				if errors.Is(err, fs.ErrNotExist) {
					missing = append(missing, p)
				}
			}
		}
	})
	stop := func() ([]string, int) {
		cancel()
		wg.Wait()
		return missing, stats
	}
	t.Cleanup(func() { stop() }) // a test that fails early stops it too
	return stop
}

// makePaths creates a directory and files through client.
func makePaths(t *testing.T, client *client.Client, k int) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rpctest.Eventually(t, 20*time.Second, "mkdir /d", func() error {
		_, err := client.Mkdir(ctx, &rpc.MkdirRequest{Path: "/d", Mode: 0o755, Parents: true})
		if errors.Is(err, fs.ErrExist) {
			return nil
		}
		return err
	})
	paths := []string{"/", "/d"}
	for i := range k {
		p := fmt.Sprintf("/d/f%02d", i)
		mustCreate(t, ctx, client, p)
		paths = append(paths, p)
	}
	return paths
}

// waitSettled waits until every node reports the cluster's groups settled
// (Groups: every group settled, every node in one) and every node's own
// status agrees.
func waitSettled(t *testing.T, d time.Duration, nodes []*node.Node) {
	t.Helper()
	rpctest.Eventually(t, d, "groups settled", func() error {
		for _, n := range nodes {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			r := n.Groups(ctx)
			cancel()
			if !r.Settled {
				return fmt.Errorf("%s: not settled: %s", n.ID(), r.Unsettled)
			}
			for _, g := range r.Groups {
				if !g.Settled {
					return fmt.Errorf("%s: group %s not settled (%s), yet the cluster is", n.ID(), g.Group, g.Unsettled)
				}
			}
			if st := n.Status(); !st.Settled {
				return fmt.Errorf("%s: its own status: %s", n.ID(), st.Unsettled)
			}
		}
		return nil
	})
}

// shardsInGroups waits until every shard the nodes report has a leader
// and every replica in its leader's group, and at least min(3, group
// size) replicas: a split or merge moves replicas with their shards.
func shardsInGroups(t *testing.T, d time.Duration, nodes []*node.Node) {
	t.Helper()
	shardsInGroupsR(t, d, nodes, 3)
}

// shardsInGroupsR is shardsInGroups with replication r.
func shardsInGroupsR(t *testing.T, d time.Duration, nodes []*node.Node, r int) {
	t.Helper()
	groupOf := map[string]string{}
	size := map[string]int{}
	for _, n := range nodes {
		groupOf[n.ID()] = n.GroupName()
		size[n.GroupName()]++
	}
	rpctest.Eventually(t, d, "every shard's replicas in its group", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		for _, s := range nodes[0].Shards(ctx) {
			g := groupOf[s.Leader]
			if s.Leader == "" || g == "" {
				return fmt.Errorf("shard %s: leader %q", s.Shard, s.Leader)
			}
			if len(s.Replicas) != min(r, size[g]) || len(s.Learners) > 0 {
				return fmt.Errorf("shard %s (group %s of %d): replicas %v, learners %v", s.Shard, g, size[g], s.Replicas, s.Learners)
			}
			for _, r := range s.Replicas {
				if groupOf[r] != g {
					return fmt.Errorf("shard %s led in %s has a replica on %s in %s", s.Shard, g, r, groupOf[r])
				}
			}
		}
		return nil
	})
}

// TestGroupSplit starts 7 auto nodes with max_group_size 3 one after the
// other: the 4th splits the group into 2+2, the 5th and 6th fill them, the
// 7th splits one again; paths created before the splits stay reachable
// through every node, and a stat loop running through the splits never
// finds one missing.
func TestGroupSplit(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t, goleakOptions()...) })
	log := rpctest.Logger(t)
	start := time.Now()
	const m = 3
	var first *node.Config
	var nodes []*node.Node
	var paths []string
	var stopWatch func() ([]string, int)
	want := []int{1, 1, 1, 2, 2, 2, 3} // groups after each node
	for i := 1; i <= 7; i++ {
		c := autoConfig(t, i, m, first)
		if first == nil {
			first = &c
		}
		nodes = append(nodes, nodetest.Start(t, c, log))
		groups := checkGroups(t, 60*time.Second, nodes, m, want[i-1])
		t.Logf("%d nodes: groups %v at %v", i, groups, time.Since(start).Round(time.Millisecond))
		if i == 3 {
			client := client.New(client.Options{Addrs: []string{nodetest.RPCAddr(nodes[0].Config())}, HomeCacheSize: -1})
			paths = makePaths(t, client, 12)
			client.Close()
			stopWatch = watchMissing(t, nodetest.RPCAddr(nodes[0].Config()), paths)
		}
	}
	missing, stats := stopWatch()
	t.Logf("%d stats through n1 during the splits", stats)
	if len(missing) > 0 {
		t.Errorf("paths reported missing during the splits: %v", missing)
	}
	var splits uint64
	for _, n := range nodes {
		splits += n.Status().Splits
	}
	if splits != 2 {
		t.Errorf("%d splits, want 2", splits)
	}
	statEverywhere(t, 30*time.Second, nodes, paths)
	t.Logf("paths reachable at %v", time.Since(start).Round(time.Millisecond))
	shardsInGroups(t, time.Minute, nodes)
	waitSettled(t, time.Minute, nodes)
	for _, n := range slices.Backward(nodes) {
		nodetest.Shutdown(t, n)
	}
}

// TestGroupFormationAtOnce starts 7 auto nodes with max_group_size 3 one
// right after the other, without waiting for any to join: the joiners
// arrive together at full groups (splits, redirects, joins that wait for
// a split to finish), and the cluster settles into groups of 2, 2 and 3
// (7 = 3 + 2 + 2: two splits, no merge), every node in one.
func TestGroupFormationAtOnce(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t, goleakOptions()...) })
	log := rpctest.Logger(t)
	const m = 3
	start := time.Now()
	var first *node.Config
	var nodes []*node.Node
	for i := 1; i <= 7; i++ {
		c := autoConfig(t, i, m, first)
		if first == nil {
			first = &c
		}
		nodes = append(nodes, nodetest.Start(t, c, log))
	}
	groups := checkGroups(t, 2*time.Minute, nodes, m, 3)
	waitSettled(t, time.Minute, nodes)
	t.Logf("groups %v settled %v after the first start", groups, time.Since(start).Round(time.Millisecond))
	for _, n := range slices.Backward(nodes) {
		nodetest.Shutdown(t, n)
	}
}

// TestGroupMerge makes 4 auto nodes with max_group_size 3 (2+2), then a
// node of one group leaves: the group left with one member merges into
// the other, and paths stay reachable throughout. The merged group would
// be full, which waits MergeQuiet (an hour here) — but a group of one is
// below R = 3 (its shards have one copy), so it merges after MergeSettle.
func TestGroupMerge(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t, goleakOptions()...) })
	log := rpctest.Logger(t)
	const m = 3
	tun := nodetest.Tuning()
	tun.MergeQuiet = time.Hour
	var first *node.Config
	var nodes []*node.Node
	for i := 1; i <= 4; i++ {
		c := autoConfig(t, i, m, first)
		if first == nil {
			first = &c
		}
		nodes = append(nodes, nodetest.Start(t, c, log, node.WithTuning(tun)))
		checkGroups(t, 60*time.Second, nodes, m, []int{1, 1, 1, 2}[i-1])
	}
	groups := checkGroups(t, 60*time.Second, nodes, m, 2)
	client := client.New(client.Options{Addrs: []string{nodetest.RPCAddr(nodes[0].Config())}, HomeCacheSize: -1})
	defer client.Close()
	paths := makePaths(t, client, 12)
	statEverywhere(t, 20*time.Second, nodes, paths)

	// The leaver: a node of the group n1 is not in (n1 homes "/").
	var leaver *node.Node
	for _, n := range nodes {
		if n.GroupName() != nodes[0].GroupName() {
			leaver = n
			break
		}
	}
	t.Logf("groups %v; %s leaves", groups, leaver.ID())
	var rest []*node.Node
	for _, n := range nodes {
		if n != leaver {
			rest = append(rest, n)
		}
	}

	waitSettled(t, time.Minute, nodes)
	// Lookups through the staying nodes while the merge runs.
	stopWatch := watchMissing(t, nodetest.RPCAddr(rest[0].Config()), paths)

	lctx, lcancel := context.WithTimeout(context.Background(), 2*time.Minute)
	if _, err := leaver.Leave(lctx); err != nil {
		t.Fatalf("leave %s: %v", leaver.ID(), err)
	}
	lcancel()
	nodetest.Shutdown(t, leaver)
	groups = checkGroups(t, 60*time.Second, rest, m, 1)
	t.Logf("after the merge: %v", groups)
	var merges uint64
	for _, n := range rest {
		merges += n.Status().Merges
	}
	if merges != 1 {
		t.Errorf("%d merges, want 1", merges)
	}
	statEverywhere(t, 20*time.Second, rest, paths)
	shardsInGroups(t, time.Minute, rest)
	waitSettled(t, time.Minute, rest)
	missing, _ := stopWatch()
	if len(missing) > 0 {
		t.Errorf("paths reported missing during the merge: %v", missing)
	}
	client.Close()
	for _, n := range slices.Backward(rest) {
		nodetest.Shutdown(t, n)
	}
}

// TestGroupSwitchCrash kills the node moving to the new group of a split
// in the middle of its switch (old Raft closed, state not yet wiped) and
// restarts it from its data dir: it ends in exactly one group, never back
// in the old group's FSM as a ghost.
func TestGroupSwitchCrash(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t, goleakOptions()...) })
	log := rpctest.Logger(t)
	const m = 3
	var first *node.Config
	var cfgs []node.Config
	var nodes []*node.Node
	stuck := make(chan string, 3) // the id of the node stuck mid-switch
	var armed sync.Once           // only the first switch gets stuck
	for i := 1; i <= 3; i++ {
		c := autoConfig(t, i, m, first)
		if first == nil {
			first = &c
		}
		cfgs = append(cfgs, c)
		tun := nodetest.Tuning()
		tun.MidSwitchHook = func(ctx context.Context) {
			armed.Do(func() {
				stuck <- c.NodeID
				<-ctx.Done() // until the node is killed
			})
		}
		nodes = append(nodes, nodetest.Start(t, c, log, node.WithTuning(tun)))
		checkGroups(t, 60*time.Second, nodes, m, 1)
	}
	c4 := autoConfig(t, 4, m, first)
	nodes = append(nodes, nodetest.Start(t, c4, log))
	var mover *node.Node
	select {
	case id := <-stuck:
		mover = nodes[slices.IndexFunc(nodes, func(n *node.Node) bool { return n.ID() == id })]
	case <-time.After(30 * time.Second):
		t.Fatal("no node started switching groups")
	}
	t.Logf("killing %s mid-switch", mover.ID())
	nodetest.Shutdown(t, mover)
	i := slices.Index(nodes, mover)
	nodes[i] = nodetest.Start(t, mover.Config(), log) // no hook: the restart completes
	groups := checkGroups(t, 60*time.Second, nodes, m, 2)
	t.Logf("groups %v", groups)
	seen := map[string]string{}
	for g, ids := range groups {
		for _, id := range ids {
			if o, dup := seen[id]; dup {
				t.Errorf("%s in groups %s and %s", id, o, g)
			}
			seen[id] = g
		}
	}
	for _, n := range slices.Backward(nodes) {
		nodetest.Shutdown(t, n)
	}
}

// TestGroupMergeOrphan loses the merge's switch request to the moving
// group's follower: the leader moves alone and leaves it in a group
// without a quorum. The follower sees every other voter of its group in
// one other group and follows them, so the cluster still ends in one
// group.
func TestGroupMergeOrphan(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t, goleakOptions()...) })
	log := rpctest.Logger(t)
	const m = 5
	var first *node.Config
	var nodes []*node.Node
	var lose atomic.Bool // once set, every switch request is lost
	tun := nodetest.Tuning()
	tun.TellSwitchHook = func(id string) error {
		if lose.Load() {
			return fmt.Errorf("%w: test: switch request to %s lost", rpc.ErrUnavailable, id)
		}
		return nil
	}
	hook := node.WithTuning(tun)
	for i := 1; i <= 6; i++ {
		c := autoConfig(t, i, m, first)
		if first == nil {
			first = &c
		}
		nodes = append(nodes, nodetest.Start(t, c, log, hook))
		checkGroups(t, 60*time.Second, nodes, m, []int{1, 1, 1, 1, 1, 2}[i-1])
	}
	groups := checkGroups(t, 60*time.Second, nodes, m, 2)
	t.Logf("groups %v", groups)
	lose.Store(true)
	byID := map[string]*node.Node{}
	for _, n := range nodes {
		byID[n.ID()] = n
	}
	// One follower of each group leaves: 2 + 2 ≤ M, so the groups merge.
	var rest []*node.Node
	for _, ids := range groups {
		var members []*node.Node
		for _, id := range ids {
			members = append(members, byID[id])
		}
		var l *node.Node
		rpctest.Eventually(t, 30*time.Second, "the group's leader", func() (err error) {
			l, err = leaderOf(members...) // (between leaders for a moment on a loaded machine)
			return err
		})
		var leaver *node.Node
		for _, id := range ids {
			if byID[id] != l && byID[id].ID() != "n1" && leaver == nil {
				leaver = byID[id]
			}
		}
		// A leave waits for the shards' leaders to move its replicas:
		// bounded generously, as a starved 2-core machine can take
		// tens of seconds (a wait on a condition, not a speed check).
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		if _, err := leaver.Leave(ctx); err != nil {
			t.Fatalf("leave %s: %v", leaver.ID(), err)
		}
		cancel()
		nodetest.Shutdown(t, leaver)
		for _, id := range ids {
			if byID[id] != leaver {
				rest = append(rest, byID[id])
			}
		}
	}
	final := checkGroups(t, 60*time.Second, rest, m, 1)
	t.Logf("after the merge: %v", final)
	var merges uint64
	for _, n := range rest {
		merges += n.Status().Merges
	}
	if merges != 1 {
		t.Errorf("%d merges, want 1", merges)
	}
	for _, n := range slices.Backward(rest) {
		nodetest.Shutdown(t, n)
	}
}
