package namespace_test

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ghba/ghba/node/nodetest"
	"github.com/ghba/ghba/rpc/rpctest"
)

// TestHandOverFailsNothing moves the leadership of every shard back and
// forth between its replicas while clients create, stat, rename and list
// through every node (docs/design.md, "Planned leadership moves"): every
// request must succeed, none may answer "unavailable" or "outcome
// unknown". The shards' Raft timeouts are long (2 s), so that the only
// leadership changes are the planned ones: a loaded CI machine once made
// a leader step down by itself, and its commit point answered "outcome
// unknown", as a fail-over may.
func TestHandOverFailsNothing(t *testing.T) {
	c := nodetest.NewNamespaces(t, nodetest.NamespacesOptions{Nodes: 3, Replication: 3, RaftTimeout: 2 * time.Second})
	for _, d := range []string{"/a", "/b", "/c"} {
		mustOK(t, via(c, "n1").mkdir(d, false), "mkdir %s", d)
	}
	var (
		done   atomic.Int64
		failed atomic.Int64
	)
	fail := func(format string, a ...any) {
		if failed.Add(1) <= 20 {
			t.Errorf(format, a...)
		}
	}
	halt := rpctest.Loop(t, 6, func(w, i int) {
		o := via(c, c.IDs[(w+i)%len(c.IDs)])
		d := fmt.Sprintf("/%c", "abc"[(w+i)%3])
		p := fmt.Sprintf("%s/w%d-%d", d, w, i)
		if err := o.create(p); err != nil {
			fail("create %s: %v", p, err)
			return
		}
		if _, err := o.stat(p); err != nil {
			fail("stat %s: %v", p, err)
			return
		}
		if err := o.rename(p, p+".r"); err != nil {
			fail("rename %s: %v", p, err)
			return
		}
		if i%8 == 7 {
			if _, err := o.readdir(d, "", 50); err != nil {
				fail("readdir %s: %v", d, err)
			}
		}
		done.Add(1)
	})
	waitDone := func(k int64) {
		want := done.Load() + k
		rpctest.Eventually(t, 30*time.Second, fmt.Sprintf("%d more rounds", k), func() error {
			if n := done.Load(); n < want {
				return fmt.Errorf("%d of %d", n, want)
			}
			return nil
		})
	}
	waitDone(50)
	moves := 0
	for round := range 2 {
		for _, s := range c.IDs {
			for _, to := range c.IDs {
				if to == s {
					continue
				}
				if err := c.HandOver(s, to); err != nil {
					t.Fatalf("round %d: handing %s to %s: %v", round, s, to, err)
				}
				moves++
				waitDone(10)
			}
			if err := c.HandOver(s, s); err != nil {
				t.Fatalf("round %d: handing %s back to its owner: %v", round, s, err)
			}
			moves++
		}
	}
	waitDone(20)
	halt()
	t.Logf("%d planned moves, %d rounds of requests, %d failed", moves, done.Load(), failed.Load())
}
