package node

import (
	"context"

	"github.com/ghba/ghba/fsm"
	"github.com/ghba/ghba/node/namespace"
	"github.com/hashicorp/raft"
	"github.com/hashicorp/serf/serf"
)

// Views of the node's internals for its external tests (package
// node_test), which start nodes with node/nodetest.

// DefaultAutoGroup names the group a node bootstrapping with group "auto"
// creates.
const DefaultAutoGroup = defaultAutoGroup

// GroupFSM returns the FSM of the node's current group Raft.
func (n *Node) GroupFSM() *fsm.FSM { return n.groupFSM() }

// Serf tags the tests read.
const (
	TagGroup  = tagGroup
	TagMoving = tagMoving
)

// GroupName returns the node's group ("" while an auto node has none).
func (n *Node) GroupName() string { return n.group() }

// IsJoined reports whether the node is a member of its group.
func (n *Node) IsJoined() bool { return n.isJoined() }

// Membership returns the node's group, whether it is a member of it and
// whether a group switch is pending, in one consistent read.
func (n *Node) Membership() (group string, joined, switching bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.groupName, n.joined, n.pendingSwitch != nil
}

// IsLeader reports whether the node leads its group with its leadership
// established.
func (n *Node) IsLeader() bool { return n.isLeader() }

// LeaderID returns the group's Raft leader as this node knows it.
func (n *Node) LeaderID() string { return n.leaderID() }

// Voters returns the ids in the group's Raft configuration.
func (n *Node) Voters(ctx context.Context) ([]string, error) {
	servers, err := n.raftServers(ctx)
	if err != nil {
		return nil, err
	}
	ids := make([]string, 0, len(servers))
	for id := range servers {
		ids = append(ids, id)
	}
	return ids, nil
}

// Raft returns the current group Raft.
func (n *Node) Raft() *raft.Raft { return n.raftNode() }

// RaftAddr returns the node's advertised Raft address.
func (n *Node) RaftAddr() string { return n.addr(n.cfg.Ports.Raft) }

// SerfMembers returns the members of the Serf pool as this node sees them.
func (n *Node) SerfMembers() []serf.Member { return n.serfAgent().Members() }

// NS returns the node's namespace.
func (n *Node) NS() *namespace.Namespace { return n.ns }

// RemoveMember removes id from the group (leader only), as a leave would.
func (n *Node) RemoveMember(ctx context.Context, id string) error { return n.removeMember(ctx, id) }
