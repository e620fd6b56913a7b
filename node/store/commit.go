package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"sync/atomic"
	"time"

	"github.com/dgraph-io/badger/v4"
)

// Request states: the caller and the committer race to move a request out
// of statePending; whoever wins decides whether it is applied.
const (
	statePending int32 = iota
	stateTaken
	stateCancelled
)

// request is one unit of work for a transaction: a Commit of a batch, a
// rekey step, or a log entry (ApplyLog, the start of RekeyPrefixAt).
type request struct {
	state atomicState
	// index, if not 0, is the request's log index: the request is skipped
	// if the store has applied that index, and otherwise its transaction
	// records it as the applied index, whatever the request's result.
	index uint64
	// fail, if set, is the request's result without check or write: a log
	// entry refused before it reached the store (invalid, too large).
	fail error
	// check evaluates preconditions without writing: a non-nil
	// PreconditionError fails this request alone; an error is internal.
	// Nil means none.
	check func(w *wtxn) (*PreconditionError, error)
	// write applies the mutations (nil: none). It may run more than once
	// (when a group is split) against the same state, so it must be
	// deterministic and reset any output it records.
	write func(w *wtxn) error
	// err is the result; skipped (index already applied) and committed
	// (in a transaction that committed: err is the request's own result,
	// not an internal failure) are set with it.
	err       error
	skipped   bool
	committed bool
	done      chan error
}

// wtxn is the write transaction of one group (or part of a group).
type wtxn struct {
	txn   *badger.Txn
	delta InodeCounts
	// changes, when set, records the inodes created and deleted.
	changes *inodeChanges
	// absent holds the inode keys a precondition of this transaction found
	// absent and no mutation has written since: a create's write of the
	// inode then needs no second read for the counts.
	absent map[string]struct{}
	// entryAbsent holds the entry keys a precondition of the batch being
	// applied found absent and no mutation of it has written since (nil
	// once written): a create's put of the entry then needs no read to
	// tell whether it replaced a directory's (noteEntry).
	entryAbsent [][]byte
	// rekeys holds the rekey records this transaction wrote (nil: deleted),
	// applied to the store's rekeyIndex once it commits.
	rekeys map[string]*rekeyEntry
}

// oldInodeType is inodeType for a write of key: 0 without a read when a
// precondition found key absent. The key is no longer known absent after.
func (w *wtxn) oldInodeType(key []byte) (FileType, error) {
	if _, ok := w.absent[string(key)]; ok {
		delete(w.absent, string(key))
		return 0, nil
	}
	return w.inodeType(key)
}

// inodeChanges records, for each inode path a log entry writes, whether an
// inode existed there before the entry and whether one does after it.
type inodeChanges struct {
	list []inodeChange
	idx  map[string]int // path -> position in list, once list is long
}

type inodeChange struct {
	path          string
	before, after bool
}

func (c *inodeChanges) reset() {
	clear(c.idx)
	c.list = c.list[:0]
}

func (c *inodeChanges) note(key []byte, existed, exists bool) {
	p := string(key[1:])
	if i, ok := c.find(p); ok {
		c.list[i].after = exists
		return
	}
	c.list = append(c.list, inodeChange{path: p, before: existed, after: exists})
	if c.idx != nil || len(c.list) > 8 {
		if c.idx == nil {
			c.idx = make(map[string]int, 2*len(c.list))
			for i, ch := range c.list {
				c.idx[ch.path] = i
			}
		}
		c.idx[p] = len(c.list) - 1
	}
}

func (c *inodeChanges) find(p string) (int, bool) {
	if c.idx != nil {
		i, ok := c.idx[p]
		return i, ok
	}
	for i := range c.list {
		if c.list[i].path == p {
			return i, true
		}
	}
	return 0, false
}

// added and removed return the paths where an inode appeared and
// disappeared, in the order the entry first wrote them.
func (c *inodeChanges) added() []string   { return c.paths(false, true) }
func (c *inodeChanges) removed() []string { return c.paths(true, false) }

func (c *inodeChanges) paths(before, after bool) []string {
	var out []string
	for _, ch := range c.list {
		if ch.before == before && ch.after == after {
			out = append(out, ch.path)
		}
	}
	return out
}

func (w *wtxn) get(key []byte) ([]byte, bool, error) {
	item, err := w.txn.Get(key)
	if errors.Is(err, badger.ErrKeyNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	v, err := item.ValueCopy(nil)
	return v, err == nil, err
}

func (w *wtxn) exists(key []byte) (bool, error) {
	_, err := w.txn.Get(key)
	if errors.Is(err, badger.ErrKeyNotFound) {
		return false, nil
	}
	return err == nil, err
}

// inodeType returns the type of the inode stored at key, or 0 if none.
func (w *wtxn) inodeType(key []byte) (FileType, error) {
	item, err := w.txn.Get(key)
	if errors.Is(err, badger.ErrKeyNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	var t FileType
	err = item.Value(func(v []byte) error { t = inodeTypeOf(v); return nil })
	return t, err
}

func (w *wtxn) count(t FileType, d int64) {
	switch {
	case t == TypeDir:
		w.delta.Dirs += d
	case t.Valid():
		w.delta.Files += d
	}
}

// setInode writes an encoded inode and keeps the counts. With keepLinks
// (a batch that counts links), a directory written over the same
// directory (the same inode id) keeps its stored link count
// (Batch.CountLinks).
func (w *wtxn) setInode(key, val []byte, keepLinks bool) error {
	var old FileType
	if keepLinks && inodeTypeOf(val) == TypeDir {
		if _, absent := w.absent[string(key)]; absent {
			delete(w.absent, string(key))
		} else {
			ov, ok, err := w.get(key)
			if err != nil {
				return err
			}
			if ok {
				old = inodeTypeOf(ov)
				if val, err = keepNlink(key, ov, val); err != nil {
					return err
				}
			}
		}
	} else {
		var err error
		if old, err = w.oldInodeType(key); err != nil {
			return err
		}
	}
	if err := w.txn.Set(key, val); err != nil {
		return err
	}
	w.count(old, -1)
	w.count(inodeTypeOf(val), +1)
	if w.changes != nil {
		w.changes.note(key, old != 0, true)
	}
	return nil
}

// keepNlink returns val, the directory inode a batch puts at key, with
// the link count of ov, the inode stored there, when that is the same
// directory (the same id).
func keepNlink(key, ov, val []byte) ([]byte, error) {
	if inodeTypeOf(ov) != TypeDir {
		return val, nil
	}
	was, err := decodeInode(ov)
	if err != nil {
		return nil, fmt.Errorf("store: inode %q: %w", key[1:], err)
	}
	ino, err := decodeInode(val)
	if err != nil {
		return nil, fmt.Errorf("store: inode %q: %w", key[1:], err)
	}
	if was.ID == 0 || was.ID != ino.ID || was.Nlink == ino.Nlink {
		return val, nil
	}
	ino.Nlink = was.Nlink
	return encodeInode(&ino), nil
}

// deleteInode deletes an inode (if present) and keeps the counts.
func (w *wtxn) deleteInode(key []byte) error {
	old, err := w.oldInodeType(key)
	if err != nil || old == 0 {
		return err
	}
	if err := w.txn.Delete(key); err != nil {
		return err
	}
	w.count(old, -1)
	if w.changes != nil {
		w.changes.note(key, true, false)
	}
	return nil
}

// check evaluates the batch's preconditions in order.
func (b *Batch) check(w *wtxn) (*PreconditionError, error) {
	clear(w.entryAbsent)
	w.entryAbsent = w.entryAbsent[:0]
	for i := range b.conds {
		c := &b.conds[i]
		var fail error
		switch c.kind {
		case condInodeAbsent, condEntryAbsent, condIntentAbsent:
			ok, err := w.exists(c.key)
			if err != nil {
				return nil, err
			}
			if ok {
				fail = ErrExists
			} else if c.kind == condEntryAbsent {
				w.entryAbsent = append(w.entryAbsent, c.key)
			} else if c.kind == condInodeAbsent {
				if w.absent == nil {
					w.absent = make(map[string]struct{})
				}
				w.absent[string(c.key)] = struct{}{}
			}
		case condInodeExists, condEntryExists, condIntentExists:
			ok, err := w.exists(c.key)
			if err != nil {
				return nil, err
			}
			if !ok {
				fail = ErrNotFound
			}
		case condInodeVersion:
			v, ok, err := w.get(c.key)
			if err != nil {
				return nil, err
			}
			if !ok {
				fail = ErrNotFound
				break
			}
			ino, err := decodeInode(v)
			if err != nil {
				return nil, fmt.Errorf("store: inode %q: %w", c.target, err)
			}
			if ino.Version != c.ver {
				fail = ErrConflict
			}
		case condDirEmpty:
			it := w.txn.NewIterator(badger.IteratorOptions{Prefix: c.key})
			it.Rewind()
			if it.Valid() {
				fail = ErrNotEmpty
			}
			it.Close()
		case condMetaEquals:
			v, ok, err := w.get(c.key)
			if err != nil {
				return nil, err
			}
			if ok != (c.val != nil) || !bytes.Equal(v, c.val) {
				fail = ErrConflict
			}
		default:
			return nil, fmt.Errorf("store: unknown precondition kind %d", c.kind)
		}
		if fail != nil {
			return &PreconditionError{Index: i, Cond: condNames[c.kind], Target: c.target, Err: fail}, nil
		}
	}
	return nil, nil
}

// write applies the batch's mutations in order, then the changes they
// make to their directories' times and link counts.
func (b *Batch) write(w *wtxn) error {
	var dirs dirChanges
	for i := range b.muts {
		m := &b.muts[i]
		var err error
		if (m.kind == mutSet || m.kind == mutDelete) && m.key[0] == pfxEntry {
			if err = b.noteEntry(w, m, &dirs); err != nil {
				return err
			}
		}
		switch m.kind {
		case mutSet:
			err = w.txn.Set(m.key, m.val)
		case mutDelete:
			err = w.txn.Delete(m.key)
		case mutSetInode:
			err = w.setInode(m.key, m.val, b.countLinks)
		case mutDeleteInode:
			err = w.deleteInode(m.key)
		case mutRecountLinks:
			dirs.get(string(m.key[1:])).recount = true
		default:
			err = fmt.Errorf("store: unknown mutation kind %d", m.kind)
		}
		if err != nil {
			return err
		}
	}
	for i := range dirs.list {
		if err := w.changeDir(&dirs.list[i], b.dirTime); err != nil {
			return err
		}
	}
	return nil
}

// dirChange is what a batch does to one directory besides its entries:
// touch sets its times to the batch's stamp, links is the change of its
// count of subdirectories, recount counts them again (RecountLinks).
type dirChange struct {
	dir            string
	touch, recount bool
	links          int
}

// dirChanges are the directories a batch changes, in the order it first
// names them (a batch changes the entries of one or a few directories,
// a recount batch of a few hundred).
type dirChanges struct {
	list []dirChange
	idx  map[string]int // dir -> position in list, once list is long
}

// get returns dir's change, adding it when the batch has not named it.
func (d *dirChanges) get(dir string) *dirChange {
	if d.idx != nil {
		if i, ok := d.idx[dir]; ok {
			return &d.list[i]
		}
	} else {
		for i := range d.list {
			if d.list[i].dir == dir {
				return &d.list[i]
			}
		}
	}
	d.list = append(d.list, dirChange{dir: dir})
	if d.idx != nil || len(d.list) > 8 {
		if d.idx == nil {
			d.idx = make(map[string]int, 2*len(d.list))
			for i := range d.list {
				d.idx[d.list[i].dir] = i
			}
		}
		d.idx[dir] = len(d.list) - 1
	}
	return &d.list[len(d.list)-1]
}

// noteEntry records what the put or delete m of an entry does to its
// directory, before m is applied: a new time when the batch is stamped,
// one subdirectory more or less when it counts links.
func (b *Batch) noteEntry(w *wtxn, m *mutation, dirs *dirChanges) error {
	absent := false
	for i, k := range w.entryAbsent {
		if bytes.Equal(k, m.key) {
			absent, w.entryAbsent[i] = true, nil // written now
			break
		}
	}
	if b.dirTime == 0 && !b.countLinks {
		return nil
	}
	dir, _, ok := parseEntryKey(m.key)
	if !ok {
		return nil
	}
	c := dirs.get(dir)
	c.touch = c.touch || b.dirTime != 0
	if !b.countLinks {
		return nil
	}
	isDir := m.kind == mutSet && entryTypeOf(m.val) == TypeDir
	wasDir := false
	if !absent {
		old, ok, err := w.get(m.key)
		if err != nil {
			return err
		}
		wasDir = ok && entryTypeOf(old) == TypeDir
	}
	switch {
	case isDir && !wasDir:
		c.links++
	case wasDir && !isDir:
		c.links--
	}
	return nil
}

// changeDir applies c to its directory's inode: the stamp t as its
// modification and change times when c.touch (never backwards: a later
// leader's clock may be behind), and its link count. The inode's version
// is kept: neither is a change that a conditional write
// (RequireInodeVersion) of the directory must have seen. A directory whose
// inode this store does not hold is left alone.
func (w *wtxn) changeDir(c *dirChange, t int64) error {
	key := inodeKey(c.dir)
	v, ok, err := w.get(key)
	if err != nil || !ok {
		return err
	}
	ino, err := decodeInode(v)
	if err != nil {
		return fmt.Errorf("store: directory %q: %w", c.dir, err)
	}
	if ino.Type != TypeDir {
		return nil
	}
	nlink := ino.Nlink
	switch {
	case c.recount:
		n, err := w.countSubdirs(c.dir)
		if err != nil {
			return err
		}
		nlink = uint32(min(2+n, math.MaxUint32))
	case c.links != 0:
		nlink = uint32(min(max(2, int64(ino.Nlink)+int64(c.links)), math.MaxUint32))
	}
	touch := c.touch && t != 0 && (ino.Mtime < t || ino.Ctime < t)
	if !touch && nlink == ino.Nlink {
		return nil
	}
	if touch {
		ino.Mtime, ino.Ctime = max(ino.Mtime, t), max(ino.Ctime, t)
	}
	ino.Nlink = nlink
	return w.txn.Set(key, encodeInode(&ino))
}

// countSubdirs returns how many of dir's entries are directories.
func (w *wtxn) countSubdirs(dir string) (int64, error) {
	it := w.txn.NewIterator(badger.IteratorOptions{Prefix: entryDirPrefix(dir)})
	defer it.Close()
	var n int64
	for it.Rewind(); it.Valid(); it.Next() {
		err := it.Item().Value(func(v []byte) error {
			if entryTypeOf(v) == TypeDir {
				n++
			}
			return nil
		})
		if err != nil {
			return 0, err
		}
	}
	return n, nil
}

// Commit applies the batch atomically and durably: when it returns nil every
// mutation is synced to disk (with Options.NoSyncWrites: written, see
// there); when it returns an error none was applied,
// except that an error wrapping a Badger commit failure leaves the outcome
// unknown (the disk failed). Concurrent Commits are grouped into one Badger
// transaction and one sync (group commit), in the order the committer
// receives them; a request whose precondition fails returns a
// *PreconditionError (wrapping ErrExists, ErrNotFound, ErrConflict or
// ErrNotEmpty) without affecting the others of its group.
//
// If ctx is done before the committer takes the request, Commit returns
// ctx.Err() and nothing is applied; once taken, the request completes (one
// group commit) and Commit reports its outcome.
func (s *Store) Commit(ctx context.Context, b *Batch) error {
	if b == nil {
		return invalidf("nil batch")
	}
	if b.err != nil {
		return b.err
	}
	if err := s.enter(ctx); err != nil {
		return err
	}
	defer s.leave()
	if s.broken.ackEarly(s, b) {
		return nil
	}
	return s.submit(ctx, &request{check: b.check, write: b.write})
}

// submit hands r to the committer and waits for its result.
func (s *Store) submit(ctx context.Context, r *request) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	r.done = make(chan error, 1)
	select {
	case <-s.closing:
		return ErrClosed
	default:
	}
	select {
	case s.reqs <- r:
	case <-ctx.Done():
		return ctx.Err()
	case <-s.closing:
		return ErrClosed
	}
	select {
	case err := <-r.done:
		return err
	case <-ctx.Done():
		if r.state.cas(statePending, stateCancelled) {
			s.stats.cancelled.Add(1)
			return ctx.Err()
		}
		return <-r.done // taken: the group completes shortly
	case <-s.stopped:
		select {
		case err := <-r.done:
			return err
		default:
		}
		if r.state.cas(statePending, stateCancelled) {
			return ErrClosed
		}
		return <-r.done
	}
}

// run is the committer goroutine: it collects the requests queued while the
// previous group was being synced and commits them together.
//
// Writers that wait for their acknowledgement tend to split into two
// cohorts that alternate (one syncing while the other queues), halving the
// group size. So when the previous group's writers are likely to come back
// (the last group acknowledged a requests while q others were queued), the
// committer lingers for up to min(Options.Linger, half the last commit's
// duration) until a+q requests are here, which merges the cohorts.
func (s *Store) run() {
	defer close(s.stopped)
	group := make([]*request, 0, s.maxGroup)
	var timer *time.Timer
	var acked, queued int
	var lastDur time.Duration
	for {
		// Close wins over queued requests: they fail with ErrClosed.
		select {
		case <-s.closing:
			s.failQueued()
			return
		default:
		}
		select {
		case <-s.closing:
			s.failQueued()
			return
		case r := <-s.reqs:
			group = append(group[:0], r)
		}
	collect:
		for len(group) < s.maxGroup {
			select {
			case r := <-s.reqs:
				group = append(group, r)
			default:
				break collect
			}
		}
		if target := min(s.maxGroup, acked+queued); len(group) < target && s.linger > 0 {
			if wait := min(s.linger, lastDur/2); wait > 0 {
				if timer == nil {
					timer = time.NewTimer(wait)
				} else {
					timer.Reset(wait)
				}
				s.stats.lingers.Add(1)
			linger:
				for len(group) < target {
					select {
					case r := <-s.reqs:
						group = append(group, r)
					case <-timer.C:
						break linger
					case <-s.closing:
						break linger
					}
				}
				timer.Stop()
			}
		}
		acked, queued, lastDur = s.process(group)
		clear(group)
	}
}

// failQueued answers every queued request with ErrClosed.
func (s *Store) failQueued() {
	for {
		select {
		case r := <-s.reqs:
			if r.state.cas(statePending, stateTaken) {
				r.done <- ErrClosed
			}
		default:
			return
		}
	}
}

// process commits one group: every live request is answered exactly once.
// It returns the number of requests answered, the number queued meanwhile
// and how long the commit took.
func (s *Store) process(group []*request) (acked, queued int, took time.Duration) {
	live := group[:0]
	for _, r := range group {
		if r.state.cas(statePending, stateTaken) {
			live = append(live, r)
		}
	}
	if len(live) == 0 {
		return 0, 0, 0
	}
	s.stats.groups.Add(1)
	s.stats.requests.Add(uint64(len(live)))
	start := time.Now()
	s.wmu.Lock()
	for rest := live; len(rest) > 0; {
		// An internal error is every request's result: nothing to add.
		n, _ := s.commitPrefix(rest, &s.stats.txns)
		rest = rest[n:]
	}
	s.wmu.Unlock()
	took = time.Since(start)
	queued = len(s.reqs)
	for _, r := range live {
		if r.err != nil {
			s.stats.failed.Add(1)
		}
		r.done <- r.err
	}
	return len(live), queued, took
}

// commitPrefix commits as many of reqs, from the first, as fit in one Badger
// transaction, and returns how many it handled (at least one). The caller
// holds wmu; txns counts the transactions committed. An internal error
// (not a request's own result) is also every handled request's err.
func (s *Store) commitPrefix(reqs []*request, txns *atomic.Uint64) (int, error) {
	limit := len(reqs)
	for {
		fit, err := s.tryTxn(reqs[:limit])
		switch {
		case err == nil:
			txns.Add(1)
			return limit, nil
		case errors.Is(err, badger.ErrTxnTooBig):
			if fit == 0 {
				tooLarge := fmt.Errorf("%w (limit %d bytes, %d entries)", ErrTooLarge, s.db.MaxBatchSize(), s.db.MaxBatchCount())
				if r := reqs[0]; r.index != 0 && r.fail == nil {
					// A log entry is applied even so: its transaction
					// records the index, with this error as its result.
					r.fail, limit = tooLarge, 1
					continue
				}
				reqs[0].err = tooLarge
				return 1, nil
			}
			s.log.Debug("splitting group commit", "requests", limit, "fit", fit)
			limit = fit
		default:
			s.log.Error("group commit failed", "requests", limit, "err", err)
			for _, r := range reqs[:limit] {
				r.err, r.skipped, r.committed = err, false, false
			}
			return limit, err
		}
	}
}

// tryTxn applies reqs in one transaction and commits it. On ErrTxnTooBig it
// returns the number of requests that fit, and commits nothing. A log
// request at or below the applied index is skipped; the transaction records
// the index of the last log request it applies.
func (s *Store) tryTxn(reqs []*request) (fit int, err error) {
	txn := s.db.NewTransaction(true)
	defer txn.Discard()
	w := &wtxn{txn: txn}
	s.countsMu.Lock()
	applied := s.applied
	s.countsMu.Unlock()
	logged := false
	for i, r := range reqs {
		r.err, r.skipped, r.committed = nil, false, false
		if r.index != 0 {
			if r.index <= applied {
				r.skipped = true
				continue
			}
			applied, logged = r.index, true
		}
		if r.fail != nil {
			r.err = r.fail
			continue
		}
		if r.check != nil {
			perr, err := r.check(w)
			if err != nil {
				return i, fmt.Errorf("store: check: %w", err)
			}
			if perr != nil {
				r.err = perr
				continue
			}
		}
		if r.write != nil {
			if err := r.write(w); err != nil {
				return i, fmt.Errorf("store: write: %w", err)
			}
		}
	}
	s.countsMu.Lock()
	next := InodeCounts{Files: max(0, s.counts.Files+w.delta.Files), Dirs: max(0, s.counts.Dirs+w.delta.Dirs)}
	s.countsMu.Unlock()
	if w.delta != (InodeCounts{}) {
		if err := txn.Set(sysCountsKey, encodeCounts(next)); err != nil {
			return len(reqs) - 1, fmt.Errorf("store: write counts: %w", err)
		}
	}
	if logged {
		if err := txn.Set(sysAppliedKey, encodeApplied(applied)); err != nil {
			return len(reqs) - 1, fmt.Errorf("store: write applied index: %w", err)
		}
	}
	if err := txn.Commit(); err != nil {
		if w.rekeys != nil {
			s.rekeys.unload() // the outcome is unknown
		}
		return len(reqs), fmt.Errorf("store: commit: %w", err)
	}
	if w.rekeys != nil {
		s.rekeys.committed(w.rekeys)
	}
	for _, r := range reqs {
		r.committed = !r.skipped
	}
	s.countsMu.Lock()
	s.counts = next
	if logged {
		s.applied = applied
	}
	s.countsMu.Unlock()
	return len(reqs), nil
}

// atomicState is a request's state (statePending, stateTaken,
// stateCancelled).
type atomicState struct{ v atomic.Int32 }

func (a *atomicState) cas(from, to int32) bool { return a.v.CompareAndSwap(from, to) }
