package client_test

import (
	"context"
	"slices"
	"sync"
	"testing"

	"github.com/ghba/ghba/routing"
	"github.com/ghba/ghba/rpc"
	"github.com/ghba/ghba/rpc/client"
)

// filterServer serves rpc.MethodFilters from a table the test changes:
// shard → (term, filter), as the shards' leader would.
type filterServer struct {
	*testServer
	mu     sync.Mutex
	shards map[string]filterAt
	sent   []string // shards sent with their bits, by every call
}

type filterAt struct {
	term uint64
	f    *routing.Filter
}

func startFilterServer(t *testing.T, name string) *filterServer {
	fs := &filterServer{testServer: startServer(t, name, rpc.ServerOptions{}), shards: map[string]filterAt{}}
	rpc.Register(fs.Server, rpc.MethodFilters, func(ctx context.Context, r *rpc.FiltersRequest) (*rpc.FiltersResponse, error) {
		fs.mu.Lock()
		defer fs.mu.Unlock()
		resp := &rpc.FiltersResponse{NodeID: name}
		for _, id := range slices.Sorted(func(yield func(string) bool) {
			for id := range fs.shards {
				if !yield(id) {
					return
				}
			}
		}) {
			s := fs.shards[id]
			sf := rpc.ShardFilter{FilterVersion: rpc.FilterVersion{Shard: id, Term: s.term, Version: s.f.Version()}}
			if slices.Contains(r.Have, sf.FilterVersion) {
				sf.Unchanged = true
			} else {
				sf.Data = s.f.AppendBinary(nil)
				fs.sent = append(fs.sent, id)
			}
			resp.Filters = append(resp.Filters, sf)
		}
		return resp, nil
	})
	return fs
}

func (fs *filterServer) set(id string, term uint64, f *routing.Filter) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if f == nil {
		delete(fs.shards, id)
		return
	}
	fs.shards[id] = filterAt{term, f}
}

func (fs *filterServer) takeSent() []string {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	out := fs.sent
	fs.sent = nil
	return out
}

// TestFilterRouting: the client routes a path to the node whose shard's
// filter alone reports it; refreshes carry only changed filters; while a
// shard's leadership moves the higher term wins; a shard no node leads
// any more is dropped.
func TestFilterRouting(t *testing.T) {
	a, b := startFilterServer(t, "a"), startFilterServer(t, "b")
	geo, err := routing.NewGeometry(1000, 16, 0, routing.HashXX)
	if err != nil {
		t.Fatal(err)
	}
	filter := func(paths ...string) *routing.Filter {
		f := routing.NewFilter(geo)
		for _, p := range paths {
			f.Add(p)
		}
		f.Mark()
		return f
	}
	a.set("sa", 1, filter("/x", "/both"))
	b.set("sb", 1, filter("/y", "/both"))

	c := client.New(client.Options{Addrs: []string{a.addr, b.addr}, HomeCacheSize: -1, RouteRefresh: 1 << 40})
	defer c.Close()
	ctx := context.Background()
	if err := c.RefreshFilters(ctx); err != nil {
		t.Fatal(err)
	}
	if got := c.RoutedShards(); !slices.Equal(got, []string{"sa", "sb"}) {
		t.Fatalf("routed shards %v", got)
	}
	for _, tc := range []struct{ path, want string }{
		{"/x", a.addr}, {"/y", b.addr}, {"/both", ""}, {"/neither", ""},
	} {
		if got := client.RouteOf(c, tc.path); got != tc.want {
			t.Errorf("route %s = %q, want %q", tc.path, got, tc.want)
		}
	}

	// Nothing changed: nothing is sent again.
	a.takeSent()
	b.takeSent()
	if err := c.RefreshFilters(ctx); err != nil {
		t.Fatal(err)
	}
	if s := append(a.takeSent(), b.takeSent()...); len(s) != 0 {
		t.Errorf("unchanged filters sent again: %v", s)
	}

	// sa's leadership moves to b (term 2) while a still answers it: b's
	// wins, with b's filter. Then a stops answering it.
	b.set("sa", 2, filter("/x", "/z"))
	if err := c.RefreshFilters(ctx); err != nil {
		t.Fatal(err)
	}
	if got := client.RouteOf(c, "/z"); got != b.addr {
		t.Errorf("after the move, route /z = %q, want %q", got, b.addr)
	}
	a.set("sa", 0, nil)
	if err := c.RefreshFilters(ctx); err != nil {
		t.Fatal(err)
	}
	if got := client.RouteOf(c, "/x"); got != b.addr {
		t.Errorf("route /x = %q, want %q", got, b.addr)
	}

	// sb is led by nobody (its node lost it, no one took over yet): its
	// paths go to a random node.
	b.set("sb", 0, nil)
	if err := c.RefreshFilters(ctx); err != nil {
		t.Fatal(err)
	}
	if got := c.RoutedShards(); !slices.Equal(got, []string{"sa"}) {
		t.Errorf("routed shards %v, want [sa]", got)
	}
	if got := client.RouteOf(c, "/y"); got != "" {
		t.Errorf("route /y = %q, want none", got)
	}
}
