package namespace_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ghba/ghba/node/namespace"
	"github.com/ghba/ghba/node/nodetest"
	"github.com/ghba/ghba/node/shard"
	"github.com/ghba/ghba/rpc"
	"github.com/ghba/ghba/rpc/client"
)

// nsBenchClients is the number of client goroutines of the benchmarks.
const nsBenchClients = 16

// nsLatencies collects per-operation latencies from parallel goroutines.
type nsLatencies struct {
	mu  sync.Mutex
	all []time.Duration
}

func (l *nsLatencies) add(d []time.Duration) {
	l.mu.Lock()
	l.all = append(l.all, d...)
	l.mu.Unlock()
}

// report adds ops/s, p50 and p99 (microseconds) to b.
func (l *nsLatencies) report(b *testing.B, elapsed time.Duration) {
	if len(l.all) == 0 {
		return
	}
	slices.Sort(l.all)
	q := func(f float64) float64 {
		return float64(l.all[min(len(l.all)-1, int(f*float64(len(l.all))))].Microseconds())
	}
	b.ReportMetric(float64(len(l.all))/elapsed.Seconds(), "ops/s")
	b.ReportMetric(q(0.50), "p50-µs")
	b.ReportMetric(q(0.99), "p99-µs")
}

// runParallel runs op with nsBenchClients goroutines and reports ops/s,
// latency percentiles and the CPU time the process used per operation
// (cpu-µs/op: the cluster's and the client's, every node running in this
// process; on 2 cores, where ops/s moves by tens of percent between runs
// with what else runs, it is the steadier measure of a change).
func runParallel(b *testing.B, op func(r *rand.Rand) error) {
	b.Helper()
	// allocs/op count the whole cluster's allocations per operation (every
	// node runs in this process): client, entry node, home and store.
	b.ReportAllocs()
	b.SetParallelism((nsBenchClients + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
	var lat nsLatencies
	var seed atomic.Uint64
	var failed atomic.Int64
	b.ResetTimer()
	start := time.Now()
	cpu0, cpuOK := processCPU()
	b.RunParallel(func(pb *testing.PB) {
		s := seed.Add(1)
		r := rand.New(rand.NewPCG(s, s))
		local := make([]time.Duration, 0, 1024)
		for pb.Next() {
			t0 := time.Now()
			if err := op(r); err != nil {
				if failed.Add(1) == 1 {
					b.Errorf("operation failed: %v", err)
				}
			}
			local = append(local, time.Since(t0))
		}
		lat.add(local)
	})
	elapsed := time.Since(start)
	cpu1, _ := processCPU()
	b.StopTimer()
	lat.report(b, elapsed)
	if cpuOK && b.N > 0 {
		b.ReportMetric(float64((cpu1-cpu0).Microseconds())/float64(b.N), "cpu-µs/op")
	}
}

// benchCluster returns a cluster of n nodes with r replicas per shard
// (logs: their log store, "" for the default) and a client of it (with or
// without the client's home cache).
func benchCluster(b *testing.B, n, r int, placement, logs string, homeCache bool) (*nodetest.Namespaces, *client.Client) {
	rt := nodetest.SmallRouting()
	rt.FilterCapacity = 200_000
	rt.LRUEntries = 4096
	rt.PropagateInterval = 200 * time.Millisecond
	c := nodetest.NewNamespaces(b, nodetest.NamespacesOptions{Nodes: n, Replication: r, Routing: rt, Placement: placement, LogStore: logs})
	var addrs []string
	for _, id := range c.IDs {
		addrs = append(addrs, c.Nodes[id].Addr)
	}
	size := 0
	if !homeCache {
		size = -1
	}
	cl := client.New(client.Options{Addrs: addrs, HomeCacheSize: size, MaxConnsPerAddr: 4})
	b.Cleanup(func() { cl.Close() })
	return c, cl
}

func benchLevels(b *testing.B, c *nodetest.Namespaces, before map[string]namespace.Stats) {
	var l1, l2, l4, hops, lookups uint64
	for _, id := range c.IDs {
		s := c.NS(id).Stats()
		p := before[id]
		l1 += s.Levels.L1 - p.Levels.L1
		l2 += s.Levels.L2 - p.Levels.L2
		l4 += s.Levels.L4 - p.Levels.L4
		hops += s.Hops - p.Hops
		lookups += s.Lookups - p.Lookups
	}
	if lookups == 0 {
		return
	}
	b.ReportMetric(100*float64(l1)/float64(lookups), "%L1")
	b.ReportMetric(100*float64(l2)/float64(lookups), "%L2")
	b.ReportMetric(100*float64(l4)/float64(lookups), "%L4")
	b.ReportMetric(float64(hops)/float64(lookups), "hops/lookup")
}

func snapshotStats(c *nodetest.Namespaces) map[string]namespace.Stats {
	out := map[string]namespace.Stats{}
	for _, id := range c.IDs {
		out[id] = c.NS(id).Stats()
	}
	return out
}

// BenchmarkStat: stats of existing files by 16 client goroutines through
// 1 and 3 nodes, with 1 and 3 replicas per shard (the Go client caches
// homes, as a real client does; "nocache" enters at a random node every
// time).
func BenchmarkStat(b *testing.B) {
	for _, tc := range []struct {
		name     string
		nodes, r int
		cache    bool
	}{
		{"nodes=1", 1, 1, true}, {"nodes=3/R=1", 3, 1, true}, {"nodes=3/R=3", 3, 3, true},
		{"nodes=3/R=1/nocache", 3, 1, false}, {"nodes=3/R=3/nocache", 3, 3, false},
	} {
		b.Run(tc.name, func(b *testing.B) {
			c, cl := benchCluster(b, tc.nodes, tc.r, "", "", tc.cache)
			ctx := context.Background()
			const dirs, files = 20, 100
			var paths []string
			for d := range dirs {
				dir := fmt.Sprintf("/b%d", d)
				if _, err := cl.Mkdir(ctx, &rpc.MkdirRequest{Path: dir, Mode: 0o755}); err != nil {
					b.Fatal(err)
				}
				for f := range files {
					p := fmt.Sprintf("%s/f%d", dir, f)
					if _, err := cl.Create(ctx, &rpc.CreateRequest{Path: p, Mode: 0o644}); err != nil {
						b.Fatal(err)
					}
					paths = append(paths, p)
				}
			}
			for _, p := range paths { // warm the LRU lists and the client's cache
				if _, err := cl.Stat(ctx, p); err != nil {
					b.Fatal(err)
				}
			}
			c.WaitFilters()
			before := snapshotStats(c)
			runParallel(b, func(r *rand.Rand) error {
				_, err := cl.Stat(ctx, paths[r.IntN(len(paths))])
				return err
			})
			benchLevels(b, c, before)
		})
	}
}

// BenchmarkCreate: creates of new files in 64 directories by 16 client
// goroutines through 1 and 3 nodes, with 1 and 3 replicas per shard, by
// placement: balanced (with 3 nodes about 2/3 of the files are homed away
// from their directory, a transaction between two shards) and colocate
// (every file with its directory: one commit in one shard); colocate also
// with each shard log store.
func BenchmarkCreate(b *testing.B) {
	for _, tc := range []struct {
		nodes, r        int
		placement, logs string
	}{
		{1, 1, namespace.PlacementBalanced, ""},
		{3, 1, namespace.PlacementBalanced, ""}, {3, 3, namespace.PlacementBalanced, ""},
		{3, 1, namespace.PlacementColocate, shard.LogStoreBoltDB}, {3, 3, namespace.PlacementColocate, shard.LogStoreBoltDB},
		{3, 1, namespace.PlacementColocate, shard.LogStoreWAL}, {3, 3, namespace.PlacementColocate, shard.LogStoreWAL},
	} {
		name := fmt.Sprintf("nodes=%d/R=%d/%s", tc.nodes, tc.r, tc.placement)
		if tc.logs != "" {
			name += "/" + tc.logs
		}
		b.Run(name, func(b *testing.B) {
			_, cl := benchCluster(b, tc.nodes, tc.r, tc.placement, tc.logs, true)
			ctx := context.Background()
			const dirs = 64
			for d := range dirs {
				if _, err := cl.Mkdir(ctx, &rpc.MkdirRequest{Path: fmt.Sprintf("/c%d", d), Mode: 0o755}); err != nil {
					b.Fatal(err)
				}
				if _, err := cl.Stat(ctx, fmt.Sprintf("/c%d", d)); err != nil {
					b.Fatal(err)
				}
			}
			var seq atomic.Int64
			runParallel(b, func(r *rand.Rand) error {
				i := seq.Add(1)
				_, err := cl.Create(ctx, &rpc.CreateRequest{Path: fmt.Sprintf("/c%d/f%d", i%dirs, i), Mode: 0o644})
				return err
			})
		})
	}
}

// BenchmarkChmodSubtree: chmod of a directory with 10,000 descendants
// (100 subdirectories of 99 files) on 3 nodes, with 1 and 3 replicas per
// shard. "recode" alternates 0700 and 0755, each changing the search
// permission the directory gives its subtree, so every shard rewrites the
// ancestor codes of its part of the subtree (HBA §4.2.2); "same-code"
// alternates 0755 and 0775, which changes no code: one inode's commit.
func BenchmarkChmodSubtree(b *testing.B) {
	for _, r := range []int{1, 3} {
		for _, tc := range []struct {
			name  string
			modes [2]uint32
		}{{"recode", [2]uint32{0o700, 0o755}}, {"same-code", [2]uint32{0o775, 0o755}}} {
			b.Run(fmt.Sprintf("R=%d/%s", r, tc.name), func(b *testing.B) {
				c, cl := benchCluster(b, 3, r, "", "", true)
				ctx := context.Background()
				const dirs, files = 100, 99
				if _, err := cl.Mkdir(ctx, &rpc.MkdirRequest{Path: "/t", Mode: 0o755}); err != nil {
					b.Fatal(err)
				}
				var wg sync.WaitGroup
				errs := make(chan error, dirs)
				for d := range dirs {
					wg.Go(func() {
						dir := fmt.Sprintf("/t/d%d", d)
						if _, err := cl.Mkdir(ctx, &rpc.MkdirRequest{Path: dir, Mode: 0o755}); err != nil {
							errs <- err
							return
						}
						for f := range files {
							if _, err := cl.Create(ctx, &rpc.CreateRequest{Path: fmt.Sprintf("%s/f%d", dir, f), Mode: 0o644}); err != nil {
								errs <- err
								return
							}
						}
					})
				}
				wg.Wait()
				close(errs)
				for err := range errs {
					b.Fatal(err)
				}
				before := snapshotStats(c)
				i := 0
				for b.Loop() {
					mode := tc.modes[i%2]
					i++
					if _, err := cl.SetAttr(ctx, &rpc.SetAttrRequest{Path: "/t", Mode: &mode}); err != nil {
						b.Fatal(err)
					}
				}
				if st, err := cl.Stat(ctx, "/t/d7/f5"); err != nil {
					b.Fatal(err)
				} else if want := tc.name == "recode" && i%2 == 1; (len(st.Inode.Ancestors) == 1) != want {
					b.Fatalf("/t/d7/f5 has codes %v after %d chmods", st.Inode.Ancestors, i)
				}
				var txns uint64
				for id, s := range snapshotStats(c) {
					txns += s.TxnsCommitted - before[id].TxnsCommitted
				}
				b.ReportMetric(float64(dirs*(files+1)), "descendants")
				b.ReportMetric(float64(txns)/float64(i), "txns/op")
			})
		}
	}
}
