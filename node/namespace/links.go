package namespace

import (
	"context"
	"errors"
	"time"

	"github.com/ghba/ghba/node/internal/backoff"
	"github.com/ghba/ghba/node/store"
)

// Directory link counts (docs/design.md, "Directory link counts"). Once a
// shard's log carries batch format 6, every batch keeps the link counts
// of the directories whose entries it changes (store.Batch.CountLinks, set
// by the shard's replica). The directories made before then still have the
// 2 that mkdir gave them, whatever subdirectories they have; a home whose
// store lacks the meta record linksCountedKey counts them again in the
// background (countLinks), and records that it did.

const (
	// linksCountedKey is a shard's meta record that its directories made
	// before link counts were kept have been counted.
	linksCountedKey = "links/counted"
	// recountBatch is how many directories one batch of the pass counts.
	recountBatch = 256
	// recountSettle is how long the pass waits once the log carries
	// format 6 before it counts: a batch that was encoded in the older
	// format just before, and is appended after the pass's batches, would
	// otherwise leave a directory's count one off.
	recountSettle = 2 * time.Second
)

// countLinks sets the link count of every directory of the shard from its
// entries, unless the shard's store records that this was done. It runs in
// the background of a new leadership, in batches of store.RecountLinks,
// which every replica applies to its own store at the same point of the
// log; a batch between two of them keeps the counts itself.
func (h *home) countLinks() {
	ctx := h.ctx
	if _, err := h.st.GetMeta(ctx, linksCountedKey); err == nil {
		h.linksCounted.Store(true)
		return
	}
	wait := backoff.NewJitter(100*time.Millisecond, 2*time.Second)
	for !h.writesFormat(store.BatchFormatV6) || !h.legacyNumbered() {
		// A replica may run a build that keeps no link counts. And the
		// numbering of inodes without an id (ids.go) puts each back with
		// the link count it read, which a count made meanwhile would lose:
		// the recount comes after it.
		if wait.Wait(ctx) != nil {
			return
		}
	}
	select {
	case <-ctx.Done():
		return
	case <-time.After(recountSettle):
	}
	for ctx.Err() == nil {
		n, err := h.countLinksPass(ctx)
		if err == nil {
			var b store.Batch
			b.SetMeta(linksCountedKey, []byte{1})
			if err = h.apply(ctx, &b); err == nil {
				if n > 0 {
					h.log.Info("counted the links of the directories made before link counts were kept", "directories", n)
				}
				h.linksCounted.Store(true)
				return
			}
		}
		if ctx.Err() == nil {
			h.log.Warn("counting the directories' links; will retry", "counted", n, "err", err)
		}
		if wait.Wait(ctx) != nil {
			return
		}
	}
}

// countLinksPass scans the shard's inodes once and recounts the links of
// its directories, recountBatch at a time.
func (h *home) countLinksPass(ctx context.Context) (counted int, err error) {
	after := ""
	for {
		var dirs []string
		last := ""
		err := h.st.SearchInodes(ctx, "/", after, nil, func(p string, ino store.Inode) error {
			last = p
			if ino.Type == store.TypeDir {
				dirs = append(dirs, p)
			}
			if len(dirs) == recountBatch {
				return errStopScan
			}
			return nil
		})
		if err != nil && !errors.Is(err, errStopScan) {
			return counted, err
		}
		if len(dirs) > 0 {
			var b store.Batch
			for _, d := range dirs {
				b.RecountLinks(d)
			}
			if err := h.apply(ctx, &b); err != nil {
				return counted, err
			}
			counted += len(dirs)
		}
		if !errors.Is(err, errStopScan) {
			return counted, nil
		}
		after = last
	}
}
