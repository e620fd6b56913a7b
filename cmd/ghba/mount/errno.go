package mount

import (
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"syscall"

	"github.com/ghba/ghba/node/contents"
	"github.com/ghba/ghba/node/store"
	"github.com/ghba/ghba/rpc"
)

// Limits of names and full paths: NAME_MAX, as Linux's own file systems
// have it, and the cluster's limit on a full path (store.MaxPathLen,
// 32 KiB; Linux limits only the path one call names, PATH_MAX).
const (
	maxNameLen = 255
	maxPathLen = store.MaxPathLen
)

// toErrno returns the errno the kernel's own file systems give for err.
// What is not a file system answer (a cluster that stayed unavailable
// after the retries, a broken object store, a protocol error) is EIO, with
// the reason in the mount's log: never ENOENT, which would make programs
// believe a file is gone.
func toErrno(log *slog.Logger, op, p string, err error) syscall.Errno {
	switch {
	case err == nil:
		return 0
	case errors.Is(err, fs.ErrNotExist):
		return syscall.ENOENT
	case errors.Is(err, fs.ErrExist):
		return syscall.EEXIST
	case errors.Is(err, rpc.ErrNotDir):
		return syscall.ENOTDIR
	case errors.Is(err, rpc.ErrIsDir):
		return syscall.EISDIR
	case errors.Is(err, rpc.ErrNotEmpty):
		return syscall.ENOTEMPTY
	case errors.Is(err, fs.ErrPermission):
		return syscall.EACCES
	case errors.Is(err, rpc.ErrUnauthenticated):
		log.Error("the cluster refused the mount's credential", "op", op, "path", p, "err", err)
		return syscall.EACCES
	case errors.Is(err, rpc.ErrNoAttr):
		return syscall.ENODATA
	case errors.Is(err, rpc.ErrNoSpace):
		return syscall.ENOSPC
	case errors.Is(err, rpc.ErrNameTooLong):
		return syscall.ENAMETOOLONG
	case errors.Is(err, errors.ErrUnsupported): // not every member speaks the format it needs yet
		return syscall.EOPNOTSUPP
	case errors.Is(err, fs.ErrInvalid): // ErrInvalidPath matches it too
		return syscall.EINVAL
	case errors.Is(err, context.Canceled):
		return syscall.EINTR
	case errors.Is(err, contents.ErrNotFound):
		log.Error("an object of the file is missing from the data store", "op", op, "path", p, "err", err)
		return syscall.EIO
	}
	log.Error("i/o error", "op", op, "path", p, "err", err)
	return syscall.EIO
}

// checkName refuses names the cluster would refuse, with the errno Linux
// gives.
func checkName(name string) syscall.Errno {
	if len(name) > maxNameLen {
		return syscall.ENAMETOOLONG
	}
	return 0
}

// checkPath refuses a full path the cluster cannot key (HBA keys metadata
// by full path), with ENAMETOOLONG. Local file systems have no limit on a
// full path, only on the path one call names; this is a known limitation
// of the mount.
func checkPath(p string) syscall.Errno {
	if len(p) > maxPathLen {
		return syscall.ENAMETOOLONG
	}
	return 0
}
