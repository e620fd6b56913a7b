package nodetest

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ghba/ghba/node/namespace"
	"github.com/ghba/ghba/node/raftmux"
	"github.com/ghba/ghba/node/shard"
	"github.com/ghba/ghba/node/store"
	"github.com/ghba/ghba/rpc"
	"github.com/ghba/ghba/rpc/client"
	"github.com/ghba/ghba/rpc/rpctest"
)

// Directory is a namespace.Directory whose membership the test sets: every
// node of a Namespaces cluster sees the same peers through its own View.
// It is safe for concurrent use.
type Directory struct {
	mu     sync.Mutex
	peers  map[string]namespace.Peer
	shards map[string]namespace.ShardInfo
	root   string
	subs   map[chan struct{}]struct{}
	blind  map[string]bool // the nodes whose view shows no other node up (Blind)
}

// NewDirectory returns a Directory without peers whose root shard is root.
func NewDirectory(root string) *Directory {
	return &Directory{peers: map[string]namespace.Peer{}, shards: map[string]namespace.ShardInfo{},
		root: root, subs: map[chan struct{}]struct{}{}, blind: map[string]bool{}}
}

// Blind makes node self's view what a node that has just started sees
// before gossip reaches it: no other node up, no other host of any shard,
// no leader other than itself. It notifies every subscriber; restore
// gives the node the Directory's view again.
func (d *Directory) Blind(self string) (restore func()) {
	d.mu.Lock()
	d.blind[self] = true
	d.mu.Unlock()
	d.notify()
	return func() {
		d.mu.Lock()
		delete(d.blind, self)
		d.mu.Unlock()
		d.notify()
	}
}

// UpdateShard changes shard id (created if unknown) with fn and notifies
// every subscriber.
func (d *Directory) UpdateShard(id string, fn func(s *namespace.ShardInfo)) {
	d.mu.Lock()
	s := d.shards[id]
	s.ID = id
	fn(&s)
	d.shards[id] = s
	d.mu.Unlock()
	d.notify()
}

// HideShard removes shard id from the Directory, as gossip that stops
// naming a shard for a while does, and notifies every subscriber; restore
// puts it back as it was.
func (d *Directory) HideShard(id string) (restore func()) {
	d.mu.Lock()
	s, ok := d.shards[id]
	delete(d.shards, id)
	d.mu.Unlock()
	d.notify()
	return func() {
		if ok {
			d.UpdateShard(id, func(si *namespace.ShardInfo) { *si = s })
		}
	}
}

// Update changes peer id (created if unknown) with fn and notifies every
// subscriber.
func (d *Directory) Update(id string, fn func(p *namespace.Peer)) {
	d.mu.Lock()
	p := d.peers[id]
	p.ID = id
	fn(&p)
	d.peers[id] = p
	d.mu.Unlock()
	d.notify()
}

// SetRoot records id as the root's shard and notifies every subscriber.
func (d *Directory) SetRoot(id string) {
	d.mu.Lock()
	d.root = id
	d.mu.Unlock()
	d.notify()
}

// leaderOf returns the leader of shard s ("" when none).
func (d *Directory) leaderOf(s string) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.shards[s].Leader
}

// Root returns the root's shard.
func (d *Directory) Root() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.root
}

func (d *Directory) notify() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for ch := range d.subs {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// View returns the Directory as node self sees it.
func (d *Directory) View(self string) namespace.Directory { return &dirView{self: self, d: d} }

// dirView is one node's view of a Directory.
type dirView struct {
	self string
	d    *Directory
}

func (v *dirView) Self() namespace.Peer {
	v.d.mu.Lock()
	defer v.d.mu.Unlock()
	return v.d.peers[v.self]
}

func (v *dirView) Peers() []namespace.Peer {
	v.d.mu.Lock()
	defer v.d.mu.Unlock()
	ps := sortedByID(v.d.peers, func(p namespace.Peer) string { return p.ID })
	if v.d.blind[v.self] {
		for i := range ps {
			ps[i].Up = ps[i].ID == v.self
		}
	}
	return ps
}

func (v *dirView) RootShard() string { return v.d.Root() }

func (v *dirView) Shards() []namespace.ShardInfo {
	v.d.mu.Lock()
	defer v.d.mu.Unlock()
	ss := sortedByID(v.d.shards, func(s namespace.ShardInfo) string { return s.ID })
	if v.d.blind[v.self] {
		for i := range ss {
			s := &ss[i]
			if s.Leader != v.self {
				s.Leader = ""
			}
			s.Hosts = slices.DeleteFunc(slices.Clone(s.Hosts), func(h string) bool { return h != v.self })
		}
	}
	return ss
}

// sortedByID returns the values of m sorted by their id.
func sortedByID[T any](m map[string]T, id func(T) string) []T {
	out := make([]T, 0, len(m))
	for _, v := range m {
		out = append(out, v)
	}
	slices.SortFunc(out, func(a, b T) int { return strings.Compare(id(a), id(b)) })
	return out
}

func (v *dirView) Subscribe() (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	v.d.mu.Lock()
	v.d.subs[ch] = struct{}{}
	v.d.mu.Unlock()
	return ch, func() {
		v.d.mu.Lock()
		delete(v.d.subs, ch)
		v.d.mu.Unlock()
	}
}

// NamespaceNode is one node of a Namespaces cluster: the replicas it hosts
// (real Raft groups with their Badger stores, over one raft port), an RPC
// server and client, and a namespace. Its fields are valid while Running.
type NamespaceNode struct {
	ID      string
	Addr    string // RPC address (the same across restarts)
	DataDir string
	// Replicas are the shard replicas it hosts, by shard: its own shard's
	// (named after it) and, with Replication R, those of the R−1 nodes
	// before it.
	Replicas map[string]*shard.Replica
	Replica  *shard.Replica // its own shard's replica
	Store    *store.Store   // its own shard's replica's store (reads)
	NS       *namespace.Namespace
	Running  bool

	srv      *rpc.Server
	cl       *client.Client
	served   chan struct{}
	raftLn   net.Listener // the raft port, bound again for a restart
	raftAddr string
	mux      *raftmux.Mux
	muxDone  chan struct{}
	watch    context.CancelFunc
	watched  sync.WaitGroup
}

// Namespaces is an in-process cluster of namespaces on loopback, named
// n1…nN, each the owner of the shard named after it, with n1's shard
// homing "/": real Raft groups (one per shard, with Replication replicas
// on consecutive nodes) and Badger stores in temporary directories, real
// RPC, and a Directory the test controls (no group Raft, no Serf), for
// tests and benchmarks of the namespace logic. A shard's leader is whoever
// its Raft elects: its owner at first; another replica while the owner is
// stopped (Balance hands leadership back).
type Namespaces struct {
	t    testing.TB
	opts NamespacesOptions
	// Dir is the membership every node sees.
	Dir *Directory
	// IDs are the node ids in order.
	IDs []string
	// Nodes holds every node by id.
	Nodes map[string]*NamespaceNode
	// Client is a client of the whole cluster (it caches homes).
	Client *client.Client
}

// NamespacesOptions configure a Namespaces cluster.
type NamespacesOptions struct {
	// Nodes is the number of nodes (default 3).
	Nodes int
	// Replication is the number of replicas of every shard (default 1; at
	// most Nodes).
	Replication int
	// Routing configures the filters (default SmallRouting).
	Routing namespace.Routing
	// Placement and Scheme are the namespace's (defaults: balanced, so
	// that most creates are transactions between shards; auto).
	Placement, Scheme string
	// LogStore is the replicas' Raft log store (shard.LogStores; default
	// boltdb).
	LogStore string
	// Tuning holds the namespace's timers (default: ResolveAfter 300ms,
	// the rest namespace.DefaultTuning's).
	Tuning namespace.Tuning
	// RaftTimeout is the shards' Raft heartbeat, election and leader
	// lease timeout (default 500ms). A test of planned leadership moves
	// sets it long, so that a loaded machine starts no election of its
	// own.
	RaftTimeout time.Duration
	// Configure, if set, adjusts each node's namespace.Options before it
	// is built.
	Configure func(*namespace.Options)
	// MaxLogFormat pins the newest batch format every replica writes
	// (shard.Options.MaxLogFormat; 0: the newest): a cluster of builds
	// without what later formats carry.
	MaxLogFormat byte
}

// SmallRouting is a small filter configuration for tests: 20,000 files,
// 512 LRU entries, changes pushed every 50ms.
func SmallRouting() namespace.Routing {
	r := namespace.DefaultRouting()
	r.FilterCapacity = 20000
	r.LRUEntries = 512
	r.PropagateInterval = 50 * time.Millisecond
	return r
}

// NewNamespaces starts the cluster, waits until every node holds every
// other node's current filters, and stops it at the end of the test.
func NewNamespaces(t testing.TB, opts NamespacesOptions) *Namespaces {
	t.Helper()
	if opts.Nodes == 0 {
		opts.Nodes = 3
	}
	opts.Replication = min(max(opts.Replication, 1), opts.Nodes)
	if opts.Routing == (namespace.Routing{}) {
		opts.Routing = SmallRouting()
	}
	if opts.Tuning.ResolveAfter == 0 {
		opts.Tuning.ResolveAfter = 300 * time.Millisecond
	}
	c := &Namespaces{t: t, opts: opts, Dir: NewDirectory("n1"), Nodes: map[string]*NamespaceNode{}}
	for i := 1; i <= opts.Nodes; i++ {
		id := fmt.Sprintf("n%d", i)
		c.IDs = append(c.IDs, id)
		c.Nodes[id] = &NamespaceNode{ID: id, DataDir: t.TempDir()}
	}
	// Listen first so that every address is known before any node starts.
	lns := map[string]net.Listener{}
	for _, id := range c.IDs {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns[id] = ln
		addr := ln.Addr().String()
		c.Nodes[id].Addr = addr
		c.Dir.Update(id, func(p *namespace.Peer) { p.Group, p.RPCAddr, p.Up = "g1", addr, true })
		rln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		c.Nodes[id].raftLn, c.Nodes[id].raftAddr = rln, rln.Addr().String()
	}
	for _, id := range c.IDs {
		c.start(id, lns[id], true)
	}
	c.waitLeaders()
	for _, id := range c.IDs {
		c.WaitSeen(id, true)
	}
	addrs := make([]string, 0, len(c.IDs))
	for _, id := range c.IDs {
		addrs = append(addrs, c.Nodes[id].Addr)
	}
	c.Client = client.New(client.Options{Addrs: addrs})
	t.Cleanup(c.close)
	c.WaitFilters()
	return c
}

// NS returns node id's namespace.
func (c *Namespaces) NS(id string) *namespace.Namespace { return c.Nodes[id].NS }

// hosts returns the shards node id hosts a replica of: its own and those
// of the Replication−1 nodes before it.
func (c *Namespaces) hosts(id string) []string {
	i := slices.Index(c.IDs, id)
	var out []string
	for k := range c.opts.Replication {
		out = append(out, c.IDs[(i-k+len(c.IDs))%len(c.IDs)])
	}
	return out
}

// replicasOf returns the nodes hosting shard s, its owner first.
func (c *Namespaces) replicasOf(s string) []string {
	i := slices.Index(c.IDs, s)
	var out []string
	for k := range c.opts.Replication {
		out = append(out, c.IDs[(i+k)%len(c.IDs)])
	}
	return out
}

// Start starts node id again on its address, with its data dir, and hands
// the leadership of its shard back to it (Balance).
func (c *Namespaces) Start(id string) {
	c.start(id, nil, false)
	c.Balance()
	c.WaitSeen(id, true)
}

// start starts node id on ln, or on its previous address: its RPC server,
// its namespace and its replicas (bootstrapping each shard it owns the
// first time).
func (c *Namespaces) start(id string, ln net.Listener, first bool) {
	t := c.t
	t.Helper()
	nd := c.Nodes[id]
	var err error
	if ln == nil {
		rpctest.Eventually(t, 5*time.Second, "listen on "+nd.Addr, func() error {
			ln, err = net.Listen("tcp", nd.Addr)
			return err
		})
	}
	log := rpctest.Logger(t).With("node_id", id)
	nd.srv = rpc.NewServer(rpc.ServerOptions{Logger: log})
	nd.cl = client.New(client.Options{Logger: log, HomeCacheSize: -1, Timeout: 10 * time.Second})
	opts := namespace.Options{
		NodeID: id, Client: nd.cl, Directory: c.Dir.View(id),
		Routing: c.opts.Routing, Placement: cmp.Or(c.opts.Placement, namespace.PlacementBalanced), Scheme: c.opts.Scheme,
		Logger: log, Tuning: c.opts.Tuning,
	}
	if c.opts.Configure != nil {
		c.opts.Configure(&opts)
	}
	if nd.NS, err = namespace.New(opts); err != nil {
		t.Fatal(err)
	}
	c.openReplicas(nd, log, first)
	nd.NS.RegisterRPC(nd.srv)
	nd.served = make(chan struct{})
	go func(srv *rpc.Server, done chan struct{}) {
		defer close(done)
		_ = srv.Serve(context.Background(), ln)
	}(nd.srv, nd.served)
	c.Dir.Update(id, func(p *namespace.Peer) { p.Up, p.RPCAddr = true, nd.Addr })
	if err := nd.NS.Start(context.Background()); err != nil {
		t.Fatalf("start %s: %v", id, err)
	}
	nd.Running = true
}

// waitLeaders waits until every shard with a running replica majority is
// led by a namespace that serves it, as the Directory says.
func (c *Namespaces) waitLeaders() {
	c.t.Helper()
	rpctest.Eventually(c.t, 15*time.Second, "every shard led", func() error {
		for _, s := range c.IDs {
			up := 0
			for _, r := range c.replicasOf(s) {
				if c.Nodes[r].Running {
					up++
				}
			}
			if 2*up <= c.opts.Replication {
				continue
			}
			l := c.Dir.leaderOf(s)
			if l == "" || !c.Nodes[l].Running || !slices.Contains(c.Nodes[l].NS.Leads(), s) {
				return fmt.Errorf("shard %s: leader %q", s, l)
			}
		}
		return nil
	})
}

// Balance hands the leadership of every shard whose owner runs back to the
// owner, and waits until every shard is led.
func (c *Namespaces) Balance() {
	c.t.Helper()
	c.waitLeaders()
	for _, s := range c.IDs {
		l := c.Dir.leaderOf(s)
		if l == s || !c.Nodes[s].Running || l == "" {
			continue
		}
		owner := c.Nodes[s]
		rpctest.Eventually(c.t, 15*time.Second, "shard "+s+" led by its owner", func() error {
			if c.Dir.leaderOf(s) == s {
				return nil
			}
			cur := c.Dir.leaderOf(s)
			if cur != "" && c.Nodes[cur].Running {
				if rep := c.Nodes[cur].Replicas[s]; rep != nil && rep.IsLeader() {
					ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
					_ = rep.TransferLeadership(ctx, s, owner.raftAddr)
					cancel()
				}
			}
			return fmt.Errorf("led by %q", c.Dir.leaderOf(s))
		})
	}
	c.waitLeaders()
}

// HandOver hands shard s's leadership from its current leader to node to
// as a planned move (namespace.HandOver, as the node's placement does),
// and waits until to serves it.
func (c *Namespaces) HandOver(s, to string) error {
	c.t.Helper()
	cur := c.Dir.leaderOf(s)
	if cur == "" || cur == to {
		return fmt.Errorf("shard %s: led by %q", s, cur)
	}
	rep := c.Nodes[cur].Replicas[s]
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Nodes[cur].NS.HandOver(ctx, s, to, func(ctx context.Context) error {
		return rep.TransferLeadership(ctx, to, c.Nodes[to].raftAddr)
	}); err != nil {
		return err
	}
	rpctest.Eventually(c.t, 15*time.Second, "shard "+s+" served by "+to, func() error {
		if l := c.Dir.leaderOf(s); l != to {
			return fmt.Errorf("led by %q", l)
		}
		return nil
	})
	return nil
}

// openReplicas opens the replicas node nd hosts on its raft port
// (bootstrapping, on the first start, the shard it owns with every
// replica as a voter: only it has a configuration, so it is elected
// first), and follows their leadership: the namespace serves a shard while
// its replica leads it, and the Directory names the leader.
func (c *Namespaces) openReplicas(nd *NamespaceNode, log *slog.Logger, first bool) {
	t := c.t
	ln := nd.raftLn
	if ln == nil {
		var err error
		rpctest.Eventually(t, 5*time.Second, "listen on the raft port", func() error {
			ln, err = net.Listen("tcp", nd.raftAddr)
			return err
		})
	}
	nd.raftLn = nil
	nd.mux = raftmux.New(ln, ln.Addr(), raftmux.Options{Logger: log})
	nd.muxDone = make(chan struct{})
	go func(m *raftmux.Mux, done chan struct{}) {
		defer close(done)
		_ = m.Serve(context.Background())
	}(nd.mux, nd.muxDone)
	tun := shard.DefaultTuning()
	// Short enough for quick fail-overs, long enough that a loaded machine
	// running the race detector does not start spurious elections. The
	// leader keeps its leadership while a quorum answers within the
	// heartbeat timeout (raft's longest lease): with 250 ms, leaders of
	// 3-replica shards on a starved 2-core machine stepped down often
	// enough that a request found no leader within LeaderWait.
	rt := cmp.Or(c.opts.RaftTimeout, 500*time.Millisecond)
	tun.Heartbeat, tun.Election, tun.LeaderLease, tun.Commit = rt, rt, rt, 5*time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	nd.watch = cancel
	nd.Replicas = map[string]*shard.Replica{}
	for _, s := range c.hosts(nd.ID) {
		layer, err := nd.mux.Layer("shard/" + s)
		if err != nil {
			t.Fatal(err)
		}
		rep, err := shard.Open(context.Background(), shard.Options{
			Shard: s, NodeID: nd.ID, Dir: filepath.Join(nd.DataDir, "shards", s), LogStore: c.opts.LogStore,
			Transport: raftmux.NewTransport(layer, nil), Geometry: nd.NS.Geometry(), Logger: log, Tuning: tun,
			Store:        store.Options{MemTableSize: 8 << 20, BlockCacheSize: 4 << 20},
			MaxLogFormat: c.opts.MaxLogFormat,
		})
		if err != nil {
			t.Fatalf("open shard %s on %s: %v", s, nd.ID, err)
		}
		if first && s == nd.ID {
			var others []shard.Server
			for _, r := range c.replicasOf(s)[1:] {
				others = append(others, shard.Server{ID: r, Addr: c.Nodes[r].raftAddr, Voter: true})
			}
			if err := rep.Bootstrap(others...); err != nil {
				t.Fatal(err)
			}
		}
		nd.Replicas[s] = rep
		c.Dir.UpdateShard(s, func(si *namespace.ShardInfo) {
			si.Hosts = slices.Sorted(slices.Values(c.replicasOf(s)))
		})
		nd.watched.Add(1)
		go c.follow(ctx, nd, rep, log)
	}
	nd.Replica = nd.Replicas[nd.ID]
	nd.Store = nd.Replica.Store()
}

// follow serves shard rep's shard on nd's namespace while rep leads it.
func (c *Namespaces) follow(ctx context.Context, nd *NamespaceNode, rep *shard.Replica, log *slog.Logger) {
	defer nd.watched.Done()
	s := rep.Shard()
	var retry <-chan time.Time // set while a won election is not served yet
	for {
		select {
		case <-ctx.Done():
			return
		case leader := <-rep.LeaderCh():
			retry = nil
			if !leader {
				nd.NS.Unlead(s)
				c.Dir.UpdateShard(s, func(si *namespace.ShardInfo) {
					if si.Leader == nd.ID {
						si.Leader = ""
					}
				})
				continue
			}
			nd.NS.WillLead(s) // (as the node does: requests wait for Lead)
		case <-retry:
			retry = nil
			if !rep.IsLeader() {
				continue
			}
		}
		// As the node does (node/shards.go): a won election whose barrier
		// or start-up fails is tried again while the replica still leads,
		// since nobody else serves the shard meanwhile.
		bctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := rep.Barrier(bctx)
		if err == nil {
			err = nd.NS.Lead(bctx, rep)
		}
		cancel()
		if err != nil {
			log.Warn("not serving a shard after winning its election; trying again", "shard", s, "err", err)
			retry = time.After(200 * time.Millisecond)
			continue
		}
		c.Dir.UpdateShard(s, func(si *namespace.ShardInfo) { si.Group, si.Leader = "g1", nd.ID })
	}
}

// WaitSeen waits until every other running node's snapshot of the
// Directory shows node id up (or down).
func (c *Namespaces) WaitSeen(id string, up bool) {
	c.t.Helper()
	for _, o := range c.IDs {
		nd := c.Nodes[o]
		if !nd.Running || o == id {
			continue
		}
		rpctest.Eventually(c.t, 5*time.Second, fmt.Sprintf("%s sees %s up=%v", o, id, up), func() error {
			if got, known := nd.NS.SeesPeer(id); !known || got != up {
				return fmt.Errorf("known %v, up %v", known, got)
			}
			return nil
		})
	}
}

// Stop stops node id as a crash would for everyone else: it is marked
// down, its server closed, its namespace stopped and its replicas closed
// (every acknowledged write is in a majority's Raft log; nothing more is
// done). The shards it led elect another leader among their running
// replicas, if a majority runs.
func (c *Namespaces) Stop(id string) {
	nd := c.Nodes[id]
	if !nd.Running {
		return
	}
	nd.Running = false
	c.Dir.Update(id, func(p *namespace.Peer) { p.Up = false })
	for _, s := range c.hosts(id) {
		c.Dir.UpdateShard(s, func(si *namespace.ShardInfo) {
			if si.Leader == id {
				si.Leader = ""
			}
		})
	}
	c.WaitSeen(id, false)
	nd.srv.Close()
	<-nd.served
	nd.watch()
	nd.watched.Wait()
	_ = nd.NS.Stop(context.Background())
	nd.cl.Close()
	for s, rep := range nd.Replicas {
		if err := rep.Close(context.Background()); err != nil {
			c.t.Errorf("close shard %s on %s: %v", s, id, err)
		}
	}
	_ = nd.mux.Close()
	<-nd.muxDone
	for _, s := range c.hosts(id) {
		c.Dir.UpdateShard(s, func(si *namespace.ShardInfo) {
			if si.Leader == id {
				si.Leader = "" // a leadership it gained while stopping
			}
		})
	}
}

// Restart stops and starts node id.
func (c *Namespaces) Restart(id string) {
	c.Stop(id)
	c.Start(id)
}

func (c *Namespaces) close() {
	for _, id := range c.IDs {
		c.Stop(id)
	}
	if c.Client != nil {
		c.Client.Close()
	}
}

// WaitFilters pushes every running node's filters and waits until every
// running node holds every other running node's current versions.
func (c *Namespaces) WaitFilters() {
	c.t.Helper()
	rpctest.Eventually(c.t, 10*time.Second, "filters in sync", func() error {
		for _, id := range c.IDs {
			if c.Nodes[id].Running {
				c.Nodes[id].NS.SyncFilters()
			}
		}
		return c.FiltersInSync()
	})
}

// FiltersInSync returns an error naming the first running node whose
// filter changes are not yet pushed, or whose filters another running node
// does not hold at their current versions; nil when all are in sync. It
// pushes nothing itself (see WaitFilters).
func (c *Namespaces) FiltersInSync() error {
	syncs := map[string]namespace.FilterSync{}
	for _, id := range c.IDs {
		if c.Nodes[id].Running {
			syncs[id] = c.Nodes[id].NS.FilterSync()
		}
	}
	for a, sa := range syncs {
		if sa.Unpushed {
			return fmt.Errorf("%s has unpushed filter changes", a)
		}
		for shard, local := range sa.Local {
			lru := sa.LRU[shard]
			for b, sb := range syncs {
				if a == b {
					continue
				}
				v2, ok2 := sb.L2[shard]
				v1, ok1 := sb.L1[shard]
				if !ok1 || !ok2 || v2 != local || v1 != lru {
					return fmt.Errorf("%s holds shard %s's filters at L1 %d/%v L2 %d/%v, current %d and %d",
						b, shard, v1, ok1, v2, ok2, lru, local)
				}
			}
		}
	}
	return nil
}

// SettleAll waits until no running node holds prepared parts or
// undelivered commits.
func (c *Namespaces) SettleAll() {
	c.t.Helper()
	rpctest.Eventually(c.t, 10*time.Second, "transactions settled", func() error {
		for _, id := range c.IDs {
			if nd := c.Nodes[id]; nd.Running {
				if p, co, r := nd.NS.Pending(); p+co+r > 0 {
					return fmt.Errorf("%s: prepared parts %d, coordinated %d, undelivered %d", id, p, co, r)
				}
			}
		}
		return nil
	})
}
