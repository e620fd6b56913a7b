package store

import (
	"context"
	"sync"
)

// gate admits the store's operations (reads, Commit, ApplyLog, rekeys,
// Backup, Sync) and lets Close and Restore wait until none is in progress.
// Operations that arrive while the store is closed, being restored or
// broken by a failed restore are refused at once rather than queued, so an
// operation that starts another (a callback of ScanInodes reading the
// store) can never wait for a Restore that waits for it.
type gate struct {
	mu        sync.Mutex
	idle      sync.Cond // broadcast when active drops to 0 or a restore ends
	active    int
	closed    bool
	restoring bool
	broken    error // wraps ErrRestoreIncomplete
}

// refusal returns why a new operation may not start (nil if it may). A
// Restore may start on a broken store. g.mu is held.
func (g *gate) refusal(restore bool) error {
	switch {
	case g.closed:
		return ErrClosed
	case g.restoring:
		return ErrRestoring
	case g.broken != nil && !restore:
		return g.broken
	}
	return nil
}

// enter admits one operation; leave must follow.
func (g *gate) enter() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if err := g.refusal(false); err != nil {
		return err
	}
	g.active++
	return nil
}

func (g *gate) leave() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.active--; g.active == 0 {
		g.idle.Broadcast()
	}
}

// beginRestore refuses new operations and waits until none is in
// progress (or ctx is done: then it gives up). endRestore must follow a
// nil return.
func (g *gate) beginRestore(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	stop := context.AfterFunc(ctx, func() {
		g.mu.Lock()
		g.idle.Broadcast()
		g.mu.Unlock()
	})
	defer stop()
	g.mu.Lock()
	defer g.mu.Unlock()
	if err := g.refusal(true); err != nil {
		return err
	}
	g.restoring = true
	for g.active > 0 && ctx.Err() == nil {
		g.idle.Wait()
	}
	if err := ctx.Err(); err != nil {
		g.endRestoreLocked(g.broken)
		return err
	}
	return nil
}

// endRestore admits operations again; broken (nil or wrapping
// ErrRestoreIncomplete) is the store's state from now on.
func (g *gate) endRestore(broken error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.endRestoreLocked(broken)
}

func (g *gate) endRestoreLocked(broken error) {
	g.restoring, g.broken = false, broken
	g.idle.Broadcast()
}
