package shard

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/raft"
)

// verifier batches leadership checks (raft's VerifyLeader: one round of
// heartbeats to a quorum). A check joins the next round to start, never
// one already in flight, so the round that answers it began after the
// check did: a read that waits for it is linearizable. Rounds run one at a
// time in one goroutine, started when the first check arrives and ended
// when none waits.
type verifier struct {
	r       *Replica
	mu      sync.Mutex
	next    *verifyRound // the round new checks join
	running bool
	rounds  atomic.Uint64 // rounds run (tests)
}

type verifyRound struct {
	done chan struct{}
	err  error
}

// check waits for a round that begins after the call.
func (v *verifier) check(ctx context.Context) error {
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
		v.mu.Unlock()
		v.rounds.Add(1)
		round.err = raftErr(v.r, v.r.wait(v.r.ctx, v.r.raft.VerifyLeader()), false)
		close(round.done)
	}
}
