package mount

import (
	"strings"
	"sync"
	"time"

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

// The cluster revokes the leases of every client that holds a path it
// changes, the writer's own among them. The kernel already has the names
// this mount changed (it asked for the change and updated its dentries
// from the answer), so for a path this mount changed within
// ownChangeWindow the kernel is told to drop the inode's attributes and
// pages but not the name: dropping the dentry of a directory the kernel
// still used (a working directory, the parent of an open file) made it
// look the directory up again, go-fuse's tree then no longer followed a
// later rename of it, and a file open below committed to its old path
// (found by the differential test). Another mount's rename or removal of
// such a name within the window is seen after EntryTimeout at the latest;
// its changes of the inode (close-to-open) at once.
const ownChangeWindow = 3 * time.Second

// ownChanges records when this mount last changed each path.
type ownChanges struct {
	mu sync.Mutex
	at map[string]time.Time
	// pruneAt is the size at which note next drops the paths older than
	// the window: twice what the last pruning left, at least
	// minOwnPrune, so that a note costs O(1) on average however many
	// paths the window holds (pruning on every note above a fixed size
	// took a fifth of the mount's CPU under 16 creating processes).
	pruneAt int
}

// minOwnPrune is the fewest paths ownChanges prunes.
const minOwnPrune = 1024

// note records that this mount is changing paths now (before it asks the
// cluster: a revocation comes before the answer).
func (o *ownChanges) note(paths ...string) {
	now := time.Now()
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.at == nil {
		o.at = make(map[string]time.Time)
	}
	if len(o.at) >= max(o.pruneAt, minOwnPrune) {
		for p, t := range o.at {
			if now.Sub(t) > ownChangeWindow {
				delete(o.at, p)
			}
		}
		o.pruneAt = 2 * len(o.at)
	}
	for _, p := range paths {
		o.at[p] = now
	}
}

// recent reports whether this mount changed p within ownChangeWindow.
func (o *ownChanges) recent(p string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	t, ok := o.at[p]
	return ok && time.Since(t) <= ownChangeWindow
}

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
	if !f.own.recent(p) { // the kernel has this mount's own names
		parent.NotifyEntry(name)
	}
}
