package node_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ghba/ghba/fsm"
	"github.com/ghba/ghba/node"
	"github.com/ghba/ghba/node/namespace"
	"github.com/ghba/ghba/node/nodetest"
	"github.com/ghba/ghba/rpc"
	"github.com/ghba/ghba/rpc/client"
	"github.com/ghba/ghba/rpc/rpctest"
	"github.com/hashicorp/raft"
	"go.uber.org/goleak"
)

// goleakOptions ignores goroutines that are not the node's: those of the
// test runner and of other packages' background machinery.
func goleakOptions() []goleak.Option {
	return []goleak.Option{goleak.IgnoreCurrent()}
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

// checkGroup waits until every node's FSM and Raft configuration hold
// exactly want, and one leader is established among them.
func checkGroup(t *testing.T, d time.Duration, nodes []*node.Node, want []string) *node.Node {
	t.Helper()
	var leader *node.Node
	rpctest.Eventually(t, d, fmt.Sprintf("group of %v", want), func() error {
		l, err := leaderOf(nodes...)
		if err != nil {
			return err
		}
		for _, n := range nodes {
			if got := fsmMemberIDs(n); !sameSet(got, want) {
				return fmt.Errorf("%s: FSM members %v", n.ID(), got)
			}
			if !n.IsJoined() {
				return fmt.Errorf("%s: not joined", n.ID())
			}
			if n.LeaderID() != l.ID() {
				return fmt.Errorf("%s: leader %q, want %q", n.ID(), n.LeaderID(), l.ID())
			}
			// Every member must also be known and up in this node's
			// namespace (Serf tags gossiped, peer snapshot refreshed):
			// until then a write routed to that member answers
			// "unavailable".
			for _, id := range want {
				if up, _ := n.NS().SeesPeer(id); !up {
					return fmt.Errorf("%s: namespace does not see %s up yet", n.ID(), id)
				}
			}
		}
		voters, err := voterIDs(l)
		if err != nil {
			return err
		}
		if !sameSet(voters, want) {
			return fmt.Errorf("raft voters %v", voters)
		}
		leader = l
		return nil
	})
	return leader
}

// peerOf returns node id as n's Directory sees it.
func peerOf(n *node.Node, id string) (namespace.Peer, bool) {
	for _, p := range n.Directory().Peers() {
		if p.ID == id {
			return p, true
		}
	}
	return namespace.Peer{}, false
}

// fsmMemberIDs returns the ids of the members in n's group FSM.
func fsmMemberIDs(n *node.Node) []string {
	var ids []string
	for _, m := range n.GroupFSM().Members() {
		ids = append(ids, m.ID)
	}
	return ids
}

// voterIDs returns the voters of n's Raft configuration.
func voterIDs(n *node.Node) ([]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return n.Voters(ctx)
}

// leaderOf returns the one established leader among nodes, or an error.
func leaderOf(nodes ...*node.Node) (*node.Node, error) {
	var leaders []*node.Node
	for _, n := range nodes {
		if n.IsLeader() {
			leaders = append(leaders, n)
		}
	}
	if len(leaders) != 1 {
		return nil, fmt.Errorf("%d established leaders", len(leaders))
	}
	return leaders[0], nil
}

func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return resp.StatusCode, string(b)
}

// TestClusterLifecycle runs a whole life on loopback with real Raft, Serf
// and Badger: 3 nodes form (bootstrap + retry_join), the status endpoints
// answer, a 4th node joins at runtime, the leader leaves gracefully (after
// a leadership transfer), a node is killed (Serf marks it failed, the
// Directory reports it down, the FSM marks it failed) and restarted with
// its data dir (it rejoins and is up again), and a clean shutdown leaves
// no goroutines behind.
func TestClusterLifecycle(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t, goleakOptions()...) }) // runs last
	// Nodes are started on the whole test (top), not on one step: a
	// step's cleanups run when the step ends.
	top := t
	log := rpctest.Logger(t)
	c1 := nodetest.Config(t, "n1")
	c1.Bootstrap = true
	c2 := nodetest.Config(t, "n2")
	c3 := nodetest.Config(t, "n3")
	c4 := nodetest.Config(t, "n4")
	c2.RetryJoin = []string{nodetest.SerfAddr(c1)}
	c3.RetryJoin = []string{nodetest.SerfAddr(c1), nodetest.SerfAddr(c2)}
	var (
		n1, n2, n3, n4 *node.Node
		nodes          []*node.Node
		leader         *node.Node
	)
	client := client.New(client.Options{Addrs: []string{nodetest.RPCAddr(c1)}})
	defer client.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	steps := []struct {
		name string
		run  func(t *testing.T)
	}{
		{"three nodes form a group", func(t *testing.T) {
			n1 = nodetest.Start(top, c1, log)
			n2 = nodetest.Start(top, c2, log)
			n3 = nodetest.Start(top, c3, log)
			nodes = []*node.Node{n1, n2, n3}
			leader = checkGroup(t, 30*time.Second, nodes, []string{"n1", "n2", "n3"})
			for _, n := range nodes {
				if g := n.GroupName(); g != node.DefaultAutoGroup {
					t.Errorf("%s: group %q, want %q", n.ID(), g, node.DefaultAutoGroup)
				}
			}
		}},
		{"directories agree", func(t *testing.T) {
			rpctest.Eventually(t, 10*time.Second, "root home n1", func() error {
				for _, n := range nodes {
					if r := n.Directory().RootShard(); r != "n1" {
						return fmt.Errorf("%s: root shard %q", n.ID(), r)
					}
				}
				return nil
			})
			rpctest.Eventually(t, 10*time.Second, "directory of 3", func() error {
				for _, n := range nodes {
					peers := n.Directory().Peers()
					if len(peers) != 3 {
						return fmt.Errorf("%s: peers %v", n.ID(), peers)
					}
					for _, p := range peers {
						if !p.Up || p.Leaving || p.Group != node.DefaultAutoGroup || p.RPCAddr == "" {
							return fmt.Errorf("%s: peer %+v", n.ID(), p)
						}
					}
				}
				return nil
			})
		}},
		{"http endpoints", func(t *testing.T) {
			rpctest.Eventually(t, 20*time.Second, "every node serving (/v1/health)", func() error {
				for _, cfg := range []node.Config{c1, c2, c3} {
					if code, body := httpGet(t, "http://"+nodetest.HTTPAddr(cfg)+"/v1/health"); code != http.StatusOK || !strings.Contains(body, `"status":"serving"`) {
						return fmt.Errorf("%s /v1/health: %d %s", cfg.NodeID, code, body)
					}
				}
				return nil
			})
			code, body := httpGet(t, "http://"+nodetest.HTTPAddr(c2)+"/v1/status")
			if code != http.StatusOK {
				t.Fatalf("/v1/status: %d %s", code, body)
			}
			var st map[string]any
			if err := json.Unmarshal([]byte(body), &st); err != nil {
				t.Fatalf("/v1/status: %v: %s", err, body)
			}
			for _, k := range []string{"node_id", "group", "raft_role", "leader", "files", "replicas_held", "filter_bytes", "levels", "hops", "root_home", "raft", "group_members", "peers"} {
				if _, ok := st[k]; !ok {
					t.Errorf("/v1/status lacks %q: %s", k, body)
				}
			}
			if st["node_id"] != "n2" || st["group"] != node.DefaultAutoGroup || st["leader"] != leader.ID() {
				t.Errorf("/v1/status: %s", body)
			}
			if st["status"] != "alive" {
				t.Errorf("/v1/status: status %v, want alive", st["status"])
			}
			for _, cfg := range []node.Config{c1, c2, c3} {
				if code, body := httpGet(t, "http://"+nodetest.HTTPAddr(cfg)+"/v1/health/live"); code != http.StatusOK || !strings.Contains(body, `"status":"live"`) {
					t.Errorf("%s /v1/health/live: %d %s", cfg.NodeID, code, body)
				}
			}
			code, body = httpGet(t, "http://"+nodetest.HTTPAddr(c1)+"/metrics")
			if code != http.StatusOK {
				t.Fatalf("/metrics: %d", code)
			}
			for _, want := range []string{
				`ghba_node_info{group="g1",node_id="n1"`, "ghba_raft_leader ", `ghba_raft_state{state="Leader"}`,
				`ghba_group_members{status="active"} 3`, `ghba_serf_members{status="alive"} 3`,
				`ghba_lookups_total{level="L1"}`, "ghba_filter_bytes ", `ghba_inodes{type="file"}`,
				"ghba_replicas_held ", "go_goroutines ", "# TYPE ghba_lookups_total counter",
				`ghba_txns_total{result="committed"}`, `ghba_filter_array_members{array="l1"}`,
				"ghba_raft_term ", `ghba_serf_events_total{event="member-join"}`, "ghba_serving 1",
			} {
				if !strings.Contains(body, want) {
					t.Errorf("/metrics lacks %q", want)
				}
			}
			code, body = httpGet(t, "http://"+nodetest.HTTPAddr(c3)+"/")
			// With ACLs off the console's cluster page is open: the old
			// status page's tables and the charts.
			if code != http.StatusOK || !strings.Contains(body, `<table id="members">`) || !strings.Contains(body, "n1") ||
				!strings.Contains(body, "leader") || !strings.Contains(body, `id="acl-off"`) || !strings.Contains(body, `<svg class="chart"`) {
				t.Errorf("console's cluster page: %d %s", code, body)
			}
		}},
		{"admin rpcs", func(t *testing.T) {
			// Every node serves (the step before); the node asked learns
			// the others' readiness through their Serf tags.
			var mr *rpc.MembersResponse
			rpctest.Eventually(t, 20*time.Second, "members all alive", func() (err error) {
				if mr, err = client.Members(ctx); err != nil {
					return err
				}
				for _, m := range mr.Members {
					if m.Status != "alive" {
						return fmt.Errorf("member %s %s", m.ID, m.Status)
					}
				}
				return nil
			})
			roles := map[string]int{}
			for _, m := range mr.Members {
				if m.Status != "alive" || m.Group != node.DefaultAutoGroup || m.RPCAddr == "" || m.SerfAddr == "" {
					t.Errorf("member %+v", m)
				}
				roles[m.RaftRole]++
			}
			if len(mr.Members) != 3 || roles["leader"] != 1 || roles["follower"] != 2 {
				t.Errorf("members %+v", mr.Members)
			}
			gr, err := client.Groups(ctx)
			if err != nil {
				t.Fatalf("Groups: %v", err)
			}
			if len(gr.Groups) != 1 || gr.Groups[0].Leader != leader.ID() || len(gr.Groups[0].Members) != 3 {
				t.Errorf("groups %+v", gr.Groups)
			}
			// One group of every node: no replica to load, nothing pending.
			rpctest.Eventually(t, 20*time.Second, "groups settled", func() error {
				gr, err := client.Groups(ctx)
				switch {
				case err != nil:
					return err
				case !gr.Settled || len(gr.Groups) != 1 || !gr.Groups[0].Settled:
					return fmt.Errorf("not settled: %+v", gr)
				}
				return nil
			})
			sr, err := client.Status(ctx, nodetest.RPCAddr(c3))
			if err != nil || sr.NodeID != "n3" || sr.RaftRole == "" {
				t.Errorf("Status: %+v, %v", sr, err)
			}
		}},
		{"a fourth node joins at runtime", func(t *testing.T) {
			n4 = nodetest.Start(top, c4, log)
			if st := n4.Status(); st.Settled || !strings.Contains(st.Unsettled, "not a member of a group") {
				t.Errorf("a node outside any group: settled %v (%q)", st.Settled, st.Unsettled)
			}
			if _, err := client.Join(ctx, nodetest.RPCAddr(c4), []string{nodetest.SerfAddr(c3)}); err != nil {
				t.Fatalf("Join: %v", err)
			}
			nodes = append(nodes, n4)
			checkGroup(t, 30*time.Second, nodes, []string{"n1", "n2", "n3", "n4"})
		}},
		// The leader leaves gracefully: leadership goes to n4 first, then
		// n4 leaves (it must hand leadership over again).
		{"the leader leaves", func(t *testing.T) {
			leader, err := leaderOf(nodes...)
			if err != nil {
				t.Fatal(err)
			}
			if leader != n4 {
				if err := leader.Raft().LeadershipTransferToServer(raft.ServerID("n4"), raft.ServerAddress(n4.RaftAddr())).Error(); err != nil {
					t.Fatalf("transfer to n4: %v", err)
				}
				rpctest.Eventually(t, 10*time.Second, "n4 leads", func() error {
					if !n4.IsLeader() {
						return fmt.Errorf("leader %q", n4.LeaderID())
					}
					return nil
				})
			}
			lr, err := client.Leave(ctx, nodetest.RPCAddr(c4), "n4")
			if err != nil {
				t.Fatalf("Leave: %v", err)
			}
			t.Logf("leave: %+v", lr)
			select {
			case <-n4.Done():
			case <-time.After(10 * time.Second):
				t.Fatal("n4.Done not closed after Leave")
			}
			nodetest.Shutdown(t, n4)
			nodes = nodes[:3]
			checkGroup(t, 30*time.Second, nodes, []string{"n1", "n2", "n3"})
			rpctest.Eventually(t, 10*time.Second, "n4 gone from serf and directories", func() error {
				for _, n := range nodes {
					if p, ok := peerOf(n, "n4"); ok {
						return fmt.Errorf("%s still lists %+v", n.ID(), p)
					}
					for _, m := range n.SerfMembers() {
						if m.Name == "n4" && m.Status.String() != "left" {
							return fmt.Errorf("%s: serf status of n4: %s", n.ID(), m.Status)
						}
					}
				}
				return nil
			})
		}},
		// Kill n3 (no leave): Serf marks it failed, the Directory reports
		// it down and the group's FSM marks it failed.
		{"a killed node is marked failed", func(t *testing.T) {
			nodetest.Shutdown(t, n3)
			rpctest.Eventually(t, 20*time.Second, "n3 failed", func() error {
				for _, n := range nodes[:2] {
					p, ok := peerOf(n, "n3")
					if !ok || p.Up {
						return fmt.Errorf("%s: n3 is %+v (known %t)", n.ID(), p, ok)
					}
				}
				l, err := leaderOf(n1, n2)
				if err != nil {
					return err
				}
				if m, ok := l.GroupFSM().Member("n3"); !ok || m.Status != fsm.StatusFailed {
					return fmt.Errorf("FSM member n3: %+v", m)
				}
				return nil
			})
		}},
		{"a restarted node is back", func(t *testing.T) {
			n3 = nodetest.Start(top, c3, log)
			nodes[2] = n3
			checkGroup(t, 30*time.Second, nodes, []string{"n1", "n2", "n3"})
			rpctest.Eventually(t, 20*time.Second, "n3 up again", func() error {
				for _, n := range nodes {
					p, ok := peerOf(n, "n3")
					if !ok || !p.Up {
						return fmt.Errorf("%s: n3 is %+v", n.ID(), p)
					}
				}
				l, err := leaderOf(nodes...)
				if err != nil {
					return err
				}
				if m, _ := l.GroupFSM().Member("n3"); m.Status != fsm.StatusActive {
					return fmt.Errorf("FSM member n3: %+v", m)
				}
				return nil
			})
			if !n3.IsJoined() || n3.GroupName() != node.DefaultAutoGroup {
				t.Errorf("restarted n3: joined %t group %q", n3.IsJoined(), n3.GroupName())
			}
		}},
		// The group loses a live member (as if Serf had reaped it while it
		// was partitioned away): the leader's reconcile adds it back.
		{"a lost member is added back", func(t *testing.T) {
			leader, err := leaderOf(nodes...)
			if err != nil {
				t.Fatal(err)
			}
			victim := n3
			if leader == n3 {
				victim = n2
			}
			if err := leader.RemoveMember(ctx, victim.ID()); err != nil {
				t.Fatalf("removing %s: %v", victim.ID(), err)
			}
			checkGroup(t, 30*time.Second, nodes, []string{"n1", "n2", "n3"})
		}},
		{"clean shutdown", func(t *testing.T) {
			client.Close()
			for _, n := range []*node.Node{n3, n2, n1} {
				nodetest.Shutdown(t, n)
			}
		}},
	}
	for _, s := range steps {
		if !t.Run(s.name, s.run) {
			return
		}
	}
}

// TestTwoGroups checks fixed group names, bootstrapping a second group, the
// auto choice of the smallest group below max_group_size, and the leader
// announcing the nodes of other groups as origins of its group's FSM.
func TestTwoGroups(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t, goleakOptions()...) })
	log := rpctest.Logger(t)

	ca := nodetest.Config(t, "a1")
	ca.Group, ca.Bootstrap, ca.MaxGroupSize = "ga", true, 2
	cb1 := nodetest.Config(t, "b1")
	cb1.Group, cb1.Bootstrap, cb1.MaxGroupSize = "gb", true, 2
	cb1.RetryJoin = []string{nodetest.SerfAddr(ca)}
	cb2 := nodetest.Config(t, "b2")
	cb2.Group, cb2.MaxGroupSize = "gb", 2
	cb2.RetryJoin = []string{nodetest.SerfAddr(ca)}
	cx := nodetest.Config(t, "x")
	cx.MaxGroupSize = 2 // group: auto
	cx.RetryJoin = []string{nodetest.SerfAddr(cb1)}

	a1 := nodetest.Start(t, ca, log)
	b1 := nodetest.Start(t, cb1, log)
	b2 := nodetest.Start(t, cb2, log)
	checkGroup(t, 30*time.Second, []*node.Node{a1}, []string{"a1"})
	checkGroup(t, 30*time.Second, []*node.Node{b1, b2}, []string{"b1", "b2"})

	// gb is full (2 of 2), so the auto node joins ga.
	x := nodetest.Start(t, cx, log)
	checkGroup(t, 30*time.Second, []*node.Node{a1, x}, []string{"a1", "x"})
	if g := x.GroupName(); g != "ga" {
		t.Fatalf("auto node joined %q, want ga", g)
	}

	rpctest.Eventually(t, 20*time.Second, "origins announced", func() error {
		for _, tc := range []struct {
			nodes []*node.Node
			want  []string
		}{{[]*node.Node{a1, x}, []string{"b1", "b2"}}, {[]*node.Node{b1, b2}, []string{"a1", "x"}}} {
			l, err := leaderOf(tc.nodes...)
			if err != nil {
				return err
			}
			if got := l.GroupFSM().Origins(); !sameSet(got, tc.want) {
				return fmt.Errorf("%s: origins %v, want %v", l.ID(), got, tc.want)
			}
			lo, hi := l.GroupFSM().Balance()
			if hi-lo > 1 {
				return fmt.Errorf("%s: balance %d..%d", l.ID(), lo, hi)
			}
		}
		return nil
	})
	// a1 started a new cluster and homes "/"; b1 bootstrapped its group
	// inside that cluster (its retry_join answered), so it adopts a1.
	rpctest.Eventually(t, 10*time.Second, "everyone sees 4 peers and the root", func() error {
		for _, n := range []*node.Node{a1, b1, b2, x} {
			if p := n.Directory().Peers(); len(p) != 4 {
				return fmt.Errorf("%s: peers %v", n.ID(), p)
			}
			if r := n.Directory().RootShard(); r != "a1" {
				return fmt.Errorf("%s: root shard %q", n.ID(), r)
			}
		}
		return nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	groups := a1.Groups(ctx).Groups
	if len(groups) != 2 || groups[0].Group != "ga" || groups[1].Group != "gb" ||
		groups[0].Leader != "a1" && groups[0].Leader != "x" || groups[1].Leader == "" {
		t.Errorf("groups %+v", groups)
	}
	for _, n := range []*node.Node{x, b2, b1, a1} {
		nodetest.Shutdown(t, n)
	}
}

// shardsSettled waits until the shards nodes report are exactly want, each
// led by its owner with min(r, len(nodes)) replicas in its Raft
// configuration, and returns them.
func shardsSettled(t *testing.T, d time.Duration, nodes []*node.Node, want []string, r int) []rpc.ShardInfo {
	t.Helper()
	var out []rpc.ShardInfo
	rpctest.Eventually(t, d, fmt.Sprintf("shards %v settled at R=%d", want, r), func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		ss := nodes[0].Shards(ctx)
		var ids []string
		for _, s := range ss {
			ids = append(ids, s.Shard)
			switch {
			case s.Leader == "":
				return fmt.Errorf("shard %s: no leader", s.Shard)
			case s.Leader != s.Owner:
				return fmt.Errorf("shard %s: led by %s, owned by %s", s.Shard, s.Leader, s.Owner)
			case len(s.Replicas) != min(r, len(nodes)) || len(s.Learners) > 0:
				return fmt.Errorf("shard %s: replicas %v, learners %v", s.Shard, s.Replicas, s.Learners)
			}
		}
		if !sameSet(ids, want) {
			return fmt.Errorf("shards %v", ids)
		}
		out = ss
		return nil
	})
	return out
}

// TestLeaveAndKillKeepFiles runs the namespace on the cluster layer, with
// single-copy homes (R=1) and replicated ones (R=3): files created through
// any node survive the graceful leave of the node leading the root's shard
// and the group (its shard moves to another member, replica by replica,
// and keeps its name); while the leader of a shard is killed its paths
// answer unavailable — never "not found" — with R=1, and are served by a
// surviving replica with R=3; all are served once it restarts.
func TestLeaveAndKillKeepFiles(t *testing.T) {
	for _, r := range []int{1, 3} {
		t.Run(fmt.Sprintf("R=%d", r), func(t *testing.T) { testLeaveAndKill(t, r) })
	}
}

func testLeaveAndKill(t *testing.T, r int) {
	t.Cleanup(func() { goleak.VerifyNone(t, goleakOptions()...) })
	log := rpctest.Logger(t)
	_, nodes := startJoined(t, log, 4, func(c *node.Config) {
		c.Replication = r
		c.Placement = namespace.PlacementBalanced // files spread over every shard
	})
	checkGroup(t, 30*time.Second, nodes, []string{"n1", "n2", "n3", "n4"})
	shardsSettled(t, time.Minute, nodes, []string{"n1", "n2", "n3", "n4"}, r)
	client := client.New(client.Options{Addrs: nodeAddrs(nodes), HomeCacheSize: -1})
	defer client.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	mustMkdir(t, ctx, client, "/d")
	var paths []string
	for i := range 40 {
		p := fmt.Sprintf("/d/f%02d", i)
		if i%4 == 0 {
			p = fmt.Sprintf("/g%02d", i)
		}
		mustCreate(t, ctx, client, p)
		paths = append(paths, p)
	}
	paths = append(paths, "/", "/d")
	homes := map[string]string{}
	for _, p := range paths {
		lr, err := client.Lookup(ctx, p)
		if err != nil {
			t.Fatalf("lookup %s: %v", p, err)
		}
		if lr.Leader != lr.Home {
			t.Errorf("lookup %s: shard %s led by %q", p, lr.Home, lr.Leader)
		}
		homes[p] = lr.Home
	}
	if homes["/"] != "n1" {
		t.Fatalf("/ homed on shard %q", homes["/"])
	}
	perShard := map[string]int{}
	for _, h := range homes {
		perShard[h]++
	}
	t.Logf("paths per shard: %v", perShard)
	if len(perShard) < 3 {
		t.Errorf("balanced placement used %d of 4 shards: %v", len(perShard), perShard)
	}

	// n1 leads the root's shard and the group: it leaves. Its shard gets
	// another owner and keeps its name.
	lr, err := client.Leave(ctx, nodetest.RPCAddr(nodes[0].Config()), "n1")
	if err != nil {
		t.Fatalf("leave n1: %v", err)
	}
	if !slices.Contains(lr.HandedShards, "n1") || lr.MovedShardReplicas < 1 {
		t.Errorf("leave of n1: %+v, want shard n1 handed and its replicas moved", lr)
	}
	nodetest.Shutdown(t, nodes[0])
	nodes = nodes[1:]
	client.SetAddrs(nodeAddrs(nodes))
	checkGroup(t, 30*time.Second, nodes, []string{"n2", "n3", "n4"})
	shards := shardsSettled(t, time.Minute, nodes, []string{"n1", "n2", "n3", "n4"}, r)
	rootLeader := shards[0].Leader
	rpctest.Eventually(t, 10*time.Second, "the root's shard everywhere", func() error {
		for _, n := range nodes {
			if got := n.Directory().RootShard(); got != "n1" {
				return fmt.Errorf("%s: root shard %q", n.ID(), got)
			}
		}
		return nil
	})
	statAll := func(what string) {
		t.Helper()
		rpctest.Eventually(t, 20*time.Second, what, func() error {
			for _, p := range paths {
				if _, err := client.Stat(ctx, p); err != nil {
					return fmt.Errorf("stat %s: %w", p, err)
				}
			}
			return nil
		})
	}
	statAll("every path after n1 left")

	// Kill the node leading the root's shard.
	victim := slices.IndexFunc(nodes, func(n *node.Node) bool { return n.ID() == rootLeader })
	vcfg := nodes[victim].Config()
	led := map[string]bool{}
	for _, s := range shards {
		if s.Leader == rootLeader {
			led[s.Shard] = true
		}
	}
	nodetest.Shutdown(t, nodes[victim])
	rest := slices.Delete(slices.Clone(nodes), victim, victim+1)
	client.SetAddrs(nodeAddrs(rest))
	var onVictim []string
	for p, h := range homes {
		if led[h] {
			onVictim = append(onVictim, p)
		}
	}
	if r == 1 {
		// Each stat waits for a leader (bounded, about 5 s) before it
		// answers unavailable: they run at once.
		var wg sync.WaitGroup
		for _, p := range onVictim {
			wg.Go(func() {
				_, err := client.Stat(ctx, p)
				if err == nil || errors.Is(err, fs.ErrNotExist) || !errors.Is(err, rpc.ErrUnavailable) {
					t.Errorf("stat %s on killed %s: %v, want unavailable", p, rootLeader, err)
				}
			})
		}
		wg.Wait()
	} else {
		// A surviving replica takes over: the paths answer again, and
		// never "not found" meanwhile.
		rpctest.Eventually(t, 30*time.Second, "fail-over of "+rootLeader+"'s shards", func() error {
			for _, p := range onVictim {
				_, err := client.Stat(ctx, p)
				if errors.Is(err, fs.ErrNotExist) {
					t.Fatalf("stat %s during fail-over: %v", p, err)
				}
				if err != nil {
					return fmt.Errorf("stat %s: %w", p, err)
				}
			}
			return nil
		})
		if _, err := client.Create(ctx, &rpc.CreateRequest{Path: "/after-failover", Mode: 0o644}); err != nil {
			t.Errorf("create after fail-over: %v", err)
		}
		paths = append(paths, "/after-failover")
	}
	nodes[victim] = nodetest.Start(t, vcfg, log)
	client.SetAddrs(nodeAddrs(nodes))
	checkGroup(t, 30*time.Second, nodes, []string{"n2", "n3", "n4"})
	// Leadership returns to the owners.
	shardsSettled(t, time.Minute, nodes, []string{"n1", "n2", "n3", "n4"}, r)
	statAll("every path after " + rootLeader + " restarted")

	client.Close()
	for _, n := range nodes {
		nodetest.Shutdown(t, n)
	}
}

// TestRestartAtNewAddress: a node restarted with its data directory at
// another address (a container or a pod with a new IP) is taken back: its
// group's record, its group Raft server and its shard replicas' servers
// follow it to the new address, it serves again, and its shard's
// leadership comes back to it.
func TestRestartAtNewAddress(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t, goleakOptions()...) })
	log := rpctest.Logger(t)
	cfgs, nodes := startJoined(t, log, 3, func(c *node.Config) { c.Replication = 3 })
	all := []string{"n1", "n2", "n3"}
	checkGroup(t, 30*time.Second, nodes, all)
	shardsSettled(t, time.Minute, nodes, all, 3)
	cl := client.New(client.Options{Addrs: nodeAddrs(nodes), HomeCacheSize: -1})
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var paths []string
	for i := range 12 {
		p := fmt.Sprintf("/a%02d", i)
		if _, err := cl.Create(ctx, &rpc.CreateRequest{Path: p, Mode: 0o644}); err != nil {
			t.Fatalf("create %s: %v", p, err)
		}
		paths = append(paths, p)
	}

	nodetest.Shutdown(t, nodes[1])
	member := func(id string) (rpc.Member, error) {
		for _, m := range nodes[0].Members(ctx) {
			if m.ID == id {
				return m, nil
			}
		}
		return rpc.Member{}, fmt.Errorf("no member %s", id)
	}
	rpctest.Eventually(t, 30*time.Second, "n2 seen failed", func() error {
		if m, err := member("n2"); err != nil || m.Status != "failed" {
			return fmt.Errorf("n2: %+v, %v", m, err)
		}
		return nil
	})
	moved := cfgs[1]
	moved.BindAddr = "127.0.0.2"
	nodes[1] = nodetest.Start(t, moved, log)
	rpctest.Eventually(t, time.Minute, "n2 alive at 127.0.0.2", func() error {
		m, err := member("n2")
		if err != nil || m.Status != "alive" || !strings.HasPrefix(m.RPCAddr, "127.0.0.2:") {
			return fmt.Errorf("n2: %+v, %v", m, err)
		}
		return nil
	})
	shardsSettled(t, time.Minute, nodes, all, 3)
	at := client.New(client.Options{Addrs: []string{nodetest.RPCAddr(moved)}, HomeCacheSize: -1})
	defer at.Close()
	for _, p := range paths {
		if _, err := at.Stat(ctx, p); err != nil {
			t.Errorf("stat %s through n2 at its new address: %v", p, err)
		}
	}
	if _, err := at.Create(ctx, &rpc.CreateRequest{Path: "/after-move", Mode: 0o644}); err != nil {
		t.Errorf("create through n2 at its new address: %v", err)
	}
}

// TestRepairAfterFailure: R=3 in a group of 4; a node is killed and stays
// down: once it has been failed for replica_repair_after, the group's
// leader applies RepairMember, every replica it hosted is rebuilt on the
// other members and its shard gets a live owner, so every shard is back
// to 3 replicas led by a live node, and every file is served. When it
// comes back it takes replicas again.
func TestRepairAfterFailure(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t, goleakOptions()...) })
	log := rpctest.Logger(t)
	cfgs, nodes := startJoined(t, log, 4, func(c *node.Config) {
		c.Replication = 3
		c.ReplicaRepairAfter = 2 * time.Second
	})
	all := []string{"n1", "n2", "n3", "n4"}
	checkGroup(t, 30*time.Second, nodes, all)
	shardsSettled(t, time.Minute, nodes, all, 3)
	var addrs []string
	for _, n := range nodes[:3] {
		addrs = append(addrs, nodetest.RPCAddr(n.Config()))
	}
	client := client.New(client.Options{Addrs: addrs, HomeCacheSize: -1})
	defer client.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var paths []string
	for i := range 40 {
		p := fmt.Sprintf("/r%02d", i)
		mustCreate(t, ctx, client, p)
		paths = append(paths, p)
	}

	nodetest.Shutdown(t, nodes[3]) // n4 is lost
	live := nodes[:3]
	// Repaired: every shard, n4's included, has 3 replicas on live nodes
	// and a live owner that leads it.
	rpctest.Eventually(t, time.Minute, "n4's replicas rebuilt elsewhere", func() error {
		sctx, scancel := context.WithTimeout(ctx, 5*time.Second)
		defer scancel()
		ss := live[0].Shards(sctx)
		if len(ss) != 4 {
			return fmt.Errorf("shards %+v", ss)
		}
		for _, s := range ss {
			if s.Leader == "" || s.Leader != s.Owner || s.Owner == "n4" || len(s.Learners) > 0 ||
				!sameSet(s.Replicas, []string{"n1", "n2", "n3"}) {
				return fmt.Errorf("shard %s: leader %q owner %q replicas %v learners %v", s.Shard, s.Leader, s.Owner, s.Replicas, s.Learners)
			}
		}
		return nil
	})
	var repairs uint64
	for _, n := range live {
		repairs += n.Status().ReplicaRepairs
	}
	if repairs != 1 {
		t.Errorf("%d repairs counted, want 1", repairs)
	}
	for _, p := range paths {
		if _, err := client.Stat(ctx, p); err != nil {
			t.Errorf("stat %s after the repair: %v", p, err)
		}
	}

	// n4 returns and takes replicas again.
	nodes[3] = nodetest.Start(t, cfgs[3], log)
	checkGroup(t, 30*time.Second, nodes, all)
	rpctest.Eventually(t, time.Minute, "n4 hosts replicas again", func() error {
		if st := nodes[3].Status(); len(st.Replicas) == 0 {
			return errors.New("n4 hosts no replica")
		}
		return nil
	})
	shardsSettled(t, time.Minute, nodes, all, 3)
	for _, p := range paths {
		if _, err := client.Stat(ctx, p); err != nil {
			t.Errorf("stat %s after n4 returned: %v", p, err)
		}
	}
	client.Close()
	for _, n := range nodes {
		nodetest.Shutdown(t, n)
	}
}

// startJoined starts k nodes n1…nk of one auto group: n1 bootstraps the
// cluster, the others retry_join it; tweak adjusts every config.
func startJoined(t *testing.T, log *slog.Logger, k int, tweak func(c *node.Config)) ([]node.Config, []*node.Node) {
	t.Helper()
	var cfgs []node.Config
	var nodes []*node.Node
	for i := 1; i <= k; i++ {
		c := nodetest.Config(t, fmt.Sprintf("n%d", i))
		tweak(&c)
		if i == 1 {
			c.Bootstrap = true
		} else {
			c.RetryJoin = []string{nodetest.SerfAddr(cfgs[0])}
		}
		cfgs = append(cfgs, c)
		nodes = append(nodes, nodetest.Start(t, c, log))
	}
	return cfgs, nodes
}

// TestLeaveRightAfterJoin leaves a node the moment it has joined, before
// its shard host has opened (and bootstrapped) the shard it asked its
// group to create. The leave must wait for that shard to exist and then
// hand it over like any other: otherwise the group keeps a shard that no
// replica can elect a leader for, and every later leave of a node placed
// a replica of it waits forever.
func TestLeaveRightAfterJoin(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t, goleakOptions()...) })
	log := rpctest.Logger(t)
	cfgs, nodes := startJoined(t, log, 2, func(c *node.Config) {})
	checkGroup(t, 30*time.Second, nodes, []string{"n1", "n2"})
	c3 := nodetest.Config(t, "n3")
	c3.RetryJoin = []string{nodetest.SerfAddr(cfgs[0])}
	n3 := nodetest.Start(t, c3, log)
	// Polled every millisecond: the window is the moment after the join.
	for deadline := time.Now().Add(30 * time.Second); !n3.IsJoined(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("n3 not joined after 30s")
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	lr, err := n3.Leave(ctx)
	if err != nil {
		t.Fatalf("leave n3 right after its join: %v", err)
	}
	t.Logf("leave of n3: %+v", lr)
	nodetest.Shutdown(t, n3)
	checkGroup(t, 30*time.Second, nodes, []string{"n1", "n2"})
	shardsSettled(t, time.Minute, nodes, []string{"n1", "n2", "n3"}, 3)
	// n2 hosts a replica of every shard, n3's included: it can leave.
	if _, err := nodes[1].Leave(ctx); err != nil {
		t.Fatalf("leave n2 afterwards: %v", err)
	}
}

// mustMkdir makes directory p (and its parents) through c, trying again
// for up to 20 s while the cluster settles (mkdir -p is idempotent).
func mustMkdir(t *testing.T, ctx context.Context, c *client.Client, p string) {
	t.Helper()
	rpctest.Eventually(t, 20*time.Second, "mkdir "+p, func() error {
		_, err := c.Mkdir(ctx, &rpc.MkdirRequest{Path: p, Mode: 0o755, Parents: true})
		return err
	})
}

// mustCreate creates the file p through c, trying again for up to 30 s
// while the create fails as unavailable (a shard between leaders for a
// moment on a loaded machine). "Exists" after such a failure means that
// an attempt whose answer was lost created it.
func mustCreate(t *testing.T, ctx context.Context, c *client.Client, p string) {
	t.Helper()
	failed := false
	rpctest.Eventually(t, 30*time.Second, "create "+p, func() error {
		_, err := c.Create(ctx, &rpc.CreateRequest{Path: p, Mode: 0o644})
		switch {
		case err == nil, failed && errors.Is(err, fs.ErrExist):
			return nil
		case errors.Is(err, rpc.ErrUnavailable):
			failed = true
			return err
		}
		t.Fatalf("create %s: %v", p, err)
		return nil
	})
}
