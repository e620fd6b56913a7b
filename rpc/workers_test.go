package rpc

import (
	"runtime"
	"sync"
	"testing"
	"time"
)

// TestWorkers: a task never waits for a busy worker, an idle worker takes
// the next task (sequential tasks run on one goroutine), and every worker
// exits once stop is closed.
func TestWorkers(t *testing.T) {
	stop := make(chan struct{})
	w := newWorkers(stop)
	before := runtime.NumGoroutine()

	// Tasks that block until released all run at once.
	const n = 8
	release := make(chan struct{})
	var started, finished sync.WaitGroup
	started.Add(n)
	finished.Add(n)
	for range n {
		w.run(func() {
			started.Done()
			<-release
			finished.Done()
		})
	}
	waitGroup(t, &started, "blocked tasks to start on their own workers")
	close(release)
	waitGroup(t, &finished, "released tasks to finish")

	// Now n workers are idle (or about to be): 1,000 tasks one after the
	// other start at most one more (if none had parked yet at the first).
	for range 1000 {
		done := make(chan struct{})
		w.run(func() { close(done) })
		<-done
	}
	if got := w.started.Load(); got > n+1 {
		t.Fatalf("%d workers started for %d concurrent tasks and 1,000 sequential ones", got, n)
	}

	close(stop)
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines 5 s after stop, %d before the workers", runtime.NumGoroutine(), before)
		}
		time.Sleep(5 * time.Millisecond)
	}
	// After stop, a task still runs (on a new goroutine, which then exits).
	done := make(chan struct{})
	w.run(func() { close(done) })
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("a task given after stop did not run")
	}
}

func waitGroup(t *testing.T, wg *sync.WaitGroup, what string) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
}
