package namespace

import "strings"

// Peer is one metadata server as the cluster layer knows it.
type Peer struct {
	ID       string // node_id, unique cluster-wide
	Group    string // the Raft group it belongs to
	RPCAddr  string // host:port of its RPC server
	HTTPAddr string // host:port of its status/metrics server
	Up       bool   // false once Serf reports it failed (its paths answer "unavailable")
	Leaving  bool   // draining its files (ghba leave); it takes no new homes
}

// Directory is what the namespace needs from the cluster layer (Serf
// membership and the group's Raft FSM). The node implements it; tests use
// a static implementation. Implementations are safe for concurrent use and
// never block on the network.
type Directory interface {
	// Self returns this node.
	Self() Peer
	// Peers returns every known node, including this one, sorted by ID.
	Peers() []Peer
	// RootHome returns the node id that homes "/" (well known: the
	// bootstrap node, or where a drain moved it), "" while unknown.
	RootHome() string
	// Subscribe returns a channel that receives a value (coalesced, never
	// blocking the sender) whenever Peers or RootHome may have changed, and
	// a function to stop the subscription.
	Subscribe() (<-chan struct{}, func())
}

// Segments is implemented by a Directory that knows the G-HBA segment
// assignment of this node's group (the node, from the group's Raft FSM).
// Without it, or before the assignment is known, a node keeps a replica of
// every other node's local filter, as HBA does.
type Segments interface {
	// Held returns the origins (nodes of other groups) whose local-filter
	// replicas this node holds, and false while the node is not an active
	// member of a group with a known assignment.
	Held() (origins []string, ok bool)
	// IDBFA returns the encoded IDBFA of this node's group (routing.IDBFA
	// binary encoding) and its version; ok is false while unknown.
	IDBFA() (data []byte, version uint64, ok bool)
}

// HeldKey is a comparable summary of a held set (Segments.Held), so that a
// Directory can tell when the set changed and notify its subscribers.
func HeldKey(held []string, ok bool) string {
	if !ok {
		return "\x00unknown"
	}
	return strings.Join(held, ",")
}

// peerSet is a snapshot of the Directory.
type peerSet struct {
	list []Peer
	byID map[string]*Peer
	root string
	// seg is set when this node routes with G-HBA segments and knows its
	// assignment; held is then its segment (the origins it holds).
	seg     bool
	held    map[string]bool
	heldKey string
}

// groupGone reports whether no known node is in group g.
func (ps *peerSet) groupGone(g string) bool {
	for _, p := range ps.list {
		if p.Group == g {
			return false
		}
	}
	return true
}

// refreshPeers takes a new snapshot of the Directory.
func (n *Namespace) refreshPeers() *peerSet {
	ps := &peerSet{list: n.dir.Peers(), root: n.dir.RootHome()}
	ps.byID = make(map[string]*Peer, len(ps.list))
	for i := range ps.list {
		ps.byID[ps.list[i].ID] = &ps.list[i]
	}
	if n.segmented() {
		held, ok := n.dir.(Segments).Held()
		ps.seg, ps.heldKey = ok, HeldKey(held, ok)
		ps.held = make(map[string]bool, len(held))
		for _, id := range held {
			ps.held[id] = true
		}
	}
	n.peers.Store(ps)
	return ps
}

// samePeers reports whether a snapshot still matches the Directory.
func samePeers(ps *peerSet, list []Peer, root, held string) bool {
	if ps == nil || ps.root != root || ps.heldKey != held || len(ps.list) != len(list) {
		return false
	}
	for i := range list {
		if ps.list[i] != list[i] {
			return false
		}
	}
	return true
}

// peer returns the peer with id, or nil.
func (n *Namespace) peer(id string) *Peer { return n.peers.Load().byID[id] }

// addrOf returns the RPC address of node id, or "".
func (n *Namespace) addrOf(id string) string {
	if p := n.peer(id); p != nil {
		return p.RPCAddr
	}
	return ""
}

// isUp reports whether node id is known and up (this node always is).
func (n *Namespace) isUp(id string) bool {
	if id == n.id {
		return true
	}
	p := n.peer(id)
	return p != nil && p.Up
}

// segmented reports whether this namespace routes with G-HBA segments:
// the scheme is ghba and the Directory knows the assignment.
func (n *Namespace) segmented() bool {
	if n.scheme == SchemeHBA {
		return false
	}
	_, ok := n.dir.(Segments)
	return ok
}

// currentHeldKey is the held-set summary the Directory reports now.
func (n *Namespace) currentHeldKey() string {
	if !n.segmented() {
		return ""
	}
	return HeldKey(n.dir.(Segments).Held())
}

// SeesPeer reports whether this node's current snapshot of the Directory
// knows node id, and whether it counts it up.
func (n *Namespace) SeesPeer(id string) (up, known bool) {
	p := n.peer(id)
	if p == nil {
		return false, false
	}
	return p.Up, true
}
