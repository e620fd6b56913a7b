package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dgraph-io/badger/v4"
)

// MovedFunc is told about each inode moved by a rekey, after the step that
// moved it is durable (the node updates its filters from it).
type MovedFunc func(oldPath, newPath string)

// RekeyPrefix moves every inode and directory entry of the subtree rooted at
// oldPrefix (the root's own inode, every descendant's inode, the root's
// entries and those of every descendant directory) to the same place under
// newPrefix. It is the local half of a directory rename. onMoved may be nil.
//
// The move is done in bounded transactions (Options.RekeyStepKeys and
// RekeyStepBytes) with this crash protocol:
//
//  1. start: one transaction checks that no pending rekey overlaps (either
//     path equal to, an ancestor or a descendant of, either path of another
//     rekey; else ErrConflict) and that the destination is empty (no inode
//     at or under newPrefix, no entries of newPrefix or of a directory under
//     it; else ErrExists), and records the rekey record (0x05 oldPrefix ->
//     newPrefix).
//  2. steps: each transaction takes the first keys still under oldPrefix
//     (up to the step bounds), writes each at its new key and deletes the
//     old one. A step is atomic, so every key is in exactly one place, and
//     idempotent: the next step simply takes whatever is still under
//     oldPrefix.
//  3. finish: the step that finds fewer keys than its bound left also
//     deletes the rekey record, in the same transaction.
//
// A rekey is forward-only: if RekeyPrefix returns an error after step 1
// (crash, Close, ctx cancelled), the record stays and ResumeRekey completes
// the move, ending in the same state as an uninterrupted rekey. While a
// rekey is pending the subtree is split between both prefixes: the caller
// must keep other operations off both subtrees until it completes (the node
// does so, and runs ResumeRekey at start before serving).
//
// Neither path may be "/", and neither may be inside the other
// (ErrInvalid). The subtree need not have anything stored here.
//
// chain is the ancestor codes of newPrefix (Inode.Ancestors of a child of
// its new parent, ChildAncestors): each moved inode's codes of ancestors
// above the subtree are replaced by chain, and its codes from the subtree
// (oldPrefix and below) are shifted to their new depths.
func (s *Store) RekeyPrefix(ctx context.Context, oldPrefix, newPrefix string, chain []AncestorCode, onMoved MovedFunc) error {
	if err := checkRekey(oldPrefix, newPrefix); err != nil {
		return err
	}
	if err := s.enter(ctx); err != nil {
		return err
	}
	defer s.leave()
	rk, _, err := s.startRekey(ctx, 0, oldPrefix, newPrefix, chain)
	if err != nil {
		return err
	}
	return s.finishRekey(ctx, rk, onMoved)
}

// RekeyPrefixAt is RekeyPrefix as the log entry index (log-applied mode,
// see ApplyLog): the transaction that starts the rekey also records index
// as the applied index, and the rekey is skipped (ApplyResult.Skipped) if
// the store has applied index already. A rekey refused at start (invalid
// paths, an overlapping rekey pending, a destination not empty) is an
// applied entry too: the index is recorded and the refusal is
// ApplyResult.Err, the same on every replica.
//
// An error is not the entry's result but an interruption: either nothing
// was applied (the index is not recorded), or the rekey started (the index
// is recorded) and stopped before the end; then ResumeRekey completes it,
// and must run before any later entry is applied, as at start after a
// crash. onMoved is told about every inode moved (ApplyResult.Added and
// Removed stay empty). RekeyPrefixAt never syncs (see ApplyLog). The rekey
// record's Started time is the replica's own clock: the only part of a
// log-applied store that may differ between replicas, and only while the
// rekey is pending.
func (s *Store) RekeyPrefixAt(ctx context.Context, index uint64, oldPrefix, newPrefix string, chain []AncestorCode, onMoved MovedFunc) (ApplyResult, error) {
	res := ApplyResult{Index: index}
	if index == 0 {
		return res, invalidf("rekey at log index 0")
	}
	if err := s.enter(ctx); err != nil {
		return res, err
	}
	defer s.leave()
	rk, start, err := s.startRekey(ctx, index, oldPrefix, newPrefix, chain)
	switch {
	case start.skipped:
		res.Skipped = true
		return res, nil
	case start.committed && start.err != nil:
		res.Err = err
		return res, nil
	case err != nil:
		return res, err
	}
	return res, s.finishRekey(ctx, rk, onMoved)
}

// checkChain validates the ancestor codes of a path at depth depth:
// increasing depths, all above it.
func checkChain(chain []AncestorCode, depth int) error {
	for i, c := range chain {
		if int(c.Depth) >= depth || (i > 0 && c.Depth <= chain[i-1].Depth) {
			return invalidf("ancestor codes %v do not fit a path at depth %d", chain, depth)
		}
	}
	return nil
}

// checkRekey validates the paths of a rekey.
func checkRekey(oldPrefix, newPrefix string) error {
	for _, p := range []string{oldPrefix, newPrefix} {
		if err := checkPath(p); err != nil {
			return err
		}
		if p == "/" {
			return invalidf("cannot rekey the root")
		}
	}
	if isUnder(newPrefix, oldPrefix) || isUnder(oldPrefix, newPrefix) {
		return invalidf("rekey %q -> %q: one path contains the other", oldPrefix, newPrefix)
	}
	return nil
}

// startRekey runs step 1 of a rekey, as log entry index if not 0: invalid
// paths are then the entry's result rather than a refusal to apply it. The
// returned request tells whether the start was skipped or committed.
func (s *Store) startRekey(ctx context.Context, index uint64, oldPrefix, newPrefix string, chain []AncestorCode) (Rekey, *request, error) {
	rk := Rekey{Old: oldPrefix, New: newPrefix, Started: time.Now().UnixNano(), Chain: chain}
	start := &request{index: index}
	if err := checkRekey(oldPrefix, newPrefix); err != nil {
		start.fail = err
	} else if err := checkChain(chain, PathDepth(newPrefix)); err != nil {
		start.fail = err
	} else {
		start.check = func(w *wtxn) (*PreconditionError, error) { return s.rekeyStartCheck(w, rk) }
		start.write = func(w *wtxn) error { return w.setRekey(rk) }
	}
	if err := s.submit(ctx, start); err != nil {
		return rk, start, fmt.Errorf("store: rekey %q -> %q: %w", oldPrefix, newPrefix, err)
	}
	return rk, start, nil
}

// finishRekey runs the steps of a started rekey.
func (s *Store) finishRekey(ctx context.Context, rk Rekey, onMoved MovedFunc) error {
	s.log.Info("rekey started", "old", rk.Old, "new", rk.New)
	if s.rekeyHook != nil {
		if err := s.rekeyHook(0); err != nil {
			return fmt.Errorf("store: rekey %q -> %q after start: %w", rk.Old, rk.New, err)
		}
	}
	return s.runRekey(ctx, rk, onMoved)
}

// rekeyStartCheck is the precondition of step 1 of a rekey (see
// RekeyPrefix): no pending rekey overlaps rk, and the destination is empty
// unless there is nothing to move. The pending rekeys are those of the
// store's rekeyIndex with the changes of the requests before this one in
// w, which is what a scan of the rekey records in w would find, without
// stepping over the deleted versions of every earlier rekey (issue 35); of
// several overlapping ones, the lowest in key order is reported, as the
// scan did.
func (s *Store) rekeyStartCheck(w *wtxn, rk Rekey) (*PreconditionError, error) {
	other, found, err := s.rekeys.first(s.db, w.rekeys, func(other Rekey) bool { return overlaps(rk, other) })
	switch {
	case err != nil:
		return nil, err
	case found && other.err != nil:
		return nil, other.err
	case found:
		return &PreconditionError{Cond: "no overlapping rekey", Target: other.rk.Old + " -> " + other.rk.New, Err: ErrConflict}, nil
	}

	// A rekey with nothing to move is a no-op, whatever the destination
	// holds: the same rekey applied again (a new leader finishing a
	// committed directory rename whose rekey entry its predecessor had
	// already committed finds the paths at the destination) must not
	// fail.
	has, err := w.exists(inodeKey(rk.Old))
	if err != nil {
		return nil, err
	}
	empty := !has
	for _, p := range subtreePrefixes(rk.Old) {
		if !empty {
			break
		}
		it := w.txn.NewIterator(badger.IteratorOptions{Prefix: p})
		it.Rewind()
		empty = !it.Valid()
		it.Close()
	}
	if empty {
		return nil, nil
	}
	ok, err := w.exists(inodeKey(rk.New))
	if err != nil {
		return nil, err
	}
	for _, p := range subtreePrefixes(rk.New) {
		if ok {
			break
		}
		it := w.txn.NewIterator(badger.IteratorOptions{Prefix: p})
		it.Rewind()
		ok = it.Valid()
		it.Close()
	}
	if ok {
		return &PreconditionError{Cond: "rekey destination empty", Target: rk.New, Err: ErrExists}, nil
	}
	return nil, nil
}

func overlaps(a, b Rekey) bool {
	for _, x := range []string{a.Old, a.New} {
		for _, y := range []string{b.Old, b.New} {
			if isUnder(x, y) || isUnder(y, x) {
				return true
			}
		}
	}
	return false
}

// subtreePrefixes are the key prefixes of a subtree below root, besides
// root's own inode key: descendants' inodes, root's entries, descendant
// directories' entries.
func subtreePrefixes(root string) [][]byte {
	descEntries := append([]byte{pfxEntry}, root...)
	descEntries = append(descEntries, '/')
	return [][]byte{inodeKey(root + "/"), entryDirPrefix(root), descEntries}
}

// runRekey runs steps until the rekey record is gone.
func (s *Store) runRekey(ctx context.Context, rk Rekey, onMoved MovedFunc) error {
	what := fmt.Sprintf("rekey %q -> %q", rk.Old, rk.New)
	inodes, steps, err := s.runSteps(ctx, what, func(w *wtxn, keys, size int) (stepResult, error) {
		moved, done, err := rekeyStep(w, rk, keys, size)
		return stepResult{inodes: len(moved), done: done, committed: func() {
			if onMoved != nil {
				for _, m := range moved {
					onMoved(m[0], m[1])
				}
			}
		}}, err
	})
	if err == nil {
		s.log.Info("rekey finished", "old", rk.Old, "new", rk.New, "inodes", inodes, "steps", steps)
	}
	return err
}

// stepResult is what one step of a subtree change did.
type stepResult struct {
	inodes    int    // inodes changed
	done      bool   // the change is complete (its record deleted)
	committed func() // run once the step's transaction committed; may be nil
}

// stepFunc is one step of a subtree change (rekey, recode): its writes in
// transaction w, of up to keys keys (about size bytes). It may run more
// than once against the same state, so it must not keep state between
// runs.
type stepFunc func(w *wtxn, keys, size int) (stepResult, error)

// runSteps runs step in transactions until it reports the change done,
// halving the step's bounds when a step does not fit in one transaction
// (nothing of it was applied), and calls the test hook after each step.
// It returns the inodes changed and the steps taken.
func (s *Store) runSteps(ctx context.Context, what string, step stepFunc) (inodes, steps int, err error) {
	keys := min(s.rekeyStepKeys, int(s.db.MaxBatchCount()/4))
	size := min(s.rekeyStepBytes, int(s.db.MaxBatchSize()/4))
	for n := 1; ; n++ {
		var res stepResult
		r := &request{write: func(w *wtxn) (err error) {
			res, err = step(w, keys, size)
			return err
		}}
		if err := s.submit(ctx, r); err != nil {
			if errors.Is(err, ErrTooLarge) && keys > 1 {
				// A step of large values did not fit in one transaction:
				// nothing was applied; retry it smaller.
				keys, size = max(1, keys/2), max(1, size/2)
				n--
				continue
			}
			return inodes, n, fmt.Errorf("store: %s step %d: %w", what, n, err)
		}
		if res.committed != nil {
			res.committed()
		}
		inodes += res.inodes
		if res.done {
			return inodes, n, nil
		}
		if s.rekeyHook != nil {
			if err := s.rekeyHook(n); err != nil {
				return inodes, n, fmt.Errorf("store: %s after step %d: %w", what, n, err)
			}
		}
	}
}

// rekeyStep moves up to maxKeys keys (about maxBytes) of the subtree and,
// when it exhausts the subtree, deletes the rekey record.
func rekeyStep(w *wtxn, rk Rekey, maxKeys, maxBytes int) (moved [][2]string, done bool, err error) {
	type kv struct{ key, val []byte }
	var kvs []kv
	n := 0
	full := func() bool { return len(kvs) >= maxKeys || n >= maxBytes }

	root := inodeKey(rk.Old)
	if v, ok, err := w.get(root); err != nil {
		return nil, false, err
	} else if ok {
		kvs = append(kvs, kv{root, v})
		n += len(root) + len(v)
	}
	for _, p := range subtreePrefixes(rk.Old) {
		if full() {
			break
		}
		it := w.txn.NewIterator(badger.IteratorOptions{Prefix: p, PrefetchValues: true, PrefetchSize: 100})
		for it.Rewind(); it.Valid() && !full(); it.Next() {
			item := it.Item()
			v, err := item.ValueCopy(nil)
			if err != nil {
				it.Close()
				return nil, false, err
			}
			k := item.KeyCopy(nil)
			kvs = append(kvs, kv{k, v})
			n += len(k) + len(v)
		}
		it.Close()
	}
	more := full()
	oldDepth, newDepth := uint32(PathDepth(rk.Old)), uint32(PathDepth(rk.New))
	for _, e := range kvs {
		nk := rekeyed(e.key, rk.Old, rk.New)
		if e.key[0] == pfxInode {
			ino, err := decodeInode(e.val)
			if err != nil {
				return nil, false, fmt.Errorf("store: inode %q: %w", e.key[1:], err)
			}
			ino.Ancestors = movedCodes(ino.Ancestors, rk.Chain, oldDepth, newDepth)
			if err := w.setInode(nk, encodeInode(&ino), false); err != nil {
				return nil, false, err
			}
			if err := w.txn.Delete(e.key); err != nil {
				return nil, false, err
			}
			w.count(inodeTypeOf(e.val), -1)
			moved = append(moved, [2]string{string(e.key[1:]), string(nk[1:])})
			continue
		}
		if err := w.txn.Set(nk, e.val); err != nil {
			return nil, false, err
		}
		if err := w.txn.Delete(e.key); err != nil {
			return nil, false, err
		}
	}
	if !more {
		if err := w.deleteRekey(rk.Old); err != nil {
			return nil, false, err
		}
	}
	return moved, !more, nil
}

// PendingRekeys returns the rekeys that started and did not finish, sorted
// by old path.
func (s *Store) PendingRekeys(ctx context.Context) ([]Rekey, error) {
	return pendingRecords(ctx, s, pfxRekey, "rekey", decodeRekey)
}

// pendingRecords decodes every record of a subtree change (rekeys,
// recodes) whose key starts with pfx, in key order.
func pendingRecords[T any](ctx context.Context, s *Store, pfx byte, what string, decode func(string, []byte) (T, error)) ([]T, error) {
	var out []T
	err := s.view(ctx, func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte{pfx}, PrefetchValues: true})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			item := it.Item()
			id := string(item.Key()[1:])
			var rec T
			if err := item.Value(func(v []byte) (err error) { rec, err = decode(id, v); return err }); err != nil {
				return fmt.Errorf("store: %s record %q: %w", what, id, err)
			}
			out = append(out, rec)
		}
		return nil
	})
	return out, err
}

// ResumeRekey completes every pending rekey (see RekeyPrefix) and recode
// (see RecodeSubtreeAt); the node calls it at start, before serving and
// before rebuilding its filters with ScanInodes. onMoved, if not nil, is
// told about the inodes moved now (not those moved before the
// interruption).
func (s *Store) ResumeRekey(ctx context.Context, onMoved MovedFunc) error {
	if err := s.enter(ctx); err != nil {
		return err
	}
	defer s.leave()
	pending, err := s.PendingRekeys(ctx)
	if err != nil {
		return err
	}
	var errs []error
	for _, rk := range pending {
		s.log.Info("resuming rekey", "old", rk.Old, "new", rk.New, "started", time.Unix(0, rk.Started))
		if err := s.runRekey(ctx, rk, onMoved); err != nil {
			errs = append(errs, err)
		}
	}
	recodes, err := s.PendingRecodes(ctx)
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	for _, rc := range recodes {
		s.log.Info("resuming recode", "root", rc.Root, "cursor", rc.Cursor)
		if err := s.runRecode(ctx, rc); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
