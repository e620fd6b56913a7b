package namespace

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/ghba/ghba/routing"
	"github.com/ghba/ghba/rpc"
)

// Routing state of a node (docs/design.md, "Filters"; HBA §4.2.2):
//   - the local filter: a counting Bloom filter of every path homed here
//     (rebuilt from the store at start, updated by every change);
//   - the LRU list of recently used local paths and its LRU filter;
//   - the L1 array: the LRU filters of the other nodes;
//   - the L2 array: replicas of other nodes' local filters: with HBA every
//     other node's, with G-HBA the segment the group's FSM assigns this
//     node (wantsReplica decides which replicas this node keeps, l2Holders
//     who receives this node's local filter, through the other groups'
//     IDBFAs: segments.go).
//
// Replicas are pulled in full (Filter.Pull) when a node is first seen or
// comes back up, and kept fresh by pushes (Filter.Push): a delta encoding
// when the share of changed bits passes propagate_threshold or when
// propagate_interval has passed since the last push with changes. A holder
// whose replica is not at a delta's base version refuses it and pulls the
// full filter. Nodes also push their full filters to every node at start.

// propState is the propagation bookkeeping.
type propState struct {
	sendMu   sync.Mutex // one propagate at a time: pushes to a peer stay in order
	mu       sync.Mutex
	lastPush [2]time.Time       // by kind index
	needFull map[string][2]bool // peer → kinds to send in full next time
	seenUp   map[string]bool    // peer → up at the last reconcile
	pulling  map[string]bool    // origin/kind pulls in flight
	loaded   sync.Map           // origin → its local filter was loaded (pull, full push or delta) since it was added to L2
	snapshot *peerSet           // peer set of the last reconcile
}

func (s *propState) init() {
	s.needFull = make(map[string][2]bool)
	s.seenUp = make(map[string]bool)
	s.pulling = make(map[string]bool)
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

// localAdd adds p to the local filter.
func (n *Namespace) localAdd(p string) {
	n.localMu.Lock()
	n.local.Add(p)
	n.localMu.Unlock()
}

// localRemove removes p (which was added) from the local filter and the
// LRU list.
func (n *Namespace) localRemove(p string) {
	n.localMu.Lock()
	n.local.Remove(p)
	n.localMu.Unlock()
	n.lruMu.Lock()
	n.lru.Remove(p)
	n.lruMu.Unlock()
}

// touch records a use of a local path on the LRU list.
func (n *Namespace) touch(p string) {
	if n.rt.LRUEntries <= 0 {
		return
	}
	n.lruMu.Lock()
	n.lru.Touch(p)
	n.lruMu.Unlock()
}

// selfTest tests this node's own live filters: inLRU (L1) and inLocal (L2).
func (n *Namespace) selfTest(k routing.Key) (inLRU, inLocal bool) {
	if n.rt.LRUEntries > 0 {
		n.lruMu.Lock()
		inLRU = n.lru.Filter().TestKey(k)
		n.lruMu.Unlock()
	}
	n.localMu.RLock()
	inLocal = inLRU || n.local.TestKey(k)
	n.localMu.RUnlock()
	return inLRU, inLocal
}

// wantsReplica reports whether origin's local filter belongs in this
// node's L2 array: with G-HBA, when its group's FSM assigns origin to it
// (none while the assignment is not known: before the node joins a group,
// while it switches groups, while its group counts it failed; its lookups
// then go to L3 and L4); with HBA every other node's does.
func (n *Namespace) wantsReplica(ps *peerSet, origin string) bool {
	if origin == n.id || ps.byID[origin] == nil {
		return false
	}
	if ps.seg {
		return ps.held[origin]
	}
	return !n.segmented()
}

// l2Holders returns the nodes that hold a replica of this node's local
// filter: with G-HBA, in each other group the member its IDBFA names
// (groups whose IDBFA is not known yet are skipped: their holder pulls
// the filter when assigned); with HBA every other node.
func (n *Namespace) l2Holders(ps *peerSet) []Peer {
	if !n.segmented() {
		return n.l1Holders(ps)
	}
	my := n.dir.Self().Group
	var out []Peer
	done := map[string]bool{}
	for _, p := range ps.list {
		if p.Group == "" || p.Group == my || done[p.Group] {
			continue
		}
		done[p.Group] = true
		ids, _ := n.holdersIn(p.Group)
		for _, id := range ids {
			if h := ps.byID[id]; h != nil && h.ID != n.id && h.Up && h.RPCAddr != "" && h.Group == p.Group {
				out = append(out, *h)
			}
		}
	}
	return out
}

// l1Holders returns the nodes that hold this node's LRU filter: all.
func (n *Namespace) l1Holders(ps *peerSet) []Peer {
	out := make([]Peer, 0, len(ps.list))
	for _, p := range ps.list {
		if p.ID != n.id && p.Up && p.RPCAddr != "" {
			out = append(out, p)
		}
	}
	return out
}

// holdsReplica reports whether this node keeps a replica of origin's local
// filter in its L2 array (pushes from other origins are answered
// NotHolder: a false IDBFA hit at the origin).
func (n *Namespace) holdsReplica(origin string) bool {
	return n.wantsReplica(n.peers.Load(), origin)
}

// ---- handlers ----

func (n *Namespace) handleFilterPull(ctx context.Context, r *filterPullReq) (*filterPullResp, error) {
	if r.Origin != "" && r.Origin != n.id {
		return nil, fmt.Errorf("%w: filter pull for %q sent to %s", rpc.ErrBadRequest, r.Origin, n.id)
	}
	k, ok := kindIndex(r.Kind)
	if !ok {
		return nil, fmt.Errorf("%w: unknown filter kind %q", rpc.ErrBadRequest, r.Kind)
	}
	data, ver := n.encodeFull(k)
	n.counters.pullsServed.Add(1)
	return &filterPullResp{Origin: n.id, Kind: r.Kind, Version: ver, Data: data}, nil
}

// encodeFull returns the full encoding of one of this node's filters (the
// plain view) and its version.
func (n *Namespace) encodeFull(k int) ([]byte, uint64) {
	if k == kindLocal {
		n.localMu.RLock()
		defer n.localMu.RUnlock()
		f := n.local.Filter()
		return f.AppendBinary(nil), f.Version()
	}
	n.lruMu.Lock()
	defer n.lruMu.Unlock()
	f := n.lru.Filter()
	return f.AppendBinary(nil), f.Version()
}

func (n *Namespace) handleFilterPush(ctx context.Context, r *filterPushReq) (*filterPushResp, error) {
	k, ok := kindIndex(r.Kind)
	if !ok {
		return nil, fmt.Errorf("%w: unknown filter kind %q", rpc.ErrBadRequest, r.Kind)
	}
	if k == kindLocal && !n.holdsReplica(r.Origin) || k == kindLRU && (r.Origin == n.id || n.peer(r.Origin) == nil) {
		return &filterPushResp{NotHolder: true}, nil
	}
	n.counters.pushesRecv.Add(1)
	arr := n.l2
	if k == kindLRU {
		arr = n.l1
	}
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
		return nil, fmt.Errorf("%w: filter push from %s: %w", rpc.ErrBadRequest, r.Origin, err)
	}
	return nil, err
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

// pull fetches origin's full filter of kind k into the array.
func (n *Namespace) pull(ctx context.Context, origin string, k int) error {
	var resp filterPullResp
	n.counters.pullsSent.Add(1)
	if err := n.call(ctx, origin, methodFilterPull, &filterPullReq{Origin: origin, Kind: kindNames[k]}, &resp); err != nil {
		return err
	}
	arr := n.l2
	if k == kindLRU {
		arr = n.l1
	}
	n.arrMu.Lock()
	defer n.arrMu.Unlock()
	if n.peer(origin) == nil || k == kindLocal && !n.holdsReplica(origin) {
		return nil // left, or assigned elsewhere, meanwhile
	}
	if !arr.Has(origin) {
		if err := arr.Add(origin, routing.NewFilter(arr.Geometry())); err != nil {
			return err
		}
	}
	if cur, _ := arr.Version(origin); resp.Version < cur {
		// A push overtook the pull: the replica is newer than the answer.
		// (A restarted origin's versions start again at 0, but its full
		// push at start and the reset on its return replace the replica.)
		n.markLoaded(origin, k)
		return nil
	}
	if err := arr.ReplaceEncoded(origin, resp.Data); err != nil {
		return err
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

// propagate pushes this node's filter changes: a delta to every holder
// when the changed share passes the threshold or the interval has passed,
// the full filter to holders that need it.
func (n *Namespace) propagate(force bool) {
	n.prop.sendMu.Lock()
	defer n.prop.sendMu.Unlock()
	ps := n.peers.Load()
	for k := range 2 {
		var holders []Peer
		if k == kindLocal {
			holders = n.l2Holders(ps)
		} else {
			holders = n.l1Holders(ps)
		}
		n.prop.mu.Lock()
		var full []Peer
		var rest []Peer
		for _, h := range holders {
			if n.prop.needFull[h.ID][k] {
				full = append(full, h)
			} else {
				rest = append(rest, h)
			}
		}
		last := n.prop.lastPush[k]
		n.prop.mu.Unlock()
		if !force && len(full) == 0 && !n.pushDue(k, last) {
			continue
		}
		var delta, fullData []byte
		var base, ver uint64
		n.lockKind(k)
		f := n.kindFilter(k)
		if f.ChangedBits() > 0 {
			base = f.Version()
			delta = f.MarkDelta(nil)
		}
		ver = f.Version()
		if len(full) > 0 {
			fullData = f.AppendBinary(nil)
		}
		n.unlockKind(k)
		n.prop.mu.Lock()
		n.prop.lastPush[k] = time.Now()
		for _, h := range full {
			nf := n.prop.needFull[h.ID]
			nf[k] = false
			n.prop.needFull[h.ID] = nf
		}
		n.prop.mu.Unlock()
		var wg sync.WaitGroup
		send := func(h Peer, req *filterPushReq) {
			wg.Go(func() {
				ctx, cancel := context.WithTimeout(n.ctx, n.tune.PushTimeout)
				defer cancel()
				var resp filterPushResp
				n.counters.pushesSent.Add(1)
				n.counters.bytesSent.Add(uint64(len(req.Data)))
				err := n.cl.Call(ctx, h.RPCAddr, methodFilterPush, req, &resp)
				if err != nil || resp.NeedFull {
					// Send the full filter next time (the holder also
					// pulls it after a version mismatch).
					n.prop.mu.Lock()
					nf := n.prop.needFull[h.ID]
					nf[k] = true
					n.prop.needFull[h.ID] = nf
					n.prop.mu.Unlock()
				}
				if err != nil {
					n.counters.pushFails.Add(1)
					n.log.Debug("filter push failed", "to", h.ID, "kind", kindNames[k], "err", err)
				}
			})
		}
		for _, h := range full {
			send(h, &filterPushReq{Origin: n.id, Kind: kindNames[k], Full: true, Version: ver, Data: fullData})
		}
		if delta != nil {
			for _, h := range rest {
				send(h, &filterPushReq{Origin: n.id, Kind: kindNames[k], BaseVersion: base, Version: ver, Data: delta})
			}
		}
		wg.Wait()
	}
}

// pushDue reports whether filter k has changes to push now.
func (n *Namespace) pushDue(k int, last time.Time) bool {
	n.lockKind(k)
	defer n.unlockKind(k)
	f := n.kindFilter(k)
	if f.ChangedBits() == 0 {
		return false
	}
	return f.ChangedFraction() >= n.rt.PropagateThreshold || time.Since(last) >= n.rt.PropagateInterval
}

func (n *Namespace) lockKind(k int) {
	if k == kindLocal {
		n.localMu.Lock()
	} else {
		n.lruMu.Lock()
	}
}

func (n *Namespace) unlockKind(k int) {
	if k == kindLocal {
		n.localMu.Unlock()
	} else {
		n.lruMu.Unlock()
	}
}

// kindFilter returns the plain view of filter k; callers hold its lock.
func (n *Namespace) kindFilter(k int) *routing.Filter {
	if k == kindLocal {
		return n.local.Filter()
	}
	return n.lru.Filter()
}

// SyncFilters pushes every pending filter change now and waits for the
// pushes (tests and benchmarks use it to warm the replicas).
func (n *Namespace) SyncFilters() { n.propagate(true) }

// FilterSync describes how current a node's filters are: its own filter
// versions, whether changes wait to be pushed, and the versions of the
// replicas of other nodes' filters it holds.
type FilterSync struct {
	// LocalVersion and LRUVersion are this node's filter versions.
	LocalVersion, LRUVersion uint64
	// Unpushed reports changes not yet pushed to the holders.
	Unpushed bool
	// L1 and L2 map each origin whose replica this node holds to the
	// replica's version (LRU filters in L1, local filters in L2).
	L1, L2 map[string]uint64
}

// FilterSync returns the state of this node's filters and replicas (tests
// wait on it; diagnostics show it).
func (n *Namespace) FilterSync() FilterSync {
	var s FilterSync
	n.localMu.RLock()
	s.LocalVersion = n.local.Filter().Version()
	s.Unpushed = n.local.Filter().ChangedBits() != 0
	n.localMu.RUnlock()
	n.lruMu.Lock()
	s.LRUVersion = n.lru.Filter().Version()
	s.Unpushed = s.Unpushed || n.lru.Filter().ChangedBits() != 0
	n.lruMu.Unlock()
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
