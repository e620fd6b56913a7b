package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ghba/ghba/rpc"
	"github.com/ghba/ghba/rpc/client"
)

// TestProcessCacheNeverStale: agent processes with the default cache
// lease; a writer client chmods a few files in a stream (no cache), and
// readers through another client with a metadata cache stat them all the
// time. No read may return a mode older than the last chmod acknowledged
// before the read began — also across a kill -9 of the node leading one of
// the files' shards. The cache must have answered some of the reads, or
// the test proved nothing.
func TestProcessCacheNeverStale(t *testing.T) {
	if testing.Short() {
		t.Skip("process test")
	}
	c, addrs, writer := startCacheCluster(t)
	ctx := context.Background()
	reader := client.New(client.Options{Addrs: addrs, Timeout: procRPCTimeout, Cache: &client.CacheOptions{Entries: 100}})
	defer reader.Close()

	const files = 4
	if _, err := writer.Mkdir(ctx, &rpc.MkdirRequest{Path: "/c", Mode: 0o755}); err != nil {
		t.Fatal(err)
	}
	paths := make([]string, files)
	for i := range paths {
		paths[i] = fmt.Sprintf("/c/f%d", i)
		if _, err := writer.Create(ctx, &rpc.CreateRequest{Path: paths[i], Mode: 0o600}); err != nil {
			t.Fatal(err)
		}
	}
	// acked[i] is the sequence number of file i's last acknowledged
	// chmod: modes cycle through 0o600..0o677, and the writer records the
	// sequence in the file's mtime, which only grows.
	var acked [files]atomic.Int64
	var stop atomic.Bool
	var stale, reads, failed atomic.Int64
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := 0; !stop.Load(); i++ {
				k := (g + i) % files
				before := acked[k].Load()
				st, err := reader.Stat(ctx, paths[k])
				if err != nil {
					failed.Add(1) // unavailable during the fail-over
					time.Sleep(10 * time.Millisecond)
					continue
				}
				reads.Add(1)
				if st.Mtime < before {
					if stale.Add(1) <= 5 {
						t.Errorf("stat %s at %s returned write %d after write %d was acknowledged", paths[k], st.Level, st.Mtime, before)
					}
				}
			}
		})
	}
	write := func(seq int64) {
		k := int(seq % files)
		mode := uint32(0o600 + seq%0o100)
		for {
			_, err := writer.SetAttr(ctx, &rpc.SetAttrRequest{Path: paths[k], Mode: &mode, Mtime: &seq})
			if err == nil {
				acked[k].Store(seq)
				return
			}
			if !errors.Is(err, rpc.ErrUnavailable) || stop.Load() {
				t.Errorf("chmod %s: %v", paths[k], err)
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	seq := int64(1)
	for ; seq <= 200; seq++ {
		write(seq)
		time.Sleep(2 * time.Millisecond) // let the readers cache between writes
	}
	// Kill the node leading /c/f1's shard and go on writing.
	victim := killHomeOf(t, c, writer, paths[1])
	for ; seq <= 300; seq++ {
		write(seq)
	}
	c.start(victim)
	c.waitReady("after the restart", c.nodes...)
	for ; seq <= 400; seq++ {
		write(seq)
		time.Sleep(2 * time.Millisecond)
	}
	stop.Store(true)
	wg.Wait()
	cs := reader.CacheStats()
	t.Logf("%d writes, %d reads (%d failed during the fail-over), cache %+v", seq-1, reads.Load(), failed.Load(), cs)
	if cs.Hits == 0 || cs.Invalidated == 0 {
		t.Errorf("the cache answered %d reads and was invalidated %d times: the test proved nothing", cs.Hits, cs.Invalidated)
	}
}

// TestProcessCacheAbsenceNeverStale: agent processes with the default
// cache lease; a writer client creates and removes a few files in turn (no
// cache), and readers, each through its own client with a metadata cache,
// stat them all the time, so that both the files and their absence are
// cached. No read may show a state older than the last write acknowledged
// before the read began: not "does not exist" after an acknowledged
// create (unless the remove that follows it had begun), not a file after
// an acknowledged remove (unless a later create had) — also across a
// kill -9 of the node leading the files' directory. The caches must have
// answered some of the "does not exist" reads, or the test proved nothing.
func TestProcessCacheAbsenceNeverStale(t *testing.T) {
	if testing.Short() {
		t.Skip("process test")
	}
	c, addrs, writer := startCacheCluster(t)
	ctx := context.Background()
	const files = 4
	if _, err := writer.Mkdir(ctx, &rpc.MkdirRequest{Path: "/a", Mode: 0o755}); err != nil {
		t.Fatal(err)
	}
	paths := make([]string, files)
	for i := range paths {
		paths[i] = fmt.Sprintf("/a/f%d", i)
	}
	// File k's writes are numbered 1, 2, …: odd ones create it (with that
	// number as its mtime), even ones remove it. started[k] is the number
	// of the last write sent, acked[k] of the last one acknowledged.
	var started, acked [files]atomic.Int64
	var stop atomic.Bool
	var stale, reads, failed, absentHits atomic.Int64
	var wg sync.WaitGroup
	for g := range 4 {
		reader := client.New(client.Options{Addrs: addrs, Timeout: procRPCTimeout, Cache: &client.CacheOptions{Entries: 100}})
		defer reader.Close()
		wg.Go(func() {
			for i := 0; !stop.Load(); i++ {
				k := (g + i) % files
				before := acked[k].Load()
				hits := reader.CacheStats().Hits
				st, err := reader.Stat(ctx, paths[k])
				after := started[k].Load()
				var bad string
				switch {
				case errors.Is(err, fs.ErrNotExist):
					if reader.CacheStats().Hits > hits {
						absentHits.Add(1)
					}
					if before%2 == 1 && after == before {
						bad = fmt.Sprintf("does not exist after create %d was acknowledged", before)
					}
				case err != nil:
					failed.Add(1) // unavailable during the fail-over
					time.Sleep(10 * time.Millisecond)
					continue
				case before%2 == 1 && st.Mtime < before, before%2 == 0 && st.Mtime <= before:
					bad = fmt.Sprintf("shows create %d (level %s) after write %d was acknowledged", st.Mtime, st.Level, before)
				}
				reads.Add(1)
				if bad != "" && stale.Add(1) <= 5 {
					t.Errorf("stat %s %s", paths[k], bad)
				}
			}
		})
	}
	write := func(k int) {
		seq := started[k].Add(1)
		for try := 0; ; try++ {
			var err error
			if seq%2 == 1 {
				_, err = writer.Create(ctx, &rpc.CreateRequest{Path: paths[k], Mode: 0o600, Mtime: seq})
			} else {
				err = writer.Unlink(ctx, paths[k])
			}
			doneBefore := try > 0 && (seq%2 == 1 && errors.Is(err, fs.ErrExist) || seq%2 == 0 && errors.Is(err, fs.ErrNotExist))
			if err == nil || doneBefore { // doneBefore: by a try whose answer was lost
				acked[k].Store(seq)
				return
			}
			if !errors.Is(err, rpc.ErrUnavailable) || stop.Load() {
				t.Errorf("write %d of %s: %v", seq, paths[k], err)
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	n := 0
	writes := func(count int, pause time.Duration) {
		for range count {
			write(n % files)
			n++
			time.Sleep(pause) // let the readers cache between writes
		}
	}
	writes(200, 2*time.Millisecond)
	// Kill the node leading /a's shard and go on writing.
	victim := killHomeOf(t, c, writer, "/a")
	writes(100, 0)
	c.start(victim)
	c.waitReady("after the restart", c.nodes...)
	writes(100, 2*time.Millisecond)
	stop.Store(true)
	wg.Wait()
	t.Logf("%d writes, %d reads (%d failed during the fail-over), %d \"does not exist\" answered by a cache", n, reads.Load(), failed.Load(), absentHits.Load())
	if absentHits.Load() == 0 {
		t.Error("no cache answered that a file does not exist: the test proved nothing")
	}
}

// startCacheCluster starts 3 agent processes with the default cache lease
// and returns them, their RPC addresses and a client without a cache.
func startCacheCluster(t *testing.T) (*procCluster, []string, *client.Client) {
	c := newProcCluster(t, 3)
	c.startAll()
	var addrs []string
	for _, n := range c.nodes {
		addrs = append(addrs, n.rpcAddr())
	}
	writer := client.New(client.Options{Addrs: addrs, Timeout: procRPCTimeout})
	t.Cleanup(func() { writer.Close() })
	return c, addrs, writer
}

// killHomeOf kills (-9) the node that leads p's shard and returns it.
func killHomeOf(t *testing.T, c *procCluster, cl *client.Client, p string) *procNode {
	st, err := cl.Stat(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	victim := c.nodes[0]
	for _, n := range c.nodes {
		if n.id == st.Inode.Home {
			victim = n
		}
	}
	c.kill(victim)
	return victim
}
