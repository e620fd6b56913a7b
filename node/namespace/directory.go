package node

// Peer is one metadata server as the cluster layer knows it.
type Peer struct {
	ID       string // node_id, unique cluster-wide
	Group    string // the Raft group it belongs to
	RPCAddr  string // host:port of its RPC server
	HTTPAddr string // host:port of its status/metrics server
	Up       bool   // false once Serf reports it failed (its paths answer "unavailable")
	Leaving  bool   // draining its files (ghba leave); it takes no new homes
}

// Directory is what the namespace layer needs from the cluster layer
// (Serf membership and the group's Raft FSM). The cluster layer implements
// it; tests of the namespace use a static implementation. Implementations
// are safe for concurrent use and never block on the network.
type Directory interface {
	// Self returns this node.
	Self() Peer
	// Peers returns every known node, including this one, sorted by ID.
	Peers() []Peer
	// RootHome returns the node id that homes "/" (well known: the
	// bootstrap node, recorded in the group FSM).
	RootHome() string
	// Subscribe returns a channel that receives a value (coalesced, never
	// blocking the sender) whenever Peers or RootHome may have changed, and
	// a function to stop the subscription.
	Subscribe() (<-chan struct{}, func())
}

// Segments is implemented by a Directory that knows the G-HBA segment
// assignment of this node's group (the cluster layer, from the group's
// Raft FSM). Without it, or before the assignment is known, a node keeps a
// replica of every other node's local filter, as HBA does.
type Segments interface {
	// Held returns the origins (nodes of other groups) whose local-filter
	// replicas this node holds, and false while the node is not an active
	// member of a group with a known assignment.
	Held() (origins []string, ok bool)
	// IDBFA returns the encoded IDBFA of this node's group (routing.IDBFA
	// binary encoding) and its version; ok is false while unknown.
	IDBFA() (data []byte, version uint64, ok bool)
}
