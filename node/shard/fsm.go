package shard

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/ghba/ghba/node/store"
	"github.com/ghba/ghba/node/textindex"
	"github.com/ghba/ghba/routing"
	"github.com/hashicorp/raft"
)

// fsm is the state machine of one shard replica (docs/design.md, "The
// shard state machine"): it applies committed commands to the shard's
// store, which records the index of the last entry applied in the same
// transaction, and keeps the shard's counting filter in step with the
// inodes each entry adds and removes. Its result for an entry (what
// raft's ApplyFuture.Response returns on the leader) is nil or the error
// the entry met: the same on every replica.
type fsm struct {
	shard   string
	st      *store.Store
	log     *slog.Logger
	ctx     context.Context // store calls; ends when the replica closes
	geo     routing.Geometry
	onFatal func(error)
	// maxBatch is the newest batch format this replica applies
	// (Options.MaxLogFormat); a newer one halts it.
	maxBatch byte

	filterMu sync.RWMutex
	filter   *routing.CountingFilter
	text     *textindex.Index // in step with the entries applied, like the filter

	halted atomic.Pointer[error]
	fatal  sync.Once
}

var _ raft.BatchingFSM = (*fsm)(nil)

// rebuildTextBatch is the number of texts indexed per batch by a rebuild.
const rebuildTextBatch = 512

// rebuild makes the counting filter from every inode in the store (at
// open and after a restore) and, with text, the text index from every
// inode that has a text (the index was reset).
func (f *fsm) rebuild(ctx context.Context, text bool) (int, error) {
	cf := routing.NewCountingFilter(f.geo)
	files := 0
	var ops []textindex.Op
	err := f.st.ScanInodes(ctx, func(p string, ino store.Inode) error {
		cf.Add(p)
		files++
		if text && ino.Text != "" {
			if ops = append(ops, textindex.Op{Path: p, Text: ino.Text}); len(ops) == rebuildTextBatch {
				err := f.text.Apply(ops)
				ops = ops[:0]
				return err
			}
		}
		return nil
	})
	if err == nil {
		err = f.text.Apply(ops)
	}
	if err != nil {
		return 0, fmt.Errorf("shard %s: rebuilding the filter and text index: %w", f.shard, err)
	}
	f.filterMu.Lock()
	f.filter = cf
	f.filterMu.Unlock()
	return files, nil
}

// Apply implements raft.FSM.
func (f *fsm) Apply(l *raft.Log) any { return f.ApplyBatch([]*raft.Log{l})[0] }

// ApplyBatch implements raft.BatchingFSM: consecutive store batches are
// applied in one store transaction (store.ApplyLog); a re-key is applied
// on its own.
func (f *fsm) ApplyBatch(logs []*raft.Log) []any {
	out := make([]any, len(logs))
	var entries []store.LogEntry
	var pos []int
	flush := func() {
		if len(entries) == 0 {
			return
		}
		res, err := f.st.ApplyLog(f.ctx, entries)
		switch {
		case err != nil && f.ctx.Err() != nil:
			// Closing: Raft replays these entries at the next start.
			for _, i := range pos {
				out[i] = fmt.Errorf("shard %s: %w", f.shard, err)
			}
		case err != nil:
			// The disk failed under us: this replica cannot go on with a
			// state the others may not share.
			f.halt(fmt.Errorf("shard %s: applying entries %d-%d: %w", f.shard, entries[0].Index, entries[len(entries)-1].Index, err))
			for _, i := range pos {
				out[i] = f.haltErr()
			}
		default:
			var texts []textindex.Op
			active := f.text.Active()
			for k, r := range res {
				out[pos[k]] = r.Err
				f.track(r.Added, r.Removed)
				if b := entries[k].Batch; !r.Skipped && r.Err == nil && b != nil {
					active = active || b.HasText() // the index exists after this run
					texts = textOps(texts, b, r.Added, active)
				}
			}
			f.indexTexts(texts)
		}
		entries, pos = entries[:0], pos[:0]
	}
	for i, l := range logs {
		if err := f.haltErr(); err != nil {
			out[i] = err
			continue
		}
		if l.Type != raft.LogCommand {
			continue // configuration changes: raft's business
		}
		c, err := decodeCommand(l.Data, f.maxBatch)
		switch {
		case errors.Is(err, ErrUnknownCommand) && c.typ&IgnorableFlag != 0:
			f.log.Warn("skipped a shard log entry this build does not know (marked ignorable by a newer build)",
				"shard", f.shard, "index", l.Index, "type", c.typ)
		case errors.Is(err, ErrUnknownCommand), errors.Is(err, store.ErrUnknownVersion):
			flush()
			f.halt(fmt.Errorf("shard %s: entry %d: %w", f.shard, l.Index, err))
			out[i] = f.haltErr()
		case err != nil:
			out[i] = fmt.Errorf("shard %s: entry %d: %w", f.shard, l.Index, err)
		case c.typ == cmdBatch:
			entries = append(entries, store.LogEntry{Index: l.Index, Batch: c.batch})
			pos = append(pos, i)
		case c.typ == cmdRekey:
			flush()
			out[i] = f.rekey(l.Index, c.old, c.new_, c.codes)
		case c.typ == cmdRecode:
			flush()
			out[i] = f.recode(l.Index, c.old, c.codes)
		}
	}
	flush()
	return out
}

// rekey applies a re-key entry. An interruption other than closing is a
// store failure: the replica halts (a restart resumes the re-key before
// anything else is applied).
func (f *fsm) rekey(index uint64, oldPrefix, newPrefix string, chain []store.AncestorCode) error {
	var moved []string // new paths, to re-index under
	res, err := f.st.RekeyPrefixAt(f.ctx, index, oldPrefix, newPrefix, chain, func(o, nw string) {
		f.track([]string{nw}, []string{o})
		if f.text.Active() {
			moved = append(moved, o, nw)
		}
	})
	f.moveTexts(moved)
	switch {
	case err != nil && f.ctx.Err() != nil:
		return fmt.Errorf("shard %s: %w", f.shard, err)
	case err != nil:
		f.halt(fmt.Errorf("shard %s: re-key at entry %d: %w", f.shard, index, err))
		return f.haltErr()
	}
	return res.Err
}

// recode applies a recode entry; an interruption is handled as a
// re-key's.
func (f *fsm) recode(index uint64, root string, codes []store.AncestorCode) error {
	var code *store.AncestorCode
	if len(codes) == 1 {
		code = &codes[0]
	}
	res, err := f.st.RecodeSubtreeAt(f.ctx, index, root, code)
	switch {
	case err != nil && f.ctx.Err() != nil:
		return fmt.Errorf("shard %s: %w", f.shard, err)
	case err != nil:
		f.halt(fmt.Errorf("shard %s: recode at entry %d: %w", f.shard, index, err))
		return f.haltErr()
	}
	return res.Err
}

// textOps appends to ops the text index's part of an applied batch: each
// inode it puts, with its text, and each it deletes. An inode the batch
// created without a text was not indexed (added: the entry's
// ApplyResult.Added, in order), so it needs nothing. Without an index
// (active false) a batch without texts needs nothing at all, and with one
// it needs only removals, found without decoding its inodes.
func textOps(ops []textindex.Op, b *store.Batch, added []string, active bool) []textindex.Op {
	switch {
	case !b.HasText() && !active:
		return ops
	case !b.HasText():
		for _, p := range b.InodePaths() {
			if !slices.Contains(added, p) {
				ops = append(ops, textindex.Op{Path: p}) // a text removed, maybe
			}
		}
		return ops
	}
	_ = b.EachInode(func(p string, ino *store.Inode) error {
		switch {
		case ino == nil:
			ops = append(ops, textindex.Op{Path: p})
		case ino.Text != "":
			ops = append(ops, textindex.Op{Path: p, Text: ino.Text})
		case !slices.Contains(added, p):
			ops = append(ops, textindex.Op{Path: p}) // a text removed, maybe
		}
		return nil
	})
	return ops
}

// indexTexts applies ops to the text index. A failure does not stop the
// replica (the metadata is right); the index is rebuilt at its next open.
func (f *fsm) indexTexts(ops []textindex.Op) {
	if err := f.text.Apply(ops); err != nil {
		f.log.Error("text index update failed: searches by text may miss files until the replica reopens", "shard", f.shard, "err", err)
	}
}

// moveTexts re-indexes the texts a re-key moved (pairs of old and new
// paths): read back from the store under their new paths.
func (f *fsm) moveTexts(moved []string) {
	var ops []textindex.Op
	for i := 0; i+1 < len(moved); i += 2 {
		ops = append(ops, textindex.Op{Path: moved[i]})
		if ino, err := f.st.GetInode(f.ctx, moved[i+1]); err == nil && ino.Text != "" {
			ops = append(ops, textindex.Op{Path: moved[i+1], Text: ino.Text})
		}
		if len(ops) >= rebuildTextBatch {
			f.indexTexts(ops)
			ops = ops[:0]
		}
	}
	f.indexTexts(ops)
}

// track updates the counting filter with the inodes an entry added and
// removed.
func (f *fsm) track(added, removed []string) {
	if len(added) == 0 && len(removed) == 0 {
		return
	}
	f.filterMu.Lock()
	defer f.filterMu.Unlock()
	for _, p := range removed {
		f.filter.Remove(p)
	}
	for _, p := range added {
		f.filter.Add(p)
	}
}

// halt stops the replica from applying anything more and reports err once
// (see ErrHalted).
func (f *fsm) halt(err error) {
	err = fmt.Errorf("%w: %w", ErrHalted, err)
	if f.halted.CompareAndSwap(nil, &err) {
		f.log.Error("shard replica halted", "shard", f.shard, "err", err)
		if f.onFatal != nil {
			f.fatal.Do(func() { f.onFatal(err) })
		}
	}
}

// haltErr returns the error the replica halted with, or nil.
func (f *fsm) haltErr() error {
	if p := f.halted.Load(); p != nil {
		return *p
	}
	return nil
}

// Snapshot implements raft.FSM. The store is synced first, so that Raft,
// which may truncate its log up to the snapshot's index once the snapshot
// is stored, never drops entries whose effects a power loss could take
// from the store.
func (f *fsm) Snapshot() (raft.FSMSnapshot, error) {
	if err := f.haltErr(); err != nil {
		return nil, err
	}
	if err := f.st.Sync(); err != nil {
		return nil, fmt.Errorf("shard %s: syncing the store before a snapshot: %w", f.shard, err)
	}
	return &snapshot{f: f}, nil
}

// Restore implements raft.FSM: the store's whole contents are replaced by
// the snapshot's (a backup of a replica's store), and the filter rebuilt.
func (f *fsm) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	if err := f.haltErr(); err != nil {
		return err
	}
	if err := f.st.Restore(f.ctx, rc); err != nil {
		return fmt.Errorf("shard %s: restoring a snapshot: %w", f.shard, err)
	}
	// A snapshot taken while a directory was being re-keyed holds its
	// rekey record: finish it before the entries after the snapshot.
	if err := f.st.ResumeRekey(f.ctx, nil); err != nil {
		return fmt.Errorf("shard %s: resuming a re-key after restoring a snapshot: %w", f.shard, err)
	}
	if err := f.text.Reset(); err != nil {
		return fmt.Errorf("shard %s: %w", f.shard, err)
	}
	files, err := f.rebuild(f.ctx, true)
	if err != nil {
		return err
	}
	f.log.Info("restored a snapshot", "shard", f.shard, "paths", files)
	return nil
}

// snapshot streams a point-in-time copy of the shard's store. It may
// include entries applied after the snapshot's index; a replica restoring
// it skips them when Raft replays them (the store's applied index).
type snapshot struct{ f *fsm }

func (s *snapshot) Persist(sink raft.SnapshotSink) error {
	if _, err := s.f.st.Backup(s.f.ctx, sink); err != nil {
		sink.Cancel()
		return fmt.Errorf("shard %s: writing a snapshot: %w", s.f.shard, err)
	}
	return sink.Close()
}

func (s *snapshot) Release() {}
