// Package tasks holds the one way the node starts a background goroutine:
// a Group that tracks its goroutines, refuses new ones once it is closed,
// and waits for them.
//
//	var g tasks.Group
//	g.Go(func() { loop(ctx) })  // false, and fn not run, after Close
//	...
//	cancel()                     // whatever makes the goroutines return
//	g.Close()                    // no new goroutine from now on
//	g.Wait()
package tasks

import "sync"

// Group tracks goroutines. The zero value is ready to use. Go and Close are
// safe for concurrent use; Wait may be called after Close.
type Group struct {
	mu     sync.Mutex
	closed bool
	wg     sync.WaitGroup
}

// Go runs fn in a new goroutine that Wait waits for, and reports true; once
// Close has been called it does not run fn and reports false.
func (g *Group) Go(fn func()) bool {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return false
	}
	g.wg.Add(1)
	g.mu.Unlock()
	go func() {
		defer g.wg.Done()
		fn()
	}()
	return true
}

// Close makes every later Go refuse. It does not stop running goroutines:
// the caller ends them (a context, a channel) and then calls Wait.
func (g *Group) Close() {
	g.mu.Lock()
	g.closed = true
	g.mu.Unlock()
}

// Closed reports whether Close has been called.
func (g *Group) Closed() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.closed
}

// Wait waits for every goroutine started by Go.
func (g *Group) Wait() { g.wg.Wait() }

// ForEach calls fn(i) for every i in [0, n), at most limit calls at a time,
// and returns when all have returned.
func ForEach(n, limit int, fn func(i int)) {
	sem := make(chan struct{}, max(limit, 1))
	var wg sync.WaitGroup
	for i := range n {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			fn(i)
		})
	}
	wg.Wait()
}
