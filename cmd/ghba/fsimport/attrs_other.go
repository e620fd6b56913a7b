//go:build !linux

package fsimport

import "io/fs"

// sysAttrs keeps the defaults: owner and access time are read on Linux
// only.
func sysAttrs(fs.FileInfo, *attrs) {}
