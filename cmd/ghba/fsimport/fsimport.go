// Package fsimport imports a local directory tree into a ghba namespace
// and keeps the copy in sync (the application modules paper's indexing of
// shared folders; "ghba import").
//
// An import makes the destination directory mirror the source: every
// directory, regular file, symbolic link and special file (FIFO, socket,
// device with its number) with its mode, owner, size and modification time
// (the access time is set when an entry is created and not compared after,
// since reading the source changes it). Entries of the destination that
// the source does not have are deleted. A special file that the cluster
// cannot keep yet (not every node speaks shard log format 3) is skipped
// and counted.
//
// A file with several names in the source (hard links; recognised on
// Linux by its device and inode number) is one inode in the destination:
// the first of its names the walk meets is created or updated as any
// entry, and each other name becomes a link to it (client.Client.Link)
// once that first name is made (hardLinks). A cluster that cannot link
// yet gets a file of its own for each name, counted.
//
// The import compares before it writes, so it is resumable and
// incremental: run again after an interruption or after the source
// changed, it applies only the differences and converges to the same
// namespace. Each directory is compared with one listing and one batched
// stat of the entries both sides have.
package fsimport

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"unicode/utf8"

	"github.com/ghba/ghba/rpc"
	"github.com/ghba/ghba/rpc/client"
)

// Options configure an import.
type Options struct {
	// Source is the local directory imported.
	Source string
	// Dest is the namespace directory that mirrors it (absolute, not "/").
	Dest string
	// Workers bounds the operations in progress: directory scans,
	// listings, updates, and directories waiting for their new entries
	// to be created, which go to the cluster together, a few requests at
	// a time (0: DefaultWorkers, or DefaultContentWorkers with Content).
	Workers int
	// Owners keeps the source's uid and gid and compares them on later
	// runs (with ACLs on this needs a root token). Without it, new entries
	// get the importing process's ids and owners are not compared.
	Owners bool
	// DryRun compares and reports the changes without making them.
	DryRun bool
	// Xattrs copies the "user." extended attributes and compares them on
	// later runs (on Linux; importedXattr).
	Xattrs bool
	// Content, when positive, indexes the first Content bytes (at most
	// rpc.MaxTextLen) of every text file for search by text: files whose
	// start is valid UTF-8 text, as content sniffing
	// (http.DetectContentType) says, whatever their name. A file's text
	// is read when it is created, when its size or mtime changed, and
	// when it has none yet. Without it, texts already indexed are kept.
	Content int
	// OnChange, when set, is called for every change made (or, with
	// DryRun, due), one call at a time.
	OnChange func(Change)
	// OnError, when set, is called for every entry that could not be
	// imported, one call at a time.
	OnError func(path string, err error)
	// OnNotice, when set, is called with notes about the import as a
	// whole (each at most once per run, one call at a time), such as a
	// cluster that cannot keep hard links; nil: they go to the default
	// slog logger as warnings.
	OnNotice func(msg string)
}

// Change kinds.
const (
	Create = "create"
	Update = "update"
	Delete = "delete"
)

// Change is one difference between the source and the destination.
type Change struct {
	// Kind is Create, Update or Delete.
	Kind string `json:"kind"`
	// Path is the destination path.
	Path string `json:"path"`
	// Type is rpc.TypeFile, rpc.TypeDir or rpc.TypeSymlink.
	Type string `json:"type"`
	// Fields lists what an Update changes (mode, owner, size, mtime,
	// text, xattrs), or "type"/"target" when the entry is replaced;
	// "link" marks a name made (Create) or replaced (Update) as another
	// name of a file imported under another name, or a name given an
	// inode of its own because its destination inode was another source
	// file's.
	Fields []string `json:"fields,omitempty"`
}

// Summary counts what an import did (or, with DryRun, would do).
type Summary struct {
	// Created, Updated and Deleted count destination paths changed; a
	// deleted directory counts each path below it too.
	Created int64 `json:"created"`
	Updated int64 `json:"updated"`
	Deleted int64 `json:"deleted"`
	// Skipped counts special files (devices, sockets, FIFOs) the cluster
	// could not keep yet (errors.ErrUnsupported).
	Skipped int64 `json:"skipped"`
	// Errors counts entries that could not be read or imported.
	Errors int64 `json:"errors"`
	// Unchanged counts entries that already matched.
	Unchanged int64 `json:"unchanged"`
	// Links counts the names made as another name of a source file with
	// several names (hard links), among the Created and Updated ones.
	Links int64 `json:"links"`
	// LinksAsCopies counts the names of such files that the destination
	// holds as files of their own because the cluster cannot link yet
	// (errors.ErrUnsupported: not every node supports hard links).
	LinksAsCopies int64 `json:"links_as_copies"`
}

// Entries returns the source entries visited so far.
func (s Summary) Entries() int64 { return s.Created + s.Updated + s.Skipped + s.Errors + s.Unchanged }

// ErrBadDest is returned for a destination an import must not mirror into.
var ErrBadDest = errors.New("fsimport: bad destination")

// DefaultWorkers is the default of Options.Workers. An import waits mostly
// for the shards' log writes, and the more directories wait for their
// creates at once, the larger the requests that carry them and the less
// CPU an entry costs (with a request per directory, /usr went at 14,000
// entries/s with 64 workers and a median 18,300 with 256 on a 2-core
// machine with 3 agents).
const DefaultWorkers = 512

// DefaultContentWorkers is the default of Options.Workers with Content:
// a batch then carries up to 256 texts that every replica indexes, so a
// few requests in flight already keep the nodes busy and more only wait
// in their queues (100,000 text files on the same machine: 3,900
// entries/s with 32 or 64 in flight, none failed; with 256, batches ran
// past the RPC timeout and entries failed).
const DefaultContentWorkers = 32

// DefaultContentBytes is the text read from each file for the full-text
// index by default (Options.Content): the paper's "some of each text
// file's content".
const DefaultContentBytes = 4 << 10

// statBatch is the number of paths in one batched stat, createBatch the
// number of entries in one batched create.
const (
	statBatch   = 1000
	createBatch = 256
)

// The batched creates of many directories go together (batcher):
// batchesInFlight requests at a time, each with at most
// rpc.MaxBatchCreate entries and maxBatchText bytes of texts. With 3
// agents on 2 cores, /usr went at 22,300-25,400 entries/s with 2 or 4 in
// flight and 21,800-23,300 with 16, against 16,900-23,900 with a request
// per directory.
const (
	batchesInFlight = 4
	maxBatchText    = 1 << 20
)

// Importer runs one import.
type Importer struct {
	c *client.Client
	o Options

	created, updated, deleted, skipped, errs, unchanged atomic.Int64
	links, linksAsCopies                                atomic.Int64

	report  sync.Mutex // serializes OnChange, OnError and OnNotice
	q       queue
	batches batcher

	// dirsMu guards dirs: the destination directories whose entries the
	// import changed, whose times restoreDirTimes sets back to the
	// source's (the cluster set them to the time of each change).
	dirsMu sync.Mutex
	dirs   map[string]struct{}

	hl hardLinks
}

// New returns an importer of o.Source into o.Dest through c.
func New(c *client.Client, o Options) (*Importer, error) {
	if o.Workers <= 0 && o.Content > 0 {
		o.Workers = DefaultContentWorkers
	} else if o.Workers <= 0 {
		o.Workers = DefaultWorkers
	}
	if o.Content > rpc.MaxTextLen {
		return nil, fmt.Errorf("fsimport: content of %d bytes (limit %d)", o.Content, rpc.MaxTextLen)
	}
	d := path.Clean(o.Dest)
	if !path.IsAbs(o.Dest) || d == "/" {
		return nil, fmt.Errorf("%w: %q: want an absolute path other than / (the destination mirrors the source: what the source lacks is deleted)", ErrBadDest, o.Dest)
	}
	o.Dest = d
	im := &Importer{c: c, o: o}
	im.batches = batcher{c: c, limit: batchesInFlight, maxEntries: rpc.MaxBatchCreate, maxText: maxBatchText}
	return im, nil
}

// Progress returns the counts so far; safe to call while Run runs.
func (im *Importer) Progress() Summary {
	return Summary{
		Created: im.created.Load(), Updated: im.updated.Load(), Deleted: im.deleted.Load(),
		Skipped: im.skipped.Load(), Errors: im.errs.Load(), Unchanged: im.unchanged.Load(),
		Links: im.links.Load(), LinksAsCopies: im.linksAsCopies.Load(),
	}
}

// Run imports the tree. It returns the summary and, when ctx ended first,
// ctx's error; entries that failed are counted in Summary.Errors (and
// reported to OnError), not returned.
func (im *Importer) Run(ctx context.Context) (Summary, error) {
	info, err := os.Lstat(im.o.Source)
	if err != nil {
		return Summary{}, err
	}
	if !info.IsDir() {
		return Summary{}, fmt.Errorf("%s: %w: the source must be a directory", im.o.Source, rpc.ErrNotDir)
	}
	cur, err := im.c.Stat(ctx, im.o.Dest)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		cur = nil
		if parent := path.Dir(im.o.Dest); parent != "/" && !im.o.DryRun {
			if _, err := im.c.Mkdir(ctx, &rpc.MkdirRequest{Path: parent, Mode: 0o755, UID: selfUID(), GID: selfGID(), Parents: true}); err != nil {
				return Summary{}, fmt.Errorf("mkdir %s: %w", parent, err)
			}
		}
	case err != nil:
		return Summary{}, fmt.Errorf("stat %s: %w", im.o.Dest, err)
	case cur.Type != rpc.TypeDir:
		return Summary{}, fmt.Errorf("%w: %s is a %s, not a directory", ErrBadDest, im.o.Dest, cur.Type)
	}
	im.q.init()
	im.q.push(func(ctx context.Context) { im.sync(ctx, im.o.Source, im.o.Dest, info, cur) })
	var wg sync.WaitGroup
	for range im.o.Workers {
		wg.Go(func() { im.q.work(ctx) })
	}
	stop := context.AfterFunc(ctx, im.q.cancel)
	wg.Wait()
	stop()
	if ctx.Err() == nil {
		im.restoreDirTimes(ctx)
	}
	return im.Progress(), ctx.Err()
}

// entriesChanged notes that the import changed the entries of
// destination directory dir (not the destination's own parent).
func (im *Importer) entriesChanged(dir string) {
	if im.o.DryRun || (dir != im.o.Dest && !strings.HasPrefix(dir, im.o.Dest+"/")) {
		return
	}
	im.dirsMu.Lock()
	defer im.dirsMu.Unlock()
	if im.dirs == nil {
		im.dirs = make(map[string]struct{})
	}
	im.dirs[dir] = struct{}{}
}

// restoreDirTimes sets the times of the directories whose entries the
// import changed back to their source's (a directory's times follow its
// entries: docs/design.md, "Directory times"), Workers at a time. A
// directory removed since is skipped; other failures are counted as
// errors.
func (im *Importer) restoreDirTimes(ctx context.Context) {
	im.dirsMu.Lock()
	dirs := sortedKeys(im.dirs)
	im.dirs = nil
	im.dirsMu.Unlock()
	sem := make(chan struct{}, im.o.Workers)
	var wg sync.WaitGroup
	for _, dst := range dirs {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			src := filepath.Join(im.o.Source, filepath.FromSlash(strings.TrimPrefix(dst, im.o.Dest)))
			info, err := os.Lstat(src)
			if errors.Is(err, fs.ErrNotExist) {
				return
			}
			want, ok, err := im.wanted(src, info)
			if err != nil || !ok || want.typ != rpc.TypeDir {
				return // changed since: the next import compares it
			}
			_, err = im.c.SetAttr(ctx, &rpc.SetAttrRequest{Path: dst, Atime: &want.atime, Mtime: &want.mtime})
			if err != nil && !errors.Is(err, fs.ErrNotExist) {
				im.fail(dst, fmt.Errorf("restoring its times: %w", err))
			}
		})
	}
	wg.Wait()
}

// scan compares directory src with dst and queues an operation for each
// entry of either. fresh says dst was just created (or, in a dry run,
// would be), so it has no entries to list.
func (im *Importer) scan(ctx context.Context, src, dst string, fresh bool) {
	local, err := os.ReadDir(src)
	if err != nil {
		im.fail(src, err)
		return
	}
	have := map[string]*rpc.StatResponse{}
	if !fresh {
		if have, err = im.listDest(ctx, dst); err != nil {
			im.fail(dst, err)
			return
		}
	}
	var creates []pendingCreate
	for _, e := range local {
		name := e.Name()
		s, d := filepath.Join(src, name), path.Join(dst, name)
		cur := have[name]
		delete(have, name)
		info, err := e.Info()
		if errors.Is(err, fs.ErrNotExist) { // removed since the listing
			if cur != nil {
				im.q.push(func(ctx context.Context) { im.remove(ctx, d, cur.Type, true) })
			}
			continue
		}
		if err != nil {
			im.fail(s, err)
			continue
		}
		if cur != nil {
			im.q.push(func(ctx context.Context) { im.sync(ctx, s, d, info, cur) })
			continue
		}
		want, ok, err := im.wanted(s, info)
		switch {
		case err != nil:
			im.fail(s, err)
		case !ok:
			im.skipped.Add(1)
		case want.link != fileKey{}:
			g, first := im.claim(want.link, d)
			if !first {
				im.later(g, &linkName{src: s, dst: d, attrs: want})
				continue
			}
			creates = append(creates, pendingCreate{src: s, name: name, attrs: want, link: g})
		default:
			creates = append(creates, pendingCreate{src: s, name: name, attrs: want})
		}
	}
	for _, name := range sortedKeys(have) {
		d, typ := path.Join(dst, name), have[name].Type
		im.q.push(func(ctx context.Context) { im.remove(ctx, d, typ, true) })
	}
	for chunk := range slices.Chunk(creates, createBatch) {
		im.q.push(func(ctx context.Context) { im.createAll(ctx, dst, chunk) })
	}
}

// pendingCreate is a source entry the destination lacks; link is set for
// the first name of a file with several names (hardLinks).
type pendingCreate struct {
	src, name string
	attrs
	link *linkGroup
}

// createAll creates entries of directory dst in one batched request and
// queues the scan of each new directory.
func (im *Importer) createAll(ctx context.Context, dst string, entries []pendingCreate) {
	var results []rpc.BatchCreateResult
	im.entriesChanged(dst)
	if !im.o.DryRun {
		req := &rpc.BatchCreateRequest{Dir: dst, Entries: make([]rpc.BatchCreateEntry, len(entries))}
		for i := range entries {
			e := &entries[i]
			im.readText(e.src, &e.attrs)
			req.Entries[i] = rpc.BatchCreateEntry{Name: e.name, Type: e.typ, Mode: e.mode, UID: e.uid, GID: e.gid,
				Size: e.size, Atime: e.atime, Mtime: e.mtime, Symlink: e.target, Rdev: e.rdev, Text: e.text, Xattrs: e.xattrs}
			if e.typ != rpc.TypeFile {
				req.Entries[i].Size = 0
			}
		}
		res := im.batches.create(ctx, *req)
		switch err := res.Err(); {
		case err != nil && ctx.Err() != nil:
			return
		case err != nil:
			// The request as a whole failed (one entry's path too long,
			// a shard unavailable): create the entries one by one, so
			// that only those that cannot be made fail.
			results = make([]rpc.BatchCreateResult, len(entries))
			for i := range entries {
				e := &entries[i]
				d := path.Join(dst, e.name)
				if id, err := im.create(ctx, "", d, &e.attrs); err != nil { // (text read above)
					results[i] = rpc.BatchCreateResult{Code: rpc.ErrorCode(err), Message: err.Error()}
				} else {
					results[i] = rpc.BatchCreateResult{Inode: &rpc.Inode{Path: d, ID: id}}
				}
			}
		default:
			results = res.Results
		}
	}
	for i, e := range entries {
		d := path.Join(dst, e.name)
		var id uint64 // (0: not known, as in a dry run)
		if results != nil {
			switch err := results[i].Err(); {
			case errors.Is(err, fs.ErrExist):
				// Made since the listing (or by an earlier attempt of this
				// request): compare it like an existing entry.
				im.q.push(func(ctx context.Context) { im.recheck(ctx, e.src, d, e.link) })
				continue
			case errors.Is(err, errors.ErrUnsupported) && rpc.SpecialType(e.typ):
				im.skipped.Add(1)
				im.resolve(e.link, 0, false)
				continue
			case err != nil:
				im.fail(d, err)
				im.resolve(e.link, 0, false)
				continue
			}
			if in := results[i].Inode; in != nil {
				id = in.ID
			}
		}
		im.resolve(e.link, id, true)
		im.created.Add(1)
		im.changed(Change{Kind: Create, Path: d, Type: e.typ})
		if e.typ == rpc.TypeDir {
			src := e.src
			im.q.push(func(ctx context.Context) { im.scan(ctx, src, d, true) })
		}
	}
}

// recheck syncs dst, which exists, with src; g is set when dst is the
// first name of a file with several names.
func (im *Importer) recheck(ctx context.Context, src, dst string, g *linkGroup) {
	info, err := os.Lstat(src)
	if err != nil {
		im.fail(src, err)
		im.resolve(g, 0, false)
		return
	}
	cur, err := im.c.Stat(ctx, dst)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		im.fail(dst, err)
		im.resolve(g, 0, false)
		return
	}
	if err != nil {
		cur = nil
	}
	im.syncAs(ctx, src, dst, info, cur, g)
}

// listDest returns dst's entries with their inodes.
func (im *Importer) listDest(ctx context.Context, dst string) (map[string]*rpc.StatResponse, error) {
	entries, err := im.c.ReadDirAll(ctx, dst, 0)
	if err != nil {
		return nil, err
	}
	have := make(map[string]*rpc.StatResponse, len(entries))
	for chunk := range slices.Chunk(entries, statBatch) {
		paths := make([]string, len(chunk))
		for i, e := range chunk {
			paths[i] = path.Join(dst, e.Name)
		}
		br, err := im.c.BatchStat(ctx, paths)
		if err != nil {
			return nil, err
		}
		for i, r := range br.Results {
			switch err := r.Err(); {
			case err == nil:
				have[chunk[i].Name] = r.Stat
			case errors.Is(err, fs.ErrNotExist): // removed meanwhile
			default:
				return nil, fmt.Errorf("stat %s: %w", paths[i], err)
			}
		}
	}
	return have, nil
}

// sync makes dst match the source entry src (info from lstat); cur is
// dst's inode, nil when dst does not exist.
func (im *Importer) sync(ctx context.Context, src, dst string, info fs.FileInfo, cur *rpc.StatResponse) {
	im.syncAs(ctx, src, dst, info, cur, nil)
}

// syncAs is sync for dst, the first name of g when g is set (claimed
// already); otherwise a source file with several names is claimed here,
// and a name other than its first waits to be linked (later).
func (im *Importer) syncAs(ctx context.Context, src, dst string, info fs.FileInfo, cur *rpc.StatResponse, g *linkGroup) {
	want, ok, err := im.wanted(src, info)
	if err != nil {
		im.fail(src, err)
		im.resolve(g, 0, false)
		return
	}
	if g == nil && ok && want.link != (fileKey{}) {
		var first bool
		if g, first = im.claim(want.link, dst); !first {
			im.later(g, &linkName{src: src, dst: dst, attrs: want, cur: cur})
			return
		}
	}
	id, made := im.syncWant(ctx, src, dst, want, ok, cur)
	im.resolve(g, id, made)
}

// syncWant makes dst match want, what the source entry src asks for (ok
// false: a special file); cur is dst's inode, nil when dst does not
// exist. It returns the id of dst's inode (0 when not known, as in a dry
// run) and whether dst holds (or, in a dry run, would hold) the entry.
func (im *Importer) syncWant(ctx context.Context, src, dst string, want attrs, ok bool, cur *rpc.StatResponse) (id uint64, made bool) {
	if !ok {
		if cur != nil {
			im.remove(ctx, dst, cur.Type, true)
		}
		im.skipped.Add(1)
		return 0, false
	}
	var fields []string // set: replace the entry
	switch {
	case cur == nil:
	case cur.Type != want.typ:
		fields = []string{"type"}
	case cur.Target != want.target || cur.Rdev != want.rdev:
		fields = []string{"target"}
	case cur.Nlink > 1 && cur.Type != rpc.TypeDir && !im.own(cur.ID, want, dst):
		// dst is one of several names of an inode that another source
		// file keeps: dst gets an inode of its own.
		fields = []string{"link"}
	}
	if fields != nil {
		// Another type, link target or file: replace the entry.
		if !im.remove(ctx, dst, cur.Type, false) {
			return 0, false
		}
		id, err := im.create(ctx, src, dst, &want)
		if err != nil {
			im.fail(dst, err)
			return 0, false
		}
		im.updated.Add(1)
		im.changed(Change{Kind: Update, Path: dst, Type: want.typ, Fields: fields})
		if want.typ == rpc.TypeDir {
			im.q.push(func(ctx context.Context) { im.scan(ctx, src, dst, true) })
		}
		return id, true
	}
	if cur == nil {
		var err error
		id, err = im.create(ctx, src, dst, &want)
		if errors.Is(err, errors.ErrUnsupported) && rpc.SpecialType(want.typ) {
			im.skipped.Add(1)
			return 0, false
		}
		if err != nil {
			im.fail(dst, err)
			return 0, false
		}
		im.created.Add(1)
		im.changed(Change{Kind: Create, Path: dst, Type: want.typ})
	} else if req, fields := im.diff(src, dst, cur, &want); len(fields) > 0 {
		var xattrs []rpc.XattrChange
		if im.o.Xattrs {
			xattrs = xattrChanges(cur.Xattrs, want.xattrs)
		}
		if !im.o.DryRun {
			// A failed update leaves dst in place: still the inode to
			// link the file's other names to.
			if slices.ContainsFunc(fields, func(f string) bool { return f != "xattrs" }) {
				if _, err := im.c.SetAttr(ctx, req); err != nil {
					im.fail(dst, err)
					return cur.ID, true
				}
			}
			if err := im.setXattrs(ctx, dst, xattrs); err != nil {
				im.fail(dst, err)
				return cur.ID, true
			}
		}
		im.updated.Add(1)
		im.changed(Change{Kind: Update, Path: dst, Type: want.typ, Fields: fields})
	} else {
		im.unchanged.Add(1)
	}
	if want.typ == rpc.TypeDir {
		fresh := cur == nil
		im.q.push(func(ctx context.Context) { im.scan(ctx, src, dst, fresh) })
	}
	if cur != nil {
		id = cur.ID
	}
	return id, true
}

// wanted returns what the destination must hold for source entry src
// (info from lstat); ok is false for a special file.
func (im *Importer) wanted(src string, info fs.FileInfo) (want attrs, ok bool, err error) {
	if want, ok = attrsOf(info); !ok {
		return attrs{}, false, nil
	}
	if want.typ == rpc.TypeSymlink {
		target, err := os.Readlink(src)
		if err != nil {
			return attrs{}, false, err
		}
		want.target, want.size = target, int64(len(target))
	}
	if !im.o.Owners {
		want.uid, want.gid = selfUID(), selfGID()
	}
	if im.o.Xattrs {
		if want.xattrs, err = readXattrs(src); err != nil {
			return attrs{}, false, err
		}
	}
	return want, true, nil
}

// create makes dst as want describes (nothing in a dry run), with the
// text of source file src when Options.Content asks for texts ("": want
// holds it already); it returns the new inode's id (0 in a dry run).
func (im *Importer) create(ctx context.Context, src, dst string, want *attrs) (uint64, error) {
	if im.o.DryRun {
		return 0, nil
	}
	im.entriesChanged(path.Dir(dst))
	if src != "" {
		im.readText(src, want)
	}
	var (
		id  uint64
		err error
	)
	switch want.typ {
	case rpc.TypeDir:
		var resp *rpc.MkdirResponse
		if resp, err = im.c.Mkdir(ctx, &rpc.MkdirRequest{Path: dst, Mode: want.mode, UID: want.uid, GID: want.gid, Atime: want.atime, Mtime: want.mtime, AsGiven: true}); err == nil {
			id = resp.Inode.ID
		}
	default:
		req := &rpc.CreateRequest{Path: dst, Mode: want.mode, UID: want.uid, GID: want.gid, Atime: want.atime, Mtime: want.mtime, AsGiven: true}
		switch {
		case want.typ == rpc.TypeSymlink:
			req.Symlink = want.target
		case rpc.SpecialType(want.typ):
			req.Type, req.Rdev = want.typ, want.rdev
		default:
			req.Size, req.Text = want.size, want.text
		}
		var resp *rpc.CreateResponse
		if resp, err = im.c.Create(ctx, req); err == nil {
			id = resp.Inode.ID
		}
	}
	if err != nil {
		return 0, err
	}
	return id, im.setXattrs(ctx, dst, xattrChanges(nil, want.xattrs))
}

// xattrChanges returns the changes that make the extended attributes cur
// of a destination entry those of its source, want: of the attributes
// the import copies (importedXattr), new and changed ones are set, those
// the source no longer has removed.
func xattrChanges(cur, want []rpc.Xattr) []rpc.XattrChange {
	var out []rpc.XattrChange
	for _, x := range cur {
		if importedXattr(x.Name) && !slices.ContainsFunc(want, func(w rpc.Xattr) bool { return w.Name == x.Name }) {
			out = append(out, rpc.XattrChange{Name: x.Name, Remove: true})
		}
	}
	for _, w := range want {
		i := slices.IndexFunc(cur, func(x rpc.Xattr) bool { return x.Name == w.Name })
		if i < 0 || !bytes.Equal(cur[i].Value, w.Value) {
			out = append(out, rpc.XattrChange{Name: w.Name, Value: w.Value})
		}
	}
	return out
}

// setXattrs applies changes to dst, one SetAttr each.
func (im *Importer) setXattrs(ctx context.Context, dst string, changes []rpc.XattrChange) error {
	for i := range changes {
		if _, err := im.c.SetAttr(ctx, &rpc.SetAttrRequest{Path: dst, Xattr: &changes[i]}); err != nil {
			return fmt.Errorf("extended attribute %s: %w", changes[i].Name, err)
		}
	}
	return nil
}

// diff returns the setattr that makes cur match want, and the fields it
// changes; with Options.Content, a file's text (from src) is sent when
// its size or mtime changed or it has none yet.
func (im *Importer) diff(src, dst string, cur *rpc.StatResponse, want *attrs) (*rpc.SetAttrRequest, []string) {
	req := &rpc.SetAttrRequest{Path: dst}
	var fields []string
	if cur.Mode != want.mode && want.typ != rpc.TypeSymlink {
		req.Mode = &want.mode
		fields = append(fields, "mode")
	}
	if im.o.Owners && (cur.UID != want.uid || cur.GID != want.gid) {
		req.UID, req.GID = &want.uid, &want.gid
		fields = append(fields, "owner")
		if req.Mode == nil && want.typ != rpc.TypeSymlink {
			req.Mode = &want.mode // a chown alone clears setuid and setgid
		}
	}
	if cur.Size != want.size && want.typ == rpc.TypeFile {
		req.Size = &want.size
		fields = append(fields, "size")
	}
	if cur.Mtime != want.mtime {
		req.Mtime = &want.mtime
		fields = append(fields, "mtime")
	}
	if im.o.Content > 0 && want.typ == rpc.TypeFile && (len(fields) > 0 || !cur.HasText) {
		if im.o.DryRun && !cur.HasText {
			// Whether it is text is known only by reading it: a dry run
			// counts every file without a text.
			fields = append(fields, "text")
		} else if !im.o.DryRun && im.readText(src, want) && (want.text != "" || cur.HasText) {
			req.Text = &want.text
			fields = append(fields, "text")
		}
	}
	if im.o.Xattrs && len(xattrChanges(cur.Xattrs, want.xattrs)) > 0 {
		fields = append(fields, "xattrs")
	}
	return req, fields
}

// readText reads the text of source file src into want when
// Options.Content asks for texts; it reports whether it read the file.
// A file that cannot be read is imported without a text and counted as
// an error.
func (im *Importer) readText(src string, want *attrs) bool {
	if im.o.Content <= 0 || want.typ != rpc.TypeFile || want.size == 0 {
		return false
	}
	text, err := ReadText(src, im.o.Content)
	if err != nil {
		im.fail(src, fmt.Errorf("reading its text: %w", err))
		return false
	}
	want.text = text
	return true
}

// ReadText returns the first n bytes of file p as a text ("" when they are
// not text: content sniffing (http.DetectContentType) must find text and
// they must be valid UTF-8 without NUL bytes; a rune cut at the end is
// dropped).
func ReadText(p string, n int) (string, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	buf := make([]byte, n)
	k, err := io.ReadFull(f, buf)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return "", err
	}
	buf = buf[:k]
	if k == n {
		// Drop a rune the limit cut (at most utf8.UTFMax-1 bytes).
		for i := 0; i < utf8.UTFMax-1 && len(buf) > 0; i++ {
			if r, size := utf8.DecodeLastRune(buf); r != utf8.RuneError || size != 1 {
				break
			}
			buf = buf[:len(buf)-1]
		}
	}
	if len(buf) == 0 || bytes.IndexByte(buf, 0) >= 0 || !utf8.Valid(buf) ||
		!strings.HasPrefix(http.DetectContentType(buf), "text/") {
		return "", nil
	}
	return string(buf), nil
}

// remove deletes dst (a directory with everything below it), counting
// each path (dst itself only with self: a replaced entry counts as one
// update); it reports whether dst is gone.
func (im *Importer) remove(ctx context.Context, dst, typ string, self bool) bool {
	if typ == rpc.TypeDir {
		entries, err := im.c.ReadDirAll(ctx, dst, 0)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			im.fail(dst, err)
			return false
		}
		for _, e := range entries {
			if !im.remove(ctx, path.Join(dst, e.Name), e.Type, true) {
				return false
			}
		}
	}
	if !im.o.DryRun {
		im.entriesChanged(path.Dir(dst))
		var err error
		if typ == rpc.TypeDir {
			err = im.c.Rmdir(ctx, dst)
		} else {
			err = im.c.Unlink(ctx, dst)
		}
		if errors.Is(err, fs.ErrNotExist) {
			return true // removed by someone else
		}
		if err != nil {
			im.fail(dst, err)
			return false
		}
	}
	if self {
		im.deleted.Add(1)
		im.changed(Change{Kind: Delete, Path: dst, Type: typ})
	}
	return true
}

// hardLinks is what an import knows of the source files with several
// names (hard links), guarded by mu. The walk is concurrent, so the first
// name of such a file that a worker meets claims the file (claim) and is
// created or updated as any entry; every other name is a linkName that
// waits in its linkGroup, off the queue, until the first name is made
// (resolve), and is then queued to be linked to it. Nothing blocks a
// worker, so a few workers cannot all wait for a first name none of them
// runs; and a tree without links, into a destination without any, never
// takes mu.
type hardLinks struct {
	mu     sync.Mutex
	groups map[fileKey]*linkGroup
	// owners maps the id of a destination inode with several names that
	// a name kept in place (syncWant) to the source file it stands for:
	// a fileKey, or the destination path of a file with one name. A name
	// of that inode that stands for another source file gets an inode of
	// its own.
	owners map[uint64]any
	// unsupported is set once Link failed with errors.ErrUnsupported:
	// the names left are imported as files of their own, and noted once.
	unsupported atomic.Bool
	// tmp numbers the temporary names of replaceByLink.
	tmp atomic.Uint64
}

// Link group states.
const (
	linkPending = iota // the first name is being made; others wait
	linkMade           // the first name is made: link to it
	linkFree           // the first name failed: the next name met is first
)

// linkGroup is one source file with several names.
type linkGroup struct {
	state   int
	first   string      // the destination path of its first name
	id      uint64      // the first name's inode id once made (0: not known)
	waiters []*linkName // names waiting for the first to be made
}

// linkName is a name of a file with several names other than its first:
// source path, destination path and inode (nil: none), and the source's
// attributes.
type linkName struct {
	src, dst string
	attrs
	cur *rpc.StatResponse
}

// claim returns the group of source file key and whether dst is its
// first name, which the caller must make and then resolve.
func (im *Importer) claim(key fileKey, dst string) (g *linkGroup, first bool) {
	im.hl.mu.Lock()
	defer im.hl.mu.Unlock()
	if g = im.hl.groups[key]; g == nil {
		if im.hl.groups == nil {
			im.hl.groups = make(map[fileKey]*linkGroup)
		}
		g = &linkGroup{first: dst}
		im.hl.groups[key] = g
		return g, true
	}
	if g.state == linkFree {
		g.state, g.first = linkPending, dst
		return g, true
	}
	return g, false
}

// later handles w, a name of g other than its first: it waits while the
// first name is being made, is queued to be linked once it is, and takes
// the first name's place when that failed.
func (im *Importer) later(g *linkGroup, w *linkName) {
	im.hl.mu.Lock()
	switch g.state {
	case linkPending:
		g.waiters = append(g.waiters, w)
		im.hl.mu.Unlock()
	case linkMade:
		first, id := g.first, g.id
		im.hl.mu.Unlock()
		im.q.push(func(ctx context.Context) { im.linkName(ctx, w, first, id) })
	default:
		g.state, g.first = linkPending, w.dst
		im.hl.mu.Unlock()
		im.q.push(func(ctx context.Context) { im.makeFirst(ctx, g, w) })
	}
}

// makeFirst makes w, now the first name of g, as any entry and resolves g.
func (im *Importer) makeFirst(ctx context.Context, g *linkGroup, w *linkName) {
	id, made := im.syncWant(ctx, w.src, w.dst, w.attrs, true, w.cur)
	im.resolve(g, id, made)
}

// resolve ends the making of g's first name (nothing when g is nil):
// made, with inode id (0: not known), the waiting names are queued to be
// linked to it; failed, the first waiting name becomes the first (or the
// next name met, when none waits). Every first name is resolved once per
// claim, by the operation that made it, before that operation ends: the
// queue never runs dry while names wait.
func (im *Importer) resolve(g *linkGroup, id uint64, made bool) {
	if g == nil {
		return
	}
	im.hl.mu.Lock()
	if made {
		g.state, g.id = linkMade, id
		first, ws := g.first, g.waiters
		g.waiters = nil
		im.hl.mu.Unlock()
		for _, w := range ws {
			im.q.push(func(ctx context.Context) { im.linkName(ctx, w, first, id) })
		}
		return
	}
	if len(g.waiters) == 0 {
		g.state = linkFree
		im.hl.mu.Unlock()
		return
	}
	w := g.waiters[0]
	g.waiters = g.waiters[1:]
	g.first = w.dst
	im.hl.mu.Unlock()
	im.q.push(func(ctx context.Context) { im.makeFirst(ctx, g, w) })
}

// own reports whether destination path dst, a name of inode id that has
// several names, may stay a name of it: whether no other source file
// keeps that inode (the first to ask keeps it). want is the source
// entry's.
func (im *Importer) own(id uint64, want attrs, dst string) bool {
	if id == 0 {
		return true
	}
	var owner any = dst
	if want.link != (fileKey{}) {
		owner = want.link
	}
	im.hl.mu.Lock()
	defer im.hl.mu.Unlock()
	if o, ok := im.hl.owners[id]; ok {
		return o == owner
	}
	if im.hl.owners == nil {
		im.hl.owners = make(map[uint64]any)
	}
	im.hl.owners[id] = owner
	return true
}

// linkName makes w.dst another name of the inode at first, the first
// name of its source file (id: that inode's id, 0 when not known). A
// destination that is a name of that inode already is left alone; one
// that is another entry is replaced. A cluster that cannot link gets a
// file of its own (asCopy).
func (im *Importer) linkName(ctx context.Context, w *linkName, first string, id uint64) {
	if im.hl.unsupported.Load() {
		im.asCopy(ctx, w)
		return
	}
	cur := w.cur
	if cur != nil && cur.Type != rpc.TypeDir {
		if id == 0 && !im.o.DryRun {
			st, err := im.c.Stat(ctx, first)
			if err != nil {
				im.fail(w.dst, fmt.Errorf("stat %s, another name of its file: %w", first, err))
				return
			}
			id = st.ID
		}
		if id != 0 && cur.ID == id {
			im.unchanged.Add(1)
			return
		}
	}
	kind := Create
	if cur != nil {
		kind = Update
	}
	if !im.o.DryRun {
		im.entriesChanged(path.Dir(w.dst))
		var err error
		switch {
		case cur == nil:
			_, err = im.c.Link(ctx, first, w.dst)
			if errors.Is(err, fs.ErrExist) { // made since the listing
				st, err := im.c.Stat(ctx, w.dst)
				if err != nil {
					im.fail(w.dst, err)
					return
				}
				w.cur = st
				im.linkName(ctx, w, first, id)
				return
			}
		case cur.Type == rpc.TypeDir:
			if !im.remove(ctx, w.dst, cur.Type, false) {
				return
			}
			w.cur = nil
			_, err = im.c.Link(ctx, first, w.dst)
		default:
			err = im.replaceByLink(ctx, first, w.dst)
		}
		switch {
		case errors.Is(err, errors.ErrUnsupported):
			if im.hl.unsupported.CompareAndSwap(false, true) {
				im.notice("the cluster cannot keep hard links yet (not every node supports them): the other names of files with several names are imported as files of their own")
			}
			im.asCopy(ctx, w)
			return
		case err != nil:
			im.fail(w.dst, fmt.Errorf("link to %s: %w", first, err))
			return
		}
	}
	if kind == Create {
		im.created.Add(1)
	} else {
		im.updated.Add(1)
	}
	im.links.Add(1)
	im.changed(Change{Kind: kind, Path: w.dst, Type: w.typ, Fields: []string{"link"}})
}

// replaceByLink makes dst, an existing entry other than a directory,
// another name of the inode at first: a link under a temporary name,
// renamed over dst, so that dst is never missing and a cluster that
// cannot link (errors.ErrUnsupported) keeps it as it is.
func (im *Importer) replaceByLink(ctx context.Context, first, dst string) error {
	tmp := path.Join(path.Dir(dst), fmt.Sprintf(".ghba-import-link.%d.%d", os.Getpid(), im.hl.tmp.Add(1)))
	if _, err := im.c.Link(ctx, first, tmp); err != nil {
		return err
	}
	if _, err := im.c.Rename(ctx, tmp, dst); err != nil {
		if uerr := im.c.Unlink(ctx, tmp); uerr != nil && !errors.Is(uerr, fs.ErrNotExist) {
			return fmt.Errorf("%w (and removing %s: %w)", err, tmp, uerr)
		}
		return err
	}
	return nil
}

// asCopy imports w, a name of a file with several names that the cluster
// cannot link, as a file of its own, and counts it.
func (im *Importer) asCopy(ctx context.Context, w *linkName) {
	im.linksAsCopies.Add(1)
	im.syncWant(ctx, w.src, w.dst, w.attrs, true, w.cur)
}

// notice reports a note about the whole import (Options.OnNotice).
func (im *Importer) notice(msg string) {
	if im.o.OnNotice == nil {
		slog.Warn("import: " + msg)
		return
	}
	im.report.Lock()
	defer im.report.Unlock()
	im.o.OnNotice(msg)
}

func (im *Importer) changed(c Change) {
	if im.o.OnChange == nil {
		return
	}
	im.report.Lock()
	defer im.report.Unlock()
	im.o.OnChange(c)
}

// fail counts and reports an entry that could not be imported (not when
// the import is being cancelled: that is Run's error).
func (im *Importer) fail(p string, err error) {
	if errors.Is(err, context.Canceled) {
		return
	}
	im.errs.Add(1)
	if im.o.OnError == nil {
		return
	}
	im.report.Lock()
	defer im.report.Unlock()
	im.o.OnError(p, err)
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// CountTree returns the number of entries below dir (for a progress bar's
// total); it stops early when ctx ends.
func CountTree(ctx context.Context, dir string) (int64, error) {
	var n int64
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil {
			return nil // counted as an error by the import itself
		}
		n++
		return nil
	})
	return n, err
}
