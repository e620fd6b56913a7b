package namespace

import (
	"context"
	"fmt"
	mrand "math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/ghba/ghba/routing"
	"github.com/ghba/ghba/rpc"
)

// G-HBA segments (docs/design.md, "Filters"; G-HBA §2.2–§2.4).
//
// Each group's FSM assigns every node outside the group to exactly one
// active member, the holder of that origin's local-filter replica. A
// member's L2 array holds the replicas assigned to it: its segment. The
// group's IDBFA, one counting filter of origin ids per member, follows
// from the assignment; every member serves it (methodIDBFA), and an origin
// fetches the IDBFA of each other group and sends its filter changes to
// the member it names. A false IDBFA hit costs one dropped update (the
// member answers NotHolder), as in the paper; a holder that missed updates
// finds a version gap at the next delta and pulls the full filter.

// idbfaCache holds the IDBFAs of the other groups, as fetched from one of
// their members.
type idbfaCache struct {
	mu     sync.Mutex
	groups map[string]*groupIDBFA
}

type groupIDBFA struct {
	version uint64
	x       *routing.IDBFA
	fetched time.Time
}

// holdersIn returns the members of group g that its IDBFA names as the
// holder of shard's replica (usually one; more on a false positive), and
// false when g's IDBFA is not known yet.
func (n *Namespace) holdersIn(g, shard string) ([]string, bool) {
	n.idb.mu.Lock()
	defer n.idb.mu.Unlock()
	e := n.idb.groups[g]
	if e == nil || e.x == nil {
		return nil, false
	}
	return e.x.Positives(shard, nil), true
}

// refreshIDBFAs fetches the IDBFA of every other group whose version
// changed, from one live member of it, and drops groups that are gone.
// It reports whether any group's IDBFA changed.
func (n *Namespace) refreshIDBFAs(ctx context.Context) bool {
	ps := n.peers.Load()
	my := n.dir.Self().Group
	members := map[string][]Peer{}
	for _, p := range ps.list {
		if p.Group != "" && p.Group != my && p.Up && p.RPCAddr != "" {
			members[p.Group] = append(members[p.Group], p)
		}
	}
	changed := false
	n.idb.mu.Lock()
	if n.idb.groups == nil {
		n.idb.groups = map[string]*groupIDBFA{}
	}
	for g := range n.idb.groups {
		if _, ok := members[g]; !ok && ps.groupGone(g) {
			delete(n.idb.groups, g)
			changed = true
		}
	}
	have := map[string]uint64{}
	for g, e := range n.idb.groups {
		have[g] = e.version
	}
	n.idb.mu.Unlock()
	// The groups are asked in parallel, so that one slow group does not
	// delay the others (nor the maintenance loop this runs in).
	var wg sync.WaitGroup
	var changedMu sync.Mutex
	for g, ms := range members {
		wg.Go(func() {
			if n.fetchIDBFA(ctx, g, ms, have[g]) {
				changedMu.Lock()
				changed = true
				changedMu.Unlock()
			}
		})
	}
	wg.Wait()
	return changed
}

// fetchIDBFA asks the members ms of group g, one after another until one
// answers, for g's IDBFA if newer than version have, and caches it; it
// reports whether the cached IDBFA changed. An
// older version (a member that lags its group's log) is ignored unless it
// comes from a member the cached IDBFA does not know: then the group was
// formed again under the same name and its versions started afresh.
func (n *Namespace) fetchIDBFA(ctx context.Context, g string, ms []Peer, have uint64) bool {
	for _, i := range mrand.Perm(len(ms)) {
		cctx, cancel := context.WithTimeout(ctx, n.tune.PeerTimeout)
		var resp idbfaResp
		err := n.cl.Call(cctx, ms[i].RPCAddr, methodIDBFA, &idbfaReq{HaveVersion: have}, &resp)
		cancel()
		if err != nil || resp.Group != g {
			continue // not a member any more, or down: try another
		}
		if resp.Unchanged {
			return false
		}
		x, err := routing.DecodeIDBFA(resp.Data)
		if err != nil {
			n.log.Warn("bad IDBFA", "group", g, "from", ms[i].ID, "err", err)
			continue
		}
		n.idb.mu.Lock()
		cur := n.idb.groups[g]
		replace := cur == nil || resp.Version >= cur.version || !slices.Contains(cur.x.Members(), ms[i].ID)
		if replace {
			n.idb.groups[g] = &groupIDBFA{version: resp.Version, x: x, fetched: time.Now()}
		}
		n.idb.mu.Unlock()
		return replace
	}
	return false
}

func (n *Namespace) handleIDBFA(ctx context.Context, r *idbfaReq) (*idbfaResp, error) {
	seg, ok := n.dir.(Segments)
	if !ok {
		return nil, fmt.Errorf("%w: %s keeps no IDBFA", rpc.ErrUnavailable, n.id)
	}
	data, ver, ok := seg.IDBFA()
	if !ok {
		return nil, fmt.Errorf("%w: %s has no group assignment yet", rpc.ErrUnavailable, n.id)
	}
	resp := &idbfaResp{Group: n.dir.Self().Group, Version: ver}
	if r.HaveVersion == ver && ver != 0 {
		resp.Unchanged = true
		return resp, nil
	}
	resp.Data = data
	return resp, nil
}

// retryEmptyReplicas pulls again every assigned replica that no pull has
// filled yet (the pull at assignment failed, and a quiet origin sends no
// delta that would reveal the gap).
func (n *Namespace) retryEmptyReplicas() {
	ps := n.peers.Load()
	if !ps.seg {
		return
	}
	for id := range ps.held {
		if _, ok := n.prop.loaded.Load(id); !ok && n.shardUp(id) {
			n.pullAsync(id, kindLocal)
		}
	}
}

// syncHolders refreshes the other groups' IDBFAs (G-HBA only) and marks
// every newly named holder of a replica of a shard this node leads to
// receive the full filter at the next propagation.
func (n *Namespace) syncHolders() {
	if !n.segmented() {
		return
	}
	homes := n.ledHomes()
	ps := n.peers.Load()
	before := make([]map[string]bool, len(homes))
	for i, h := range homes {
		before[i] = map[string]bool{}
		for _, p := range n.l2Holders(ps, h.id) {
			before[i][p.ID] = true
		}
	}
	n.retryEmptyReplicas()
	if !n.refreshIDBFAs(n.ctx) {
		return
	}
	ps = n.peers.Load()
	for i, h := range homes {
		for _, p := range n.l2Holders(ps, h.id) {
			if !before[i][p.ID] {
				h.push.mu.Lock()
				nf := h.push.needFull[p.ID]
				nf[kindLocal] = true
				h.push.needFull[p.ID] = nf
				h.push.mu.Unlock()
			}
		}
	}
}
