package mount

import (
	"strings"

	"github.com/ghba/ghba/rpc"
)

// Kernel cache invalidation by the cluster's leases (docs/design.md,
// "Mount"). The client's metadata cache holds what this mount looked up
// under leases; before another client changes a path, its home revokes the
// lease, and the client drops the entry and passes the revocation on
// (client.Options.OnInvalidate). The mount then tells the kernel to forget
// the name (its dentry, or the negative dentry of a name that did not
// exist) and the inode's attributes and cached pages, so another mount's
// change is seen as soon as it is made, not after EntryTimeout and
// AttrTimeout.

// invalidations is the queue between the client's connection readers,
// which must not block, and the goroutine that tells the kernel.
const invalidationQueue = 4096

// onInvalidate queues inv (the client's OnInvalidate hook). A full queue
// drops it: the kernel's timeouts still bound what it keeps.
func (f *FS) onInvalidate(inv *rpc.Invalidation) {
	select {
	case f.invalidations <- inv:
	default:
		f.dropped.Add(1)
	}
}

// watchInvalidations tells the kernel what the queue names, until Unmount.
func (f *FS) watchInvalidations() {
	f.tasks.Add(1)
	go func() {
		defer f.tasks.Done()
		for {
			select {
			case <-f.ctx.Done():
				return
			case inv := <-f.invalidations:
				for _, p := range inv.Paths {
					f.forget(p)
				}
				for _, p := range inv.Prefixes {
					f.forget(p)
				}
			}
		}
	}()
}

// forget tells the kernel to drop p's name and its inode's attributes and
// pages, if the mount knows them.
func (f *FS) forget(p string) {
	if p == "/" || !strings.HasPrefix(p, "/") {
		if p == "/" {
			f.root.NotifyContent(0, 0)
		}
		return
	}
	parent := f.root.EmbeddedInode()
	names := strings.Split(p[1:], "/")
	for _, name := range names[:len(names)-1] {
		if parent = parent.GetChild(name); parent == nil {
			return // nothing below is known to the kernel
		}
	}
	name := names[len(names)-1]
	if ch := parent.GetChild(name); ch != nil {
		ch.NotifyContent(0, 0)
	}
	parent.NotifyEntry(name)
}
