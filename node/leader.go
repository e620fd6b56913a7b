package node

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"slices"
	"time"

	"github.com/ghba/ghba/fsm"
	"github.com/ghba/ghba/node/internal/backoff"
	"github.com/ghba/ghba/rpc"
	"github.com/hashicorp/raft"
	"github.com/hashicorp/serf/serf"
)

// The group leader's work (docs/design.md, "Groups"): one goroutine observes
// leadership of the current group Raft; while this node leads, it
// establishes its leadership and then reconciles the group's FSM with Serf,
// member by member, and adds and removes members.

// startLeaderLoop starts the goroutine observing gr's leadership.
func (n *Node) startLeaderLoop(gr *groupRaft) {
	gr.loops.Go(func() { n.leaderLoop(gr) })
}

// leaderLoop is the one goroutine that observes leadership changes of gr
// (raft's NotifyCh). It runs the leader's work while the node leads.
func (n *Node) leaderLoop(gr *groupRaft) {
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
	err := backoff.Retry(ctx, backoff.New(50*time.Millisecond, 2*time.Second), 0,
		func() error { return n.establish(ctx, gr) },
		func(err error, next time.Duration) {
			n.log.Warn("establishing leadership failed; retrying", "err", err, "retry_in", next)
		})
	if err != nil {
		return // leadership ended
	}
	gr.ready.Store(true)
	n.gsize.reset() // a new term starts from the M its group gossips
	n.log.Info("leadership established", "group", n.group(), "members", gr.fsm.Size())
	n.dir.refresh()

	t := time.NewTicker(n.tune.ReconcileInterval)
	defer t.Stop()
	for {
		if err := n.reconcileGroup(ctx); err != nil && ctx.Err() == nil {
			n.log.Warn("reconcile failed", "err", err)
		}
		n.repairFailed(ctx)
		n.reconcileShards(ctx)
		if n.chooseGroupSize(gr) {
			if err := n.updateTags(); err != nil {
				n.log.Warn("updating serf tags", "err", err)
			}
		}
		n.maybeMerge(ctx, gr)
		n.maybeSplit(ctx, gr)
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
	if err := waitFuture(ctx, gr.raft.Barrier(n.tune.Raft.ApplyTimeout)); err != nil {
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
		// Adds the first member (with the shard it creates), or
		// reactivates this one (a restart after a failure) and updates its
		// addresses.
		shards, _, err := n.joinShards(ctx)
		if err != nil {
			return err
		}
		if _, err := n.applyOn(ctx, gr, fsm.EncodeAddMemberIncarnation(self, shards, n.incarnation)); err != nil {
			return fmt.Errorf("adding self: %w", err)
		}
		if err := n.dropCarry(ctx); err != nil { // the group's FSM has them now
			return err
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

// isLeader reports whether this node leads its group and has established
// its leadership (Barrier done, FSM bootstrapped).
func (n *Node) isLeader() bool {
	gr := n.curRaft()
	return gr != nil && gr.raft.State() == raft.Leader && gr.ready.Load()
}

// addMember adds m, whose data directory is incarnation inc ("" from a
// joiner that does not send it), to the group (leader only): the FSM
// AddMember command (which refuses a full group and performs the
// light-weight migration), then Raft: an entry with the same id or address
// but not both is removed first, so a node that comes back with a new
// address, or a new node at an old address, joins cleanly; then AddVoter.
// Both steps are idempotent, so a joiner retries the whole call after any
// error.
//
// It returns the shards the joiner created (see createdBy), which the
// joiner bootstraps.
func (n *Node) addMember(ctx context.Context, m fsm.Member, shards []string, inc string) (created []string, err error) {
	n.memberMu.Lock()
	defer n.memberMu.Unlock()
	if !n.isLeader() {
		return nil, errNotLeader
	}
	if m.ID == n.cfg.NodeID {
		return nil, fmt.Errorf("%w: node id %q is this leader's", fs.ErrExist, m.ID)
	}
	created = createdBy(n.groupFSM(), shards, inc)
	if _, err := n.apply(ctx, fsm.EncodeAddMemberIncarnation(m, shards, inc)); err != nil {
		return nil, fmt.Errorf("adding %s to the group's FSM: %w", m.ID, err)
	}
	return created, n.ensureVoter(ctx, m.ID, m.RaftAddr)
}

// createdBy returns the shards, of those a joiner whose data directory is
// incarnation inc brings, that the joiner creates: those f does not know
// (the AddMember about to be applied adds them, recording inc as their
// Creator), and those an earlier AddMember of the same incarnation added —
// an attempt whose answer the joiner lost (its apply reported an error
// after the entry was committed, the leader changed, the RPC timed out).
// A shard another incarnation created, or one whose creator is not known,
// exists already: a node whose data directory was wiped must join it, not
// bootstrap a second Raft group for it. The leader has applied every
// committed entry (its Barrier), and memberMu orders joins, so f is
// up to date.
func createdBy(f *fsm.FSM, shards []string, inc string) []string {
	var created []string
	for _, s := range shards {
		if sh, ok := f.Shard(s); !ok || inc != "" && sh.Creator == inc {
			created = append(created, s)
		}
	}
	return created
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
		case sameID:
			// At another address (it restarted with a new one) or not a
			// voter: AddVoter below updates the server in place.
		case sameAddr:
			if string(s.ID) == n.cfg.NodeID {
				return fmt.Errorf("%w: raft address %s is this leader's", fs.ErrExist, addr)
			}
			n.log.Info("removing stale raft server", "id", s.ID, "addr", s.Address, "for", id)
			if err := waitFuture(ctx, r.RemoveServer(s.ID, 0, n.tune.Raft.ApplyTimeout)); err != nil {
				return fmt.Errorf("removing stale raft server %s: %w", s.ID, raftErr(err))
			}
		}
	}
	if err := waitFuture(ctx, r.AddVoter(raft.ServerID(id), raft.ServerAddress(addr), 0, n.tune.Raft.ApplyTimeout)); err != nil {
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
			if err := waitFuture(ctx, r.RemoveServer(s.ID, 0, n.tune.Raft.ApplyTimeout)); err != nil {
				return fmt.Errorf("removing raft server %s: %w", id, raftErr(err))
			}
			n.log.Info("removed raft server", "id", id)
			return nil
		}
	}
	return nil
}

// reconcileGroup brings the group's FSM in line with Serf (leader only),
// one Serf member at a time (reconcileMember), then the members Serf has
// reaped, then the origins (nodes of other groups whose filter replicas
// the group holds) in one command each way. Membership changes wait for
// the pass (memberMu).
func (n *Node) reconcileGroup(ctx context.Context) error {
	if !n.isLeader() {
		return nil
	}
	n.metrics.reconciles.Inc()
	s := n.serfAgent()
	if s == nil {
		return nil
	}
	n.memberMu.Lock()
	defer n.memberMu.Unlock()
	servers, err := n.raftServers(ctx)
	if err != nil {
		return err
	}
	var (
		errs    []error
		seen    = make(map[string]bool)
		origins originChanges
		f       = n.groupFSM()
		known   = f.Origins()
	)
	for _, m := range s.Members() {
		if m.Tags[tagRole] != roleGHBA || m.Name == n.cfg.NodeID {
			continue
		}
		seen[m.Name] = true
		if err := n.reconcileMember(ctx, m, servers, known, &origins); err != nil {
			errs = append(errs, err)
		}
	}
	for _, id := range n.dir.takeReaped() {
		if seen[id] {
			continue // back again
		}
		if _, inFSM := f.Member(id); inFSM {
			n.log.Info("member reaped by serf; removing it", "member", id)
			if err := n.removeMemberLocked(ctx, id); err != nil {
				errs = append(errs, err)
				n.dir.noteReaped(id) // retry next time
			}
		} else if slices.Contains(known, id) {
			origins.remove = append(origins.remove, id)
		}
	}
	if err := n.applyOrigins(ctx, origins); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// originChanges collects the origins a reconcile pass adds and removes.
type originChanges struct{ add, remove []string }

// reconcileMember reconciles one Serf member m with the group's FSM and
// Raft configuration (servers), with memberMu held:
//
//   - a node of another group is an origin of this group while it has not
//     left (noted in origins, applied by the caller);
//   - an alive member of this group that the FSM lost (reaped while it was
//     down, a join that did not complete) is added back, a failed one is
//     reactivated, and one missing from Raft is made a voter again;
//   - a member Serf reports failed is marked failed (its filter replicas
//     are re-assigned);
//   - a member that left is removed from the FSM and Raft.
func (n *Node) reconcileMember(ctx context.Context, m serf.Member, servers map[string]raft.Server, known []string, origins *originChanges) error {
	f := n.groupFSM()
	id, g := m.Name, m.Tags[tagGroup]
	if g == "" {
		return nil // an auto node that has not joined a group yet
	}
	fm, inFSM := f.Member(id)
	if g != n.group() {
		has := slices.Contains(known, id)
		switch {
		case inFSM:
			// It moved groups (a split or merge is under way); leave it.
		case m.Status == serf.StatusLeft && has:
			origins.remove = append(origins.remove, id)
		case m.Status != serf.StatusLeft && !has:
			origins.add = append(origins.add, id)
		}
		return nil
	}
	switch m.Status {
	case serf.StatusAlive:
		if !inFSM && m.Tags[tagLeaving] != "1" && m.Tags[tagMoving] != "1" && m.Tags[tagRaft] != "" && !n.movedAwayRecently(id) {
			// It gossips our group, so it believes it is a member (it
			// only does once added), but the group lost it. Add it back.
			n.log.Info("member of the group missing from its FSM; adding it back", "member", id)
			fm = fsm.Member{ID: id, RPCAddr: m.Tags[tagRPC], RaftAddr: m.Tags[tagRaft], HTTPAddr: m.Tags[tagHTTP],
				SerfAddr: net.JoinHostPort(m.Addr.String(), fmt.Sprint(m.Port))}
			if _, err := n.apply(ctx, fsm.EncodeAddMemberShards(fm, []string{})); err != nil {
				return fmt.Errorf("adding %s back: %w", id, err)
			}
			inFSM = true
		}
		var errs []error
		if inFSM && fm.Status == fsm.StatusFailed {
			n.log.Info("member is alive again", "member", id)
			if _, err := n.apply(ctx, fsm.EncodeSetStatus(id, fsm.StatusActive)); err != nil {
				errs = append(errs, fmt.Errorf("reactivating %s: %w", id, err))
			}
		}
		if _, inRaft := servers[id]; inFSM && !inRaft && fm.RaftAddr != "" {
			errs = append(errs, n.ensureVoter(ctx, id, fm.RaftAddr))
		}
		return errors.Join(errs...)
	case serf.StatusFailed:
		if inFSM && fm.Status == fsm.StatusActive {
			n.log.Warn("member failed", "member", id)
			if _, err := n.apply(ctx, fsm.EncodeSetStatus(id, fsm.StatusFailed)); err != nil {
				return fmt.Errorf("marking %s failed: %w", id, err)
			}
		}
	case serf.StatusLeft:
		if _, inRaft := servers[id]; inFSM || inRaft {
			n.log.Info("member left; removing it", "member", id)
			return n.removeMemberLocked(ctx, id)
		}
	}
	return nil
}

// applyOrigins applies the origins a reconcile pass collected.
func (n *Node) applyOrigins(ctx context.Context, o originChanges) error {
	var errs []error
	if len(o.add) > 0 {
		if _, err := n.apply(ctx, fsm.EncodeAddOrigins(o.add...)); err != nil {
			errs = append(errs, fmt.Errorf("adding origins %v: %w", o.add, err))
		}
	}
	if len(o.remove) > 0 {
		if _, err := n.apply(ctx, fsm.EncodeRemoveOrigins(o.remove...)); err != nil {
			errs = append(errs, fmt.Errorf("removing origins %v: %w", o.remove, err))
		}
	}
	return errors.Join(errs...)
}
