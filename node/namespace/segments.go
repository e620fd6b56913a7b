package node

import (
	"context"
	"fmt"
	mrand "math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/ghba/ghba/fsm"
	"github.com/ghba/ghba/routing"
	"github.com/ghba/ghba/rpc"
)

// G-HBA segments (DESIGN §3, G-HBA §2.2–§2.4).
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

// methodIDBFA returns the IDBFA of the serving node's group.
const methodIDBFA = "Group.IDBFA"

// idbfaReq asks for a group's IDBFA unless the caller has HaveVersion.
type idbfaReq struct {
	HaveVersion uint64 `json:"have_version"`
}

// idbfaResp carries the group's IDBFA (Data empty when Unchanged).
type idbfaResp struct {
	Group     string `json:"group"`
	Version   uint64 `json:"version"`
	Unchanged bool   `json:"unchanged,omitempty"`
	Data      []byte `json:"data,omitempty"`
}

// Held implements Segments.
func (c *cluster) Held() ([]string, bool) {
	n := c.n
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
func (c *cluster) IDBFA() ([]byte, uint64, bool) {
	n := c.n
	f := n.groupFSM()
	if f == nil || !n.isJoined() || !f.Bootstrapped() {
		return nil, 0, false
	}
	data, ver := f.IDBFA()
	return data, ver, data != nil
}

// heldKey is a comparable summary of the held set (refresh notifies the
// namespace when it changes).
func heldKey(held []string, ok bool) string {
	if !ok {
		return "\x00unknown"
	}
	return strings.Join(held, ",")
}

// segmented reports whether this namespace routes with G-HBA segments:
// the scheme is ghba and the Directory knows the assignment.
func (n *Namespace) segmented() bool {
	if n.cfg.Scheme == SchemeHBA {
		return false
	}
	_, ok := n.dir.(Segments)
	return ok
}

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
// holder of this node's replica (usually one; more on a false positive),
// and false when g's IDBFA is not known yet.
func (n *Namespace) holdersIn(g string) ([]string, bool) {
	n.idb.mu.Lock()
	defer n.idb.mu.Unlock()
	e := n.idb.groups[g]
	if e == nil || e.x == nil {
		return nil, false
	}
	return e.x.Positives(n.id, nil), true
}

// refreshIDBFAs fetches the IDBFA of every other group whose version
// changed, from one live member of it, and drops groups that are gone.
// It reports whether any group's holders of this node's replica changed.
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
			before, _ := n.holdersIn(g)
			n.fetchIDBFA(ctx, g, ms, have[g])
			after, _ := n.holdersIn(g)
			if !slices.Equal(before, after) {
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
// answers, for g's IDBFA if newer than version have, and caches it. An
// older version (a member that lags its group's log) is ignored unless it
// comes from a member the cached IDBFA does not know: then the group was
// formed again under the same name and its versions started afresh.
func (n *Namespace) fetchIDBFA(ctx context.Context, g string, ms []Peer, have uint64) {
	for _, i := range randPerm(len(ms)) {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		var resp idbfaResp
		err := n.cl.Call(cctx, ms[i].RPCAddr, methodIDBFA, &idbfaReq{HaveVersion: have}, &resp)
		cancel()
		if err != nil || resp.Group != g {
			continue // not a member any more, or down: try another
		}
		if resp.Unchanged {
			return
		}
		x, err := routing.DecodeIDBFA(resp.Data)
		if err != nil {
			n.log.Warn("bad IDBFA", "group", g, "from", ms[i].ID, "err", err)
			continue
		}
		n.idb.mu.Lock()
		cur := n.idb.groups[g]
		if cur == nil || resp.Version >= cur.version || !slices.Contains(cur.x.Members(), ms[i].ID) {
			n.idb.groups[g] = &groupIDBFA{version: resp.Version, x: x, fetched: time.Now()}
		}
		n.idb.mu.Unlock()
		return
	}
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

// l3 is the group multicast (DESIGN §3 step 3): every other live member
// of this node's group tests p against its segment and its own local
// filter; with this node's own answer, exactly one positive names the
// home to verify. It returns the unique positive ("" for none or several)
// and the number of RPCs sent.
func (n *Namespace) l3(ctx context.Context, p string, k routing.Key, skip []string) (string, int) {
	ps := n.peers.Load()
	my := n.dir.Self().Group
	var mates []Peer
	for _, m := range ps.list {
		if m.ID != n.id && m.Group == my && m.Up && m.RPCAddr != "" {
			mates = append(mates, m)
		}
	}
	if len(mates) == 0 {
		return "", 0
	}
	positives := map[string]bool{}
	n.arrMu.RLock()
	for _, id := range n.l2.Positives(k, nil) {
		positives[id] = true
	}
	n.arrMu.RUnlock()
	if _, in := n.selfTest(k); in {
		positives[n.id] = true
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, m := range mates {
		wg.Go(func() {
			cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			var resp rpc.L3QueryResponse
			if err := n.cl.Call(cctx, m.RPCAddr, rpc.MethodL3Query, &rpc.L3QueryRequest{Path: p}, &resp); err != nil {
				return // a silent member: its segment is missed, L4 covers it
			}
			mu.Lock()
			for _, id := range resp.Positives {
				positives[id] = true
			}
			mu.Unlock()
		})
	}
	wg.Wait()
	n.counters.multicasts.Add(1)
	for _, id := range skip {
		delete(positives, id) // already verified: a false hit at L1/L2
	}
	if len(positives) != 1 {
		return "", len(mates)
	}
	for id := range positives {
		return id, len(mates)
	}
	return "", len(mates)
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
		if _, ok := n.prop.loaded.Load(id); !ok && n.isUp(id) {
			n.pullAsync(id, kindLocal)
		}
	}
}

// currentHeldKey is the held-set summary the Directory reports now.
func (n *Namespace) currentHeldKey() string {
	if !n.segmented() {
		return ""
	}
	return heldKey(n.dir.(Segments).Held())
}

// randPerm returns a random permutation of 0..k-1.
func randPerm(k int) []int { return mrand.Perm(k) }

// syncHolders refreshes the other groups' IDBFAs (G-HBA only) and marks
// every newly named holder of this node's replica to receive the full
// filter at the next propagation.
func (n *Namespace) syncHolders() {
	if !n.segmented() {
		return
	}
	ps := n.peers.Load()
	before := map[string]bool{}
	for _, h := range n.l2Holders(ps) {
		before[h.ID] = true
	}
	n.retryEmptyReplicas()
	if !n.refreshIDBFAs(n.ctx) {
		return
	}
	after := n.l2Holders(n.peers.Load())
	n.prop.mu.Lock()
	for _, h := range after {
		if !before[h.ID] {
			nf := n.prop.needFull[h.ID]
			nf[kindLocal] = true
			n.prop.needFull[h.ID] = nf
		}
	}
	n.prop.mu.Unlock()
}
