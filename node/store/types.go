package store

import (
	"fmt"
	"io/fs"
	"slices"
	"strconv"
	"strings"
	"time"
)

// FileType is the type of an inode or directory entry.
type FileType uint8

// File types. The zero value is invalid so that an unset type is caught.
const (
	TypeFile FileType = 1
	TypeDir  FileType = 2
	// TypeSymlink is a symbolic link: its inode holds the target
	// (Inode.Target). Paths are never resolved through a link.
	TypeSymlink FileType = 3
	// The special files (docs/design.md, "Special files"): a named pipe,
	// a socket, and character and block devices, whose inodes hold the
	// device number (Inode.Rdev). The store keeps them as metadata only;
	// batches that hold one are written in batch format 3.
	TypeFIFO     FileType = 4
	TypeSocket   FileType = 5
	TypeCharDev  FileType = 6
	TypeBlockDev FileType = 7
	maxFileType           = TypeBlockDev
)

// String returns "file", "dir", "symlink", "fifo", "socket", "char",
// "block" or "type(N)".
func (t FileType) String() string {
	switch t {
	case TypeFile:
		return "file"
	case TypeDir:
		return "dir"
	case TypeSymlink:
		return "symlink"
	case TypeFIFO:
		return "fifo"
	case TypeSocket:
		return "socket"
	case TypeCharDev:
		return "char"
	case TypeBlockDev:
		return "block"
	}
	return fmt.Sprintf("type(%d)", uint8(t))
}

// Valid reports whether t is a known file type.
func (t FileType) Valid() bool { return t >= TypeFile && t <= maxFileType }

// Special reports whether t is a special file (a FIFO, a socket or a
// device), which needs batch format 3.
func (t FileType) Special() bool { return t >= TypeFIFO && t <= maxFileType }

// Device reports whether t is a character or block device, whose inode
// holds a device number.
func (t FileType) Device() bool { return t == TypeCharDev || t == TypeBlockDev }

// Inode is the metadata of one file or directory, stored at its home node
// under its normalized full path.
type Inode struct {
	// Type is the inode's type (TypeFile, TypeDir, TypeSymlink or a
	// special file).
	Type FileType
	// Mode holds the permission bits (fs.FileMode.Perm plus setuid, setgid
	// and sticky bits if the caller uses them); the store keeps it verbatim.
	Mode uint32
	// UID and GID are the owner.
	UID, GID uint32
	// Size is the file size in bytes.
	Size int64
	// Atime, Mtime and Ctime are Unix times in nanoseconds.
	Atime, Mtime, Ctime int64
	// Nlink is the link count.
	Nlink uint32
	// Layout is an opaque blob (data placement); nil when empty.
	Layout []byte
	// Target is a symbolic link's target (TypeSymlink only; at most
	// MaxTargetLen bytes, kept verbatim, never resolved).
	Target string
	// Rdev is a device's number (TypeCharDev and TypeBlockDev only; 0
	// for any other type), in Linux's encoding (unix.Mkdev).
	Rdev uint64
	// Text is the start of a text file's content, for the full-text index
	// of the shard (package textindex): TypeFile only, valid UTF-8, at
	// most MaxTextLen bytes; empty: none.
	Text string
	// Version is maintained by the caller and can be checked by
	// Batch.RequireInodeVersion for optimistic concurrency. A recode
	// (RecodeSubtreeAt) increments it too.
	Version uint64
	// Ancestors are the ancestor permission codes of HBA §4.2.2: the
	// search permission of every ancestor directory that does not grant
	// search to everyone, by increasing depth (see AncestorCode). An
	// ancestor with search for user, group and other refuses no one and
	// is left out, so most inodes carry none.
	Ancestors []AncestorCode
	// ID is the inode's cluster-unique id, given at its creation and
	// never changed (renames keep it; docs/design.md, "Inode ids"). 0:
	// none yet (an inode written before ids existed).
	ID uint64
	// Xattrs are the inode's extended attributes, sorted by name, each
	// name once (docs/design.md, "Extended attributes"); nil: none.
	Xattrs []Xattr
	// Anchor is set on one name of a file with several (a hard link's
	// stub, docs/design.md "Hard links"): the shard whose store holds
	// the inode's record at LinkRecordPath(ID), where its attributes are.
	// A stub keeps only its type, its type's immutable fields (a
	// symlink's target, a device's number), its id and the ancestor
	// codes of its own path. "": an inode with one name (batch format 7
	// writes anchors).
	Anchor string
}

// LinkRecordsDir is the reserved directory (under the cluster's /.ghba
// tree, which clients cannot name) whose paths key the records of
// inodes with several names; nothing lists it, and a record has no
// directory entry.
const LinkRecordsDir = "/.ghba/inodes"

// LinkRecordPath returns the path that keys the record of the inode with
// id id in its anchor's store.
func LinkRecordPath(id uint64) string {
	return LinkRecordsDir + "/" + strconv.FormatUint(id, 10)
}

// IsLinkRecord reports whether p is the path of an inode's record.
func IsLinkRecord(p string) bool {
	return strings.HasPrefix(p, LinkRecordsDir+"/")
}

// Xattr is one extended attribute: a name of 1 to MaxXattrNameLen bytes
// that starts with a namespace ("user.", "trusted.", "security."), and a
// value of at most MaxXattrValueLen bytes (possibly empty).
type Xattr struct {
	Name  string
	Value []byte
}

// XattrIndex returns the position of the attribute named name in xs
// (sorted by name) and whether it is there.
func XattrIndex(xs []Xattr, name string) (int, bool) {
	return slices.BinarySearchFunc(xs, name, func(x Xattr, n string) int { return strings.Compare(x.Name, n) })
}

// AncestorCode is the search permission one ancestor directory gives its
// descendants: the directory's execute bits and owner, and its depth (the
// number of components of its path: 0 for "/", 1 for "/a"). A descendant
// is reachable by a user only if every code of its inode grants that user
// search (HBA §4.2.2: "the intersection of access permissions of all
// parent directories", kept per ancestor so that owner and group classes
// stay exact).
type AncestorCode struct {
	// Depth is the ancestor's depth.
	Depth uint32
	// Mode holds the ancestor's execute bits (mode & 0o111).
	Mode uint32
	// UID and GID are the ancestor's owner.
	UID, GID uint32
}

// searchAll is the execute bit of user, group and other.
const searchAll = 0o111

// SearchCode returns the code directory dir (an inode at depth depth)
// gives its descendants, and false when it grants search to everyone (no
// code needed).
func SearchCode(depth int, dir *Inode) (AncestorCode, bool) {
	x := dir.Mode & searchAll
	if x == searchAll {
		return AncestorCode{}, false
	}
	return AncestorCode{Depth: uint32(depth), Mode: x, UID: dir.UID, GID: dir.GID}, true
}

// ChildAncestors returns the ancestor codes of a child of directory dir
// at depth depth: dir's own codes and, if it restricts search, its code.
func ChildAncestors(depth int, dir *Inode) []AncestorCode {
	c, ok := SearchCode(depth, dir)
	if !ok {
		return slices.Clone(dir.Ancestors)
	}
	out := make([]AncestorCode, 0, len(dir.Ancestors)+1)
	out = append(out, dir.Ancestors...)
	return append(out, c)
}

// PathDepth returns the number of components of a normalized path: 0 for
// "/", 1 for "/a", 2 for "/a/b".
func PathDepth(p string) int {
	if p == "/" {
		return 0
	}
	return strings.Count(p, "/")
}

// withCode returns codes with the code at depth replaced by c, or removed
// when c is nil, keeping the order by depth.
func withCode(codes []AncestorCode, depth uint32, c *AncestorCode) []AncestorCode {
	out := make([]AncestorCode, 0, len(codes)+1)
	placed := c == nil
	for _, x := range codes {
		if x.Depth == depth {
			continue
		}
		if !placed && x.Depth > depth {
			out = append(out, *c)
			placed = true
		}
		out = append(out, x)
	}
	if !placed {
		out = append(out, *c)
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// movedCodes returns the codes of an inode of a subtree moved from
// oldRoot (at depth oldDepth) to a place whose root has the codes chain
// (at depth newDepth): the new root's chain, then the codes the inode had
// from inside the subtree (the old root and below), shifted to their new
// depths.
func movedCodes(codes, chain []AncestorCode, oldDepth, newDepth uint32) []AncestorCode {
	out := make([]AncestorCode, 0, len(chain)+len(codes))
	out = append(out, chain...)
	for _, c := range codes {
		if c.Depth >= oldDepth {
			c.Depth = c.Depth - oldDepth + newDepth
			out = append(out, c)
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// FileMode returns the inode's mode as an fs.FileMode, with fs.ModeDir set
// for directories.
func (ino Inode) FileMode() fs.FileMode {
	m := fs.FileMode(ino.Mode) & (fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky)
	if ino.Type == TypeDir {
		m |= fs.ModeDir
	}
	return m
}

// ModTime returns Mtime as a time.Time.
func (ino Inode) ModTime() time.Time { return time.Unix(0, ino.Mtime) }

// Entry is a directory entry, stored at the directory's home: the child's
// name, type and home node. The entry is the authority on whether a name
// exists in the directory.
type Entry struct {
	// Name is the child's name (one path component).
	Name string
	// Type is the child's type.
	Type FileType
	// Home is the id of the node that stores the child's inode.
	Home string
	// ID is the child's inode id (Inode.ID), so that a listing gives it
	// without a stat; 0 when unknown (an entry written before ids
	// existed, or whose inode got its id on another shard).
	ID uint64
}

// Intent is a small durable record of a multi-step operation in progress,
// resolved by the node on restart. The payload is opaque to the store.
type Intent struct {
	// ID identifies the intent; ListIntents returns intents sorted by ID.
	ID string
	// Created is the Unix time in nanoseconds at which the intent was added
	// to a batch.
	Created int64
	// Payload is the caller's description of the operation.
	Payload []byte
}

// Rekey describes a subtree rekey (RekeyPrefix) that has started and not yet
// finished; see ResumeRekey.
type Rekey struct {
	// Old and New are the subtree's root path before and after.
	Old, New string
	// Started is the Unix time in nanoseconds at which the rekey started.
	Started int64
	// Chain is the ancestor codes of New (its new parent's codes and the
	// parent's own code): every moved inode's codes from above the
	// subtree are replaced by Chain (see Inode.Ancestors).
	Chain []AncestorCode
}

// Recode describes a subtree recode (RecodeSubtreeAt) that has started
// and not yet finished; see ResumeRekey.
type Recode struct {
	// Root is the directory whose code changed.
	Root string
	// Code is Root's new code; nil when Root now grants search to
	// everyone.
	Code *AncestorCode
	// Cursor is the path of the last inode recoded ("" before the first
	// step).
	Cursor string
}

// InodeCounts is the number of inodes homed in the store, by type.
type InodeCounts struct {
	// Files counts the inodes that are not directories (TypeFile and
	// TypeSymlink and the special files), Dirs those of TypeDir.
	Files, Dirs int64
}

// Total returns Files + Dirs.
func (c InodeCounts) Total() int64 { return c.Files + c.Dirs }
