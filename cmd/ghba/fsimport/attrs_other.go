//go:build !linux

package fsimport

import (
	"io/fs"

	"github.com/ghba/ghba/rpc"
)

// sysAttrs keeps the defaults: owner and access time are read, and hard
// links recognised (attrs.link), on Linux only; elsewhere every name is
// imported as a file of its own.
func sysAttrs(fs.FileInfo, *attrs) {}

// readXattrs reads none: extended attributes are imported on Linux only.
func readXattrs(string) ([]rpc.Xattr, error) { return nil, nil }
