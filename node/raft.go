package node

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"

	"github.com/ghba/ghba/fsm"
	"github.com/ghba/ghba/node/internal/tasks"
	"github.com/ghba/ghba/node/raftconf"
	"github.com/ghba/ghba/node/raftmux"
	"github.com/ghba/ghba/node/shard"
	"github.com/ghba/ghba/routing"
	"github.com/ghba/ghba/rpc"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
)

// groupRaft is one incarnation of the node's group Raft: the Raft, its
// FSM, transport and log store, and the leader loop observing it. A node
// that switches groups (split, merge) closes its groupRaft and opens a new
// one; Node.gr always points at the current one.
type groupRaft struct {
	raft    *raft.Raft
	fsm     *fsm.FSM
	trans   *raftmux.Transport
	bolt    *raftboltdb.BoltStore
	notify  chan bool     // raft's NotifyCh, read by the leader loop
	stopped chan struct{} // closed after raft.Shutdown: stops the leader loop
	loops   tasks.Group   // the leader loop
	ready   atomic.Bool   // leader established (Barrier done, FSM ready)
	// existing reports that the raft directory held state when opened.
	existing bool
	// onDisk is the last index of the log as opened: until the FSM has
	// applied it, the group's state (its members) may be older than what
	// this node knew before it stopped.
	onDisk uint64
	closed bool // guarded by Node.switchMu
	// unclean is set when raft.Shutdown did not finish in time: its
	// goroutines may still touch the raft directory, which must then not
	// be wiped and reused by this process.
	unclean bool // guarded by Node.switchMu
	// leaving is the group this Raft served once the node began switching
	// away from it (beginSwitch), "" before: see groupRaftScope.
	leaving string // guarded by Node.mu
}

// errRaftStuck reports a group Raft that did not shut down in time.
var errRaftStuck = errors.New("the old group raft did not shut down")

// groupLayerID is the raft multiplexer's id of the group Raft's traffic.
const groupLayerID = "group"

// groupRaftScope is the scope (raftmux.Scope) of gr's connections, so that
// the traffic of one incarnation of a group never reaches the Raft of
// another (docs/design.md, "One port"):
//
//   - gr dials naming the node's group or, while the node joins one, the
//     group it was sent to ("" while it has neither: a new node in group
//     auto); once the node began switching away from gr's group
//     (beginSwitch), gr dials naming that group until it is closed, so the
//     peers of the group the node moves to refuse the old Raft's
//     heartbeats, entries and votes. A connection naming the new group
//     would let the old group's leader append its log to the node's fresh
//     Raft, whose entries the new group's leader would then take for its
//     own where the terms happen to match.
//   - gr accepts a connection naming the node's group; or, while the node
//     has none (it joins one), any group but the one it is leaving; and
//     none once the node began switching away from gr's group.
func (n *Node) groupRaftScope(gr *groupRaft) raftmux.Scope {
	return raftmux.Scope{
		Current: func() string {
			n.mu.Lock()
			defer n.mu.Unlock()
			return cmp.Or(gr.leaving, n.groupName, n.hint.group)
		},
		Accepts: func(s string) bool {
			n.mu.Lock()
			defer n.mu.Unlock()
			switch {
			case gr.leaving != "":
				return false
			case n.groupName != "":
				return s == n.groupName
			}
			return s != n.movingFrom
		},
	}
}

// startRaftMux binds the raft port and starts the multiplexer every Raft
// group of the node (its group Raft, its shard replicas) talks through.
func (n *Node) startRaftMux() error {
	ln, err := n.listen(n.cfg.Ports.Raft)
	if err != nil {
		return fmt.Errorf("node: ports.raft: %w", err)
	}
	n.raftLn = ln
	adv, err := resolveTCP(n.addr(n.cfg.Ports.Raft))
	if err != nil {
		return fmt.Errorf("node: raft advertise address: %w", err)
	}
	n.mux = raftmux.New(ln, adv, raftmux.Options{Logger: n.log.With("component", "raftmux"), Dial: n.dialer()})
	n.bg.Go(func() {
		if err := n.mux.Serve(n.bgCtx); err != nil && n.bgCtx.Err() == nil {
			n.log.Error("raft port stopped", "err", err)
		}
	})
	return nil
}

// raftDir is the directory of the group Raft's state.
func (n *Node) raftDir() string { return filepath.Join(n.cfg.DataDir, "raft") }

// openGroupRaft opens a group Raft under data_dir/raft: a raft-boltdb log
// and stable store, a file snapshot store and a TCP transport on
// bind_addr:ports.raft advertising the advertise address, with a fresh
// FSM. It starts nothing else (see startLeaderLoop).
func (n *Node) openGroupRaft() (_ *groupRaft, err error) {
	dir := n.raftDir()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("raft: %w", err)
	}
	hl := newHCLogAdapter(n.log, "raft")
	// gr is not the named result: a failed return sets that to nil
	// before the deferred clean-up reads it.
	gr := &groupRaft{notify: make(chan bool, 16), stopped: make(chan struct{})}
	defer func() {
		if err != nil {
			if gr.trans != nil {
				gr.trans.Close()
			}
			if gr.bolt != nil {
				gr.bolt.Close()
			}
		}
	}()

	bolt, err := shard.OpenLogStore(filepath.Join(dir, "raft.db"))
	if err != nil {
		return nil, fmt.Errorf("raft: log store: %w", err)
	}
	gr.bolt = bolt
	snaps, err := raftconf.SnapshotStore(dir, hl)
	if err != nil {
		return nil, fmt.Errorf("raft: snapshot store: %w", err)
	}
	// MaxRPCsInFlight 1 (raftmux.NewTransport) turns raft's pipelined
	// replication off. With pipelining (raft v1.7.3, also v1.8.0), a
	// pipeline whose decoder stopped (a follower refused an
	// AppendEntries, or answered with a newer term) can block the
	// replication goroutine forever on its unbuffered channels, and
	// raft.Shutdown then never returns.
	layer, err := n.mux.ScopedLayer(groupLayerID, n.groupRaftScope(gr))
	if err != nil {
		return nil, fmt.Errorf("raft: %w", err)
	}
	gr.trans = raftmux.NewTransport(layer, hl.Named("transport"))

	conf := raftconf.Config(n.tune.Raft, raftconf.Options{
		LocalID: n.cfg.NodeID, Logger: hl, Notify: gr.notify,
		// A node removed from the configuration keeps its Raft running:
		// if it is still alive (a stale removal), the leader's reconcile
		// adds it back. A leaving node shuts down anyway.
		ShutdownOnRemove: false,
		// The group FSM is in memory only: it is rebuilt from the newest
		// snapshot and the log at every start.
		NoSnapshotRestoreOnStart: false,
	})

	gr.fsm = fsm.New(fsm.Options{OnChange: n.onFSMChange, OnFatal: n.onFSMFatal, OnSkip: n.onFSMSkip})

	if gr.existing, err = raft.HasExistingState(bolt, bolt, snaps); err != nil {
		return nil, fmt.Errorf("raft: reading state: %w", err)
	}
	if gr.onDisk, err = bolt.LastIndex(); err != nil {
		return nil, fmt.Errorf("raft: reading the log: %w", err)
	}
	r, err := raft.NewRaft(conf, gr.fsm, bolt, bolt, snaps, gr.trans)
	if err != nil {
		return nil, fmt.Errorf("raft: %w", err)
	}
	gr.raft = r
	return gr, nil
}

// bootstrapSelf makes gr's Raft a new group whose only voter is this node.
func (n *Node) bootstrapSelf(gr *groupRaft) error {
	boot := raft.Configuration{Servers: []raft.Server{{
		Suffrage: raft.Voter, ID: raft.ServerID(n.cfg.NodeID), Address: gr.trans.LocalAddr(),
	}}}
	if err := gr.raft.BootstrapCluster(boot).Error(); err != nil && !errors.Is(err, raft.ErrCantBootstrap) {
		return fmt.Errorf("raft: bootstrap: %w", err)
	}
	return nil
}

// close shuts gr down: Raft (bounded by raftShutdownTimeout, whatever ctx
// says, so that a drained ctx does not cut it short), the leader loop, the
// transport and the log store. It must be called with Node.switchMu held.
func (gr *groupRaft) close(ctx context.Context) error {
	if gr.closed {
		return nil
	}
	gr.closed = true
	var errs []error
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), raftShutdownTimeout)
	if err := waitFuture(rctx, gr.raft.Shutdown()); err != nil {
		gr.unclean = true
		errs = append(errs, fmt.Errorf("raft shutdown: %w: %w", errRaftStuck, err))
	}
	cancel()
	close(gr.stopped)
	gr.loops.Close()
	gr.loops.Wait()
	gr.ready.Store(false)
	gr.trans.CloseStreams() // pooled outgoing connections: the peers' handlers end
	if err := gr.trans.Close(); err != nil {
		errs = append(errs, fmt.Errorf("raft transport: %w", err))
	}
	if err := gr.bolt.Close(); err != nil {
		errs = append(errs, fmt.Errorf("raft log store: %w", err))
	}
	return errors.Join(errs...)
}

// curRaft returns the current group Raft, nil before Start.
func (n *Node) curRaft() *groupRaft { return n.gr.Load() }

// raftNode returns the current group's Raft, nil before Start.
func (n *Node) raftNode() *raft.Raft {
	if gr := n.gr.Load(); gr != nil {
		return gr.raft
	}
	return nil
}

// groupFSM returns the FSM of the node's current group Raft (nil before
// Start). The group can change at runtime (split and merge replace the
// Raft and its FSM), so callers fetch it on every use instead of keeping
// it.
func (n *Node) groupFSM() *fsm.FSM {
	if gr := n.gr.Load(); gr != nil {
		return gr.fsm
	}
	return nil
}

// groupCaughtUp reports whether the group FSM has applied at least the log
// this node had on disk when it opened the group's Raft (or, if a new
// leader cut an uncommitted tail of it, all of the log it has now): its
// view of the group's members is then no older than before a restart.
func (n *Node) groupCaughtUp() bool {
	gr := n.gr.Load()
	return gr != nil && gr.fsm.Bootstrapped() && gr.raft.AppliedIndex() >= min(gr.onDisk, gr.raft.LastIndex())
}

// startRaft opens the group's Raft at Start. A node with bootstrap set that
// never was a member of a group (no group recorded, no Raft state, no
// group switch pending) bootstraps a new group of itself. A switch that a
// crash interrupted leaves Raft state of the group it was leaving: that is
// wiped first, so the node never comes back into the old group's FSM.
func (n *Node) startRaft(ctx context.Context) error {
	n.mu.Lock()
	pending := n.pendingSwitch
	n.mu.Unlock()
	if pending != nil {
		if err := os.RemoveAll(n.raftDir()); err != nil {
			return fmt.Errorf("raft: wiping the old group's state: %w", err)
		}
		n.log.Info("resuming an interrupted group switch: old raft state wiped",
			"from", pending.From, "to", pending.Group, "reason", pending.Reason)
	}
	gr, err := n.openGroupRaft()
	if err != nil {
		return err
	}
	n.gr.Store(gr)

	switch {
	case n.cfg.Bootstrap && !gr.existing && !n.isJoined() && pending == nil && len(n.cfg.RetryJoin) > 0:
		n.deferBootstrap = true // bootstrapOrJoin decides once Serf is up
	case n.cfg.Bootstrap && !gr.existing && !n.isJoined() && pending == nil:
		return n.bootstrapGroup(ctx, gr)
	case n.cfg.Bootstrap:
		n.log.Debug("raft state or group membership exists; not bootstrapping")
	}
	return nil
}

// bootstrapOrJoin decides, for a node configured to bootstrap whose data
// directory holds no group (its first start, or its data directory was
// lost) and that has retry_join: if retry_join reaches a cluster in which
// the node's group exists, the node joins that group like any other node
// (bootstrapping would found a second group of the same name); otherwise
// it bootstraps the group.
func (n *Node) bootstrapOrJoin(ctx context.Context) error {
	jctx, cancel := context.WithTimeout(ctx, n.tune.BootstrapJoinTimeout)
	k, err := n.Join(jctx, n.cfg.RetryJoin)
	cancel()
	if err != nil || k == 0 {
		n.log.Info("no existing cluster answered; bootstrapping", "retry_join", n.cfg.RetryJoin, "err", err)
		return n.bootstrapGroup(ctx, n.curRaft())
	}
	n.dir.refresh()
	g := cmp.Or(n.group(), defaultAutoGroup)
	for _, p := range n.dir.Peers() {
		if p.Group == g && p.ID != n.cfg.NodeID {
			n.log.Warn("configured to bootstrap, but the cluster has group "+g+" already (a lost data directory?): joining it",
				"group", g, "member", p.ID)
			return nil
		}
	}
	return n.bootstrapGroup(ctx, n.curRaft())
}

// bootstrapGroup makes gr a new group of this node alone.
func (n *Node) bootstrapGroup(ctx context.Context, gr *groupRaft) error {
	g := cmp.Or(n.group(), defaultAutoGroup)
	n.mu.Lock()
	n.groupName = g
	n.mu.Unlock()
	if err := n.bootstrapSelf(gr); err != nil {
		return err
	}
	// The group exists once the leader's establish applies its Bootstrap
	// command; this node is its first member.
	if err := n.setJoined(ctx, g); err != nil {
		return err
	}
	n.bootstrapped = true // Start decides about the root home once Serf is up
	n.log.Info("bootstrapped a new group", "group", g)
	return nil
}

// onFSMChange runs on raft's FSM goroutine: it only signals.
func (n *Node) onFSMChange(ev fsm.Event) {
	n.metrics.fsmChanges.Inc()
	select {
	case n.refreshCh <- struct{}{}:
	default:
	}
	if len(ev.Shards) > 0 {
		n.shards.signal() // open or close the replicas placed here
	}
}

// onFSMFatal runs on raft's FSM goroutine when the group's FSM halts on a
// log entry this build does not know (docs/design.md, "Upgrades and
// unknown commands"): the node stops rather than diverge from its group.
func (n *Node) onFSMFatal(err error) {
	n.fail(fmt.Errorf("group %q: its log holds a command this build does not know; "+
		"upgrade this node to the build the rest of the group runs: %w", n.group(), err))
}

// onFSMSkip runs on raft's FSM goroutine when the group's FSM skips an
// entry a newer build wrote and marked ignorable.
func (n *Node) onFSMSkip(e fsm.SkippedEntry) {
	n.metrics.fsmSkipped.Inc()
	n.log.Warn("skipped a group log entry this build does not know (marked ignorable by a newer build)", "entry", e.String())
}

// groupFSMConfig is the Bootstrap configuration of a new group named g.
func (n *Node) groupFSMConfig(g string) (fsm.Config, error) {
	filter, err := routing.NewGeometry(n.cfg.FilterCapacity, n.cfg.BitsPerFile, 0, routing.HashXX)
	if err != nil {
		return fsm.Config{}, fmt.Errorf("filter geometry: %w", err)
	}
	lru, err := routing.NewGeometry(max(n.cfg.LRUEntries, 1), n.cfg.LRUBitsPerFile, 0, routing.HashXX)
	if err != nil {
		return fsm.Config{}, fmt.Errorf("lru geometry: %w", err)
	}
	return fsm.Config{
		Group:        g,
		MaxGroupSize: n.fsmMaxGroup(),
		Replication:  n.cfg.Replication,
		Filter:       filter,
		LRUEntries:   n.cfg.LRUEntries,
		LRU:          lru,
		IDFilter:     fsm.DefaultIDFilter(),
	}, nil
}

// raftRole names the node's role in its group's Raft.
func (n *Node) raftRole() string {
	r := n.raftNode()
	if r == nil {
		return ""
	}
	switch r.State() {
	case raft.Leader:
		return "leader"
	case raft.Candidate:
		return "candidate"
	case raft.Follower:
		if !n.isJoined() {
			return ""
		}
		return "follower"
	}
	return ""
}

// leaderID returns the id of the group's Raft leader, "" if unknown.
func (n *Node) leaderID() string {
	r := n.raftNode()
	if r == nil {
		return ""
	}
	_, id := r.LeaderWithID()
	return string(id)
}

// waitFuture waits for a raft future, or for ctx: raft's own timeouts only
// bound enqueueing, and a lost quorum can leave a future pending.
func waitFuture(ctx context.Context, f raft.Future) error {
	ch := make(chan error, 1)
	go func() { ch <- f.Error() }() // ends when raft resolves f (at the latest on shutdown)
	select {
	case err := <-ch:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// apply commits an FSM command through Raft (leader only) and returns its
// result; a refused command's domain error is returned as the error.
func (n *Node) apply(ctx context.Context, cmd []byte) (*fsm.ApplyResult, error) {
	gr := n.curRaft()
	if gr == nil {
		return nil, fmt.Errorf("raft apply: %w", errNotRunning)
	}
	return n.applyOn(ctx, gr, cmd)
}

// applyOn is apply on a given group Raft.
func (n *Node) applyOn(ctx context.Context, gr *groupRaft, cmd []byte) (*fsm.ApplyResult, error) {
	f := gr.raft.Apply(cmd, n.tune.Raft.ApplyTimeout)
	if err := waitFuture(ctx, f); err != nil {
		return nil, fmt.Errorf("raft apply: %w", raftErr(err))
	}
	res, err := fsm.Result(f.Response())
	if err != nil {
		n.metrics.fsmRefused.Inc()
	}
	return res, err
}

// raftErr marks raft's leadership errors as unavailable, so that callers
// over RPC retry them.
func raftErr(err error) error {
	switch {
	case errors.Is(err, raft.ErrNotLeader), errors.Is(err, raft.ErrLeadershipLost),
		errors.Is(err, raft.ErrLeadershipTransferInProgress), errors.Is(err, raft.ErrRaftShutdown),
		errors.Is(err, raft.ErrEnqueueTimeout), errors.Is(err, raft.ErrAbortedByRestore):
		return fmt.Errorf("%w: %w", rpc.ErrUnavailable, err)
	}
	return err
}

// errNotLeader is returned by leader-only operations on another node.
var errNotLeader = fmt.Errorf("%w: %w", rpc.ErrUnavailable, raft.ErrNotLeader)

// raftServers returns the ids in the group's Raft configuration.
func (n *Node) raftServers(ctx context.Context) (map[string]raft.Server, error) {
	r := n.raftNode()
	if r == nil {
		return nil, errNotRunning
	}
	cf := r.GetConfiguration()
	if err := waitFuture(ctx, cf); err != nil {
		return nil, fmt.Errorf("raft configuration: %w", raftErr(err))
	}
	out := make(map[string]raft.Server)
	for _, s := range cf.Configuration().Servers {
		out[string(s.ID)] = s
	}
	return out, nil
}

// resolveTCP resolves a host:port for the Raft transport's advertise
// address.
func resolveTCP(hostport string) (*net.TCPAddr, error) {
	a, err := net.ResolveTCPAddr("tcp", hostport)
	if err != nil {
		return nil, err
	}
	if a.IP == nil || a.IP.IsUnspecified() {
		return nil, fmt.Errorf("%s is not a concrete address", hostport)
	}
	return a, nil
}

// joinHostPort formats host and port as host:port.
func joinHostPort(host string, port int) string {
	return net.JoinHostPort(host, fmt.Sprint(port))
}
