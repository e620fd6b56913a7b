package shard_test

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/ghba/ghba/node/shard"
	"github.com/ghba/ghba/rpc"
	"github.com/ghba/ghba/rpc/rpctest"
)

// waitConfiguration waits until r's view of the shard's configuration is
// want (sorted by id).
func waitConfiguration(t *testing.T, r *replica, want []shard.Server) {
	t.Helper()
	rpctest.Eventually(t, waitFor, r.id()+"'s configuration", func() error {
		got, err := r.rep.Configuration(ctxFor(t, waitFor))
		if err != nil {
			return err
		}
		slices.SortFunc(got, func(a, b shard.Server) int { return cmpString(a.ID, b.ID) })
		if !slices.Equal(got, want) {
			return fmt.Errorf("%+v, want %+v", got, want)
		}
		return nil
	})
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// servers returns the configuration of rs, voters unless listed in
// nonvoters.
func servers(rs []*replica, nonvoters ...*replica) []shard.Server {
	var out []shard.Server
	for _, r := range rs {
		out = append(out, shard.Server{ID: r.id(), Addr: r.node.addr, Voter: !slices.Contains(nonvoters, r)})
	}
	slices.SortFunc(out, func(a, b shard.Server) int { return cmpString(a.ID, b.ID) })
	return out
}

// TestMembership changes the shard's configuration: a non-voter receives
// the log without counting for the quorum and is then removed; leadership moves to each replica in turn (LeaderCh tells both
// sides, Apply on the old leader names the new one); membership changes
// are refused by followers; a leader that removes itself stops, and
// leaves a working shard.
func TestMembership(t *testing.T) {
	noLeaks(t)
	c := newCluster(t, 3)
	c.mustApply(mkdir("/d"), create("/d/a"))
	for _, r := range c.reps {
		waitConfiguration(t, r, servers(c.reps))
	}

	// A non-voter.
	l := c.waitLeader()
	learner := c.newReplica(startNode(t, "n4"))
	if err := l.rep.AddNonvoter(ctxFor(t, waitFor), learner.id(), learner.node.addr); err != nil {
		t.Fatal(err)
	}
	all := append(slices.Clone(c.reps), learner)
	waitConfiguration(t, l, servers(all, learner))
	c.mustApply(create("/d/b"))
	c.converged(all...)
	if err := l.rep.RemoveServer(ctxFor(t, waitFor), learner.id()); err != nil {
		t.Fatal(err)
	}
	waitConfiguration(t, l, servers(c.reps))
	// (A removed follower is not told: raft stops replicating to it. The
	// node closes it when the shard's leader says it was removed.)
	learner.close()

	// Leadership moves to each replica in turn.
	for _, target := range []*replica{c.reps[1], c.reps[2], c.reps[0]} {
		old := c.waitLeader()
		if old == target {
			continue
		}
		term := old.rep.Term()
		for _, f := range c.others(old) {
			if f != target { // (raft refuses a transfer to itself, leader or not)
				err := f.rep.TransferLeadership(ctxFor(t, waitFor), target.id(), target.node.addr)
				if !errors.Is(err, rpc.ErrNotLeader) {
					t.Errorf("TransferLeadership on follower %s: %v, want NotLeader", f.id(), err)
				}
			}
			if err := f.rep.AddVoter(ctxFor(t, waitFor), "n9", "127.0.0.1:1"); !errors.Is(err, rpc.ErrNotLeader) {
				t.Errorf("AddVoter on follower %s: %v, want NotLeader", f.id(), err)
			}
			if err := f.rep.RemoveServer(ctxFor(t, waitFor), old.id()); !errors.Is(err, rpc.ErrNotLeader) {
				t.Errorf("RemoveServer on follower %s: %v, want NotLeader", f.id(), err)
			}
		}
		if err := old.rep.TransferLeadership(ctxFor(t, waitFor), target.id(), target.node.addr); err != nil {
			t.Fatalf("transfer %s -> %s: %v", old.id(), target.id(), err)
		}
		if got := c.waitLeader(); got != target {
			t.Fatalf("%s leads after the transfer to %s", got.id(), target.id())
		}
		if target.rep.Term() <= term {
			t.Errorf("term %d after the transfer, %d before", target.rep.Term(), term)
		}
		rpctest.Eventually(t, waitFor, "leadership notifications", func() error {
			if n := target.notes(); len(n) == 0 || !n[len(n)-1] {
				return fmt.Errorf("%s was told %v", target.id(), n)
			}
			if n := old.notes(); len(n) == 0 || n[len(n)-1] {
				return fmt.Errorf("%s was told %v", old.id(), n)
			}
			return nil
		})
		err := old.rep.Apply(ctxFor(t, waitFor), create("/d/old-leader"))
		if id, _, ok := rpc.NotLeaderHint(err); !ok || id != target.id() {
			t.Errorf("Apply on the old leader: %v, want NotLeader naming %s", err, target.id())
		}
		if id, addr := old.rep.Leader(); id != target.id() || addr != target.node.addr {
			t.Errorf("the old leader sees leader %s at %s", id, addr)
		}
		c.mustApply(create("/d/led-by-" + target.id()))
	}
	c.converged()

	// The leader removes itself: it stops (ShutdownOnRemove), the other
	// two elect a leader and go on.
	gone := c.waitLeader()
	if err := gone.rep.RemoveServer(ctxFor(t, waitFor), gone.id()); err != nil {
		t.Fatal(err)
	}
	rpctest.Eventually(t, waitFor, "the removed leader stops", func() error {
		if st := gone.rep.Stats()["state"]; st != "Shutdown" {
			return fmt.Errorf("state %s", st)
		}
		return nil
	})
	if err := gone.rep.Apply(ctxFor(t, waitFor), create("/d/removed")); !errors.Is(err, rpc.ErrUnavailable) {
		t.Errorf("Apply on the removed leader: %v, want unavailable", err)
	}
	gone.close()
	rest := c.others(gone)
	c.reps = rest
	c.waitLeader()
	for _, r := range rest {
		waitConfiguration(t, r, servers(rest))
	}
	c.mustApply(create("/d/after-removal"))
	c.converged()
}
