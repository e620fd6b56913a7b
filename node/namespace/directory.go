package namespace

import (
	"math/rand/v2"
	"slices"
	"strings"
)

// Peer is one metadata server as the cluster layer knows it.
type Peer struct {
	ID       string // node_id, unique cluster-wide
	Group    string // the Raft group it belongs to
	RPCAddr  string // host:port of its RPC server
	HTTPAddr string // host:port of its status/metrics server
	Up       bool   // false once Serf reports it failed
	Leaving  bool   // leaving the cluster (ghba leave)
}

// ShardInfo is one shard as the cluster layer knows it.
type ShardInfo struct {
	ID     string // the shard (named after the node that created it)
	Group  string // the group that owns it
	Leader string // the node that leads it; "" while unknown (an election, or no live majority)
	// Hosts are the nodes known to host a replica of it, sorted (possibly
	// incomplete: gossip may not carry every node's list).
	Hosts []string
}

// Equal reports whether s and o say the same.
func (s ShardInfo) Equal(o ShardInfo) bool {
	return s.ID == o.ID && s.Group == o.Group && s.Leader == o.Leader && slices.Equal(s.Hosts, o.Hosts)
}

// Directory is what the namespace needs from the cluster layer (Serf
// membership, the group's Raft FSM and the shards' leaders). The node
// implements it; tests use node/nodetest's. Implementations are safe for
// concurrent use and never block on the network.
type Directory interface {
	// Self returns this node.
	Self() Peer
	// Peers returns every known node, including this one, sorted by ID.
	Peers() []Peer
	// Shards returns every known shard, sorted by ID.
	Shards() []ShardInfo
	// RootShard returns the shard that homes "/" (the shard of the node
	// that bootstrapped the cluster), "" while unknown.
	RootShard() string
	// Subscribe returns a channel that receives a value (coalesced, never
	// blocking the sender) whenever Peers, Shards or RootShard may have
	// changed, and a function to stop the subscription.
	Subscribe() (<-chan struct{}, func())
}

// Segments is implemented by a Directory that knows the G-HBA segment
// assignment of this node's group (the node, from the group's Raft FSM).
// Without it, or before the assignment is known, a node keeps a replica of
// every other shard's local filter, as HBA does.
type Segments interface {
	// Held returns the origins (shards of other groups) whose local-filter
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
	list   []Peer
	byID   map[string]*Peer
	shards []ShardInfo
	shard  map[string]*ShardInfo
	root   string
	// everShards is every shard this node has seen in the Directory since
	// it started, sorted: a shard outlives its owner and is never deleted,
	// so one that gossip stops naming for a while (its hosts restarting)
	// still holds paths. A change of a whole subtree is a transaction with
	// each of them (subtreeShards).
	everShards []string
	// seg is set when this node routes with G-HBA segments and knows its
	// assignment; held is then its segment (the origins it holds), and
	// extra the replicas its memory budget adds (budget.go).
	seg     bool
	held    map[string]bool
	heldKey string
	extra   map[string]bool
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
	ps := &peerSet{list: n.dir.Peers(), shards: n.dir.Shards(), root: n.dir.RootShard()}
	ps.byID = make(map[string]*Peer, len(ps.list))
	for i := range ps.list {
		ps.byID[ps.list[i].ID] = &ps.list[i]
	}
	ps.shard = make(map[string]*ShardInfo, len(ps.shards))
	for i := range ps.shards {
		ps.shard[ps.shards[i].ID] = &ps.shards[i]
	}
	ps.everShards = n.noteShards(ps.shards)
	if n.segmented() {
		held, ok := n.dir.(Segments).Held()
		ps.seg, ps.heldKey = ok, HeldKey(held, ok)
		ps.held = make(map[string]bool, len(held))
		for _, id := range held {
			ps.held[id] = true
		}
		if ok {
			ps.extra = n.extraReplicas(ps)
		}
	}
	n.peers.Store(ps)
	return ps
}

// noteShards adds shards to the shards this node has seen and returns
// them all, sorted.
func (n *Namespace) noteShards(shards []ShardInfo) []string {
	n.seenMu.Lock()
	defer n.seenMu.Unlock()
	for _, s := range shards {
		if !slices.Contains(n.seen, s.ID) {
			n.seen = append(n.seen, s.ID)
			slices.Sort(n.seen)
		}
	}
	return slices.Clone(n.seen)
}

// subtreeShards returns the shards a change of a whole subtree (a
// directory rename's re-key, a recode) is a transaction with: every shard
// this node has seen, and also must, the ones named (the coordinator's
// own, the subtree root's home). One that the Directory does not name now
// is reached through its replicas' hosts if they know its leader; if not,
// the transaction fails as unavailable and is tried again, rather than
// leave the part of the subtree that shard homes behind.
func (n *Namespace) subtreeShards(must ...string) []string {
	all := n.peers.Load().everShards
	for _, id := range must {
		if id != "" && !slices.Contains(all, id) {
			all = append(slices.Clone(all), id)
		}
	}
	return all
}

// samePeers reports whether a snapshot still matches the Directory.
func samePeers(ps *peerSet, list []Peer, shards []ShardInfo, root, held string) bool {
	if ps == nil || ps.root != root || ps.heldKey != held || len(ps.list) != len(list) || len(ps.shards) != len(shards) {
		return false
	}
	for i := range list {
		if ps.list[i] != list[i] {
			return false
		}
	}
	for i := range shards {
		if !ps.shards[i].Equal(shards[i]) {
			return false
		}
	}
	return true
}

// peer returns the node with id, or nil.
func (n *Namespace) peer(id string) *Peer { return n.peers.Load().byID[id] }

// isUp reports whether node id is known and up (this node always is).
func (n *Namespace) isUp(id string) bool {
	if id == n.id {
		return true
	}
	p := n.peer(id)
	return p != nil && p.Up
}

// leaderOf returns the node that leads shard: this node if it does, else
// the last leader a forwarded request revealed, else the Directory's; ""
// when unknown.
func (n *Namespace) leaderOf(shard string) string {
	if n.leads(shard) {
		return n.id
	}
	var known string
	if s := n.peers.Load().shard[shard]; s != nil {
		known = s.Leader
	}
	if v, ok := n.hints.Load(shard); ok {
		h := v.(leaderHint)
		if h.over == known {
			return h.leader
		}
		n.hints.CompareAndDelete(shard, v) // the Directory has news since
	}
	return known
}

// leaderHint is a shard's leader as a "not the leader" answer named it,
// more current than the Directory's over until the Directory changes.
type leaderHint struct{ leader, over string }

// learnLeader records leader as shard's leader (a hint from another node).
// A hint naming this node, which does not lead the shard, is stale: it is
// dropped.
func (n *Namespace) learnLeader(shard, leader string) {
	if leader == n.id {
		n.hints.Delete(shard)
		return
	}
	var known string
	if s := n.peers.Load().shard[shard]; s != nil {
		known = s.Leader
	}
	n.hints.Store(shard, leaderHint{leader: leader, over: known})
}

// shardUp reports whether shard's leader is known and up.
func (n *Namespace) shardUp(shard string) bool {
	l := n.leaderOf(shard)
	return l != "" && n.isUp(l)
}

// canFailOver reports whether shard may get a leader other than a dead
// one soon: a node that is up, other than its last known leader, hosts a
// replica of it; or no host of it is known yet and a node that may know
// its leader is up (askPeer) or this node hosts a replica of it (it has
// just started), or the shard itself is not known yet. (With one replica
// per shard, a shard whose node is down has no one to fail over to:
// requests for it answer at once.)
func (n *Namespace) canFailOver(shard string) bool {
	s := n.peers.Load().shard[shard]
	if n.hostsUnknown(shard) {
		// Not known at all yet (gossip brings a shard another node has
		// just created or taken to a new group within moments), or its
		// leader may be learned from a peer soon. A shard this node hosts
		// a replica of, with no other host known, is one it has just
		// started with: its replica learns the leader from Raft, and
		// gossip brings the other hosts up within moments.
		return s == nil || slices.Contains(s.Hosts, n.id) || n.askPeer(shard) != ""
	}
	for _, h := range s.Hosts {
		if h != s.Leader && n.isUp(h) {
			return true
		}
	}
	return false
}

// hostsUnknown reports whether this node knows of no replica of shard on
// another node: gossip has not brought the shard's hosts yet (a node that
// has just started or joined a group), as opposed to hosts that are known
// and down.
func (n *Namespace) hostsUnknown(shard string) bool {
	s := n.peers.Load().shard[shard]
	if s == nil {
		return true
	}
	for _, h := range s.Hosts {
		if h != n.id {
			return false
		}
	}
	return true
}

// askPeer returns a node to ask for shard's leader when no host of it is
// known (hostsUnknown): the node it is named after (which created it and
// usually still hosts it), else a random member of its group; up, not
// this one nor one of not; "" if there is none. The node asked serves the
// request if it leads the shard, or answers "not the leader" naming the
// leader it knows (its group's members know their shards from their FSM).
func (n *Namespace) askPeer(shard string, not ...string) string {
	ok := func(id string) bool { return id != n.id && !slices.Contains(not, id) && n.isUp(id) }
	if ok(shard) {
		return shard
	}
	s := n.peers.Load().shard[shard]
	if s == nil || s.Group == "" {
		return ""
	}
	var cands []string
	for _, p := range n.peers.Load().list {
		if p.Group == s.Group && ok(p.ID) {
			cands = append(cands, p.ID)
		}
	}
	if len(cands) == 0 {
		return ""
	}
	return cands[rand.IntN(len(cands))]
}

// otherHost returns a random node that is up, is not this one nor one of
// not, and hosts a replica of shard; "" if there is none.
func (n *Namespace) otherHost(shard string, not ...string) string {
	s := n.peers.Load().shard[shard]
	if s == nil {
		return ""
	}
	var cands []string
	for _, h := range s.Hosts {
		if h != n.id && !slices.Contains(not, h) && n.isUp(h) {
			cands = append(cands, h)
		}
	}
	if len(cands) == 0 {
		return ""
	}
	return cands[rand.IntN(len(cands))]
}

// addrOfShard returns the RPC address of shard's leader, or "".
func (n *Namespace) addrOfShard(shard string) string {
	if p := n.peer(n.leaderOf(shard)); p != nil {
		return p.RPCAddr
	}
	return ""
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

// routesAsHBA reports whether a lookup that its L1 and L2 arrays miss goes
// on to the authoritative step at once, without the L3 multicast: always
// with HBA, never with G-HBA, and with auto while this node holds a loaded
// replica of every other shard's local filter (its memory budget has room
// for them all: its L2 array then knows what the multicast would find; a
// stale replica is covered by the authoritative step, as with HBA). It
// walks the shards, so it is asked on a miss only, as the multicast would
// cost far more.
func (n *Namespace) routesAsHBA() bool {
	switch n.scheme {
	case SchemeHBA:
		return true
	case SchemeGHBA:
		return false
	}
	ps := n.peers.Load()
	if ps == nil || len(ps.shards) == 0 {
		return false
	}
	for _, s := range ps.shards {
		if n.leads(s.ID) {
			continue
		}
		if _, ok := n.prop.loaded.Load(s.ID); !ok {
			return false
		}
	}
	return true
}

// Routing returns the scheme this node routes with now: SchemeHBA or
// SchemeGHBA (with SchemeAuto, it depends on the replicas held; see
// routesAsHBA).
func (n *Namespace) Routing() string {
	if n.routesAsHBA() {
		return SchemeHBA
	}
	return SchemeGHBA
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
