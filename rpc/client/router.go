package client

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/ghba/ghba/routing"
	"github.com/ghba/ghba/rpc"
)

// filterRouter chooses the node to send a path's request to by the shards'
// local Bloom filters, as a node's L2 array does (HBA §3: a query tests the
// array and goes to the unique hit): the client holds a copy of every
// shard's filter, fetched from the node that leads it, and sends a request
// for a path no cache names to the node whose shard's filter alone reports
// it. That is a hint like a cached home: the node checks its own shards
// first and otherwise routes the request itself, so a false hit, a filter
// that missed a change or a leadership that moved costs a hop, never a
// wrong answer. Zero or several hits send the request to a random node.
//
// It refreshes every interval: it asks every address of the client for the
// filters of the shards it leads, naming the version it holds of each, so
// that only changed filters travel.
type filterRouter struct {
	c     *Client
	every time.Duration

	mu     sync.RWMutex
	arr    *routing.FilterArray // nil until a filter arrived
	shards map[string]routedShard

	refreshMu sync.Mutex // one refresh at a time
}

// routedShard is where the router sends a shard's paths and which version
// of its filter it holds.
type routedShard struct {
	addr string
	rpc.FilterVersion
}

func newFilterRouter(c *Client, every time.Duration) *filterRouter {
	if every <= 0 {
		return nil
	}
	return &filterRouter{c: c, every: every, shards: make(map[string]routedShard)}
}

// route returns the address of the node that leads the only shard whose
// filter reports p, or "".
func (r *filterRouter) route(p string) string {
	if r == nil {
		return ""
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.arr == nil {
		return ""
	}
	res := r.arr.QueryKey(routing.HashPath(r.arr.Geometry().Hash, p))
	if !res.Hit() {
		return ""
	}
	return r.shards[res.ID].addr
}

// loop refreshes the filters until the client is closed.
func (r *filterRouter) loop() {
	defer r.c.janitor.Done()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-r.c.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	t := time.NewTicker(r.every)
	defer t.Stop()
	for {
		if err := r.refresh(ctx); err != nil && ctx.Err() == nil {
			r.c.log.Debug("rpc: refreshing the shards' filters", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// refresh asks every address for the filters of the shards it leads and
// routes each shard to the node that answered it (the highest term wins
// while a leadership moves). A shard no node answered for is dropped:
// its paths go to a random node until its leader answers again.
func (r *filterRouter) refresh(ctx context.Context) error {
	r.refreshMu.Lock()
	defer r.refreshMu.Unlock()
	addrs := r.c.Addrs()
	r.mu.RLock()
	have := make([]rpc.FilterVersion, 0, len(r.shards))
	for _, s := range r.shards {
		have = append(have, s.FilterVersion)
	}
	r.mu.RUnlock()
	type answer struct {
		addr string
		resp *rpc.FiltersResponse
		err  error
	}
	answers := make([]answer, len(addrs))
	var wg sync.WaitGroup
	for i, a := range addrs {
		wg.Go(func() {
			cctx, cancel := context.WithTimeout(ctx, max(r.every, time.Second))
			defer cancel()
			resp := new(rpc.FiltersResponse)
			err := r.c.Call(cctx, a, rpc.MethodFilters, &rpc.FiltersRequest{Have: have}, resp)
			answers[i] = answer{addr: a, resp: resp, err: err}
		})
	}
	wg.Wait()

	var errs []error
	latest := make(map[string]answerFilter)
	for _, a := range answers {
		if a.err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", a.addr, a.err))
			continue
		}
		for _, f := range a.resp.Filters {
			if cur, ok := latest[f.Shard]; !ok || f.Term > cur.Term {
				latest[f.Shard] = answerFilter{addr: a.addr, ShardFilter: f}
			}
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for id := range r.shards {
		if _, ok := latest[id]; !ok {
			r.drop(id)
		}
	}
	for id, f := range latest {
		if err := r.load(id, f); err != nil {
			errs = append(errs, fmt.Errorf("shard %s: %w", id, err))
			r.drop(id)
		}
	}
	return errors.Join(errs...)
}

// answerFilter is a shard's filter and the node that sent it.
type answerFilter struct {
	addr string
	rpc.ShardFilter
}

// load takes in f, shard id's filter as its leader at f.addr sent it.
func (r *filterRouter) load(id string, f answerFilter) error {
	cur, ok := r.shards[id]
	if f.Unchanged {
		if !ok || cur.FilterVersion != f.FilterVersion {
			return fmt.Errorf("%w: filter answered unchanged but not held", rpc.ErrProtocol)
		}
		cur.addr = f.addr
		r.shards[id] = cur
		return nil
	}
	nf, err := routing.DecodeFilter(f.Data)
	if err != nil {
		return err
	}
	if r.arr != nil && r.arr.Geometry() != nf.Geometry() {
		r.c.log.Warn("rpc: the shards' filter geometry changed; routing by filters starts afresh", "shard", id)
		r.arr, r.shards = nil, make(map[string]routedShard)
		ok = false
	}
	if r.arr == nil {
		r.arr = routing.NewFilterArray(nf.Geometry())
	}
	if ok {
		err = r.arr.Replace(id, nf)
	} else {
		err = r.arr.Add(id, nf)
	}
	if err != nil {
		return err
	}
	r.shards[id] = routedShard{addr: f.addr, FilterVersion: f.FilterVersion}
	return nil
}

// drop forgets shard id.
func (r *filterRouter) drop(id string) {
	if _, ok := r.shards[id]; !ok {
		return
	}
	delete(r.shards, id)
	if r.arr != nil && r.arr.Has(id) {
		_ = r.arr.Remove(id) // present: cannot fail
	}
}

// RefreshFilters fetches the shards' filters now (Options.RouteRefresh),
// for a caller that wants the routing ready before it starts; the client
// also refreshes them by itself. It returns an error if routing by filters
// is off or a node could not be asked (the filters of the others are
// taken in).
func (c *Client) RefreshFilters(ctx context.Context) error {
	if c.router == nil {
		return errors.New("rpc: routing by filters is off (Options.RouteRefresh)")
	}
	return c.router.refresh(ctx)
}

// RoutedShards returns the shards the client routes by their filters,
// sorted (empty with routing by filters off).
func (c *Client) RoutedShards() []string {
	r := c.router
	if r == nil {
		return nil
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	return slices.Sorted(maps.Keys(r.shards))
}
