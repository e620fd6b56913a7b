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
	"github.com/hashicorp/serf/serf"
)

// cluster is the Node's Directory: the cluster as Serf and the group's FSM
// describe it. Peers are recomputed by refresh (on Serf events, FSM
// changes and periodically) and published atomically, so the Directory
// methods never block on the network.
type cluster struct {
	n *Node

	refreshMu  sync.Mutex // serializes refresh
	peers      atomic.Pointer[[]Peer]
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
	_ Directory = (*cluster)(nil)
	_ Segments  = (*cluster)(nil)
)

func newCluster(n *Node) *cluster {
	return &cluster{n: n, reaped: make(map[string]struct{}), subs: make(map[chan struct{}]struct{})}
}

// Self returns this node.
func (c *cluster) Self() Peer {
	n := c.n
	return Peer{
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
func (c *cluster) Peers() []Peer {
	if p := c.peers.Load(); p != nil {
		return slices.Clone(*p)
	}
	return []Peer{c.Self()}
}

// RootHome returns the id of the node homing "/": the node that
// bootstrapped the cluster, or the node that received "/" when its home
// left, as recorded in the store and gossiped in Serf tags (the newest
// epoch wins). "" until known.
func (c *cluster) RootHome() string { return c.rootHint() }

// Subscribe returns a channel that receives a value whenever Peers or
// RootHome may have changed, and a function ending the subscription.
func (c *cluster) Subscribe() (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	c.subsMu.Lock()
	if c.closed {
		c.subsMu.Unlock()
		close(ch)
		return ch, func() {}
	}
	c.subs[ch] = struct{}{}
	c.subsMu.Unlock()
	return ch, func() {
		c.subsMu.Lock()
		delete(c.subs, ch)
		c.subsMu.Unlock()
	}
}

// notify signals every subscriber without blocking.
func (c *cluster) notify() {
	c.subsMu.Lock()
	defer c.subsMu.Unlock()
	for ch := range c.subs {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// closeSubscribers closes every subscription channel (the node stopped).
func (c *cluster) closeSubscribers() {
	c.subsMu.Lock()
	defer c.subsMu.Unlock()
	if c.closed {
		return
	}
	c.closed = true
	for ch := range c.subs {
		close(ch)
	}
	clear(c.subs)
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
func (c *cluster) rootHint() string { return c.rootRecord().id }

// rootRecord returns the root home record known so far.
func (c *cluster) rootRecord() rootRec {
	c.rootMu.Lock()
	defer c.rootMu.Unlock()
	return c.root
}

// setRoot adopts r if it is newer than the known record; it reports
// whether it did.
func (c *cluster) setRoot(r rootRec) bool {
	c.rootMu.Lock()
	defer c.rootMu.Unlock()
	if !r.newer(c.root) {
		return false
	}
	c.root = r
	return true
}

// noteReaped records a member Serf reaped, for the leader's reconcile.
func (c *cluster) noteReaped(id string) {
	c.reapedMu.Lock()
	c.reaped[id] = struct{}{}
	c.reapedMu.Unlock()
}

// takeReaped returns and forgets the reaped members.
func (c *cluster) takeReaped() []string {
	c.reapedMu.Lock()
	defer c.reapedMu.Unlock()
	out := make([]string, 0, len(c.reaped))
	for id := range c.reaped {
		out = append(out, id)
	}
	clear(c.reaped)
	slices.Sort(out)
	return out
}

// refresh recomputes the peers from Serf and the FSM, learns the root home
// from Serf tags if unknown, and notifies subscribers of changes. It may
// wait for Serf's member lock: never call it from the Serf event drainer.
func (c *cluster) refresh() {
	c.refreshMu.Lock()
	defer c.refreshMu.Unlock()
	peers, rootVotes := c.compute()
	changed := false
	if old := c.peers.Load(); old == nil || !slices.Equal(*old, peers) {
		c.peers.Store(&peers)
		changed = true
	}
	if h := heldKey(c.Held()); h != c.lastHeld {
		c.lastHeld = h // the group's FSM moved replicas to or from this node
		changed = true
	}
	cur := c.rootRecord()
	best, bestVotes := rootRec{}, 0
	for enc, v := range rootVotes {
		r, ok := parseRoot(enc)
		switch {
		case !ok:
		case r.newer(best), r.epoch == best.epoch && (v > bestVotes || v == bestVotes && r.id < best.id):
			best, bestVotes = r, v
		}
	}
	if c.setRoot(best) {
		changed = true
		c.n.log.Info("learned the root home", "root", best.id, "epoch", best.epoch)
		c.rootLearned.Store(true) // the refresher records and gossips it
		c.n.signalRefresh()
	} else if best.id != "" && best.epoch == cur.epoch && best.id != cur.id && c.warnedRoot != best.String() {
		c.warnedRoot = best.String()
		c.n.log.Error("other nodes name a different root home; were two clusters bootstrapped and joined?",
			"root", cur.id, "other", best.id, "epoch", cur.epoch)
	}
	if changed {
		c.notify()
	}
}

// compute builds the peer list and counts the root homes other members
// gossip.
func (c *cluster) compute() ([]Peer, map[string]int) {
	n := c.n
	self := c.Self()
	byID := map[string]Peer{self.ID: self}
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
			byID[m.Name] = Peer{
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
				byID[m.ID] = Peer{
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
	out := make([]Peer, 0, len(byID))
	for _, p := range byID {
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b Peer) int { return strings.Compare(a.ID, b.ID) })
	return out, votes
}

// rpcAddrOf returns the RPC address of node id, "" if unknown.
func (c *cluster) rpcAddrOf(id string) string {
	for _, p := range c.Peers() {
		if p.ID == id {
			return p.RPCAddr
		}
	}
	return ""
}

// groupRPCAddrs returns the RPC addresses of the members of group g that
// are up, in random order.
func (c *cluster) groupRPCAddrs(g string) []string {
	var out []string
	self := c.n.cfg.NodeID
	for _, p := range c.Peers() {
		if p.Group == g && p.Up && p.ID != self && p.RPCAddr != "" {
			out = append(out, p.RPCAddr)
		}
	}
	rand.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

// groupSizes counts the members of each group among the peers (failed
// ones too: they keep their seat until removed), excluding this node.
func (c *cluster) groupSizes() map[string]int {
	sizes := map[string]int{}
	self := c.n.cfg.NodeID
	for _, p := range c.Peers() {
		if p.ID != self && p.Group != "" {
			sizes[p.Group]++
		}
	}
	return sizes
}

// pickGroup chooses the group an auto node joins: the one with the fewest
// members below maxSize (ties: by name). With every group full it returns
// the smallest one anyway: its leader then splits it and redirects the
// joiner to the new group (see group.go). "" when no group is visible.
func (c *cluster) pickGroup(maxSize int) string {
	best, bestN := "", 0
	full, fullN := "", 0
	for g, k := range c.groupSizes() {
		if k < maxSize {
			if best == "" || k < bestN || k == bestN && g < best {
				best, bestN = g, k
			}
		} else if full == "" || k < fullN || k == fullN && g < full {
			full, fullN = g, k
		}
	}
	if best != "" {
		return best
	}
	return full
}

// refresher recomputes the Directory on signals (Serf events, FSM
// changes) and periodically (Serf events coalesce).
func (n *Node) refresher() {
	defer n.bgWG.Done()
	t := time.NewTicker(n.tune.refreshInterval)
	defer t.Stop()
	for {
		select {
		case <-n.bgCtx.Done():
			return
		case <-n.refreshCh:
		case <-t.C:
		}
		n.cluster.refresh()
		if n.cluster.rootLearned.CompareAndSwap(true, false) {
			n.recordRoot()
		}
		n.checkOrphaned()
	}
}

// recordRoot stores the root home in the store and gossips it.
func (n *Node) recordRoot() {
	root := n.cluster.rootRecord()
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
