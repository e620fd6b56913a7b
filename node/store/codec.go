package store

import (
	"encoding/binary"
	"fmt"
	"math"
	"path"
	"strings"
	"unicode/utf8"
)

// Key encoding. Every key starts with one prefix byte naming its record
// kind, followed by the record's identity; Badger orders keys bytewise, so
// each kind is one contiguous range.
//
//	inode   0x01 path                     path is normalized ("/", "/a/b")
//	entry   0x02 dir 0x00 name            a directory's entries are contiguous
//	                                      and sorted by name
//	intent  0x03 id
//	meta    0x04 key
//	rekey   0x05 oldPath                  a subtree rekey in progress
//	system  0x06 name                     schema version ("schema"), inode
//	                                      counts ("counts"), applied log
//	                                      index ("applied", ApplyLog)
//	recode  0x07 rootPath                 a subtree recode in progress
//
// Paths and names never contain NUL, so "dir 0x00" is a unique prefix for
// the entries of dir: the entries of "/a" ("/a" 0x00 ...) sort before, and
// never interleave with, those of "/a b" ("/a" 0x20 ...) or "/a/b"
// ("/a" 0x2f ...).
const (
	pfxInode  byte = 0x01
	pfxEntry  byte = 0x02
	pfxIntent byte = 0x03
	pfxMeta   byte = 0x04
	pfxRekey  byte = 0x05
	pfxSys    byte = 0x06
	pfxRecode byte = 0x07
)

// Value encoding. Every value starts with a format version byte (currently
// 1); decoders reject unknown versions, truncated input and trailing bytes,
// and never panic.
//
//	inode   v=1 type:u8 mode:uvarint uid:uvarint gid:uvarint size:varint
//	        atime:varint mtime:varint ctime:varint nlink:uvarint
//	        version:uvarint len:uvarint layout[len]
//	        [len:uvarint target[len]]                   (TypeSymlink only)
//	        [rdev:uvarint]                              (TypeCharDev, TypeBlockDev only)
//	        [n:uvarint n×(depth mode uid gid: uvarint each)]
//	                                                   (ancestor codes; absent: none)
//	        [len:uvarint text[len]]                     (Inode.Text; absent: none;
//	                                                   when present, the codes are
//	                                                   too, n = 0 for none)
//	        [id:uvarint]                                (Inode.ID; absent: 0; when
//	                                                   present, the codes and the
//	                                                   text are too, n = 0 and
//	                                                   len = 0 for none; never 0)
//	entry   v=1 type:u8 len:uvarint home[len]          (name is in the key)
//	        [id:uvarint]                                (Entry.ID; absent: 0; never 0)
//	intent  v=1 created:varint len:uvarint payload[len] (id is in the key)
//	rekey   v=1 started:varint len:uvarint new[len]     (old is in the key)
//	        [n:uvarint n×code]                          (the new chain; absent: none)
//	recode  v=1 has:u8 [code] len:uvarint cursor[len]   (root is in the key)
//	counts  v=1 files:uvarint dirs:uvarint
//	applied v=1 index:uvarint                           (absent: 0)
//	schema  v=1 schema:u8
//	meta    raw bytes, opaque to the store
//
// The applied index record was added without a schema change: a build that
// does not know it ignores it. So were the trailing ids of inodes and
// entries: every field after the layout (and a symlink's target) is
// optional and comes in a fixed order, so a value written before a field
// existed decodes with its zero value (an id of 0), and each optional field
// is written only when it, or a field after it, is set, which keeps the
// encoding of a value unique. The batch binary format is in batchcodec.go,
// the backup format in backup.go.
const formatV1 byte = 1

// Limits enforced on every write.
const (
	// MaxPathLen is the longest path accepted, in bytes. Linux limits
	// the path given to one call (PATH_MAX, 4,096 bytes), not the depth
	// of a tree: a deeper path is reached relative to a directory.
	MaxPathLen = 32 << 10
	// LegacyMaxPathLen is the longest path of batch formats before 5,
	// and of this store before it took longer ones.
	LegacyMaxPathLen = 4096
	// MaxTargetLen is the longest symbolic link target accepted, in
	// bytes (Linux's PATH_MAX).
	MaxTargetLen = 4096
	// MaxNameLen is the longest entry name accepted, in bytes.
	MaxNameLen = 255
	// MaxIDLen is the longest intent id, meta key or home node id accepted.
	MaxIDLen = 1024
	// MaxBlobLen is the longest layout, intent payload or meta value
	// accepted.
	MaxBlobLen = 1 << 20
	// MaxTextLen is the longest text an inode holds (Inode.Text).
	MaxTextLen = 64 << 10
	// MaxXattrNameLen is the longest extended attribute name, with its
	// namespace (Linux's XATTR_NAME_MAX).
	MaxXattrNameLen = 255
	// MaxXattrValueLen is the longest extended attribute value (Linux's
	// XATTR_SIZE_MAX).
	MaxXattrValueLen = 64 << 10
	// MaxXattrsLen bounds the names and values of one inode's extended
	// attributes together, in bytes.
	MaxXattrsLen = 64 << 10
)

// XattrNamespaces are the extended attribute namespaces an inode may hold
// (Linux's, less "system.", which names the kernel's own attributes such
// as POSIX ACLs).
var XattrNamespaces = []string{"security.", "trusted.", "user."}

// XattrNamespace returns the namespace of attribute name, the element of
// XattrNamespaces it starts with, or "" when it starts with none.
func XattrNamespace(name string) string {
	for _, ns := range XattrNamespaces {
		if strings.HasPrefix(name, ns) {
			return ns
		}
	}
	return ""
}

// CheckXattrName checks an extended attribute name: a known namespace
// followed by at least one byte, at most MaxXattrNameLen bytes, no NUL.
func CheckXattrName(name string) error {
	switch {
	case len(name) > MaxXattrNameLen:
		return invalidf("extended attribute name longer than %d bytes", MaxXattrNameLen)
	case strings.IndexByte(name, 0) >= 0:
		return invalidf("extended attribute name with a NUL byte")
	}
	for _, ns := range XattrNamespaces {
		if len(name) > len(ns) && strings.HasPrefix(name, ns) {
			return nil
		}
	}
	return invalidf("extended attribute name %q is not in the namespaces %v", name, XattrNamespaces)
}

// XattrsLen returns the bytes xs count against MaxXattrsLen.
func XattrsLen(xs []Xattr) int {
	n := 0
	for _, x := range xs {
		n += len(x.Name) + len(x.Value)
	}
	return n
}

// checkXattrs checks an inode's extended attributes: valid names, sorted,
// each once, values and all of them within the limits.
func checkXattrs(ino *Inode) error {
	for i, x := range ino.Xattrs {
		if err := CheckXattrName(x.Name); err != nil {
			return err
		}
		if len(x.Value) > MaxXattrValueLen {
			return invalidf("extended attribute %q: value longer than %d bytes", x.Name, MaxXattrValueLen)
		}
		if i > 0 && ino.Xattrs[i-1].Name >= x.Name {
			return invalidf("extended attributes not sorted by name, or a name twice (%q)", x.Name)
		}
	}
	if n := XattrsLen(ino.Xattrs); n > MaxXattrsLen {
		return invalidf("extended attributes of %d bytes (at most %d)", n, MaxXattrsLen)
	}
	return nil
}

var (
	sysSchemaKey  = []byte{pfxSys, 's', 'c', 'h', 'e', 'm', 'a'}
	sysCountsKey  = []byte{pfxSys, 'c', 'o', 'u', 'n', 't', 's'}
	sysAppliedKey = []byte{pfxSys, 'a', 'p', 'p', 'l', 'i', 'e', 'd'}
)

// schemaVersion is the on-disk layout version recorded at sysSchemaKey.
const schemaVersion byte = 1

func inodeKey(p string) []byte {
	k := make([]byte, 1+len(p))
	k[0] = pfxInode
	copy(k[1:], p)
	return k
}

func entryKey(dir, name string) []byte {
	k := make([]byte, 0, len(dir)+len(name)+2)
	k = append(k, pfxEntry)
	k = append(k, dir...)
	k = append(k, 0)
	return append(k, name...)
}

// entryDirPrefix is the common prefix of all entries of dir.
func entryDirPrefix(dir string) []byte {
	k := make([]byte, 0, len(dir)+2)
	k = append(k, pfxEntry)
	k = append(k, dir...)
	return append(k, 0)
}

func intentKey(id string) []byte { return append([]byte{pfxIntent}, id...) }
func metaKey(key string) []byte  { return append([]byte{pfxMeta}, key...) }
func rekeyKey(old string) []byte { return append([]byte{pfxRekey}, old...) }
func recodeKey(root string) []byte {
	return append([]byte{pfxRecode}, root...)
}

// parseEntryKey splits an entry key into directory and name.
func parseEntryKey(k []byte) (dir, name string, ok bool) {
	if len(k) < 2 || k[0] != pfxEntry {
		return "", "", false
	}
	for i := 1; i < len(k); i++ {
		if k[i] == 0 {
			return string(k[1:i]), string(k[i+1:]), true
		}
	}
	return "", "", false
}

// checkPath accepts normalized absolute paths: "/" or "/a/b" without empty,
// "." or ".." components, trailing slash or NUL byte.
func checkPath(p string) error {
	switch {
	case p == "":
		return invalidf("empty path")
	case len(p) > MaxPathLen:
		return invalidf("path longer than %d bytes", MaxPathLen)
	case p[0] != '/':
		return invalidf("path %q is not absolute", p)
	case strings.IndexByte(p, 0) >= 0:
		return invalidf("path %q contains a NUL byte", p)
	case path.Clean(p) != p:
		return invalidf("path %q is not normalized", p)
	}
	return nil
}

func checkName(n string) error {
	switch {
	case n == "":
		return invalidf("empty name")
	case len(n) > MaxNameLen:
		return invalidf("name longer than %d bytes", MaxNameLen)
	case n == "." || n == "..":
		return invalidf("name %q is reserved", n)
	case strings.IndexByte(n, '/') >= 0:
		return invalidf("name %q contains a slash", n)
	case strings.IndexByte(n, 0) >= 0:
		return invalidf("name %q contains a NUL byte", n)
	}
	return nil
}

func checkID(what, id string) error {
	if id == "" || len(id) > MaxIDLen {
		return invalidf("%s must be 1..%d bytes, got %d", what, MaxIDLen, len(id))
	}
	return nil
}

func checkBlob(what string, b []byte) error {
	if len(b) > MaxBlobLen {
		return invalidf("%s longer than %d bytes", what, MaxBlobLen)
	}
	return nil
}

func checkType(t FileType) error {
	if !t.Valid() {
		return invalidf("bad file type %d", uint8(t))
	}
	return nil
}

// checkAnchor checks a stub (an inode with an anchor): an id, no
// directory, no extended attributes (its record has them).
func checkAnchor(ino *Inode) error {
	switch {
	case ino.Anchor == "":
		return nil
	case len(ino.Anchor) > MaxIDLen:
		return invalidf("anchor longer than %d bytes", MaxIDLen)
	case ino.ID == 0:
		return invalidf("a stub without an inode id")
	case ino.Type == TypeDir:
		return invalidf("a directory with an anchor")
	case len(ino.Xattrs) > 0:
		return invalidf("a stub with extended attributes")
	}
	return nil
}

// checkTarget checks an inode's symlink target: present exactly for a
// symlink, at most MaxTargetLen bytes.
func checkTarget(ino *Inode) error {
	switch {
	case ino.Type == TypeSymlink && ino.Target == "":
		return invalidf("symlink without a target")
	case ino.Type != TypeSymlink && ino.Target != "":
		return invalidf("a %s with a symlink target", ino.Type)
	case len(ino.Target) > MaxTargetLen:
		return invalidf("symlink target longer than %d bytes", MaxTargetLen)
	case ino.Rdev != 0 && !ino.Type.Device():
		return invalidf("a %s with a device number", ino.Type)
	}
	return nil
}

// checkText checks an inode's text: a file's only, valid UTF-8, at most
// MaxTextLen bytes.
func checkText(ino *Inode) error {
	switch {
	case ino.Text == "":
	case ino.Type != TypeFile:
		return invalidf("a %s with a text", ino.Type)
	case len(ino.Text) > MaxTextLen:
		return invalidf("text longer than %d bytes", MaxTextLen)
	case !utf8.ValidString(ino.Text):
		return invalidf("text that is not valid UTF-8")
	}
	return nil
}

// reader decodes the fields of a value; the first error sticks.
type reader struct {
	b   []byte
	err error
}

func (r *reader) fail(what string) {
	if r.err == nil {
		r.err = corruptf("%s", what)
	}
}

func (r *reader) byte(what string) byte {
	if r.err != nil {
		return 0
	}
	if len(r.b) == 0 {
		r.fail("truncated " + what)
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

func (r *reader) uvarint(what string) uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.fail("bad " + what)
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) uint32(what string) uint32 {
	v := r.uvarint(what)
	if v > math.MaxUint32 {
		r.fail(what + " out of range")
		return 0
	}
	return uint32(v)
}

func (r *reader) varint(what string) int64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.fail("bad " + what)
		return 0
	}
	r.b = r.b[n:]
	return v
}

// take returns a length-prefixed byte string of at most max bytes, without
// copying it.
func (r *reader) take(what string, max int) []byte {
	n := r.uvarint(what + " length")
	if r.err != nil {
		return nil
	}
	if n > uint64(max) || n > uint64(len(r.b)) {
		r.fail(what + " length out of range")
		return nil
	}
	v := r.b[:n:n]
	r.b = r.b[n:]
	return v
}

// bytes returns a copy of a length-prefixed byte string (nil when empty).
func (r *reader) bytes(what string, max int) []byte {
	v := r.take(what, max)
	if len(v) == 0 {
		return nil
	}
	return append([]byte(nil), v...)
}

// str returns a length-prefixed string of at most max bytes.
func (r *reader) str(what string, max int) string { return string(r.take(what, max)) }

// count reads a number of items that each take at least size bytes of
// what follows, so that a bad count cannot make the caller allocate more
// than the input justifies.
func (r *reader) count(what string, size int) int {
	n := r.uvarint(what)
	if r.err == nil && n > uint64(len(r.b)/size) {
		r.fail(what + " out of range")
		return 0
	}
	return int(n)
}

func (r *reader) version(kind string) {
	if v := r.byte(kind + " format version"); r.err == nil && v != formatV1 {
		r.err = corruptf("%s format version %d unknown", kind, v)
	}
}

func (r *reader) ftype(kind string) FileType {
	t := FileType(r.byte(kind + " type"))
	if r.err == nil && !t.Valid() {
		r.fail(kind + " type invalid")
	}
	return t
}

func (r *reader) end(kind string) error {
	if r.err == nil && len(r.b) != 0 {
		r.err = corruptf("%d trailing bytes after %s", len(r.b), kind)
	}
	return r.err
}

func encodeInode(ino *Inode) []byte {
	b := make([]byte, 0, 2+8*binary.MaxVarintLen64+len(ino.Layout))
	b = append(b, formatV1, byte(ino.Type))
	b = binary.AppendUvarint(b, uint64(ino.Mode))
	b = binary.AppendUvarint(b, uint64(ino.UID))
	b = binary.AppendUvarint(b, uint64(ino.GID))
	b = binary.AppendVarint(b, ino.Size)
	b = binary.AppendVarint(b, ino.Atime)
	b = binary.AppendVarint(b, ino.Mtime)
	b = binary.AppendVarint(b, ino.Ctime)
	b = binary.AppendUvarint(b, uint64(ino.Nlink))
	b = binary.AppendUvarint(b, ino.Version)
	b = binary.AppendUvarint(b, uint64(len(ino.Layout)))
	b = append(b, ino.Layout...)
	if ino.Type == TypeSymlink {
		b = binary.AppendUvarint(b, uint64(len(ino.Target)))
		b = append(b, ino.Target...)
	}
	if ino.Type.Device() {
		b = binary.AppendUvarint(b, ino.Rdev)
	}
	if ino.Text == "" && ino.ID == 0 && len(ino.Xattrs) == 0 && ino.Anchor == "" {
		return appendCodes(b, ino.Ancestors)
	}
	b = binary.AppendUvarint(b, uint64(len(ino.Ancestors)))
	for _, c := range ino.Ancestors {
		b = appendCode(b, c)
	}
	b = binary.AppendUvarint(b, uint64(len(ino.Text)))
	b = append(b, ino.Text...)
	if ino.ID == 0 && len(ino.Xattrs) == 0 && ino.Anchor == "" {
		return b
	}
	b = binary.AppendUvarint(b, ino.ID)
	if len(ino.Xattrs) == 0 && ino.Anchor == "" {
		return b
	}
	// A stub's anchor follows the extended attributes, whose list is
	// then written even when empty (a stub has none: its record has).
	b = binary.AppendUvarint(b, uint64(len(ino.Xattrs)))
	for _, x := range ino.Xattrs {
		b = appendStr(appendStr(b, x.Name), x.Value)
	}
	if ino.Anchor != "" {
		b = appendStr(b, ino.Anchor)
	}
	return b
}

// MaxAncestorCodes bounds the ancestor codes of an inode (a path has at
// most MaxPathLen/2 components).
const MaxAncestorCodes = MaxPathLen / 2

// AppendCodes appends the binary form of ancestor codes, as an inode's
// value ends with them, to b (nothing when there are none).
func AppendCodes(b []byte, codes []AncestorCode) []byte { return appendCodes(b, codes) }

// DecodeCodes decodes the whole of b as ancestor codes written by
// AppendCodes (empty b: none); damage is ErrCorrupt.
func DecodeCodes(b []byte) ([]AncestorCode, error) {
	r := reader{b: b}
	codes := r.codes("command")
	return codes, r.end("ancestor codes")
}

// appendCodes appends ancestor codes, nothing when there are none (so an
// inode without codes encodes as before they existed).
func appendCodes(b []byte, codes []AncestorCode) []byte {
	if len(codes) == 0 {
		return b
	}
	b = binary.AppendUvarint(b, uint64(len(codes)))
	for _, c := range codes {
		b = appendCode(b, c)
	}
	return b
}

func appendCode(b []byte, c AncestorCode) []byte {
	b = binary.AppendUvarint(b, uint64(c.Depth))
	b = binary.AppendUvarint(b, uint64(c.Mode))
	b = binary.AppendUvarint(b, uint64(c.UID))
	return binary.AppendUvarint(b, uint64(c.GID))
}

// codes reads the optional ancestor codes at the end of a value.
func (r *reader) codes(kind string) []AncestorCode {
	if r.err != nil || len(r.b) == 0 {
		return nil
	}
	n := r.count(kind+" ancestor codes", 4)
	if r.err == nil && n == 0 {
		r.fail(kind + " ancestor codes: an empty list is written as none")
	}
	return r.codeList(kind, n)
}

// codeList reads n ancestor codes.
func (r *reader) codeList(kind string, n int) []AncestorCode {
	if r.err == nil && n > MaxAncestorCodes {
		r.fail(kind + " ancestor codes: too many")
	}
	if r.err != nil || n == 0 {
		return nil
	}
	out := make([]AncestorCode, n)
	for i := range out {
		out[i] = r.code(kind)
		if r.err == nil && i > 0 && out[i].Depth <= out[i-1].Depth {
			r.fail(kind + " ancestor codes out of order")
		}
	}
	return out
}

func (r *reader) code(kind string) AncestorCode {
	return AncestorCode{
		Depth: r.uint32(kind + " code depth"),
		Mode:  r.uint32(kind + " code mode"),
		UID:   r.uint32(kind + " code uid"),
		GID:   r.uint32(kind + " code gid"),
	}
}

func decodeInode(b []byte) (Inode, error) {
	r := reader{b: b}
	var ino Inode
	r.version("inode")
	ino.Type = r.ftype("inode")
	ino.Mode = r.uint32("mode")
	ino.UID = r.uint32("uid")
	ino.GID = r.uint32("gid")
	ino.Size = r.varint("size")
	ino.Atime = r.varint("atime")
	ino.Mtime = r.varint("mtime")
	ino.Ctime = r.varint("ctime")
	ino.Nlink = r.uint32("nlink")
	ino.Version = r.uvarint("version")
	ino.Layout = r.bytes("layout", MaxBlobLen)
	if ino.Type == TypeSymlink {
		if ino.Target = r.str("symlink target", MaxTargetLen); r.err == nil && ino.Target == "" {
			r.fail("symlink without a target")
		}
	}
	if ino.Type.Device() {
		ino.Rdev = r.uvarint("device number")
	}
	if len(r.b) > 0 && r.err == nil {
		// The ancestor codes, then the text if anything follows them,
		// then the id if anything follows the text (an empty list of
		// codes is written only before a text, an empty text only
		// before an id).
		ino.Ancestors = r.codeList("inode", r.count("inode ancestor codes", 4))
		switch {
		case r.err == nil && len(r.b) > 0:
			ino.Text = r.str("text", MaxTextLen)
			switch {
			case r.err == nil && len(r.b) > 0:
				ino.ID = r.uvarint("inode id")
				switch {
				case r.err == nil && len(r.b) > 0:
					ino.Xattrs = r.xattrs()
					if r.err == nil && len(r.b) > 0 {
						ino.Anchor = r.str("anchor", MaxIDLen)
						switch {
						case r.err == nil && ino.Anchor == "":
							r.fail("an empty anchor is written as none")
						case r.err == nil && len(ino.Xattrs) > 0:
							r.fail("a stub with extended attributes")
						}
					} else if r.err == nil && len(ino.Xattrs) == 0 {
						r.fail("extended attributes: an empty list is written as none")
					}
				case r.err == nil && ino.ID == 0:
					r.fail("an inode id of 0 is written as none")
				}
			case r.err == nil && ino.Text == "":
				r.fail("an empty text is written as none")
			}
		case r.err == nil && len(ino.Ancestors) == 0:
			r.fail("inode ancestor codes: an empty list is written as none")
		}
	}
	if err := r.end("inode"); err != nil {
		return Inode{}, err
	}
	return ino, nil
}

// xattrs reads an inode's extended attributes (an empty list only
// before a stub's anchor).
func (r *reader) xattrs() []Xattr {
	n := r.count("extended attributes", 3)
	if r.err != nil || n == 0 {
		return nil // (an empty list only before an anchor: the caller checks)
	}
	out := make([]Xattr, n)
	for i := range out {
		out[i].Name = r.str("extended attribute name", MaxXattrNameLen)
		out[i].Value = r.bytes("extended attribute value", MaxXattrValueLen)
	}
	if r.err == nil {
		if err := checkXattrs(&Inode{Xattrs: out}); err != nil {
			r.err = fmt.Errorf("%w: %w", ErrCorrupt, err)
		}
	}
	return out
}

// inodeTypeOf returns the type byte of an encoded inode without decoding
// the rest (used to maintain the inode counts).
func inodeTypeOf(b []byte) FileType {
	if len(b) < 2 || b[0] != formatV1 {
		return 0
	}
	return FileType(b[1])
}

// entryTypeOf returns the type of an encoded entry without decoding the
// rest (used to keep the directories' link counts).
func entryTypeOf(b []byte) FileType {
	if len(b) < 2 || b[0] != formatV1 {
		return 0
	}
	return FileType(b[1])
}

func encodeEntry(e *Entry) []byte {
	b := make([]byte, 0, 2+2*binary.MaxVarintLen64+len(e.Home))
	b = append(b, formatV1, byte(e.Type))
	b = binary.AppendUvarint(b, uint64(len(e.Home)))
	b = append(b, e.Home...)
	if e.ID == 0 {
		return b
	}
	return binary.AppendUvarint(b, e.ID)
}

// decodeEntry decodes an entry value; name comes from the key.
func decodeEntry(name string, b []byte) (Entry, error) {
	r := reader{b: b}
	r.version("entry")
	t := r.ftype("entry")
	home := r.bytes("home", MaxIDLen)
	var id uint64
	if r.err == nil && len(r.b) > 0 {
		if id = r.uvarint("entry id"); r.err == nil && id == 0 {
			r.fail("an entry id of 0 is written as none")
		}
	}
	if err := r.end("entry"); err != nil {
		return Entry{}, err
	}
	return Entry{Name: name, Type: t, Home: string(home), ID: id}, nil
}

func encodeIntent(in *Intent) []byte {
	b := make([]byte, 0, 1+2*binary.MaxVarintLen64+len(in.Payload))
	b = append(b, formatV1)
	b = binary.AppendVarint(b, in.Created)
	b = binary.AppendUvarint(b, uint64(len(in.Payload)))
	return append(b, in.Payload...)
}

// decodeIntent decodes an intent value; id comes from the key.
func decodeIntent(id string, b []byte) (Intent, error) {
	r := reader{b: b}
	r.version("intent")
	created := r.varint("created")
	payload := r.bytes("payload", MaxBlobLen)
	if err := r.end("intent"); err != nil {
		return Intent{}, err
	}
	return Intent{ID: id, Created: created, Payload: payload}, nil
}

func encodeRekey(rk *Rekey) []byte {
	b := make([]byte, 0, 1+2*binary.MaxVarintLen64+len(rk.New))
	b = append(b, formatV1)
	b = binary.AppendVarint(b, rk.Started)
	b = binary.AppendUvarint(b, uint64(len(rk.New)))
	b = append(b, rk.New...)
	return appendCodes(b, rk.Chain)
}

// decodeRekey decodes a rekey record; old comes from the key. Both paths
// must be valid.
func decodeRekey(old string, b []byte) (Rekey, error) {
	r := reader{b: b}
	r.version("rekey")
	started := r.varint("started")
	nw := r.bytes("new path", MaxPathLen)
	chain := r.codes("rekey")
	if err := r.end("rekey"); err != nil {
		return Rekey{}, err
	}
	rk := Rekey{Old: old, New: string(nw), Started: started, Chain: chain}
	if checkPath(rk.Old) != nil || checkPath(rk.New) != nil {
		return Rekey{}, corruptf("rekey record with invalid path (%q -> %q)", rk.Old, rk.New)
	}
	return rk, nil
}

func encodeRecode(rc *Recode) []byte {
	b := []byte{formatV1, 0}
	if rc.Code != nil {
		b[1] = 1
		b = appendCode(b, *rc.Code)
	}
	b = binary.AppendUvarint(b, uint64(len(rc.Cursor)))
	return append(b, rc.Cursor...)
}

// decodeRecode decodes a recode record; root comes from the key.
func decodeRecode(root string, b []byte) (Recode, error) {
	r := reader{b: b}
	r.version("recode")
	rc := Recode{Root: root}
	switch r.byte("recode code flag") {
	case 0:
	case 1:
		c := r.code("recode")
		rc.Code = &c
	default:
		r.fail("recode code flag invalid")
	}
	rc.Cursor = string(r.bytes("recode cursor", MaxPathLen))
	if err := r.end("recode"); err != nil {
		return Recode{}, err
	}
	if checkPath(rc.Root) != nil || (rc.Cursor != "" && checkPath(rc.Cursor) != nil) {
		return Recode{}, corruptf("recode record with invalid path (%q, cursor %q)", rc.Root, rc.Cursor)
	}
	return rc, nil
}

func encodeCounts(c InodeCounts) []byte {
	b := make([]byte, 0, 1+2*binary.MaxVarintLen64)
	b = append(b, formatV1)
	b = binary.AppendUvarint(b, uint64(c.Files))
	return binary.AppendUvarint(b, uint64(c.Dirs))
}

func decodeCounts(b []byte) (InodeCounts, error) {
	r := reader{b: b}
	r.version("counts")
	f := r.uvarint("files")
	d := r.uvarint("dirs")
	if err := r.end("counts"); err != nil {
		return InodeCounts{}, err
	}
	if f > math.MaxInt64 || d > math.MaxInt64 {
		return InodeCounts{}, corruptf("inode counts out of range")
	}
	return InodeCounts{Files: int64(f), Dirs: int64(d)}, nil
}

func encodeApplied(index uint64) []byte {
	return binary.AppendUvarint([]byte{formatV1}, index)
}

func decodeApplied(b []byte) (uint64, error) {
	r := reader{b: b}
	r.version("applied index")
	idx := r.uvarint("applied index")
	return idx, r.end("applied index")
}

func encodeSchema() []byte { return []byte{formatV1, schemaVersion} }

func decodeSchema(b []byte) (byte, error) {
	r := reader{b: b}
	r.version("schema")
	v := r.byte("schema version")
	if err := r.end("schema"); err != nil {
		return 0, err
	}
	return v, nil
}

// rekeyed replaces the path prefix old at the start of the identity of key
// (after the prefix byte) with nw.
func rekeyed(key []byte, old, nw string) []byte {
	out := make([]byte, 0, len(key)-len(old)+len(nw))
	out = append(out, key[0])
	out = append(out, nw...)
	return append(out, key[1+len(old):]...)
}

// isUnder reports whether p is root or a descendant of root.
func isUnder(p, root string) bool {
	if root == "/" {
		return true
	}
	return p == root || (len(p) > len(root) && p[len(root)] == '/' && p[:len(root)] == root)
}
