package store

import (
	"fmt"
	"time"
)

type condKind uint8

// Precondition kinds. The values are also their codes in the batch binary
// format (batchcodec.go): never renumber them.
const (
	condInodeAbsent  condKind = 1
	condInodeExists  condKind = 2
	condInodeVersion condKind = 3
	condEntryAbsent  condKind = 4
	condEntryExists  condKind = 5
	condDirEmpty     condKind = 6
	condIntentAbsent condKind = 7
	condIntentExists condKind = 8
	condMetaEquals   condKind = 9
)

var condNames = [...]string{
	condInodeAbsent:  "inode absent",
	condInodeExists:  "inode exists",
	condInodeVersion: "inode version",
	condEntryAbsent:  "entry absent",
	condEntryExists:  "entry exists",
	condDirEmpty:     "directory empty",
	condIntentAbsent: "intent absent",
	condIntentExists: "intent exists",
	condMetaEquals:   "meta equals",
}

type cond struct {
	kind   condKind
	key    []byte
	target string
	ver    uint64
	val    []byte // condMetaEquals; nil means absent
}

type mutKind uint8

const (
	mutSet mutKind = iota + 1
	mutDelete
	mutSetInode
	mutDeleteInode
	// mutRecountLinks sets a directory's link count from its entries
	// (key: the directory's inode key; RecountLinks).
	mutRecountLinks
)

type mutation struct {
	kind mutKind
	key  []byte
	val  []byte
}

// Batch groups preconditions and mutations that Commit applies atomically:
// either every mutation is applied and durable, or none is.
//
// All preconditions are checked first, in the order they were added,
// against the state that includes every batch committed before this one
// (including earlier batches of the same group commit); then the mutations
// are applied in the order they were added, so a later mutation of the same
// key wins. Deleting a record that does not exist is not an error.
//
// Arguments are validated and encoded when they are added; the first
// invalid argument is reported by Err and by Commit, which then applies
// nothing. The zero Batch is empty and ready to use. A Batch must not be
// modified while a Commit of it is in progress, and is not safe for
// concurrent use.
type Batch struct {
	conds    []cond
	muts     []mutation
	err      error
	texts    bool // an inode put has a text
	entryIDs bool // an entry put has an id (batch format version 2)
	special  bool // an inode or entry put is a special file (version 3)
	xattrs   bool // an inode put has extended attributes (version 4)
	anchors  bool // an inode put is a hard link's stub (version 7)
	// dirTime is the time (Unix ns) the shard leader stamped the batch
	// with: the directories whose entries it changes get it as their
	// modification and change times (version 3; 0: none).
	dirTime int64
	// keepTimes makes StampDirTimes a no-op (KeepDirTimes).
	keepTimes bool
	// countLinks makes the directories' link counts follow the entries
	// the batch puts and deletes (CountLinks; version 6).
	countLinks bool
	// recounts is set when the batch holds a RecountLinks (version 6).
	recounts bool
	// dirPuts is set when the batch puts a directory's inode.
	dirPuts bool
}

// HasText reports whether an inode the batch puts has a text (Inode.Text).
func (b *Batch) HasText() bool { return b.texts }

// Err returns the first validation error of the batch, if any.
func (b *Batch) Err() error { return b.err }

// InodePaths returns the paths of the inodes the batch puts or deletes,
// in the order added (a path may repeat).
func (b *Batch) InodePaths() []string {
	var out []string
	for _, m := range b.muts {
		if m.kind == mutSetInode || m.kind == mutDeleteInode {
			out = append(out, string(m.key[1:]))
		}
	}
	return out
}

// ChangedPaths returns the paths the batch changes the existence or the
// inode of, in the order added (a path may repeat): those of the inodes it
// puts or deletes, and those of the directory entries it puts or deletes
// (the entry's directory joined with its name). A directory's entry is
// what says whether a name exists, so a lease on a path's absence is
// revoked by the write of its entry.
func (b *Batch) ChangedPaths() []string {
	var out []string
	for _, m := range b.muts {
		switch m.kind {
		case mutSetInode, mutDeleteInode:
			out = append(out, string(m.key[1:]))
		case mutSet, mutDelete:
			if dir, name, ok := parseEntryKey(m.key); ok {
				if dir == "/" {
					out = append(out, "/"+name)
				} else {
					out = append(out, dir+"/"+name)
				}
			}
		}
	}
	return out
}

// EachInode calls fn for every inode the batch puts (with the inode) or
// deletes (with nil), in the order added; it stops at fn's first error.
func (b *Batch) EachInode(fn func(path string, ino *Inode) error) error {
	for _, m := range b.muts {
		switch m.kind {
		case mutSetInode:
			ino, err := decodeInode(m.val)
			if err != nil {
				return fmt.Errorf("store: batch inode %q: %w", m.key[1:], err)
			}
			if err := fn(string(m.key[1:]), &ino); err != nil {
				return err
			}
		case mutDeleteInode:
			if err := fn(string(m.key[1:]), nil); err != nil {
				return err
			}
		}
	}
	return nil
}

// Len returns the number of preconditions plus mutations in the batch.
func (b *Batch) Len() int { return len(b.conds) + len(b.muts) }

// Reset empties the batch so it can be reused.
func (b *Batch) Reset() {
	clear(b.conds)
	clear(b.muts)
	b.conds, b.muts, b.err, b.texts, b.entryIDs, b.special, b.xattrs, b.anchors = b.conds[:0], b.muts[:0], nil, false, false, false, false, false
	b.dirTime, b.keepTimes, b.countLinks, b.recounts, b.dirPuts = 0, false, false, false, false
}

// StampDirTimes records t (Unix ns; the shard leader's clock when it
// proposes the batch) as the modification and change time of every
// directory whose entries the batch puts or deletes, as POSIX has a
// directory's times follow its entries. Commit sets them, never
// backwards (docs/design.md, "Directory times"). It does nothing to a
// batch that changes no entry or that KeepDirTimes marked, and t is kept
// only in batch format 3 (AppendBinaryFormat).
func (b *Batch) StampDirTimes(t int64) {
	if !b.keepTimes && t > 0 && b.changesEntries() {
		b.dirTime = t
	}
}

// KeepDirTimes marks a batch whose entry changes must not touch their
// directories' times (a maintenance rewrite of existing entries).
func (b *Batch) KeepDirTimes() { b.keepTimes, b.dirTime = true, 0 }

// CountLinks makes Commit keep the link count of every directory whose
// entries the batch changes: 2 plus its subdirectories, as on Linux
// (docs/design.md, "Directory link counts"). A put of a directory's entry
// where none was adds one to its directory's count, a delete of one takes
// one away (never below 2), and a put of an inode over a directory of the
// same id keeps the stored count, so that a read-modify-write of a
// directory (a chmod) does not write back a count it read before a
// concurrent mkdir. It does nothing to a batch that neither changes an
// entry nor puts a directory, and is kept only in batch format 6
// (AppendBinaryFormat): the shard leader calls it once every replica
// applies that format.
func (b *Batch) CountLinks() {
	if b.linksMatter() {
		b.countLinks = true
	}
}

// linksMatter reports whether counting links can change what the batch
// does: it changes an entry, puts a directory or recounts one.
func (b *Batch) linksMatter() bool {
	return b.recounts || b.dirPuts || b.changesEntries()
}

// CountsLinks reports whether the batch keeps its directories' link
// counts (CountLinks, or a batch of format 6 decoded).
func (b *Batch) CountsLinks() bool { return b.countLinks }

// RecountLinks sets directory dir's link count to 2 plus the number of
// its entries that are directories, as the batch leaves them, on every
// replica that applies it: the shard counts the directories made before
// link counts were kept (batch format 6 only). A dir whose inode the
// store does not hold, or that is not a directory, is left alone.
func (b *Batch) RecountLinks(dir string) {
	if b.ok(checkPath(dir)) {
		b.addMut(mutation{kind: mutRecountLinks, key: inodeKey(dir)})
		b.recounts, b.countLinks = true, true
	}
}

// DirTime returns the batch's directory time stamp (0: none).
func (b *Batch) DirTime() int64 { return b.dirTime }

// changesEntries reports whether the batch puts or deletes an entry.
func (b *Batch) changesEntries() bool {
	for i := range b.muts {
		if k := b.muts[i].key; (b.muts[i].kind == mutSet || b.muts[i].kind == mutDelete) && k[0] == pfxEntry {
			return true
		}
	}
	return false
}

func (b *Batch) ok(err error) bool {
	if err != nil && b.err == nil {
		b.err = err
	}
	return err == nil && b.err == nil
}

func (b *Batch) addCond(c cond) { b.conds = append(b.conds, c) }

func (b *Batch) addMut(m mutation) { b.muts = append(b.muts, m) }

func (b *Batch) entryArgs(dir, name string) bool {
	return b.ok(checkPath(dir)) && b.ok(checkName(name))
}

// PutInode stores ino at path, replacing any inode there.
func (b *Batch) PutInode(path string, ino Inode) {
	if b.ok(checkPath(path)) && b.ok(checkType(ino.Type)) && b.ok(checkTarget(&ino)) && b.ok(checkText(&ino)) && b.ok(checkBlob("layout", ino.Layout)) && b.ok(checkXattrs(&ino)) && b.ok(checkAnchor(&ino)) {
		b.addMut(mutation{kind: mutSetInode, key: inodeKey(path), val: encodeInode(&ino)})
		b.texts = b.texts || ino.Text != ""
		b.special = b.special || ino.Type.Special()
		b.xattrs = b.xattrs || len(ino.Xattrs) > 0
		b.anchors = b.anchors || ino.Anchor != ""
		b.dirPuts = b.dirPuts || ino.Type == TypeDir
	}
}

// DeleteInode removes the inode at path.
func (b *Batch) DeleteInode(path string) {
	if b.ok(checkPath(path)) {
		b.addMut(mutation{kind: mutDeleteInode, key: inodeKey(path)})
	}
}

// PutEntry stores entry e in directory dir, replacing any entry of that name.
func (b *Batch) PutEntry(dir string, e Entry) {
	if b.entryArgs(dir, e.Name) && b.ok(checkType(e.Type)) && b.ok(checkID("home", e.Home)) {
		b.addMut(mutation{kind: mutSet, key: entryKey(dir, e.Name), val: encodeEntry(&e)})
		b.entryIDs = b.entryIDs || e.ID != 0
		b.special = b.special || e.Type.Special()
	}
}

// DeleteEntry removes the entry name from directory dir.
func (b *Batch) DeleteEntry(dir, name string) {
	if b.entryArgs(dir, name) {
		b.addMut(mutation{kind: mutDelete, key: entryKey(dir, name)})
	}
}

// PutIntent records intent id with an opaque payload, replacing any intent
// with that id. Its Created time is the time of this call.
func (b *Batch) PutIntent(id string, payload []byte) {
	b.putIntent(Intent{ID: id, Created: time.Now().UnixNano(), Payload: payload})
}

func (b *Batch) putIntent(in Intent) {
	if b.ok(checkID("intent id", in.ID)) && b.ok(checkBlob("intent payload", in.Payload)) {
		b.addMut(mutation{kind: mutSet, key: intentKey(in.ID), val: encodeIntent(&in)})
	}
}

// DeleteIntent removes intent id.
func (b *Batch) DeleteIntent(id string) {
	if b.ok(checkID("intent id", id)) {
		b.addMut(mutation{kind: mutDelete, key: intentKey(id)})
	}
}

// SetMeta stores val under the meta key (see Store.GetMeta).
func (b *Batch) SetMeta(key string, val []byte) {
	if b.ok(checkID("meta key", key)) && b.ok(checkBlob("meta value", val)) {
		b.addMut(mutation{kind: mutSet, key: metaKey(key), val: append([]byte(nil), val...)})
	}
}

// DeleteMeta removes the meta key.
func (b *Batch) DeleteMeta(key string) {
	if b.ok(checkID("meta key", key)) {
		b.addMut(mutation{kind: mutDelete, key: metaKey(key)})
	}
}

// RequireInodeAbsent fails the batch with ErrExists if an inode exists at
// path.
func (b *Batch) RequireInodeAbsent(path string) {
	if b.ok(checkPath(path)) {
		b.addCond(cond{kind: condInodeAbsent, key: inodeKey(path), target: path})
	}
}

// RequireInodeExists fails the batch with ErrNotFound if no inode exists at
// path.
func (b *Batch) RequireInodeExists(path string) {
	if b.ok(checkPath(path)) {
		b.addCond(cond{kind: condInodeExists, key: inodeKey(path), target: path})
	}
}

// RequireInodeVersion fails the batch with ErrNotFound if no inode exists
// at path, and with ErrConflict if its Version is not v.
func (b *Batch) RequireInodeVersion(path string, v uint64) {
	if b.ok(checkPath(path)) {
		b.addCond(cond{kind: condInodeVersion, key: inodeKey(path), target: path, ver: v})
	}
}

// RequireEntryAbsent fails the batch with ErrExists if directory dir has
// an entry called name.
func (b *Batch) RequireEntryAbsent(dir, name string) {
	if b.entryArgs(dir, name) {
		b.addCond(cond{kind: condEntryAbsent, key: entryKey(dir, name), target: dir + " " + name})
	}
}

// RequireEntryExists fails the batch with ErrNotFound if directory dir has
// no entry called name.
func (b *Batch) RequireEntryExists(dir, name string) {
	if b.entryArgs(dir, name) {
		b.addCond(cond{kind: condEntryExists, key: entryKey(dir, name), target: dir + " " + name})
	}
}

// RequireDirEmpty fails the batch with ErrNotEmpty if directory dir has any
// entry.
func (b *Batch) RequireDirEmpty(dir string) {
	if b.ok(checkPath(dir)) {
		b.addCond(cond{kind: condDirEmpty, key: entryDirPrefix(dir), target: dir})
	}
}

// RequireIntentAbsent fails the batch with ErrExists if intent id exists.
func (b *Batch) RequireIntentAbsent(id string) {
	if b.ok(checkID("intent id", id)) {
		b.addCond(cond{kind: condIntentAbsent, key: intentKey(id), target: id})
	}
}

// RequireIntentExists fails the batch with ErrNotFound if intent id does
// not exist.
func (b *Batch) RequireIntentExists(id string) {
	if b.ok(checkID("intent id", id)) {
		b.addCond(cond{kind: condIntentExists, key: intentKey(id), target: id})
	}
}

// RequireMeta fails the batch with ErrConflict unless the meta key holds
// exactly val; a nil val requires the key to be absent. It lets a node make
// "apply once" updates idempotent (e.g. compare an applied index).
func (b *Batch) RequireMeta(key string, val []byte) {
	if b.ok(checkID("meta key", key)) {
		var v []byte
		if val != nil {
			v = append([]byte{}, val...)
		}
		b.addCond(cond{kind: condMetaEquals, key: metaKey(key), target: key, val: v})
	}
}
