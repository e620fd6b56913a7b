package mount

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/ghba/ghba/node/contents"
	"github.com/ghba/ghba/rpc"
	"github.com/ghba/ghba/rpc/client"
)

// Options configure a mount.
type Options struct {
	// Client configures the mount's client of the cluster. Mount turns its
	// metadata cache on (DefaultCache, unless Client.Cache is set): the
	// cache's leases drive the kernel's cache invalidation (notify.go).
	Client client.Options
	// Data holds the file contents (the cluster's data store). Unmount
	// closes it.
	Data *contents.Store
	// Logger receives the mount's log (EIO reasons among them).
	Logger *slog.Logger

	// EntryTimeout, AttrTimeout and NegativeTimeout are how long the
	// kernel may use a name, an inode's attributes and the absence of a
	// name without asking (defaults 1s each). This mount's own changes are
	// always seen at once; another mount's changes are seen when a lease
	// this mount's client holds is revoked, and at the latest after these.
	EntryTimeout, AttrTimeout, NegativeTimeout time.Duration
	// AllowOther lets users other than the one who mounted use the mount.
	AllowOther bool
	// DefaultPermissions makes the kernel check permissions against the
	// inodes' mode bits, owners and groups (mount option
	// default_permissions). Without it only the cluster checks (with ACLs
	// on: as the token's user).
	DefaultPermissions bool
	// ActAsCaller sets the owner of new inodes to the calling process's
	// uid and gid. It is right when the cluster has ACLs off, or when the
	// token has the management role (a trusted client, like NFS with
	// AUTH_SYS); otherwise the cluster makes the token's user the owner.
	ActAsCaller bool
	// RetryTimeout bounds how long an operation retries while the cluster
	// answers "unavailable" (a fail-over; default 20s) before it fails with
	// EIO.
	RetryTimeout time.Duration
	// FileOptions configure the open files' contents (node/contents);
	// Budget and Cache are shared by every open file.
	FileOptions contents.FileOptions
	// FSName is shown as the mount's source in /proc/mounts (default
	// "ghba").
	FSName string
	// Debug logs every FUSE request (go-fuse's debug output).
	Debug bool
	// Xattrs serves extended attributes (xattr.go). Without it the
	// kernel is told they are not supported (ENOSYS) and asks no more:
	// with them, it reads security.capability before every write, a
	// round trip to the mount's process (go-fuse answers it) that doubles
	// the cost of 4 KiB writes.
	Xattrs bool
	// Atime is the policy for access times (atime.go): AtimeRelative
	// (the default) or AtimeNever.
	Atime string
}

func (o *Options) withDefaults() Options {
	r := *o
	if r.Logger == nil {
		r.Logger = slog.New(slog.DiscardHandler)
	}
	for _, d := range []*time.Duration{&r.EntryTimeout, &r.AttrTimeout, &r.NegativeTimeout} {
		if *d == 0 {
			*d = time.Second
		}
	}
	if r.RetryTimeout <= 0 {
		r.RetryTimeout = 20 * time.Second
	}
	if r.FileOptions.Budget == nil {
		r.FileOptions.Budget = contents.NewBudget(contents.DefaultDirtyBytes)
	}
	if r.FileOptions.Cache == nil {
		r.FileOptions.Cache = contents.NewBlockCache(contents.DefaultCacheBytes)
	}
	if r.FSName == "" {
		r.FSName = "ghba"
	}
	if r.Atime == "" {
		r.Atime = AtimeRelative
	}
	return r
}

// FS is a mounted ghba namespace: the state its inodes share.
type FS struct {
	opts   Options
	c      *client.Client
	data   *contents.Store
	log    *slog.Logger
	root   *node
	server *fuse.Server

	mu   sync.Mutex
	open map[uint64]*openFile // by inode id, while any handle is open
	// seen is, per inode id, the version whose contents the kernel's page
	// cache may hold (file.go): an open that finds the same version keeps
	// the kernel's cache.
	seen map[uint64]uint64

	// invalidations queues the leases the cluster revoked (notify.go);
	// dropped counts those a full queue dropped.
	invalidations chan *rpc.Invalidation
	dropped       atomic.Uint64
	// own holds the paths this mount changed lately, whose revocations
	// the kernel must not hear (notify.go).
	own ownChanges
	// holdKick wakes the loop that holds open files' contents (holds.go).
	holdKick chan struct{}
	// kept is, per inode number, the node go-fuse keeps for it: go-fuse
	// keeps the first node made for a number and drops those that later
	// lookups make (another name of a file with several), so what such a
	// lookup learns is remembered by the kept one (newChild).
	kept sync.Map // uint64 → *node

	ctx    context.Context // ends at Unmount: background work stops
	cancel context.CancelFunc
	tasks  sync.WaitGroup
}

// DefaultCache is the metadata cache of a mount's client: large enough
// for the working set of a build, and a listing's entries fetched with it
// (the kernel's readdirplus looks each of them up).
func DefaultCache() *client.CacheOptions {
	return &client.CacheOptions{Entries: 100_000, ListPrefetch: 256}
}

// ErrNotEmptyDir is returned by Mount for a mount point that is not an
// empty directory.
var ErrNotEmptyDir = errors.New("mount point is not an empty directory")

// Mount mounts the cluster on dir and serves it until Unmount (or an
// unmount from outside: fusermount3 -u, umount). It returns once the
// kernel has the mount.
func Mount(dir string, o Options) (*FS, error) {
	if o.Data == nil {
		return nil, errors.New("mount: a data store is required")
	}
	if err := checkMountPoint(dir); err != nil {
		return nil, err
	}
	opts := o.withDefaults()
	if err := CheckAtime(opts.Atime); err != nil {
		return nil, fmt.Errorf("mount: %w", err)
	}
	f := &FS{
		opts: opts, data: opts.Data, log: opts.Logger,
		open: make(map[uint64]*openFile), seen: make(map[uint64]uint64),
		invalidations: make(chan *rpc.Invalidation, invalidationQueue),
	}
	f.ctx, f.cancel = context.WithCancel(context.Background())
	co := opts.Client
	if co.Cache == nil {
		co.Cache = DefaultCache()
	}
	next := co.OnInvalidate
	co.OnInvalidate = func(inv *rpc.Invalidation) {
		f.onInvalidate(inv)
		if next != nil {
			next(inv)
		}
	}
	f.c = client.New(co)
	f.root = &node{fs: f}
	fsOpts := &fs.Options{
		EntryTimeout:    &opts.EntryTimeout,
		AttrTimeout:     &opts.AttrTimeout,
		NegativeTimeout: &opts.NegativeTimeout,
		RootStableAttr:  &fs.StableAttr{Ino: rootIno},
		NullPermissions: true, // a mode of 0 is kept, not shown as 0644
		MountOptions: fuse.MountOptions{
			FsName:        opts.FSName,
			Name:          "ghba",
			AllowOther:    opts.AllowOther,
			MaxWrite:      1 << 20,
			MaxReadAhead:  1 << 20,
			Debug:         opts.Debug,
			DisableXAttrs: !opts.Xattrs,
			// The kernel reads security.capability before every write, and
			// the POSIX ACL names on lookups: go-fuse answers those with
			// ENODATA without asking the cluster (xattr.go refuses to set
			// them, so the answer is true).
			IgnoreSecurityLabels: true,
			// Linux's own file systems refuse longer names; FUSE's limit
			// is 1,024.
			Options: mountOptions(opts),
		},
		// go-fuse's diagnostics (an orphaned inode's path, which a removed but
		// open inode has) are for debugging.
		Logger: slog.NewLogLogger(opts.Logger.Handler(), slog.LevelDebug),
	}
	fsOpts.MountOptions.Logger = slog.NewLogLogger(opts.Logger.Handler(), slog.LevelDebug)
	server, err := fs.Mount(dir, f.root, fsOpts)
	if err != nil {
		f.cancel()
		f.c.Close()
		return nil, fmt.Errorf("mount %s: %w", dir, err)
	}
	f.server = server
	f.watchInvalidations()
	f.watchHolds()
	return f, nil
}

// mountOptions are the kernel mount options beyond go-fuse's.
func mountOptions(o Options) []string {
	var out []string
	if o.DefaultPermissions {
		out = append(out, "default_permissions")
	}
	return out
}

// checkMountPoint accepts an existing empty directory.
func checkMountPoint(dir string) error {
	st, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("mount point %s: %w", dir, err)
	}
	if !st.IsDir() {
		return fmt.Errorf("%s: %w", dir, ErrNotEmptyDir)
	}
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("mount point %s: %w", dir, err)
	}
	defer d.Close()
	if names, _ := d.Readdirnames(1); len(names) > 0 {
		return fmt.Errorf("%s: %w", dir, ErrNotEmptyDir)
	}
	return nil
}

// Wait blocks until the file system is unmounted.
func (f *FS) Wait() { f.server.Wait() }

// Unmount flushes every open file (so that nothing written is lost),
// unmounts, and closes the client and the data store.
func (f *FS) Unmount(ctx context.Context) error {
	f.flushAll(ctx)
	err := f.server.Unmount()
	f.finish()
	return err
}

// Close ends a mount that was unmounted from outside (Wait returned: an
// umount or fusermount3 -u): it flushes what is left and stops the
// background work. Unlike Unmount it leaves the mount point alone, which
// may hold another mount by now (go-fuse's Unmount would unmount that one).
func (f *FS) Close(ctx context.Context) {
	f.flushAll(ctx)
	f.finish()
}

// finish stops the background work and releases the FS's resources.
func (f *FS) finish() {
	f.cancel()
	f.tasks.Wait()
	f.closeAll()
	f.c.Close()
	f.data.Close()
}

// flushAll commits every open file that has unwritten changes.
func (f *FS) flushAll(ctx context.Context) {
	f.mu.Lock()
	files := make([]*openFile, 0, len(f.open))
	for _, of := range f.open {
		files = append(files, of)
	}
	f.mu.Unlock()
	for _, of := range files {
		if err := f.commit(ctx, of); err != nil {
			f.log.Error("flushing an open file at unmount", "path", of.path(), "err", err)
		}
	}
}

// closeAll releases the open files' memory.
func (f *FS) closeAll() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for id, of := range f.open {
		of.f.Close()
		delete(f.open, id)
	}
}

// retry runs op until it succeeds, fails with an answer, or the cluster
// stays unavailable for longer than RetryTimeout. Only failures that left
// the operation undone are retried (client: ErrUnavailable without
// ErrOutcomeUnknown); the caller decides what an unknown outcome means.
func (f *FS) retry(ctx context.Context, op func(ctx context.Context) error) error {
	return retryUnavailable(ctx, f.opts.RetryTimeout, op)
}
