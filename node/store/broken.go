//go:build ghba_broken

package store

// This file is compiled only with the ghba_broken build tag, which the
// container fault suite (cmd/ghba/chaos, GHBA_CHAOS_BROKEN=<mode>) sets to prove
// that it catches a wrong server. It makes the store answer wrongly, the
// way a real bug would, when the environment variable GHBA_STORE_BROKEN
// names a mode:
//
//   - stale: ReadDir answers a listing cached for up to brokenStaleFor
//     (a read cache that writes do not invalidate): a directory listing
//     misses a file a create already acknowledged, or shows one an unlink
//     removed.
//   - early-ack: a Commit, or a log entry of ApplyLog (a shard replica's
//     store), that creates a file with its entry in one batch (a create
//     whose parent and file share a home) is acknowledged at once and
//     applied brokenAckDelay later (a write-behind buffer; a log entry
//     then applies only its index): a read in between misses the
//     acknowledged file, a kill -9 or a stop loses it, and a precondition
//     that fails by then drops it silently.
//
// Never build a release with this tag.

import (
	"context"
	"log/slog"
	"os"
	"slices"
	"sync"
	"time"
)

// Delays of the broken modes.
const (
	brokenStaleFor = time.Second
	brokenAckDelay = 300 * time.Millisecond
)

// broken is the state of the broken mode (nil: the store is correct).
type broken struct{ *brokenState }

type brokenState struct {
	mode string
	log  *slog.Logger

	mu       sync.Mutex
	listings map[brokenListingKey]brokenListing
}

type brokenListingKey struct {
	dir, after string
	limit      int
}

type brokenListing struct {
	at      time.Time
	entries []Entry
	more    bool
}

// newBroken reads GHBA_STORE_BROKEN.
func newBroken(log *slog.Logger) broken {
	mode := os.Getenv("GHBA_STORE_BROKEN")
	switch mode {
	case "":
		return broken{}
	case "stale", "early-ack":
	default:
		log.Error("GHBA_STORE_BROKEN names no broken mode (stale, early-ack): the store stays correct", "mode", mode)
		return broken{}
	}
	log.Warn("THIS STORE IS BROKEN ON PURPOSE (ghba_broken build): it answers wrongly", "mode", mode)
	return broken{&brokenState{mode: mode, log: log, listings: make(map[brokenListingKey]brokenListing)}}
}

// staleReadDir returns a cached listing younger than brokenStaleFor, in
// mode stale.
func (b broken) staleReadDir(dir, after string, limit int) ([]Entry, bool, bool) {
	if b.brokenState == nil || b.mode != "stale" {
		return nil, false, false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	l, ok := b.listings[brokenListingKey{dir, after, limit}]
	if !ok || time.Since(l.at) > brokenStaleFor {
		return nil, false, false
	}
	return slices.Clone(l.entries), l.more, true
}

// keepReadDir caches a listing read from Badger, in mode stale.
func (b broken) keepReadDir(dir, after string, limit int, entries []Entry, more bool) {
	if b.brokenState == nil || b.mode != "stale" {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.listings[brokenListingKey{dir, after, limit}] = brokenListing{at: time.Now(), entries: slices.Clone(entries), more: more}
}

// ackEarly, in mode early-ack, takes a batch that creates a file inode
// together with a file entry and no intent, and applies a copy of it
// brokenAckDelay later (dropped if the store closes first); it reports
// whether it took the batch, which Commit then acknowledges (and ApplyLog
// applies only the entry's index).
func (b broken) ackEarly(s *Store, bt *Batch) bool {
	if b.brokenState == nil || b.mode != "early-ack" || bt == nil || bt.err != nil {
		return false
	}
	var fileInode, fileEntry bool
	for _, m := range bt.muts {
		switch {
		case m.kind == mutSetInode && inodeTypeOf(m.val) == TypeFile:
			fileInode = true
		case m.kind == mutSet && len(m.key) > 0 && m.key[0] == pfxEntry && len(m.val) > 1 && FileType(m.val[1]) == TypeFile:
			fileEntry = true
		case len(m.key) > 0 && m.key[0] == pfxIntent:
			return false
		}
	}
	if !fileInode || !fileEntry {
		return false
	}
	cp := &Batch{conds: slices.Clone(bt.conds), muts: slices.Clone(bt.muts)}
	go func() {
		t := time.NewTimer(brokenAckDelay)
		defer t.Stop()
		select {
		case <-t.C:
		case <-s.closing:
			return // lost, as in a crash
		}
		if err := s.submit(context.Background(), &request{check: cp.check, write: cp.write}); err != nil {
			b.log.Warn("broken early-ack: an acknowledged create was not applied", "err", err)
		}
	}()
	return true
}
