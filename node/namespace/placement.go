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

// Placement (docs/design.md, "Homes and placement"): the shard of a new child,
// chosen by its parent's shard. Loads are the number of paths each shard
// homes, as its leader last reported (methodHomeLoad, polled every
// propagate_interval).

// shardLoad is the last load report of a shard.
type shardLoad struct {
	files atomic.Int64
	at    atomic.Int64 // unix nanos of the last report
}

// candidates returns the shards that take new homes: their leader is
// known, up and not leaving; never one in exclude.
func (n *Namespace) candidates(exclude ...string) []string {
	ps := n.peers.Load()
	var out []string
	for _, s := range ps.shards {
		if slices.Contains(exclude, s.ID) {
			continue
		}
		l := n.leaderOf(s.ID)
		if l == "" {
			continue
		}
		if p := ps.byID[l]; l == n.id || p != nil && p.Up && !p.Leaving && p.RPCAddr != "" {
			out = append(out, s.ID)
		}
	}
	return out
}

// placeChild chooses the shard of a new child of directory dir, homed by
// shard h (never one of the shards in exclude, which just failed to
// answer), by the placement policy; "" when no shard takes new homes.
func (h *home) placeChild(ctx context.Context, dir string, isDir bool, exclude ...string) string {
	n := h.r
	cands := n.candidates(exclude...)
	selfOK := !slices.Contains(exclude, h.id)
	if len(cands) == 0 {
		if selfOK {
			return h.id
		}
		return ""
	}
	switch n.placement {
	case PlacementColocate:
		if selfOK && !isDir && h.files.add(dir) <= n.spread {
			return h.id
		}
	case PlacementParent:
		if selfOK {
			return h.id
		}
		return cands[rand.IntN(len(cands))]
	case PlacementRandom:
		return cands[rand.IntN(len(cands))]
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
	if !n.leads(a) {
		if v, ok := n.loads.Load(a); ok {
			v.(*shardLoad).files.Add(1)
		}
	}
	return a
}

// loadOf returns the number of paths shard homes, as last reported (exact
// for a shard this node leads; 0 when unknown).
func (n *Namespace) loadOf(ctx context.Context, shard string) int64 {
	if h := n.home(shard); h != nil {
		c, err := h.st.CountInodes(ctx)
		if err != nil {
			return math.MaxInt64
		}
		return c.Total()
	}
	if v, ok := n.loads.Load(shard); ok {
		return v.(*shardLoad).files.Load()
	}
	return 0
}

func (n *Namespace) handleHomeLoad(ctx context.Context, _ *homeLoadReq) (*homeLoadResp, error) {
	resp := &homeLoadResp{NodeID: n.id, Shards: map[string]int64{}}
	for _, h := range n.ledHomes() {
		c, err := h.st.CountInodes(ctx)
		if err != nil {
			return nil, err
		}
		resp.Shards[h.id] = c.Total()
	}
	return resp, nil
}

// pollLoads asks every up node for the loads of the shards it leads.
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
			now := time.Now().UnixNano()
			for shard, files := range resp.Shards {
				v, _ := n.loads.LoadOrStore(shard, &shardLoad{})
				sl := v.(*shardLoad)
				sl.files.Store(files)
				sl.at.Store(now)
			}
		})
	}
	wg.Wait()
}

// dirFiles counts, per directory homed by a shard, the files
// PlacementColocate placed with it since this node began to lead the
// shard: a count, not a census (a new leader starts again from zero, so a
// directory keeps up to SpreadAfter more files with it after a fail-over).
// It forgets everything when it tracks maxTrackedDirs directories.
type dirFiles struct {
	mu sync.Mutex
	n  map[string]int
}

// maxTrackedDirs bounds dirFiles's memory.
const maxTrackedDirs = 1 << 16

// add counts one more file of dir and returns the count.
func (d *dirFiles) add(dir string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.n == nil || len(d.n) >= maxTrackedDirs {
		d.n = make(map[string]int)
	}
	d.n[dir]++
	return d.n[dir]
}
