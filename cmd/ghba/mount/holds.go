package mount

import (
	"cmp"
	"context"
	"time"
)

// Holds on open files (docs/design.md, "Garbage collection of contents").
// While this mount has files open, it holds their inodes at the shards
// that home them (client.Hold) and renews the holds a few times per
// lifetime, so that a file another mount (or this one) removes keeps its
// contents for this mount's descriptors until their last close, however
// long after the cluster's grace period. A newly opened file is held at
// once. If the mount dies, the holds end after their lifetime.

// holdRenewals is how many times per lifetime the holds are renewed.
const holdRenewals = 3

// defaultHoldEvery is how often holds are renewed before a shard said how
// long they last.
const defaultHoldEvery = 5 * time.Second

// watchHolds starts the loop that holds the open files' inodes.
func (f *FS) watchHolds() {
	f.holdKick = make(chan struct{}, 1)
	f.tasks.Add(1)
	go func() {
		defer f.tasks.Done()
		every := defaultHoldEvery
		t := time.NewTimer(every)
		defer t.Stop()
		for {
			select {
			case <-f.ctx.Done():
				return
			case <-t.C:
			case <-f.holdKick:
			}
			if ttl := f.holdOpen(f.ctx); ttl > 0 {
				every = max(ttl/holdRenewals, 10*time.Millisecond)
			}
			if !t.Stop() {
				select {
				case <-t.C:
				default:
				}
			}
			t.Reset(every)
		}
	}()
}

// kickHolds has the loop hold the open files now (a file was opened).
func (f *FS) kickHolds() {
	if f.holdKick == nil {
		return
	}
	select {
	case f.holdKick <- struct{}{}:
	default:
	}
}

// holdOpen holds every open file's inode at its shard, one request per
// shard, and returns the shortest lifetime the shards gave (0: none).
func (f *FS) holdOpen(ctx context.Context) time.Duration {
	byShard := map[string][]uint64{}
	f.mu.Lock()
	for _, of := range f.open {
		// A file with several names is held where its record is: its
		// contents go to the trash there.
		if home := cmp.Or(of.base.Anchor, of.base.Home); home != "" && of.id != 0 {
			byShard[home] = append(byShard[home], of.id)
		}
	}
	f.mu.Unlock()
	var ttl time.Duration
	for shard, ids := range byShard {
		cctx, cancel := context.WithTimeout(ctx, f.opts.RetryTimeout)
		d, err := f.c.Hold(cctx, shard, ids, false)
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				f.log.Warn("holding open files' contents; will retry", "shard", shard, "files", len(ids), "err", err)
			}
			continue
		}
		if ttl == 0 || d < ttl {
			ttl = d
		}
	}
	return ttl
}
