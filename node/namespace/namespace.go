// Package namespace is the metadata logic of one ghba node (docs/design.md,
// "Namespace"): the operations on the paths the node homes, the transactions
// that change paths homed on several nodes, and the routing of every request
// to a path's home through the L1–L4 query path with the node's Bloom
// filters.
//
// The package needs only what it declares: a Directory (the cluster as the
// node sees it), a store, an RPC client to reach other nodes and a server to
// register its handlers on. Where things are:
//
//	namespace.go  Namespace, Options, Start/Stop, RPC registration, Stats
//	directory.go  the Directory it consumes; snapshots of the peers
//	reach.go      calling a node (or running locally) and reaching a path's home
//	ops.go        stat, lookup, create, mkdir, readdir, setattr, unlink, rmdir
//	rename.go     rename of files and directories
//	txn.go        two-phase commit across homes (coordinator and participant)
//	flux.go       paths in flux: marks of prepared parts, operations in progress
//	drain.go      moving every path away before the node leaves
//	placement.go  choosing the home of a new child or of a drained path
//	lookup.go     the query path L1–L4 and the verification handlers
//	filters.go    the node's filters, replicas of others', propagation
//	segments.go   G-HBA: the group's IDBFA and the holders of this node's replica
//	background.go the loops that keep filters, loads and transactions current
//	paths.go      path validation and helpers
//	wire.go       the server-to-server protocol
package namespace

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ghba/ghba/node/internal/tasks"
	"github.com/ghba/ghba/node/store"
	"github.com/ghba/ghba/routing"
	"github.com/ghba/ghba/rpc"
)

// Placement policies for a new child's home (docs/design.md, "Placement").
const (
	PlacementRandom   = "random"
	PlacementBalanced = "balanced"
	PlacementParent   = "parent"
)

// Routing schemes (docs/design.md, "Query path"). With SchemeGHBA a node
// holds replicas of the local filters of the nodes its group's FSM assigns
// to it (its segment, about (N−M')/M' of them) and resolves the rest with
// the L3 group multicast; with SchemeHBA it holds a replica of every other
// node's filter (HBA, G-HBA §2.5 with M = 1), which costs N−1 replicas per
// node.
const (
	SchemeGHBA = "ghba"
	SchemeHBA  = "hba"
)

// ErrOptions is wrapped by every error about bad Options.
var ErrOptions = errors.New("namespace: invalid options")

// Routing is the filter configuration of a node. Every node of a cluster
// must use the same (the filters are compared bit for bit).
type Routing struct {
	// BitsPerFile and FilterCapacity size the local counting filter and
	// its replicas (FilterCapacity × BitsPerFile bits).
	BitsPerFile    float64
	FilterCapacity int
	// LRUEntries and LRUBitsPerFile size the LRU list and its filter
	// (HBA §4.2.2); LRUEntries 0 turns the LRU off.
	LRUEntries     int
	LRUBitsPerFile float64
	// PropagateThreshold is the share of a filter's bits changed before it
	// is pushed to its replicas (HBA §6: 1%); PropagateInterval pushes
	// changes at least this often.
	PropagateThreshold float64
	PropagateInterval  time.Duration
	// Hash is the filters' hash (default routing.HashXX).
	Hash routing.HashKind
}

// DefaultRouting returns the defaults documented in the README.
func DefaultRouting() Routing {
	return Routing{
		BitsPerFile:        8,
		FilterCapacity:     1_000_000,
		LRUEntries:         1600,
		LRUBitsPerFile:     20,
		PropagateThreshold: 0.01,
		PropagateInterval:  2 * time.Second,
		Hash:               routing.HashXX,
	}
}

// withDefaults fills the fields left zero with DefaultRouting's (except
// LRUEntries, whose zero means "no LRU").
func (r Routing) withDefaults() Routing {
	d := DefaultRouting()
	if r.BitsPerFile == 0 {
		r.BitsPerFile = d.BitsPerFile
	}
	if r.FilterCapacity == 0 {
		r.FilterCapacity = d.FilterCapacity
	}
	if r.LRUBitsPerFile == 0 {
		r.LRUBitsPerFile = d.LRUBitsPerFile
	}
	if r.PropagateThreshold == 0 {
		r.PropagateThreshold = d.PropagateThreshold
	}
	if r.PropagateInterval == 0 {
		r.PropagateInterval = d.PropagateInterval
	}
	if r.Hash == 0 {
		r.Hash = d.Hash
	}
	return r
}

// Geometries returns the geometries of the local filter (FilterCapacity ×
// BitsPerFile) and of the LRU filter (LRUEntries × LRUBitsPerFile), with
// the optimal number of hash functions. Zero fields take DefaultRouting's.
func (r Routing) Geometries() (local, lru routing.Geometry, err error) {
	r = r.withDefaults()
	local, err = routing.NewGeometry(r.FilterCapacity, r.BitsPerFile, 0, r.Hash)
	if err != nil {
		return local, lru, fmt.Errorf("%w: filter_capacity/bits_per_file: %w", ErrOptions, err)
	}
	lru, err = routing.NewGeometry(max(r.LRUEntries, 1), r.LRUBitsPerFile, 0, r.Hash)
	if err != nil {
		return local, lru, fmt.Errorf("%w: lru_entries/lru_bits_per_file: %w", ErrOptions, err)
	}
	return local, lru, nil
}

// Tuning holds every duration and bound of the namespace that operators do
// not configure; tests shorten some. Zero fields take DefaultTuning's.
type Tuning struct {
	// StageWait bounds how long staging a transaction part waits for
	// operations in progress on related paths; past it the part is
	// refused as busy and the coordinator retries, which breaks waits
	// between transactions that stage at each other's nodes.
	StageWait time.Duration
	// ResolveAfter is the age after which the background resolver asks a
	// coordinator about a prepared part nobody has resolved.
	ResolveAfter time.Duration
	// ResolveInterval is how often the resolver runs.
	ResolveInterval time.Duration
	// PeerTimeout bounds one short call to a peer: an L3 query, an IDBFA
	// fetch, a load report.
	PeerTimeout time.Duration
	// PullTimeout and PushTimeout bound one filter pull and one push.
	PullTimeout, PushTimeout time.Duration
	// DeliverTimeout bounds telling the participants of a committed
	// transaction (they are told again later if it passes).
	DeliverTimeout time.Duration
	// AbortTimeout bounds telling the participants of an abort.
	AbortTimeout time.Duration
	// BusyRetries bounds the retries of a transaction that met a
	// conflicting one; BusyBackoffMin and BusyBackoffMax its back-off.
	BusyRetries                    int
	BusyBackoffMin, BusyBackoffMax time.Duration
	// MarkBackoffMin and MarkBackoffMax are the back-off of an operation
	// waiting for a pending transaction on a related path.
	MarkBackoffMin, MarkBackoffMax time.Duration
	// PeerCheckInterval is how often the background loop compares its
	// snapshot of the peers with the Directory (a safety net for a missed
	// notification) and refreshes other groups' IDBFAs at most.
	PeerCheckInterval time.Duration
	// RootTimeout bounds creating "/" when this node becomes its home.
	RootTimeout time.Duration
	// DrainPoll is how often Drain checks that the transactions it took
	// part in are settled.
	DrainPoll time.Duration
}

// DefaultTuning returns the timers used outside tests.
func DefaultTuning() Tuning {
	return Tuning{
		StageWait:         100 * time.Millisecond,
		ResolveAfter:      2 * time.Second,
		ResolveInterval:   500 * time.Millisecond,
		PeerTimeout:       2 * time.Second,
		PullTimeout:       10 * time.Second,
		PushTimeout:       5 * time.Second,
		DeliverTimeout:    30 * time.Second,
		AbortTimeout:      5 * time.Second,
		BusyRetries:       25,
		BusyBackoffMin:    time.Millisecond,
		BusyBackoffMax:    200 * time.Millisecond,
		MarkBackoffMin:    time.Millisecond,
		MarkBackoffMax:    20 * time.Millisecond,
		PeerCheckInterval: time.Second,
		RootTimeout:       10 * time.Second,
		DrainPoll:         20 * time.Millisecond,
	}
}

// withDefaults fills the fields left zero with DefaultTuning's.
func (t Tuning) withDefaults() Tuning {
	d := DefaultTuning()
	fill := func(v *time.Duration, def time.Duration) {
		if *v <= 0 {
			*v = def
		}
	}
	fill(&t.StageWait, d.StageWait)
	fill(&t.ResolveAfter, d.ResolveAfter)
	fill(&t.ResolveInterval, d.ResolveInterval)
	fill(&t.PeerTimeout, d.PeerTimeout)
	fill(&t.PullTimeout, d.PullTimeout)
	fill(&t.PushTimeout, d.PushTimeout)
	fill(&t.DeliverTimeout, d.DeliverTimeout)
	fill(&t.AbortTimeout, d.AbortTimeout)
	fill(&t.BusyBackoffMin, d.BusyBackoffMin)
	fill(&t.BusyBackoffMax, d.BusyBackoffMax)
	fill(&t.MarkBackoffMin, d.MarkBackoffMin)
	fill(&t.MarkBackoffMax, d.MarkBackoffMax)
	fill(&t.PeerCheckInterval, d.PeerCheckInterval)
	fill(&t.RootTimeout, d.RootTimeout)
	fill(&t.DrainPoll, d.DrainPoll)
	if t.BusyRetries <= 0 {
		t.BusyRetries = d.BusyRetries
	}
	return t
}

// Options are the dependencies and settings of a Namespace.
type Options struct {
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
	// Routing configures the filters; zero fields take DefaultRouting's.
	Routing Routing
	// Placement is PlacementBalanced (default), PlacementRandom or
	// PlacementParent.
	Placement string
	// Scheme is SchemeGHBA (default) or SchemeHBA.
	Scheme string
	// Logger carries the node id; nil discards.
	Logger *slog.Logger
	// Tuning holds the timers; zero fields take DefaultTuning's.
	Tuning Tuning
}

// Namespace is the metadata logic of one node (docs/design.md): the
// operations on the paths it homes, the coordination of changes that span
// a parent directory's home and a child's home, and the routing of every
// request to a path's home through the L1–L4 query path with this node's
// filters.
//
// Construct it with New, install its handlers with RegisterRPC, then call
// Start before the RPC server accepts traffic (handlers answer unavailable
// until Start has loaded the node's state). Stop ends its goroutines; the
// caller closes the store, client and server afterwards.
type Namespace struct {
	id        string
	st        *store.Store
	cl        *rpc.Client
	dir       Directory
	log       *slog.Logger
	rt        Routing
	placement string
	scheme    string
	tune      Tuning

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

	// transactions (txn.go, flux.go)
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

	loads    sync.Map // node id → *peerLoad (placement.go)
	draining atomic.Bool

	ready   chan struct{} // closed when Start has loaded the state
	startMu sync.Mutex
	started bool
	ctx     context.Context // ends at Stop: background work and detached steps
	cancel  context.CancelFunc
	tasks   tasks.Group
	// hook, set by tests, can stop a coordinator dead at a point of the
	// protocol (see crashAt).
	hook     atomic.Pointer[func(point, txn string) bool]
	counters counters
}

// counters are the namespace's event counters (see Stats).
type counters struct {
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

// New checks opts and returns a Namespace that is not started.
func New(opts Options) (*Namespace, error) {
	switch {
	case opts.NodeID == "":
		return nil, fmt.Errorf("%w: empty node id", ErrOptions)
	case opts.Store == nil || opts.Client == nil || opts.Directory == nil:
		return nil, fmt.Errorf("%w: store, client and directory are required", ErrOptions)
	}
	rt := opts.Routing.withDefaults()
	localGeo, lruGeo, err := rt.Geometries()
	if err != nil {
		return nil, err
	}
	placement, scheme := opts.Placement, opts.Scheme
	if placement == "" {
		placement = PlacementBalanced
	}
	if scheme == "" {
		scheme = SchemeGHBA
	}
	switch {
	case placement != PlacementBalanced && placement != PlacementRandom && placement != PlacementParent:
		return nil, fmt.Errorf("%w: placement %q", ErrOptions, placement)
	case scheme != SchemeGHBA && scheme != SchemeHBA:
		return nil, fmt.Errorf("%w: scheme %q", ErrOptions, scheme)
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
		id:        opts.NodeID,
		st:        opts.Store,
		cl:        opts.Client,
		dir:       opts.Directory,
		log:       log.With("component", "namespace"),
		rt:        rt,
		placement: placement,
		scheme:    scheme,
		tune:      opts.Tuning.withDefaults(),
		localGeo:  localGeo,
		lruGeo:    lruGeo,
		local:     routing.NewCountingFilter(localGeo),
		lru:       routing.NewLRU(rt.LRUEntries, lruGeo),
		l1:        routing.NewFilterArray(lruGeo),
		l2:        routing.NewFilterArray(localGeo),
		coords:    make(map[string]*coordTxn),
		redo:      make(map[string]*coordRecord),
		parts:     make(map[string]*partTxn),
		txnEpoch:  hex.EncodeToString(epoch[:]),
		cleanup:   make(chan string, 4096),
		ready:     make(chan struct{}),
	}
	n.flux.init()
	n.prop.init()
	n.ctx, n.cancel = context.WithCancel(context.Background())
	n.refreshPeers()
	return n, nil
}

// RegisterRPC installs the namespace's client-facing handlers
// (rpc.MethodStat, Lookup, BatchStat, Create, Mkdir, ReadDir, SetAttr,
// Unlink, Rmdir, Rename) and its server-to-server handlers (wire.go) on s.
func (n *Namespace) RegisterRPC(s *rpc.Server) {
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

	rpc.Register(s, methodLocalCheck, gate(n, n.handleLocalCheck))
	rpc.Register(s, methodL3Query, gate(n, n.handleL3Query))
	rpc.Register(s, methodIDBFA, gate(n, n.handleIDBFA))
	rpc.Register(s, methodFilterPull, gate(n, n.handleFilterPull))
	rpc.Register(s, methodFilterPush, gate(n, n.handleFilterPush))
	rpc.Register(s, methodTxnPrepare, gate(n, n.handlePrepare))
	rpc.Register(s, methodTxnCommit, gate(n, n.handleCommit))
	rpc.Register(s, methodTxnAbort, gate(n, n.handleAbort))
	rpc.Register(s, methodTxnStatus, gate(n, n.handleTxnStatus))
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
// it is missing, and starts the background loops (background.go) that run
// until Stop. ctx bounds the start-up work only. Start returns once
// handlers can serve.
func (n *Namespace) Start(ctx context.Context) error {
	n.startMu.Lock()
	defer n.startMu.Unlock()
	if n.started {
		return errors.New("namespace: already started")
	}
	if n.tasks.Closed() {
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
	n.tasks.Go(n.filterLoop)
	n.tasks.Go(n.cleanupLoop)
	return nil
}

// Stop ends the background goroutines and makes handlers answer
// unavailable. It waits for the goroutines; it does not close the store,
// client or server. Safe to call more than once, and without Start.
func (n *Namespace) Stop(context.Context) error {
	n.tasks.Close()
	n.cancel()
	n.tasks.Wait()
	return nil
}

// metaRootMoved records, at a node that drained "/", where it went.
const metaRootMoved = "ns.root_moved"

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

// Stats are a node's namespace counters (for /metrics and /v1/status).
type Stats struct {
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
func (n *Namespace) Stats() Stats {
	c := &n.counters
	s := Stats{
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
