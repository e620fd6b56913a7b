package rpctest

import (
	"sync"
	"testing"
)

// Loop runs n workers, each calling step(w, i) for i = 0, 1, … until the
// returned halt is called; halt waits for them. It is also registered as
// a Cleanup of t, which runs before the Cleanups registered earlier (the
// cluster's close), so the workers stop first even when a wait fails the
// test, and none reports to a test that has completed.
func Loop(t testing.TB, n int, step func(w, i int)) (halt func()) {
	stop := make(chan struct{})
	var (
		once sync.Once
		wg   sync.WaitGroup
	)
	for w := range n {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				step(w, i)
			}
		})
	}
	halt = func() {
		once.Do(func() { close(stop) })
		wg.Wait()
	}
	t.Cleanup(halt)
	return halt
}
