package store

import (
	"fmt"
	"io/fs"
	"time"
)

// FileType is the type of an inode or directory entry.
type FileType uint8

// File types. The zero value is invalid so that an unset type is caught.
const (
	TypeFile FileType = 1
	TypeDir  FileType = 2
)

// String returns "file", "dir" or "type(N)".
func (t FileType) String() string {
	switch t {
	case TypeFile:
		return "file"
	case TypeDir:
		return "dir"
	}
	return fmt.Sprintf("type(%d)", uint8(t))
}

// Valid reports whether t is a known file type.
func (t FileType) Valid() bool { return t == TypeFile || t == TypeDir }

// Inode is the metadata of one file or directory, stored at its home node
// under its normalized full path.
type Inode struct {
	// Type is TypeFile or TypeDir.
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
	// Version is maintained by the caller and can be checked by
	// Batch.RequireInodeVersion for optimistic concurrency.
	Version uint64
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
}

// InodeCounts is the number of inodes homed in the store, by type.
type InodeCounts struct {
	// Files and Dirs count inodes of TypeFile and TypeDir.
	Files, Dirs int64
}

// Total returns Files + Dirs.
func (c InodeCounts) Total() int64 { return c.Files + c.Dirs }
