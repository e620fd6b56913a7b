package shard_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ghba/ghba/routing"
	"github.com/ghba/ghba/rpc"
	"github.com/ghba/ghba/rpc/rpctest"
)

// TestCloseWithEntriesToApply closes a leader whose state machine lags
// behind its commit index (held by its filter lock), with writers whose
// contexts never end: Raft drops the entries it had not handed to the
// state machine when it shuts down, without answering their Applies; each
// Apply must still return once Close has, with nil or an unknown outcome,
// and the replica reopened holds every acknowledged write.
func TestCloseWithEntriesToApply(t *testing.T) {
	noLeaks(t)
	c := newCluster(t, 1)
	r := c.waitLeader()
	locked, release := make(chan struct{}), make(chan struct{})
	go r.rep.Filter(func(*routing.CountingFilter) { close(locked); <-release })
	<-locked

	var mu sync.Mutex
	acked := map[string]bool{}
	var wg sync.WaitGroup
	// The first entry stops the state machine (in its filter update, once
	// the store holds it); the writers' entries queue up behind it.
	applied := r.rep.Indexes().Applied
	wg.Go(func() {
		if err := r.rep.Apply(context.Background(), create("/first")); err == nil {
			mu.Lock()
			acked["/first"] = true
			mu.Unlock()
		} else if !errors.Is(err, rpc.ErrUnavailable) {
			t.Errorf("/first: %v", err)
		}
	})
	rpctest.Eventually(t, waitFor, "the state machine stopped", func() error {
		if ix := r.rep.Indexes(); ix.Applied == applied {
			return fmt.Errorf("indexes %+v", ix)
		}
		return nil
	})
	for w := range 32 {
		wg.Go(func() {
			for i := 0; ; i++ {
				p := fmt.Sprintf("/w%d/f%d", w, i)
				err := r.rep.Apply(context.Background(), create(p))
				switch {
				case err == nil:
					mu.Lock()
					acked[p] = true
					mu.Unlock()
				case errors.Is(err, rpc.ErrUnavailable):
					return
				default:
					t.Errorf("%s: %v", p, err)
					return
				}
			}
		})
	}
	rpctest.Eventually(t, waitFor, "entries committed, not applied", func() error {
		if ix := r.rep.Indexes(); ix.Commit < ix.Applied+24 {
			return fmt.Errorf("indexes %+v", ix)
		}
		return nil
	})
	closed := make(chan struct{})
	go func() { defer close(closed); r.close() }()
	rpctest.Eventually(t, waitFor, "raft shutting down", func() error {
		if st := r.rep.Stats()["state"]; st != "Shutdown" {
			return fmt.Errorf("state %s", st)
		}
		return nil
	})
	close(release)
	<-closed
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Apply still waiting 10s after Close")
	}
	if err := r.rep.Close(context.Background()); err != nil {
		t.Errorf("closing again: %v", err)
	}
	r.open()
	c.mustApply(create("/after"))
	s := c.converged()
	for p := range acked {
		if _, ok := s.Inodes[p]; !ok {
			t.Errorf("acknowledged %s lost", p)
		}
	}
	t.Logf("%d writes acknowledged, %d applied", len(acked), len(s.Inodes)-1)
}
