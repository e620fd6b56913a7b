package main

// Multi-process tests of G-HBA groups (docs/design.md, "Groups"): clusters of agent
// processes in several groups (fixed names, or auto with splits), each
// group's FSM assigning every node outside it to exactly one member.
// Skipped with -short.
//
//	nice -n 10 go test -tags hashicorpmetrics -race -run ProcessGroups -count=1 -v ./cmd/ghba/

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ghba/ghba/rpc"
)

// procLookupWorkers is the number of concurrent lookups of a lookup pass.
const procLookupWorkers = 8

// procGroupsLRU is lru_entries in TestProcessGroups: a few entries per
// node, so that the L1 array (the LRU filters) resolves few of the ~300
// paths and the lookups exercise the segments (L2), the group multicast
// (L3) and L4; with the default 1600 every path would be in some LRU after
// the first pass and resolve at L1.
const procGroupsLRU = 4

// procMaxL4Growth bounds how much the share of L4 among the lookups of a
// pass may grow after a node failed (see TestProcessGroups/kill).
const procMaxL4Growth = 0.10

// startGroups starts the cluster's first node, then the other bootstrap
// nodes (one per further group: they join node1's Serf pool and found
// their group), then every other node, waiting until each step is ready.
func (c *procCluster) startGroups() {
	c.t.Helper()
	var founders, rest []*procNode
	for _, n := range c.nodes[1:] {
		if n.bootstrap {
			founders = append(founders, n)
		} else {
			rest = append(rest, n)
		}
	}
	c.start(c.nodes[0])
	c.waitReady(c.nodes[0].id+" leads its group", c.nodes[0])
	for _, n := range founders {
		c.start(n)
	}
	c.waitReady(fmt.Sprintf("%d group founders ready", len(founders)+1), append([]*procNode{c.nodes[0]}, founders...)...)
	for _, n := range rest {
		c.start(n)
	}
	c.waitReady(fmt.Sprintf("%d nodes ready", len(c.nodes)), c.nodes...)
}

// byGroup returns the nodes of each group among nodes.
func byGroup(nodes []*procNode) map[string][]*procNode {
	out := map[string][]*procNode{}
	for _, n := range nodes {
		out[n.group] = append(out[n.group], n)
	}
	return out
}

// statuses fetches /v1/status of every node in nodes.
func (c *procCluster) statuses(nodes []*procNode) (map[string]*procStatus, error) {
	out := map[string]*procStatus{}
	for _, n := range nodes {
		st, err := c.status(n)
		if err != nil {
			return nil, err
		}
		out[n.id] = st
	}
	return out, nil
}

// waitAssignment waits until, in every group, the live members hold
// replicas of exactly the group's outside origins (outside[g] of them, each
// once: the sum of replicas_held over the live members), each live member
// holds outside[g]/members ± 1, and its L2 array has one entry per replica
// it holds (l2_members = replicas_held). live are the nodes whose status
// can be read (a killed node is left out; its group's other members must
// then cover its share). It returns the last statuses read.
func (c *procCluster) waitAssignment(what string, live []*procNode, outside map[string]int) map[string]*procStatus {
	c.t.Helper()
	var last map[string]*procStatus
	c.waitFor(what, procReadyTimeout, func() { c.checkRunning(live...) }, func() (bool, string) {
		sts, err := c.statuses(live)
		if err != nil {
			return false, err.Error()
		}
		last = sts
		for g, members := range byGroup(live) {
			want := float64(outside[g]) / float64(len(members))
			sum := 0
			var held []string
			for _, n := range members {
				st := sts[n.id]
				sum += st.ReplicasHeld
				held = append(held, fmt.Sprintf("%s=%d(l2 %d)", n.id, st.ReplicasHeld, st.L2Members))
				if st.Group != g {
					return false, fmt.Sprintf("%s reports group %q, want %q", n.id, st.Group, g)
				}
				if math.Abs(float64(st.ReplicasHeld)-want) > 1 {
					return false, fmt.Sprintf("group %s: %s holds %d replicas, want %.2f ± 1 (%s)", g, n.id, st.ReplicasHeld, want, strings.Join(held, " "))
				}
				if st.L2Members != st.ReplicasHeld+st.ExtraReplicas {
					return false, fmt.Sprintf("group %s: %s holds %d replicas and %d by its memory budget, but its L2 array has %d", g, n.id, st.ReplicasHeld, st.ExtraReplicas, st.L2Members)
				}
			}
			if sum != outside[g] {
				return false, fmt.Sprintf("group %s: replicas held sum to %d, want %d (%s)", g, sum, outside[g], strings.Join(held, " "))
			}
		}
		return true, ""
	})
	groups := byGroup(live)
	names := make([]string, 0, len(groups))
	for g := range groups {
		names = append(names, g)
	}
	sort.Strings(names)
	for _, g := range names {
		var held []string
		for _, n := range groups[g] {
			held = append(held, fmt.Sprintf("%s=%d", n.id, last[n.id].ReplicasHeld))
		}
		c.t.Logf("group %s (%d outside origins): replicas held %s", g, outside[g], strings.Join(held, " "))
	}
	return last
}

// levelsOf sums the lookup levels of nodes' /v1/status.
func (c *procCluster) levelsOf(nodes []*procNode) rpc.LevelCounts {
	c.t.Helper()
	var sum rpc.LevelCounts
	for _, n := range nodes {
		st, err := c.status(n)
		if err != nil {
			c.t.Fatal(err)
		}
		sum.L1 += st.Levels.L1
		sum.L2 += st.Levels.L2
		sum.L3 += st.Levels.L3
		sum.L4 += st.Levels.L4
	}
	return sum
}

// levelsDelta returns after − before.
func levelsDelta(before, after rpc.LevelCounts) rpc.LevelCounts {
	return rpc.LevelCounts{L1: after.L1 - before.L1, L2: after.L2 - before.L2, L3: after.L3 - before.L3, L4: after.L4 - before.L4}
}

// l4Share returns the share of L4 among the lookups counted in l.
func l4Share(l rpc.LevelCounts) float64 {
	total := l.L1 + l.L2 + l.L3 + l.L4
	if total == 0 {
		return 0
	}
	return float64(l.L4) / float64(total)
}

// lookup asks n (and only n: no client cache, no other address) for the
// home of p.
func (c *procCluster) lookup(ctx context.Context, n *procNode, p string) (*rpc.LookupResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, procRPCTimeout)
	defer cancel()
	var resp rpc.LookupResponse
	err := c.client(n).Call(ctx, n.rpcAddr(), rpc.MethodLookup, &rpc.LookupRequest{Path: p}, &resp)
	return &resp, err
}

// lookupPass looks every acknowledged path of m up through every node of
// via: a path homed on a node in down must answer unavailable, never not
// found; every other path must be found at its recorded home with its
// type. It returns the lookups' level counts as the entry nodes' /v1/status
// counted them during the pass (nothing else may look paths up meanwhile).
func (c *procCluster) lookupPass(what string, m *procModel, via []*procNode, down map[string]bool) rpc.LevelCounts {
	c.t.Helper()
	before := c.levelsOf(via)
	paths := m.paths()
	type job struct {
		n *procNode
		p string
	}
	jobs := make([]job, 0, len(paths)*len(via))
	for _, n := range via {
		for _, p := range paths {
			jobs = append(jobs, job{n, p})
		}
	}
	var (
		errs           procErrs
		found, unavail atomic.Int64
		next           atomic.Int64
		wg             sync.WaitGroup
	)
	start := time.Now()
	for range procLookupWorkers {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= len(jobs) {
					return
				}
				n, p := jobs[i].n, jobs[i].p
				r, err := c.lookup(context.Background(), n, p)
				home := m.home(p)
				switch {
				case down[home]:
					if err == nil {
						errs.add("lookup %s via %s: found at %s (%s) though its home %s is down", p, n.id, r.Home, r.Level, home)
					} else if errors.Is(err, fs.ErrNotExist) || !procUnavailable(err) {
						errs.add("lookup %s via %s (home %s is down): %v; want unavailable", p, n.id, home, err)
					} else {
						unavail.Add(1)
					}
				case err != nil:
					errs.add("lookup %s via %s (home %s): %v", p, n.id, home, err)
				case r.Home != home || r.Type != m.typ(p):
					errs.add("lookup %s via %s: home %s type %s (%s), want home %s type %s", p, n.id, r.Home, r.Type, r.Level, home, m.typ(p))
				default:
					found.Add(1)
				}
			}
		})
	}
	wg.Wait()
	lv := levelsDelta(before, c.levelsOf(via))
	c.t.Logf("%s: %d lookups through %d nodes in %v: %d found, %d unavailable (home down); levels L1 %d L2 %d L3 %d L4 %d (L4 share %.1f%%)",
		what, len(jobs), len(via), time.Since(start).Round(time.Millisecond), found.Load(), unavail.Load(),
		lv.L1, lv.L2, lv.L3, lv.L4, 100*l4Share(lv))
	errs.report(c.t, what)
	return lv
}

// ---- TestProcessGroups ----

// TestProcessGroups: 9 agents in 3 fixed groups of 3 (g1: node1–3, g2:
// node4–6, g3: node7–9; max_group_size 4 so that g1 can take a 10th node
// in the same cluster; tiny LRUs, see procGroupsLRU; filter_memory_mb 0, so
// that each node holds its segment alone and lookups take the group
// multicast as in the paper). Subtests, in order, on the same cluster:
//
//   - formed: every group's FSM assigns each of the 6 nodes outside it to
//     exactly one member, 2 per member (replicas_held in /v1/status); ~300
//     paths created through random nodes are found through every node.
//   - join: node10 joins g1 while lookups run: each old g1 member hands it
//     about current − (N−M')/(M'+1) replicas, g2 and g3 add node10 as an
//     origin, and no lookup fails during or after the join.
//   - kill: kill -9 of a g2 follower (the root is homed in g1): once Serf
//     marks it failed, g2's other members hold all its filter replicas;
//     its shard fails over to another replica (replication 3) and every
//     path is found through every live node, and the share of L4 does not
//     grow by more than procMaxL4Growth; after a restart from its data dir
//     every path is found again and it holds filter replicas again.
//   - kill-two-groups: kill -9 of one node in g2 and one in g3 at once:
//     every path is still served through the 8 live nodes, and written.
func TestProcessGroups(t *testing.T) {
	c := newProcCluster(t, 0)
	for i := range 9 {
		g := fmt.Sprintf("g%d", i/3+1)
		c.addNodeWith(procNodeOpts{Group: g, Bootstrap: i%3 == 0, MaxGroupSize: 4, LRUEntries: procGroupsLRU, SegmentOnly: true})
	}
	start := time.Now()
	c.startGroups()
	t.Logf("9 nodes in 3 groups formed in %v", time.Since(start).Round(time.Millisecond))

	m := c.rootedModel()
	if m.home("/") != "node1" {
		t.Fatalf("/ is homed on %s, want node1 (the first bootstrap node)", m.home("/"))
	}
	tops := procTops("g", 7)
	// The writes go through random nodes: the harness's client cache is
	// off, so each create is routed by the node it enters at.
	start = time.Now()
	c.populate(m, c.nodes, tops, 4, 8)
	t.Logf("created %d paths through random nodes in %v", len(m.paths()), time.Since(start).Round(time.Millisecond))
	for _, n := range c.nodes {
		if len(m.homedOn(n.id)) == 0 {
			t.Errorf("%s homes no path (balanced placement should give every node some)", n.id)
		}
	}

	steps := []struct {
		name string
		fn   func(*procCluster, *procModel)
	}{
		{"formed", groupsFormed},
		{"join-node10-g1", groupsJoin},
		{"kill-g2-follower", groupsKill},
		{"kill-two-groups", groupsKillTwo},
	}
	for _, s := range steps {
		ok := t.Run(s.name, func(t *testing.T) {
			outer := c.t
			c.t = t
			defer func() { c.t = outer }()
			s.fn(c, m)
		})
		if !ok {
			break
		}
	}
}

// groupsFormed checks the assignment of the 9-node cluster and finds every
// path through every node.
func groupsFormed(c *procCluster, m *procModel) {
	// N = 9, M' = 3: each group has N − M' = 6 outside origins, 2 per
	// member.
	c.waitAssignment("each group covers its 6 outside origins, 2 per member", c.nodes, map[string]int{"g1": 6, "g2": 6, "g3": 6})
	gs, err := c.groups(c.nodes[0])
	if err != nil {
		c.t.Fatal(err)
	}
	for _, g := range gs {
		if len(g.Members) != 3 {
			c.t.Errorf("group %s has members %v, want 3", g.Group, g.Members)
		}
	}
	c.lookupPass("9 nodes, 3 groups", m, c.nodes, nil)
}

// groupsJoin adds node10 to g1 while lookups run through the other nodes.
func groupsJoin(c *procCluster, m *procModel) {
	t := c.t
	old := slices.Clone(c.nodes)
	g1 := byGroup(old)["g1"]
	before, err := c.statuses(g1)
	if err != nil {
		t.Fatal(err)
	}
	migratedBefore := before[g1[0].id].ReplicasMigrated

	// A lookup loop through the old nodes, all the time node10 joins.
	paths := m.paths()
	var (
		stop     = make(chan struct{})
		done     atomic.Int64
		errCount atomic.Int64
		errs     procErrs
		wg       sync.WaitGroup
	)
	for w := range procLookupWorkers {
		wg.Go(func() {
			for i := w; ; i += procLookupWorkers {
				select {
				case <-stop:
					return
				default:
				}
				n := old[i%len(old)]
				p := paths[(i/len(old))%len(paths)]
				r, err := c.lookup(context.Background(), n, p)
				done.Add(1)
				switch {
				case err != nil:
					errCount.Add(1)
					errs.add("lookup %s via %s during the join: %v", p, n.id, err)
				case r.Home != m.home(p):
					errCount.Add(1)
					errs.add("lookup %s via %s during the join: home %s, want %s", p, n.id, r.Home, m.home(p))
				}
			}
		})
	}
	stopLoop := func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		wg.Wait()
	}
	defer stopLoop()
	c.waitFor("lookups running before the join", procReadyTimeout, nil, func() (bool, string) {
		return done.Load() >= int64(len(paths)), fmt.Sprintf("%d lookups", done.Load())
	})

	n10 := c.addNodeWith(procNodeOpts{Group: "g1", MaxGroupSize: 4, LRUEntries: procGroupsLRU, SegmentOnly: true})
	c.start(n10)
	c.waitReady("node10 joined g1", c.nodes...)
	// N = 10: g1 (4 members) still has 6 outside origins; g2 and g3 have
	// 7 now (node10 is a new origin of theirs).
	after := c.waitAssignment("g1 rebalanced over 4 members, node10 an origin of g2 and g3", c.nodes,
		map[string]int{"g1": 6, "g2": 7, "g3": 7})
	// One more full pass of lookups after the assignment settled.
	mark := done.Load()
	c.waitFor("a full lookup pass after the join", procReadyTimeout, func() { c.checkRunning(c.nodes...) }, func() (bool, string) {
		return done.Load() >= mark+int64(len(paths)), fmt.Sprintf("%d of %d lookups", done.Load()-mark, len(paths))
	})
	stopLoop()
	t.Logf("lookup loop during the join: %d lookups, %d failed", done.Load(), errCount.Load())
	errs.report(t, "lookups during the join")

	// Light-weight migration (G-HBA §2.4): each of the M' = 3 old members
	// hands the newcomer about current − T/(M'+1) replicas, T = N − M' = 6
	// outside origins: 2 − 6/4 = 0.5, so 0 or 1 each.
	const outsideG1, oldSize = 6, 3
	handed := 0
	for _, n := range g1 {
		cur := before[n.id].ReplicasHeld
		give := cur - after[n.id].ReplicasHeld
		want := float64(cur) - float64(outsideG1)/float64(oldSize+1)
		t.Logf("%s: held %d before, %d after: handed over %d (expected about %.2f)", n.id, cur, after[n.id].ReplicasHeld, give, want)
		if give < 0 || math.Abs(float64(give)-want) > 1 {
			t.Errorf("%s handed over %d replicas, want %.2f ± 1", n.id, give, want)
		}
		handed += give
	}
	got := after[n10.id].ReplicasHeld
	if got != handed || got < 1 {
		t.Errorf("node10 holds %d replicas, the old members handed over %d; want the same, at least 1", got, handed)
	}
	migrated := after[n10.id].ReplicasMigrated - migratedBefore
	t.Logf("g1's replicas_migrated: %d before, %d after (+%d)", migratedBefore, after[n10.id].ReplicasMigrated, migrated)
	if migrated != uint64(handed) {
		t.Errorf("g1's replicas_migrated grew by %d, want %d (the replicas handed to node10)", migrated, handed)
	}
	for _, n := range g1 {
		if after[n.id].ReplicasMigrated != after[n10.id].ReplicasMigrated {
			t.Errorf("%s reports replicas_migrated %d, node10 %d: the group's FSMs disagree", n.id, after[n.id].ReplicasMigrated, after[n10.id].ReplicasMigrated)
		}
	}
	c.lookupPass("10 nodes after the join", m, c.nodes, nil)
}

// groupsKill kills a follower of g2 with kill -9 and restarts it.
func groupsKill(c *procCluster, m *procModel) {
	t := c.t
	var v *procNode
	for _, n := range byGroup(c.nodes)["g2"] {
		st, err := c.status(n)
		if err != nil {
			t.Fatal(err)
		}
		if st.RaftRole == "follower" && len(m.homedOn(n.id)) > 0 {
			v = n
			break
		}
	}
	if v == nil {
		t.Fatal("no follower of g2 homes a path")
	}
	var live []*procNode
	for _, n := range c.nodes {
		if n != v {
			live = append(live, n)
		}
	}
	down := map[string]bool{v.id: true}
	onVictim := m.homedOn(v.id)
	t.Logf("victim %s (g2 follower) homes %d of %d paths", v.id, len(onVictim), len(m.paths()))

	lvBefore := c.lookupPass("before the kill, through the nodes that stay up", m, live, nil)

	c.kill(v)
	c.waitMarkedFailed(v, live)
	// g2's two live members now hold all of its 7 outside origins; g1 and
	// g3 keep the victim as an origin (its filters marked down).
	c.waitAssignment("g2's live members cover its 7 outside origins", live, map[string]int{"g1": 6, "g2": 7, "g3": 7})
	if c.replication > 1 {
		c.waitFailover(m, v, live)
		down = nil // its shard is led by a surviving replica
	}
	lvAfter := c.lookupPass("after the kill of "+v.id, m, live, down)
	c.cliDownChecks(m, v, live, "after it was marked failed")

	// The L4 bound: the failed node's replicas were re-assigned within its
	// group (and the L2 arrays follow the assignment, checked above), the
	// L1 array is untouched and the victim's own paths fail instead of
	// being counted, so the surviving paths resolve at the same levels as
	// before except for lookups that raced with the re-pull of the moved
	// replicas' contents: the L4 share may grow by a little, not by more
	// than procMaxL4Growth.
	s0, s1 := l4Share(lvBefore), l4Share(lvAfter)
	t.Logf("L4 share: %.1f%% before the kill, %.1f%% after (bound: +%.0f points)", 100*s0, 100*s1, 100*procMaxL4Growth)
	if s1 > s0+procMaxL4Growth {
		t.Errorf("L4 share grew from %.1f%% to %.1f%% after the kill of %s (bound +%.0f points)", 100*s0, 100*s1, v.id, 100*procMaxL4Growth)
	}

	c.start(v)
	c.waitReady(v.id+" restarted and the cluster whole", c.nodes...)
	c.waitAssignment("g2 rebalanced with "+v.id+" back", c.nodes, map[string]int{"g1": 6, "g2": 7, "g3": 7})
	c.lookupPass("after the restart of "+v.id, m, c.nodes, nil)
}

// groupsKillTwo kills one node of g2 and one of g3 at once (replication
// 3): their shards fail over within their groups, and every path is
// served and new ones written through the live nodes; after both restart
// the cluster is whole again.
func groupsKillTwo(c *procCluster, m *procModel) {
	var victims []*procNode
	for _, g := range []string{"g2", "g3"} {
		victims = append(victims, byGroup(c.nodes)[g][2])
	}
	live := slices.DeleteFunc(slices.Clone(c.nodes), func(n *procNode) bool { return slices.Contains(victims, n) })
	for _, v := range victims {
		c.kill(v)
	}
	for _, v := range victims {
		c.waitFailover(m, v, live)
	}
	c.verify("with "+victims[0].id+" and "+victims[1].id+" killed", m, live, nil)
	c.lookupPass("with two groups short of a node", m, live, nil)
	c.populate(m, live, []string{"/two-down"}, 2, 5)
	for _, v := range victims {
		c.start(v)
	}
	c.waitReady("both restarted and the cluster whole", c.nodes...)
	c.verify("whole again", m, c.nodes, nil)
}

// TestProcessGroupsAuto starts 9 agents with group auto and
// max_group_size 3, one after the other, as an operator grows a cluster:
// full groups split (4th node: 2+2; 7th: 2+3+2) and the cluster ends in 3
// groups of 3; each member then holds (N − M')/M' = 2 replicas, each
// group covers its 6 outside origins once, and every path created through
// random nodes is found through every node.
func TestProcessGroupsAuto(t *testing.T) {
	c := newProcCluster(t, 0)
	for range 9 {
		c.addNodeWith(procNodeOpts{Group: "auto", MaxGroupSize: 3, LRUEntries: procGroupsLRU})
	}
	start := time.Now()
	for i, n := range c.nodes {
		c.start(n)
		up := c.nodes[:i+1]
		c.waitFor(fmt.Sprintf("%d auto nodes in groups of at most 3", i+1), procReadyTimeout,
			func() { c.checkRunning(up...) }, func() (bool, string) {
				gs, err := c.groups(c.nodes[0])
				if err != nil {
					return false, err.Error()
				}
				in := 0
				for _, g := range gs {
					if len(g.Members) > 3 || g.Leader == "" {
						return false, fmt.Sprintf("groups %+v", gs)
					}
					in += len(g.Members)
				}
				if in != len(up) {
					return false, fmt.Sprintf("%d of %d nodes in groups: %+v", in, len(up), gs)
				}
				for _, n := range up {
					st, err := c.status(n)
					if err != nil {
						return false, err.Error()
					}
					if !st.Joined {
						return false, n.id + " has not joined a group"
					}
				}
				return true, ""
			})
	}
	gs, err := c.groups(c.nodes[0])
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("9 auto nodes formed %+v in %v", gs, time.Since(start).Round(time.Millisecond))
	if len(gs) != 3 {
		t.Fatalf("groups %+v, want 3 groups of 3", gs)
	}
	outside := map[string]int{}
	for _, g := range gs {
		if len(g.Members) != 3 {
			t.Fatalf("group %s has members %v, want 3", g.Group, g.Members)
		}
		outside[g.Group] = 6
		for _, id := range g.Members {
			c.nodes[slices.IndexFunc(c.nodes, func(n *procNode) bool { return n.id == id })].group = g.Group
		}
	}
	c.waitReady("9 nodes ready in their groups", c.nodes...)
	c.waitAssignment("each group covers its 6 outside origins, 2 per member", c.nodes, outside)
	// Settled, as every node sees it, within the wait's timeout.
	for _, n := range c.nodes {
		if out, errOut, code := c.at(n, "groups", "--wait", "--timeout", procReadyTimeout.String()); code != 0 || !strings.Contains(out, "cluster settled") {
			t.Fatalf("groups --wait through %s: exit %d\n%s%s", n.id, code, out, errOut)
		}
	}
	m := c.rootedModel()
	c.populate(m, c.nodes, procTops("a", 5), 3, 6)
	c.lookupPass("9 auto nodes, 3 groups", m, c.nodes, nil)
}
