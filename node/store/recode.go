package store

import (
	"bytes"
	"context"
	"fmt"

	"github.com/dgraph-io/badger/v4"
)

// RecodeSubtreeAt sets, in every inode strictly under root, the ancestor
// code of root (at depth PathDepth(root)) to code, or removes it when code
// is nil, as log entry index (log-applied mode, see ApplyLog and
// RekeyPrefixAt). It is the local half of a chmod or chown that changes
// the search permission a directory gives its subtree (HBA §4.2.2). Each
// recoded inode's Version is incremented, so that an operation that read
// an inode before the recode and requires its version fails. root's own
// inode is not touched (its code is in its descendants).
//
// Like a rekey it runs in bounded steps (Options.RekeyStepKeys and
// RekeyStepBytes) with a crash protocol: the start records a recode
// record (0x07 root -> code, cursor) with the applied index; each step
// recodes the next inodes after the record's cursor, in key order, and
// moves the cursor in the same transaction; the step that reaches the end
// deletes the record. A recode is forward-only and idempotent: after an
// interruption ResumeRekey completes it from the cursor, before any later
// entry is applied. The subtree's other operations must wait meanwhile
// (the node's transactions mark the subtree).
//
// The recode is skipped (ApplyResult.Skipped) if the store has applied
// index already; an invalid root or code is the entry's result
// (ApplyResult.Err). An error is an interruption, as for RekeyPrefixAt.
func (s *Store) RecodeSubtreeAt(ctx context.Context, index uint64, root string, code *AncestorCode) (ApplyResult, error) {
	res := ApplyResult{Index: index}
	if index == 0 {
		return res, invalidf("recode at log index 0")
	}
	if err := s.enter(ctx); err != nil {
		return res, err
	}
	defer s.leave()
	rc := Recode{Root: root, Code: code}
	start := &request{index: index}
	if err := checkRecode(rc); err != nil {
		start.fail = err
	} else {
		start.write = func(w *wtxn) error { return w.txn.Set(recodeKey(rc.Root), encodeRecode(&rc)) }
	}
	err := s.submit(ctx, start)
	switch {
	case start.skipped:
		res.Skipped = true
		return res, nil
	case start.committed && err != nil:
		res.Err = err
		return res, nil
	case err != nil:
		return res, fmt.Errorf("store: recode %q: %w", root, err)
	}
	return res, s.runRecode(ctx, rc)
}

// checkRecode validates a recode: a valid root whose depth the code names.
func checkRecode(rc Recode) error {
	if err := checkPath(rc.Root); err != nil {
		return err
	}
	if rc.Code != nil && int(rc.Code.Depth) != PathDepth(rc.Root) {
		return invalidf("recode of %q with a code for depth %d", rc.Root, rc.Code.Depth)
	}
	return nil
}

// descendantsPrefix is the key prefix of the inodes strictly under root
// (and, for "/", of root itself, which callers skip).
func descendantsPrefix(root string) []byte {
	if root == "/" {
		return inodeKey("/")
	}
	return inodeKey(root + "/")
}

// runRecode runs steps until the recode record is gone.
func (s *Store) runRecode(ctx context.Context, rc Recode) error {
	s.log.Info("recode started", "root", rc.Root, "cursor", rc.Cursor)
	inodes, steps, err := s.runSteps(ctx, fmt.Sprintf("recode %q", rc.Root), func(w *wtxn, keys, size int) (stepResult, error) {
		next := rc // a step may run again: start from the record each time
		n, done, err := recodeStep(w, &next, keys, size)
		return stepResult{inodes: n, done: done, committed: func() { rc = next }}, err
	})
	if err == nil {
		s.log.Info("recode finished", "root", rc.Root, "inodes", inodes, "steps", steps)
	}
	return err
}

// recodeStep recodes up to maxKeys inodes (about maxBytes) after rc's
// cursor and moves the cursor, or deletes the record when it reaches the
// subtree's end. rc is updated to the record as written.
func recodeStep(w *wtxn, rc *Recode, maxKeys, maxBytes int) (n int, done bool, err error) {
	prefix := descendantsPrefix(rc.Root)
	rootKey := inodeKey(rc.Root)
	seek := prefix
	if rc.Cursor != "" {
		seek = append(inodeKey(rc.Cursor), 0) // the first key after the cursor
	}
	type kv struct{ key, val []byte }
	var kvs []kv
	bytesSeen := 0
	it := w.txn.NewIterator(badger.IteratorOptions{Prefix: prefix, PrefetchValues: true, PrefetchSize: 100})
	it.Seek(seek)
	more := false
	for ; it.Valid(); it.Next() {
		if len(kvs) >= maxKeys || bytesSeen >= maxBytes {
			more = true
			break
		}
		item := it.Item()
		if bytes.Equal(item.Key(), rootKey) {
			continue
		}
		v, err := item.ValueCopy(nil)
		if err != nil {
			it.Close()
			return 0, false, err
		}
		k := item.KeyCopy(nil)
		kvs = append(kvs, kv{k, v})
		bytesSeen += len(k) + len(v)
	}
	it.Close()
	var depth uint32
	if rc.Code != nil {
		depth = rc.Code.Depth
	} else {
		depth = uint32(PathDepth(rc.Root))
	}
	for _, e := range kvs {
		ino, err := decodeInode(e.val)
		if err != nil {
			return 0, false, fmt.Errorf("store: inode %q: %w", e.key[1:], err)
		}
		ino.Ancestors = withCode(ino.Ancestors, depth, rc.Code)
		ino.Version++
		if err := w.txn.Set(e.key, encodeInode(&ino)); err != nil {
			return 0, false, err
		}
	}
	if !more {
		return len(kvs), true, w.txn.Delete(recodeKey(rc.Root))
	}
	next := *rc
	next.Cursor = string(kvs[len(kvs)-1].key[1:])
	if err := w.txn.Set(recodeKey(rc.Root), encodeRecode(&next)); err != nil {
		return 0, false, err
	}
	*rc = next
	return len(kvs), false, nil
}

// PendingRecodes returns the recodes that started and did not finish,
// sorted by root.
func (s *Store) PendingRecodes(ctx context.Context) ([]Recode, error) {
	return pendingRecords(ctx, s, pfxRecode, "recode", decodeRecode)
}
