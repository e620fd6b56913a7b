package nodetest

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ghba/ghba/node/namespace"
	"github.com/ghba/ghba/node/store"
	"github.com/ghba/ghba/rpc"
	"github.com/ghba/ghba/rpc/rpctest"
)

// Directory is a namespace.Directory whose membership the test sets: every
// node of a Namespaces cluster sees the same peers through its own View.
// It is safe for concurrent use.
type Directory struct {
	mu    sync.Mutex
	peers map[string]namespace.Peer
	root  string
	subs  map[chan struct{}]struct{}
}

// NewDirectory returns a Directory without peers whose root home is root.
func NewDirectory(root string) *Directory {
	return &Directory{peers: map[string]namespace.Peer{}, root: root, subs: map[chan struct{}]struct{}{}}
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

// SetRoot records id as the root's home and notifies every subscriber.
func (d *Directory) SetRoot(id string) {
	d.mu.Lock()
	d.root = id
	d.mu.Unlock()
	d.notify()
}

// Root returns the root's home.
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
	out := make([]namespace.Peer, 0, len(v.d.peers))
	for _, p := range v.d.peers {
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b namespace.Peer) int { return strings.Compare(a.ID, b.ID) })
	return out
}

func (v *dirView) RootHome() string { return v.d.Root() }

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

// NamespaceNode is one node of a Namespaces cluster: a store, an RPC server
// and client, and a namespace. Its fields are valid while Running.
type NamespaceNode struct {
	ID      string
	Addr    string // RPC address (the same across restarts)
	DataDir string
	Store   *store.Store
	NS      *namespace.Namespace
	Running bool

	srv    *rpc.Server
	cl     *rpc.Client
	served chan struct{}
}

// Namespaces is an in-process cluster of namespaces on loopback, named
// n1…nN, with n1 homing "/": real Badger stores in temporary directories,
// real RPC, and a Directory the test controls (no Raft, no Serf), for tests
// and benchmarks of the namespace logic.
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
	Client *rpc.Client
}

// NamespacesOptions configure a Namespaces cluster.
type NamespacesOptions struct {
	// Nodes is the number of nodes (default 3).
	Nodes int
	// Routing configures the filters (default SmallRouting).
	Routing namespace.Routing
	// Placement and Scheme are the namespace's (defaults: balanced, ghba).
	Placement, Scheme string
	// Tuning holds the namespace's timers (default: ResolveAfter 300ms,
	// the rest namespace.DefaultTuning's).
	Tuning namespace.Tuning
	// Configure, if set, adjusts each node's namespace.Options before it
	// is built.
	Configure func(*namespace.Options)
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
	}
	for _, id := range c.IDs {
		c.start(id, lns[id])
	}
	addrs := make([]string, 0, len(c.IDs))
	for _, id := range c.IDs {
		addrs = append(addrs, c.Nodes[id].Addr)
	}
	c.Client = rpc.NewClient(rpc.Options{Addrs: addrs})
	t.Cleanup(c.close)
	c.WaitFilters()
	return c
}

// NS returns node id's namespace.
func (c *Namespaces) NS(id string) *namespace.Namespace { return c.Nodes[id].NS }

// Start starts node id again on its address, with its data dir.
func (c *Namespaces) Start(id string) { c.start(id, nil) }

// start opens node id's store and starts it on ln, or on its previous
// address.
func (c *Namespaces) start(id string, ln net.Listener) {
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
	nd.Store, err = store.Open(context.Background(), store.Options{
		Dir: nd.DataDir, Logger: log, MemTableSize: 8 << 20, BlockCacheSize: 4 << 20,
	})
	if err != nil {
		t.Fatalf("open store %s: %v", id, err)
	}
	nd.srv = rpc.NewServer(rpc.ServerOptions{Logger: log})
	nd.cl = rpc.NewClient(rpc.Options{Logger: log, HomeCacheSize: -1, Timeout: 10 * time.Second})
	opts := namespace.Options{
		NodeID: id, Store: nd.Store, Client: nd.cl, Directory: c.Dir.View(id),
		Routing: c.opts.Routing, Placement: c.opts.Placement, Scheme: c.opts.Scheme,
		Logger: log, Tuning: c.opts.Tuning,
	}
	if c.opts.Configure != nil {
		c.opts.Configure(&opts)
	}
	if nd.NS, err = namespace.New(opts); err != nil {
		t.Fatal(err)
	}
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
	c.WaitSeen(id, true)
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
// down, its server closed, its namespace stopped and its store closed
// (every acknowledged write is durable; nothing more is done).
func (c *Namespaces) Stop(id string) {
	nd := c.Nodes[id]
	if !nd.Running {
		return
	}
	nd.Running = false
	c.Dir.Update(id, func(p *namespace.Peer) { p.Up = false })
	c.WaitSeen(id, false)
	nd.srv.Close()
	<-nd.served
	_ = nd.NS.Stop(context.Background())
	nd.cl.Close()
	if err := nd.Store.Close(); err != nil {
		c.t.Errorf("close store %s: %v", id, err)
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
		for b, sb := range syncs {
			if a == b {
				continue
			}
			v2, ok2 := sb.L2[a]
			v1, ok1 := sb.L1[a]
			if !ok1 || !ok2 || v2 != sa.LocalVersion || v1 != sa.LRUVersion {
				return fmt.Errorf("%s holds %s's filters at L1 %d/%v L2 %d/%v, current %d and %d",
					b, a, v1, ok1, v2, ok2, sa.LRUVersion, sa.LocalVersion)
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
