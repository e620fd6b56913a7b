package namespace

import (
	"context"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Placement (docs/design.md, "Placement"): the home of a new child, chosen
// by its parent's home, and the node a drained path moves to. Loads are
// the number of paths each node homes, as last reported (methodHomeLoad,
// polled every propagate_interval).

// peerLoad is the last load report of a peer.
type peerLoad struct {
	files    atomic.Int64
	draining atomic.Bool
	at       atomic.Int64 // unix nanos of the last report
}

// takesHomes reports whether peer p may receive new homes: up, reachable,
// not leaving and not draining (as it reported), and not in exclude.
func (n *Namespace) takesHomes(p *Peer, exclude []string) bool {
	if !p.Up || p.Leaving || p.RPCAddr == "" || slices.Contains(exclude, p.ID) {
		return false
	}
	if p.ID == n.id {
		return !n.draining.Load()
	}
	v, ok := n.loads.Load(p.ID)
	return !ok || !v.(*peerLoad).draining.Load()
}

// candidates returns the nodes that take new homes, except exclude.
func (n *Namespace) candidates(exclude ...string) []string {
	ps := n.peers.Load()
	var out []string
	for i := range ps.list {
		if p := &ps.list[i]; n.takesHomes(p, exclude) {
			out = append(out, p.ID)
		}
	}
	return out
}

// placeChild chooses the home of a new child of a directory homed here
// (never one of the nodes in exclude, which just failed to answer), by the
// placement policy; "" when no node takes new homes.
func (n *Namespace) placeChild(ctx context.Context, exclude ...string) string {
	cands := n.candidates(exclude...)
	selfOK := !n.draining.Load()
	if len(cands) == 0 {
		if selfOK {
			return n.id
		}
		return ""
	}
	switch n.placement {
	case PlacementParent:
		if selfOK {
			return n.id
		}
		return cands[rand.IntN(len(cands))]
	case PlacementRandom:
		return cands[rand.IntN(len(cands))]
	}
	return n.lessLoaded(ctx, cands)
}

// drainTarget chooses the node that receives a path drained from here.
func (n *Namespace) drainTarget(ctx context.Context) string {
	cands := n.candidates(n.id)
	if len(cands) == 0 {
		return ""
	}
	return n.lessLoaded(ctx, cands)
}

// lessLoaded returns the less loaded of two random candidates (the power
// of two choices) and counts the new home against it until its next
// report.
func (n *Namespace) lessLoaded(ctx context.Context, cands []string) string {
	a := cands[rand.IntN(len(cands))]
	b := cands[rand.IntN(len(cands))]
	if n.loadOf(ctx, b) < n.loadOf(ctx, a) {
		a = b
	}
	if a != n.id {
		if v, ok := n.loads.Load(a); ok {
			v.(*peerLoad).files.Add(1)
		}
	}
	return a
}

// loadOf returns the number of paths node id homes, as last reported
// (exact for this node; 0 when unknown).
func (n *Namespace) loadOf(ctx context.Context, id string) int64 {
	if id == n.id {
		c, err := n.st.CountInodes(ctx)
		if err != nil {
			return math.MaxInt64
		}
		return c.Total()
	}
	if v, ok := n.loads.Load(id); ok {
		return v.(*peerLoad).files.Load()
	}
	return 0
}

func (n *Namespace) handleHomeLoad(ctx context.Context, _ *homeLoadReq) (*homeLoadResp, error) {
	c, err := n.st.CountInodes(ctx)
	if err != nil {
		return nil, err
	}
	return &homeLoadResp{NodeID: n.id, Files: c.Total(), Draining: n.draining.Load()}, nil
}

// pollLoads asks every up peer for its load.
func (n *Namespace) pollLoads(ctx context.Context) {
	ps := n.peers.Load()
	var wg sync.WaitGroup
	for i := range ps.list {
		p := ps.list[i]
		if p.ID == n.id || !p.Up {
			continue
		}
		wg.Go(func() {
			cctx, cancel := context.WithTimeout(ctx, n.tune.PeerTimeout)
			defer cancel()
			var resp homeLoadResp
			if err := n.call(cctx, p.ID, methodHomeLoad, &homeLoadReq{}, &resp); err != nil {
				return
			}
			v, _ := n.loads.LoadOrStore(p.ID, &peerLoad{})
			pl := v.(*peerLoad)
			pl.files.Store(resp.Files)
			pl.draining.Store(resp.Draining)
			pl.at.Store(time.Now().UnixNano())
		})
	}
	wg.Wait()
}
