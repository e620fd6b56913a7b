package shard_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/ghba/ghba/node/shard"
	"github.com/ghba/ghba/rpc"
	"github.com/ghba/ghba/rpc/rpctest"
)

// TestHaltedLeader fails the leader's store under it (as a failing disk
// would) while the other replicas are sound: the leader halts, and its
// answers never deny a write that the others applied: the entry it halted
// on has an unknown outcome, and later writes are refused before they
// reach the log.
func TestHaltedLeader(t *testing.T) {
	noLeaks(t)
	c := newCluster(t, 3)
	c.mustApply(mkdir("/d"))
	l := c.waitLeader()
	if err := l.rep.Store().Close(); err != nil {
		t.Fatal(err)
	}
	others := c.others(l)
	for i := range 3 {
		p := fmt.Sprintf("/d/f%d", i)
		err := l.rep.Apply(ctxFor(t, waitFor), create(p))
		if err == nil {
			t.Fatalf("create %s on the halted leader succeeded", p)
		}
		if !errors.Is(err, shard.ErrHalted) {
			t.Errorf("create %s: %v, want ErrHalted", p, err)
		}
		if errors.Is(err, rpc.ErrOutcomeUnknown) {
			if i > 0 {
				t.Errorf("create %s after halting: %v, want it refused before the log", p, err)
			}
			continue
		}
		// A definite failure: the others must not have applied it. (The
		// halted leader still replicates its log.)
		commit := raftStat(t, l, "commit_index")
		for _, r := range others {
			rpctest.Eventually(t, waitFor, r.id()+" applied the leader's commit index", func() error {
				if got := raftStat(t, r, "applied_index"); got < commit {
					return fmt.Errorf("applied %d of %d", got, commit)
				}
				return nil
			})
			if _, gerr := r.rep.Store().GetInode(ctxFor(t, waitFor), p); gerr == nil {
				t.Errorf("create %s failed with %q on the leader, but %s applied it", p, err, r.id())
			}
		}
	}
	if err := l.rep.Halted(); !errors.Is(err, shard.ErrHalted) {
		t.Errorf("Halted() = %v", err)
	}
	if f := l.fatal(); len(f) != 1 {
		t.Errorf("OnFatal called %d times", len(f))
	}
	// The node shuts the halted replica down; the others go on.
	l.close()
	c.waitLeader(others...)
	c.mustApply(create("/d/after"))
	c.converged(others...)
}
