package store

import (
	"context"
	"fmt"
)

// LogEntry is one committed entry of a replicated log (a shard's Raft log)
// for ApplyLog.
type LogEntry struct {
	// Index is the entry's log index, at least 1.
	Index uint64
	// Batch is what the entry applies to the store. Nil applies nothing
	// but the index (an entry whose command does not touch the store, or
	// that its state machine refused before reaching the store).
	Batch *Batch
}

// ApplyResult is the outcome of one log entry (ApplyLog, RekeyPrefixAt).
type ApplyResult struct {
	// Index is the entry's log index.
	Index uint64
	// Skipped reports that the store had already applied the index (the
	// log was replayed after a restart): nothing was done, and Err, Added
	// and Removed are empty.
	Skipped bool
	// Err is the entry's own result, the same on every replica: a
	// *PreconditionError (wrapping ErrExists, ErrNotFound, ErrConflict or
	// ErrNotEmpty), an error wrapping ErrInvalid (the batch was invalid)
	// or ErrTooLarge (the entry does not fit in one Badger transaction,
	// whose size follows Options.MemTableSize: the replicas of a log must
	// use the same). The entry is applied all the same: it changed nothing
	// but the applied index.
	Err error
	// Added are the inode paths where the entry created an inode that did
	// not exist before the entry, Removed those where it deleted one that
	// existed, each in the order the entry first wrote them. A PutInode
	// over an existing inode is neither, and neither is an inode the entry
	// both created and deleted. (The inodes a rekey moves are reported to
	// its MovedFunc instead.)
	Added, Removed []string
}

// ApplyLog applies committed log entries in order: the store's writes in
// log-applied mode (see the package doc). Indexes must increase (else
// ErrInvalid, and nothing is applied). Entries at or below the applied
// index (AppliedIndex) are skipped: a log replays them after a restart.
//
// The entries are applied in as few Badger transactions as possible (one,
// unless they exceed Badger's transaction limit: then the entries are split
// over several, in order, like a group commit), and each transaction also
// records the index of the last entry it contains, so that after a crash
// the store never claims an index whose effects it lost nor holds effects
// of an index it does not claim. Each entry's preconditions see the effects
// of the entries before it; an entry whose precondition fails changes
// nothing and reports the error in its ApplyResult.
//
// ApplyLog does not sync, even with synced writes: with
// Options.NoSyncWrites the caller's log is the point of durability, and
// Sync makes the store durable before the log may be truncated.
//
// It returns one result per entry. An error (an internal failure such as a
// Badger write error, ctx done between two transactions, or the store
// closed or being restored before it started) is not any entry's result:
// entries may have been applied up to some index, which AppliedIndex
// reports, with exactly their effects. ApplyLog and Commit may be used on
// the same store, but a log-applied store's writes should all come from
// its log.
func (s *Store) ApplyLog(ctx context.Context, entries []LogEntry) ([]ApplyResult, error) {
	var prev uint64
	for i, e := range entries {
		if e.Index <= prev {
			return nil, invalidf("log entry %d: index %d does not follow %d", i, e.Index, prev)
		}
		prev = e.Index
	}
	if err := s.enter(ctx); err != nil {
		return nil, err
	}
	defer s.leave()
	s.wmu.Lock()
	defer s.wmu.Unlock()

	applied := s.appliedIndex()
	results := make([]ApplyResult, len(entries))
	changes := make([]inodeChanges, len(entries))
	reqs := make([]*request, 0, len(entries))
	pos := make([]int, 0, len(entries)) // reqs[j] is entries[pos[j]]
	for i, e := range entries {
		results[i].Index = e.Index
		if e.Index <= applied {
			results[i].Skipped = true
			continue
		}
		if s.broken.ackEarly(s, e.Batch) {
			e.Batch = nil // applied later: broken on purpose (ghba_broken builds only)
		}
		reqs = append(reqs, logRequest(e, &changes[i]))
		pos = append(pos, i)
	}
	for done := 0; done < len(reqs); {
		if done > 0 {
			if err := ctx.Err(); err != nil {
				return nil, fmt.Errorf("store: apply log after index %d: %w", reqs[done-1].index, err)
			}
		}
		n, err := s.commitPrefix(reqs[done:], &s.stats.logTxns)
		if err == nil && !reqs[done].committed {
			err = reqs[done].err // not even its index fits: cannot happen
		}
		if err != nil {
			return nil, fmt.Errorf("store: apply log: entry %d: %w", reqs[done].index, err)
		}
		done += n
		if s.applyHook != nil {
			if err := s.applyHook(reqs[done-1].index); err != nil {
				return nil, err
			}
		}
	}
	for j, r := range reqs {
		res := &results[pos[j]]
		res.Err = r.err
		if r.err == nil {
			res.Added, res.Removed = changes[pos[j]].added(), changes[pos[j]].removed()
		}
	}
	s.stats.logEntries.Add(uint64(len(reqs)))
	return results, nil
}

// logRequest is the request applying one log entry; its write records the
// entry's inode changes in ch.
func logRequest(e LogEntry, ch *inodeChanges) *request {
	r := &request{index: e.Index}
	switch b := e.Batch; {
	case b == nil:
	case b.err != nil:
		r.fail = b.err
	default:
		r.check = b.check
		r.write = func(w *wtxn) error {
			ch.reset()
			w.changes = ch
			defer func() { w.changes = nil }()
			return b.write(w)
		}
	}
	return r
}

// AppliedIndex returns the index of the last log entry applied (by
// ApplyLog, RekeyPrefixAt or Restore), 0 if none. It is recorded in the
// same Badger transactions as the entries' effects.
func (s *Store) AppliedIndex(ctx context.Context) (uint64, error) {
	if err := s.enter(ctx); err != nil {
		return 0, err
	}
	defer s.leave()
	return s.appliedIndex(), nil
}

func (s *Store) appliedIndex() uint64 {
	s.countsMu.Lock()
	defer s.countsMu.Unlock()
	return s.applied
}

// Sync makes every write acknowledged so far durable (Badger's DB.Sync).
// With Options.NoSyncWrites, a replica calls it before its log may be
// truncated (before a snapshot), so that the log never drops entries whose
// effects a power loss could still take away.
func (s *Store) Sync() error {
	if err := s.gate.enter(); err != nil {
		return err
	}
	defer s.leave()
	if err := s.db.Sync(); err != nil {
		return fmt.Errorf("store: sync: %w", err)
	}
	return nil
}
