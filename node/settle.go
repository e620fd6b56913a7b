package node

import (
	"cmp"
	"fmt"
	"maps"
	"slices"

	"github.com/ghba/ghba/fsm"
	"github.com/ghba/ghba/rpc"
	"github.com/hashicorp/serf/serf"
)

// Settled groups (docs/design.md, "Node lifecycle": groups settled): a node's groups are
// settled, as it sees them, when nothing about them is about to change and
// its state is complete — no split, merge or switch pending, the node
// serving (every shard replica its group places on it open and caught
// up), and every filter replica its group assigns it loaded. The cluster is settled
// when every node answers that it is (Groups, "ghba groups --wait").

// settled reports whether the node sees its groups settled, and if not the
// first reason why not. It reads only local state: the node's lifecycle,
// its group FSM, Serf's tags and the namespace's L2 array.
func (n *Node) settled() (bool, string) {
	n.mu.Lock()
	joined, switching, g := n.joined, n.switching || n.pendingSwitch != nil, n.groupName
	n.mu.Unlock()
	switch {
	case switching:
		return false, "this node is switching groups"
	case !joined:
		return false, "this node is not a member of a group yet"
	case n.leaving.Load():
		return false, "this node is leaving the cluster"
	}
	f := n.groupFSM()
	if f == nil || !f.Bootstrapped() {
		return false, "the group's state is not loaded yet"
	}
	if ok, why := n.serving(); !ok {
		return false, "this node does not serve yet: " + why
	}
	if n.leaderID() == "" {
		return false, fmt.Sprintf("group %s has no leader", g)
	}
	if m, ok := f.Member(n.cfg.NodeID); !ok || m.Status != fsm.StatusActive {
		return false, fmt.Sprintf("this node is not an active member of group %s yet", g)
	}
	if why := n.reshapePending(); why != "" {
		return false, why
	}
	if n.ns != nil {
		assigned, loaded, known := n.ns.Segment()
		switch {
		case !known:
			return false, "the group has not assigned this node its filter replicas yet"
		case loaded < assigned:
			return false, fmt.Sprintf("%d of %d filter replicas loaded", loaded, assigned)
		}
	}
	return true, ""
}

// reshapePending returns why, as Serf shows the cluster, groups are about
// to change shape ("" if they are not): a node moving between groups or
// without a group, a group above max_group_size, or (group auto) two
// groups small enough to merge.
func (n *Node) reshapePending() string {
	s := n.serfAgent()
	if s == nil {
		return "serf is not running"
	}
	sizes := map[string]int{}
	for _, m := range s.Members() {
		if m.Tags[tagRole] != roleGHBA || m.Status != serf.StatusAlive || m.Tags[tagLeaving] == "1" {
			continue
		}
		switch g := m.Tags[tagGroup]; {
		case m.Tags[tagMoving] == "1":
			return fmt.Sprintf("node %s is moving to another group", m.Name)
		case g == "":
			return fmt.Sprintf("node %s is not in a group yet", m.Name)
		default:
			sizes[g]++
		}
	}
	maxSize, gossiped := int(n.cfg.MaxGroupSize), n.dir.groupMaxSizes()
	names := slices.Sorted(maps.Keys(sizes))
	for i, a := range names {
		if n.autoGroupSize() {
			maxSize = cmp.Or(gossiped[a], groupSizeStart)
		}
		if sizes[a] > maxSize {
			return fmt.Sprintf("group %s has %d members, more than max_group_size %d", a, sizes[a], maxSize)
		}
		if n.cfg.Group != GroupAuto {
			continue
		}
		for _, b := range names[i+1:] {
			if sizes[a]+sizes[b] <= maxSize {
				return fmt.Sprintf("groups %s and %s fit in one group of %d: they will merge", a, b, maxSize)
			}
		}
	}
	return ""
}

// groupsSettled fills in the Settled and Unsettled fields of groups from
// the statuses of the nodes that answered (Groups): a group is settled when
// every member that is up answered that it sees its groups settled. It
// returns whether the cluster is, and if not the first reason why not:
// an unsettled group, or a node that is up without a group or did not
// answer.
func groupsSettled(groups []rpc.GroupInfo, members []rpc.Member, statuses map[string]*rpc.StatusResponse) (bool, string) {
	byID := make(map[string]rpc.Member, len(members))
	for _, m := range members {
		byID[m.ID] = m
	}
	first := ""
	note := func(why string) {
		if first == "" {
			first = why
		}
	}
	for _, m := range members {
		if m.Group == "" && (m.Status == statusAlive || m.Status == statusStarting) {
			note(fmt.Sprintf("node %s is not in a group yet", m.ID))
		}
	}
	for i := range groups {
		g := &groups[i]
		g.Settled = true
		for _, id := range g.Members {
			m := byID[id]
			if m.Status != statusAlive && m.Status != statusStarting && m.Status != statusLeaving {
				continue // down: its group re-assigned its replicas
			}
			switch st := statuses[id]; {
			case st == nil:
				g.Settled, g.Unsettled = false, fmt.Sprintf("node %s did not answer", id)
			case !st.Settled:
				g.Settled, g.Unsettled = false, fmt.Sprintf("node %s: %s", id, st.Unsettled)
			}
			if !g.Settled {
				break
			}
		}
		if !g.Settled {
			note(fmt.Sprintf("group %s: %s", g.Group, g.Unsettled))
		}
	}
	if len(groups) == 0 {
		note("no group yet")
	}
	return first == "", first
}
