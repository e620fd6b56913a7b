package node

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/raft"

	"github.com/ghba/ghba/node/internal/backoff"
)

// Graceful stop (docs/design.md, "Node lifecycle"). Shutdown is a crash
// to the cluster: the shards this node leads fail over after an election
// timeout, and the requests they hold meanwhile wait or fail. Stop (what
// SIGTERM does) first hands every leadership over, as planned moves
// (docs/design.md, "Planned leadership moves"): requests wait for each
// move and go on at the new leader, so a rolling restart costs clients
// nothing.

// tagStopping is gossiped while the node stops: others hand it no shard
// leadership, and members shows it "stopping".
const tagStopping = "stop"

// statusStopping is the status of a node that stops gracefully.
const statusStopping = "stopping"

// Stop stops the node gracefully: it gossips that it stops (members show
// "stopping", /v1/health answers 503, no leadership is handed to it),
// hands every shard leadership it holds to a caught-up voter of the shard
// and its group Raft's leadership to another member, at most
// Config.StopHandOverTimeout (0: nothing is handed over), then Shutdown:
// the RPC server finishes the requests in progress and refuses new ones
// (clients send them to another node), and everything closes. ctx bounds
// the whole stop.
func (n *Node) Stop(ctx context.Context) error {
	if n.running() && n.cfg.StopHandOverTimeout > 0 {
		hctx, cancel := context.WithTimeout(ctx, n.cfg.StopHandOverTimeout)
		n.handOverAll(hctx)
		cancel()
	}
	return n.Shutdown(ctx)
}

// handOverAll hands every leadership this node holds to other nodes,
// until it holds none or ctx ends.
func (n *Node) handOverAll(ctx context.Context) {
	start := time.Now()
	n.stopping.Store(true)
	if err := n.updateTags(); err != nil {
		n.log.Warn("updating serf tags", "err", err)
	}
	n.dir.refresh()
	wait := backoff.NewJitter(50*time.Millisecond, time.Second)
	handed := 0
	for {
		var led []string
		stuck := 0 // shards without a replica that could take over
		for s, r := range n.shards.all() {
			if !r.rep.IsLeader() {
				continue
			}
			led = append(led, s)
			switch err := n.shards.handOff(ctx, s, r); {
			case err == nil:
				handed++
			case errors.Is(err, errNoTransferTarget):
				stuck++
			default:
				n.log.Info("shard leadership not handed over yet", "shard", s, "err", err)
			}
		}
		if len(led) == 0 {
			break
		}
		if stuck == len(led) {
			// Every other replica is down or stopping too (the whole
			// cluster stops): nothing to wait for.
			n.log.Info("no replica can take over the shards this node leads", "shards", led)
			break
		}
		if err := wait.Wait(ctx); err != nil {
			n.log.Warn("stopping while leading shards", "shards", led, "err", err)
			break
		}
	}
	if r := n.raftNode(); r != nil && r.State() == raft.Leader && len(n.groupFSM().Members()) > 1 {
		n.log.Info("handing the group's leadership over before stopping")
		if err := waitFuture(ctx, r.LeadershipTransfer()); err != nil {
			n.log.Warn("group leadership not handed over", "err", err)
		}
	}
	n.log.Info("leaderships handed over before stopping", "shards", handed, "took", time.Since(start).Round(time.Millisecond))
}

// handOff hands shard s's leadership to a caught-up voter of its Raft
// configuration (not this node).
func (h *shardHost) handOff(ctx context.Context, s string, r *hosted) error {
	servers, err := r.rep.Configuration(ctx)
	if err != nil {
		return err
	}
	p := &shardPlacement{Replicas: map[string]string{}}
	for _, sv := range servers {
		if sv.Voter && sv.ID != h.n.replicaID() {
			p.Replicas[sv.ID] = sv.Addr
		}
	}
	if len(p.Replicas) == 0 {
		return fmt.Errorf("shard %s has no other voter: %w", s, errNoTransferTarget)
	}
	return h.transfer(ctx, s, r, p, "")
}

// acceptsLeadership reports whether node id may be handed a shard's
// leadership: it is up and not stopping.
func (n *Node) acceptsLeadership(id string) bool {
	if id == n.cfg.NodeID {
		return !n.stopping.Load()
	}
	if !n.dir.nodeUp(id) {
		return false
	}
	if sa := n.serfAgent(); sa != nil {
		for _, m := range sa.Members() {
			if m.Name == id {
				return m.Tags[tagStopping] != "1"
			}
		}
	}
	return true
}
