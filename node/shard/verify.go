package shard

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
)

// verifier answers leadership checks (docs/design.md, "Leaders, reads and
// writes"): from the read lease while it holds, otherwise by a round of
// raft's VerifyLeader (one round of heartbeats to a quorum), batched. A
// check joins the next round to start, never one already in flight, so the
// round that answers it began after the check did: a read that waits for
// it is linearizable. Rounds run one at a time in one goroutine, started
// when the first check arrives and ended when none waits.
//
// The lease: a round that began at t and succeeded tells the leader that a
// quorum heard from it at or after t. A follower that has a leader refuses
// to vote (unless the leader itself hands leadership over), and gives up
// on its leader only after Tuning.Heartbeat without contact; so no other
// replica can be elected before t + Heartbeat, and the leader may answer
// checks without a round until t + ReadLease (ReadLease < Heartbeat, the
// margin for clocks that run at different rates). A leadership transfer
// voids the lease first (revoke); a replica that restarts waits ReadLease
// before its Raft starts (Open), so that it cannot vote early for a round
// it acknowledged before it stopped.
type verifier struct {
	r     *Replica
	lease time.Duration // ReadLease; 0: no lease

	mu        sync.Mutex
	next      *verifyRound // the round new checks join
	running   bool
	gen       uint64 // bumped by revoke: a round that began before sets no lease
	transfers int    // leadership transfers in progress
	cur       atomic.Pointer[readLease]

	rounds     atomic.Uint64 // rounds run
	leaseReads atomic.Uint64 // checks the lease answered
}

// readLease is a lease granted by a round: until (on the monotonic clock),
// in term.
type readLease struct {
	term  uint64
	until time.Time
}

type verifyRound struct {
	done chan struct{}
	err  error
}

// check returns nil when this replica leads its shard at a moment after
// the call began.
func (v *verifier) check(ctx context.Context) error {
	if v.inLease() {
		v.leaseReads.Add(1)
		return nil
	}
	v.mu.Lock()
	if v.next == nil {
		v.next = &verifyRound{done: make(chan struct{})}
	}
	round := v.next
	if !v.running {
		if !v.r.tasks.Go(v.run) {
			v.mu.Unlock()
			return raftErr(v.r, raft.ErrRaftShutdown, false)
		}
		v.running = true
	}
	v.mu.Unlock()
	select {
	case <-round.done:
		return round.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// inLease reports whether a lease covers now: granted in the current term
// of a replica that still leads.
func (v *verifier) inLease() bool {
	l := v.cur.Load()
	return l != nil && time.Now().Before(l.until) &&
		v.r.raft.State() == raft.Leader && v.r.raft.CurrentTerm() == l.term
}

// run runs rounds until no check waits.
func (v *verifier) run() {
	for {
		v.mu.Lock()
		round := v.next
		v.next = nil
		if round == nil {
			v.running = false
			v.mu.Unlock()
			return
		}
		gen := v.gen
		v.mu.Unlock()
		v.rounds.Add(1)
		began, term := time.Now(), v.r.raft.CurrentTerm()
		round.err = raftErr(v.r, v.r.wait(v.r.ctx, v.r.raft.VerifyLeader()), false)
		if round.err == nil && v.lease > 0 {
			v.mu.Lock()
			if gen == v.gen && v.transfers == 0 {
				v.cur.Store(&readLease{term: term, until: began.Add(v.lease)})
			}
			v.mu.Unlock()
		}
		close(round.done)
	}
}

// revoke voids the lease and grants none until done is called: around a
// leadership transfer, which lets the target be elected at once.
func (v *verifier) revoke() (done func()) {
	v.mu.Lock()
	v.gen++
	v.transfers++
	v.cur.Store(nil)
	v.mu.Unlock()
	return func() {
		v.mu.Lock()
		v.transfers--
		v.mu.Unlock()
	}
}
