package mount

import (
	"cmp"
	"context"
	"time"

	"github.com/ghba/ghba/rpc"
)

// Holds on open files (docs/design.md, "Garbage collection of contents").
// While this mount has files open, it holds their inodes at the shards
// that home them (client.Hold) and renews the holds a few times per
// lifetime, so that a file another mount (or this one) removes keeps its
// contents for this mount's descriptors until their last close, however
// long after the cluster's grace period. A newly opened file is held
// within holdNewAfter: the opens of that window share one request per
// shard, and the periodic renewal holds every open file. If the mount
// dies, the holds end after their lifetime.
//
// Holding a new file a little late is safe: the trash deletes a removed
// file's contents no earlier than the cluster's grace period (data_gc_grace,
// at least 1 s) after the removal, which came after the open.

// holdRenewals is how many times per lifetime the holds are renewed.
const holdRenewals = 3

// defaultHoldEvery is how often holds are renewed before a shard said how
// long they last.
const defaultHoldEvery = 5 * time.Second

// holdNewAfter is how long the loop gathers newly opened files before it
// holds them: 16 processes creating files share a request per shard
// instead of sending one each.
const holdNewAfter = 20 * time.Millisecond

// holdShard is the shard that holds an open file's contents: a file with
// several names is held where its record is (its contents go to the trash
// there), any other at its home.
func holdShard(st *rpc.Inode) string { return cmp.Or(st.Anchor, st.Home) }

// watchHolds starts the loop that holds the open files' inodes.
func (f *FS) watchHolds() {
	f.holdKick = make(chan struct{}, 1)
	f.tasks.Add(1)
	go func() {
		defer f.tasks.Done()
		every := defaultHoldEvery
		next := time.Now().Add(every) // the next renewal
		renew := time.NewTimer(every)
		defer renew.Stop()
		for {
			all := false
			select {
			case <-f.ctx.Done():
				return
			case <-renew.C:
				all = true
			case <-f.holdKick:
				gather := time.NewTimer(holdNewAfter)
				select {
				case <-f.ctx.Done():
					gather.Stop()
					return
				case <-renew.C:
					all = true
				case <-gather.C:
				}
				gather.Stop()
			}
			if ttl := f.holdOpen(f.ctx, all); ttl > 0 {
				every = max(ttl/holdRenewals, 10*time.Millisecond)
			}
			// Renew a third of a lifetime after the last renewal, or
			// sooner if a shard just said the holds last less than the
			// loop assumed.
			now := time.Now()
			if all || next.Sub(now) > every {
				next = now.Add(every)
			}
			renew.Reset(time.Until(next))
		}
	}()
}

// kickHolds has the loop hold the newly opened files soon.
func (f *FS) kickHolds() {
	if f.holdKick == nil {
		return
	}
	select {
	case f.holdKick <- struct{}{}:
	default:
	}
}

// holdOpen holds the open files' inodes at their shards, one request per
// shard: every open file (all), or those not held yet. It returns the
// shortest lifetime the shards gave (0: none answered).
func (f *FS) holdOpen(ctx context.Context, all bool) time.Duration {
	byShard := map[string][]uint64{}
	f.mu.Lock()
	for _, of := range f.open {
		if of.holdAt != "" && (all || !of.held) {
			byShard[of.holdAt] = append(byShard[of.holdAt], of.id)
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
		f.markHeld(shard, ids)
		if ttl == 0 || d < ttl {
			ttl = d
		}
	}
	return ttl
}

// markHeld records that shard holds the open files ids.
func (f *FS) markHeld(shard string, ids []uint64) {
	set := make(map[uint64]struct{}, len(ids))
	for _, id := range ids {
		set[id] = struct{}{}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, of := range f.open {
		if _, ok := set[of.id]; ok && of.holdAt == shard {
			of.held = true
		}
	}
}
