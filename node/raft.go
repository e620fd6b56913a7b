package node

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ghba/ghba/fsm"
	"github.com/ghba/ghba/routing"
	"github.com/ghba/ghba/rpc"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"github.com/hashicorp/serf/serf"
)

// groupRaft is one incarnation of the node's group Raft: the Raft, its
// FSM, transport and log store, and the leader loop observing it. A node
// that switches groups (split, merge) closes its groupRaft and opens a new
// one; Node.gr always points at the current one.
type groupRaft struct {
	raft    *raft.Raft
	fsm     *fsm.FSM
	trans   *raft.NetworkTransport
	bolt    *raftboltdb.BoltStore
	notify  chan bool     // raft's NotifyCh, read by the leader loop
	stopped chan struct{} // closed after raft.Shutdown: stops the leader loop
	wg      sync.WaitGroup
	ready   atomic.Bool // leader established (Barrier done, FSM ready)
	// existing reports that the raft directory held state when opened.
	existing bool
	closed   bool // guarded by Node.switchMu
	// unclean is set when raft.Shutdown did not finish in time: its
	// goroutines may still touch the raft directory, which must then not
	// be wiped and reused by this process.
	unclean bool // guarded by Node.switchMu
}

// errRaftStuck reports a group Raft that did not shut down in time.
var errRaftStuck = errors.New("the old group raft did not shut down")

// raftDir is the directory of the group Raft's state.
func (n *Node) raftDir() string { return filepath.Join(n.cfg.DataDir, "raft") }

// openGroupRaft opens a group Raft under data_dir/raft: a raft-boltdb log
// and stable store, a file snapshot store and a TCP transport on
// bind_addr:ports.raft advertising the advertise address, with a fresh
// FSM. It starts nothing else (see startLeaderLoop).
func (n *Node) openGroupRaft() (gr *groupRaft, err error) {
	dir := n.raftDir()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("raft: %w", err)
	}
	hl := newHCLogAdapter(n.log, "raft")
	gr = &groupRaft{notify: make(chan bool, 16), stopped: make(chan struct{})}
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

	bolt, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(dir, "raft.db")})
	if err != nil {
		return nil, fmt.Errorf("raft: log store: %w", err)
	}
	gr.bolt = bolt
	snaps, err := raft.NewFileSnapshotStoreWithLogger(dir, 2, hl.Named("snapshot"))
	if err != nil {
		return nil, fmt.Errorf("raft: snapshot store: %w", err)
	}
	adv, err := resolveTCP(n.addr(n.cfg.Ports.Raft))
	if err != nil {
		return nil, fmt.Errorf("raft: advertise address: %w", err)
	}
	bind := joinHostPort(n.cfg.BindAddr, n.cfg.Ports.Raft)
	// MaxRPCsInFlight 1 turns raft's pipelined replication off. With
	// pipelining (raft v1.7.3, also v1.8.0), a pipeline whose decoder
	// stopped (a follower refused an AppendEntries, or answered with a
	// newer term) can block the replication goroutine forever on its
	// unbuffered channels, and raft.Shutdown then never returns. The
	// group's log carries only membership and assignment commands, so
	// synchronous replication costs nothing that matters.
	trans, err := raft.NewTCPTransportWithConfig(bind, adv, &raft.NetworkTransportConfig{
		MaxPool:         3,
		Timeout:         10 * time.Second,
		Logger:          hl.Named("transport"),
		MaxRPCsInFlight: 1,
	})
	if err != nil {
		return nil, fmt.Errorf("raft: ports.raft: %w", err)
	}
	gr.trans = trans

	conf := raft.DefaultConfig()
	conf.LocalID = raft.ServerID(n.cfg.NodeID)
	conf.Logger = hl
	conf.NotifyCh = gr.notify
	conf.HeartbeatTimeout = n.tune.raftHeartbeat
	conf.ElectionTimeout = n.tune.raftElection
	conf.LeaderLeaseTimeout = n.tune.raftLeaderLease
	conf.CommitTimeout = n.tune.raftCommit
	// A node removed from the configuration keeps its Raft running: if it
	// is still alive (a stale removal), the leader's reconcile adds it
	// back. A leaving node shuts down anyway.
	conf.ShutdownOnRemove = false
	if n.tune.raftSnapshotN > 0 {
		conf.SnapshotThreshold = n.tune.raftSnapshotN
	}

	gr.fsm = fsm.New(fsm.Options{OnChange: n.onFSMChange})

	if gr.existing, err = raft.HasExistingState(bolt, bolt, snaps); err != nil {
		return nil, fmt.Errorf("raft: reading state: %w", err)
	}
	r, err := raft.NewRaft(conf, gr.fsm, bolt, bolt, snaps, trans)
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
	gr.wg.Wait()
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

	if n.cfg.Bootstrap && !gr.existing && !n.isJoined() && pending == nil {
		g := n.group()
		if g == "" {
			g = defaultAutoGroup
		}
		n.mu.Lock()
		n.groupNm = g
		n.mu.Unlock()
		if err := n.bootstrapSelf(gr); err != nil {
			return err
		}
		// The group exists once the leader's establish applies its
		// Bootstrap command; this node is its first member and homes "/".
		if err := n.setJoined(ctx, g); err != nil {
			return err
		}
		n.bootstrapped = true // Start decides about the root home once Serf is up
		n.log.Info("bootstrapped a new group", "group", g)
	} else if n.cfg.Bootstrap {
		n.log.Debug("raft state or group membership exists; not bootstrapping")
	}
	return nil
}

// startLeaderLoop starts the goroutine observing gr's leadership.
func (n *Node) startLeaderLoop(gr *groupRaft) {
	gr.wg.Add(1)
	go n.leaderLoop(gr)
}

// onFSMChange runs on raft's FSM goroutine: it only signals.
func (n *Node) onFSMChange(ev fsm.Event) {
	n.metrics.fsmChanges.Inc()
	select {
	case n.refreshCh <- struct{}{}:
	default:
	}
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
		MaxGroupSize: n.cfg.MaxGroupSize,
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

// isLeader reports whether this node leads its group and has established
// its leadership (Barrier done, FSM bootstrapped).
func (n *Node) isLeader() bool {
	gr := n.curRaft()
	return gr != nil && gr.raft.State() == raft.Leader && gr.ready.Load()
}

// leaderLoop is the one goroutine that observes leadership changes of gr
// (raft's NotifyCh). It runs the leader's work while the node leads.
func (n *Node) leaderLoop(gr *groupRaft) {
	defer gr.wg.Done()
	var stop func() // non-nil while the leader routine runs
	defer func() {
		if stop != nil {
			stop()
		}
	}()
	for {
		select {
		case leader := <-gr.notify:
			switch {
			case leader && stop == nil:
				n.log.Info("became the group's leader", "group", n.group())
				n.metrics.leaderChanges.Inc()
				stop = n.startLeaderRoutine(gr)
			case !leader && stop != nil:
				n.log.Info("lost the group's leadership", "group", n.group())
				gr.ready.Store(false)
				stop()
				stop = nil
			}
			n.signalRefresh()
		case <-gr.stopped:
			gr.ready.Store(false)
			return
		}
	}
}

// startLeaderRoutine runs leaderRoutine in a goroutine and returns the
// function that stops it and waits for it.
func (n *Node) startLeaderRoutine(gr *groupRaft) func() {
	ctx, cancel := context.WithCancel(n.bgCtx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		n.leaderRoutine(ctx, gr)
	}()
	return func() {
		cancel()
		<-done
	}
}

// leaderRoutine establishes leadership (a Barrier, so the FSM has applied
// every committed entry; the group's Bootstrap and the leader's own
// membership) and then reconciles the FSM with Serf, on every Serf event
// and periodically, until ctx ends.
func (n *Node) leaderRoutine(ctx context.Context, gr *groupRaft) {
	defer gr.ready.Store(false)
	backoff := 50 * time.Millisecond
	for {
		err := n.establish(ctx, gr)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return
		}
		n.log.Warn("establishing leadership failed; retrying", "err", err, "retry_in", backoff)
		if !pauseCtx(ctx, backoff) {
			return
		}
		backoff = min(2*backoff, 2*time.Second)
	}
	gr.ready.Store(true)
	n.log.Info("leadership established", "group", n.group(), "members", gr.fsm.Size())
	n.cluster.refresh()

	t := time.NewTicker(n.tune.reconcileInterval)
	defer t.Stop()
	for {
		if err := n.reconcile(ctx); err != nil && ctx.Err() == nil {
			n.log.Warn("reconcile failed", "err", err)
		}
		n.maybeMerge(ctx, gr)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-n.reconcileCh:
		}
	}
}

// establish runs once per leadership term before the leader acts.
func (n *Node) establish(ctx context.Context, gr *groupRaft) error {
	if err := waitFuture(ctx, gr.raft.Barrier(n.tune.raftApplyTimeout)); err != nil {
		return fmt.Errorf("raft barrier: %w", err)
	}
	if !gr.fsm.Bootstrapped() {
		g := n.group()
		if g == "" {
			g = defaultAutoGroup
		}
		c, err := n.groupFSMConfig(g)
		if err != nil {
			return err
		}
		if _, err := n.applyOn(ctx, gr, fsm.EncodeBootstrap(c)); err != nil {
			return fmt.Errorf("bootstrap command: %w", err)
		}
	}
	self := n.selfMember()
	if m, ok := gr.fsm.Member(n.cfg.NodeID); !ok || m.Status != fsm.StatusActive ||
		m.RPCAddr != self.RPCAddr || m.RaftAddr != self.RaftAddr || m.SerfAddr != self.SerfAddr || m.HTTPAddr != self.HTTPAddr {
		// Adds the first member, or reactivates this one (a restart after
		// a failure) and updates its addresses.
		if _, err := n.applyOn(ctx, gr, fsm.EncodeAddMember(self)); err != nil {
			return fmt.Errorf("adding self: %w", err)
		}
	}
	return nil
}

// selfMember describes this node as an FSM member.
func (n *Node) selfMember() fsm.Member {
	return fsm.Member{
		ID:       n.cfg.NodeID,
		RPCAddr:  n.addr(n.cfg.Ports.RPC),
		RaftAddr: n.addr(n.cfg.Ports.Raft),
		SerfAddr: n.addr(n.cfg.Ports.Serf),
		HTTPAddr: n.addr(n.cfg.Ports.HTTP),
	}
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
	f := gr.raft.Apply(cmd, n.tune.raftApplyTimeout)
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

// addMember adds m to the group (leader only): the FSM AddMember command
// (which refuses a full group and performs the light-weight migration),
// then Raft: an entry with the same id or address but not both is removed
// first, so a node that comes back with a new address, or a new node at
// an old address, joins cleanly; then AddVoter. Both steps are idempotent,
// so a joiner retries the whole call after any error.
func (n *Node) addMember(ctx context.Context, m fsm.Member) error {
	n.memberMu.Lock()
	defer n.memberMu.Unlock()
	if !n.isLeader() {
		return errNotLeader
	}
	if m.ID == n.cfg.NodeID {
		return fmt.Errorf("%w: node id %q is this leader's", fs.ErrExist, m.ID)
	}
	if _, err := n.apply(ctx, fsm.EncodeAddMember(m)); err != nil {
		return fmt.Errorf("adding %s to the group's FSM: %w", m.ID, err)
	}
	return n.ensureVoter(ctx, m.ID, m.RaftAddr)
}

// ensureVoter makes id at addr a voter of the group's Raft.
func (n *Node) ensureVoter(ctx context.Context, id, addr string) error {
	r := n.raftNode()
	cf := r.GetConfiguration()
	if err := waitFuture(ctx, cf); err != nil {
		return fmt.Errorf("raft configuration: %w", raftErr(err))
	}
	for _, s := range cf.Configuration().Servers {
		sameID, sameAddr := string(s.ID) == id, string(s.Address) == addr
		switch {
		case sameID && sameAddr && s.Suffrage == raft.Voter:
			return nil
		case sameID || sameAddr:
			if string(s.ID) == n.cfg.NodeID {
				return fmt.Errorf("%w: raft address %s is this leader's", fs.ErrExist, addr)
			}
			n.log.Info("removing stale raft server", "id", s.ID, "addr", s.Address, "for", id)
			if err := waitFuture(ctx, r.RemoveServer(s.ID, 0, n.tune.raftApplyTimeout)); err != nil {
				return fmt.Errorf("removing stale raft server %s: %w", s.ID, raftErr(err))
			}
		}
	}
	if err := waitFuture(ctx, r.AddVoter(raft.ServerID(id), raft.ServerAddress(addr), 0, n.tune.raftApplyTimeout)); err != nil {
		return fmt.Errorf("adding raft voter %s: %w", id, raftErr(err))
	}
	n.log.Info("added raft voter", "id", id, "addr", addr)
	return nil
}

// removeMember removes id from the group (leader only): the FSM
// RemoveMember command hands its replicas to the other members, then
// RemoveServer takes it out of Raft. Both are idempotent.
func (n *Node) removeMember(ctx context.Context, id string) error {
	n.memberMu.Lock()
	defer n.memberMu.Unlock()
	return n.removeMemberLocked(ctx, id)
}

// removeMemberLocked is removeMember with memberMu held.
func (n *Node) removeMemberLocked(ctx context.Context, id string) error {
	if !n.isLeader() {
		return errNotLeader
	}
	if id == n.cfg.NodeID {
		return fmt.Errorf("%w: the leader cannot remove itself; transfer leadership first", rpc.ErrUnavailable)
	}
	if _, ok := n.groupFSM().Member(id); ok {
		if _, err := n.apply(ctx, fsm.EncodeRemoveMember(id)); err != nil && !errors.Is(err, fsm.ErrUnknownMember) {
			return fmt.Errorf("removing %s from the group's FSM: %w", id, err)
		}
	}
	return n.removeServer(ctx, id)
}

// removeServer removes id from the Raft configuration if it is there.
func (n *Node) removeServer(ctx context.Context, id string) error {
	r := n.raftNode()
	cf := r.GetConfiguration()
	if err := waitFuture(ctx, cf); err != nil {
		return fmt.Errorf("raft configuration: %w", raftErr(err))
	}
	for _, s := range cf.Configuration().Servers {
		if string(s.ID) == id {
			if err := waitFuture(ctx, r.RemoveServer(s.ID, 0, n.tune.raftApplyTimeout)); err != nil {
				return fmt.Errorf("removing raft server %s: %w", id, raftErr(err))
			}
			n.log.Info("removed raft server", "id", id)
			return nil
		}
	}
	return nil
}

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

// reconcile brings the group's FSM in line with Serf (leader only):
// members Serf reports failed are marked failed (their replicas are
// re-assigned) and alive ones active again; members that left or were
// reaped are removed from the FSM and Raft; FSM members missing from Raft
// are added back; nodes of other groups are announced as origins, and
// origins that left are removed.
func (n *Node) reconcile(ctx context.Context) error {
	if !n.isLeader() {
		return nil
	}
	n.metrics.reconciles.Inc()
	s := n.serfAgent()
	if s == nil {
		return nil
	}
	// One membership change at a time: joins and leaves wait for the pass.
	n.memberMu.Lock()
	defer n.memberMu.Unlock()
	myGroup := n.group()
	servers, err := n.raftServers(ctx)
	if err != nil {
		return err
	}
	var errs []error
	seen := make(map[string]bool)
	var addOrigins, removeOrigins []string
	f := n.groupFSM()
	origins := f.Origins()
	for _, m := range s.Members() {
		if m.Tags[tagRole] != roleGHBA || m.Name == n.cfg.NodeID {
			continue
		}
		id, g := m.Name, m.Tags[tagGroup]
		seen[id] = true
		if g == "" {
			continue // an auto node that has not joined a group yet
		}
		if g != myGroup {
			_, isMember := f.Member(id)
			has := slices.Contains(origins, id)
			switch {
			case isMember:
				// It moved groups (split/merge: issue 4); leave it.
			case m.Status == serf.StatusLeft && has:
				removeOrigins = append(removeOrigins, id)
			case m.Status != serf.StatusLeft && !has:
				addOrigins = append(addOrigins, id)
			}
			continue
		}
		fm, inFSM := f.Member(id)
		switch m.Status {
		case serf.StatusAlive:
			if !inFSM && m.Tags[tagLeaving] != "1" && m.Tags[tagMoving] != "1" && m.Tags[tagRaft] != "" && !n.movedAwayRecently(id) {
				// It gossips our group, so it believes it is a member (it
				// only does once added), but the group lost it: reaped
				// while it was down, or a join that did not complete.
				// Add it back.
				n.log.Info("member of the group missing from its FSM; adding it back", "member", id)
				fm = fsm.Member{ID: id, RPCAddr: m.Tags[tagRPC], RaftAddr: m.Tags[tagRaft], HTTPAddr: m.Tags[tagHTTP],
					SerfAddr: net.JoinHostPort(m.Addr.String(), fmt.Sprint(m.Port))}
				if _, err := n.apply(ctx, fsm.EncodeAddMember(fm)); err != nil {
					errs = append(errs, fmt.Errorf("adding %s back: %w", id, err))
					continue
				}
				inFSM = true
			}
			if inFSM && fm.Status == fsm.StatusFailed {
				n.log.Info("member is alive again", "member", id)
				if _, err := n.apply(ctx, fsm.EncodeSetStatus(id, fsm.StatusActive)); err != nil {
					errs = append(errs, fmt.Errorf("reactivating %s: %w", id, err))
				}
			}
			if _, inRaft := servers[id]; inFSM && !inRaft && fm.RaftAddr != "" {
				if err := n.ensureVoter(ctx, id, fm.RaftAddr); err != nil {
					errs = append(errs, err)
				}
			}
		case serf.StatusFailed:
			if inFSM && fm.Status == fsm.StatusActive {
				n.log.Warn("member failed", "member", id)
				if _, err := n.apply(ctx, fsm.EncodeSetStatus(id, fsm.StatusFailed)); err != nil {
					errs = append(errs, fmt.Errorf("marking %s failed: %w", id, err))
				}
			}
		case serf.StatusLeft:
			_, inRaft := servers[id]
			if inFSM || inRaft {
				n.log.Info("member left; removing it", "member", id)
				if err := n.removeMemberLocked(ctx, id); err != nil {
					errs = append(errs, err)
				}
			}
		}
	}
	for _, id := range n.cluster.takeReaped() {
		if seen[id] {
			continue // back again
		}
		if _, inFSM := f.Member(id); inFSM {
			n.log.Info("member reaped by serf; removing it", "member", id)
			if err := n.removeMemberLocked(ctx, id); err != nil {
				errs = append(errs, err)
				n.cluster.noteReaped(id) // retry next time
			}
		} else if slices.Contains(origins, id) {
			removeOrigins = append(removeOrigins, id)
		}
	}
	if len(addOrigins) > 0 {
		if _, err := n.apply(ctx, fsm.EncodeAddOrigins(addOrigins...)); err != nil {
			errs = append(errs, fmt.Errorf("adding origins %v: %w", addOrigins, err))
		}
	}
	if len(removeOrigins) > 0 {
		if _, err := n.apply(ctx, fsm.EncodeRemoveOrigins(removeOrigins...)); err != nil {
			errs = append(errs, fmt.Errorf("removing origins %v: %w", removeOrigins, err))
		}
	}
	return errors.Join(errs...)
}

// leaveGroup takes this node out of its group: leadership is transferred
// if it leads, then the leader removes it from the FSM (its replicas go to
// the other members) and from Raft. A group of one just forgets it.
func (n *Node) leaveGroup(ctx context.Context) error {
	servers, err := n.raftServers(ctx)
	if err != nil {
		return err
	}
	others := 0
	for id, s := range servers {
		if id != n.cfg.NodeID && s.Suffrage == raft.Voter {
			others++
		}
	}
	if others == 0 {
		n.log.Info("last member of the group; leaving it empty", "group", n.group())
		return nil
	}
	backoff := 50 * time.Millisecond
	for {
		err := n.requestLeave(ctx)
		if err == nil {
			n.log.Info("left the group", "group", n.group())
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("%w (last error: %w)", ctx.Err(), err)
		}
		n.log.Warn("leaving the group failed; retrying", "err", err, "retry_in", backoff)
		if !pauseCtx(ctx, backoff) {
			return fmt.Errorf("%w (last error: %w)", ctx.Err(), err)
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

// requestLeave makes one attempt at having the leader remove this node.
func (n *Node) requestLeave(ctx context.Context) error {
	if r := n.raftNode(); r.State() == raft.Leader {
		n.log.Info("transferring leadership before leaving")
		if err := waitFuture(ctx, r.LeadershipTransfer()); err != nil {
			return fmt.Errorf("leadership transfer: %w", err)
		}
	}
	leader := n.leaderID()
	if leader == "" || leader == n.cfg.NodeID {
		return fmt.Errorf("%w: no other leader yet", rpc.ErrUnavailable)
	}
	addr := n.cluster.rpcAddrOf(leader)
	if addr == "" {
		return fmt.Errorf("%w: no rpc address for leader %s", rpc.ErrUnavailable, leader)
	}
	cctx, cancel := context.WithTimeout(ctx, n.tune.rpcTimeout)
	defer cancel()
	var resp GroupLeaveResponse
	return n.client.Call(cctx, addr, methodGroupLeave, &GroupLeaveRequest{ID: n.cfg.NodeID, Group: n.group()}, &resp)
}

// groupJoinLoop makes this node a member of a group, unless it is one: it
// picks the group (its configured one, or with "auto" the one with the
// fewest members below max_group_size, as Serf shows them) and asks that
// group's leader, through any member, to add it. It retries with backoff
// until it succeeds or the node stops; Serf joins wake it up.
func (n *Node) groupJoinLoop() {
	defer n.bgWG.Done()
	ctx := n.bgCtx
	backoff := n.tune.groupJoinMin
	for {
		if n.isJoined() || n.leaving.Load() {
			select {
			case <-ctx.Done():
				return
			case <-n.joinCh:
				continue
			}
		}
		err := n.joinGroupOnce(ctx)
		if err == nil {
			backoff = n.tune.groupJoinMin
			continue
		}
		if ctx.Err() != nil {
			return
		}
		n.log.Info("waiting to join a group", "reason", err, "retry_in", backoff)
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-n.joinCh:
			// A Serf event may have made a group visible: retry now,
			// without growing the back-off (a burst of events at start-up
			// would otherwise push it to the maximum at once).
			t.Stop()
		case <-t.C:
			backoff = min(2*backoff, n.tune.groupJoinMax)
		}
	}
}

// triggerJoin wakes the group join loop.
func (n *Node) triggerJoin() {
	select {
	case n.joinCh <- struct{}{}:
	default:
	}
}

// errNoGroup reports that no group to join is visible yet.
var errNoGroup = errors.New("no group visible in serf yet")

// errSwitching reports a join attempt while the node replaces its Raft.
var errSwitching = errors.New("switching groups")

// joinGroupOnce makes one attempt at joining a group.
func (n *Node) joinGroupOnce(ctx context.Context) error {
	n.mu.Lock()
	switching := n.switching
	n.mu.Unlock()
	if switching {
		return errSwitching
	}
	target := n.cfg.Group
	auto := target == GroupAuto
	if auto {
		target = ""
		if h, ok := n.activeHint(); ok {
			if target = n.cluster.hintTarget(h, n.cfg.MaxGroupSize); target == "" {
				return fmt.Errorf("%w: waiting for group %q (via %s)", errNoGroup, h.group, h.via)
			}
		} else {
			target = n.cluster.pickGroup(n.cfg.MaxGroupSize)
		}
		if target == "" {
			return errNoGroup
		}
	}
	addrs := n.cluster.groupRPCAddrs(target)
	if len(addrs) == 0 {
		return fmt.Errorf("%w: no alive member of group %q", errNoGroup, target)
	}
	req := &GroupJoinRequest{Group: target, Auto: auto, Member: n.selfMember()}
	var errs []error
	for _, addr := range addrs {
		cctx, cancel := context.WithTimeout(ctx, n.tune.rpcTimeout)
		var resp GroupJoinResponse
		err := n.client.Call(cctx, addr, methodGroupJoin, req, &resp)
		cancel()
		if err != nil {
			errs = append(errs, fmt.Errorf("via %s: %w", addr, err))
			if ctx.Err() != nil {
				break
			}
			continue
		}
		if resp.Redirect != "" {
			n.log.Info("the full group split; joining the new group", "group", resp.Redirect, "via", resp.Via, "leader", resp.Leader)
			n.setHint(joinHint{group: resp.Redirect, via: resp.Via, from: target, until: time.Now().Add(n.tune.switchHintTimeout)})
			return fmt.Errorf("%w: redirected to the new group %q", errNoGroup, resp.Redirect)
		}
		if resp.Group == "" {
			return fmt.Errorf("%w: empty answer", errNoGroup)
		}
		if err := n.setJoined(ctx, resp.Group); err != nil {
			return err
		}
		n.metrics.joins.Inc()
		n.log.Info("joined group", "group", resp.Group, "leader", resp.Leader)
		return nil
	}
	return fmt.Errorf("joining group %q: %w", target, errors.Join(errs...))
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
