package namespace

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"sync"
)

// keyLocks is a table of mutexes by key; entries exist only while locked
// or waited for, so memory is bounded by the operations in progress.
type keyLocks struct {
	mu sync.Mutex
	m  map[string]*keyLock
}

type keyLock struct {
	refs int
	ch   chan struct{} // holds one token while locked
}

// lock acquires the locks of keys (sorted and deduplicated, so two callers
// never deadlock each other), waiting at most until ctx is done.
func (l *keyLocks) lock(ctx context.Context, keys ...string) (unlock func(), err error) {
	keys = slices.Clone(keys)
	sort.Strings(keys)
	keys = slices.Compact(keys)
	held := make([]*keyLock, 0, len(keys))
	release := func() {
		for i := len(held) - 1; i >= 0; i-- {
			<-held[i].ch
		}
		l.mu.Lock()
		for _, k := range keys {
			if kl := l.m[k]; kl != nil {
				if kl.refs--; kl.refs == 0 {
					delete(l.m, k)
				}
			}
		}
		l.mu.Unlock()
	}
	l.mu.Lock()
	if l.m == nil {
		l.m = make(map[string]*keyLock)
	}
	locks := make([]*keyLock, len(keys))
	for i, k := range keys {
		kl := l.m[k]
		if kl == nil {
			kl = &keyLock{ch: make(chan struct{}, 1)}
			l.m[k] = kl
		}
		kl.refs++
		locks[i] = kl
	}
	l.mu.Unlock()
	for _, kl := range locks {
		select {
		case kl.ch <- struct{}{}:
			held = append(held, kl)
		case <-ctx.Done():
			release()
			return nil, fmt.Errorf("waiting for a lock: %w", ctx.Err())
		}
	}
	return release, nil
}
