package node

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ghba/ghba/node/console"
	"github.com/ghba/ghba/node/internal/tasks"
	"github.com/ghba/ghba/node/namespace"
	"github.com/ghba/ghba/node/raftconf"
	"github.com/ghba/ghba/node/raftmux"
	"github.com/ghba/ghba/node/shard"
	"github.com/ghba/ghba/node/store"
	"github.com/ghba/ghba/routing"
	"github.com/ghba/ghba/rpc"
	"github.com/ghba/ghba/rpc/client"
	"github.com/ghba/ghba/rpc/tlsutil"
	"github.com/hashicorp/serf/serf"
)

// Store meta keys owned by the cluster layer.
const (
	// metaGroup holds the name of the group this node is a member of,
	// written once the group's leader has added it (or it bootstrapped
	// the group); deleted when it leaves.
	metaGroup = "cluster/group"
	// metaRoot holds the id of the node homing "/", once known.
	metaRoot = "cluster/root"
	// metaSwitch holds the switchRecord of a group switch in progress
	// (split or merge): written, with metaGroup deleted, before the old
	// group's Raft is torn down; deleted once the node joined its new
	// group. A node restarted with it wipes its Raft state and joins a
	// group again.
	metaSwitch = "cluster/switch"
	// metaIncarnation holds the incarnation of this data directory: a
	// random id made when the directory is new, part of the Raft server
	// id of the node's shard replicas (shard.ReplicaID).
	metaIncarnation = "node/incarnation"
)

// raftShutdownTimeout bounds the wait for Raft's goroutines at Shutdown.
const raftShutdownTimeout = 10 * time.Second

// defaultAutoGroup names the group a node bootstrapping with group "auto"
// creates.
const defaultAutoGroup = "g1"

var (
	// errNotRunning reports a call on a node that is not started or has
	// shut down.
	errNotRunning = errors.New("node: not running")
	// ErrLeaving reports a request refused because the node is leaving the
	// cluster.
	ErrLeaving = errors.New("node: leaving the cluster")
	// ErrSchemeMismatch stops a node whose group's leader refused its
	// join because the node's routing scheme (config scheme) is not the
	// group's: every node of a group must route the same way.
	ErrSchemeMismatch = errors.New("node: routing scheme differs from the group's")
)

// lifecycle is a Node's state.
type lifecycle int

const (
	lcNew lifecycle = iota
	lcStarting
	lcRunning
	lcStopped
)

// Tuning holds the timers and bounds of a node that operators do not
// configure; tests shorten them (node/nodetest). Zero fields are not
// filled in: start from DefaultTuning.
type Tuning struct {
	// Raft holds the group Raft's timers and snapshot settings (the shard
	// replicas' are in Shard); its ApplyTimeout bounds one Apply, Barrier,
	// AddVoter or RemoveServer.
	Raft raftconf.Tuning

	// FastGossip shortens memberlist's probe and gossip intervals.
	FastGossip bool
	// Serf timers (serf.Config).
	SerfReconnectTimeout, SerfTombstoneTimeout, SerfReapInterval         time.Duration
	SerfReconnectInterval, SerfBroadcastTimeout, SerfLeavePropagateDelay time.Duration

	// ReconcileInterval is the period of the leader's reconcile.
	ReconcileInterval time.Duration
	// SwitchHintTimeout bounds how long a node switching groups waits for
	// its target group to appear before choosing one like any auto node.
	SwitchHintTimeout time.Duration
	// MovedAwayGrace is how long a split's leader does not add a member
	// that it moved away back (its Serf tags may lag).
	MovedAwayGrace time.Duration
	// MergeSettle and MergeQuiet are how long a group must have kept the
	// same members before its leader merges it into another group with
	// which it totals at most M−1, and exactly M, members.
	MergeSettle, MergeQuiet time.Duration
	// GroupSizeInterval is how often the leader of a group with
	// max_group_size auto evaluates the group size model (groupsize.go).
	GroupSizeInterval time.Duration
	// GroupSizeInputs, if set, adjusts the model's inputs after they are
	// measured (tests).
	GroupSizeInputs func(*routing.GroupSizeInputs)
	// OrphanTimeout is how long an auto node waits without a leader in a
	// group whose other voters all moved to one other group before it
	// follows them (checkOrphaned).
	OrphanTimeout time.Duration
	// RefreshInterval is the period of the Directory refresh from Serf.
	RefreshInterval time.Duration
	// ReadyInterval is the period of the readiness check (readyLoop).
	ReadyInterval time.Duration
	// RetryJoinAttempts, RetryJoinMin and RetryJoinMax bound retry_join.
	RetryJoinAttempts          int
	RetryJoinMin, RetryJoinMax time.Duration
	// GroupJoinMin and GroupJoinMax are the back-off of the group join loop.
	GroupJoinMin, GroupJoinMax time.Duration
	// RPCTimeout bounds node-to-node calls of the cluster layer.
	RPCTimeout time.Duration
	// StatusTimeout bounds the fan-out of Members, Groups and the status
	// page.
	StatusTimeout time.Duration
	// BootstrapJoinTimeout bounds the join a bootstrapping node with
	// retry_join tries before deciding it starts a new cluster.
	BootstrapJoinTimeout time.Duration

	// Namespace holds the namespace's timers.
	Namespace namespace.Tuning

	// Shard holds the Raft timers of the shard replicas.
	Shard shard.Tuning
	// ShardInterval is the period of the shard host loop (open and close
	// replicas) and of the group leader's pass telling shards their
	// placement.
	ShardInterval time.Duration
	// ShardConvergeTimeout bounds one convergence pass of a shard leader.
	ShardConvergeTimeout time.Duration
	// ShardCatchUpLag is how many entries behind the leader's commit
	// index a replica may be and still count as caught up (promotion,
	// leadership transfer).
	ShardCatchUpLag uint64
	// ShardMemTable and ShardBlockCache size each replica's Badger store
	// (0: the store's defaults).
	ShardMemTable, ShardBlockCache int64

	// TellSwitchHook, if set (tests only), is asked before each switch
	// request a leader sends; an error fails the request as a lost one
	// would.
	TellSwitchHook func(id string) error
	// MidSwitchHook, if set (tests only), runs during a group switch after
	// the old group's Raft is closed and before its state is wiped.
	MidSwitchHook func(ctx context.Context)
}

// DefaultTuning returns the timers used outside tests.
func DefaultTuning() Tuning {
	return Tuning{
		Raft:                    raftconf.DefaultTuning(),
		SerfReconnectTimeout:    24 * time.Hour,
		SerfTombstoneTimeout:    24 * time.Hour,
		SerfReapInterval:        15 * time.Second,
		SerfReconnectInterval:   30 * time.Second,
		SerfBroadcastTimeout:    5 * time.Second,
		SerfLeavePropagateDelay: time.Second,
		ReconcileInterval:       30 * time.Second,
		SwitchHintTimeout:       time.Minute,
		MovedAwayGrace:          time.Minute,
		MergeSettle:             30 * time.Second,
		GroupSizeInterval:       time.Minute,
		MergeQuiet:              5 * time.Minute,
		OrphanTimeout:           30 * time.Second,
		RefreshInterval:         5 * time.Second,
		ReadyInterval:           250 * time.Millisecond,
		RetryJoinAttempts:       30,
		RetryJoinMin:            time.Second,
		RetryJoinMax:            30 * time.Second,
		GroupJoinMin:            500 * time.Millisecond,
		GroupJoinMax:            10 * time.Second,
		RPCTimeout:              15 * time.Second,
		StatusTimeout:           2 * time.Second,
		BootstrapJoinTimeout:    5 * time.Second,
		Namespace:               namespace.DefaultTuning(),
		Shard:                   shard.DefaultTuning(),
		ShardInterval:           2 * time.Second,
		ShardConvergeTimeout:    time.Minute,
		ShardCatchUpLag:         64,
	}
}

// Option changes how New builds a Node.
type Option func(*Node)

// WithTuning replaces the node's timers (DefaultTuning otherwise).
func WithTuning(t Tuning) Option { return func(n *Node) { n.tune = t } }

// Node is one ghba metadata server: its Badger store, its group's Raft and
// FSM, Serf membership, the RPC server with the namespace and admin
// methods, and the HTTP server with /metrics, /v1/status and a status page.
//
// Create it with New, then Start it; stop it with Shutdown (a crash-like
// stop: the node stays a member and comes back with its data dir) or,
// before that, Leave (drain its files and leave the cluster for good).
type Node struct {
	cfg  Config
	log  *slog.Logger
	tune Tuning

	startedAt time.Time

	mu        sync.Mutex
	state     lifecycle
	groupName string // the node's group ("" while an auto node has none)
	joined    bool   // a member of groupName's Raft and FSM
	serf      *serf.Serf
	stopOnce  sync.Once
	stopErr   error

	store *store.Store
	// incarnation identifies the data directory (metaIncarnation); set at
	// Start before anything reads it.
	incarnation string
	// gr is the current group Raft (with its FSM); replaced when the node
	// switches groups. Read it through curRaft, raftNode and groupFSM.
	gr atomic.Pointer[groupRaft]
	// switchMu serializes replacing gr (a group switch) with closing it
	// (Shutdown); raftClosed is set by the latter.
	switchMu   sync.Mutex
	raftClosed bool

	serfEvents chan serf.Event
	serfDone   chan struct{} // closed after serf.Shutdown: stops the drainer
	tagsMu     sync.Mutex
	lastTags   map[string]string // the tags last gossiped; guarded by tagsMu

	rpcSrv  *rpc.Server
	rpcLn   net.Listener
	client  *client.Client
	httpSrv *http.Server
	httpLn  net.Listener
	console *console.Server // the web console on the HTTP port (http.go)

	ns      *namespace.Namespace
	dir     *directory
	shards  *shardHost
	metrics *nodeMetrics

	raftLn net.Listener          // the raft port
	tls    *tlsutil.Configurator // nil without TLS (tls.go)
	acl    *aclService           // users, tokens, authentication (acl.go)
	mux    *raftmux.Mux          // every Raft group of the node on it

	// dataStores keeps the cluster's data store record and opens the
	// store for the namespace's garbage collection (datastore.go).
	dataStores *dataStoreService

	bgCtx    context.Context // canceled by Shutdown: stops background work
	bgCancel context.CancelFunc
	bg       tasks.Group // background goroutines (closed by Shutdown)
	joins    tasks.Group // serf.Join calls in flight (they end once Serf is shut down)

	reconcileCh chan struct{}  // wakes the leader's reconcile loop
	joinCh      chan struct{}  // wakes the group join loop
	refreshCh   chan struct{}  // wakes the Directory refresher
	memberMu    sync.Mutex     // serializes membership changes on the leader
	reshape     reshapeState   // split/merge bookkeeping; guarded by memberMu
	gsize       groupSizeState // max_group_size auto: the M chosen (groupsize.go)

	// Group switch state, guarded by mu: the switch record being carried
	// out (nil if none), the group being left (still gossiped, with
	// tagMoving, until the node joined its new group) and the hint of the
	// group to join.
	pendingSwitch *switchRecord
	carry         []string // shards a switch takes to the new group, until its FSM has them
	movingFrom    string
	switching     bool      // the Raft is being replaced: the join loop waits
	orphanSince   time.Time // first seen orphaned (checkOrphaned; refresher goroutine only)
	hint          joinHint

	splits, merges, switches atomic.Uint64
	shardLeaderships         atomic.Uint64        // shards this node started serving as leader
	repairs                  atomic.Uint64        // members whose replicas this node (as group leader) repaired
	failedSince              map[string]time.Time // members seen failed, for repair; guarded by memberMu

	bootstrapped bool // this Start bootstrapped a new group
	// deferBootstrap: bootstrapOrJoin decides at Start whether to
	// bootstrap (a bootstrap node with retry_join and no group yet).
	deferBootstrap bool

	leaving atomic.Bool
	// stopping is set while Stop hands leaderships over (stop.go)
	stopping atomic.Bool
	// formats: the version gates (versions.go)
	formats formatState
	ready   readyState // readyLoop's verdict
	// done is closed when the node stops serving for good: Leave has
	// completed (doneErr nil) or a fatal error stopped it (doneErr).
	done     chan struct{}
	doneOnce sync.Once
	doneErr  error
}

// New returns a Node for cfg, which it validates. logger receives every log
// line, each with the node's id (nil discards them). Nothing is opened or
// bound until Start.
func New(cfg Config, logger *slog.Logger, opts ...Option) (*Node, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	n := &Node{
		cfg:         cfg,
		log:         logger.With("node_id", cfg.NodeID),
		tune:        DefaultTuning(),
		serfEvents:  make(chan serf.Event, 256),
		reconcileCh: make(chan struct{}, 1),
		joinCh:      make(chan struct{}, 1),
		refreshCh:   make(chan struct{}, 1),
		done:        make(chan struct{}),
	}
	for _, o := range opts {
		o(n)
	}
	if cfg.MaxGroupSize != GroupSizeAuto && cfg.Replication > int(cfg.MaxGroupSize) {
		n.log.Warn("replication exceeds max_group_size: each shard gets one replica per member of its group at most",
			"replication", cfg.Replication, "max_group_size", cfg.MaxGroupSize)
	}
	n.dir = newDirectory(n)
	n.shards = newShardHost(n)
	n.metrics = newNodeMetrics(n)
	return n, nil
}

// Config returns the node's (validated) configuration.
func (n *Node) Config() Config { return n.cfg }

// ID returns the node id.
func (n *Node) ID() string { return n.cfg.NodeID }

// Directory returns the cluster view the namespace uses.
func (n *Node) Directory() namespace.Directory { return n.dir }

// Done returns a channel closed when the node stops serving for good: it
// has left the cluster (Leave completed, possibly through the Cluster.Leave
// RPC), or a fatal error stopped it (Err). The agent should then call
// Shutdown and exit.
func (n *Node) Done() <-chan struct{} { return n.done }

// Err returns nil while the node runs and after it left the cluster, and
// the fatal error that stopped it otherwise (once Done is closed).
func (n *Node) Err() error {
	select {
	case <-n.done:
		return n.doneErr
	default:
		return nil
	}
}

// finish closes Done with err (nil: the node left).
func (n *Node) finish(err error) {
	n.doneOnce.Do(func() {
		n.doneErr = err
		close(n.done)
	})
}

// fail stops the node after a fatal error: it logs err, makes Err report
// it and shuts the node down in the background (the caller may be one of
// the goroutines Shutdown waits for, such as raft's FSM goroutine).
func (n *Node) fail(err error) {
	n.log.Error("fatal: stopping this node", "err", err)
	n.finish(err)
	go func() { // ends when Shutdown returns (bounded by its timeout)
		ctx, cancel := context.WithTimeout(context.Background(), 2*raftShutdownTimeout)
		defer cancel()
		if err := n.Shutdown(ctx); err != nil {
			n.log.Error("shutdown after a fatal error", "err", err)
		}
	}()
}

// group returns the node's group name ("" while an auto node has none).
func (n *Node) group() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.groupName
}

// isJoined reports whether the node is a member of its group.
func (n *Node) isJoined() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.joined
}

// running reports whether Start completed and Shutdown has not begun.
func (n *Node) running() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.state == lcRunning
}

// addr returns the advertised host:port for port.
func (n *Node) addr(port int) string {
	return net.JoinHostPort(n.cfg.Advertise(), strconv.Itoa(port))
}

// Start opens the store, starts the group's Raft, Serf, the RPC and HTTP
// servers and the namespace, then returns; joining the cluster
// (retry_join) and the group happens in the background. On error
// everything opened is closed again.
func (n *Node) Start(ctx context.Context) (err error) {
	if err := n.beginStart(); err != nil {
		return err
	}
	defer func() {
		if err != nil {
			n.log.Error("start failed", "err", err)
			n.closeAll(context.Background())
			n.setState(lcStopped)
		}
	}()
	if err := n.openStore(ctx); err != nil {
		return err
	}
	if err := n.bindPorts(); err != nil {
		return err
	}
	if err := n.startRaft(ctx); err != nil {
		return err
	}
	n.setupRPC()
	if err := n.openNamespace(ctx); err != nil {
		return err
	}
	if err := n.joinCluster(ctx); err != nil {
		return err
	}
	if err := n.serve(); err != nil {
		return err
	}
	// The namespace runs until Shutdown; Start's ctx only bounds its
	// start-up.
	if err := n.ns.Start(ctx); err != nil {
		return fmt.Errorf("node: namespace: %w", err)
	}
	n.startLoops()
	n.setState(lcRunning)
	n.log.Info("node started", "group", n.group(), "rpc", n.addr(n.cfg.Ports.RPC),
		"raft", n.addr(n.cfg.Ports.Raft), "serf", n.addr(n.cfg.Ports.Serf), "http", n.addr(n.cfg.Ports.HTTP),
		"data_dir", n.cfg.DataDir)
	return nil
}

// beginStart moves a new node to starting (Start is called once) and
// creates the context of its background tasks.
func (n *Node) beginStart() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.state != lcNew {
		return fmt.Errorf("node: Start called twice")
	}
	n.state = lcStarting
	n.startedAt = time.Now()
	n.bgCtx, n.bgCancel = context.WithCancel(context.Background())
	return nil
}

// setState sets the node's lifecycle state.
func (n *Node) setState(s lifecycle) {
	n.mu.Lock()
	n.state = s
	n.mu.Unlock()
}

// openStore creates the data directory, opens the node's own store (which
// must not hold paths: see below) and loads the cluster layer's records.
func (n *Node) openStore(ctx context.Context) error {
	if err := os.MkdirAll(n.cfg.DataDir, 0o755); err != nil {
		return fmt.Errorf("node: data_dir: %w", err)
	}
	st, err := store.Open(ctx, store.Options{Dir: filepath.Join(n.cfg.DataDir, "meta"), Logger: n.log})
	if err != nil {
		return fmt.Errorf("node: %w", err)
	}
	n.store = st
	if c, err := st.CountInodes(ctx); err != nil {
		return fmt.Errorf("node: %w", err)
	} else if c.Total() > 0 {
		// Before replicated shards, a node kept its paths in this store.
		return fmt.Errorf("%w: data_dir %s holds %d paths in the single-copy format of a build before replicated shards; "+
			"this build cannot convert them: start this node with a new data_dir in a new cluster", ErrConfig, n.cfg.DataDir, c.Total())
	}
	return n.loadMeta(ctx)
}

// bindPorts loads the TLS configuration and binds the TCP listeners (the
// RPC and HTTP ports, and the raft port with its multiplexer) first, so
// that a port conflict fails fast.
func (n *Node) bindPorts() (err error) {
	if n.tls, err = tlsutil.New(n.cfg.TLS, true); err != nil {
		return fmt.Errorf("node: %w", err)
	}
	if n.rpcLn, err = n.listen(n.cfg.Ports.RPC); err != nil {
		return fmt.Errorf("node: ports.rpc: %w", err)
	}
	if n.httpLn, err = n.listen(n.cfg.Ports.HTTP); err != nil {
		return fmt.Errorf("node: ports.http: %w", err)
	}
	return n.startRaftMux()
}

// setupRPC creates the ACL service, the node's RPC client and its RPC
// server with the admin, ACL and sources methods (the namespace's come
// with the namespace).
func (n *Node) setupRPC() {
	n.acl = newACLService(n.cfg.ACL, func() *namespace.Namespace { return n.ns }, n.log.With("component", "acl"))
	switch {
	case !n.cfg.ACL.Enabled:
		n.log.Warn("ACLs are off: every client may read and change everything (config acl.enabled)")
	case n.cfg.ACL.ServerToken == "":
		n.log.Warn("acl.server_token is not set: the node-to-node methods are not authenticated")
	}
	n.client = client.New(client.Options{Logger: n.log.With("component", "rpc-client"), HomeCacheSize: -1, Timeout: n.tune.RPCTimeout,
		Dial: n.dialer(), Token: n.cfg.ACL.ServerToken})
	so := n.cfg.Limits.serverOptions()
	so.Logger, so.Authenticate = n.log.With("component", "rpc"), n.acl.authenticate
	n.rpcSrv = rpc.NewServer(so)
	n.registerAdmin()
	n.acl.register(n.rpcSrv)
	newSourceService(func() *namespace.Namespace { return n.ns }, n.serfMembers, n.log.With("component", "sources")).register(n.rpcSrv)
	n.dataStores = newDataStoreService(func() *namespace.Namespace { return n.ns }, n.log.With("component", "datastore"))
	n.dataStores.register(n.rpcSrv)
}

// openNamespace creates the namespace and opens the shard replicas this
// node hosted before a restart: they take part in their shards' elections
// at once, before the group's FSM is replayed.
func (n *Node) openNamespace(ctx context.Context) (err error) {
	if n.ns, err = n.newNamespace(); err != nil {
		return fmt.Errorf("node: %w", err)
	}
	return n.shards.openExisting(ctx)
}

// joinCluster starts Serf; a bootstrapping node with retry_join then
// joins or starts the cluster, and a node that bootstrapped the cluster
// claims its root directory.
func (n *Node) joinCluster(ctx context.Context) error {
	if err := n.startSerf(); err != nil {
		return err
	}
	if n.deferBootstrap {
		if err := n.bootstrapOrJoin(ctx); err != nil {
			return err
		}
	}
	if n.bootstrapped && n.dir.rootHint() == "" {
		return n.claimRoot(ctx)
	}
	return nil
}

// serve starts the RPC server, the console and the HTTP server.
func (n *Node) serve() (err error) {
	n.bg.Go(func() {
		if err := n.rpcSrv.Serve(n.bgCtx, n.rpcLn); err != nil && !errors.Is(err, rpc.ErrServerClosed) && !errors.Is(err, context.Canceled) {
			n.log.Error("rpc server stopped", "err", err)
		}
	})
	if n.console, err = n.newConsole(); err != nil {
		return err
	}
	n.bg.Go(func() { n.console.Run(n.bgCtx) })
	n.httpSrv = n.newHTTPServer()
	n.bg.Go(func() {
		if err := n.httpSrv.Serve(n.httpLn); err != nil && !errors.Is(err, http.ErrServerClosed) {
			n.log.Error("http server stopped", "err", err)
		}
	})
	return nil
}

// startLoops starts the group Raft's leader loop and the node's
// background loops, and refreshes the directory from Serf once.
func (n *Node) startLoops() {
	n.startLeaderLoop(n.curRaft())
	n.bg.Go(n.refresher)
	n.bg.Go(n.shards.loop)
	n.bg.Go(n.groupJoinLoop)
	n.bg.Go(n.readyLoop)
	if len(n.cfg.RetryJoin) > 0 {
		n.bg.Go(func() { n.retryJoin(n.bgCtx) })
	}
	n.dir.refresh()
}

// loadMeta reads the cluster layer's records from the store and checks
// them against the configuration.
func (n *Node) loadMeta(ctx context.Context) error {
	if err := n.loadIncarnation(ctx); err != nil {
		return err
	}
	if err := n.loadFormats(ctx); err != nil {
		return err
	}
	g, err := n.getMeta(ctx, metaGroup)
	if err != nil {
		return err
	}
	root, err := n.getMeta(ctx, metaRoot)
	if err != nil {
		return err
	}
	sw, err := n.getMeta(ctx, metaSwitch)
	if err != nil {
		return err
	}
	if sw != "" {
		rec, err := parseSwitchRecord(sw)
		if err != nil {
			n.log.Warn("ignoring a bad group switch record", "record", sw, "err", err)
			rec = &switchRecord{Reason: "unknown"}
		}
		// Killed during a switch: the old group's Raft state is wiped by
		// startRaft and the node joins a group again as an auto node.
		g = ""
		n.mu.Lock()
		n.pendingSwitch, n.movingFrom, n.carry = rec, rec.From, rec.Shards
		if !rec.Bootstrap && rec.Via != n.cfg.NodeID {
			n.hint = joinHint{group: rec.Group, via: rec.Via, from: rec.From, until: time.Now().Add(n.tune.SwitchHintTimeout)}
		}
		n.mu.Unlock()
	}
	if r, ok := parseRoot(root); ok {
		n.dir.setRoot(r)
	} else if root != "" {
		n.log.Warn("ignoring a bad root home record", "record", root)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	switch {
	case g != "" && n.cfg.Group != GroupAuto && g != n.cfg.Group:
		return fmt.Errorf("%w: group: this node is a member of group %q (recorded in %s), not %q; leave the cluster first",
			ErrConfig, g, n.cfg.DataDir, n.cfg.Group)
	case g != "":
		n.groupName, n.joined = g, true
	case n.cfg.Group != GroupAuto:
		n.groupName = n.cfg.Group
	}
	return nil
}

// loadIncarnation reads the data directory's incarnation, making one when
// the directory is new (or was wiped).
func (n *Node) loadIncarnation(ctx context.Context) error {
	inc, err := n.getMeta(ctx, metaIncarnation)
	if err != nil {
		return err
	}
	if inc == "" {
		var b [6]byte
		if _, err := rand.Read(b[:]); err != nil {
			return fmt.Errorf("node: incarnation: %w", err)
		}
		inc = hex.EncodeToString(b[:])
		var batch store.Batch
		batch.SetMeta(metaIncarnation, []byte(inc))
		if err := n.store.Commit(ctx, &batch); err != nil {
			return fmt.Errorf("node: recording the incarnation: %w", err)
		}
		n.log.Info("new data directory", "incarnation", inc)
	}
	n.incarnation = inc
	return nil
}

// replicaID is the Raft server id of this node's shard replicas.
func (n *Node) replicaID() string { return shard.ReplicaID(n.cfg.NodeID, n.incarnation) }

// claimRoot decides, on a node that just bootstrapped a new group, whose
// shard homes "/": the existing cluster's (learned from Serf tags) if
// bootstrapOrJoin found one; otherwise this node's, the first of a new
// cluster. The namespace creates "/" at Start if it is its home.
func (n *Node) claimRoot(ctx context.Context) error {
	if root := n.dir.rootHint(); root != "" {
		n.log.Info("joined an existing cluster; its root home stays", "root", root)
		return nil
	}
	if err := n.setRootHome(ctx, rootRec{id: n.cfg.NodeID, epoch: 1}); err != nil {
		return err
	}
	n.log.Info("this node homes the root directory of a new cluster")
	return nil
}

// setRootHome adopts, records and gossips r as the root home.
func (n *Node) setRootHome(ctx context.Context, r rootRec) error {
	n.dir.setRoot(r)
	if err := n.store.SetMeta(ctx, metaRoot, []byte(r.String())); err != nil {
		return fmt.Errorf("node: recording root home: %w", err)
	}
	if err := n.updateTags(); err != nil {
		return err
	}
	n.dir.refresh()
	return nil
}

// getMeta returns a meta record of the store, "" if absent.
func (n *Node) getMeta(ctx context.Context, key string) (string, error) {
	b, err := n.store.GetMeta(ctx, key)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return "", nil
	case err != nil:
		return "", fmt.Errorf("node: reading %s: %w", key, err)
	}
	return string(b), nil
}

// setJoined records that the node is a member of group g.
//
// It also ends a group switch: the switch record is deleted in the same
// commit, and the node stops gossiping the group it left.
func (n *Node) setJoined(ctx context.Context, g string) error {
	var b store.Batch
	b.SetMeta(metaGroup, []byte(g))
	b.DeleteMeta(metaSwitch)
	if err := n.store.Commit(ctx, &b); err != nil {
		return fmt.Errorf("node: recording group: %w", err)
	}
	n.mu.Lock()
	changed := n.groupName != g || !n.joined || n.movingFrom != ""
	if n.pendingSwitch != nil {
		n.log.Info("group switch done", "from", n.pendingSwitch.From, "group", g, "reason", n.pendingSwitch.Reason)
	}
	n.groupName, n.joined = g, true
	n.pendingSwitch, n.movingFrom, n.hint = nil, "", joinHint{}
	n.mu.Unlock()
	if changed {
		if err := n.updateTags(); err != nil {
			n.log.Warn("updating serf tags", "err", err)
		}
		n.dir.refresh()
	}
	return nil
}

// Shutdown stops the node: the RPC server stops accepting calls and
// finishes those in progress, then the namespace, the HTTP server, Raft,
// Serf (without leaving: to the cluster this looks like a crash, and the
// node rejoins when restarted with its data dir) and the store are closed.
// If ctx ends first the remaining steps are done abruptly. Shutdown is
// safe to call more than once and on a node that never started.
func (n *Node) Shutdown(ctx context.Context) error {
	n.stopOnce.Do(func() {
		n.mu.Lock()
		was := n.state
		n.state = lcStopped
		n.mu.Unlock()
		if was == lcNew || was == lcStopped { // never started, or Start failed and cleaned up
			return
		}
		n.log.Info("shutting down")
		n.stopErr = n.closeAll(ctx)
		n.log.Info("shut down", "err", n.stopErr)
	})
	return n.stopErr
}

// closeAll closes whatever Start opened, in dependency order.
func (n *Node) closeAll(ctx context.Context) error {
	var errs []error
	if n.rpcSrv != nil {
		if err := n.rpcSrv.Shutdown(ctx); err != nil {
			errs = append(errs, fmt.Errorf("rpc server: %w", err))
		}
	} else if n.rpcLn != nil {
		n.rpcLn.Close()
	}
	if n.ns != nil {
		if err := n.ns.Stop(ctx); err != nil {
			errs = append(errs, fmt.Errorf("namespace: %w", err))
		}
	}
	if n.dataStores != nil {
		n.dataStores.close()
	}
	if n.httpSrv != nil {
		if err := n.httpSrv.Shutdown(ctx); err != nil {
			n.httpSrv.Close()
			errs = append(errs, fmt.Errorf("http server: %w", err))
		}
	} else if n.httpLn != nil {
		n.httpLn.Close()
	}
	if n.console != nil {
		if err := n.console.Close(); err != nil {
			errs = append(errs, fmt.Errorf("console: %w", err))
		}
	}
	n.bg.Close()
	if n.bgCancel != nil {
		n.bgCancel()
	}
	// Bounded: a raft goroutine that never ends must not hang the process;
	// the rest is closed anyway (see groupRaft.close). A group switch in
	// progress finishes its step first and then sees raftClosed.
	n.shards.closeAll(ctx)
	n.switchMu.Lock()
	n.raftClosed = true
	if gr := n.curRaft(); gr != nil {
		if err := gr.close(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	n.switchMu.Unlock()
	if s := n.serfAgent(); s != nil {
		if err := s.Shutdown(); err != nil {
			errs = append(errs, fmt.Errorf("serf: %w", err))
		}
		close(n.serfDone)
	}
	n.bg.Wait()
	n.joins.Wait() // serf.Join calls, which end once Serf is shut down
	if n.mux != nil {
		if err := n.mux.Close(); err != nil {
			errs = append(errs, fmt.Errorf("raft port: %w", err))
		}
	} else if n.raftLn != nil {
		n.raftLn.Close()
	}
	if n.client != nil {
		n.client.Close()
	}
	if n.store != nil {
		if err := n.store.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	n.dir.closeSubscribers()
	return errors.Join(errs...)
}

// Leave leaves the cluster for good: the node stops taking new homes, its
// group's FSM gives the shards it owns to other members and places its
// shard replicas elsewhere, and it waits until the shards' leaders have
// moved every replica off it (nothing is lost, nothing is copied file by
// file); then it hands its filter replicas to its group-mates and leaves
// its group's Raft (transferring leadership first if it leads), then
// Serf. Afterwards Done is closed; call
// Shutdown to stop the process. On error before the node left Raft, it
// stays a member and Leave may be retried.
func (n *Node) Leave(ctx context.Context) (*rpc.LeaveResponse, error) {
	if !n.running() {
		return nil, errNotRunning
	}
	if !n.leaving.CompareAndSwap(false, true) {
		return nil, fmt.Errorf("leave: %w (already in progress)", ErrLeaving)
	}
	n.log.Info("leaving the cluster")
	n.metrics.leaves.Inc()
	if err := n.updateTags(); err != nil {
		n.log.Warn("updating serf tags", "err", err)
	}
	n.dir.refresh()
	resp := &rpc.LeaveResponse{}
	abort := func(err error) (*rpc.LeaveResponse, error) {
		n.leaving.Store(false)
		if terr := n.updateTags(); terr != nil {
			n.log.Warn("updating serf tags", "err", terr)
		}
		n.dir.refresh()
		n.log.Error("leave failed; still a member", "err", err)
		return nil, err
	}

	if n.isJoined() {
		resp.HandedShards = n.groupFSM().OwnedBy(n.cfg.NodeID)
		moved, err := n.moveShardReplicasAway(ctx)
		if err != nil {
			return abort(fmt.Errorf("leave: moving shard replicas away: %w", err))
		}
		resp.MovedShardReplicas = moved
		n.log.Info("shard replicas moved away", "replicas", moved, "handed_shards", resp.HandedShards)
	}

	if n.isJoined() {
		resp.HandedReplicas = n.groupFSM().Load(n.cfg.NodeID)
		if err := n.leaveGroup(ctx); err != nil {
			return abort(fmt.Errorf("leave: leaving group %q: %w", n.group(), err))
		}
		var b store.Batch
		b.DeleteMeta(metaGroup)
		if err := n.store.Commit(ctx, &b); err != nil {
			n.log.Warn("forgetting the group", "err", err)
		}
		n.mu.Lock()
		n.joined = false
		n.mu.Unlock()
		if err := n.updateTags(); err != nil { // gossip: no longer in the group
			n.log.Warn("updating serf tags", "err", err)
		}
	}

	if s := n.serfAgent(); s != nil {
		if err := s.Leave(); err != nil {
			n.log.Warn("serf leave", "err", err)
		}
	}
	n.log.Info("left the cluster", "moved_shard_replicas", resp.MovedShardReplicas, "handed_replicas", resp.HandedReplicas)
	n.finish(nil)
	return resp, nil
}

// Status returns the node's status (the body of /v1/status and of the
// Cluster.Status RPC).
func (n *Node) Status() *rpc.StatusResponse {
	st := &rpc.StatusResponse{
		NodeID:    n.cfg.NodeID,
		Group:     n.group(),
		RaftRole:  n.raftRole(),
		Leader:    n.leaderID(),
		StartedAt: n.startedAt.UnixNano(),
		Version:   buildVersion(),
	}
	if ok, why := n.serving(); ok {
		st.Status = statusAlive
	} else {
		st.Status, st.NotServing = statusStarting, why
	}
	if n.leaving.Load() {
		st.Status = statusLeaving
	}
	if n.stopping.Load() {
		st.Status, st.NotServing = statusStopping, "the node is stopping"
	}
	st.Settled, st.Unsettled = n.settled()
	st.Replicas = n.shards.replicaStatus(context.Background())
	for _, r := range st.Replicas {
		if r.Leading {
			st.Files += r.Files
		}
	}
	st.ShardLeaderships, st.ReplicaRepairs = n.shardLeaderships.Load(), n.repairs.Load()
	st.Scheme = n.cfg.Scheme
	st.MaxGroupSize, st.GroupSize = n.groupSizeStatus()
	st.GroupSizeAuto = n.autoGroupSize()
	if f := n.groupFSM(); f != nil && n.isJoined() {
		st.ReplicasHeld = f.Load(n.cfg.NodeID)
		st.ReplicasMigrated = f.ReplicasMigrated()
	}
	st.Splits, st.Merges, st.GroupSwitches = n.splits.Load(), n.merges.Load(), n.switches.Load()
	if n.ns != nil {
		s := n.ns.Stats()
		st.FilterBytes, st.Levels, st.Hops = s.FilterBytes, s.Levels, s.Hops
		st.L2Members, st.Multicasts, st.Broadcasts = s.L2Members, s.Multicasts, s.Broadcasts
		st.ExtraReplicas = s.ExtraReplicas
		st.Routing = n.ns.Routing()
	}
	st.FilterMemoryBudget = int64(n.cfg.FilterMemoryMB) << 20
	return st
}

// buildVersion returns the module version of the running binary; for a
// development build ("(devel)"), its VCS revision ("devel+1a2b3c4d5e6f",
// "-dirty" with uncommitted changes) when the build recorded one.
func buildVersion() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	if bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	rev, dirty := "", false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev == "" {
		return cmp.Or(bi.Main.Version, "(devel)")
	}
	v := "devel+" + rev[:min(12, len(rev))]
	if dirty {
		v += "-dirty"
	}
	return v
}

// newNamespace builds the namespace on the node's store, Directory, client
// and RPC server (it registers its methods there).
func (n *Node) newNamespace() (*namespace.Namespace, error) {
	ns, err := namespace.New(namespace.Options{
		NodeID:       n.cfg.NodeID,
		Client:       n.client,
		Directory:    n.dir,
		Routing:      n.cfg.Routing(),
		Placement:    n.cfg.Placement,
		SpreadAfter:  n.cfg.PlacementSpread,
		Scheme:       n.cfg.Scheme,
		FilterMemory: int64(n.cfg.FilterMemoryMB) << 20,
		CacheLease:   n.cfg.CacheLease,
		DataStore:    n.dataStores.store,
		DataGCGrace:  n.cfg.DataGCGrace,
		Logger:       n.log,
		Tuning:       n.tune.Namespace,
	})
	if err != nil {
		return nil, err
	}
	ns.RegisterRPC(n.rpcSrv)
	return ns, nil
}
