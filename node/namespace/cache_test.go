package namespace_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ghba/ghba/node/namespace"
	"github.com/ghba/ghba/node/nodetest"
	"github.com/ghba/ghba/routing/nexus"
	"github.com/ghba/ghba/rpc"
	"github.com/ghba/ghba/rpc/client"
	"github.com/ghba/ghba/rpc/rpctest"
)

// cacheLease is the lease of the cache tests' clusters.
const cacheLease = 2 * time.Second

func cacheCluster(t *testing.T, r int) *nodetest.Namespaces {
	return nodetest.NewNamespaces(t, nodetest.NamespacesOptions{Nodes: 3, Replication: r,
		Configure: func(o *namespace.Options) { o.CacheLease = cacheLease }})
}

// cachingClient returns a client of c with a metadata cache.
func cachingClient(t *testing.T, c *nodetest.Namespaces, onInv func(*rpc.Invalidation)) *client.Client {
	return clientWithCache(t, c, &client.CacheOptions{Entries: 1000}, onInv)
}

// clientWithCache returns a client of c with the cache opts.
func clientWithCache(t *testing.T, c *nodetest.Namespaces, opts *client.CacheOptions, onInv func(*rpc.Invalidation)) *client.Client {
	var addrs []string
	for _, id := range c.IDs {
		addrs = append(addrs, c.Nodes[id].Addr)
	}
	cl := client.New(client.Options{Addrs: addrs, Cache: opts, OnInvalidate: onInv, Logger: rpctest.Logger(t)})
	t.Cleanup(func() { cl.Close() })
	return cl
}

// leaseStats sums the lease counters of c's namespaces.
func leaseStats(c *nodetest.Namespaces) namespace.Stats {
	var sum namespace.Stats
	for _, id := range c.IDs {
		s := c.NS(id).Stats()
		sum.LeasesGranted += s.LeasesGranted
		sum.LeasesGrantedAbsent += s.LeasesGrantedAbsent
		sum.LeasesNotified += s.LeasesNotified
		sum.LeasesExpired += s.LeasesExpired
	}
	return sum
}

// cached stats p through cl until the answer comes from the cache.
func cached(t *testing.T, cl *client.Client, p string) *rpc.StatResponse {
	t.Helper()
	var st *rpc.StatResponse
	untilHit(t, cl, p, func(s *rpc.StatResponse, err error) error {
		st = s
		return err
	})
	return st
}

// cachedAbsent stats p through cl until the cache answers that p does not
// exist (a lease on its absence).
func cachedAbsent(t *testing.T, cl *client.Client, p string) {
	t.Helper()
	untilHit(t, cl, p, func(_ *rpc.StatResponse, err error) error {
		if !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("stat %s: %v, want it not to exist", p, err)
		}
		return nil
	})
}

// untilHit stats p through cl until the cache answers and check accepts
// the answer.
func untilHit(t *testing.T, cl *client.Client, p string, check func(*rpc.StatResponse, error) error) {
	t.Helper()
	rpctest.Eventually(t, 10*time.Second, "a cached answer of "+p, func() error {
		before := cl.CacheStats().Hits
		if err := check(cl.Stat(context.Background(), p)); err != nil {
			return err
		}
		if cl.CacheStats().Hits == before {
			return fmt.Errorf("stat %s: not from the cache yet", p)
		}
		return nil
	})
}

// TestCacheNeverStale: a client caches inodes under leases; after every
// write another client had acknowledged (chmod, unlink, rename of the
// directory, a write at a new leader after the old one died), the caching
// client's stat shows the write.
func TestCacheNeverStale(t *testing.T) { forEachR(t, testCacheNeverStale) }

func testCacheNeverStale(t *testing.T, r int) {
	c := cacheCluster(t, r)
	ctx := context.Background()
	w := via(c, c.IDs[0])
	mustOK(t, w.mkdir("/d", false), "mkdir")
	for i := range 5 {
		mustOK(t, w.create(fmt.Sprintf("/d/f%d", i)), "create")
	}
	a := cachingClient(t, c, nil)
	st := cached(t, a, "/d/f1")
	if st.Mode != 0o644 {
		t.Fatalf("cached mode %#o", st.Mode)
	}
	for i := range 40 {
		mode := uint32(0o600 + i%8)
		if _, err := w.setattr(&rpc.SetAttrRequest{Path: "/d/f1", Mode: u32(mode)}); err != nil {
			t.Fatal(err)
		}
		st, err := a.Stat(ctx, "/d/f1")
		mustOK(t, err, "stat")
		if st.Mode != mode {
			t.Fatalf("write %d: the caching client sees mode %#o (level %s) after chmod %#o was acknowledged", i, st.Mode, st.Level, mode)
		}
	}
	if s := a.CacheStats(); s.Hits == 0 || s.Invalidated == 0 {
		t.Errorf("cache stats %+v: want hits and invalidations", s)
	}
	if s := leaseStats(c); s.LeasesGranted == 0 || s.LeasesNotified < 40 || s.LeasesExpired != 0 {
		t.Errorf("lease stats: %d granted, %d revocations acknowledged, %d expired; want some, at least 40, none",
			s.LeasesGranted, s.LeasesNotified, s.LeasesExpired)
	}

	cached(t, a, "/d/f2")
	mustOK(t, w.unlink("/d/f2"), "unlink")
	if _, err := a.Stat(ctx, "/d/f2"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("stat of an unlinked file through the cache: %v", err)
	}
	cached(t, a, "/d/f3")
	mustOK(t, w.rename("/d", "/e"), "rename")
	if _, err := a.Stat(ctx, "/d/f3"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("stat of a renamed directory's file through the cache: %v", err)
	}
	st = cached(t, a, "/e/f3")

	// The home of /e/f3 dies: with R=3 another replica leads, and its
	// first write waits until the dead leader's leases have expired.
	if r == 3 {
		home := homeOf(c, t, "/e/f3")
		c.Stop(home)
		other := c.IDs[0]
		if other == home {
			other = c.IDs[1]
		}
		if _, err := via(c, other).setattr(&rpc.SetAttrRequest{Path: "/e/f3", Mode: u32(0o640)}); err != nil {
			t.Fatal(err)
		}
		st, err := a.Stat(ctx, "/e/f3")
		mustOK(t, err, "stat")
		if st.Mode != 0o640 {
			t.Fatalf("after a fail-over the caching client sees mode %#o (level %s) after chmod 640 was acknowledged", st.Mode, st.Level)
		}
		c.Start(home)
	}
}

// TestCacheSilentClient: a client that does not acknowledge its
// invalidation (its reader blocked) delays a write until its lease has
// expired, and does not stop it.
func TestCacheSilentClient(t *testing.T) {
	c := cacheCluster(t, 1)
	w := via(c, c.IDs[0])
	mustOK(t, w.create("/f"), "create")
	release := make(chan struct{})
	var blocked atomic.Bool
	a := cachingClient(t, c, func(*rpc.Invalidation) {
		if blocked.CompareAndSwap(false, true) {
			<-release
		}
	})
	cached(t, a, "/f")
	start := time.Now()
	if _, err := w.setattr(&rpc.SetAttrRequest{Path: "/f", Mode: u32(0o600)}); err != nil {
		t.Fatalf("a write with a silent lease holder: %v", err)
	}
	t.Logf("the write waited %v for a silent client's lease of %v", time.Since(start), cacheLease)
	close(release)
	if !blocked.Load() {
		t.Fatal("the caching client was never told")
	}
	if s := leaseStats(c); s.LeasesExpired != 1 || s.LeasesNotified != 0 {
		t.Errorf("lease stats: %d revocations waited for the lease's end, %d acknowledged; want 1 and 0", s.LeasesExpired, s.LeasesNotified)
	}
	rpctest.Eventually(t, 10*time.Second, "the new mode through the caching client", func() error {
		st, err := a.Stat(context.Background(), "/f")
		if err != nil {
			return err
		}
		if st.Mode != 0o600 {
			return fmt.Errorf("mode %#o (level %s)", st.Mode, st.Level)
		}
		return nil
	})
}

// TestCachePrefetchGroup: a miss brings its prefetch group from two homes
// (the part on another node in the background; rpc's
// TestCachePrefetchInFlight pins that down), with leases: every other path
// of the group is then a hit, and shows the latest write.
func TestCachePrefetchGroup(t *testing.T) { forEachR(t, testCachePrefetchGroup) }

func testCachePrefetchGroup(t *testing.T, r int) {
	c := cacheCluster(t, r)
	w := via(c, c.IDs[0])
	// Two directories on different homes (placement colocate puts each
	// directory's files with it).
	var dirs []string
	homes := map[string]bool{}
	for i := 0; len(dirs) < 2; i++ {
		if i == 12 {
			t.Fatalf("12 directories, homes %v: no two apart", homes)
		}
		d := fmt.Sprintf("/d%d", i)
		mustOK(t, w.mkdir(d, false), "mkdir")
		if h := homeOf(c, t, d); !homes[h] {
			homes[h] = true
			dirs = append(dirs, d)
		}
	}
	var seq []string
	for _, d := range dirs {
		for f := range 4 {
			p := fmt.Sprintf("%s/f%d", d, f)
			mustOK(t, w.create(p), "create")
			seq = append(seq, p)
		}
	}

	g, err := nexus.New[string](nexus.Config{})
	if err != nil {
		t.Fatal(err)
	}
	cl := clientWithCache(t, c, &client.CacheOptions{
		Entries: 100, Prefetch: client.PrefetchNexus, Predictor: g, Group: len(seq), PrefetchTimeout: time.Minute}, nil)
	ctx := context.Background()
	// Learn the sequence (and the homes), then drop the cached inodes: a
	// change of each makes its home revoke the client's lease first.
	for range 2 {
		for _, p := range seq {
			if _, err := cl.Stat(ctx, p); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, p := range seq {
		if _, err := w.setattr(&rpc.SetAttrRequest{Path: p, Mode: u32(0o600)}); err != nil {
			t.Fatal(err)
		}
	}
	before := cl.CacheStats()
	if before.Entries != 0 {
		t.Fatalf("%d entries cached after every path changed", before.Entries)
	}

	if _, err := cl.Stat(ctx, seq[0]); err != nil {
		t.Fatal(err)
	}
	for _, p := range seq[1:] { // the other directory's first: in flight
		st, err := cl.Stat(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		if st.Level != rpc.LevelCache || st.Mode != 0o600 {
			t.Errorf("%s: level %s, mode %#o; want the prefetched inode, mode 0600", p, st.Level, st.Mode)
		}
	}
	s := cl.CacheStats()
	if misses, hits, used := s.Misses-before.Misses, s.Hits-before.Hits, s.PrefetchUsed-before.PrefetchUsed; misses != 1 || hits != 7 || used != 7 {
		t.Errorf("after a miss and its group of 7: %d misses, %d hits, %d prefetches used; want 1, 7, 7", misses, hits, used)
	}
}

// TestCacheListPrefetch: a client with ListPrefetch lists a directory, and
// the stats of its entries that follow are hits (the listing brought them
// under leases from their home); a write of one of them by another client
// is then seen by the caching client's next stat.
func TestCacheListPrefetch(t *testing.T) { forEachR(t, testCacheListPrefetch) }

func testCacheListPrefetch(t *testing.T, r int) {
	c := cacheCluster(t, r)
	ctx := context.Background()
	w := via(c, c.IDs[0])
	mustOK(t, w.mkdir("/d", false), "mkdir")
	files := []string{"/d/f0", "/d/f1", "/d/f2", "/d/f3", "/d/f4", "/d/f5"}
	for _, p := range files {
		mustOK(t, w.create(p), "create")
	}
	// A file created on another shard than /d's is in flux there until
	// its part of the create is delivered, and gets no lease meanwhile:
	// wait until another caching client holds each under a lease.
	probe := cachingClient(t, c, nil)
	for _, p := range files {
		cached(t, probe, p)
	}
	cl := clientWithCache(t, c, &client.CacheOptions{Entries: 100, ListPrefetch: 64, PrefetchTimeout: time.Minute}, nil)
	if _, err := cl.ReadDir(ctx, &rpc.ReadDirRequest{Path: "/d"}); err != nil {
		t.Fatal(err)
	}
	for _, p := range files {
		st, err := cl.Stat(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		if st.Level != rpc.LevelCache {
			t.Errorf("stat %s after listing /d: level %s, want the cache", p, st.Level)
		}
	}
	if s := cl.CacheStats(); s.Misses != 0 || s.PrefetchUsed != uint64(len(files)) {
		t.Errorf("cache stats %+v: want no miss and the %d listed entries used", s, len(files))
	}
	if _, err := w.setattr(&rpc.SetAttrRequest{Path: files[2], Mode: u32(0o600)}); err != nil {
		t.Fatal(err)
	}
	st, err := cl.Stat(ctx, files[2])
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode != 0o600 {
		t.Errorf("stat %s after another client's chmod 600: mode %#o (level %s)", files[2], st.Mode, st.Level)
	}
}

// TestCacheAbsent: a client caches that a path does not exist, under a
// lease on its absence from the node that leads the directory whose
// entries say so (its own, or a missing directory's on the way); every way
// another client can make the path exist (create, mkdir, symlink, a
// rename into the directory, the directory itself replaced by one that
// holds the name, a missing directory on the way made or renamed in) is
// seen by the caching client's next stat once it was acknowledged.
func TestCacheAbsent(t *testing.T) { forEachR(t, testCacheAbsent) }

func testCacheAbsent(t *testing.T, r int) {
	c := cacheCluster(t, r)
	ctx := context.Background()
	w := via(c, c.IDs[0])
	mustOK(t, w.mkdir("/d", false), "mkdir")
	mustOK(t, w.mkdir("/e", false), "mkdir")
	mustOK(t, w.create("/d/a"), "create")
	mustOK(t, w.create("/e/b"), "create")
	mustOK(t, w.mkdir("/p", false), "mkdir")
	mustOK(t, w.mkdir("/o", false), "mkdir")
	mustOK(t, w.create("/o/n"), "create")
	mustOK(t, w.mkdir("/q", false), "mkdir")
	mustOK(t, w.mkdir("/o2", false), "mkdir")
	mustOK(t, w.create("/o2/x"), "create")
	mustOK(t, w.mkdir("/g", false), "mkdir")
	symlink := func(p string) error {
		return w.call(rpc.MethodCreate, &rpc.CreateRequest{Path: p, Mode: 0o777, Symlink: "/d/a"}, &rpc.CreateResponse{})
	}
	cl := cachingClient(t, c, nil)
	for _, tc := range []struct {
		name  string
		path  string
		write func() error
	}{
		{"create", "/d/x", func() error { return w.create("/d/x") }},
		{"mkdir", "/d/y", func() error { return w.mkdir("/d/y", false) }},
		{"symlink", "/d/s", func() error { return symlink("/d/s") }},
		{"rename within the directory", "/d/z", func() error { return w.rename("/d/a", "/d/z") }},
		{"rename from another directory", "/d/w", func() error { return w.rename("/e/b", "/d/w") }},
		{"in the root", "/top", func() error { return w.mkdir("/top", false) }},
		{"the directory removed and made again", "/p/n", func() error {
			if err := w.rmdir("/p"); err != nil {
				return err
			}
			if err := w.mkdir("/p", false); err != nil {
				return err
			}
			return w.create("/p/n")
		}},
		{"the directory replaced by a rename", "/q/n", func() error { return w.rename("/o", "/q") }},
		{"a missing directory on the way made", "/d/nd/x", func() error {
			if err := w.mkdir("/d/nd", false); err != nil {
				return err
			}
			return w.create("/d/nd/x")
		}},
		{"a missing directory on the way renamed in", "/d/md/x", func() error { return w.rename("/o2", "/d/md") }},
		{"the directory above a missing one made again", "/g/m/x", func() error {
			if err := w.rmdir("/g"); err != nil {
				return err
			}
			return w.mkdir("/g/m/x", true)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cachedAbsent(t, cl, tc.path)
			mustOK(t, tc.write(), "%s", tc.name)
			st, err := cl.Stat(ctx, tc.path)
			if err != nil {
				t.Fatalf("stat %s through the cache after %s was acknowledged: %v", tc.path, tc.name, err)
			}
			if st.Path != tc.path {
				t.Errorf("stat %s: %+v", tc.path, st)
			}
		})
	}
	if s := cl.CacheStats(); s.Invalidated == 0 {
		t.Errorf("cache stats %+v: want invalidations", s)
	}
	if s := leaseStats(c); s.LeasesGrantedAbsent == 0 || s.LeasesNotified == 0 {
		t.Errorf("lease stats: %d leases on absences, %d revocations acknowledged; want some of each", s.LeasesGrantedAbsent, s.LeasesNotified)
	}
}
