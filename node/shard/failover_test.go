package shard_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ghba/ghba/node/shard"
	"github.com/ghba/ghba/rpc"
	"github.com/ghba/ghba/rpc/rpctest"
)

// writers apply creates of fresh paths through whichever replica leads,
// and record each outcome.
type writers struct {
	reps []*shard.Replica
	stop chan struct{}
	once sync.Once
	wg   sync.WaitGroup

	acks atomic.Int64

	mu        sync.Mutex
	acked     map[string]bool // nil
	notLeader map[string]bool // refused before the log
	unknown   map[string]bool // outcome unknown
	other     []error         // anything else: a bug
}

// startWriters starts n writers on reps; they stop at the latest when t
// ends.
func startWriters(t *testing.T, reps []*shard.Replica, n int) *writers {
	w := &writers{reps: reps, stop: make(chan struct{}),
		acked: map[string]bool{}, notLeader: map[string]bool{}, unknown: map[string]bool{}}
	for i := range n {
		w.wg.Go(func() { w.run(i) })
	}
	t.Cleanup(w.halt)
	return w
}

// halt stops the writers and waits for them.
func (w *writers) halt() {
	w.once.Do(func() { close(w.stop) })
	w.wg.Wait()
}

func (w *writers) run(id int) {
	for i := 0; ; i++ {
		select {
		case <-w.stop:
			return
		default:
		}
		var leader *shard.Replica
		for _, r := range w.reps {
			if r.IsLeader() {
				leader = r
				break
			}
		}
		if leader == nil {
			leader = w.reps[i%len(w.reps)] // NotLeader, probably: recorded like any other
		}
		p := fmt.Sprintf("/w%d/f%d", id, i)
		ctx, cancel := context.WithTimeout(context.Background(), waitFor)
		err := leader.Apply(ctx, create(p))
		cancel()
		w.mu.Lock()
		switch {
		case err == nil:
			w.acked[p] = true
			w.acks.Add(1)
		case errors.Is(err, rpc.ErrNotLeader) && !errors.Is(err, rpc.ErrOutcomeUnknown):
			w.notLeader[p] = true
		case errors.Is(err, rpc.ErrOutcomeUnknown):
			w.unknown[p] = true
		default:
			w.other = append(w.other, fmt.Errorf("%s: %w", p, err))
		}
		w.mu.Unlock()
		if err != nil {
			select { // pace retries while there is no leader
			case <-w.stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}
}

// waitAcks waits until n more writes have been acknowledged.
func (w *writers) waitAcks(t *testing.T, n int64) {
	t.Helper()
	want := w.acks.Load() + n
	rpctest.Eventually(t, waitFor, fmt.Sprintf("%d writes acknowledged", want), func() error {
		if got := w.acks.Load(); got < want {
			return fmt.Errorf("%d", got)
		}
		return nil
	})
}

// check checks the shard's state s, once the writers have been halted,
// against what they were told: every acknowledged create is there, none
// refused before the log is, nothing else appeared, and no error was of
// another kind.
func (w *writers) check(t *testing.T, s map[string]bool) {
	t.Helper()
	for _, err := range w.other {
		t.Errorf("apply failed with neither NotLeader nor outcome unknown: %v", err)
	}
	for p := range w.acked {
		if !s[p] {
			t.Errorf("acknowledged %s is lost", p)
		}
	}
	for p := range w.notLeader {
		if s[p] {
			t.Errorf("%s, refused with NotLeader, was applied", p)
		}
	}
	for p := range s {
		if strings.HasPrefix(p, "/w") && !w.acked[p] && !w.unknown[p] {
			t.Errorf("%s appeared, but no write of it may have succeeded", p)
		}
	}
	t.Logf("%d writes acknowledged, %d refused (not the leader), %d of unknown outcome",
		len(w.acked), len(w.notLeader), len(w.unknown))
}

// TestFailover kills the leader of a three-replica shard while writers
// apply: the survivors elect a leader and hold every acknowledged write;
// the writes in flight fail with NotLeader or an unknown outcome, never
// with another error; the old leader, reopened from its directory, catches
// up, skipping the entries its store holds.
func TestFailover(t *testing.T) {
	noLeaks(t) // (for the parallel subtests: when they are all done)
	for _, mode := range []string{"close", "partition"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			c := newCluster(t, 3)
			old := c.waitLeader()
			survivors := c.others(old)
			reps := make([]*shard.Replica, len(c.reps))
			for i, r := range c.reps {
				reps[i] = r.rep
			}
			w := startWriters(t, reps, 4)
			w.waitAcks(t, 50)
			switch mode {
			case "close":
				old.close()
			case "partition":
				old.node.stop() // the replica runs on, cut off
			}
			if l := c.waitLeader(survivors...); l == old {
				t.Fatal("the old leader still leads")
			}
			w.waitAcks(t, 50)
			w.halt()
			if mode == "partition" {
				old.close()
				old.node.restart(t)
			}
			s := c.converged(survivors...)
			paths := make(map[string]bool)
			for p := range s.Inodes {
				paths[p] = true
			}
			w.check(t, paths)

			// The old leader comes back and catches up.
			applied := storeApplied(t, old.dir, c.store)
			old.open()
			c.mustApply(create("/after"))
			final := c.converged()
			if final.Applied <= applied {
				t.Fatalf("final applied index %d, the old leader's store had %d", final.Applied, applied)
			}
			// Raft replayed the old leader's whole log: the entries its
			// store held were skipped, not applied again.
			n := old.rep.Store().Stats().LogEntries
			if n == 0 || n > final.Applied-applied {
				t.Errorf("the reopened replica applied %d entries, its store was at %d of %d", n, applied, final.Applied)
			}
			t.Logf("the reopened replica's store was at %d; it applied %d entries up to %d", applied, n, final.Applied)
			for _, r := range c.reps {
				if err := r.rep.Halted(); err != nil {
					t.Errorf("%s halted: %v", r.id(), err)
				}
			}
		})
	}
}
