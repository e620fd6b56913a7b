package namespace

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/ghba/ghba/node/store"
	"github.com/ghba/ghba/rpc"
)

// Planned leadership moves (docs/design.md, "Planned leadership moves").
// A shard's leader hands its leadership over on purpose — to its preferred
// leader, to leave, to repair, to balance, to stop gracefully — through
// HandOver: from its start, requests that arrive wait at the home's gate
// (enterHome) and the home's Raft commands wait too (command); the
// commands already appended finish (at most Tuning.HandOverDrain), so that
// none is cut off with an unknown outcome; then leadership moves. Once it
// moved the home is dropped: the waiting requests go on to the new leader,
// which they wait for too (WillLead) if it does not serve yet, and a
// request that was inside the home when the move began and then needs a
// command gets "not the leader" (nothing of it was appended: it is tried
// again at the new leader). So no client sees "unavailable" or "outcome
// unknown" because of a move it did not cause.

// moveGate holds requests and commands back while the home's leadership
// moves, and counts the commands in flight.
type moveGate struct {
	mu       sync.Mutex
	commands int           // Raft commands in flight
	grants   int           // client cache leases being granted (ops.go)
	moving   chan struct{} // closed when the move ends; nil when none runs
	idle     chan struct{} // during a move: closed when commands and grants drop to 0
}

// wait returns the channel to wait on while a move runs, nil otherwise.
func (g *moveGate) wait() <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.moving
}

// enterCommand admits a command, or returns the channel to wait on while a
// move runs.
func (g *moveGate) enterCommand() (wait <-chan struct{}) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.moving != nil {
		return g.moving
	}
	g.commands++
	return nil
}

// exitCommand ends a command admitted by enterCommand.
func (g *moveGate) exitCommand() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.commands--
	g.checkIdle()
}

// beginGrant admits the grant of a client cache lease, unless a move runs
// (or moved the leadership away): then no lease is granted.
func (g *moveGate) beginGrant() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.moving != nil {
		return false
	}
	g.grants++
	return true
}

// endGrant ends a grant admitted by beginGrant.
func (g *moveGate) endGrant() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.grants--
	g.checkIdle()
}

// checkIdle closes idle once nothing is in flight; mu must be held.
func (g *moveGate) checkIdle() {
	if g.commands == 0 && g.grants == 0 && g.idle != nil {
		close(g.idle)
		g.idle = nil
	}
}

// begin starts a move: requests and commands wait from now on; the
// channel returned is closed once the commands in flight have finished.
// It reports false when a move already runs.
func (g *moveGate) begin() (<-chan struct{}, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.moving != nil {
		return nil, false // (a move runs, or one moved the leadership away)
	}
	g.moving = make(chan struct{})
	idle := make(chan struct{})
	g.idle = idle
	g.checkIdle()
	return idle, true
}

// end ends a move: the waiting requests and commands go on. After a move
// that succeeded the gate stays shut (its channel closed): the home no
// longer leads, and whatever comes later learns that at once.
func (g *moveGate) end(moved bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.moving != nil {
		close(g.moving)
		g.idle = nil
		if !moved {
			g.moving = nil
		}
	}
}

// command runs fn, which appends one Raft command, unless the home's
// leadership moves: then it waits for the move, and answers "not the
// leader" (naming the new one) if the move succeeded.
func (h *home) command(ctx context.Context, fn func(context.Context) error) error {
	for {
		wait := h.gate.enterCommand()
		if wait == nil {
			break
		}
		select {
		case <-wait:
		case <-h.ctx.Done():
		case <-ctx.Done():
		}
		// (The home's end first: ctx may derive from it.)
		if h.ctx.Err() == nil && ctx.Err() != nil {
			return fmt.Errorf("%w: shard %s: waiting for its leadership to move: %w", rpc.ErrUnavailable, h.id, ctx.Err())
		}
		if h.ctx.Err() != nil {
			return h.notLeader()
		}
	}
	defer h.gate.exitCommand()
	if h.ctx.Err() != nil {
		// The home stopped (its leadership ended): nothing is appended.
		return h.notLeader()
	}
	return fn(ctx)
}

// notLeader is the error of a command refused because the home's
// leadership ended: "not the leader", naming the leader this node knows.
func (h *home) notLeader() error {
	e := &rpc.NotLeaderError{Shard: h.id}
	if l := h.r.leaderOf(h.id); l != h.r.id {
		e.Leader = l
	}
	return fmt.Errorf("shard %s: leadership moved: %w", h.id, e)
}

// enterHome returns the home of shard if this node leads it, nil if not.
// While the home's leadership moves, it waits for the move to end; while
// this node won the shard's election but does not serve it yet
// (WillLead), it waits for that; both at most Tuning.LeaderWait.
func (n *Namespace) enterHome(ctx context.Context, shard string) (*home, error) {
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		h := n.home(shard)
		var wait, stopped <-chan struct{}
		if h == nil {
			if wait = n.pendingLead(shard); wait == nil {
				return nil, nil
			}
		} else {
			if wait = h.gate.wait(); wait == nil {
				return h, nil
			}
			stopped = h.ctx.Done()
		}
		if timer == nil {
			timer = time.NewTimer(n.tune.LeaderWait)
		}
		n.counters.moveWaits.Add(1)
		select {
		case <-wait:
		case <-stopped:
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: shard %s: waiting for its leadership to move: %w", rpc.ErrUnavailable, shard, ctx.Err())
		case <-timer.C:
			return nil, fmt.Errorf("%w: shard %s: its leadership did not move within %v: %w",
				rpc.ErrUnavailable, shard, n.tune.LeaderWait, errNoLeader)
		}
	}
}

// HandOver runs move, which hands this node's leadership of shard to node
// to, as a planned move: requests and commands wait at the home's gate
// meanwhile, the commands in flight finish first (at most
// Tuning.HandOverDrain), and once move succeeded the home is dropped and
// to is remembered as the shard's leader, so that the waiting requests go
// there. Without a home (this node does not serve the shard) it just runs
// move.
func (n *Namespace) HandOver(ctx context.Context, shard, to string, move func(context.Context) error) error {
	h := n.home(shard)
	if h == nil {
		return move(ctx)
	}
	began := time.Now()
	idle, ok := h.gate.begin()
	if !ok {
		return fmt.Errorf("%w: shard %s: a leadership move is in progress", rpc.ErrUnavailable, shard)
	}
	moved := false
	defer func() { h.gate.end(moved) }()
	drain := time.NewTimer(n.tune.HandOverDrain)
	select {
	case <-idle:
	case <-drain.C:
		n.log.Warn("handing shard leadership over with commands still in flight", "shard", shard, "waited", n.tune.HandOverDrain)
	case <-ctx.Done():
		drain.Stop()
		return ctx.Err()
	}
	drain.Stop()
	h.markLeasesClear(ctx)
	if err := move(ctx); err != nil {
		return err
	}
	moved = true
	n.homesMu.Lock()
	if n.homes[shard] == h {
		delete(n.homes, shard)
	}
	n.homesMu.Unlock()
	h.stop()
	n.learnLeader(shard, to)
	// (took: the longest a request waited at the gate)
	n.log.Info("handed shard leadership over", "shard", shard, "to", to, "took", time.Since(began).Round(time.Microsecond))
	n.signalSync()
	return nil
}

// leasesClearKey is the meta record in which a leader that hands its
// leadership over says that no client cache lease it, or a leader before
// it, granted is still valid: its value is the leader's Raft term. The
// next leader, if elected in the very next term (the transfer's target),
// need not wait for the leases of the previous leader to expire before its
// first writes (home.writable, leases.go): a planned move costs writes no
// cache_lease of waiting.
const leasesClearKey = "leases/clear"

// markLeasesClear writes leasesClearKey during a move, once no command
// and no grant is in flight and none can start, if no lease is valid: none
// granted by this node (on any shard: the table is the node's), and this
// leadership's own wait for its predecessors' leases is over. Without it
// (or if it fails) the next leader waits as after a fail-over.
func (h *home) markLeasesClear(ctx context.Context) {
	n := h.r
	now := time.Now()
	if n.leases.ttl > 0 && (now.Before(h.writable) || n.leases.live(now)) {
		return
	}
	var b store.Batch
	b.SetMeta(leasesClearKey, []byte(strconv.FormatUint(h.term, 10)))
	if err := h.rep.Apply(ctx, &b); err != nil {
		h.log.Info("handing shard leadership over: leases not marked clear", "err", err)
	}
}

// leasesClearBefore reports whether the leader of the term before this
// home's marked the leases clear when it handed its leadership over
// (markLeasesClear).
func (h *home) leasesClearBefore(ctx context.Context) bool {
	b, err := h.st.GetMeta(ctx, leasesClearKey)
	if err != nil {
		return false
	}
	t, err := strconv.ParseUint(string(b), 10, 64)
	return err == nil && t+1 == h.term
}

// WillLead tells the namespace that this node won shard's election and
// will serve it (Lead) once its barrier is committed: requests for the
// shard wait for that (at most Tuning.LeaderWait) instead of being
// answered "not the leader". Lead or Unlead ends the wait.
func (n *Namespace) WillLead(shard string) {
	n.homesMu.Lock()
	defer n.homesMu.Unlock()
	if _, ok := n.pending[shard]; !ok && n.homes[shard] == nil {
		n.pending[shard] = make(chan struct{})
	}
}

// pendingLead returns the channel closed when this node serves shard (or
// gives its leadership up), nil unless WillLead was called for it.
func (n *Namespace) pendingLead(shard string) <-chan struct{} {
	n.homesMu.RLock()
	defer n.homesMu.RUnlock()
	if ch, ok := n.pending[shard]; ok {
		return ch
	}
	return nil
}

// endPending ends the wait for shard's leadership; homesMu must be held.
func (n *Namespace) endPending(shard string) {
	if ch, ok := n.pending[shard]; ok {
		close(ch)
		delete(n.pending, shard)
	}
}
