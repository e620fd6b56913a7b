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
)

// TestProcessLinksKill: links and unlinks of the names of a few files run
// through every node of 3 agent processes (R=3) while the node leading the
// new names' directory is killed (-9) and started again (docs/design.md,
// "Hard links"). Afterwards, through every node, each file's names (as
// the directories list them) show its id and a link count equal to their
// number, every name whose link was acknowledged and not unlinked since is
// there, and every name whose unlink was acknowledged is gone.
func TestProcessLinksKill(t *testing.T) {
	if testing.Short() {
		t.Skip("process test")
	}
	c := newProcCluster(t, 3)
	c.startAll()
	ctx := context.Background()
	cl := c.client(c.nodes[0])
	for _, d := range []string{"/l", "/l/a", "/l/b"} {
		if _, err := cl.Mkdir(ctx, &rpc.MkdirRequest{Path: d, Mode: 0o755}); err != nil {
			t.Fatal(err)
		}
	}
	const files = 4
	ids := map[uint64]int{}
	for i := range files {
		p := fmt.Sprintf("/l/a/f%d", i)
		r, err := cl.Create(ctx, &rpc.CreateRequest{Path: p, Mode: 0o644})
		if err != nil {
			t.Fatal(err)
		}
		ids[r.Inode.ID] = i
	}
	// state is what the workers know of the names they made: present
	// (the link was acknowledged, no unlink since), absent (the unlink
	// was acknowledged); a name whose last call failed is left out.
	var (
		mu      sync.Mutex
		present = map[string]int{}
		absent  = map[string]bool{}
		stop    atomic.Bool
		acked   atomic.Int64
		failed  atomic.Int64
		wg      sync.WaitGroup
	)
	for g, n := range c.nodes {
		wc := c.client(n)
		wg.Go(func() {
			var mine []string
			for k := 0; !stop.Load(); k++ {
				opCtx, cancel := context.WithTimeout(ctx, procRPCTimeout)
				if k%3 == 2 && len(mine) > 0 {
					p := mine[0]
					mine = mine[1:]
					err := wc.Unlink(opCtx, p)
					cancel()
					mu.Lock()
					delete(present, p)
					if err == nil {
						absent[p] = true
						acked.Add(1)
					} else {
						failed.Add(1)
					}
					mu.Unlock()
					continue
				}
				i := (g + k) % files
				p := fmt.Sprintf("/l/b/w%d-%d", g, k)
				_, err := wc.Link(opCtx, fmt.Sprintf("/l/a/f%d", i), p)
				cancel()
				mu.Lock()
				if err == nil {
					present[p] = i
					mine = append(mine, p)
					acked.Add(1)
				} else {
					failed.Add(1)
					if !procUnavailable(err) && !errors.Is(err, rpc.ErrOutcomeUnknown) {
						t.Errorf("link %s: %v", p, err)
					}
				}
				mu.Unlock()
				if err != nil {
					time.Sleep(procPollInterval)
				}
			}
		})
	}
	waitAcked := func(n int64) {
		c.waitFor(fmt.Sprintf("%d links and unlinks acknowledged", n), procReadyTimeout, nil, func() (bool, string) {
			return acked.Load() >= n, fmt.Sprintf("%d so far", acked.Load())
		})
	}
	waitAcked(30)
	victim := killHomeOf(t, c, cl, "/l/b")
	c.t.Logf("kill -9 of %s, the home of /l/b, after %d acknowledged calls", victim.id, acked.Load())
	c.start(victim)
	c.waitReady(victim.id+" restarted and the cluster whole", c.nodes...)
	waitAcked(acked.Load() + 30)
	stop.Store(true)
	wg.Wait()
	t.Logf("%d calls acknowledged, %d failed (the fault)", acked.Load(), failed.Load())

	for _, n := range c.nodes {
		rc := c.client(n)
		names := map[uint64][]string{}
		nlink := map[string]uint32{}
		for _, d := range []string{"/l/a", "/l/b"} {
			ents, err := rc.ReadDirAll(ctx, d, 100)
			if err != nil {
				t.Fatalf("readdir %s via %s: %v", d, n.id, err)
			}
			for _, e := range ents {
				p := d + "/" + e.Name
				st, err := rc.Stat(ctx, p)
				if err != nil {
					t.Fatalf("stat %s via %s: %v", p, n.id, err)
				}
				if _, ok := ids[st.Inode.ID]; !ok {
					t.Fatalf("%s via %s: id %d is none of the files'", p, n.id, st.Inode.ID)
				}
				names[st.Inode.ID] = append(names[st.Inode.ID], p)
				nlink[p] = st.Inode.Nlink
			}
		}
		for id, ps := range names {
			for _, p := range ps {
				if nlink[p] != uint32(len(ps)) {
					t.Errorf("via %s: %s (file %d) has %d links, and %d names list it: %v", n.id, p, ids[id], nlink[p], len(ps), ps)
				}
			}
		}
		mu.Lock()
		for p, i := range present {
			if _, ok := nlink[p]; !ok {
				t.Errorf("via %s: %s, an acknowledged link of file %d, is missing", n.id, p, i)
			}
		}
		for p := range absent {
			if _, ok := nlink[p]; ok {
				t.Errorf("via %s: %s, acknowledged unlinked, is listed", n.id, p)
			}
		}
		mu.Unlock()
	}
	if _, err := cl.Stat(ctx, "/l/b/missing"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("stat of a name never made: %v", err)
	}
}
