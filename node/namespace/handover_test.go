package namespace_test

import (
	"fmt"
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
	l := &loadCheck{t: t, timeout: 30 * time.Second}
	halt := rpctest.Loop(t, 6, func(w, i int) {
		o := via(c, c.IDs[(w+i)%len(c.IDs)])
		d := fmt.Sprintf("/%c", "abc"[(w+i)%3])
		p := fmt.Sprintf("%s/w%d-%d", d, w, i)
		if err := o.create(p); err != nil {
			l.fail("create %s: %v", p, err)
			return
		}
		if _, err := o.stat(p); err != nil {
			l.fail("stat %s: %v", p, err)
			return
		}
		if err := o.rename(p, p+".r"); err != nil {
			l.fail("rename %s: %v", p, err)
			return
		}
		if i%8 == 7 {
			if _, err := o.readdir(d, "", 50); err != nil {
				l.fail("readdir %s: %v", d, err)
			}
		}
		l.done.Add(1)
	})
	l.wait(50)
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
				l.wait(10)
			}
			if err := c.HandOver(s, s); err != nil {
				t.Fatalf("round %d: handing %s back to its owner: %v", round, s, err)
			}
			moves++
		}
	}
	l.wait(20)
	halt()
	t.Logf("%d planned moves, %d rounds of requests, %d failed", moves, l.done.Load(), l.failed.Load())
}
