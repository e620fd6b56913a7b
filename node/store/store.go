package store

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dgraph-io/badger/v4"
)

// Defaults for Options fields left zero.
const (
	DefaultMaxGroup       = 1024
	DefaultLinger         = time.Millisecond
	DefaultMemTableSize   = 64 << 20
	DefaultBlockCacheSize = 64 << 20
	DefaultRekeyStepKeys  = 1024
	DefaultRekeyStepBytes = 1 << 20
)

// MinMemTableSize is the smallest Options.MemTableSize accepted: one
// transaction (15% of a memtable) must hold a MaxBlobLen value.
const MinMemTableSize = 8 << 20

// Options configure a Store.
type Options struct {
	// Dir is the Badger directory; it is created if missing. Required.
	Dir string
	// Logger receives the store's and Badger's log records (Badger's INFO
	// lines at Debug level). Nil discards them.
	Logger *slog.Logger
	// MaxGroup bounds the number of Commit requests applied in one Badger
	// transaction (one sync). 1 disables group commit: one sync per write.
	// Default DefaultMaxGroup.
	MaxGroup int
	// Linger bounds how long the committer may wait for the writers of the
	// previous group to come back before committing a group (see run); the
	// wait is also at most half the last commit's duration. 0 means
	// DefaultLinger; negative disables lingering.
	Linger time.Duration
	// MemTableSize is Badger's memtable size in bytes, at least 8 MiB; it
	// also bounds the size of one transaction (about 15% of it). Default
	// DefaultMemTableSize.
	MemTableSize int64
	// BlockCacheSize is Badger's block cache size in bytes. Default
	// DefaultBlockCacheSize.
	BlockCacheSize int64
	// RekeyStepKeys and RekeyStepBytes bound the keys moved by one
	// RekeyPrefix step (one transaction). Defaults DefaultRekeyStepKeys and
	// DefaultRekeyStepBytes.
	RekeyStepKeys  int
	RekeyStepBytes int
	// NoSyncWrites opens Badger without synced writes. Commit, ApplyLog and
	// the steps of a rekey then return once their transaction is written
	// to Badger's write-ahead log in the operating system's page cache, not
	// once it is on disk: an acknowledged write survives a crash of the
	// process, but a power loss or a kernel crash can take away the writes
	// acknowledged since the last Sync (Badger then recovers to an earlier
	// transaction boundary, never to part of a transaction). Set it only
	// when something else is the point of durability, as a shard's synced
	// Raft log is for a store that applies it with ApplyLog; call Sync
	// before relying on the store alone (before Raft compacts its log).
	NoSyncWrites bool
}

// Store is the durable metadata store of one metadata server: inodes,
// directory entries, intents and meta records in Badger. Writes go through
// Commit and are durable (synced, unless Options.NoSyncWrites) when it
// returns nil; concurrent commits share one sync (group commit). A
// replicated shard writes through ApplyLog instead (see the package doc).
// Reads see every acknowledged write. A Store is safe for concurrent use.
type Store struct {
	db  *badger.DB
	dir string
	log *slog.Logger

	maxGroup       int
	linger         time.Duration
	rekeyStepKeys  int
	rekeyStepBytes int

	reqs    chan *request
	closing chan struct{} // closed by Close: stop the committer
	stopped chan struct{} // closed by the committer when it has exited

	gate gate // admits operations; Close and Restore wait for them

	// wmu serializes the writers of Badger transactions: the committer
	// (a group) and ApplyLog (its entries), so that each transaction sees
	// the previous ones and the counts and applied index follow them.
	wmu sync.Mutex

	closeOnce sync.Once
	closeErr  error

	countsMu sync.Mutex
	counts   InodeCounts // as of the last committed transaction
	applied  uint64      // likewise: the applied log index (ApplyLog)

	rekeys rekeyIndex // the live rekey records, for the start of a rekey

	stats struct {
		requests, failed, groups, txns, cancelled, lingers atomic.Uint64
		logEntries, logTxns                                atomic.Uint64
	}

	// rekeyHook, when set by tests, runs after each committed rekey step;
	// a non-nil error aborts the rekey as a crash would.
	rekeyHook func(step int) error
	// applyHook, when set by tests, runs after each transaction committed
	// by ApplyLog with the index it recorded; a non-nil error aborts
	// ApplyLog as a crash would.
	applyHook func(applied uint64) error

	// broken makes the store wrong on purpose in a ghba_broken build
	// (broken.go); it does nothing otherwise (broken_off.go).
	broken broken
}

// Open opens (creating if needed) the store in opts.Dir and starts its
// committer goroutine. Close must be called to release it.
func Open(ctx context.Context, opts Options) (*Store, error) {
	if opts.Dir == "" {
		return nil, invalidf("Options.Dir is empty")
	}
	if opts.MemTableSize != 0 && opts.MemTableSize < MinMemTableSize {
		return nil, invalidf("Options.MemTableSize %d is below %d", opts.MemTableSize, MinMemTableSize)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("component", "store")
	s := &Store{
		dir:            opts.Dir,
		log:            log,
		maxGroup:       orDefault(opts.MaxGroup, DefaultMaxGroup),
		linger:         opts.Linger,
		rekeyStepKeys:  orDefault(opts.RekeyStepKeys, DefaultRekeyStepKeys),
		rekeyStepBytes: orDefault(opts.RekeyStepBytes, DefaultRekeyStepBytes),
		closing:        make(chan struct{}),
		stopped:        make(chan struct{}),
		broken:         newBroken(log),
	}
	if s.linger == 0 {
		s.linger = DefaultLinger
	}
	s.gate.idle.L = &s.gate.mu
	s.reqs = make(chan *request, s.maxGroup)
	bopts := badger.DefaultOptions(opts.Dir).
		WithSyncWrites(!opts.NoSyncWrites).
		WithDetectConflicts(false). // one writer: the committer
		WithLogger(badgerLogger{l: log.With("badger", true)}).
		WithMemTableSize(orDefault(opts.MemTableSize, DefaultMemTableSize)).
		WithBlockCacheSize(orDefault(opts.BlockCacheSize, DefaultBlockCacheSize))
	if err := removeEmptyMemtables(opts.Dir, log); err != nil {
		return nil, fmt.Errorf("store: open %s: %w", opts.Dir, err)
	}
	db, err := badger.Open(bopts)
	if err != nil {
		return nil, fmt.Errorf("store: open %s: %w", opts.Dir, err)
	}
	s.db = db
	marked, err := restoreMarked(opts.Dir)
	if marked {
		s.gate.broken = fmt.Errorf("store: %w: an earlier restore of %s did not finish", ErrRestoreIncomplete, opts.Dir)
	} else if err == nil {
		err = s.init(ctx)
	}
	if err != nil {
		if cerr := db.Close(); cerr != nil {
			log.Error("closing badger after failed open", "err", cerr)
		}
		return nil, err
	}
	if s.gate.broken != nil {
		log.Error("store opened after an incomplete restore: it refuses every call until a Restore succeeds", "dir", opts.Dir)
	} else {
		log.Info("store opened", "dir", opts.Dir, "files", s.counts.Files, "dirs", s.counts.Dirs, "applied", s.applied, "sync_writes", !opts.NoSyncWrites)
	}
	go s.run()
	return s, nil
}

// removeEmptyMemtables deletes the memtable files of length zero in dir.
// Badger creates a memtable's write-ahead file and then sizes it; a process
// killed between the two leaves a file of length zero, which holds no entry
// and which badger.Open refuses ("while opening memtables ... Create a new
// file", dgraph-io/badger#2207). Without this, a node killed at that moment
// would not start again.
func removeEmptyMemtables(dir string, log *slog.Logger) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, e := range entries {
		if e.IsDir() || filepath.Ext(e.Name()) != ".mem" {
			continue
		}
		info, err := e.Info()
		if err != nil {
			return err
		}
		if info.Size() != 0 {
			continue
		}
		if err := os.Remove(filepath.Join(dir, e.Name())); err != nil {
			return err
		}
		log.Warn("removed an empty memtable file left by a crash", "file", e.Name())
	}
	return nil
}

func orDefault[T int | int64](v, def T) T {
	if v <= 0 {
		return def
	}
	return v
}

// init checks the schema version, loads (or rebuilds) the inode counts and
// loads the applied index and the rekey records (rekeyIndex).
func (s *Store) init(ctx context.Context) error {
	return s.db.Update(func(txn *badger.Txn) error {
		s.rekeys.set(loadRekeys(txn))
		item, err := txn.Get(sysSchemaKey)
		switch {
		case errors.Is(err, badger.ErrKeyNotFound):
			if err := txn.Set(sysSchemaKey, encodeSchema()); err != nil {
				return fmt.Errorf("store: write schema: %w", err)
			}
		case err != nil:
			return fmt.Errorf("store: read schema: %w", err)
		default:
			var v byte
			if err := item.Value(func(b []byte) (err error) { v, err = decodeSchema(b); return err }); err != nil {
				return fmt.Errorf("store: schema record: %w", err)
			}
			if v != schemaVersion {
				return fmt.Errorf("store: on-disk schema version %d, this build supports %d", v, schemaVersion)
			}
		}
		item, err = txn.Get(sysCountsKey)
		switch {
		case errors.Is(err, badger.ErrKeyNotFound):
			c, err := countInodes(ctx, txn)
			if err != nil {
				return err
			}
			s.counts = c
			if err := txn.Set(sysCountsKey, encodeCounts(c)); err != nil {
				return fmt.Errorf("store: write inode counts: %w", err)
			}
		case err != nil:
			return fmt.Errorf("store: read inode counts: %w", err)
		default:
			if err := item.Value(func(b []byte) (err error) { s.counts, err = decodeCounts(b); return err }); err != nil {
				return fmt.Errorf("store: inode counts record: %w", err)
			}
		}
		s.applied, err = readApplied(txn)
		return err
	})
}

// readApplied reads the applied index record (0 when absent).
func readApplied(txn *badger.Txn) (uint64, error) {
	item, err := txn.Get(sysAppliedKey)
	if errors.Is(err, badger.ErrKeyNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("store: read applied index: %w", err)
	}
	var idx uint64
	if err := item.Value(func(b []byte) (err error) { idx, err = decodeApplied(b); return err }); err != nil {
		return 0, fmt.Errorf("store: applied index record: %w", err)
	}
	return idx, nil
}

// countInodes counts inodes by type with a full scan.
func countInodes(ctx context.Context, txn *badger.Txn) (InodeCounts, error) {
	var c InodeCounts
	it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte{pfxInode}, PrefetchValues: true, PrefetchSize: 256})
	defer it.Close()
	n := 0
	for it.Rewind(); it.Valid(); it.Next() {
		if n++; n%4096 == 0 {
			if err := ctx.Err(); err != nil {
				return c, err
			}
		}
		err := it.Item().Value(func(v []byte) error {
			switch t := inodeTypeOf(v); {
			case t == TypeDir:
				c.Dirs++
			case t.Valid():
				c.Files++
			default:
				return corruptf("inode %q", it.Item().Key()[1:])
			}
			return nil
		})
		if err != nil {
			return c, err
		}
	}
	return c, nil
}

// Close stops the committer (queued requests fail with ErrClosed; the group
// being committed completes), waits for the operations in progress (reads,
// ApplyLog, a Restore) and closes Badger. It is safe to call more than
// once.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		g := &s.gate
		g.mu.Lock()
		g.closed = true
		g.mu.Unlock()
		close(s.closing)
		<-s.stopped
		g.mu.Lock()
		for g.active > 0 || g.restoring {
			g.idle.Wait()
		}
		g.mu.Unlock()
		if err := s.db.Close(); err != nil {
			s.closeErr = fmt.Errorf("store: close: %w", err)
		}
		s.log.Info("store closed")
	})
	return s.closeErr
}

// enter registers an operation (see gate); leave must follow. It fails if
// ctx is done, once Close has started, during a Restore and after a failed
// one.
func (s *Store) enter(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return s.gate.enter()
}

func (s *Store) leave() { s.gate.leave() }

// view runs fn in a read-only transaction.
func (s *Store) view(ctx context.Context, fn func(txn *badger.Txn) error) error {
	if err := s.enter(ctx); err != nil {
		return err
	}
	defer s.leave()
	return s.db.View(fn)
}

// Stats are counters of the committer since Open.
type Stats struct {
	// Requests is the number of requests (Commit calls and rekey steps)
	// taken by the committer; Failed the number answered with an error;
	// Cancelled the number abandoned by their caller before being taken.
	Requests, Failed, Cancelled uint64
	// Groups is the number of groups collected; Txns the number of Badger
	// transactions the committer committed (syncs, unless
	// Options.NoSyncWrites). Requests/Txns is the mean group size.
	Groups, Txns uint64
	// Lingers is the number of groups for which the committer waited for
	// more writers (Options.Linger).
	Lingers uint64
	// LogEntries is the number of log entries ApplyLog applied (not
	// skipped), LogTxns the number of Badger transactions it committed.
	LogEntries, LogTxns uint64
}

// Stats returns the committer's counters.
func (s *Store) Stats() Stats {
	return Stats{
		Requests:   s.stats.requests.Load(),
		Failed:     s.stats.failed.Load(),
		Cancelled:  s.stats.cancelled.Load(),
		Groups:     s.stats.groups.Load(),
		Txns:       s.stats.txns.Load(),
		Lingers:    s.stats.lingers.Load(),
		LogEntries: s.stats.logEntries.Load(),
		LogTxns:    s.stats.logTxns.Load(),
	}
}

func notFound(what string, args ...any) error {
	return fmt.Errorf("store: %s: %w", fmt.Sprintf(what, args...), ErrNotFound)
}

// GetInode returns the inode at path, or an error wrapping ErrNotFound.
func (s *Store) GetInode(ctx context.Context, path string) (Inode, error) {
	if err := checkPath(path); err != nil {
		return Inode{}, err
	}
	var ino Inode
	err := s.view(ctx, func(txn *badger.Txn) error {
		var err error
		ino, err = getInode(txn, path)
		return err
	})
	return ino, err
}

func getInode(txn *badger.Txn, path string) (Inode, error) {
	item, err := txn.Get(inodeKey(path))
	if errors.Is(err, badger.ErrKeyNotFound) {
		return Inode{}, notFound("inode %q", path)
	}
	if err != nil {
		return Inode{}, fmt.Errorf("store: get inode %q: %w", path, err)
	}
	var ino Inode
	err = item.Value(func(v []byte) (err error) {
		ino, err = decodeInode(v)
		return err
	})
	if err != nil {
		return Inode{}, fmt.Errorf("store: inode %q: %w", path, err)
	}
	return ino, nil
}

// GetInodes looks up several paths in one read transaction (batch stat). The
// result has one element per path: nil where no inode exists. Invalid paths
// fail the whole call.
func (s *Store) GetInodes(ctx context.Context, paths []string) ([]*Inode, error) {
	for _, p := range paths {
		if err := checkPath(p); err != nil {
			return nil, err
		}
	}
	out := make([]*Inode, len(paths))
	err := s.view(ctx, func(txn *badger.Txn) error {
		for i, p := range paths {
			ino, err := getInode(txn, p)
			if errors.Is(err, ErrNotFound) {
				continue
			}
			if err != nil {
				return err
			}
			out[i] = &ino
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// GetEntry returns the entry name of directory dir, or an error wrapping
// ErrNotFound.
func (s *Store) GetEntry(ctx context.Context, dir, name string) (Entry, error) {
	if err := checkPath(dir); err != nil {
		return Entry{}, err
	}
	if err := checkName(name); err != nil {
		return Entry{}, err
	}
	var e Entry
	err := s.view(ctx, func(txn *badger.Txn) error {
		item, err := txn.Get(entryKey(dir, name))
		if errors.Is(err, badger.ErrKeyNotFound) {
			return notFound("entry %q in %q", name, dir)
		}
		if err != nil {
			return fmt.Errorf("store: get entry %q in %q: %w", name, dir, err)
		}
		return item.Value(func(v []byte) (err error) {
			e, err = decodeEntry(name, v)
			if err != nil {
				err = fmt.Errorf("store: entry %q in %q: %w", name, dir, err)
			}
			return err
		})
	})
	return e, err
}

// EntriesExist reports, for each name, whether directory dir has an entry
// of that name, read in one transaction (a batch of creates checks all its
// names).
func (s *Store) EntriesExist(ctx context.Context, dir string, names []string) ([]bool, error) {
	if err := checkPath(dir); err != nil {
		return nil, err
	}
	for _, name := range names {
		if err := checkName(name); err != nil {
			return nil, err
		}
	}
	out := make([]bool, len(names))
	err := s.view(ctx, func(txn *badger.Txn) error {
		for i, name := range names {
			_, err := txn.Get(entryKey(dir, name))
			switch {
			case err == nil:
				out[i] = true
			case !errors.Is(err, badger.ErrKeyNotFound):
				return fmt.Errorf("store: get entry %q in %q: %w", name, dir, err)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// ReadDir returns up to limit entries of directory dir sorted by name
// (bytewise), starting after the name after ("" for the first page; pass the
// last name of the previous page to continue). more reports whether entries
// follow the returned page. limit <= 0 means no limit. A directory without
// entries (or one that does not exist here) yields an empty page: the
// directory's inode is the authority on its existence.
func (s *Store) ReadDir(ctx context.Context, dir, after string, limit int) (entries []Entry, more bool, err error) {
	if err := checkPath(dir); err != nil {
		return nil, false, err
	}
	if after != "" {
		if err := checkName(after); err != nil {
			return nil, false, err
		}
	}
	if e, m, ok := s.broken.staleReadDir(dir, after, limit); ok {
		return e, m, nil
	}
	prefix := entryDirPrefix(dir)
	err = s.view(ctx, func(txn *badger.Txn) error {
		prefetch := 100
		if limit > 0 && limit < prefetch {
			prefetch = limit + 1
		}
		it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix, PrefetchValues: true, PrefetchSize: prefetch})
		defer it.Close()
		seek := prefix
		if after != "" {
			seek = entryKey(dir, after)
		}
		for it.Seek(seek); it.Valid(); it.Next() {
			item := it.Item()
			_, name, ok := parseEntryKey(item.Key())
			if !ok {
				return corruptf("entry key %q", item.Key())
			}
			if name == after {
				continue
			}
			if limit > 0 && len(entries) == limit {
				more = true
				return nil
			}
			if len(entries)%1024 == 1023 {
				if err := ctx.Err(); err != nil {
					return err
				}
			}
			var e Entry
			if err := item.Value(func(v []byte) (err error) { e, err = decodeEntry(name, v); return err }); err != nil {
				return fmt.Errorf("store: entry %q in %q: %w", name, dir, err)
			}
			entries = append(entries, e)
		}
		return nil
	})
	if err != nil {
		return nil, false, err
	}
	s.broken.keepReadDir(dir, after, limit, entries, more)
	return entries, more, nil
}

// CountInodes returns the number of inodes homed in this store. It is
// maintained by every commit and costs no scan.
func (s *Store) CountInodes(ctx context.Context) (InodeCounts, error) {
	if err := s.enter(ctx); err != nil {
		return InodeCounts{}, err
	}
	defer s.leave()
	s.countsMu.Lock()
	defer s.countsMu.Unlock()
	return s.counts, nil
}

// ScanInodes calls fn for every inode, in path order, from one consistent
// snapshot (used to rebuild the in-memory filters at start). It stops at the
// first error of fn and returns it. fn must not call Close.
func (s *Store) ScanInodes(ctx context.Context, fn func(path string, ino Inode) error) error {
	return s.scanInodes(ctx, []byte{pfxInode}, fn)
}

// ScanInodesUnder is ScanInodes restricted to root and its descendants.
func (s *Store) ScanInodesUnder(ctx context.Context, root string, fn func(path string, ino Inode) error) error {
	return s.SearchInodes(ctx, root, "", nil, fn)
}

// ScanInodesAfter is ScanInodesUnder resumed after the path after, which
// an earlier scan of root passed to fn ("" starts at root).
func (s *Store) ScanInodesAfter(ctx context.Context, root, after string, fn func(path string, ino Inode) error) error {
	return s.SearchInodes(ctx, root, after, nil, fn)
}

// SearchInodes is ScanInodesAfter with a filter on the path: pre (if not
// nil) is called with every path in order, and fn only with those for
// which it returned true, so that the inodes of the others are not read
// (a search by name reads keys only). An error of pre or fn ends the
// scan and is returned.
func (s *Store) SearchInodes(ctx context.Context, root, after string, pre func(path string) (bool, error), fn func(path string, ino Inode) error) error {
	if err := checkPath(root); err != nil {
		return err
	}
	prefix := []byte{pfxInode}
	if root != "/" {
		prefix = inodeKey(root + "/")
	}
	seek := prefix
	switch {
	case after == "" && root != "/":
		// root itself first, then root + "/" ...: '/' sorts after some
		// bytes (e.g. ' '), so root's descendants are not contiguous
		// with root.
		want := true
		if pre != nil {
			var err error
			if want, err = pre(root); err != nil {
				return err
			}
		}
		if want {
			ino, err := s.GetInode(ctx, root)
			switch {
			case err == nil:
				if err := fn(root, ino); err != nil {
					return err
				}
			case !errors.Is(err, ErrNotFound):
				return err
			}
		}
	case after == "" || after == root && root != "/": // root's own key is outside prefix
	default:
		seek = append(inodeKey(after), 0) // the first key after after's
	}
	return s.scanInodesFrom(ctx, prefix, seek, pre, fn)
}

func (s *Store) scanInodes(ctx context.Context, prefix []byte, fn func(path string, ino Inode) error) error {
	return s.scanInodesFrom(ctx, prefix, prefix, nil, fn)
}

// scanInodesFrom scans the inodes whose keys have prefix, from key seek,
// reading the values of those pre accepts (all when pre is nil).
func (s *Store) scanInodesFrom(ctx context.Context, prefix, seek []byte, pre func(string) (bool, error), fn func(path string, ino Inode) error) error {
	return s.view(ctx, func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix, PrefetchValues: pre == nil, PrefetchSize: 256})
		defer it.Close()
		n := 0
		for it.Seek(seek); it.Valid(); it.Next() {
			if n++; n%1024 == 0 {
				if err := ctx.Err(); err != nil {
					return err
				}
			}
			item := it.Item()
			path := string(item.Key()[1:])
			if pre != nil {
				if want, err := pre(path); err != nil {
					return err
				} else if !want {
					continue
				}
			}
			var ino Inode
			if err := item.Value(func(v []byte) (err error) { ino, err = decodeInode(v); return err }); err != nil {
				return fmt.Errorf("store: inode %q: %w", path, err)
			}
			if err := fn(path, ino); err != nil {
				return err
			}
		}
		return nil
	})
}

// GetIntent returns intent id, or an error wrapping ErrNotFound.
func (s *Store) GetIntent(ctx context.Context, id string) (Intent, error) {
	if err := checkID("intent id", id); err != nil {
		return Intent{}, err
	}
	var in Intent
	err := s.view(ctx, func(txn *badger.Txn) error {
		item, err := txn.Get(intentKey(id))
		if errors.Is(err, badger.ErrKeyNotFound) {
			return notFound("intent %q", id)
		}
		if err != nil {
			return fmt.Errorf("store: get intent %q: %w", id, err)
		}
		return item.Value(func(v []byte) (err error) {
			in, err = decodeIntent(id, v)
			if err != nil {
				err = fmt.Errorf("store: intent %q: %w", id, err)
			}
			return err
		})
	})
	return in, err
}

// ListIntents returns every intent, sorted by id.
func (s *Store) ListIntents(ctx context.Context) ([]Intent, error) {
	return s.ListIntentsPrefix(ctx, "", "", 0)
}

// ListIntentsPrefix returns, sorted by id, up to limit intents (limit <= 0:
// all) whose id starts with prefix and sorts after the id after ("" for
// the first page; pass the last id of the previous page to continue).
func (s *Store) ListIntentsPrefix(ctx context.Context, prefix, after string, limit int) ([]Intent, error) {
	var out []Intent
	pfx := intentKey(prefix)
	err := s.view(ctx, func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: pfx, PrefetchValues: true, PrefetchSize: 64})
		defer it.Close()
		seek := pfx
		if after != "" && after >= prefix {
			seek = append(intentKey(after), 0) // the first key after after's
		}
		for it.Seek(seek); it.Valid(); it.Next() {
			if limit > 0 && len(out) == limit {
				return nil
			}
			item := it.Item()
			id := string(item.Key()[1:])
			var in Intent
			if err := item.Value(func(v []byte) (err error) { in, err = decodeIntent(id, v); return err }); err != nil {
				return fmt.Errorf("store: intent %q: %w", id, err)
			}
			out = append(out, in)
		}
		return nil
	})
	return out, err
}

// PutIntent durably records intent id (a one-mutation Commit).
func (s *Store) PutIntent(ctx context.Context, id string, payload []byte) error {
	var b Batch
	b.PutIntent(id, payload)
	return s.Commit(ctx, &b)
}

// DeleteIntent durably removes intent id (a one-mutation Commit); deleting
// a missing intent is not an error.
func (s *Store) DeleteIntent(ctx context.Context, id string) error {
	var b Batch
	b.DeleteIntent(id)
	return s.Commit(ctx, &b)
}

// GetMeta returns the value of a meta record (the node's applied-state
// bookkeeping), or an error wrapping ErrNotFound.
func (s *Store) GetMeta(ctx context.Context, key string) ([]byte, error) {
	if err := checkID("meta key", key); err != nil {
		return nil, err
	}
	var out []byte
	err := s.view(ctx, func(txn *badger.Txn) error {
		item, err := txn.Get(metaKey(key))
		if errors.Is(err, badger.ErrKeyNotFound) {
			return notFound("meta %q", key)
		}
		if err != nil {
			return fmt.Errorf("store: get meta %q: %w", key, err)
		}
		out, err = item.ValueCopy(nil)
		return err
	})
	return out, err
}

// SetMeta durably stores a meta record (a one-mutation Commit). Use
// Batch.SetMeta to update it atomically with other mutations.
func (s *Store) SetMeta(ctx context.Context, key string, val []byte) error {
	var b Batch
	b.SetMeta(key, val)
	return s.Commit(ctx, &b)
}
