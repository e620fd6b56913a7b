package client_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ghba/ghba/routing/nexus"
	"github.com/ghba/ghba/rpc"
	"github.com/ghba/ghba/rpc/client"
	"github.com/ghba/ghba/rpc/rpctest"
)

// statHome is a server that homes the paths under its prefix. Like a
// node, it answers a stat of any path, naming the path's home (homeAddr);
// in a batch it answers its own paths, skips others in a prefetch, and
// blocks while hold is set, until release.
type statHome struct {
	*testServer
	prefix  string
	homeOf  func(p string) string
	lease   atomic.Int64
	hold    atomic.Bool
	release chan struct{}
	batches atomic.Int64 // BatchStat requests
	ahead   atomic.Int64 // BatchStat requests that prefetch (BatchStatRequest.Prefetch)
	stats   atomic.Int64 // Stat requests
}

func startStatHome(t *testing.T, name, prefix string) *statHome {
	h := &statHome{testServer: startServer(t, name, rpc.ServerOptions{}), prefix: prefix, release: make(chan struct{})}
	answer := func(p string) *rpc.StatResponse {
		return &rpc.StatResponse{Inode: rpc.Inode{Path: p, Type: rpc.TypeFile}, HomeAddr: h.homeOf(p),
			Level: rpc.LevelL1, Lease: h.lease.Load()}
	}
	rpc.Register(h.Server, rpc.MethodStat, func(ctx context.Context, r *rpc.StatRequest) (*rpc.StatResponse, error) {
		h.stats.Add(1)
		return answer(r.Path), nil
	})
	rpc.Register(h.Server, rpc.MethodBatchStat, func(ctx context.Context, r *rpc.BatchStatRequest) (*rpc.BatchStatResponse, error) {
		h.batches.Add(1)
		if r.Prefetch {
			h.ahead.Add(1)
		}
		if h.hold.Load() {
			select {
			case <-h.release:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		out := &rpc.BatchStatResponse{}
		for i, p := range r.Paths {
			if i > 0 && r.Prefetch && !strings.HasPrefix(p, h.prefix) {
				out.Results = append(out.Results, rpc.BatchStatResult{Skipped: true})
			} else {
				out.Results = append(out.Results, rpc.BatchStatResult{Stat: answer(p)})
			}
		}
		return out, nil
	})
	return h
}

// startStatHomes starts a server homing /a/ and one homing /b/.
func startStatHomes(t *testing.T) (a, b *statHome) {
	a, b = startStatHome(t, "a", "/a/"), startStatHome(t, "b", "/b/")
	homeOf := func(p string) string {
		if strings.HasPrefix(p, b.prefix) {
			return b.addr
		}
		return a.addr
	}
	a.homeOf, b.homeOf = homeOf, homeOf
	return a, b
}

// TestCachePrefetchInFlight: a miss answers as soon as the missed path's
// home does; the part of its prefetch group homed elsewhere arrives in
// the background, and a stat of one of its paths meanwhile waits for it
// rather than asking again.
func TestCachePrefetchInFlight(t *testing.T) {
	a, b := startStatHomes(t)
	seq := []string{"/a/1", "/a/2", "/b/1", "/b/2"}
	g, err := nexus.New[string](nexus.Config{})
	if err != nil {
		t.Fatal(err)
	}
	c := newClient(t, client.Options{Addrs: []string{a.addr}, Cache: &client.CacheOptions{
		Prefetch: client.PrefetchNexus, Predictor: g, Group: 3, PrefetchTimeout: time.Minute}})
	ctx := context.Background()
	// Learn the sequence and the homes under leases that end at once, and
	// let the background prefetches of that end: one answered after the
	// leases grow would cache its paths.
	a.lease.Store(1)
	b.lease.Store(1)
	for range 2 {
		for _, p := range seq {
			if _, err := c.Stat(ctx, p); err != nil {
				t.Fatal(err)
			}
		}
	}
	rpctest.Eventually(t, waitTime, "the learning's prefetches done", func() error {
		if n := c.PrefetchesInFlight(); n > 0 {
			return fmt.Errorf("%d paths in flight", n)
		}
		return nil
	})
	a.lease.Store(int64(time.Minute))
	b.lease.Store(int64(time.Minute))
	a.batches.Store(0)
	b.batches.Store(0)
	b.stats.Store(0)
	b.hold.Store(true)

	st, err := c.Stat(ctx, "/a/1") // a miss: /a/2 with it, /b/1 and /b/2 from b
	if err != nil || st.Level == rpc.LevelCache {
		t.Fatalf("stat /a/1: %v, %+v; want a miss answered by a", err, st)
	}
	if st, err := c.Stat(ctx, "/a/2"); err != nil || st.Level != rpc.LevelCache {
		t.Fatalf("stat /a/2: %v, %+v; want it from the cache", err, st)
	}
	got := make(chan *rpc.StatResponse, 1)
	go func() {
		st, err := c.Stat(ctx, "/b/1")
		if err != nil {
			t.Error(err)
		}
		got <- st
	}()
	select {
	case st := <-got:
		t.Fatalf("stat /b/1 answered (%+v) while b still holds the prefetch", st)
	case <-time.After(50 * time.Millisecond):
	}
	close(b.release)
	select {
	case st := <-got:
		if st == nil || st.Level != rpc.LevelCache {
			t.Errorf("stat /b/1 after the prefetch arrived: %+v, want it from the cache", st)
		}
	case <-time.After(waitTime):
		t.Fatal("stat /b/1 still waits after the prefetch was released")
	}
	if st, err := c.Stat(ctx, "/b/2"); err != nil || st.Level != rpc.LevelCache {
		t.Errorf("stat /b/2: %v, %+v; want it from the cache", err, st)
	}
	if na, nb, ns := a.batches.Load(), b.batches.Load(), b.stats.Load(); na != 1 || nb != 1 || ns != 0 {
		t.Errorf("requests: %d batches to a, %d batches and %d stats to b; want 1, 1, 0", na, nb, ns)
	}
	s := c.CacheStats()
	if s.Prefetched < 3 || s.PrefetchUsed < 3 {
		t.Errorf("cache stats %+v: want the group of 3 prefetched and used", s)
	}
}

// TestCachePrefetchClose: Close ends a background prefetch that a home
// holds up, and a stat waiting for it returns.
func TestCachePrefetchClose(t *testing.T) {
	a, b := startStatHomes(t)
	g, err := nexus.New[string](nexus.Config{})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		g.Access("/a/1")
		g.Access("/b/1")
	}
	c := client.New(client.Options{Addrs: []string{a.addr}, Cache: &client.CacheOptions{
		Prefetch: client.PrefetchNexus, Predictor: g, Group: 2, PrefetchTimeout: time.Minute}})
	ctx := context.Background()
	a.lease.Store(1)
	b.lease.Store(1)
	for _, p := range []string{"/a/1", "/b/1"} { // learn the homes
		if _, err := c.Stat(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	a.lease.Store(int64(time.Minute))
	b.lease.Store(int64(time.Minute))
	b.hold.Store(true)
	if _, err := c.Stat(ctx, "/a/1"); err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() {
		_, err := c.Stat(ctx, "/b/1")
		waited <- err
	}()
	closed := make(chan struct{})
	go func() {
		c.Close()
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(waitTime):
		t.Fatal("Close waits for a prefetch a home holds up")
	}
	select {
	case <-waited:
	case <-time.After(waitTime):
		t.Fatal("a stat waiting for the prefetch did not return after Close")
	}
	close(b.release)
}

// TestCacheListPrefetch: with ListPrefetch, a ReadDir page brings up to
// that many of its entries into the cache, in one batch under leases, so
// that the stats that follow the listing are hits; without it, they miss.
func TestCacheListPrefetch(t *testing.T) {
	for _, tc := range []struct {
		name         string
		listPrefetch int
		cached       []string // the entries the stats find cached
	}{
		{"off", 0, nil},
		{"3 of 5", 3, []string{"/a/1", "/a/2", "/a/3"}},
		{"all", 10, []string{"/a/1", "/a/2", "/a/3", "/a/4", "/a/5"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, _ := startStatHomes(t)
			rpc.Register(a.Server, rpc.MethodReadDir, func(ctx context.Context, r *rpc.ReadDirRequest) (*rpc.ReadDirResponse, error) {
				resp := &rpc.ReadDirResponse{}
				for _, name := range []string{"1", "2", "3", "4", "5"} {
					resp.Entries = append(resp.Entries, rpc.DirEntry{Name: name, Type: rpc.TypeFile})
				}
				return resp, nil
			})
			a.lease.Store(int64(time.Minute))
			c := newClient(t, client.Options{Addrs: []string{a.addr}, Cache: &client.CacheOptions{
				Entries: 100, ListPrefetch: tc.listPrefetch, PrefetchTimeout: time.Minute}})
			ctx := context.Background()
			if _, err := c.ReadDir(ctx, &rpc.ReadDirRequest{Path: "/a"}); err != nil {
				t.Fatal(err)
			}
			for i := 1; i <= 5; i++ {
				p := fmt.Sprintf("/a/%d", i)
				st, err := c.Stat(ctx, p)
				if err != nil {
					t.Fatal(err)
				}
				if want := slices.Contains(tc.cached, p); (st.Level == rpc.LevelCache) != want {
					t.Errorf("stat %s: level %s; want it from the cache: %v", p, st.Level, want)
				}
			}
			wantBatches := int64(0)
			if len(tc.cached) > 0 {
				wantBatches = 1
			}
			if got := a.ahead.Load(); got != wantBatches {
				t.Errorf("%d batch stats that prefetch, want %d", got, wantBatches)
			}
			s := c.CacheStats()
			if s.Prefetched != uint64(len(tc.cached)) || s.PrefetchUsed != uint64(len(tc.cached)) {
				t.Errorf("cache stats %+v: want %d prefetched and used", s, len(tc.cached))
			}
		})
	}
}
