package fsimport

import (
	"io/fs"
	"os"
	"strings"

	"github.com/ghba/ghba/rpc"
)

// attrs are what an import keeps of a source entry.
type attrs struct {
	typ          string
	mode         uint32 // permission bits with setuid, setgid and sticky
	uid, gid     uint32
	size         int64
	atime, mtime int64 // Unix nanoseconds
	target       string
	rdev         uint64      // a device's number (sysAttrs)
	text         string      // the start of a text file's content (Options.Content)
	xattrs       []rpc.Xattr // extended attributes, sorted (Options.Xattrs)
	// link is the source file's (device, inode number) when it is not a
	// directory and has several names (sysAttrs): the import makes its
	// names one inode. Zero for a file with one name.
	link fileKey
}

// fileKey identifies a source file: its device and inode number.
type fileKey struct{ dev, ino uint64 }

// importedXattr reports whether an import copies the extended attribute
// name: a "user." one. "trusted." and "security." ones describe the source
// machine (its SELinux labels, overlayfs's own) and need root to set; the
// kernel's "system." ones (POSIX ACLs) the cluster does not keep.
func importedXattr(name string) bool { return strings.HasPrefix(name, "user.") }

// attrsOf returns the attributes of a source entry from its lstat
// information; ok is false for a type the cluster has none of.
func attrsOf(info fs.FileInfo) (a attrs, ok bool) {
	m := info.Mode()
	if a.typ = rpc.TypeOfMode(m); a.typ == "" {
		return attrs{}, false
	}
	if a.typ == rpc.TypeFile {
		a.size = info.Size()
	}
	a.mode = uint32(m.Perm())
	if m&fs.ModeSetuid != 0 {
		a.mode |= 0o4000
	}
	if m&fs.ModeSetgid != 0 {
		a.mode |= 0o2000
	}
	if m&fs.ModeSticky != 0 {
		a.mode |= 0o1000
	}
	a.mtime = info.ModTime().UnixNano()
	a.atime = a.mtime
	a.uid, a.gid = selfUID(), selfGID()
	sysAttrs(info, &a)
	return a, true
}

// selfUID and selfGID are the ids of this process (0 where the system has
// none), the owner of what an import without Options.Owners creates.
func selfUID() uint32 { return uint32(max(0, os.Getuid())) }
func selfGID() uint32 { return uint32(max(0, os.Getgid())) }
