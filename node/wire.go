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
}

// groupLeaveReq asks a group's leader to remove member ID (its
// replicas go to the other members, then it leaves Raft).
type groupLeaveReq struct {
	leaderOnly
	// ID is the leaving node.
	ID string `json:"id"`
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
}

// groupSwitchResp is empty.
type groupSwitchResp struct{}
