package node

import "github.com/ghba/ghba/fsm"

// The cluster layer's server-to-server protocol (the namespace's is in
// namespace/wire.go, the client API in rpc/). Method names are part of the
// wire format: never reuse one for another meaning.

const (
	// methodGroupJoin asks a group's leader (through any member, which
	// forwards) to add a node to the group.
	methodGroupJoin = "Cluster.GroupJoin" // groupJoinReq → groupJoinResp
	// methodGroupLeave asks a group's leader (through any member) to
	// remove a node from the group.
	methodGroupLeave = "Cluster.GroupLeave" // groupLeaveReq → groupLeaveResp
	// methodGroupSwitch tells a member of a group to move to another
	// group (sent by its group's leader during a split or merge).
	methodGroupSwitch = "Cluster.GroupSwitch" // groupSwitchReq → groupSwitchResp
	// methodShardReconcile tells a shard's leader where the shard's
	// replicas should be (sent by the group's leader).
	methodShardReconcile = "Cluster.ShardReconcile" // shardReconcileReq → shardReconcileResp
	// methodShardState asks a node about its replica of a shard.
	methodShardState = "Cluster.ShardState" // shardStateReq → shardStateResp
)

// leaderOnly is embedded in the requests that only a group's leader
// serves: any member that receives one forwards it to its leader, once
// (see forward).
type leaderOnly struct {
	// Group is the group the request is for.
	Group string `json:"group"`
	// Forwarded is set by the member that forwarded the request to its
	// leader; a forwarded request is not forwarded again.
	Forwarded bool `json:"forwarded,omitempty"`
}

func (l *leaderOnly) header() *leaderOnly { return l }

// groupJoinReq asks a group's leader to add Member to group Group.
type groupJoinReq struct {
	leaderOnly
	// Auto reports that the joiner chose the group itself (group: auto).
	Auto bool `json:"auto,omitempty"`
	// Member describes the joiner (id and addresses).
	Member fsm.Member `json:"member"`
	// Shards are the shards the joiner owns and brings (a new node: the
	// shard it creates, named after it). Absent (nil) means its own.
	Shards []string `json:"shards"`
	// Creates reports that Shards is the shard the joiner means to create
	// on its first join (not shards it carries from a split or merge): the
	// leader refuses, or redirects, when that shard lives in another group.
	Creates bool `json:"creates,omitempty"`
	// Incarnation is the incarnation of the joiner's data directory. The
	// shards the join adds to the group record it (fsm.Shard.Creator), so
	// that a retry from the same data directory learns that it created
	// them even if it lost the answer to the attempt that did. Empty from
	// joiners of older builds.
	Incarnation string `json:"incarnation,omitempty"`
	// Scheme is the joiner's routing scheme (config scheme); the leader
	// refuses a joiner whose scheme is not its group's. Empty from
	// joiners of older builds (not checked).
	Scheme string `json:"scheme,omitempty"`
}

// groupJoinResp tells the joiner its group, or where to go instead.
type groupJoinResp struct {
	// Group is the group the node is now a member of ("" with Redirect).
	Group string `json:"group"`
	// Leader is the id of the leader that added it.
	Leader string `json:"leader"`
	// Redirect, when set, means the node was not added: the full group
	// split to make room, and the joiner is to join the new group
	// Redirect, which node Via bootstraps.
	Redirect string `json:"redirect,omitempty"`
	// Via: see Redirect.
	Via string `json:"via,omitempty"`
	// Created are the shards of the request that the joiner's data
	// directory created: new in the group's FSM with this join, or added
	// by an earlier attempt of the same incarnation whose answer was lost
	// (fsm.Shard.Creator). The joiner bootstraps their Raft groups. A
	// shard that another incarnation created (or an unknown one) is not
	// created again: a node whose data dir was wiped rejoins its shards'
	// existing Raft groups.
	Created []string `json:"created,omitempty"`
	// Refused, when set, means the node was not added and must not try
	// again with the same configuration: it says why (a scheme that is
	// not the group's). Scheme is then the group's scheme.
	Refused string `json:"refused,omitempty"`
	Scheme  string `json:"scheme,omitempty"`
}

// groupLeaveReq asks a group's leader to remove member ID (its
// replicas go to the other members, then it leaves Raft).
type groupLeaveReq struct {
	leaderOnly
	// ID is the leaving node.
	ID string `json:"id"`
	// Prepare asks the leader to mark the member leaving (its shard
	// replicas are placed elsewhere) instead of removing it.
	Prepare bool `json:"prepare,omitempty"`
}

// groupLeaveResp is empty.
type groupLeaveResp struct{}

// groupSwitchReq tells a node to leave group From for group Group.
type groupSwitchReq struct {
	// Group is the group to move to.
	Group string `json:"group"`
	// From is the group the node is a member of.
	From string `json:"from"`
	// Via is a node of the target group (or the one bootstrapping it):
	// the node joins the group Via gossips if Group does not show up.
	Via string `json:"via,omitempty"`
	// Bootstrap asks this node to create the new group by itself.
	Bootstrap bool `json:"bootstrap,omitempty"`
	// Reason is "split" or "merge" (for logs).
	Reason string `json:"reason"`
	// Leader is the id of the leader that sent it.
	Leader string `json:"leader"`
	// Shards are the shards the node owns and takes to the new group.
	Shards []string `json:"shards"`
}

// groupSwitchResp is empty.
type groupSwitchResp struct{}

// shardReplica is one replica of a shard's placement.
type shardReplica struct {
	// ID is the node; Replica the Raft server id of its replicas (the
	// incarnation of its data directory: shard.ReplicaID).
	ID       string `json:"id"`
	Replica  string `json:"replica"`
	RaftAddr string `json:"raft_addr"`
}

// shardReconcileReq is a shard's placement, from its group's FSM.
type shardReconcileReq struct {
	Shard    string         `json:"shard"`
	Owner    string         `json:"owner"`
	Replicas []shardReplica `json:"replicas"`
}

// shardReconcileResp is empty: the shard's leader converges in the
// background.
type shardReconcileResp struct{}

// shardStateReq asks a node about its replica of Shard.
type shardStateReq struct {
	Shard string `json:"shard"`
}

// shardStateResp is a node's replica of a shard: the leader it knows, the
// members of the Raft configuration it knows, its indexes and the paths
// it holds.
type shardStateResp struct {
	Shard string `json:"shard"`
	// Replica is the answering replica's Raft server id; Leader the node
	// leading the shard as it knows it; Members the Raft server ids of
	// the configuration it knows.
	Replica string   `json:"replica"`
	Leader  string   `json:"leader"`
	Members []string `json:"members"`
	Applied uint64   `json:"applied"`
	Commit  uint64   `json:"commit"`
	Last    uint64   `json:"last"`
	Files   int64    `json:"files"`
}
