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

// Views of the join protocol for the external tests of joins
// (join_shard_test.go).

// JoinRequest is the request of one attempt of the group join loop
// (Cluster.GroupJoin).
type JoinRequest = groupJoinReq

// Incarnation returns the incarnation of the node's data directory.
func (n *Node) Incarnation() string { return n.incarnation }

// PrepareJoin returns the request the node's group join loop sends to group
// g, recording the node's intent to create its shard as the loop does.
func (n *Node) PrepareJoin(ctx context.Context, g string) (*JoinRequest, error) {
	return n.joinRequest(ctx, g, false)
}

// HandleGroupJoin serves req as Cluster.GroupJoin does on this node and
// returns the shards its answer lists as created.
func (n *Node) HandleGroupJoin(ctx context.Context, req *JoinRequest) ([]string, error) {
	resp, err := n.handleGroupJoin(ctx, req)
	if err != nil {
		return nil, err
	}
	return resp.Created, nil
}

// HandleGroupJoinRedirect serves req as Cluster.GroupJoin does on this
// node and returns the group (and the member to ask) its answer redirects
// the joiner to, if any.
func (n *Node) HandleGroupJoinRedirect(ctx context.Context, req *JoinRequest) (group, via string, err error) {
	resp, err := n.handleGroupJoin(ctx, req)
	if err != nil {
		return "", "", err
	}
	return resp.Redirect, resp.Via, nil
}
