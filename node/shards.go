package node

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ghba/ghba/fsm"
	"github.com/ghba/ghba/node/internal/backoff"
	"github.com/ghba/ghba/node/raftmux"
	"github.com/ghba/ghba/node/shard"
	"github.com/ghba/ghba/node/store"
	"github.com/ghba/ghba/rpc"
	"github.com/hashicorp/raft"
)

// The node's shard replicas (docs/design.md, "Replicated shards"):
//
//   - shardHost opens the replicas the group's FSM places on this node and
//     closes (and deletes) those their shard's leader removed;
//   - one watcher per replica follows its Raft leadership: on winning, a
//     barrier, then the namespace serves the shard (Namespace.Lead); on
//     losing, it stops (Unlead);
//   - the group's leader tells each shard's leader the shard's placement
//     (Cluster.ShardReconcile), and the shard's leader converges its Raft
//     configuration to it: add the missing replicas as non-voters, promote
//     them once caught up, then remove the replicas the placement dropped,
//     one at a time, and hand leadership to the shard's owner (converge).

// Store meta keys of the shard layer.
const (
	// metaShardCreate holds the id of the shard this node asked its group
	// to create (its own, on its first join), until the replica is
	// bootstrapped.
	metaShardCreate = "shard/create"
	// metaShardCreated holds the id of the shard this node created.
	metaShardCreated = "shard/created"
	// metaShardCarry holds the shards (comma-separated) a group switch
	// takes to the new group, until that group's FSM has them.
	metaShardCarry = "shard/carry"
)

// shardLayerID is the raft multiplexer's id of shard s's Raft traffic.
func shardLayerID(s string) string { return "shard/" + s }

// hosted is one replica this node hosts.
type hosted struct {
	rep     *shard.Replica
	leading atomic.Bool
	stop    context.CancelFunc // ends the leadership watcher
	done    chan struct{}      // closed when the watcher returned

	mu      sync.Mutex
	desired *shardPlacement // the placement the group's leader sent (leader only)
	working bool            // converge is running
}

// shardPlacement is where a shard's replicas should be.
type shardPlacement struct {
	Owner    string
	Replicas map[string]string // node id → raft address
}

// shardHost manages the node's shard replicas.
type shardHost struct {
	n      *Node
	mu     sync.Mutex
	reps   map[string]*hosted
	closed bool // closeAll ran: a replica opened since is closed at once
	wake   chan struct{}
	// passMu is held for a whole reconcile pass, so that a check made
	// under it (moveShardReplicasAway) is never followed by a pass that
	// acts on an older FSM than the check saw.
	passMu sync.Mutex
}

func newShardHost(n *Node) *shardHost {
	return &shardHost{n: n, reps: make(map[string]*hosted), wake: make(chan struct{}, 1)}
}

// signal asks the host loop to reconcile soon.
func (h *shardHost) signal() {
	select {
	case h.wake <- struct{}{}:
	default:
	}
}

// dir is where shard s's replica keeps its state.
func (h *shardHost) dir(s string) string { return filepath.Join(h.n.cfg.DataDir, "shards", s) }

// get returns the replica of shard s hosted here, or nil.
func (h *shardHost) get(s string) *hosted {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.reps[s]
}

// all returns the replicas hosted here.
func (h *shardHost) all() map[string]*hosted {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make(map[string]*hosted, len(h.reps))
	for s, r := range h.reps {
		out[s] = r
	}
	return out
}

// hostedAndLed returns the shards hosted here and those led here, sorted.
func (h *shardHost) hostedAndLed() (hostedIDs, led []string) {
	for s, r := range h.all() {
		hostedIDs = append(hostedIDs, s)
		if r.leading.Load() {
			led = append(led, s)
		}
	}
	slices.Sort(hostedIDs)
	slices.Sort(led)
	return hostedIDs, led
}

// loop reconciles the hosted replicas with the group's FSM on every FSM
// change and every ShardInterval, until the node stops.
func (h *shardHost) loop() {
	ctx := h.n.bgCtx
	t := time.NewTicker(h.n.tune.ShardInterval)
	defer t.Stop()
	for {
		h.reconcile(ctx)
		select {
		case <-ctx.Done():
			return
		case <-h.wake:
		case <-t.C:
		}
	}
}

// reconcile opens the replicas placed on this node (bootstrapping the
// shard this node creates), and closes and deletes those removed from
// their shard.
func (h *shardHost) reconcile(ctx context.Context) {
	h.passMu.Lock()
	defer h.passMu.Unlock()
	n := h.n
	placed := map[string]bool{}
	if f := n.groupFSM(); f != nil && n.isJoined() && f.Bootstrapped() {
		for _, s := range f.HostedBy(n.cfg.NodeID) {
			placed[s] = true
		}
	}
	create, _ := n.getMeta(ctx, metaShardCreate)
	for s := range placed {
		if h.get(s) == nil {
			if err := h.open(ctx, s, s == create); err != nil && ctx.Err() == nil {
				n.log.Warn("opening a shard replica", "shard", s, "err", err)
			}
		}
	}
	for s, r := range h.all() {
		if placed[s] {
			continue
		}
		removed, err := h.removedFrom(ctx, s, r)
		if err != nil || !removed {
			continue // keep it until its shard's leader has moved it away
		}
		n.log.Info("replica removed from its shard; deleting it", "shard", s)
		h.close(ctx, s, true)
	}
	h.publish()
}

// open opens the replica of shard s (bootstrapping it when this node
// creates the shard) and starts its leadership watcher.
func (h *shardHost) open(ctx context.Context, s string, create bool) error {
	n := h.n
	layer, err := n.mux.Layer(shardLayerID(s))
	if err != nil {
		return err
	}
	hl := newHCLogAdapter(n.log, "raft").With("shard", s)
	rep, err := shard.Open(ctx, shard.Options{
		Shard: s, NodeID: n.replicaID(), Dir: h.dir(s), LogStore: n.cfg.ShardLogStore,
		Transport: raftmux.NewTransport(layer, hl.Named("transport")),
		Geometry:  n.ns.Geometry(), Logger: n.log, HCLogger: hl, Tuning: n.tune.Shard,
		Store:   store.Options{MemTableSize: n.tune.ShardMemTable, BlockCacheSize: n.tune.ShardBlockCache},
		OnFatal: func(err error) { n.fail(fmt.Errorf("shard %s: %w", s, err)) },
		// The version gate (versions.go).
		LogFormat: n.logFormat, MaxLogFormat: n.formats.pin,
	})
	if err != nil {
		_ = layer.Close()
		return err
	}
	if create && !rep.HasState() {
		if err := rep.Bootstrap(); err != nil {
			_ = rep.Close(ctx)
			return err
		}
		var b store.Batch
		b.SetMeta(metaShardCreated, []byte(s))
		b.DeleteMeta(metaShardCreate)
		if err := n.store.Commit(ctx, &b); err != nil {
			n.log.Warn("recording the created shard", "shard", s, "err", err)
		}
		n.log.Info("created shard", "shard", s)
	}
	wctx, stop := context.WithCancel(n.bgCtx)
	r := &hosted{rep: rep, stop: stop, done: make(chan struct{})}
	h.mu.Lock()
	if h.closed { // the node is shutting down: closeAll will not see it
		h.mu.Unlock()
		stop()
		_ = rep.Close(context.Background()) // (ctx may be the node's, cancelled)
		return errNotRunning
	}
	h.reps[s] = r
	h.mu.Unlock()
	if !n.bg.Go(func() { defer close(r.done); h.watch(wctx, s, r) }) {
		close(r.done)
	}
	return nil
}

// openExisting opens every replica this node kept state for (a restart).
func (h *shardHost) openExisting(ctx context.Context) error {
	ents, err := os.ReadDir(filepath.Join(h.n.cfg.DataDir, "shards"))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("node: shards: %w", err)
	}
	create, _ := h.n.getMeta(ctx, metaShardCreate)
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		if err := h.open(ctx, e.Name(), e.Name() == create); err != nil {
			return fmt.Errorf("node: shard %s: %w", e.Name(), err)
		}
	}
	return nil
}

// close stops serving shard s, closes its replica and, with wipe, deletes
// its state.
func (h *shardHost) close(ctx context.Context, s string, wipe bool) {
	h.mu.Lock()
	r := h.reps[s]
	delete(h.reps, s)
	h.mu.Unlock()
	if r == nil {
		return
	}
	r.stop()
	<-r.done
	h.n.ns.Unlead(s)
	if err := r.rep.Close(ctx); err != nil {
		h.n.log.Warn("closing a shard replica", "shard", s, "err", err)
	}
	if wipe {
		if err := os.RemoveAll(h.dir(s)); err != nil {
			h.n.log.Warn("deleting a shard replica", "shard", s, "err", err)
		}
	}
	h.publish()
}

// closeAll closes every replica (Shutdown).
func (h *shardHost) closeAll(ctx context.Context) {
	h.mu.Lock()
	h.closed = true
	h.mu.Unlock()
	for s := range h.all() {
		h.close(ctx, s, false)
	}
}

// watch follows the leadership of replica r of shard s: the namespace
// serves the shard from a barrier after each election this replica wins
// until it loses leadership.
func (h *shardHost) watch(ctx context.Context, s string, r *hosted) {
	n := h.n
	var retry <-chan time.Time // set while a won election is not served yet
	wait := backoff.NewJitter(500*time.Millisecond, 10*time.Second)
	for {
		select {
		case <-ctx.Done():
			return
		case leader := <-r.rep.LeaderCh():
			if !leader {
				retry = nil
				if r.leading.Swap(false) {
					n.ns.Unlead(s)
					h.publish()
				} else {
					n.ns.Unlead(s) // ends a WillLead
				}
				continue
			}
			// Requests for the shard wait for its barrier and home rather
			// than being sent elsewhere (docs/design.md, "Planned
			// leadership moves").
			n.ns.WillLead(s)
			wait.Reset()
		case <-retry:
			retry = nil
			if r.leading.Load() || !r.rep.IsLeader() {
				continue
			}
		}
		bctx, cancel := context.WithTimeout(ctx, n.tune.Raft.ApplyTimeout)
		err := r.rep.Barrier(bctx)
		if err == nil {
			err = n.ns.Lead(bctx, r.rep)
		}
		cancel()
		if err != nil {
			// Still the shard's Raft leader: nobody else serves it, so
			// try again (a leadership change ends the retries).
			d := wait.Next()
			n.log.Warn("not serving a shard after winning its election; trying again", "shard", s, "in", d, "err", err)
			retry = time.After(d)
			continue
		}
		r.leading.Store(true)
		n.shardLeaderships.Add(1)
		h.publish()
		h.converge(s, r) // the placement may have waited for a leader
	}
}

// removedFrom reports whether this node is no longer in shard s's Raft
// configuration: as its own replica knows it (the removal reached it), or
// as the shard's leader says (a removed follower hears nothing more, and
// its replica no longer knows the leader: the Directory does).
func (h *shardHost) removedFrom(ctx context.Context, s string, r *hosted) (bool, error) {
	self := h.n.replicaID()
	if r.rep.IsLeader() {
		return false, nil
	}
	if st := r.rep.Stats()["state"]; st == raft.Shutdown.String() {
		return true, nil
	}
	cctx, cancel := context.WithTimeout(ctx, h.n.tune.StatusTimeout)
	defer cancel()
	if servers, err := r.rep.Configuration(cctx); err == nil && len(servers) > 0 &&
		!slices.ContainsFunc(servers, func(sv shard.Server) bool { return sv.ID == self }) {
		return true, nil
	}
	known, _ := r.rep.Leader()
	var errs []error
	for _, leader := range []string{shard.NodeOf(known), h.n.dir.shardLeader(s)} {
		addr := h.n.dir.rpcAddrOf(leader)
		if leader == "" || leader == h.n.cfg.NodeID || addr == "" {
			continue
		}
		var resp shardStateResp
		if err := h.n.client.Call(cctx, addr, methodShardState, &shardStateReq{Shard: s}, &resp); err != nil {
			errs = append(errs, err)
			continue
		}
		if resp.Leader == leader {
			return !slices.Contains(resp.Members, self), nil
		}
	}
	return false, errors.Join(errs...)
}

// publish gossips the shards this node hosts and leads (Serf tags), when
// they changed.
func (h *shardHost) publish() {
	if err := h.n.updateTags(); err != nil {
		h.n.log.Warn("updating serf tags", "err", err)
	}
	h.n.dir.refresh()
}

// ---- the shard leader's side ----

// handleShardReconcile is Cluster.ShardReconcile: the group's leader tells
// this node, the leader of the shard, where its replicas should be.
func (n *Node) handleShardReconcile(ctx context.Context, req *shardReconcileReq) (*shardReconcileResp, error) {
	r := n.shards.get(req.Shard)
	if r == nil || !r.leading.Load() {
		return nil, fmt.Errorf("%w: node %s does not lead shard %s", errNotShardLeader, n.cfg.NodeID, req.Shard)
	}
	p := &shardPlacement{Replicas: map[string]string{}}
	for _, m := range req.Replicas {
		p.Replicas[m.Replica] = m.RaftAddr
		if m.ID == req.Owner {
			p.Owner = m.Replica
		}
	}
	r.mu.Lock()
	r.desired = p
	r.mu.Unlock()
	n.shards.converge(req.Shard, r)
	return &shardReconcileResp{}, nil
}

// converge starts moving shard s's Raft configuration towards its
// placement in the background, unless that is already running.
func (h *shardHost) converge(s string, r *hosted) {
	r.mu.Lock()
	if r.working || r.desired == nil {
		r.mu.Unlock()
		return
	}
	r.working = true
	r.mu.Unlock()
	if !h.n.bg.Go(func() {
		defer func() {
			r.mu.Lock()
			r.working = false
			r.mu.Unlock()
		}()
		ctx, cancel := context.WithTimeout(h.n.bgCtx, h.n.tune.ShardConvergeTimeout)
		defer cancel()
		if err := h.convergeOnce(ctx, s, r); err != nil && ctx.Err() == nil {
			h.n.log.Info("shard placement not reached yet", "shard", s, "err", err)
		}
	}) {
		r.mu.Lock()
		r.working = false
		r.mu.Unlock()
	}
}

// convergeOnce makes one pass of the shard leader's convergence: add the
// missing replicas as non-voters; promote those caught up; remove the
// replicas the placement dropped, one at a time and only when every placed
// replica votes (so the shard never has fewer voters than a majority of
// its placement); hand leadership to the owner when it votes and is caught
// up.
func (h *shardHost) convergeOnce(ctx context.Context, s string, r *hosted) error {
	n := h.n
	r.mu.Lock()
	p := r.desired
	r.mu.Unlock()
	if p == nil || !r.rep.IsLeader() {
		return nil
	}
	servers, err := r.rep.Configuration(ctx)
	if err != nil {
		return err
	}
	in := map[string]shard.Server{}
	for _, sv := range servers {
		in[sv.ID] = sv
	}
	// A replica of a node that came back with a new incarnation (its data
	// directory was lost) is gone for good: remove it before adding the
	// new one, which Raft would refuse while the old one holds the
	// address. (A dead voter removed: the quorum of the live ones is
	// unchanged.)
	for id := range in {
		if _, placed := p.Replicas[id]; placed || id == n.replicaID() {
			continue
		}
		for pid := range p.Replicas {
			if shard.NodeOf(pid) != shard.NodeOf(id) {
				continue
			}
			n.log.Info("removing the replica of a lost data directory", "shard", s, "replica", id, "new", pid)
			if err := r.rep.RemoveServer(ctx, id); err != nil {
				return fmt.Errorf("removing %s: %w", id, err)
			}
			n.metrics.shardReplicaRemoves.Inc()
			delete(in, id)
		}
	}
	var errs []error
	allVote := true
	for id, addr := range p.Replicas {
		sv, ok := in[id]
		switch {
		case !ok:
			allVote = false
			n.log.Info("adding a shard replica", "shard", s, "replica", id)
			if err := r.rep.AddNonvoter(ctx, id, addr); err != nil {
				errs = append(errs, fmt.Errorf("adding %s: %w", id, err))
			}
			n.metrics.shardReplicaAdds.Inc()
		case sv.Addr != addr:
			// Its node came back at another address: Raft updates the
			// address of a server it knows in place.
			allVote = allVote && sv.Voter
			n.log.Info("updating a shard replica's address", "shard", s, "replica", id, "from", sv.Addr, "to", addr)
			update := r.rep.AddNonvoter
			if sv.Voter {
				update = r.rep.AddVoter
			}
			if err := update(ctx, id, addr); err != nil {
				errs = append(errs, fmt.Errorf("updating the address of %s: %w", id, err))
			}
		case !sv.Voter:
			allVote = false
			caught, err := h.caughtUp(ctx, s, id, r)
			if err != nil || !caught {
				errs = append(errs, fmt.Errorf("%s catching up: %v", id, err))
				continue
			}
			n.log.Info("promoting a caught-up shard replica", "shard", s, "replica", id)
			if err := r.rep.AddVoter(ctx, id, addr); err != nil {
				errs = append(errs, fmt.Errorf("promoting %s: %w", id, err))
			}
		}
	}
	if allVote {
		for id := range in {
			if _, ok := p.Replicas[id]; ok {
				continue
			}
			if id == n.replicaID() {
				// The leader itself is dropped: hand leadership to a placed
				// replica first; the next leader removes this one.
				return h.transfer(ctx, s, r, p, "")
			}
			n.log.Info("removing a shard replica", "shard", s, "replica", id)
			if err := r.rep.RemoveServer(ctx, id); err != nil {
				errs = append(errs, fmt.Errorf("removing %s: %w", id, err))
			} else {
				n.metrics.shardReplicaRemoves.Inc()
			}
			break // one at a time
		}
	}
	if len(errs) == 0 && p.Owner != "" && p.Owner != n.replicaID() {
		if sv, ok := in[p.Owner]; ok && sv.Voter {
			if err := h.transfer(ctx, s, r, p, p.Owner); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// transfer hands shard s's leadership to node to (when empty: to any
// caught-up placed replica), if it is alive and caught up.
func (h *shardHost) transfer(ctx context.Context, s string, r *hosted, p *shardPlacement, to string) error {
	cands := []string{to}
	if to == "" {
		cands = cands[:0]
		for id := range p.Replicas {
			if id != h.n.replicaID() {
				cands = append(cands, id)
			}
		}
		slices.Sort(cands)
	}
	for _, id := range cands {
		if !h.n.acceptsLeadership(shard.NodeOf(id)) {
			continue
		}
		if caught, err := h.caughtUp(ctx, s, id, r); err != nil || !caught {
			continue
		}
		h.n.log.Info("handing shard leadership over", "shard", s, "to", id)
		// A planned move: requests wait for it and go on to the new
		// leader (docs/design.md, "Planned leadership moves").
		if err := h.n.ns.HandOver(ctx, s, shard.NodeOf(id), func(ctx context.Context) error {
			return r.rep.TransferLeadership(ctx, id, p.Replicas[id])
		}); err != nil {
			return fmt.Errorf("transferring leadership of %s to %s: %w", s, id, err)
		}
		h.n.metrics.shardTransfers.Inc()
		return nil
	}
	return fmt.Errorf("shard %s: %w", s, errNoTransferTarget)
}

// errNoTransferTarget reports a leadership transfer without a replica to
// take it (none up, caught up and not stopping).
var errNoTransferTarget = errors.New("no caught-up replica to hand leadership to")

// caughtUp reports whether replica id (a Raft server id) of shard s has
// applied the log up to within ShardCatchUpLag entries of this leader's
// commit index.
func (h *shardHost) caughtUp(ctx context.Context, s, id string, r *hosted) (bool, error) {
	addr := h.n.dir.rpcAddrOf(shard.NodeOf(id))
	if addr == "" {
		return false, errors.New("no rpc address")
	}
	cctx, cancel := context.WithTimeout(ctx, h.n.tune.StatusTimeout)
	defer cancel()
	var resp shardStateResp
	if err := h.n.client.Call(cctx, addr, methodShardState, &shardStateReq{Shard: s}, &resp); err != nil {
		return false, err
	}
	if resp.Replica != id {
		return false, fmt.Errorf("node %s answers as replica %s, not %s", shard.NodeOf(id), resp.Replica, id)
	}
	commit := r.rep.Indexes().Commit
	return resp.Applied+h.n.tune.ShardCatchUpLag >= commit, nil
}

// handleShardState is Cluster.ShardState: this node's replica of a shard.
func (n *Node) handleShardState(ctx context.Context, req *shardStateReq) (*shardStateResp, error) {
	r := n.shards.get(req.Shard)
	if r == nil {
		return nil, fmt.Errorf("%w: node %s hosts no replica of shard %s", errNotShardLeader, n.cfg.NodeID, req.Shard)
	}
	ix := r.rep.Indexes()
	leader, _ := r.rep.Leader()
	resp := &shardStateResp{Shard: req.Shard, Replica: n.replicaID(), Leader: shard.NodeOf(leader),
		Applied: ix.Applied, Commit: ix.Commit, Last: ix.Last}
	if servers, err := r.rep.Configuration(ctx); err == nil {
		for _, sv := range servers {
			resp.Members = append(resp.Members, sv.ID)
		}
	}
	if c, err := r.rep.Store().CountInodes(ctx); err == nil {
		resp.Files = c.Total()
	}
	return resp, nil
}

// ---- the group leader's side ----

// reconcileShards tells each shard of the group its placement (leader
// only): through its leader's Cluster.ShardReconcile. A shard without a
// known leader is skipped until the next pass.
func (n *Node) reconcileShards(ctx context.Context) {
	f := n.groupFSM()
	if f == nil || !n.isLeader() {
		return
	}
	members := map[string]fsm.Member{}
	for _, m := range f.Members() {
		members[m.ID] = m
	}
shards:
	for _, sh := range f.Shards() {
		req := &shardReconcileReq{Shard: sh.ID, Owner: sh.Owner}
		for _, id := range sh.Replicas {
			m, ok := members[id]
			inc := n.dir.incarnationOf(id)
			if !ok || inc == "" {
				// Not known yet: a placement without it would have the
				// shard's leader remove its replica.
				n.log.Debug("shard reconcile waits for a replica's incarnation", "shard", sh.ID, "replica", id)
				continue shards
			}
			req.Replicas = append(req.Replicas, shardReplica{ID: id, Replica: shard.ReplicaID(id, inc), RaftAddr: m.RaftAddr})
		}
		leader := n.dir.shardLeader(sh.ID)
		if leader == "" {
			continue
		}
		if leader == n.cfg.NodeID {
			if _, err := n.handleShardReconcile(ctx, req); err != nil {
				n.log.Debug("shard reconcile", "shard", sh.ID, "err", err)
			}
			continue
		}
		addr := n.dir.rpcAddrOf(leader)
		if addr == "" {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, n.tune.StatusTimeout)
		err := n.client.Call(cctx, addr, methodShardReconcile, req, &shardReconcileResp{})
		cancel()
		if err != nil {
			n.log.Debug("shard reconcile", "shard", sh.ID, "leader", leader, "err", err)
		}
	}
}

// repairFailed applies RepairMember for the members that have been failed
// longer than replica_repair_after (leader only): their replicas are
// placed on other members and rebuilt there. The clock starts when this
// leader first sees a member failed.
func (n *Node) repairFailed(ctx context.Context) {
	f := n.groupFSM()
	if f == nil || !n.isLeader() {
		return
	}
	now := time.Now()
	n.memberMu.Lock()
	defer n.memberMu.Unlock()
	if n.failedSince == nil {
		n.failedSince = map[string]time.Time{}
	}
	seen := map[string]bool{}
	for _, m := range f.Members() {
		if m.Status != fsm.StatusFailed || len(f.HostedBy(m.ID)) == 0 {
			continue
		}
		seen[m.ID] = true
		since, ok := n.failedSince[m.ID]
		if !ok {
			n.failedSince[m.ID] = now
			continue
		}
		if now.Sub(since) < n.cfg.ReplicaRepairAfter {
			continue
		}
		n.log.Warn("repairing the replicas of a member failed for too long", "member", m.ID,
			"failed_for", now.Sub(since).Round(time.Second), "replicas", f.HostedBy(m.ID))
		if _, err := n.apply(ctx, fsm.EncodeRepairMember(m.ID)); err != nil {
			n.log.Warn("repairing replicas", "member", m.ID, "err", err)
			continue
		}
		n.repairs.Add(1)
		delete(n.failedSince, m.ID)
	}
	for id := range n.failedSince {
		if !seen[id] {
			delete(n.failedSince, id)
		}
	}
}

// errNotShardLeader reports a shard request to a node that does not lead
// (or host) the shard.
var errNotShardLeader = fmt.Errorf("%w: not the shard's leader", rpc.ErrUnavailable)

// shardsTag encodes a list of shard ids for a Serf tag.
func shardsTag(ids []string) string { return strings.Join(ids, ",") }

// parseShardsTag decodes a shardsTag.
func parseShardsTag(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

// moveShardReplicasAway has the group's FSM mark this node leaving (its
// owned shards go to other members, its replicas are placed elsewhere)
// and waits until the shards' leaders have removed every replica from it
// and it leads none. It returns how many replicas were moved.
func (n *Node) moveShardReplicasAway(ctx context.Context) (int, error) {
	hostedIDs, _ := n.shards.hostedAndLed()
	f := n.groupFSM()
	if len(hostedIDs) > 0 && len(f.ActiveMembers()) < 2 {
		return 0, fmt.Errorf("%w: this node is the last active member of group %q: its shards have nowhere to go", rpc.ErrUnavailable, n.group())
	}
	if err := n.awaitOwnShard(ctx); err != nil {
		return 0, err
	}
	err := backoff.Retry(ctx, backoff.New(50*time.Millisecond, 2*time.Second), 0, func() error {
		if n.isLeader() {
			return n.markLeaving(ctx, n.cfg.NodeID)
		}
		return n.callLeader(ctx, methodGroupLeave, &groupLeaveReq{ID: n.cfg.NodeID, Prepare: true, leaderOnly: leaderOnly{Group: n.group()}}, &groupLeaveResp{})
	}, func(err error, next time.Duration) {
		n.log.Warn("asking to leave the group failed; retrying", "err", err, "retry_in", next)
	})
	if err != nil {
		return 0, err
	}
	n.shards.signal()
	wait := backoff.New(100*time.Millisecond, time.Second)
	for {
		left, pending := n.shards.leftAfterLeaving()
		if len(left) == 0 && pending == "" {
			return len(hostedIDs), nil
		}
		n.log.Info("waiting for the shards' leaders to move replicas off this node", "replicas", left, "pending", pending)
		if err := wait.Wait(ctx); err != nil {
			if pending != "" {
				err = fmt.Errorf("%s: %w", pending, err)
			}
			return len(hostedIDs) - len(left), fmt.Errorf("replicas %v still here: %w", left, err)
		}
	}
}

// leftAfterLeaving returns the replicas still open here and, while this
// node's copy of the group's FSM has not yet applied its leaving (or
// still places replicas here), what is pending. No replica left and
// nothing pending means that no reconcile pass opens a replica here
// again: the check holds passMu, and every later pass sees an FSM at
// least as new as this one.
func (h *shardHost) leftAfterLeaving() (left []string, pending string) {
	h.passMu.Lock()
	defer h.passMu.Unlock()
	self := h.n.cfg.NodeID
	if f := h.n.groupFSM(); f != nil {
		m, ok := f.Member(self)
		switch {
		case ok && m.Status == fsm.StatusActive:
			pending = "this node's copy of the group state does not show it leaving yet"
		case ok && len(f.HostedBy(self)) > 0:
			pending = fmt.Sprintf("the group state still places replicas %v here", f.HostedBy(self))
		}
	}
	left, _ = h.hostedAndLed()
	return left, pending
}

// awaitOwnShard waits until the shard this node was to create (its own,
// on its first join) is bootstrapped by its replica here. Until then the
// shard exists in the group's FSM only: a node that left before would
// leave its group a shard on which no replica can ever elect a leader.
func (n *Node) awaitOwnShard(ctx context.Context) error {
	wait := backoff.New(50*time.Millisecond, time.Second)
	for {
		create, err := n.getMeta(ctx, metaShardCreate)
		if err != nil {
			return err
		}
		f := n.groupFSM()
		if create == "" || f == nil {
			return nil
		}
		if _, ok := f.Shard(create); !ok {
			return nil // not this group's shard (settleOwnShard drops the intent)
		}
		n.log.Info("waiting for this node's shard to be created before leaving", "shard", create)
		n.shards.signal()
		if err := wait.Wait(ctx); err != nil {
			return fmt.Errorf("shard %s not created yet: %w", create, err)
		}
	}
}

// markLeaving applies SetStatus leaving for member id (leader only).
func (n *Node) markLeaving(ctx context.Context, id string) error {
	n.memberMu.Lock()
	defer n.memberMu.Unlock()
	if !n.isLeader() {
		return errNotLeader
	}
	if m, ok := n.groupFSM().Member(id); ok && m.Status == fsm.StatusLeaving {
		return nil
	}
	if _, err := n.apply(ctx, fsm.EncodeSetStatus(id, fsm.StatusLeaving)); err != nil {
		return fmt.Errorf("marking %s leaving: %w", id, err)
	}
	return nil
}

// displayID is how status pages name a replica's Raft server id: by its
// node, unless it is not the node's current incarnation (a replica lost
// with a wiped data directory, until the shard's leader removes it).
func (h *shardHost) displayID(id string) string {
	node := shard.NodeOf(id)
	if inc := h.n.dir.incarnationOf(node); inc != "" && shard.ReplicaID(node, inc) != id {
		return id
	}
	return node
}

// replicaStatus returns the replicas this node hosts, for its status.
func (h *shardHost) replicaStatus(ctx context.Context) []rpc.ReplicaStatus {
	var out []rpc.ReplicaStatus
	for s, r := range h.all() {
		ix := r.rep.Indexes()
		leader, _ := r.rep.Leader()
		rs := rpc.ReplicaStatus{Shard: s, Leading: r.leading.Load(), Leader: shard.NodeOf(leader),
			AppliedIndex: ix.Applied, CommitIndex: ix.Commit}
		if f := h.n.groupFSM(); f != nil {
			if sh, ok := f.Shard(s); ok {
				rs.Owner = sh.Owner
			}
		}
		if ix.Commit > ix.Applied {
			rs.Lag = ix.Commit - ix.Applied
		}
		cctx, cancel := context.WithTimeout(ctx, h.n.tune.StatusTimeout)
		if servers, err := r.rep.Configuration(cctx); err == nil {
			for _, sv := range servers {
				if sv.Voter {
					rs.Members = append(rs.Members, h.displayID(sv.ID))
				} else {
					rs.Learners = append(rs.Learners, h.displayID(sv.ID))
				}
			}
			slices.Sort(rs.Members)
		}
		cancel()
		if c, err := r.rep.Store().CountInodes(ctx); err == nil {
			rs.Files = c.Total()
		}
		out = append(out, rs)
	}
	slices.SortFunc(out, func(a, b rpc.ReplicaStatus) int { return strings.Compare(a.Shard, b.Shard) })
	return out
}
