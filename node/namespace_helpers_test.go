package node

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ghba/ghba/node/store"
	"github.com/ghba/ghba/rpc"
)

// nsDirState is the membership shared by the static Directories of an
// in-process test cluster.
type nsDirState struct {
	mu    sync.Mutex
	peers map[string]Peer
	root  string
	subs  map[chan struct{}]struct{}
}

func (d *nsDirState) notify() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for ch := range d.subs {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

func (d *nsDirState) update(id string, fn func(p *Peer)) {
	d.mu.Lock()
	p := d.peers[id]
	p.ID = id
	fn(&p)
	d.peers[id] = p
	d.mu.Unlock()
	d.notify()
}

// nsStaticDir is a Directory over a shared nsDirState.
type nsStaticDir struct {
	self  string
	state *nsDirState
}

func (s *nsStaticDir) Self() Peer {
	s.state.mu.Lock()
	defer s.state.mu.Unlock()
	return s.state.peers[s.self]
}

func (s *nsStaticDir) Peers() []Peer {
	s.state.mu.Lock()
	defer s.state.mu.Unlock()
	out := make([]Peer, 0, len(s.state.peers))
	for _, p := range s.state.peers {
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b Peer) int { return strings.Compare(a.ID, b.ID) })
	return out
}

func (s *nsStaticDir) RootHome() string {
	s.state.mu.Lock()
	defer s.state.mu.Unlock()
	return s.state.root
}

func (s *nsStaticDir) Subscribe() (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	s.state.mu.Lock()
	s.state.subs[ch] = struct{}{}
	s.state.mu.Unlock()
	return ch, func() {
		s.state.mu.Lock()
		delete(s.state.subs, ch)
		s.state.mu.Unlock()
	}
}

// nsNode is one in-process node: store, RPC server, client, namespace.
type nsNode struct {
	id      string
	dataDir string
	addr    string
	st      *store.Store
	srv     *rpc.Server
	cl      *rpc.Client
	ns      *Namespace
	served  chan struct{}
	running bool
}

// nsCluster is an in-process cluster on loopback.
type nsCluster struct {
	t     testing.TB
	state *nsDirState
	cfg   Config
	nodes map[string]*nsNode
	ids   []string
	cl    *rpc.Client // a client of the whole cluster
	opts  func(*NamespaceOptions)
}

// nsTestConfig is a small configuration for tests.
func nsTestConfig() Config {
	c := DefaultConfig()
	c.FilterCapacity = 20000
	c.LRUEntries = 512
	c.PropagateInterval = 50 * time.Millisecond
	return c
}

type nsTLogWriter struct{ t testing.TB }

func (w nsTLogWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func nsTestLogger(t testing.TB, id string) *slog.Logger {
	level := slog.LevelError
	if v := os.Getenv("NS_TEST_LOG"); v != "" {
		_ = level.UnmarshalText([]byte(v))
	}
	return slog.New(slog.NewTextHandler(nsTLogWriter{t}, &slog.HandlerOptions{Level: level})).With("node", id)
}

// newNSCluster starts n nodes named n1..nN; n1 homes "/".
func newNSCluster(t testing.TB, n int, cfg Config) *nsCluster {
	t.Helper()
	c := &nsCluster{
		t:     t,
		state: &nsDirState{peers: map[string]Peer{}, root: "n1", subs: map[chan struct{}]struct{}{}},
		cfg:   cfg,
		nodes: map[string]*nsNode{},
	}
	for i := 1; i <= n; i++ {
		id := fmt.Sprintf("n%d", i)
		c.ids = append(c.ids, id)
		c.nodes[id] = &nsNode{id: id, dataDir: t.TempDir()}
	}
	// Listen first so that every address is known before any node starts.
	lns := map[string]net.Listener{}
	for _, id := range c.ids {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns[id] = ln
		c.nodes[id].addr = ln.Addr().String()
		c.state.peers[id] = Peer{ID: id, Group: "g1", RPCAddr: ln.Addr().String(), Up: true}
	}
	for _, id := range c.ids {
		c.startNode(id, lns[id])
	}
	var addrs []string
	for _, id := range c.ids {
		addrs = append(addrs, c.nodes[id].addr)
	}
	c.cl = rpc.NewClient(rpc.Options{Addrs: addrs})
	t.Cleanup(c.close)
	c.waitFilters()
	return c
}

// startNode opens the node's store and starts it (on ln, or on its
// previous address).
func (c *nsCluster) startNode(id string, ln net.Listener) {
	t := c.t
	t.Helper()
	nd := c.nodes[id]
	var err error
	if ln == nil {
		for range 50 {
			if ln, err = net.Listen("tcp", nd.addr); err == nil {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if err != nil {
			t.Fatalf("relisten %s: %v", nd.addr, err)
		}
	}
	log := nsTestLogger(t, id)
	nd.st, err = store.Open(context.Background(), store.Options{
		Dir: nd.dataDir, Logger: log, MemTableSize: 8 << 20, BlockCacheSize: 4 << 20,
	})
	if err != nil {
		t.Fatalf("open store %s: %v", id, err)
	}
	nd.srv = rpc.NewServer(rpc.ServerOptions{Logger: log})
	nd.cl = rpc.NewClient(rpc.Options{Logger: log, HomeCacheSize: -1, Timeout: 10 * time.Second})
	opts := NamespaceOptions{
		NodeID: id, Store: nd.st, Client: nd.cl, Directory: &nsStaticDir{self: id, state: c.state},
		Config: c.cfg, Logger: log, ResolveAfter: 300 * time.Millisecond,
	}
	if c.opts != nil {
		c.opts(&opts)
	}
	nd.ns, err = NewNamespace(opts)
	if err != nil {
		t.Fatal(err)
	}
	nd.ns.Register(nd.srv)
	nd.served = make(chan struct{})
	go func(srv *rpc.Server, done chan struct{}) {
		defer close(done)
		_ = srv.Serve(context.Background(), ln)
	}(nd.srv, nd.served)
	c.state.update(id, func(p *Peer) { p.Up = true; p.RPCAddr = nd.addr })
	if err := nd.ns.Start(context.Background()); err != nil {
		t.Fatalf("start %s: %v", id, err)
	}
	nd.running = true
	c.waitSeen(id, true)
}

// waitSeen waits until every running node's view of the Directory shows
// node id up (or down).
func (c *nsCluster) waitSeen(id string, up bool) {
	deadline := time.Now().Add(5 * time.Second)
	for _, o := range c.ids {
		nd := c.nodes[o]
		if !nd.running || o == id {
			continue
		}
		for {
			if p := nd.ns.peer(id); p != nil && p.Up == up {
				break
			}
			if time.Now().After(deadline) {
				c.t.Fatalf("%s does not see %s up=%v", o, id, up)
			}
			time.Sleep(2 * time.Millisecond)
		}
	}
}

// stopNode stops a node as a crash would for everyone else: it is marked
// down, its server closed, its namespace stopped and its store closed
// (every acknowledged write is durable; nothing more is done).
func (c *nsCluster) stopNode(id string) {
	nd := c.nodes[id]
	if !nd.running {
		return
	}
	nd.running = false
	c.state.update(id, func(p *Peer) { p.Up = false })
	c.waitSeen(id, false)
	nd.srv.Close()
	<-nd.served
	nd.ns.Stop()
	nd.cl.Close()
	if err := nd.st.Close(); err != nil {
		c.t.Errorf("close store %s: %v", id, err)
	}
}

func (c *nsCluster) restartNode(id string) {
	c.stopNode(id)
	c.startNode(id, nil)
}

func (c *nsCluster) close() {
	for _, id := range c.ids {
		c.stopNode(id)
	}
	if c.cl != nil {
		c.cl.Close()
	}
}

// ns returns node id's namespace.
func (c *nsCluster) ns(id string) *Namespace { return c.nodes[id].ns }

// waitFilters pushes every node's filters and waits until every running
// node holds every other running node's current versions.
func (c *nsCluster) waitFilters() {
	c.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		for _, id := range c.ids {
			if c.nodes[id].running {
				c.nodes[id].ns.SyncFilters()
			}
		}
		if c.filtersInSync() {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("filters not in sync after 10s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (c *nsCluster) filtersInSync() bool {
	for _, a := range c.ids {
		na := c.nodes[a]
		if !na.running {
			continue
		}
		na.ns.localMu.RLock()
		lv := na.ns.local.Filter().Version()
		lch := na.ns.local.Filter().ChangedBits()
		na.ns.localMu.RUnlock()
		na.ns.lruMu.Lock()
		rv := na.ns.lru.Filter().Version()
		rch := na.ns.lru.Filter().ChangedBits()
		na.ns.lruMu.Unlock()
		if lch != 0 || rch != 0 {
			return false
		}
		for _, b := range c.ids {
			nb := c.nodes[b]
			if a == b || !nb.running {
				continue
			}
			nb.ns.arrMu.RLock()
			v1, ok1 := nb.ns.l2.Version(a)
			v2, ok2 := nb.ns.l1.Version(a)
			nb.ns.arrMu.RUnlock()
			if !ok1 || !ok2 || v1 != lv || v2 != rv {
				return false
			}
		}
	}
	return true
}

// settleAll waits until no node holds prepared parts or undelivered
// commits.
func (c *nsCluster) settleAll() {
	c.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		busy := false
		for _, id := range c.ids {
			if nd := c.nodes[id]; nd.running {
				p, co, r := nd.ns.pendingTxns()
				if p+co+r > 0 {
					busy = true
				}
			}
		}
		if !busy {
			return
		}
		if time.Now().After(deadline) {
			for _, id := range c.ids {
				if nd := c.nodes[id]; nd.running {
					p, co, r := nd.ns.pendingTxns()
					c.t.Logf("%s: parts %d coords %d redo %d marks %v", id, p, co, r, nd.ns.marksSnapshot())
				}
			}
			c.t.Fatalf("transactions not settled after 10s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func nsCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// errKind names the sentinel an error matches, for comparisons in tests.
func errKind(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, rpc.ErrInvalidPath):
		return "invalid"
	case errors.Is(err, rpc.ErrUnavailable):
		return "unavailable"
	case errors.Is(err, fs.ErrNotExist):
		return "notexist"
	case errors.Is(err, fs.ErrExist):
		return "exist"
	case errors.Is(err, rpc.ErrNotDir):
		return "notdir"
	case errors.Is(err, rpc.ErrIsDir):
		return "isdir"
	case errors.Is(err, rpc.ErrNotEmpty):
		return "notempty"
	case errors.Is(err, fs.ErrInvalid):
		return "einval"
	}
	return "other: " + err.Error()
}

func mustOK(t testing.TB, err error, what string, args ...any) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", fmt.Sprintf(what, args...), err)
	}
}
