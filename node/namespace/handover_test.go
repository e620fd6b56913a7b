package namespace_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ghba/ghba/node/namespace"
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

// TestHandOverWhileAReadResolves hands a shard's leadership over while a
// remote request waits at the shard's old leader for the resolution of a
// prepared unlink whose coordinator is at its commit point (held there by
// a hook): the move cuts the resolution short, which did nothing, so the
// request must be answered by the new leader, not fail as "unavailable"
// (TestHandOverFailsNothing met this once, as a readdir).
func TestHandOverWhileAReadResolves(t *testing.T) {
	c := nodetest.NewNamespaces(t, nodetest.NamespacesOptions{Nodes: 3, Replication: 3, RaftTimeout: 2 * time.Second})
	mustOK(t, via(c, "n1").mkdir("/t", false), "mkdir /t")
	x := homeOf(c, t, "/t") // the coordinator of unlinks in /t
	f, s := "", ""
	for i := 0; s == "" || s == x; i++ {
		if i == 50 {
			t.Fatal("no file of /t homed away from /t")
		}
		f = fmt.Sprintf("/t/f%d", i)
		mustOK(t, via(c, x).create(f), "create %s", f)
		s = homeOf(c, t, f)
	}
	r := "" // the third node: it asks s, then leads s
	for _, id := range c.IDs {
		if id != x && id != s {
			r = id
		}
	}
	paused, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	defer once.Do(func() { close(release) })
	armed := crashHook(c.NS(x), namespace.HookCommitting, func() {
		close(paused)
		<-release
	})
	armed.Store(true)
	unlinked := make(chan error, 1)
	go func() { unlinked <- via(c, x).unlink(f) }()
	select {
	case <-paused:
	case err := <-unlinked:
		t.Fatalf("unlink %s (home %s, parent's %s) did not reach the commit point: %v", f, s, x, err)
	}
	checked := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		ok, err := c.NS(r).CheckAt(ctx, s, f)
		if err == nil && ok {
			err = fmt.Errorf("%s is still there after its unlink committed", f)
		}
		checked <- err
	}()
	rpctest.Eventually(t, 10*time.Second, "the request waits for the unlink's resolution", func() error {
		if !c.NS(s).Resolving() {
			return errors.New("no resolution under way")
		}
		return nil
	})
	if err := c.HandOver(s, r); err != nil {
		t.Fatalf("handing %s to %s: %v", s, r, err)
	}
	once.Do(func() { close(release) })
	if err := <-unlinked; err != nil {
		t.Fatalf("unlink %s: %v", f, err)
	}
	if err := <-checked; err != nil {
		t.Fatalf("check of %s at shard %s via %s while %s handed its leadership to %s: %v", f, s, r, s, r, err)
	}
	t.Logf("requests sent on by %s: %d", s, c.NS(s).Stats().Forwarded)
}
