package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ghba/ghba/rpc"
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
	c := newProcCluster(t, 3)
	c.startAll()
	ctx := context.Background()
	var addrs []string
	for _, n := range c.nodes {
		addrs = append(addrs, n.rpcAddr())
	}
	writer := rpc.NewClient(rpc.Options{Addrs: addrs, Timeout: procRPCTimeout})
	defer writer.Close()
	reader := rpc.NewClient(rpc.Options{Addrs: addrs, Timeout: procRPCTimeout, Cache: &rpc.CacheOptions{Entries: 100}})
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
	st, err := writer.Stat(ctx, paths[1])
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
