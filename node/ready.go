package node

import (
	"fmt"
	"sync"
	"time"
)

// Readiness (docs/design.md, "Node lifecycle"): a node says "alive" only
// when it serves every request it accepts. Until then it reports
// "starting" — in members, /v1/status, /v1/health, the status page, the
// ghba_serving metric and its Serf tags — with the reason.

// readyState is the node's last readiness verdict.
type readyState struct {
	mu      sync.Mutex
	serving bool
	reason  string // why not serving ("" while serving)
	since   time.Time
}

// serving returns the last verdict.
func (n *Node) serving() (ok bool, reason string) {
	n.ready.mu.Lock()
	defer n.ready.mu.Unlock()
	return n.ready.serving, n.ready.reason
}

// readiness decides whether the node serves every request it accepts: it
// has started (store open, namespace recovered), it is a member of its
// group (in the group's state, too) and is not leaving, and every shard replica its group places on
// it is open, knows its shard's leader (serves the shard if it is that
// leader) and has applied every entry it knew committed at the previous
// check (prev: the commit index of each shard the previous check looked
// at; one it did not must have applied every entry it knows committed).
// Under load a replica applies a moment behind its commit index; one that
// does not keep up within a check's interval is catching up. It records
// in next the commit index of each shard it looks at, and returns the
// first reason the node does not serve.
func (n *Node) readiness(prev, next map[string]uint64) (bool, string) {
	n.mu.Lock()
	st := n.state
	n.mu.Unlock()
	switch {
	case st != lcRunning:
		return false, "the node is starting"
	case n.leaving.Load():
		return false, "the node is leaving the cluster"
	case n.stopping.Load():
		return false, "the node is stopping"
	case !n.isJoined():
		return false, "not a member of a group yet"
	}
	f := n.groupFSM()
	if f == nil || !f.Bootstrapped() {
		return false, "the group's state is not loaded yet"
	}
	if _, ok := f.Member(n.cfg.NodeID); !ok {
		// A new group's leader bootstraps it and then adds itself, with
		// the shard it creates, in a second entry: until that applies,
		// HostedBy below has nothing to check.
		return false, "not in the group's member list yet"
	}
	for _, s := range f.HostedBy(n.cfg.NodeID) {
		h := n.shards.get(s)
		if h == nil {
			return false, fmt.Sprintf("shard %s: its replica is not open yet", s)
		}
		if id, _ := h.rep.Leader(); id == "" {
			return false, fmt.Sprintf("shard %s: no leader known", s)
		}
		if h.rep.IsLeader() && !h.leading.Load() {
			return false, fmt.Sprintf("shard %s: elected, not serving it yet", s)
		}
		ix := h.rep.Indexes()
		want, ok := prev[s]
		if !ok || want > ix.Commit {
			want = ix.Commit
		}
		next[s] = ix.Commit
		if ix.RaftApplied < want {
			return false, fmt.Sprintf("shard %s: catching up (applied %d of %d)", s, ix.RaftApplied, ix.Commit)
		}
	}
	return true, ""
}

// readyLoop re-evaluates readiness every Tuning.ReadyInterval until the
// node stops; a change is logged and gossiped (tagServing).
func (n *Node) readyLoop() {
	t := time.NewTicker(n.tune.ReadyInterval)
	defer t.Stop()
	var seen map[string]uint64 // commit index per shard at the last check
	for {
		n.updateFormats(n.bgCtx)
		next := make(map[string]uint64)
		ok, reason := n.readiness(seen, next)
		seen = next
		n.ready.mu.Lock()
		first := n.ready.since.IsZero()
		changed := ok != n.ready.serving || first
		n.ready.serving, n.ready.reason = ok, reason
		if changed {
			n.ready.since = time.Now()
		}
		n.ready.mu.Unlock()
		if changed {
			switch {
			case ok:
				n.log.Info("serving", "after", time.Since(n.startedAt).Round(time.Millisecond))
			case first:
				n.log.Info("not serving yet", "reason", reason)
			default:
				n.log.Warn("not serving", "reason", reason)
			}
			if err := n.updateTags(); err != nil {
				n.log.Warn("gossiping readiness", "err", err)
			}
		}
		select {
		case <-n.bgCtx.Done():
			return
		case <-t.C:
		}
	}
}
