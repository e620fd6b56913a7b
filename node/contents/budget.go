package contents

import (
	"context"
	"sync"
)

// Budget bounds the dirty block memory of many files together: a mount
// shares one among all its open files, so that copying 100,000 files holds
// no more than the budget in unwritten blocks. A file that must wait for
// memory asks the files holding it to write back their dirty blocks, even
// partly written ones, so waiting always ends once uploads complete.
type Budget struct {
	mu      sync.Mutex
	limit   int64
	used    int64
	wake    chan struct{} // closed and replaced when memory is released
	holders map[*File]int64
}

// NewBudget returns a budget of limit bytes. One block is always granted
// when nothing is held, whatever the limit.
func NewBudget(limit int64) *Budget {
	return &Budget{limit: limit, wake: make(chan struct{}), holders: make(map[*File]int64)}
}

// Used returns the bytes held.
func (b *Budget) Used() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}

// acquire takes n bytes for f, waiting (and asking holders to write back)
// while the budget is spent. It gives up when ctx is done or f has a
// background upload error to report.
func (b *Budget) acquire(ctx context.Context, f *File, n int64) error {
	var victims []*File
	for {
		b.mu.Lock()
		if b.used+n <= b.limit || b.used == 0 {
			b.used += n
			b.holders[f] += n
			b.mu.Unlock()
			return nil
		}
		wake := b.wake
		victims = victims[:0]
		for h := range b.holders {
			victims = append(victims, h)
		}
		b.mu.Unlock()
		for _, h := range victims {
			h.writeBack()
		}
		if err := f.uploadErr(); err != nil {
			return err
		}
		select {
		case <-wake:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// release returns n bytes f held.
func (b *Budget) release(f *File, n int64) {
	if n == 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.used -= n
	if b.holders[f] -= n; b.holders[f] <= 0 {
		delete(b.holders, f)
	}
	close(b.wake)
	b.wake = make(chan struct{})
}
