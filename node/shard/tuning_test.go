package shard_test

import (
	"testing"
	"time"

	"github.com/ghba/ghba/node/raftconf"
	"github.com/ghba/ghba/node/shard"
)

// TestPartialTuning opens replicas whose Tuning sets only some timers:
// the others take their defaults, and the replica works and closes
// cleanly (Close waits for Raft).
func TestPartialTuning(t *testing.T) {
	noLeaks(t)
	c := newCluster(t, 3, withTuning(func(tun *shard.Tuning) {
		*tun = shard.Tuning{Tuning: raftconf.Tuning{Heartbeat: 500 * time.Millisecond, Election: 500 * time.Millisecond,
			LeaderLease: 300 * time.Millisecond, Commit: 5 * time.Millisecond}}
	}))
	c.mustApply(mkdir("/d"), create("/d/a"))
	c.converged()
	l := c.waitLeader()
	l.close()
	c.waitLeader(c.open()...)
	c.mustApply(create("/d/b"))
}
