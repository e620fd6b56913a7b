package shard_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ghba/ghba/node/shard"
	"github.com/ghba/ghba/rpc"
	"github.com/ghba/ghba/rpc/rpctest"
)

// TestVerifyLeader checks leadership verification without a read lease:
// it passes on the leader, fails with NotLeader on a follower, batches concurrent checks
// into few rounds, and fails within a bounded time on a leader cut off
// from the other replicas.
func TestVerifyLeader(t *testing.T) {
	noLeaks(t) // (for the parallel subtests: when they are all done)
	for _, cut := range []string{"close followers", "stop their nodes"} {
		t.Run(cut, func(t *testing.T) {
			t.Parallel()
			c := newCluster(t, 3, withTuning(func(tun *shard.Tuning) { tun.ReadLease = -1 })) // (every check a round)
			l := c.waitLeader()
			if err := l.rep.VerifyLeader(ctxFor(t, waitFor)); err != nil {
				t.Fatalf("VerifyLeader on the leader: %v", err)
			}
			followers := c.others(l)
			for _, r := range followers {
				err := r.rep.VerifyLeader(ctxFor(t, waitFor))
				if id, _, _ := rpc.NotLeaderHint(err); !errors.Is(err, rpc.ErrNotLeader) || id != l.id() {
					t.Errorf("VerifyLeader on follower %s: %v, want NotLeader naming %s", r.id(), err, l.id())
				}
			}

			// Concurrent checks share rounds.
			const checks = 64
			before := shard.VerifyRounds(l.rep)
			var wg sync.WaitGroup
			start := make(chan struct{})
			errs := make(chan error, checks)
			for range checks {
				wg.Go(func() {
					<-start
					if err := l.rep.VerifyLeader(ctxFor(t, waitFor)); err != nil {
						errs <- err
					}
				})
			}
			close(start)
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Errorf("concurrent VerifyLeader: %v", err)
			}
			rounds := shard.VerifyRounds(l.rep) - before
			t.Logf("%d concurrent checks took %d rounds", checks, rounds)
			if rounds == 0 || rounds > checks/4 {
				t.Errorf("%d concurrent checks took %d rounds", checks, rounds)
			}

			// Cut the leader off: its checks fail, soon. (Not necessarily
			// the first: raft's VerifyLeader counts every acknowledgement
			// received after the round began, also one of a heartbeat sent
			// before the cut. That is safe as long as the follower that
			// sent it cannot have voted for another leader since, which
			// it does not within its heartbeat timeout.)
			for _, r := range followers {
				if cut == "close followers" {
					r.close()
				} else {
					r.node.stop()
				}
			}
			began := time.Now()
			rpctest.Eventually(t, 5*time.Second, "VerifyLeader fails on a leader cut off", func() error {
				err := l.rep.VerifyLeader(ctxFor(t, waitFor))
				switch {
				case err == nil:
					return errors.New("verified")
				case !errors.Is(err, rpc.ErrUnavailable) || errors.Is(err, context.DeadlineExceeded):
					t.Fatalf("VerifyLeader on a leader cut off: %v, want unavailable", err)
				}
				return nil
			})
			t.Logf("VerifyLeader failed after %v", time.Since(began))
			var fails sync.WaitGroup
			for range 8 {
				fails.Go(func() {
					if err := l.rep.VerifyLeader(ctxFor(t, waitFor)); !errors.Is(err, rpc.ErrUnavailable) {
						t.Errorf("VerifyLeader once it failed: %v, want unavailable", err)
					}
				})
			}
			fails.Wait()
			rpctest.Eventually(t, waitFor, "VerifyLeader says NotLeader", func() error {
				if err := l.rep.VerifyLeader(ctxFor(t, waitFor)); !errors.Is(err, rpc.ErrNotLeader) {
					return fmt.Errorf("%v, want NotLeader", err)
				}
				return nil
			})
			l.close()
			if err := l.rep.VerifyLeader(ctxFor(t, waitFor)); !errors.Is(err, rpc.ErrUnavailable) {
				t.Errorf("VerifyLeader after Close: %v, want unavailable", err)
			}
		})
	}
}

// TestReadLease: a successful round lets the leader answer checks without
// another round for a while; the lease ends on its own, a revocation (a
// leadership transfer) voids it and keeps rounds from granting one, and
// a follower never holds one.
func TestReadLease(t *testing.T) {
	noLeaks(t)
	c := newCluster(t, 3)
	l := c.waitLeader()
	if err := l.rep.VerifyLeader(ctxFor(t, waitFor)); err != nil {
		t.Fatal(err)
	}
	// The lease runs out: a check then runs a round again. (Each check
	// within the lease runs none.)
	rpctest.Eventually(t, waitFor, "a check after the lease ran out runs a round", func() error {
		before := shard.VerifyRounds(l.rep)
		if err := l.rep.VerifyLeader(ctxFor(t, waitFor)); err != nil {
			t.Fatal(err)
		}
		if shard.VerifyRounds(l.rep) == before {
			return errors.New("answered from the lease")
		}
		return nil
	})
	if !shard.InLease(l.rep) {
		t.Fatal("no lease after a successful round")
	}
	before := shard.VerifyRounds(l.rep)
	for range 20 {
		if err := l.rep.VerifyLeader(ctxFor(t, waitFor)); err != nil {
			t.Fatal(err)
		}
	}
	if got := shard.VerifyRounds(l.rep) - before; got > 1 {
		t.Logf("%d rounds for 20 checks right after a round (the lease ran out meanwhile on a slow machine?)", got)
	}

	done := shard.RevokeLease(l.rep)
	if shard.InLease(l.rep) {
		t.Error("lease holds after a revocation")
	}
	before = shard.VerifyRounds(l.rep)
	if err := l.rep.VerifyLeader(ctxFor(t, waitFor)); err != nil {
		t.Fatal(err)
	}
	if shard.VerifyRounds(l.rep) == before || shard.InLease(l.rep) {
		t.Error("a check while revoked was answered without a round, or its round granted a lease")
	}
	done()
	if err := l.rep.VerifyLeader(ctxFor(t, waitFor)); err != nil {
		t.Fatal(err)
	}
	if !shard.InLease(l.rep) {
		t.Error("no lease after the revocation ended and a round succeeded")
	}
	for _, r := range c.others(l) {
		if shard.InLease(r.rep) {
			t.Errorf("follower %s holds a lease", r.id())
		}
	}

	// Hand leadership over: the old leader's lease is gone at once.
	to := c.others(l)[0]
	if err := l.rep.TransferLeadership(ctxFor(t, waitFor), to.id(), to.node.addr); err != nil {
		t.Fatal(err)
	}
	if shard.InLease(l.rep) {
		t.Error("the old leader holds a lease after handing leadership over")
	}
	if err := l.rep.VerifyLeader(ctxFor(t, waitFor)); !errors.Is(err, rpc.ErrNotLeader) {
		t.Errorf("VerifyLeader on the old leader: %v, want NotLeader", err)
	}
}
