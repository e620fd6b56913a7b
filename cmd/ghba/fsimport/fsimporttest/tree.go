// Package fsimporttest describes a local tree as an import must
// reproduce it, for the tests of package fsimport and of "ghba import".
// It reads the tree with the standard library alone, independently of
// the importer under test.
package fsimporttest

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"syscall"

	"github.com/ghba/ghba/rpc"
)

// Entry is what an import keeps of one path; its JSON keys are those of
// rpc.Inode, so that "ghba stat --json" decodes into it.
type Entry struct {
	Type   string `json:"type"`
	Mode   uint32 `json:"mode"`
	Size   int64  `json:"size"`
	Mtime  int64  `json:"mtime"`
	Target string `json:"target,omitempty"`
	Rdev   uint64 `json:"rdev,omitempty"`
}

// FromInode is the Entry of an inode read back from the namespace.
func FromInode(in *rpc.Inode) Entry {
	return Entry{Type: in.Type, Mode: in.Mode, Size: in.Size, Mtime: in.Mtime, Target: in.Target, Rdev: in.Rdev}
}

// Tree walks root and returns every entry an import of it must create,
// keyed by its slash-separated path relative to root ("." for root):
// directories (size 0), regular files, symbolic links (size: the
// target's length) and special files (devices with their number), with
// mode bits including setuid, setgid and sticky.
func Tree(root string) (map[string]Entry, error) {
	out := map[string]Entry{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		m := info.Mode()
		e := Entry{Mode: uint32(m.Perm()), Mtime: info.ModTime().UnixNano()}
		for bit, v := range map[fs.FileMode]uint32{fs.ModeSetuid: 0o4000, fs.ModeSetgid: 0o2000, fs.ModeSticky: 0o1000} {
			if m&bit != 0 {
				e.Mode |= v
			}
		}
		switch {
		case m.IsDir():
			e.Type = rpc.TypeDir
		case m.IsRegular():
			e.Type, e.Size = rpc.TypeFile, info.Size()
		case m&fs.ModeSymlink != 0:
			if e.Target, err = os.Readlink(p); err != nil {
				return err
			}
			e.Type, e.Size = rpc.TypeSymlink, int64(len(e.Target))
		case m&fs.ModeNamedPipe != 0:
			e.Type = rpc.TypeFIFO
		case m&fs.ModeSocket != 0:
			e.Type = rpc.TypeSocket
		case m&fs.ModeDevice != 0:
			e.Type = rpc.TypeBlockDev
			if m&fs.ModeCharDevice != 0 {
				e.Type = rpc.TypeCharDev
			}
			if st, ok := info.Sys().(*syscall.Stat_t); ok {
				e.Rdev = uint64(st.Rdev)
			}
		default:
			return nil
		}
		out[filepath.ToSlash(rel)] = e
		return nil
	})
	return out, err
}

// Compare returns the differences between the tree want and the tree got,
// sorted (nil when they are equal).
func Compare(want, got map[string]Entry) []string {
	var diffs []string
	for p, w := range want {
		if g, ok := got[p]; !ok {
			diffs = append(diffs, fmt.Sprintf("%q missing", p))
		} else if g != w {
			diffs = append(diffs, fmt.Sprintf("%q: got %+v, want %+v", p, g, w))
		}
	}
	for p := range got {
		if _, ok := want[p]; !ok {
			diffs = append(diffs, fmt.Sprintf("%q should not exist", p))
		}
	}
	sort.Strings(diffs)
	return diffs
}
