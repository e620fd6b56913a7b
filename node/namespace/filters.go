package namespace

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/ghba/ghba/routing"
	"github.com/ghba/ghba/rpc"
)

// Filters (docs/design.md, "Filters"; HBA §4.2.2). Every shard has:
//   - its local filter: a counting Bloom filter of every path it homes,
//     which every replica of the shard maintains from the entries it
//     applies (Replica.TestKey, Replica.Filter);
//   - the LRU list of the paths its leader used recently and the LRU
//     filter over it (home.lru).
//
// Every node holds, for the shards it does not lead:
//   - the L1 array: every shard's LRU filter;
//   - the L2 array: replicas of shards' local filters: with HBA every
//     other shard's, with G-HBA the segment its group's FSM assigns this
//     node (wantsReplica decides which replicas this node keeps, l2Holders
//     who receives a shard's local filter, through the other groups'
//     IDBFAs: segments.go).
//
// Replicas are pulled in full (Filter.Pull, from the shard's leader) when a
// shard is first seen or its leader changes, and kept fresh by pushes from
// the shard's leader (Filter.Push): a delta when the share of changed bits
// passes propagate_threshold or when propagate_interval has passed since
// the last push with changes. A holder whose replica is not at a delta's
// base version refuses it and pulls the full filter. A new leader pushes
// its shard's full filters to every holder.

// propState is the node's side of propagation: what it pulls.
type propState struct {
	mu         sync.Mutex
	seenUp     map[string]bool   // node → up at the last sync
	lastLeader map[string]string // shard → its leader at the last sync
	pulling    map[string]bool   // origin/kind pulls in flight
	loaded     sync.Map          // origin → its local filter was loaded since it was added to L2
	terms      sync.Map          // origin → leadership term its pulled local filter came from
	snapshot   *peerSet          // peer set of the last sync
	sendMu     sync.Mutex        // one propagate at a time: pushes to a peer stay in order
	wake       chan struct{}     // wakes filterLoop for a sync (Lead, Unlead)
}

func (s *propState) init() {
	s.seenUp = make(map[string]bool)
	s.lastLeader = make(map[string]string)
	s.pulling = make(map[string]bool)
	s.wake = make(chan struct{}, 1)
}

// pushState is a home's side of propagation: what it sent.
type pushState struct {
	mu       sync.Mutex
	lastPush [2]time.Time         // by kind index
	needFull map[string][2]bool   // node → kinds to send in full next time
	fresh    bool                 // a new leadership: send everything in full
	subs     map[string]time.Time // node → last pull of the local filter (budget.go)
}

func (s *pushState) init() {
	s.needFull = make(map[string][2]bool)
	s.subs = make(map[string]time.Time)
	s.fresh = true
}

const (
	kindLocal = 0
	kindLRU   = 1
)

var kindNames = [2]string{filterLocal, filterLRU}

func kindIndex(k string) (int, bool) {
	switch k {
	case filterLocal:
		return kindLocal, true
	case filterLRU:
		return kindLRU, true
	}
	return 0, false
}

// touch records a use of a path of the shard on its LRU list.
func (h *home) touch(p string) {
	if h.r.rt.LRUEntries <= 0 {
		return
	}
	h.lruMu.Lock()
	if h.freq != nil {
		h.freq.Touch(p)
	} else {
		h.lru.Touch(p)
	}
	h.lruMu.Unlock()
}

// testKey tests k against the shard's LRU filter (inLRU) and local filter
// (inLocal, true too when inLRU).
func (h *home) testKey(k routing.Key) (inLRU, inLocal bool) {
	if h.r.rt.LRUEntries > 0 {
		h.lruMu.Lock()
		inLRU = h.lru.Filter().TestKey(k)
		h.lruMu.Unlock()
	}
	return inLRU, inLRU || h.rep.TestKey(k)
}

// withFilter runs fn with the shard's filter of kind k locked (the plain
// view of the local counting filter, or the LRU filter).
func (h *home) withFilter(k int, fn func(f *routing.Filter)) {
	if k == kindLocal {
		h.rep.Filter(func(cf *routing.CountingFilter) { fn(cf.Filter()) })
		return
	}
	h.lruMu.Lock()
	defer h.lruMu.Unlock()
	fn(h.lru.Filter())
}

// wantsReplica reports whether origin's local filter belongs in this
// node's L2 array: never for a shard it leads (it has the real filter);
// with G-HBA, when its group's FSM assigns origin to it or its memory
// budget makes room for it (budget.go; none while the assignment is not
// known: before the node joins a group, while it switches groups, while
// its group counts it failed; its lookups then go to L3 and L4); with HBA
// every other shard's does.
func (n *Namespace) wantsReplica(ps *peerSet, origin string) bool {
	return n.inSegment(ps, origin) || ps.extra[origin] && !n.leads(origin)
}

// inSegment reports whether origin's local filter is in this node's
// segment: with G-HBA assigned to it by its group's FSM, with HBA every
// other shard's (wantsReplica without the budget's extras).
func (n *Namespace) inSegment(ps *peerSet, origin string) bool {
	if ps.shard[origin] == nil || n.leads(origin) {
		return false
	}
	if ps.seg {
		return ps.held[origin]
	}
	return !n.segmented()
}

// Segment returns how many local-filter replicas belong in this node's
// segment (its G-HBA segment, or with HBA every other shard's) and how
// many of them have been loaded in full since they were added. While the
// node's group has not assigned it a segment, both are 0 and known is
// false. The extra replicas of the memory budget are not counted: routing
// is complete without them.
func (n *Namespace) Segment() (assigned, loaded int, known bool) {
	ps := n.peers.Load()
	if ps == nil || (n.segmented() && !ps.seg) {
		return 0, 0, false
	}
	for _, s := range ps.shards {
		if !n.inSegment(ps, s.ID) {
			continue
		}
		assigned++
		if _, ok := n.prop.loaded.Load(s.ID); ok {
			loaded++
		}
	}
	return assigned, loaded, true
}

// holdsReplica reports whether this node keeps a replica of origin's local
// filter in its L2 array (pushes of other origins are answered NotHolder:
// a false IDBFA hit at the origin).
func (n *Namespace) holdsReplica(origin string) bool {
	return n.wantsReplica(n.peers.Load(), origin)
}

// l2Holders returns the nodes that hold a replica of shard's local filter:
// with G-HBA, in each group other than the shard's, the member its IDBFA
// names (groups whose IDBFA is not known yet are skipped: their holder
// pulls the filter when assigned); with HBA every other node.
func (n *Namespace) l2Holders(ps *peerSet, shard string) []Peer {
	if !n.segmented() {
		return n.l1Holders(ps)
	}
	mine := n.dir.Self().Group
	if s := ps.shard[shard]; s != nil && s.Group != "" {
		mine = s.Group
	}
	var out []Peer
	done := map[string]bool{}
	for _, p := range ps.list {
		if p.Group == "" || p.Group == mine || done[p.Group] {
			continue
		}
		done[p.Group] = true
		ids, _ := n.holdersIn(p.Group, shard)
		for _, id := range ids {
			if h := ps.byID[id]; h != nil && h.ID != n.id && h.Up && h.RPCAddr != "" && h.Group == p.Group {
				out = append(out, *h)
			}
		}
	}
	return out
}

// l1Holders returns the nodes that hold a shard's LRU filter: every other
// node.
func (n *Namespace) l1Holders(ps *peerSet) []Peer {
	out := make([]Peer, 0, len(ps.list))
	for _, p := range ps.list {
		if p.ID != n.id && p.Up && p.RPCAddr != "" {
			out = append(out, p)
		}
	}
	return out
}

// ---- handlers ----

func (h *home) handleFilterPull(ctx context.Context, r *filterPullReq) (*filterPullResp, error) {
	k, ok := kindIndex(r.Kind)
	if !ok {
		return nil, fmt.Errorf("%w: unknown filter kind %q", rpc.ErrBadRequest, r.Kind)
	}
	if k == kindLocal && r.Holder != "" && r.Holder != h.r.id {
		h.subscribe(r.Holder)
	}
	resp := &filterPullResp{Origin: h.id, Kind: r.Kind, Term: h.term}
	h.withFilter(k, func(f *routing.Filter) {
		if r.Renew && r.HaveTerm == h.term && r.HaveVersion == f.Version() {
			resp.Unchanged = true
			return
		}
		resp.Data, resp.Version = f.AppendBinary(nil), f.Version()
	})
	if !resp.Unchanged {
		h.r.counters.pullsServed.Add(1)
	}
	return resp, nil
}

// handleFilters serves rpc.MethodFilters: the local filters of the shards
// this node leads, for a client that routes by them (rpc's filterRouter);
// the ones the client holds at the current term and version are answered
// unchanged.
func (n *Namespace) handleFilters(ctx context.Context, r *rpc.FiltersRequest) (*rpc.FiltersResponse, error) {
	have := make(map[string]rpc.FilterVersion, len(r.Have))
	for _, v := range r.Have {
		have[v.Shard] = v
	}
	resp := &rpc.FiltersResponse{NodeID: n.id}
	for _, h := range n.ledHomes() {
		sf := rpc.ShardFilter{FilterVersion: rpc.FilterVersion{Shard: h.id, Term: h.term}}
		h.withFilter(kindLocal, func(f *routing.Filter) {
			sf.Version = f.Version()
			if have[h.id] == sf.FilterVersion {
				sf.Unchanged = true
				return
			}
			sf.Data = f.AppendBinary(nil)
		})
		resp.Filters = append(resp.Filters, sf)
	}
	slices.SortFunc(resp.Filters, func(a, b rpc.ShardFilter) int { return strings.Compare(a.Shard, b.Shard) })
	return resp, nil
}

func (n *Namespace) handleFilterPush(ctx context.Context, r *filterPushReq) (*filterPushResp, error) {
	k, ok := kindIndex(r.Kind)
	if !ok {
		return nil, fmt.Errorf("%w: unknown filter kind %q", rpc.ErrBadRequest, r.Kind)
	}
	ps := n.peers.Load()
	if k == kindLocal && !n.holdsReplica(r.Origin) || k == kindLRU && (ps.shard[r.Origin] == nil || n.leads(r.Origin)) {
		return &filterPushResp{NotHolder: true}, nil
	}
	n.counters.pushesRecv.Add(1)
	arr := n.array(k)
	n.arrMu.Lock()
	if !arr.Has(r.Origin) {
		if err := arr.Add(r.Origin, routing.NewFilter(arr.Geometry())); err != nil {
			n.arrMu.Unlock()
			return nil, err
		}
	}
	var err error
	if r.Full {
		err = arr.ReplaceEncoded(r.Origin, r.Data)
	} else {
		err = arr.ApplyDelta(r.Origin, r.Data)
	}
	have, _ := arr.Version(r.Origin)
	n.arrMu.Unlock()
	switch {
	case err == nil:
		n.markLoaded(r.Origin, k)
		return &filterPushResp{Applied: true, HaveVersion: have}, nil
	case errors.Is(err, routing.ErrVersionMismatch):
		n.counters.mismatches.Add(1)
		n.pullAsync(r.Origin, k)
		return &filterPushResp{NeedFull: true, HaveVersion: have}, nil
	case errors.Is(err, routing.ErrCorrupt), errors.Is(err, routing.ErrGeometryMismatch):
		return nil, fmt.Errorf("%w: filter push for %s: %w", rpc.ErrBadRequest, r.Origin, err)
	}
	return nil, err
}

// array returns the filter array of kind k (L2 for local filters, L1 for
// LRU filters).
func (n *Namespace) array(k int) *routing.FilterArray {
	if k == kindLRU {
		return n.l1
	}
	return n.l2
}

// ---- pulls ----

// pullAsync pulls origin's filter of kind k in the background, once at a
// time per origin and kind.
func (n *Namespace) pullAsync(origin string, k int) {
	key := origin + "/" + kindNames[k]
	n.prop.mu.Lock()
	if n.prop.pulling[key] || n.ctx.Err() != nil {
		n.prop.mu.Unlock()
		return
	}
	n.prop.pulling[key] = true
	n.prop.mu.Unlock()
	done := func() {
		n.prop.mu.Lock()
		delete(n.prop.pulling, key)
		n.prop.mu.Unlock()
	}
	ok := n.tasks.Go(func() {
		defer done()
		ctx, cancel := context.WithTimeout(n.ctx, n.tune.PullTimeout)
		defer cancel()
		if err := n.pull(ctx, origin, k); err != nil {
			n.log.Debug("filter pull failed", "origin", origin, "kind", kindNames[k], "err", err)
		}
	})
	if !ok {
		done()
	}
}

// pull fetches origin's full filter of kind k from its leader into the
// array.
func (n *Namespace) pull(ctx context.Context, origin string, k int) error {
	n.counters.pullsSent.Add(1)
	req := &filterPullReq{shardReq: to(origin), Kind: kindNames[k]}
	if k == kindLocal {
		req.Holder = n.id
	}
	resp, err := callShard(ctx, n, origin, methodFilterPull, req, (*home).handleFilterPull)
	if err != nil {
		return err
	}
	return n.storePulled(origin, k, resp)
}

// storePulled puts a pulled filter of origin, of kind k, into its array
// (unless this node no longer keeps it, or a push of the same leadership
// has already brought a newer version).
func (n *Namespace) storePulled(origin string, k int, resp *filterPullResp) error {
	arr := n.array(k)
	n.arrMu.Lock()
	defer n.arrMu.Unlock()
	ps := n.peers.Load()
	if ps.shard[origin] == nil || n.leads(origin) || k == kindLocal && !n.holdsReplica(origin) {
		return nil // gone, led here, or assigned elsewhere meanwhile
	}
	if !arr.Has(origin) {
		if err := arr.Add(origin, routing.NewFilter(arr.Geometry())); err != nil {
			return err
		}
	}
	// Versions compare only within one leadership; a replica whose
	// leadership is not known yet (filled by pushes alone) counts as the
	// answer's.
	sameTerm := true
	if t, ok := n.prop.terms.Load(origin); ok && k == kindLocal {
		sameTerm = t.(uint64) == resp.Term
	}
	if cur, _ := arr.Version(origin); sameTerm && resp.Version < cur {
		// A push overtook the pull: the replica is newer than the answer.
		// (A new leader's versions start afresh, but the reset when the
		// leader changes empties the replica first.)
		n.markLoaded(origin, k)
		return nil
	}
	if err := arr.ReplaceEncoded(origin, resp.Data); err != nil {
		return err
	}
	if k == kindLocal {
		n.prop.terms.Store(origin, resp.Term)
	}
	n.markLoaded(origin, k)
	return nil
}

// markLoaded records that origin's local filter (k) has been loaded into
// the L2 array.
func (n *Namespace) markLoaded(origin string, k int) {
	if k == kindLocal {
		n.prop.loaded.Store(origin, true)
	}
}

// ---- pushes ----

// propagate pushes the filter changes of every shard this node leads.
func (n *Namespace) propagate(force bool) {
	n.prop.sendMu.Lock()
	defer n.prop.sendMu.Unlock()
	ps := n.peers.Load()
	for _, h := range n.ledHomes() {
		h.propagate(ps, force)
	}
}

// propagate pushes this shard's filter changes: a delta to every holder
// when the changed share passes the threshold or the interval has passed,
// the full filter to holders that need it.
func (h *home) propagate(ps *peerSet, force bool) {
	n := h.r
	for k := range 2 {
		var holders []Peer
		if k == kindLocal {
			holders = h.withSubscribers(ps, n.l2Holders(ps, h.id))
		} else {
			holders = n.l1Holders(ps)
		}
		h.push.mu.Lock()
		var full, rest []Peer
		for _, p := range holders {
			if h.push.fresh || h.push.needFull[p.ID][k] {
				full = append(full, p)
			} else {
				rest = append(rest, p)
			}
		}
		last := h.push.lastPush[k]
		h.push.mu.Unlock()
		if !force && len(full) == 0 && !h.pushDue(k, last) {
			continue
		}
		var delta, fullData []byte
		var base, ver uint64
		h.withFilter(k, func(f *routing.Filter) {
			if f.ChangedBits() > 0 {
				base = f.Version()
				delta = f.MarkDelta(nil)
			}
			ver = f.Version()
			if len(full) > 0 {
				fullData = f.AppendBinary(nil)
			}
		})
		h.push.mu.Lock()
		h.push.lastPush[k] = time.Now()
		for _, p := range full {
			nf := h.push.needFull[p.ID]
			nf[k] = false
			h.push.needFull[p.ID] = nf
		}
		h.push.mu.Unlock()
		var wg sync.WaitGroup
		send := func(p Peer, req *filterPushReq) {
			wg.Go(func() {
				ctx, cancel := context.WithTimeout(h.ctx, n.tune.PushTimeout)
				defer cancel()
				var resp filterPushResp
				n.counters.pushesSent.Add(1)
				n.counters.bytesSent.Add(uint64(len(req.Data)))
				err := n.cl.Call(ctx, p.RPCAddr, methodFilterPush, req, &resp)
				if err == nil && resp.NotHolder && k == kindLocal {
					h.unsubscribe(p.ID)
				}
				if err != nil || resp.NeedFull {
					// Send the full filter next time (the holder also
					// pulls it after a version mismatch).
					h.push.mu.Lock()
					nf := h.push.needFull[p.ID]
					nf[k] = true
					h.push.needFull[p.ID] = nf
					h.push.mu.Unlock()
				}
				if err != nil {
					n.counters.pushFails.Add(1)
					h.log.Debug("filter push failed", "to", p.ID, "kind", kindNames[k], "err", err)
				}
			})
		}
		for _, p := range full {
			send(p, &filterPushReq{Origin: h.id, Kind: kindNames[k], Full: true, Version: ver, Data: fullData})
		}
		if delta != nil {
			for _, p := range rest {
				send(p, &filterPushReq{Origin: h.id, Kind: kindNames[k], BaseVersion: base, Version: ver, Data: delta})
			}
		}
		wg.Wait()
	}
	h.push.mu.Lock()
	h.push.fresh = false
	h.push.mu.Unlock()
}

// needFullTo marks node to receive every filter of this shard in full.
func (h *home) needFullTo(node string) {
	h.push.mu.Lock()
	h.push.needFull[node] = [2]bool{true, true}
	h.push.mu.Unlock()
}

// pushDue reports whether filter k has changes to push now.
func (h *home) pushDue(k int, last time.Time) bool {
	due := false
	h.withFilter(k, func(f *routing.Filter) {
		due = f.ChangedBits() > 0 &&
			(f.ChangedFraction() >= h.r.rt.PropagateThreshold || time.Since(last) >= h.r.rt.PropagateInterval)
	})
	return due
}

// SyncFilters pushes every pending filter change now and waits for the
// pushes (tests and benchmarks use it to warm the replicas).
func (n *Namespace) SyncFilters() { n.propagate(true) }

// FilterSync describes how current a node's filters are: the filter
// versions of the shards it leads, whether changes wait to be pushed, and
// the versions of the replicas of other shards' filters it holds.
type FilterSync struct {
	// Local and LRU map each shard this node leads to its filter versions.
	Local, LRU map[string]uint64
	// Unpushed reports changes not yet pushed to the holders.
	Unpushed bool
	// L1 and L2 map each origin whose replica this node holds to the
	// replica's version (LRU filters in L1, local filters in L2).
	L1, L2 map[string]uint64
}

// FilterSync returns the state of this node's filters and replicas (tests
// wait on it; diagnostics show it).
func (n *Namespace) FilterSync() FilterSync {
	s := FilterSync{Local: map[string]uint64{}, LRU: map[string]uint64{}}
	for _, h := range n.ledHomes() {
		h.withFilter(kindLocal, func(f *routing.Filter) {
			s.Local[h.id] = f.Version()
			s.Unpushed = s.Unpushed || f.ChangedBits() != 0
		})
		h.withFilter(kindLRU, func(f *routing.Filter) {
			s.LRU[h.id] = f.Version()
			s.Unpushed = s.Unpushed || f.ChangedBits() != 0
		})
	}
	versions := func(a *routing.FilterArray) map[string]uint64 {
		m := make(map[string]uint64, a.Len())
		for _, id := range a.IDs() {
			m[id], _ = a.Version(id)
		}
		return m
	}
	n.arrMu.RLock()
	s.L1, s.L2 = versions(n.l1), versions(n.l2)
	n.arrMu.RUnlock()
	return s
}
