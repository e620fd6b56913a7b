package node

import (
	"context"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ghba/ghba/fsm"
	"github.com/ghba/ghba/node/namespace"
	"github.com/ghba/ghba/node/shard"
	"github.com/hashicorp/serf/serf"
)

// directory is the Node's namespace.Directory: the cluster as Serf and the
// group's FSM describe it. Peers are recomputed by refresh (on Serf events, FSM
// changes and periodically) and published atomically, so the Directory
// methods never block on the network.
type directory struct {
	n *Node

	refreshMu  sync.Mutex // serializes refresh
	peers      atomic.Pointer[[]namespace.Peer]
	shards     atomic.Pointer[[]namespace.ShardInfo]
	warnedRoot string // last conflicting root home logged; guarded by refreshMu
	lastHeld   string // heldKey of the last refresh; guarded by refreshMu

	rootMu      sync.Mutex
	root        rootRec
	rootLearned atomic.Bool // learned from Serf; not yet recorded and gossiped

	reapedMu sync.Mutex
	reaped   map[string]struct{}

	subsMu sync.Mutex
	subs   map[chan struct{}]struct{}
	closed bool
}

var (
	_ namespace.Directory = (*directory)(nil)
	_ namespace.Segments  = (*directory)(nil)
)

func newDirectory(n *Node) *directory {
	return &directory{n: n, reaped: make(map[string]struct{}), subs: make(map[chan struct{}]struct{})}
}

// Self returns this node.
func (d *directory) Self() namespace.Peer {
	n := d.n
	return namespace.Peer{
		ID:       n.cfg.NodeID,
		Group:    n.advertisedGroup(),
		RPCAddr:  n.addr(n.cfg.Ports.RPC),
		HTTPAddr: n.addr(n.cfg.Ports.HTTP),
		Up:       true,
		Leaving:  n.leaving.Load(),
	}
}

// Peers returns every known node that is a member of a group (and this
// node), sorted by ID. Nodes that left are not included; failed ones are,
// with Up false.
func (d *directory) Peers() []namespace.Peer {
	if p := d.peers.Load(); p != nil {
		return slices.Clone(*p)
	}
	return []namespace.Peer{d.Self()}
}

// RootShard returns the shard homing "/": the shard of the node that
// bootstrapped the cluster, as recorded in the store and gossiped in Serf
// tags (the newest epoch wins). "" until known.
func (d *directory) RootShard() string { return d.rootHint() }

// Shards returns every known shard with its group and leader, sorted by
// id.
func (d *directory) Shards() []namespace.ShardInfo {
	if p := d.shards.Load(); p != nil {
		return slices.Clone(*p)
	}
	return nil
}

// shard returns what the Directory knows of shard s; false when no node
// is known to host or lead it.
func (d *directory) shard(s string) (namespace.ShardInfo, bool) {
	if p := d.shards.Load(); p != nil {
		if i, ok := slices.BinarySearchFunc(*p, s, func(a namespace.ShardInfo, id string) int { return strings.Compare(a.ID, id) }); ok {
			return (*p)[i], true
		}
	}
	return namespace.ShardInfo{}, false
}

// shardLeader returns the node leading shard s as the Directory knows it,
// "" when unknown.
func (d *directory) shardLeader(s string) string {
	info, _ := d.shard(s)
	return info.Leader
}

// shardKnown reports whether any node is known to host or lead shard s.
func (d *directory) shardKnown(s string) bool {
	_, ok := d.shard(s)
	return ok
}

// nodeUp reports whether node id is known and up.
func (d *directory) nodeUp(id string) bool {
	if id == d.n.cfg.NodeID {
		return true
	}
	p, ok := d.peer(id)
	return ok && p.Up
}

// Subscribe returns a channel that receives a value whenever Peers or
// RootHome may have changed, and a function ending the subscription.
func (d *directory) Subscribe() (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	d.subsMu.Lock()
	if d.closed {
		d.subsMu.Unlock()
		close(ch)
		return ch, func() {}
	}
	d.subs[ch] = struct{}{}
	d.subsMu.Unlock()
	return ch, func() {
		d.subsMu.Lock()
		delete(d.subs, ch)
		d.subsMu.Unlock()
	}
}

// notify signals every subscriber without blocking.
func (d *directory) notify() {
	d.subsMu.Lock()
	defer d.subsMu.Unlock()
	for ch := range d.subs {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// closeSubscribers closes every subscription channel (the node stopped).
func (d *directory) closeSubscribers() {
	d.subsMu.Lock()
	defer d.subsMu.Unlock()
	if d.closed {
		return
	}
	d.closed = true
	for ch := range d.subs {
		close(ch)
	}
	clear(d.subs)
}

// rootRec is the root home with its epoch. The epoch grows each time "/"
// moves (a drain of its home), so that every node adopts the newest record
// whatever order gossip brings them in. Encoded "epoch/id" in Serf tags and
// in the store (ids cannot contain '/').
type rootRec struct {
	id    string
	epoch uint64
}

// String encodes r.
func (r rootRec) String() string {
	if r.id == "" {
		return ""
	}
	return strconv.FormatUint(r.epoch, 10) + "/" + r.id
}

// parseRoot decodes an encoded rootRec; a bare id has epoch 1.
func parseRoot(s string) (rootRec, bool) {
	e, id, ok := strings.Cut(s, "/")
	if !ok {
		return rootRec{id: s, epoch: 1}, s != ""
	}
	epoch, err := strconv.ParseUint(e, 10, 64)
	if err != nil || id == "" {
		return rootRec{}, false
	}
	return rootRec{id: id, epoch: epoch}, true
}

// newer reports whether r should replace cur.
func (r rootRec) newer(cur rootRec) bool {
	return r.id != "" && (cur.id == "" || r.epoch > cur.epoch)
}

// rootHint returns the root home known so far.
func (d *directory) rootHint() string { return d.rootRecord().id }

// rootRecord returns the root home record known so far.
func (d *directory) rootRecord() rootRec {
	d.rootMu.Lock()
	defer d.rootMu.Unlock()
	return d.root
}

// setRoot adopts r if it is newer than the known record; it reports
// whether it did.
func (d *directory) setRoot(r rootRec) bool {
	d.rootMu.Lock()
	defer d.rootMu.Unlock()
	if !r.newer(d.root) {
		return false
	}
	d.root = r
	return true
}

// noteReaped records a member Serf reaped, for the leader's reconcile.
func (d *directory) noteReaped(id string) {
	d.reapedMu.Lock()
	d.reaped[id] = struct{}{}
	d.reapedMu.Unlock()
}

// takeReaped returns and forgets the reaped members.
func (d *directory) takeReaped() []string {
	d.reapedMu.Lock()
	defer d.reapedMu.Unlock()
	out := make([]string, 0, len(d.reaped))
	for id := range d.reaped {
		out = append(out, id)
	}
	clear(d.reaped)
	slices.Sort(out)
	return out
}

// refresh recomputes the peers from Serf and the FSM, learns the root home
// from Serf tags if unknown, and notifies subscribers of changes. It may
// wait for Serf's member lock: never call it from the Serf event drainer.
func (d *directory) refresh() {
	d.refreshMu.Lock()
	defer d.refreshMu.Unlock()
	peers, rootVotes := d.compute()
	shards := d.computeShards(peers)
	changed := false
	if old := d.peers.Load(); old == nil || !slices.Equal(*old, peers) {
		d.peers.Store(&peers)
		changed = true
	}
	if old := d.shards.Load(); old == nil || !slices.EqualFunc(*old, shards, namespace.ShardInfo.Equal) {
		d.shards.Store(&shards)
		changed = true
	}
	if h := namespace.HeldKey(d.Held()); h != d.lastHeld {
		d.lastHeld = h // the group's FSM moved replicas to or from this node
		changed = true
	}
	cur := d.rootRecord()
	best, bestVotes := rootRec{}, 0
	for enc, v := range rootVotes {
		r, ok := parseRoot(enc)
		switch {
		case !ok:
		case r.newer(best), r.epoch == best.epoch && (v > bestVotes || v == bestVotes && r.id < best.id):
			best, bestVotes = r, v
		}
	}
	if d.setRoot(best) {
		changed = true
		d.n.log.Info("learned the root home", "root", best.id, "epoch", best.epoch)
		d.rootLearned.Store(true) // the refresher records and gossips it
		d.n.signalRefresh()
	} else if best.id != "" && best.epoch == cur.epoch && best.id != cur.id && d.warnedRoot != best.String() {
		d.warnedRoot = best.String()
		d.n.log.Error("other nodes name a different root home; were two clusters bootstrapped and joined?",
			"root", cur.id, "other", best.id, "epoch", cur.epoch)
	}
	if changed {
		d.notify()
	}
}

// compute builds the peer list and counts the root homes other members
// gossip.
func (d *directory) compute() ([]namespace.Peer, map[string]int) {
	n := d.n
	self := d.Self()
	byID := map[string]namespace.Peer{self.ID: self}
	votes := map[string]int{}
	myGroup := n.group()
	inGroup := func(id string) bool {
		f := n.groupFSM()
		if f == nil || !n.isJoined() {
			return false
		}
		_, ok := f.Member(id)
		return ok
	}
	if s := n.serfAgent(); s != nil {
		for _, m := range s.Members() {
			if m.Tags[tagRole] != roleGHBA || m.Name == self.ID {
				continue
			}
			if r := m.Tags[tagRoot]; r != "" && m.Status != serf.StatusLeft {
				votes[r]++
			}
			g := m.Tags[tagGroup]
			if g == "" && inGroup(m.Name) {
				g = myGroup // joined, but its new tags have not reached us yet
			}
			if m.Status == serf.StatusLeft || m.Status == serf.StatusNone || g == "" {
				continue
			}
			byID[m.Name] = namespace.Peer{
				ID:       m.Name,
				Group:    g,
				RPCAddr:  m.Tags[tagRPC],
				HTTPAddr: m.Tags[tagHTTP],
				Up:       m.Status == serf.StatusAlive || m.Status == serf.StatusLeaving,
				Leaving:  m.Status == serf.StatusLeaving || m.Tags[tagLeaving] == "1",
			}
		}
	}
	// Members of this node's group that Serf does not show (yet): the FSM
	// knows their addresses and whether they failed.
	if f := n.groupFSM(); f != nil && n.isJoined() {
		for _, m := range f.Members() {
			p, ok := byID[m.ID]
			if !ok {
				byID[m.ID] = namespace.Peer{
					ID: m.ID, Group: myGroup, RPCAddr: m.RPCAddr, HTTPAddr: m.HTTPAddr,
					Up:      m.Status != fsm.StatusFailed,
					Leaving: m.Status == fsm.StatusLeaving,
				}
				continue
			}
			if m.Status == fsm.StatusLeaving && !p.Leaving {
				p.Leaving = true
				byID[m.ID] = p
			}
		}
	}
	out := make([]namespace.Peer, 0, len(byID))
	for _, p := range byID {
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b namespace.Peer) int { return strings.Compare(a.ID, b.ID) })
	return out, votes
}

// computeShards builds the shard list: the shards of this node's group
// (its FSM), the shards other nodes host and lead (their Serf tags), and,
// for the shards this node hosts, the leader its replica knows (more
// current than gossip). A leader that is down, or claims a shard while
// another node's replica knows better, is not taken.
func (d *directory) computeShards(peers []namespace.Peer) []namespace.ShardInfo {
	n := d.n
	up := map[string]namespace.Peer{}
	for _, p := range peers {
		up[p.ID] = p
	}
	byID := map[string]*namespace.ShardInfo{}
	get := func(id, group string) *namespace.ShardInfo {
		s := byID[id]
		if s == nil {
			s = &namespace.ShardInfo{ID: id, Group: group}
			byID[id] = s
		}
		if s.Group == "" {
			s.Group = group
		}
		return s
	}
	if f := n.groupFSM(); f != nil && n.isJoined() {
		for _, sh := range f.Shards() {
			get(sh.ID, n.group())
		}
	}
	if sa := n.serfAgent(); sa != nil {
		for _, m := range sa.Members() {
			p, ok := up[m.Name]
			if m.Tags[tagRole] != roleGHBA || !ok {
				continue
			}
			for _, id := range parseShardsTag(m.Tags[tagHost]) {
				s := get(id, p.Group)
				if !slices.Contains(s.Hosts, m.Name) {
					s.Hosts = append(s.Hosts, m.Name)
				}
			}
			for _, id := range parseShardsTag(m.Tags[tagLead]) {
				if s := get(id, p.Group); p.Up && (s.Leader == "" || m.Name < s.Leader) {
					s.Leader = m.Name
				}
			}
		}
	}
	if n.shards != nil {
		for id, r := range n.shards.all() {
			s := get(id, n.group())
			if !slices.Contains(s.Hosts, n.cfg.NodeID) {
				s.Hosts = append(s.Hosts, n.cfg.NodeID)
			}
			if r.leading.Load() {
				s.Leader = n.cfg.NodeID
			} else if l, _ := r.rep.Leader(); l != "" && (shard.NodeOf(l) == n.cfg.NodeID || up[shard.NodeOf(l)].Up) {
				s.Leader = shard.NodeOf(l)
			} else if s.Leader == n.cfg.NodeID {
				s.Leader = "" // gossip of this node's own past leadership
			}
		}
	}
	out := make([]namespace.ShardInfo, 0, len(byID))
	for _, s := range byID {
		slices.Sort(s.Hosts)
		out = append(out, *s)
	}
	slices.SortFunc(out, func(a, b namespace.ShardInfo) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// rpcAddrOf returns the RPC address of node id, "" if unknown.
func (d *directory) rpcAddrOf(id string) string {
	for _, p := range d.Peers() {
		if p.ID == id {
			return p.RPCAddr
		}
	}
	return ""
}

// groupRPCAddrs returns the RPC addresses of the members of group g that
// are up, in random order.
func (d *directory) groupRPCAddrs(g string) []string {
	var out []string
	self := d.n.cfg.NodeID
	for _, p := range d.Peers() {
		if p.Group == g && p.Up && p.ID != self && p.RPCAddr != "" {
			out = append(out, p.RPCAddr)
		}
	}
	rand.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

// groupSizes counts the members of each group among the peers (failed
// ones too: they keep their seat until removed), excluding this node.
func (d *directory) groupSizes() map[string]int {
	sizes := map[string]int{}
	self := d.n.cfg.NodeID
	for _, p := range d.Peers() {
		if p.ID != self && p.Group != "" {
			sizes[p.Group]++
		}
	}
	return sizes
}

// pickGroup chooses the group an auto node joins: the one with the fewest
// members below maxSize (ties: by name). With every group full it returns
// splitterGroup's choice: that group's leader splits it and redirects the
// joiner to the new group (see reshape.go). "" when no group is visible.
func (d *directory) pickGroup(maxSize int) string {
	best, bestN := "", 0
	for g, k := range d.groupSizes() {
		if k < maxSize && (best == "" || k < bestN || k == bestN && g < best) {
			best, bestN = g, k
		}
	}
	if best != "" {
		return best
	}
	return d.splitterGroup()
}

// splitterGroup returns the group whose leader splits when every group is
// full: the first by name; "" when no group is visible. All joiners ask
// the same leader, so that splits happen one after another (each waits for
// the one before to finish): two leaders splitting at once would found
// more groups than needed, groups too large to merge (9 nodes,
// max_group_size 3: 3+2+2+2).
//
// Not the smallest full group: a group that is being split, and has taken
// in a joiner meanwhile, shows more than max_group_size members until
// gossip tells that its movers left (they keep its tag for a moment), and
// the smallest group would then be another one, whose leader would split
// too. The group sizes are only asked whether every group is full.
func (d *directory) splitterGroup() string {
	best := d.n.group()
	if best == "" || !d.n.isJoined() {
		best = ""
	}
	for g := range d.groupSizes() {
		if best == "" || g < best {
			best = g
		}
	}
	return best
}

// refresher recomputes the Directory on signals (Serf events, FSM
// changes) and periodically (Serf events coalesce).
func (n *Node) refresher() {
	t := time.NewTicker(n.tune.RefreshInterval)
	defer t.Stop()
	for {
		select {
		case <-n.bgCtx.Done():
			return
		case <-n.refreshCh:
		case <-t.C:
		}
		n.dir.refresh()
		if n.dir.rootLearned.CompareAndSwap(true, false) {
			n.recordRoot()
		}
		n.checkOrphaned()
	}
}

// recordRoot stores the root home in the store and gossips it.
func (n *Node) recordRoot() {
	root := n.dir.rootRecord()
	ctx, cancel := context.WithTimeout(n.bgCtx, 10*time.Second)
	defer cancel()
	if err := n.store.SetMeta(ctx, metaRoot, []byte(root.String())); err != nil {
		n.log.Warn("recording the root home", "err", err)
	}
	if err := n.updateTags(); err != nil {
		n.log.Warn("updating serf tags", "err", err)
	}
}

// signalRefresh asks the refresher to recompute the Directory soon.
func (n *Node) signalRefresh() {
	select {
	case n.refreshCh <- struct{}{}:
	default:
	}
}

// hintTarget returns the group h points at, if it is visible with room:
// h.group, or the group h.via gossips (not h.from). spent reports a hint
// that can no longer be followed: the group it names is visible and full
// (other joiners filled it first), so waiting for it is pointless.
func (d *directory) hintTarget(h joinHint, maxSize int) (target string, spent bool) {
	sizes := d.groupSizes()
	if k, ok := sizes[h.group]; ok && h.group != h.from {
		if k < maxSize {
			return h.group, false
		}
		return "", true
	}
	if h.via != "" && h.via != d.n.cfg.NodeID {
		if p, ok := d.peer(h.via); ok && p.Group != "" && p.Group != h.from && p.Up {
			if sizes[p.Group] < maxSize {
				return p.Group, false
			}
			return "", true
		}
	}
	return "", false
}

// peer returns node id from the peer list.
func (d *directory) peer(id string) (namespace.Peer, bool) {
	for _, p := range d.Peers() {
		if p.ID == id {
			return p, true
		}
	}
	return namespace.Peer{}, false
}

// incarnationOf returns the incarnation of node id's data directory (its
// Serf tag), "" when unknown.
func (d *directory) incarnationOf(id string) string {
	if id == d.n.cfg.NodeID {
		return d.n.incarnation
	}
	if sa := d.n.serfAgent(); sa != nil {
		for _, m := range sa.Members() {
			if m.Name == id && m.Tags[tagRole] == roleGHBA {
				return m.Tags[tagInc]
			}
		}
	}
	return ""
}

// Held implements Segments.
func (d *directory) Held() ([]string, bool) {
	n := d.n
	f := n.groupFSM()
	if f == nil || !n.isJoined() || !f.Bootstrapped() {
		return nil, false
	}
	m, ok := f.Member(n.cfg.NodeID)
	if !ok || m.Status != fsm.StatusActive {
		return nil, false
	}
	return f.Held(n.cfg.NodeID), true
}

// IDBFA implements Segments.
func (d *directory) IDBFA() ([]byte, uint64, bool) {
	n := d.n
	f := n.groupFSM()
	if f == nil || !n.isJoined() || !f.Bootstrapped() {
		return nil, 0, false
	}
	data, ver := f.IDBFA()
	return data, ver, data != nil
}
