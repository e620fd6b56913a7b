package namespace

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/ghba/ghba/node/acl"
	"github.com/ghba/ghba/node/contents"
	"github.com/ghba/ghba/node/store"
)

// Garbage collection of file contents (docs/design.md, "Garbage
// collection of contents"). A file's contents are objects in the
// cluster's data store, named by the file's inode id and its layout
// (package node/contents). A change that drops objects from the layouts
// of the shard — a setattr that replaces a layout or shrinks the size,
// the removal of a file by an unlink, by a rename over it or by any
// transaction part — records the objects it drops as a trash record (an
// intent "t/…") in the same batch as the change: a crash never loses one,
// and an object is trashed only once no committed layout references it
// (objects are never reused, so none ever will again). Each home deletes
// the objects of its shard's trash records older than the grace period
// (Options.DataGCGrace) from the data store (Options.DataStore), then the
// records, through the shard's log; a new leader does what its
// predecessor left (deleting an object twice is harmless). Without a data
// store, trash waits.
//
// Layouts this build cannot decode (the JSON records of the reserved
// tree, a layout of a newer format) drop nothing: a leak, never a loss.

const (
	// trashPrefix starts the intent id of every trash record.
	trashPrefix = "t/"
	// trashFormat is the first byte of a trash record's payload:
	//
	//	v=1 ino:uvarint layout   (the dropped objects as a contents.Layout:
	//	                          block b of generation g is object (ino, b, g))
	trashFormat byte = 1
	// maxTrashExtents bounds the extents of one trash record (its payload
	// stays far below store.MaxBlobLen); more make several records.
	maxTrashExtents = 4096
	// trashPage is how many trash records a round reads at once.
	trashPage = 256
	// DefaultDataGCGrace is Options.DataGCGrace's default: how long
	// trashed objects stay in the data store, for readers that hold an
	// older layout.
	DefaultDataGCGrace = time.Hour
)

// collects reports whether the contents of the inode at p take part in
// garbage collection: a regular file outside the reserved tree (whose
// records keep JSON in their layouts), or the record of one with several
// names (hardlinks.go).
func collects(p string, ino *store.Inode) bool {
	return ino != nil && ino.Type == store.TypeFile && (!acl.Reserved(p) || store.IsLinkRecord(p))
}

// droppedObjects returns the objects the layout blob old references and
// new does not (all of old's when removed), as a layout; ok is false when
// nothing is dropped or either blob is not a layout this build reads.
func droppedObjects(old, new []byte, removed bool) (contents.Layout, bool) {
	if len(old) == 0 {
		return contents.Layout{}, false
	}
	ol, err := contents.DecodeLayout(old)
	if err != nil {
		return contents.Layout{}, false
	}
	var refs []contents.BlockRef
	if removed {
		refs = ol.Refs()
	} else {
		nl, err := contents.DecodeLayout(new)
		if err != nil {
			return contents.Layout{}, false
		}
		refs = contents.Dropped(ol, nl)
	}
	if len(refs) == 0 {
		return contents.Layout{}, false
	}
	return refsLayout(ol.BlockSize, refs), true
}

// refsLayout returns the layout of refs (in block order, each block
// once), joining consecutive blocks of one generation into one extent.
func refsLayout(blockSize int64, refs []contents.BlockRef) contents.Layout {
	l := contents.Layout{BlockSize: blockSize}
	for _, r := range refs {
		if n := len(l.Extents); n > 0 {
			last := &l.Extents[n-1]
			if last.Gen == r.Gen && last.First+last.Count == r.Block {
				last.Count++
				continue
			}
		}
		l.Extents = append(l.Extents, contents.Extent{First: r.Block, Count: 1, Gen: r.Gen})
	}
	return l
}

// addTrash adds to b the trash records of the objects dropped (a layout)
// of inode ino, with ids "t/<base>.<i>": base must be unique to the change
// (a transaction id, and the op's index in a part). It returns the number
// of objects.
func addTrash(b *store.Batch, base string, ino uint64, dropped contents.Layout) int {
	n := 0
	for i := 0; len(dropped.Extents) > 0; i++ {
		k := min(len(dropped.Extents), maxTrashExtents)
		part := contents.Layout{BlockSize: dropped.BlockSize, Extents: dropped.Extents[:k]}
		dropped.Extents = dropped.Extents[k:]
		payload := binary.AppendUvarint([]byte{trashFormat}, ino)
		payload = append(payload, part.Encode()...)
		b.PutIntent(fmt.Sprintf("%s%s.%d", trashPrefix, base, i), payload)
		n += int(part.Blocks())
	}
	return n
}

// trashChange adds to b the trash of a change of the inode at p from
// before to after (after nil: the inode is removed); base as addTrash.
func trashChange(b *store.Batch, base, p string, before, after *store.Inode) {
	if !collects(p, before) {
		return
	}
	var newLayout []byte
	if after != nil {
		newLayout = after.Layout
	}
	if d, ok := droppedObjects(before.Layout, newLayout, after == nil); ok {
		addTrash(b, base, before.ID, d)
	}
}

// decodeTrash decodes a trash record's payload.
func decodeTrash(b []byte) (ino uint64, refs []contents.BlockRef, err error) {
	if len(b) == 0 || b[0] != trashFormat {
		return 0, nil, errors.New("trash record: unknown format")
	}
	ino, n := binary.Uvarint(b[1:])
	if n <= 0 {
		return 0, nil, errors.New("trash record: bad inode id")
	}
	l, err := contents.DecodeLayout(b[1+n:])
	if err != nil {
		return 0, nil, fmt.Errorf("trash record: %w", err)
	}
	return ino, l.Refs(), nil
}

// trashLoop deletes the shard's trashed objects once they are older than
// the grace period, every trashInterval.
func (h *home) trashLoop() {
	t := time.NewTicker(h.r.trashInterval())
	defer t.Stop()
	for {
		select {
		case <-h.ctx.Done():
			return
		case <-t.C:
			h.collectTrash(h.ctx)
		}
	}
}

// trashInterval is how often a home looks at its trash: Tuning's
// TrashInterval, at most half the grace period.
func (n *Namespace) trashInterval() time.Duration {
	return max(min(n.tune.TrashInterval, n.gcGrace/2), time.Millisecond)
}

// collectTrash runs one round of the shard's garbage collection: the
// objects of every trash record older than the grace period are deleted
// from the data store, then the records. It counts what is left.
func (h *home) collectTrash(ctx context.Context) {
	var (
		pending int64
		ds      *contents.Store
		opened  bool
		after   string
	)
	now := time.Now()
	for ctx.Err() == nil {
		ins, err := h.st.ListIntentsPrefix(ctx, trashPrefix, after, trashPage)
		if err != nil {
			h.log.Warn("reading trash records", "err", err)
			return
		}
		if len(ins) == 0 {
			break
		}
		after = ins[len(ins)-1].ID
		var done []string
		for _, in := range ins {
			ino, refs, err := decodeTrash(in.Payload)
			if err != nil {
				h.log.Error("corrupt trash record; dropped (its objects leak)", "id", in.ID, "err", err)
				done = append(done, in.ID)
				continue
			}
			if now.Sub(time.Unix(0, in.Created)) < h.r.gcGrace || !h.holdsKnown(now) || h.holds.held(ino, now) {
				// In its grace period, or held open by a client
				// (holds.go), or maybe held by one that has not renewed
				// with this leadership yet.
				pending += int64(len(refs))
				continue
			}
			if !opened {
				opened = true
				if ds, err = h.r.dataStore(ctx); err != nil {
					h.log.Warn("data store unusable; trash waits", "err", err)
				}
			}
			if ds == nil {
				pending += int64(len(refs))
				continue
			}
			if err := ds.Delete(ctx, ino, refs); err != nil {
				h.log.Warn("deleting trashed objects; will retry", "id", in.ID, "objects", len(refs), "err", err)
				pending += int64(len(refs))
				continue
			}
			h.r.counters.objectsDeleted.Add(uint64(len(refs)))
			done = append(done, in.ID)
		}
		if len(done) > 0 {
			var b store.Batch
			for _, id := range done {
				b.DeleteIntent(id)
			}
			if err := h.apply(ctx, &b); err != nil {
				// The objects are gone; the next round (or leader)
				// deletes them again, which is harmless, and the records.
				h.log.Debug("deleting trash records", "n", len(done), "err", err)
			}
		}
	}
	h.trashPending.Store(pending)
}

// dataStore returns the cluster's data store (Options.DataStore); nil
// when none is set.
func (n *Namespace) dataStore(ctx context.Context) (*contents.Store, error) {
	if n.dataStoreFn == nil {
		return nil, nil
	}
	return n.dataStoreFn(ctx)
}
