package store

import (
	"bytes"
	"encoding/binary"
	"fmt"
)

// Batch binary format (MarshalBinary, UnmarshalBinary), the form in which a
// batch travels in a shard's Raft log. It records the batch's operations,
// not its Badger keys:
//
//	batch   v n:uvarint cond[n] m:uvarint mut[m]      (v = 1 to 5)
//	str     len:uvarint bytes[len]
//	cond    kind:u8, then by kind:
//	        1 inode absent    path:str
//	        2 inode exists    path:str
//	        3 inode version   path:str version:uvarint
//	        4 entry absent    dir:str name:str
//	        5 entry exists    dir:str name:str
//	        6 dir empty       dir:str
//	        7 intent absent   id:str
//	        8 intent exists   id:str
//	        9 meta equals     key:str present:u8 val:str  (present 0: the key
//	                          must be absent, and val is empty)
//	mut     op:u8, then by op:
//	        1 put inode       path:str inode:str  (the inode value, codec.go)
//	        2 delete inode    path:str
//	        3 put entry       dir:str name:str type:u8 home:str
//	                          [id:uvarint]  (v >= 2 only: Entry.ID, 0 for none)
//	        4 delete entry    dir:str name:str
//	        5 put intent      id:str created:varint payload:str
//	        6 delete intent   id:str
//	        7 set meta        key:str val:str
//	        8 delete meta     key:str
//
// Preconditions and mutations keep the order in which they were added. A
// new precondition kind or mutation op needs a new format version: a build
// that meets a version it does not know fails with ErrUnknownVersion (a
// replica must then stop rather than skip the entry), while damage within a
// known version fails with ErrCorrupt.
//
// Version 2 adds the child's inode id to every put entry (docs/design.md,
// "Inode ids"). A batch none of whose entries carries an id is written as
// version 1, byte for byte as before ids existed, so only batches that
// need the new field reach a build that does not know it (which halts
// rather than drop the ids: "Upgrades and unknown commands").
//
// Version 3 is version 2 with the special file types (FIFOs, sockets,
// devices and their device numbers: docs/design.md, "Special files") in
// inodes and entries. Only a batch that puts one is written as version 3,
// and a batch of version 1 or 2 that holds one is corrupt: a build that
// knows no special files halts at such a batch rather than meet a type it
// cannot read in its store. Version 3 also ends with the directory time
// stamp (after the mutations: stamp:varint, Unix ns, 0 for none) that
// the shard leader sets as the times of the directories whose entries the
// batch changes (Batch.StampDirTimes; docs/design.md, "Directory times").
// A batch is written as version 3 exactly when it puts a special file or
// carries a stamp and no extended attributes; a stamp on a batch that
// changes no entry is corrupt.
//
// Version 4 is version 3 with extended attributes in inodes (the inode
// value's last optional field, codec.go; docs/design.md, "Extended
// attributes"). A batch is written as version 4 exactly when it puts an
// inode that has some, and a batch of an older version that holds one is
// corrupt.
//
// Version 5 is version 4 with paths (and directories) longer than
// LegacyMaxPathLen, up to MaxPathLen. A batch is written as version 5
// exactly when one of its operations names such a path; the older
// versions' decoders refuse longer paths.
const (
	batchFormatV1 byte = 1
	batchFormatV2 byte = 2
	batchFormatV3 byte = 3
	batchFormatV4 byte = 4
	batchFormatV5 byte = 5
	batchFormatV6 byte = 6
	batchFormatV7 byte = 7
)

// The batch formats, for a caller that must choose (a shard leader during
// a rolling upgrade, docs/design.md "Upgrades and unknown commands"):
// BatchFormatV1 carries no ids, BatchFormatV2 carries them,
// BatchFormatV3 carries special files too, BatchFormatV4 extended
// attributes, BatchFormatV5 paths longer than LegacyMaxPathLen,
// BatchFormatV6 directory link counts, BatchFormatV7 hard links' stubs
// (Inode.Anchor), MaxBatchFormat is the newest this
// build reads and writes.
const (
	BatchFormatV1  = batchFormatV1
	BatchFormatV2  = batchFormatV2
	BatchFormatV3  = batchFormatV3
	BatchFormatV4  = batchFormatV4
	BatchFormatV5  = batchFormatV5
	BatchFormatV6  = batchFormatV6
	BatchFormatV7  = batchFormatV7
	MaxBatchFormat = batchFormatV7
)

// BatchFormat returns the format a batch encoded in data was written in
// (0 when data is empty).
func BatchFormat(data []byte) byte {
	if len(data) == 0 {
		return 0
	}
	return data[0]
}

// Mutation op codes of the batch binary format: never renumber them.
const (
	opPutInode     byte = 1
	opDeleteInode  byte = 2
	opPutEntry     byte = 3
	opDeleteEntry  byte = 4
	opPutIntent    byte = 5
	opDeleteIntent byte = 6
	opSetMeta      byte = 7
	opDeleteMeta   byte = 8
	opRecountLinks byte = 9
)

// maxInodeValueLen bounds an encoded inode: its fixed fields, a layout of
// at most MaxBlobLen bytes, a symlink target, ancestor codes and a text.
const maxInodeValueLen = MaxBlobLen + MaxTargetLen + MaxTextLen + 2 + 15*binary.MaxVarintLen64 +
	MaxAncestorCodes*4*binary.MaxVarintLen64 +
	2*MaxXattrsLen + binary.MaxVarintLen64 // names, values and their lengths (5 bytes at most per attribute of 6 or more)

// MarshalBinary encodes the batch in its versioned binary format; a batch
// that Err reports invalid is not encoded (the error is returned).
// UnmarshalBinary of the result yields a batch that behaves exactly like
// this one. It implements encoding.BinaryMarshaler.
func (b *Batch) MarshalBinary() ([]byte, error) {
	n := 2 + binary.MaxVarintLen64
	for i := range b.conds {
		n += 4 + 2*binary.MaxVarintLen64 + len(b.conds[i].key) + len(b.conds[i].val)
	}
	for i := range b.muts {
		n += 4 + 2*binary.MaxVarintLen64 + len(b.muts[i].key) + len(b.muts[i].val)
	}
	return b.AppendBinary(make([]byte, 0, n))
}

// AppendBinary appends the batch's binary encoding (see MarshalBinary) to
// buf, so that a caller can put its own header in front. It implements
// encoding.BinaryAppender.
func (b *Batch) AppendBinary(buf []byte) ([]byte, error) {
	return b.AppendBinaryFormat(buf, MaxBatchFormat)
}

// AppendBinaryFormat is AppendBinary in format max at most, for replicas
// that may run a build which knows no newer one. Below version 2 the ids
// are left out: those of entries, and those of inodes (an older build
// cannot decode an inode value that carries one). Ids are optional; an
// inode without one gets one from the legacy numbering once every replica
// speaks version 2 (docs/design.md, "Inode ids").
func (b *Batch) AppendBinaryFormat(buf []byte, max byte) ([]byte, error) {
	if b.err != nil {
		return buf, fmt.Errorf("store: encode batch: %w", b.err)
	}
	if max < batchFormatV1 || max > MaxBatchFormat {
		return buf, fmt.Errorf("store: encode batch: %w: batch format %d", ErrUnknownVersion, max)
	}
	v := batchFormatV1
	stamp := b.dirTime
	long := b.longPaths()
	if max < batchFormatV3 {
		stamp = 0 // an older build keeps no directory times
	}
	switch {
	case b.special && max < batchFormatV3:
		return buf, fmt.Errorf("store: encode batch: %w: a special file needs batch format %d, and format %d is the newest allowed",
			ErrFormatTooOld, batchFormatV3, max)
	case b.xattrs && max < batchFormatV4:
		return buf, fmt.Errorf("store: encode batch: %w: extended attributes need batch format %d, and format %d is the newest allowed",
			ErrFormatTooOld, batchFormatV4, max)
	case long && max < batchFormatV5:
		return buf, fmt.Errorf("store: encode batch: %w: paths longer than %d bytes need batch format %d, and format %d is the newest allowed",
			ErrFormatTooOld, LegacyMaxPathLen, batchFormatV5, max)
	case b.recounts && max < batchFormatV6:
		return buf, fmt.Errorf("store: encode batch: %w: recounting links needs batch format %d, and format %d is the newest allowed",
			ErrFormatTooOld, batchFormatV6, max)
	case b.anchors && max < batchFormatV7:
		return buf, fmt.Errorf("store: encode batch: %w: a hard link's stub needs batch format %d, and format %d is the newest allowed",
			ErrFormatTooOld, batchFormatV7, max)
	case b.anchors && !b.countLinks && b.linksMatter():
		// Version 7 counts links whenever they matter (as the replica
		// of a shard at format 6 or later asks for).
		return buf, fmt.Errorf("store: encode batch: %w: a batch with a hard link's stub that changes entries must keep link counts (CountLinks)", ErrInvalid)
	case b.anchors:
		v = batchFormatV7
	case b.countLinks && max >= batchFormatV6:
		v = batchFormatV6
	case long:
		v = batchFormatV5
	case b.xattrs:
		v = batchFormatV4
	case b.special, stamp != 0:
		v = batchFormatV3
	case b.entryIDs && max >= batchFormatV2:
		v = batchFormatV2
	}
	buf = append(buf, v)
	buf = binary.AppendUvarint(buf, uint64(len(b.conds)))
	for i := range b.conds {
		var err error
		if buf, err = b.conds[i].appendBinary(buf); err != nil {
			return buf, fmt.Errorf("store: encode batch: precondition %d: %w", i, err)
		}
	}
	buf = binary.AppendUvarint(buf, uint64(len(b.muts)))
	for i := range b.muts {
		var err error
		if buf, err = b.muts[i].appendBinary(buf, v, max < batchFormatV2); err != nil {
			return buf, fmt.Errorf("store: encode batch: mutation %d: %w", i, err)
		}
	}
	if v >= batchFormatV3 {
		buf = binary.AppendVarint(buf, stamp)
	}
	return buf, nil
}

func appendStr[T string | []byte](b []byte, s T) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// appendEntryKey appends the directory and name of an entry key.
func appendEntryKey(b, key []byte) ([]byte, error) {
	dir, name, ok := parseEntryKey(key)
	if !ok {
		return b, corruptf("entry key %q", key)
	}
	return appendStr(appendStr(b, dir), name), nil
}

func (c *cond) appendBinary(b []byte) ([]byte, error) {
	b = append(b, byte(c.kind))
	switch c.kind {
	case condInodeAbsent, condInodeExists, condIntentAbsent, condIntentExists:
		return appendStr(b, c.key[1:]), nil
	case condInodeVersion:
		return binary.AppendUvarint(appendStr(b, c.key[1:]), c.ver), nil
	case condEntryAbsent, condEntryExists:
		return appendEntryKey(b, c.key)
	case condDirEmpty:
		return appendStr(b, c.key[1:len(c.key)-1]), nil // pfxEntry dir 0x00
	case condMetaEquals:
		b = appendStr(b, c.key[1:])
		if c.val == nil {
			return append(b, 0, 0), nil
		}
		return appendStr(append(b, 1), c.val), nil
	}
	return b, fmt.Errorf("unknown precondition kind %d", c.kind)
}

func (m *mutation) appendBinary(b []byte, v byte, noInodeIDs bool) ([]byte, error) {
	switch {
	case m.kind == mutSetInode:
		val := m.val
		if noInodeIDs {
			ino, err := decodeInode(val)
			if err != nil {
				return b, err
			}
			if ino.ID != 0 {
				ino.ID = 0
				val = encodeInode(&ino)
			}
		}
		return appendStr(appendStr(append(b, opPutInode), m.key[1:]), val), nil
	case m.kind == mutDeleteInode:
		return appendStr(append(b, opDeleteInode), m.key[1:]), nil
	case m.kind == mutRecountLinks:
		return appendStr(append(b, opRecountLinks), m.key[1:]), nil
	case m.kind == mutDelete && m.key[0] == pfxEntry:
		return appendEntryKey(append(b, opDeleteEntry), m.key)
	case m.kind == mutSet && m.key[0] == pfxEntry:
		b, err := appendEntryKey(append(b, opPutEntry), m.key)
		if err != nil {
			return b, err
		}
		e, err := decodeEntry("", m.val)
		if err != nil {
			return b, err
		}
		b = appendStr(append(b, byte(e.Type)), e.Home)
		if v >= batchFormatV2 {
			b = binary.AppendUvarint(b, e.ID)
		}
		return b, nil
	case m.kind == mutDelete && m.key[0] == pfxIntent:
		return appendStr(append(b, opDeleteIntent), m.key[1:]), nil
	case m.kind == mutSet && m.key[0] == pfxIntent:
		in, err := decodeIntent("", m.val)
		if err != nil {
			return b, err
		}
		b = appendStr(append(b, opPutIntent), m.key[1:])
		return appendStr(binary.AppendVarint(b, in.Created), in.Payload), nil
	case m.kind == mutDelete && m.key[0] == pfxMeta:
		return appendStr(append(b, opDeleteMeta), m.key[1:]), nil
	case m.kind == mutSet && m.key[0] == pfxMeta:
		return appendStr(appendStr(append(b, opSetMeta), m.key[1:]), m.val), nil
	}
	return b, fmt.Errorf("unknown mutation kind %d on key %q", m.kind, m.key)
}

// UnmarshalBinary replaces the batch's contents with the batch encoded in
// data (see MarshalBinary). Every operation is validated exactly as when it
// is added to a batch, and lengths are bounded by the store's limits, so
// hostile input fails cleanly. An unknown format version fails with an
// error wrapping ErrUnknownVersion; any other bad input with one wrapping
// ErrCorrupt (and ErrInvalid when an operation's arguments are invalid).
// On error the batch is left empty, with Err reporting the error, so that
// a Commit of it applies nothing. It implements
// encoding.BinaryUnmarshaler.
func (b *Batch) UnmarshalBinary(data []byte) error {
	nb, err := decodeBatch(data)
	if err != nil {
		*b = Batch{err: err}
		return err
	}
	*b = nb
	return nil
}

func decodeBatch(data []byte) (Batch, error) {
	var nb Batch
	r := reader{b: data}
	v := r.byte("batch format version")
	if r.err == nil && (v < batchFormatV1 || v > batchFormatV7) {
		return nb, fmt.Errorf("store: decode batch: %w: batch format %d", ErrUnknownVersion, v)
	}
	decodeCond := func(r *reader) error { return nb.decodeCond(r, v) }
	decodeMut := func(r *reader) error { return nb.decodeMut(r, v) }
	parts := []struct {
		what   string
		decode func(*reader) error
	}{{"precondition", decodeCond}, {"mutation", decodeMut}}
	for _, part := range parts {
		// Every operation takes at least 2 bytes: its code and a length.
		n := r.count("batch "+part.what+" count", 2)
		for i := 0; i < n; i++ {
			if err := part.decode(&r); err != nil {
				return nb, fmt.Errorf("store: decode batch: %s %d: %w", part.what, i, err)
			}
		}
	}
	if v >= batchFormatV3 {
		nb.dirTime = r.varint("directory time stamp")
	}
	if err := r.end("batch"); err != nil {
		return nb, fmt.Errorf("store: decode batch: %w", err)
	}
	// Version 7 is written exactly when the batch puts a hard link's
	// stub, else version 6 exactly when the batch counts links (and then
	// changes entries, puts a directory or recounts), else version 5 exactly when a path is
	// longer than the older formats take, else version 4 exactly when
	// extended attributes are in the batch, else version 3 exactly when a
	// special file or a stamp is, and a stamp only on a batch that changes
	// entries, which keeps each batch's encoding unique.
	long := nb.longPaths()
	nb.countLinks = v == batchFormatV6 || v == batchFormatV7 && nb.linksMatter()
	switch {
	case nb.dirTime < 0 || nb.dirTime != 0 && !nb.changesEntries():
		return nb, fmt.Errorf("store: decode batch: %w: directory time %d on a batch that changes no entry", ErrCorrupt, nb.dirTime)
	case nb.anchors != (v == batchFormatV7):
		return nb, fmt.Errorf("store: decode batch: %w: batch format %d with hard links' stubs %v", ErrCorrupt, v, nb.anchors)
	case v == batchFormatV7:
		// Written exactly when the batch puts a stub; anything else may
		// be in it.
	case nb.countLinks:
		if !nb.linksMatter() {
			return nb, fmt.Errorf("store: decode batch: %w: batch format %d on a batch that changes no entry and puts no directory", ErrCorrupt, v)
		}
	case long != (v == batchFormatV5):
		return nb, fmt.Errorf("store: decode batch: %w: batch format %d with paths longer than %d bytes %v", ErrCorrupt, v, LegacyMaxPathLen, long)
	case !long && nb.xattrs != (v == batchFormatV4):
		return nb, fmt.Errorf("store: decode batch: %w: batch format %d with extended attributes %v", ErrCorrupt, v, nb.xattrs)
	case !long && !nb.xattrs && (nb.special || nb.dirTime != 0) != (v == batchFormatV3):
		return nb, fmt.Errorf("store: decode batch: %w: batch format %d with special files %v and directory time %d", ErrCorrupt, v, nb.special, nb.dirTime)
	}
	return nb, nil
}

// pathLimit returns the longest path batch format v carries.
func pathLimit(v byte) int {
	if v >= batchFormatV5 {
		return MaxPathLen
	}
	return LegacyMaxPathLen
}

// longPaths reports whether an operation of the batch names a path (or a
// directory) longer than LegacyMaxPathLen.
func (b *Batch) longPaths() bool {
	long := func(key []byte) bool {
		if len(key) <= 1+LegacyMaxPathLen {
			return false
		}
		switch key[0] {
		case pfxInode:
			return true
		case pfxEntry: // the directory, then 0x00 and the name
			return bytes.IndexByte(key[1:], 0) > LegacyMaxPathLen
		}
		return false
	}
	for i := range b.conds {
		if long(b.conds[i].key) {
			return true
		}
	}
	for i := range b.muts {
		if long(b.muts[i].key) {
			return true
		}
	}
	return false
}

// decoded reports the first error of decoding one operation: the reader's
// (truncated or out-of-range input), else the batch's validation error.
func (b *Batch) decoded(r *reader) error {
	if r.err != nil {
		return r.err
	}
	if b.err != nil {
		return fmt.Errorf("%w: %w", ErrCorrupt, b.err)
	}
	return nil
}

func (b *Batch) decodeCond(r *reader, v byte) error {
	kind := condKind(r.byte("precondition kind"))
	if r.err != nil {
		return r.err
	}
	switch kind {
	case condInodeAbsent, condInodeExists, condInodeVersion:
		p := r.str("path", pathLimit(v))
		switch kind {
		case condInodeAbsent:
			b.RequireInodeAbsent(p)
		case condInodeExists:
			b.RequireInodeExists(p)
		default:
			b.RequireInodeVersion(p, r.uvarint("version"))
		}
	case condEntryAbsent, condEntryExists:
		dir := r.str("dir", pathLimit(v))
		name := r.str("name", MaxNameLen)
		if kind == condEntryAbsent {
			b.RequireEntryAbsent(dir, name)
		} else {
			b.RequireEntryExists(dir, name)
		}
	case condDirEmpty:
		b.RequireDirEmpty(r.str("dir", pathLimit(v)))
	case condIntentAbsent, condIntentExists:
		id := r.str("intent id", MaxIDLen)
		if kind == condIntentAbsent {
			b.RequireIntentAbsent(id)
		} else {
			b.RequireIntentExists(id)
		}
	case condMetaEquals:
		key := r.str("meta key", MaxIDLen)
		present := r.byte("meta presence")
		val := r.take("meta value", MaxBlobLen)
		switch {
		case r.err != nil:
		case present > 1 || (present == 0 && len(val) != 0):
			r.fail("meta precondition presence")
		case present == 1:
			b.RequireMeta(key, append([]byte{}, val...)) // non-nil even when empty
		default:
			b.RequireMeta(key, nil)
		}
	default:
		return corruptf("precondition kind %d unknown", kind)
	}
	return b.decoded(r)
}

func (b *Batch) decodeMut(r *reader, v byte) error {
	op := r.byte("mutation op")
	if r.err != nil {
		return r.err
	}
	switch op {
	case opPutInode:
		p := r.str("path", pathLimit(v))
		v := r.take("inode", maxInodeValueLen)
		if r.err != nil {
			return r.err
		}
		ino, err := decodeInode(v)
		if err != nil {
			return err
		}
		b.PutInode(p, ino)
	case opDeleteInode:
		b.DeleteInode(r.str("path", pathLimit(v)))
	case opPutEntry, opDeleteEntry:
		dir := r.str("dir", pathLimit(v))
		name := r.str("name", MaxNameLen)
		if op == opDeleteEntry {
			b.DeleteEntry(dir, name)
			break
		}
		t := FileType(r.byte("entry type"))
		home := r.str("home", MaxIDLen)
		var id uint64
		if v >= batchFormatV2 {
			id = r.uvarint("entry id")
		}
		if r.err != nil {
			return r.err
		}
		b.PutEntry(dir, Entry{Name: name, Type: t, Home: home, ID: id})
	case opPutIntent:
		id := r.str("intent id", MaxIDLen)
		created := r.varint("created")
		payload := r.take("payload", MaxBlobLen)
		b.putIntent(Intent{ID: id, Created: created, Payload: payload})
	case opDeleteIntent:
		b.DeleteIntent(r.str("intent id", MaxIDLen))
	case opSetMeta:
		key := r.str("meta key", MaxIDLen)
		b.SetMeta(key, r.take("meta value", MaxBlobLen))
	case opDeleteMeta:
		b.DeleteMeta(r.str("meta key", MaxIDLen))
	case opRecountLinks:
		if v < batchFormatV6 {
			return corruptf("a recount of links in batch format %d", v)
		}
		b.RecountLinks(r.str("dir", pathLimit(v)))
	default:
		return corruptf("mutation op %d unknown", op)
	}
	return b.decoded(r)
}
