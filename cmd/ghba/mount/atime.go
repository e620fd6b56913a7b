package mount

import (
	"context"
	"fmt"
	"time"

	"github.com/ghba/ghba/rpc"
)

// Access times (docs/mount.md, "Access times"). The kernel leaves a FUSE
// inode's atime to the file system (it marks FUSE inodes S_NOATIME), so
// the mount records reads itself, under the policy Options.Atime names.

// Atime policies (Options.Atime; mount --atime).
const (
	// AtimeRelative updates a file's atime when it is read, and a
	// directory's when it is listed, if the atime is not later than the
	// mtime or the ctime, or is a day old: Linux's relatime, the default
	// of its mounts. So a file read after every change costs one write
	// per change, not one per read.
	AtimeRelative = "relatime"
	// AtimeNever never updates atimes on reads (noatime); an explicit
	// touch -a or utimensat still sets them.
	AtimeNever = "noatime"
)

// CheckAtime returns an error for a policy that is not one of the above.
func CheckAtime(policy string) error {
	switch policy {
	case AtimeRelative, AtimeNever:
		return nil
	}
	return fmt.Errorf("atime policy %q: want %s or %s", policy, AtimeRelative, AtimeNever)
}

// relatimeAge is how old an atime may get before a read updates it anyway.
const relatimeAge = 24 * time.Hour

// needsAtime reports whether a read at now updates in's atime under
// relatime (Linux, fs/inode.c relatime_need_update).
func needsAtime(in *rpc.Inode, now time.Time) bool {
	return in.Mtime >= in.Atime || in.Ctime >= in.Atime || now.Sub(time.Unix(0, in.Atime)) >= relatimeAge
}

// accessed records a read of n (a file's contents, or a directory's
// listing) under the mount's atime policy. It fails nothing: an atime
// that could not be recorded is logged.
func (f *FS) accessed(ctx context.Context, n *node) {
	if f.opts.Atime == AtimeNever || n.gone.Load() {
		return
	}
	p := n.path()
	st, err := f.stat(ctx, p) // mostly from the client's cache, under its lease
	id := n.knownID()
	if err != nil || (id != 0 && st.ID != id) { // gone, or another inode's name now
		return
	}
	now := time.Now()
	if !needsAtime(&st.Inode, now) {
		return
	}
	ns := now.UnixNano()
	f.own.note(p) // the kernel keeps the name; the revocation drops its attributes
	err = f.retry(ctx, func(ctx context.Context) error {
		_, err := f.c.SetAttr(ctx, &rpc.SetAttrRequest{Path: p, Atime: &ns, Accessed: true, IfID: id})
		return err
	})
	if err != nil {
		f.log.Debug("recording an access time", "path", p, "err", err)
		return
	}
	// The kernel's copy of the attributes is stale now: without this a
	// stat right after the read could show the old atime until the
	// revocation of this mount's lease has reached the kernel.
	n.NotifyContent(-1, 0)
}
