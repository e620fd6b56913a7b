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
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ghba/ghba/node/contents"
	"github.com/ghba/ghba/node/internal/tasks"
	"github.com/ghba/ghba/routing"
	"github.com/ghba/ghba/rpc"
	"github.com/ghba/ghba/rpc/client"
)

// Placement policies for a new child's home (docs/design.md, "Homes and placement").
const (
	PlacementRandom   = "random"
	PlacementBalanced = "balanced"
	PlacementParent   = "parent"
	// PlacementColocate places a directory as PlacementBalanced and a
	// file in its parent's shard, so that creating it is one Raft commit
	// in one shard instead of a transaction between two; a directory that
	// passes Options.SpreadAfter files created through this leader spreads
	// its further files as PlacementBalanced.
	PlacementColocate = "colocate"
)

// Placements returns the placement policies, the default first.
func Placements() []string {
	return []string{PlacementColocate, PlacementBalanced, PlacementRandom, PlacementParent}
}

// DefaultSpreadAfter is Options.SpreadAfter's default.
const DefaultSpreadAfter = 10000

// Routing schemes (docs/design.md, "Query path"). With SchemeGHBA a node
// holds replicas of the local filters of the nodes its group's FSM assigns
// to it (its segment, about (N−M')/M' of them) and resolves the rest with
// the L3 group multicast; with SchemeHBA it holds a replica of every other
// node's filter (HBA, G-HBA §2.5 with M = 1), which costs N−1 replicas per
// node. SchemeAuto is G-HBA's segment plus what the memory budget holds
// (FilterMemory), and routes as HBA — no L3 multicast — while the budget
// holds every other shard's filter.
const (
	SchemeGHBA = "ghba"
	SchemeHBA  = "hba"
	SchemeAuto = "auto"
)

// Schemes returns the routing schemes, the default first.
func Schemes() []string { return []string{SchemeAuto, SchemeGHBA, SchemeHBA} }

// WireScheme is the scheme a node announces when it asks to join a group:
// auto as ghba (they take their group's segments alike), so that a leader
// of a build from before auto, which compares schemes as strings, takes
// it during a rolling upgrade.
func WireScheme(s string) string {
	if s == SchemeAuto {
		return SchemeGHBA
	}
	return s
}

// SchemesAgree reports whether nodes with schemes a and b may share a
// group: HBA takes no segment, G-HBA and auto take their group's segments
// alike. An empty scheme is a build's from before the setting (G-HBA).
func SchemesAgree(a, b string) bool {
	return (a == SchemeHBA) == (b == SchemeHBA)
}

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
	// L1Admission is how a path enters a shard's LRU list: L1AdmitLRU
	// (default: on every use, HBA §4.2.2) or L1AdmitFrequency (on its
	// second use within a window, counted by an adaptive Bloom filter,
	// g-hba-survey §V; routing.FrequencyLRU).
	L1Admission string
	// PropagateThreshold is the share of a filter's bits changed before it
	// is pushed to its replicas (HBA §6: 1%); PropagateInterval pushes
	// changes at least this often.
	PropagateThreshold float64
	PropagateInterval  time.Duration
	// Hash is the filters' hash (default routing.HashXX).
	Hash routing.HashKind
}

// L1 admission policies (Routing.L1Admission).
const (
	L1AdmitLRU       = "lru"
	L1AdmitFrequency = "frequency"
)

// DefaultRouting returns the defaults documented in docs/operations.md, "Configuration".
func DefaultRouting() Routing {
	return Routing{
		BitsPerFile:        8,
		FilterCapacity:     1_000_000,
		LRUEntries:         1600,
		LRUBitsPerFile:     20,
		L1Admission:        L1AdmitLRU,
		PropagateThreshold: 0.01,
		PropagateInterval:  2 * time.Second,
		Hash:               routing.HashXX,
	}
}

// withDefaults fills the fields left zero with DefaultRouting's (except
// LRUEntries, whose zero means "no LRU").
func (r Routing) withDefaults() Routing {
	d := DefaultRouting()
	r.BitsPerFile = cmp.Or(r.BitsPerFile, d.BitsPerFile)
	r.FilterCapacity = cmp.Or(r.FilterCapacity, d.FilterCapacity)
	r.LRUBitsPerFile = cmp.Or(r.LRUBitsPerFile, d.LRUBitsPerFile)
	r.L1Admission = cmp.Or(r.L1Admission, d.L1Admission)
	r.PropagateThreshold = cmp.Or(r.PropagateThreshold, d.PropagateThreshold)
	r.PropagateInterval = cmp.Or(r.PropagateInterval, d.PropagateInterval)
	r.Hash = cmp.Or(r.Hash, d.Hash)
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
	// DeliverWait bounds how long a create of a directory on another
	// shard waits for that shard to apply it before answering (its
	// entries are made there next); a slower delivery goes on in the
	// background.
	DeliverWait time.Duration
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
	// LeaderWait bounds how long a request waits for a shard without a
	// reachable leader (an election under way, a dead leader not yet
	// noticed) before it answers unavailable.
	LeaderWait time.Duration
	// HandOverDrain bounds how long a planned leadership move waits for
	// the home's Raft commands in flight to finish before it hands
	// leadership over (handover.go).
	HandOverDrain time.Duration
	// TrashInterval is how often a home deletes the trashed objects of
	// its shard that passed Options.DataGCGrace (trash.go); at most half
	// the grace period is used.
	TrashInterval time.Duration
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
		DeliverWait:       2 * time.Second,
		AbortTimeout:      5 * time.Second,
		BusyRetries:       25,
		BusyBackoffMin:    time.Millisecond,
		BusyBackoffMax:    200 * time.Millisecond,
		MarkBackoffMin:    time.Millisecond,
		MarkBackoffMax:    20 * time.Millisecond,
		PeerCheckInterval: time.Second,
		RootTimeout:       10 * time.Second,
		LeaderWait:        5 * time.Second,
		HandOverDrain:     2 * time.Second,
		TrashInterval:     time.Minute,
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
	fill(&t.DeliverWait, d.DeliverWait)
	fill(&t.AbortTimeout, d.AbortTimeout)
	fill(&t.BusyBackoffMin, d.BusyBackoffMin)
	fill(&t.BusyBackoffMax, d.BusyBackoffMax)
	fill(&t.MarkBackoffMin, d.MarkBackoffMin)
	fill(&t.MarkBackoffMax, d.MarkBackoffMax)
	fill(&t.PeerCheckInterval, d.PeerCheckInterval)
	fill(&t.RootTimeout, d.RootTimeout)
	fill(&t.LeaderWait, d.LeaderWait)
	fill(&t.HandOverDrain, d.HandOverDrain)
	fill(&t.TrashInterval, d.TrashInterval)
	if t.BusyRetries <= 0 {
		t.BusyRetries = d.BusyRetries
	}
	return t
}

// Options are the dependencies and settings of a Namespace.
type Options struct {
	// NodeID is this node's id (Directory.Self().ID). Required.
	NodeID string
	// Client calls other nodes (Client.Call to an exact address). Required.
	// The Namespace does not close it.
	Client *client.Client
	// Directory is the cluster membership. Required.
	Directory Directory
	// Routing configures the filters; zero fields take DefaultRouting's.
	Routing Routing
	// Placement is PlacementColocate (default), PlacementBalanced,
	// PlacementRandom or PlacementParent.
	Placement string
	// SpreadAfter is the number of files of one directory that
	// PlacementColocate keeps with it (DefaultSpreadAfter when zero).
	SpreadAfter int
	// Scheme is SchemeAuto (default), SchemeGHBA or SchemeHBA.
	Scheme string
	// FilterMemory is the memory, in bytes, this node's L2 array of
	// local-filter replicas may take with G-HBA (budget.go): beyond its
	// segment it holds its group-mates' filters, then other shards', as
	// far as the budget goes. 0 holds the segment alone (the paper's
	// G-HBA); with SchemeHBA every replica is held whatever the budget.
	FilterMemory int64
	// CacheLease is the length of the leases under which clients may
	// cache inodes (leases.go; rpc.StatRequest.Lease); 0 grants none.
	CacheLease time.Duration
	// DataStore returns the cluster's data store, where file contents
	// are (package node/contents), for the garbage collection of the
	// objects no layout references any more (trash.go); nil, nil while
	// none is set (trash then waits). It is called once per round of a
	// home's collection; the caller may cache what it opens. nil: trash
	// always waits.
	DataStore func(ctx context.Context) (*contents.Store, error)
	// DataGCGrace is how long a trashed object stays in the data store
	// (DefaultDataGCGrace when zero), for readers holding an older
	// layout.
	DataGCGrace time.Duration
	// Logger carries the node id; nil discards.
	Logger *slog.Logger
	// Tuning holds the timers; zero fields take DefaultTuning's.
	Tuning Tuning
}

// Namespace is the metadata logic of one node (docs/design.md,
// "Namespace" and "Replicated shards"): it routes every request to the
// shard that homes its path through the L1–L4 query path with this node's
// filters, and it runs the home logic (operations, transactions, the
// shard's filters) of every shard this node leads, each in a home.
//
// Construct it with New, install its handlers with RegisterRPC, then call
// Start before the RPC server accepts traffic. The node calls Lead when it
// becomes the leader of a shard (after the replica's barrier) and Unlead
// when it stops leading it. Stop ends everything; the caller closes the
// client and server afterwards.
type Namespace struct {
	id        string
	cl        *client.Client
	dir       Directory
	log       *slog.Logger
	rt        Routing
	placement string
	spread    int // PlacementColocate's SpreadAfter
	scheme    string
	tune      Tuning
	// filterMemory is Options.FilterMemory.
	filterMemory int64
	// leases are the client cache's leases on paths this node homes.
	leases *leaseTable
	// dataStoreFn and gcGrace are Options.DataStore and DataGCGrace.
	dataStoreFn func(ctx context.Context) (*contents.Store, error)
	gcGrace     time.Duration

	localGeo, lruGeo routing.Geometry

	peers atomic.Pointer[peerSet]
	// seen is every shard the Directory has named since start (peerSet.everShards).
	seenMu sync.Mutex
	seen   []string
	hints  sync.Map // shard → leaderHint learnt from a "not the leader" answer

	homesMu sync.RWMutex
	homes   map[string]*home // the shards this node leads
	// pending: the shards this node won the election of and does not
	// serve yet (WillLead); closed by Lead or Unlead (handover.go)
	pending map[string]chan struct{}

	// routing state (filters.go)
	arrMu  sync.RWMutex
	l1, l2 *routing.FilterArray
	prop   propState
	idb    idbfaCache

	loads sync.Map // shard → *shardLoad (placement.go)

	ready   chan struct{} // closed when Start is done
	startMu sync.Mutex
	started bool
	ctx     context.Context // ends at Stop
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
	rekeyed                       atomic.Uint64
	resolved                      atomic.Uint64
	leaderWaits                   atomic.Uint64
	l3Nanos, l4Nanos, l4Steps     atomic.Uint64 // time in L3 multicasts and L4 steps (groupsize model)
	moveWaits, forwarded          atomic.Uint64
	pushesSent, pushFails         atomic.Uint64
	pushesRecv, pullsSent         atomic.Uint64
	pullsServed, mismatches       atomic.Uint64
	bytesSent                     atomic.Uint64
	objectsDeleted                atomic.Uint64
}

// New checks opts and returns a Namespace that is not started.
func New(opts Options) (*Namespace, error) {
	switch {
	case opts.NodeID == "":
		return nil, fmt.Errorf("%w: empty node id", ErrOptions)
	case opts.Client == nil || opts.Directory == nil:
		return nil, fmt.Errorf("%w: client and directory are required", ErrOptions)
	}
	rt := opts.Routing.withDefaults()
	localGeo, lruGeo, err := rt.Geometries()
	if err != nil {
		return nil, err
	}
	placement, scheme := opts.Placement, opts.Scheme
	if placement == "" {
		placement = PlacementColocate
	}
	if scheme == "" {
		scheme = SchemeAuto
	}
	switch {
	case !slices.Contains(Placements(), placement):
		return nil, fmt.Errorf("%w: placement %q", ErrOptions, placement)
	case !slices.Contains(Schemes(), scheme):
		return nil, fmt.Errorf("%w: scheme %q", ErrOptions, scheme)
	case rt.L1Admission != L1AdmitLRU && rt.L1Admission != L1AdmitFrequency:
		return nil, fmt.Errorf("%w: L1 admission %q", ErrOptions, rt.L1Admission)
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	n := &Namespace{
		id:           opts.NodeID,
		cl:           opts.Client,
		dir:          opts.Directory,
		log:          log.With("component", "namespace"),
		rt:           rt,
		placement:    placement,
		spread:       cmp.Or(opts.SpreadAfter, DefaultSpreadAfter),
		scheme:       scheme,
		tune:         opts.Tuning.withDefaults(),
		filterMemory: max(opts.FilterMemory, 0),
		localGeo:     localGeo,
		lruGeo:       lruGeo,
		homes:        make(map[string]*home),
		pending:      make(map[string]chan struct{}),
		l1:           routing.NewFilterArray(lruGeo),
		l2:           routing.NewFilterArray(localGeo),
		ready:        make(chan struct{}),
		leases:       newLeaseTable(max(opts.CacheLease, 0)),
		dataStoreFn:  opts.DataStore,
		gcGrace:      cmp.Or(max(opts.DataGCGrace, 0), DefaultDataGCGrace),
	}
	n.prop.init()
	n.ctx, n.cancel = context.WithCancel(context.Background())
	n.refreshPeers()
	return n, nil
}

// Geometry returns the geometry of a shard's counting filter (the node's
// shard replicas build theirs with it).
func (n *Namespace) Geometry() routing.Geometry { return n.localGeo }

// RegisterRPC installs the namespace's client-facing handlers
// (rpc.MethodStat, Lookup, BatchStat, Create, Mkdir, ReadDir, SetAttr,
// Unlink, Rmdir, Rename, Filters) and its server-to-server handlers (wire.go) on s.
func (n *Namespace) RegisterRPC(s *rpc.Server) {
	rpc.Register(s, rpc.MethodStat, gate(n, func(ctx context.Context, r *rpc.StatRequest) (*rpc.StatResponse, error) {
		if err := guard(ctx, r.Path); err != nil {
			return nil, err
		}
		if r.Lease {
			return n.StatLease(ctx, r.Path)
		}
		return n.Stat(ctx, r.Path)
	}))
	rpc.Register(s, rpc.MethodLookup, gate(n, func(ctx context.Context, r *rpc.LookupRequest) (*rpc.LookupResponse, error) {
		if err := guard(ctx, r.Path); err != nil {
			return nil, err
		}
		return n.Lookup(ctx, r.Path)
	}))
	rpc.Register(s, rpc.MethodBatchStat, gate(n, func(ctx context.Context, r *rpc.BatchStatRequest) (*rpc.BatchStatResponse, error) {
		if err := guard(ctx, r.Paths...); err != nil {
			return nil, err
		}
		return n.BatchStat(ctx, r)
	}))
	rpc.Register(s, rpc.MethodCreate, gate(n, func(ctx context.Context, r *rpc.CreateRequest) (*rpc.CreateResponse, error) {
		if err := guard(ctx, r.Path); err != nil {
			return nil, err
		}
		stampOwner(ctx, &r.UID, &r.GID)
		return n.Create(ctx, r)
	}))
	rpc.Register(s, rpc.MethodBatchCreate, gate(n, func(ctx context.Context, r *rpc.BatchCreateRequest) (*rpc.BatchCreateResponse, error) {
		if err := guardBatch(ctx, r); err != nil {
			return nil, err
		}
		return n.BatchCreate(ctx, r)
	}))
	rpc.Register(s, rpc.MethodBatchCreateDirs, gate(n, func(ctx context.Context, r *rpc.BatchCreateDirsRequest) (*rpc.BatchCreateDirsResponse, error) {
		for i := range r.Dirs {
			if err := guardBatch(ctx, &r.Dirs[i]); err != nil {
				return nil, err
			}
		}
		return n.BatchCreateDirs(ctx, r)
	}))
	rpc.Register(s, rpc.MethodFind, gate(n, n.Find))
	rpc.Register(s, rpc.MethodMkdir, gate(n, func(ctx context.Context, r *rpc.MkdirRequest) (*rpc.MkdirResponse, error) {
		if err := guard(ctx, r.Path); err != nil {
			return nil, err
		}
		stampOwner(ctx, &r.UID, &r.GID)
		return n.Mkdir(ctx, r)
	}))
	rpc.Register(s, rpc.MethodReadDir, gate(n, func(ctx context.Context, r *rpc.ReadDirRequest) (*rpc.ReadDirResponse, error) {
		if err := guard(ctx, r.Path); err != nil {
			return nil, err
		}
		resp, err := n.ReadDir(ctx, r)
		if err == nil {
			hideReserved(ctx, r.Path, resp)
		}
		return resp, err
	}))
	rpc.Register(s, rpc.MethodSetAttr, gate(n, func(ctx context.Context, r *rpc.SetAttrRequest) (*rpc.SetAttrResponse, error) {
		if err := guard(ctx, r.Path); err != nil {
			return nil, err
		}
		return n.SetAttr(ctx, r)
	}))
	rpc.Register(s, rpc.MethodUnlink, gate(n, func(ctx context.Context, r *rpc.UnlinkRequest) (*rpc.UnlinkResponse, error) {
		if err := guard(ctx, r.Path); err != nil {
			return nil, err
		}
		return &rpc.UnlinkResponse{}, n.Unlink(ctx, r.Path)
	}))
	rpc.Register(s, rpc.MethodRmdir, gate(n, func(ctx context.Context, r *rpc.RmdirRequest) (*rpc.RmdirResponse, error) {
		if err := guard(ctx, r.Path); err != nil {
			return nil, err
		}
		return &rpc.RmdirResponse{}, n.Rmdir(ctx, r.Path)
	}))
	rpc.Register(s, rpc.MethodRename, gate(n, func(ctx context.Context, r *rpc.RenameRequest) (*rpc.RenameResponse, error) {
		if err := guard(ctx, r.Src, r.Dst); err != nil {
			return nil, err
		}
		return n.RenameWith(ctx, r)
	}))
	rpc.Register(s, rpc.MethodLink, gate(n, func(ctx context.Context, r *rpc.LinkRequest) (*rpc.LinkResponse, error) {
		if err := guard(ctx, r.Old, r.New); err != nil {
			return nil, err
		}
		return n.Link(ctx, r)
	}))
	rpc.Register(s, rpc.MethodHold, gate(n, n.Hold))
	rpc.Register(s, rpc.MethodFilters, gate(n, n.handleFilters))

	rpc.Register(s, methodL3Query, gate(n, n.handleL3Query))
	rpc.Register(s, methodIDBFA, gate(n, n.handleIDBFA))
	rpc.Register(s, methodFilterPush, gate(n, n.handleFilterPush))
	rpc.Register(s, methodHomeLoad, gate(n, n.handleHomeLoad))

	rpc.Register(s, methodLocalCheck, gate(n, shardRPC(n, methodLocalCheck, (*home).handleLocalCheck)))
	rpc.Register(s, methodFilterPull, gate(n, shardRPC(n, methodFilterPull, (*home).handleFilterPull)))
	rpc.Register(s, methodTxnPrepare, gate(n, shardRPC(n, methodTxnPrepare, (*home).handlePrepare)))
	rpc.Register(s, methodTxnCommit, gate(n, shardRPC(n, methodTxnCommit, (*home).handleCommit)))
	rpc.Register(s, methodTxnAbort, gate(n, shardRPC(n, methodTxnAbort, (*home).handleAbort)))
	rpc.Register(s, methodTxnStatus, gate(n, shardRPC(n, methodTxnStatus, (*home).handleTxnStatus)))
	rpc.Register(s, methodHomeCreate, gate(n, shardRPC(n, methodHomeCreate, (*home).handleHomeCreate)))
	rpc.Register(s, methodHomeBatchCreate, gate(n, shardRPC(n, methodHomeBatchCreate, (*home).handleHomeBatchCreate)))
	rpc.Register(s, methodHomeBatchCreateDirs, gate(n, shardRPC(n, methodHomeBatchCreateDirs, (*home).handleHomeBatchCreateDirs)))
	rpc.Register(s, methodHomeFind, gate(n, shardRPC(n, methodHomeFind, (*home).handleHomeFind)))
	rpc.Register(s, methodHomeRemove, gate(n, shardRPC(n, methodHomeRemove, (*home).handleHomeRemove)))
	rpc.Register(s, methodHomeRename, gate(n, shardRPC(n, methodHomeRename, (*home).handleHomeRename)))
	rpc.Register(s, methodHomeLink, gate(n, shardRPC(n, methodHomeLink, (*home).handleHomeLink)))
	rpc.Register(s, methodHomeHold, gate(n, shardRPC(n, methodHomeHold, (*home).holdHere)))
	rpc.Register(s, methodHomeReadDir, gate(n, shardRPC(n, methodHomeReadDir, (*home).handleHomeReadDir)))
	rpc.Register(s, methodHomeSetAttr, gate(n, shardRPC(n, methodHomeSetAttr, (*home).handleHomeSetAttr)))
	rpc.Register(s, methodHomeEntry, gate(n, shardRPC(n, methodHomeEntry, (*home).handleHomeEntry)))
	rpc.Register(s, methodHomeAllocIDs, gate(n, shardRPC(n, methodHomeAllocIDs, (*home).handleAllocIDs)))
}

// errNotReady is returned by handlers that waited Tuning.LeaderWait for
// Start in vain.
var errNotReady = fmt.Errorf("%w: namespace starting", rpc.ErrUnavailable)

// gate wraps a handler so that it waits for Start (at most
// Tuning.LeaderWait: a request that reaches a node still starting is
// served once it serves, not refused; docs/design.md, "Node lifecycle"),
// answers unavailable after Stop, and rejects nil requests.
func gate[Req, Resp any](n *Namespace, fn func(context.Context, *Req) (*Resp, error)) func(context.Context, *Req) (*Resp, error) {
	return func(ctx context.Context, r *Req) (*Resp, error) {
		if err := n.waitReady(ctx); err != nil {
			return nil, err
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

// waitReady waits until Start is done, at most Tuning.LeaderWait.
func (n *Namespace) waitReady(ctx context.Context) error {
	select {
	case <-n.ready:
		return nil
	default:
	}
	t := time.NewTimer(n.tune.LeaderWait)
	defer t.Stop()
	select {
	case <-n.ready:
		return nil
	case <-t.C:
		return errNotReady
	case <-n.ctx.Done():
		return fmt.Errorf("%w: namespace stopped", rpc.ErrUnavailable)
	case <-ctx.Done():
		return fmt.Errorf("%w: %w", errNotReady, ctx.Err())
	}
}

// Start starts the background loops (background.go) that run until Stop.
// The shards this node leads are added with Lead, before or after Start.
func (n *Namespace) Start(ctx context.Context) error {
	n.startMu.Lock()
	defer n.startMu.Unlock()
	if n.started {
		return errors.New("namespace: already started")
	}
	if n.tasks.Closed() {
		return errors.New("namespace: stopped")
	}
	n.started = true
	close(n.ready)
	n.log.Info("namespace started")
	n.tasks.Go(n.filterLoop)
	return nil
}

// Stop ends the background goroutines and every home, and makes handlers
// answer unavailable. It waits for the goroutines; it does not close the
// client or server. Safe to call more than once, and without Start.
func (n *Namespace) Stop(context.Context) error {
	n.tasks.Close()
	n.cancel()
	n.homesMu.Lock()
	homes := n.homes
	n.homes = map[string]*home{}
	for s := range n.pending {
		n.endPending(s)
	}
	n.homesMu.Unlock()
	for _, h := range homes {
		h.stop()
	}
	n.tasks.Wait()
	return nil
}

// Lead makes this node serve shard rep.Shard(), which it leads: it loads
// the shard's transactions (prepared parts, committed records), finishes
// the parts committed before, creates "/" if this is the root shard and
// "/" is missing, and starts the shard's background work. rep must have
// committed a barrier in its current term. ctx bounds the start-up only.
func (n *Namespace) Lead(ctx context.Context, rep Replica) error {
	if n.tasks.Closed() {
		return fmt.Errorf("%w: namespace stopped", rpc.ErrUnavailable)
	}
	h := newHome(n, rep)
	if err := h.start(ctx); err != nil {
		h.stop()
		return fmt.Errorf("namespace: leading shard %s: %w", rep.Shard(), err)
	}
	n.homesMu.Lock()
	old := n.homes[rep.Shard()]
	n.homes[rep.Shard()] = h
	n.endPending(rep.Shard())
	n.homesMu.Unlock()
	if old != nil {
		old.stop()
	}
	n.hints.Delete(rep.Shard())
	n.log.Info("leading shard", "shard", rep.Shard(), "term", rep.Term(), "prepared", h.preparedCount())
	n.signalSync()
	return nil
}

// Unlead stops serving shard (this node no longer leads it). Operations in
// progress on it fail as unavailable; their clients retry at the new
// leader.
func (n *Namespace) Unlead(shard string) {
	n.homesMu.Lock()
	h := n.homes[shard]
	delete(n.homes, shard)
	n.endPending(shard)
	n.homesMu.Unlock()
	if h != nil {
		h.stop()
		n.log.Info("stopped leading shard", "shard", shard)
		n.signalSync()
	}
}

// leads reports whether this node serves shard as its leader.
func (n *Namespace) leads(shard string) bool {
	n.homesMu.RLock()
	defer n.homesMu.RUnlock()
	return n.homes[shard] != nil
}

// home returns the home of shard if this node leads it.
func (n *Namespace) home(shard string) *home {
	n.homesMu.RLock()
	defer n.homesMu.RUnlock()
	return n.homes[shard]
}

// ledHomes returns the homes of the shards this node leads.
func (n *Namespace) ledHomes() []*home {
	n.homesMu.RLock()
	defer n.homesMu.RUnlock()
	out := make([]*home, 0, len(n.homes))
	for _, h := range n.homes {
		out = append(out, h)
	}
	return out
}

// Leads returns the shards this node leads, sorted.
func (n *Namespace) Leads() []string {
	n.homesMu.RLock()
	defer n.homesMu.RUnlock()
	out := make([]string, 0, len(n.homes))
	for id := range n.homes {
		out = append(out, id)
	}
	slices.Sort(out)
	return out
}

// Stats are a node's namespace counters (for /metrics and /v1/status).
type Stats struct {
	// Files and Dirs count the paths of the shards this node leads.
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
	// L3Nanos is the time spent in L3 group multicasts; L4Steps counts
	// the lookups that reached the authoritative step (L4), L4Nanos the
	// time they spent there (max_group_size auto measures D_group and
	// D_net with them).
	L3Nanos, L4Steps, L4Nanos uint64
	// TxnsCommitted, TxnsAborted and TxnsBusy count coordinated
	// transactions (busy: retried because of a conflict).
	TxnsCommitted, TxnsAborted, TxnsBusy uint64
	// LeaderWaits counts the waits of requests for a shard that had no
	// reachable leader (an election or a fail-over under way).
	LeaderWaits uint64
	// MoveWaits counts the waits of requests for a planned leadership
	// move of a shard this node leads, or for its own start of serving a
	// shard whose election it won (handover.go).
	MoveWaits uint64
	// Forwarded counts requests this node sent on to a shard's next
	// leader because its own leadership of the shard moved while they
	// waited, before they did anything.
	Forwarded uint64
	// Prepared is the number of prepared parts held by the shards this
	// node leads; Marks the paths in flux.
	Prepared, Marks int
	// Rekeyed counts inodes re-keyed by directory renames in shards this
	// node led.
	Rekeyed uint64
	// Filter propagation: pushes sent (and failed), received, full pulls
	// sent and served, deltas refused for a version mismatch, bytes sent.
	PushesSent, PushFailures, PushesReceived  uint64
	PullsSent, PullsServed, VersionMismatches uint64
	FilterBytesSent                           uint64
	// L1Members and L2Members count the filter replicas held;
	// ExtraReplicas those of L2 beyond the segment (budget.go).
	L1Members, L2Members int
	ExtraReplicas        int
	LRULen               int
	// DataObjectsDeleted counts the objects of the data store that the
	// garbage collection of the shards this node led deleted (trash.go);
	// TrashPending is the objects the trash of the shards it leads holds
	// (still in their grace period, or waiting for a data store), as of
	// each shard's last round.
	DataObjectsDeleted uint64
	TrashPending       int64
	// Leases of the client metadata cache (leases.go): granted on inodes
	// and on absences; revocations the holder acknowledged, and those
	// that waited for the lease's end instead (a holder gone or slow).
	LeasesGranted, LeasesGrantedAbsent uint64
	LeasesNotified, LeasesExpired      uint64
}

// Stats returns the namespace's counters.
func (n *Namespace) Stats() Stats {
	c := &n.counters
	s := Stats{
		Levels: n.LevelCounts(),
		Hops:   c.hops.Load(), Lookups: c.lookups.Load(),
		NotFound: c.notFound.Load(), Unavailable: c.unavailable.Load(),
		Broadcasts: c.broadcasts.Load(), Multicasts: c.multicasts.Load(),
		L3Nanos: c.l3Nanos.Load(), L4Steps: c.l4Steps.Load(), L4Nanos: c.l4Nanos.Load(),
		TxnsCommitted: c.committed.Load(), TxnsAborted: c.aborted.Load(), TxnsBusy: c.busy.Load(),
		LeaderWaits: c.leaderWaits.Load(),
		MoveWaits:   c.moveWaits.Load(), Forwarded: c.forwarded.Load(),
		Rekeyed:    c.rekeyed.Load(),
		PushesSent: c.pushesSent.Load(), PushFailures: c.pushFails.Load(), PushesReceived: c.pushesRecv.Load(),
		PullsSent: c.pullsSent.Load(), PullsServed: c.pullsServed.Load(), VersionMismatches: c.mismatches.Load(),
		FilterBytesSent:    c.bytesSent.Load(),
		DataObjectsDeleted: c.objectsDeleted.Load(),
		LeasesGranted:      n.leases.stats.granted.Load(), LeasesGrantedAbsent: n.leases.stats.grantedAbsent.Load(),
		LeasesNotified: n.leases.stats.notified.Load(), LeasesExpired: n.leases.stats.expired.Load(),
	}
	for _, h := range n.ledHomes() {
		if cnt, err := h.st.CountInodes(context.Background()); err == nil {
			s.Files, s.Dirs = s.Files+cnt.Files, s.Dirs+cnt.Dirs
		}
		h.rep.Filter(func(f *routing.CountingFilter) { s.FilterBytes += int64(f.SizeBytes()) })
		h.lruMu.Lock()
		s.FilterBytes += int64(h.lru.SizeBytes())
		s.LRULen += h.lru.Len()
		if h.freq != nil {
			s.FilterBytes += int64(h.freq.SketchBytes())
		}
		h.lruMu.Unlock()
		s.Prepared += h.preparedCount()
		s.TrashPending += h.trashPending.Load()
		s.Marks += int(h.txns.flux.count.Load())
	}
	n.arrMu.RLock()
	s.FilterBytes += int64(n.l1.SizeBytes() + n.l2.SizeBytes())
	s.L1Members, s.L2Members = n.l1.Len(), n.l2.Len()
	ps := n.peers.Load()
	for _, id := range n.l2.IDs() {
		if !n.inSegment(ps, id) {
			s.ExtraReplicas++
		}
	}
	n.arrMu.RUnlock()
	return s
}
