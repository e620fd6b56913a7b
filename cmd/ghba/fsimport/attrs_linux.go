package fsimport

import (
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/ghba/ghba/rpc"
)

// sysAttrs fills the owner, the access time, a device's number and, for
// a file with several names (hard links), its device and inode number
// from the system's stat data.
func sysAttrs(info fs.FileInfo, a *attrs) {
	if st, ok := info.Sys().(*syscall.Stat_t); ok {
		a.uid, a.gid = st.Uid, st.Gid
		a.atime = st.Atim.Nano()
		if a.typ == rpc.TypeCharDev || a.typ == rpc.TypeBlockDev {
			a.rdev = st.Rdev
		}
		if st.Nlink > 1 && a.typ != rpc.TypeDir {
			a.link = fileKey{dev: uint64(st.Dev), ino: uint64(st.Ino)}
		}
	}
}

// readXattrs returns the extended attributes of source entry p (not
// followed if a link) that an import copies (importedXattr). A file system
// without them has none.
func readXattrs(p string) ([]rpc.Xattr, error) {
	names, err := listXattrs(p)
	if err != nil {
		return nil, fmt.Errorf("listing its extended attributes: %w", err)
	}
	var out []rpc.Xattr
	for _, name := range names {
		if !importedXattr(name) {
			continue
		}
		v, err := getXattr(p, name)
		if errors.Is(err, unix.ENODATA) {
			continue // removed since the listing
		}
		if err != nil {
			return nil, fmt.Errorf("reading its extended attribute %s: %w", name, err)
		}
		out = append(out, rpc.Xattr{Name: name, Value: v})
	}
	slices.SortFunc(out, func(a, b rpc.Xattr) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// listXattrs returns the names of p's extended attributes.
func listXattrs(p string) ([]string, error) {
	for range 5 { // the list may grow between the size query and the read
		n, err := unix.Llistxattr(p, nil)
		if errors.Is(err, unix.ENOTSUP) || n == 0 {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		buf := make([]byte, n)
		n, err = unix.Llistxattr(p, buf)
		if errors.Is(err, unix.ERANGE) {
			continue
		}
		if err != nil {
			return nil, err
		}
		return strings.Split(strings.TrimSuffix(string(buf[:n]), "\x00"), "\x00"), nil
	}
	return nil, unix.ERANGE
}

// getXattr returns the value of p's extended attribute name.
func getXattr(p, name string) ([]byte, error) {
	for range 5 { // the value may grow between the size query and the read
		n, err := unix.Lgetxattr(p, name, nil)
		if err != nil {
			return nil, err
		}
		buf := make([]byte, n)
		n, err = unix.Lgetxattr(p, name, buf)
		if errors.Is(err, unix.ERANGE) {
			continue
		}
		if err != nil {
			return nil, err
		}
		return buf[:n], nil
	}
	return nil, unix.ERANGE
}
