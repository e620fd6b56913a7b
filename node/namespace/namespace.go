package node

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math"
	mrand "math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ghba/ghba/node/store"
	"github.com/ghba/ghba/routing"
	"github.com/ghba/ghba/rpc"
)

// NamespaceOptions are the dependencies of a Namespace.
type NamespaceOptions struct {
	// NodeID is this node's id (Directory.Self().ID). Required.
	NodeID string
	// Store is this node's open store. Required. The Namespace does not
	// close it.
	Store *store.Store
	// Client calls other nodes (Client.Call to an exact address). Required.
	// The Namespace does not close it.
	Client *rpc.Client
	// Directory is the cluster membership. Required.
	Directory Directory
	// Config supplies bits_per_file, filter_capacity, lru_entries,
	// lru_bits_per_file, propagate_threshold, propagate_interval and
	// placement. Zero values take DefaultConfig's.
	Config Config
	// Hash selects the filters' hash (default routing.HashXX). Every node
	// must use the same.
	Hash routing.HashKind
	// Logger carries the node id; nil discards.
	Logger *slog.Logger
	// StageWait bounds how long staging a transaction part waits for
	// operations in progress on related paths (default 100ms); past it the
	// part is refused as busy and the coordinator retries, which breaks
	// waits between transactions that stage at each other's nodes.
	StageWait time.Duration
	// ResolveAfter is the age after which the background resolver asks a
	// coordinator about a prepared part nobody has resolved (default 2s).
	ResolveAfter time.Duration
}

// Namespace is the metadata logic of one node (DESIGN §2, §3, §5): the
// operations on the paths it homes, the coordination of changes that span
// a parent directory's home and a child's home, and the routing of every
// request to a path's home through the L1–L4 query path with this node's
// filters.
//
// Construct it with NewNamespace, install its handlers with Register, then
// call Start before the RPC server accepts traffic (handlers answer
// unavailable until Start has loaded the node's state). Stop ends its
// goroutines; the caller closes the store, client and server afterwards.
type Namespace struct {
	id    string
	st    *store.Store
	cl    *rpc.Client
	dir   Directory
	log   *slog.Logger
	cfg   Config
	hash  routing.HashKind
	stage time.Duration
	reAge time.Duration

	localGeo, lruGeo routing.Geometry

	peers        atomic.Pointer[peerSet]
	rootOverride atomic.Pointer[string]
	rootMovedTo  atomic.Pointer[string]

	// routing state (filters.go)
	localMu sync.RWMutex
	local   *routing.CountingFilter
	lruMu   sync.Mutex
	lru     *routing.LRU
	arrMu   sync.RWMutex
	l1, l2  *routing.FilterArray
	prop    propState
	idb     idbfaCache

	// transactions (namespace_txn.go)
	flux     fluxTable
	locks    keyLocks
	coordMu  sync.Mutex
	coords   map[string]*coordTxn
	redo     map[string]*coordRecord // committed, some participant not yet told
	partMu   sync.Mutex
	parts    map[string]*partTxn
	txnSeq   atomic.Uint64
	txnEpoch string
	cleanup  chan string // coordinator records to delete

	loads    sync.Map // node id → *peerLoad
	draining atomic.Bool

	ready   chan struct{} // closed when Start has loaded the state
	startMu sync.Mutex
	started bool
	stopped bool
	ctx     context.Context
	cancel  context.CancelFunc
	// hook, set by tests, can stop a coordinator dead at a point of the
	// protocol (see crashAt).
	hook     atomic.Pointer[func(point, txn string) bool]
	wg       sync.WaitGroup
	counters nsCounters
}

type nsCounters struct {
	l1, l2, l3, l4, hops, lookups atomic.Uint64
	notFound, unavailable         atomic.Uint64
	broadcasts, multicasts        atomic.Uint64
	committed, aborted, busy      atomic.Uint64
	rekeyed, drained              atomic.Uint64
	resolved                      atomic.Uint64
	pushesSent, pushFails         atomic.Uint64
	pushesRecv, pullsSent         atomic.Uint64
	pullsServed, mismatches       atomic.Uint64
	bytesSent                     atomic.Uint64
}

// NewNamespace checks opts and returns a Namespace that is not started.
func NewNamespace(opts NamespaceOptions) (*Namespace, error) {
	switch {
	case opts.NodeID == "":
		return nil, fmt.Errorf("%w: namespace: empty node id", ErrConfig)
	case opts.Store == nil || opts.Client == nil || opts.Directory == nil:
		return nil, fmt.Errorf("%w: namespace: store, client and directory are required", ErrConfig)
	}
	cfg := withConfigDefaults(opts.Config)
	hash := opts.Hash
	if hash == 0 {
		hash = routing.HashXX
	}
	localGeo, lruGeo, err := RoutingGeometries(cfg, hash)
	if err != nil {
		return nil, err
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var epoch [6]byte
	if _, err := rand.Read(epoch[:]); err != nil {
		return nil, fmt.Errorf("namespace: random epoch: %w", err)
	}
	n := &Namespace{
		id:       opts.NodeID,
		st:       opts.Store,
		cl:       opts.Client,
		dir:      opts.Directory,
		log:      log.With("component", "namespace"),
		cfg:      cfg,
		hash:     hash,
		stage:    opts.StageWait,
		reAge:    opts.ResolveAfter,
		localGeo: localGeo,
		lruGeo:   lruGeo,
		local:    routing.NewCountingFilter(localGeo),
		lru:      routing.NewLRU(cfg.LRUEntries, lruGeo),
		l1:       routing.NewFilterArray(lruGeo),
		l2:       routing.NewFilterArray(localGeo),
		coords:   make(map[string]*coordTxn),
		redo:     make(map[string]*coordRecord),
		parts:    make(map[string]*partTxn),
		txnEpoch: hex.EncodeToString(epoch[:]),
		cleanup:  make(chan string, 4096),
		ready:    make(chan struct{}),
	}
	if n.stage <= 0 {
		n.stage = 100 * time.Millisecond
	}
	if n.reAge <= 0 {
		n.reAge = 2 * time.Second
	}
	n.flux.init()
	n.prop.init()
	n.ctx, n.cancel = context.WithCancel(context.Background())
	n.refreshPeers()
	return n, nil
}

// withConfigDefaults fills the routing keys left zero with DefaultConfig's.
func withConfigDefaults(c Config) Config {
	d := DefaultConfig()
	if c.BitsPerFile == 0 {
		c.BitsPerFile = d.BitsPerFile
	}
	if c.FilterCapacity == 0 {
		c.FilterCapacity = d.FilterCapacity
	}
	if c.LRUBitsPerFile == 0 {
		c.LRUBitsPerFile = d.LRUBitsPerFile
	}
	if c.PropagateThreshold == 0 {
		c.PropagateThreshold = d.PropagateThreshold
	}
	if c.PropagateInterval == 0 {
		c.PropagateInterval = d.PropagateInterval
	}
	if c.Placement == "" {
		c.Placement = d.Placement
	}
	if c.Scheme == "" {
		c.Scheme = d.Scheme
	}
	return c
}

// RoutingGeometries returns the geometries of the local filter
// (filter_capacity × bits_per_file) and of the LRU filter (lru_entries ×
// lru_bits_per_file) that cfg describes, with the optimal number of hash
// functions. Every node of a cluster must use the same.
func RoutingGeometries(cfg Config, hash routing.HashKind) (local, lru routing.Geometry, err error) {
	local, err = routing.NewGeometry(cfg.FilterCapacity, cfg.BitsPerFile, 0, hash)
	if err != nil {
		return local, lru, fmt.Errorf("%w: filter_capacity/bits_per_file: %w", ErrConfig, err)
	}
	lru, err = routing.NewGeometry(max(cfg.LRUEntries, 1), cfg.LRUBitsPerFile, 0, hash)
	if err != nil {
		return local, lru, fmt.Errorf("%w: lru_entries/lru_bits_per_file: %w", ErrConfig, err)
	}
	return local, lru, nil
}

// Register installs the namespace's client-facing handlers
// (rpc.MethodStat, Lookup, BatchStat, Create, Mkdir, ReadDir, SetAttr,
// Unlink, Rmdir, Rename) and its server-to-server handlers (filters,
// routing, transactions, forwarded operations) on s.
func (n *Namespace) Register(s *rpc.Server) {
	rpc.Register(s, rpc.MethodStat, gate(n, func(ctx context.Context, r *rpc.StatRequest) (*rpc.StatResponse, error) {
		return n.Stat(ctx, r.Path)
	}))
	rpc.Register(s, rpc.MethodLookup, gate(n, func(ctx context.Context, r *rpc.LookupRequest) (*rpc.LookupResponse, error) {
		return n.Lookup(ctx, r.Path)
	}))
	rpc.Register(s, rpc.MethodBatchStat, gate(n, func(ctx context.Context, r *rpc.BatchStatRequest) (*rpc.BatchStatResponse, error) {
		return n.BatchStat(ctx, r.Paths)
	}))
	rpc.Register(s, rpc.MethodCreate, gate(n, n.Create))
	rpc.Register(s, rpc.MethodMkdir, gate(n, n.Mkdir))
	rpc.Register(s, rpc.MethodReadDir, gate(n, n.ReadDir))
	rpc.Register(s, rpc.MethodSetAttr, gate(n, n.SetAttr))
	rpc.Register(s, rpc.MethodUnlink, gate(n, func(ctx context.Context, r *rpc.UnlinkRequest) (*rpc.UnlinkResponse, error) {
		return &rpc.UnlinkResponse{}, n.Unlink(ctx, r.Path)
	}))
	rpc.Register(s, rpc.MethodRmdir, gate(n, func(ctx context.Context, r *rpc.RmdirRequest) (*rpc.RmdirResponse, error) {
		return &rpc.RmdirResponse{}, n.Rmdir(ctx, r.Path)
	}))
	rpc.Register(s, rpc.MethodRename, gate(n, func(ctx context.Context, r *rpc.RenameRequest) (*rpc.RenameResponse, error) {
		return n.Rename(ctx, r.Src, r.Dst)
	}))

	rpc.Register(s, rpc.MethodLocalCheck, gate(n, n.handleLocalCheck))
	rpc.Register(s, rpc.MethodGetEntry, gate(n, n.handleGetEntry))
	rpc.Register(s, rpc.MethodL3Query, gate(n, n.handleL3Query))
	rpc.Register(s, methodIDBFA, gate(n, n.handleIDBFA))
	rpc.Register(s, rpc.MethodFilterPull, gate(n, n.handleFilterPull))
	rpc.Register(s, rpc.MethodFilterPush, gate(n, n.handleFilterPush))
	rpc.Register(s, rpc.MethodTxnStatus, gate(n, n.handleTxnStatus))
	rpc.Register(s, rpc.MethodCommitChild, gate(n, n.handleCommit))
	rpc.Register(s, rpc.MethodAbortChild, gate(n, n.handleAbort))

	rpc.Register(s, methodTxnPrepare, gate(n, n.handlePrepare))
	rpc.Register(s, methodHomeCreate, gate(n, n.handleHomeCreate))
	rpc.Register(s, methodHomeRemove, gate(n, n.handleHomeRemove))
	rpc.Register(s, methodHomeRename, gate(n, n.handleHomeRename))
	rpc.Register(s, methodHomeReadDir, gate(n, n.handleHomeReadDir))
	rpc.Register(s, methodHomeSetAttr, gate(n, n.handleHomeSetAttr))
	rpc.Register(s, methodHomeEntry, gate(n, n.handleHomeEntry))
	rpc.Register(s, methodHomeLoad, gate(n, n.handleHomeLoad))
}

// errNotReady is returned by handlers before Start has loaded the state.
var errNotReady = fmt.Errorf("%w: namespace starting", rpc.ErrUnavailable)

// gate wraps a handler so that it answers unavailable until Start has
// loaded the node's state and after Stop, and rejects nil requests.
func gate[Req, Resp any](n *Namespace, fn func(context.Context, *Req) (*Resp, error)) func(context.Context, *Req) (*Resp, error) {
	return func(ctx context.Context, r *Req) (*Resp, error) {
		select {
		case <-n.ready:
		default:
			return nil, errNotReady
		}
		if n.ctx.Err() != nil {
			return nil, fmt.Errorf("%w: namespace stopped", rpc.ErrUnavailable)
		}
		if r == nil {
			return nil, fmt.Errorf("%w: empty request", rpc.ErrBadRequest)
		}
		return fn(ctx, r)
	}
}

// Start makes the node's state consistent and starts serving: it completes
// interrupted directory re-keys (store.ResumeRekey), rebuilds the local
// filter from the store, loads prepared transaction parts (marking their
// paths) and coordinator records, creates "/" if this node is its home and
// it is missing, and starts the background loop (filter propagation,
// membership changes, transaction resolution) that runs until Stop. ctx
// bounds the start-up work only (a caller's start-up deadline does not
// stop the loop later). Start returns once handlers can serve.
func (n *Namespace) Start(ctx context.Context) error {
	n.startMu.Lock()
	defer n.startMu.Unlock()
	if n.started {
		return errors.New("namespace: already started")
	}
	if n.stopped {
		return errors.New("namespace: stopped")
	}
	if err := n.st.ResumeRekey(ctx, nil); err != nil {
		return fmt.Errorf("namespace: resume rekeys: %w", err)
	}
	var files int
	err := n.st.ScanInodes(ctx, func(p string, _ store.Inode) error {
		n.local.Add(p)
		files++
		return nil
	})
	if err != nil {
		return fmt.Errorf("namespace: rebuild local filter: %w", err)
	}
	if err := n.loadTxns(ctx); err != nil {
		return fmt.Errorf("namespace: load transactions: %w", err)
	}
	n.started = true
	close(n.ready)
	if err := n.finishCommittedParts(ctx); err != nil {
		return fmt.Errorf("namespace: finish committed parts: %w", err)
	}
	if err := n.ensureRoot(ctx); err != nil {
		return err
	}
	n.log.Info("namespace started", "paths", files, "prepared", len(n.parts), "redo", len(n.redo))
	n.wg.Add(2)
	go func() {
		defer n.wg.Done()
		n.loop()
	}()
	go func() {
		defer n.wg.Done()
		n.cleanupLoop()
	}()
	return nil
}

// Stop ends the background goroutines and makes handlers answer
// unavailable. It waits for the goroutines; it does not close the store,
// client or server. Safe to call more than once, and without Start.
func (n *Namespace) Stop() {
	n.startMu.Lock()
	n.stopped = true
	n.startMu.Unlock()
	n.cancel()
	n.wg.Wait()
}

// metaRootMoved records, at a node that drained "/", where it went.
const metaRootMoved = "ns.root_moved"

// spawn runs fn in a goroutine that Stop waits for; it reports false (and
// does not run fn) once Stop has begun.
func (n *Namespace) spawn(fn func()) bool {
	n.startMu.Lock()
	defer n.startMu.Unlock()
	if n.stopped {
		return false
	}
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		fn()
	}()
	return true
}

// ensureRoot creates "/" if this node is its home and it is missing.
func (n *Namespace) ensureRoot(ctx context.Context) error {
	if n.dir.RootHome() != n.id {
		return nil
	}
	if _, err := n.st.GetInode(ctx, "/"); err == nil || !errors.Is(err, store.ErrNotFound) {
		return err
	}
	// A drained root lives elsewhere: do not create a second one.
	if to, err := n.st.GetMeta(ctx, metaRootMoved); err == nil {
		n.log.Info("root was drained to another node", "home", string(to))
		return nil
	}
	now := time.Now().UnixNano()
	ino := store.Inode{Type: store.TypeDir, Mode: 0o755, Atime: now, Mtime: now, Ctime: now, Nlink: 2, Version: 1}
	var b store.Batch
	b.RequireInodeAbsent("/")
	b.PutInode("/", ino)
	if err := n.st.Commit(ctx, &b); err != nil && !errors.Is(err, store.ErrExists) {
		return fmt.Errorf("namespace: create /: %w", err)
	}
	n.localAdd("/")
	n.log.Info("created /")
	return nil
}

// NamespaceStats are a node's namespace counters (for /metrics and
// /v1/status).
type NamespaceStats struct {
	// Files and Dirs count the paths homed here.
	Files, Dirs int64
	// FilterBytes is the memory of the local filter, the LRU and both
	// filter arrays.
	FilterBytes int64
	// Levels counts the lookups entered here by the level that resolved
	// them; Hops is their total number of server-to-server RPCs.
	Levels  rpc.LevelCounts
	Hops    uint64
	Lookups uint64
	// NotFound and Unavailable count lookups that answered so.
	NotFound, Unavailable uint64
	// Broadcasts counts L4 broadcasts; Multicasts L3 group multicasts.
	Broadcasts, Multicasts uint64
	// TxnsCommitted, TxnsAborted and TxnsBusy count coordinated
	// transactions (busy: retried because of a conflict).
	TxnsCommitted, TxnsAborted, TxnsBusy uint64
	// Prepared is the number of prepared parts held here; Marks the paths
	// in flux.
	Prepared, Marks int
	// Rekeyed counts inodes re-keyed here by directory renames; Drained
	// the paths moved away by Drain.
	Rekeyed, Drained uint64
	// Filter propagation: pushes sent (and failed), received, full pulls
	// sent and served, deltas refused for a version mismatch, bytes sent.
	PushesSent, PushFailures, PushesReceived  uint64
	PullsSent, PullsServed, VersionMismatches uint64
	FilterBytesSent                           uint64
	// LocalFilterVersion and LRUFilterVersion are this node's filter
	// versions; L1Members and L2Members the replicas held.
	LocalFilterVersion, LRUFilterVersion uint64
	L1Members, L2Members                 int
	LRULen                               int
}

// Stats returns the namespace's counters.
func (n *Namespace) Stats() NamespaceStats {
	c := &n.counters
	s := NamespaceStats{
		Levels: rpc.LevelCounts{
			L1: c.l1.Load(), L2: c.l2.Load(), L3: c.l3.Load(), L4: c.l4.Load(),
		},
		Hops: c.hops.Load(), Lookups: c.lookups.Load(),
		NotFound: c.notFound.Load(), Unavailable: c.unavailable.Load(),
		Broadcasts: c.broadcasts.Load(), Multicasts: c.multicasts.Load(),
		TxnsCommitted: c.committed.Load(), TxnsAborted: c.aborted.Load(), TxnsBusy: c.busy.Load(),
		Rekeyed: c.rekeyed.Load(), Drained: c.drained.Load(),
		PushesSent: c.pushesSent.Load(), PushFailures: c.pushFails.Load(), PushesReceived: c.pushesRecv.Load(),
		PullsSent: c.pullsSent.Load(), PullsServed: c.pullsServed.Load(), VersionMismatches: c.mismatches.Load(),
		FilterBytesSent: c.bytesSent.Load(),
	}
	if cnt, err := n.st.CountInodes(context.Background()); err == nil {
		s.Files, s.Dirs = cnt.Files, cnt.Dirs
	}
	n.localMu.RLock()
	s.FilterBytes += int64(n.local.SizeBytes())
	s.LocalFilterVersion = n.local.Filter().Version()
	n.localMu.RUnlock()
	n.lruMu.Lock()
	s.FilterBytes += int64(n.lru.SizeBytes())
	s.LRUFilterVersion = n.lru.Filter().Version()
	s.LRULen = n.lru.Len()
	n.lruMu.Unlock()
	n.arrMu.RLock()
	s.FilterBytes += int64(n.l1.SizeBytes() + n.l2.SizeBytes())
	s.L1Members, s.L2Members = n.l1.Len(), n.l2.Len()
	n.arrMu.RUnlock()
	n.partMu.Lock()
	s.Prepared = len(n.parts)
	n.partMu.Unlock()
	s.Marks = int(n.flux.count.Load())
	return s
}

// ---- peers ----

// peerSet is a snapshot of the Directory.
type peerSet struct {
	list []Peer
	byID map[string]*Peer
	root string
	// seg is set when this node routes with G-HBA segments and knows its
	// assignment; held is then its segment (the origins it holds).
	seg     bool
	held    map[string]bool
	heldKey string
}

// groupGone reports whether no known node is in group g.
func (ps *peerSet) groupGone(g string) bool {
	for _, p := range ps.list {
		if p.Group == g {
			return false
		}
	}
	return true
}

// refreshPeers takes a new snapshot of the Directory.
func (n *Namespace) refreshPeers() *peerSet {
	ps := &peerSet{list: n.dir.Peers(), root: n.dir.RootHome()}
	ps.byID = make(map[string]*Peer, len(ps.list))
	for i := range ps.list {
		ps.byID[ps.list[i].ID] = &ps.list[i]
	}
	if n.segmented() {
		held, ok := n.dir.(Segments).Held()
		ps.seg, ps.heldKey = ok, heldKey(held, ok)
		ps.held = make(map[string]bool, len(held))
		for _, id := range held {
			ps.held[id] = true
		}
	}
	n.peers.Store(ps)
	return ps
}

// peer returns the peer with id, or nil.
func (n *Namespace) peer(id string) *Peer { return n.peers.Load().byID[id] }

// errNodeDown reports a home (or coordinator) that cannot be reached.
func errNodeDown(id string) error {
	return fmt.Errorf("%w: node %s is down", rpc.ErrUnavailable, id)
}

// call calls method on node id (never another node). A node the Directory
// marks down, or does not know, answers rpc.ErrUnavailable at once.
func (n *Namespace) call(ctx context.Context, id, method string, req, resp any) error {
	p := n.peer(id)
	if p == nil || !p.Up || p.RPCAddr == "" {
		return errNodeDown(id)
	}
	return n.cl.Call(ctx, p.RPCAddr, method, req, resp)
}

// addrOf returns the RPC address of node id, or "".
func (n *Namespace) addrOf(id string) string {
	if p := n.peer(id); p != nil {
		return p.RPCAddr
	}
	return ""
}

// isUp reports whether node id is known and up (this node always is).
func (n *Namespace) isUp(id string) bool {
	if id == n.id {
		return true
	}
	p := n.peer(id)
	return p != nil && p.Up
}

// newTxnID returns a transaction id unique across this node's restarts.
func (n *Namespace) newTxnID() string {
	return fmt.Sprintf("%s.%s.%d", n.id, n.txnEpoch, n.txnSeq.Add(1))
}

// ---- placement ----

type peerLoad struct {
	files    atomic.Int64
	draining atomic.Bool
	at       atomic.Int64 // unix nanos of the last report
}

// placeChild chooses the home of a new child of a directory homed here
// (never one of the nodes in exclude, which just failed to answer).
func (n *Namespace) placeChild(ctx context.Context, exclude ...string) string {
	ps := n.peers.Load()
	var cands []string
	for i := range ps.list {
		p := &ps.list[i]
		if !p.Up || p.Leaving || p.RPCAddr == "" || containsStr(exclude, p.ID) {
			continue
		}
		if p.ID == n.id && n.draining.Load() {
			continue
		}
		if v, ok := n.loads.Load(p.ID); ok && v.(*peerLoad).draining.Load() {
			continue
		}
		cands = append(cands, p.ID)
	}
	selfOK := !n.draining.Load()
	if len(cands) == 0 {
		if selfOK {
			return n.id
		}
		return ""
	}
	switch n.cfg.Placement {
	case PlacementParent:
		if selfOK {
			return n.id
		}
		return cands[mrand.IntN(len(cands))]
	case PlacementRandom:
		return cands[mrand.IntN(len(cands))]
	}
	a := cands[mrand.IntN(len(cands))]
	b := cands[mrand.IntN(len(cands))]
	la, lb := n.loadOf(ctx, a), n.loadOf(ctx, b)
	pick := a
	if lb < la {
		pick = b
	}
	if pick != n.id {
		if v, ok := n.loads.Load(pick); ok {
			v.(*peerLoad).files.Add(1) // until the next report
		}
	}
	return pick
}

// loadOf returns the number of paths node id homes, as last reported
// (exact for this node; 0 when unknown).
func (n *Namespace) loadOf(ctx context.Context, id string) int64 {
	if id == n.id {
		c, err := n.st.CountInodes(ctx)
		if err != nil {
			return math.MaxInt64
		}
		return c.Total()
	}
	if v, ok := n.loads.Load(id); ok {
		return v.(*peerLoad).files.Load()
	}
	return 0
}

func (n *Namespace) handleHomeLoad(ctx context.Context, _ *homeLoadReq) (*homeLoadResp, error) {
	c, err := n.st.CountInodes(ctx)
	if err != nil {
		return nil, err
	}
	return &homeLoadResp{NodeID: n.id, Files: c.Total(), Draining: n.draining.Load()}, nil
}

// pollLoads asks every up peer for its load (balanced placement).
func (n *Namespace) pollLoads(ctx context.Context) {
	ps := n.peers.Load()
	var wg sync.WaitGroup
	for i := range ps.list {
		p := ps.list[i]
		if p.ID == n.id || !p.Up {
			continue
		}
		wg.Go(func() {
			cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			var resp homeLoadResp
			if err := n.call(cctx, p.ID, methodHomeLoad, &homeLoadReq{}, &resp); err != nil {
				return
			}
			v, _ := n.loads.LoadOrStore(p.ID, &peerLoad{})
			pl := v.(*peerLoad)
			pl.files.Store(resp.Files)
			pl.draining.Store(resp.Draining)
			pl.at.Store(time.Now().UnixNano())
		})
	}
	wg.Wait()
}

// notExist wraps fs.ErrNotExist for path p.
func notExist(p string) error { return fmt.Errorf("%s: %w", p, fs.ErrNotExist) }
