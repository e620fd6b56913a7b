package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strconv"
	"strings"
	"sync"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/ghba/ghba/rpc"
	"github.com/ghba/ghba/rpc/client"
)

// rmConcurrency bounds the RPCs "rm -r" has in flight.
const rmConcurrency = 16

// newFSCmds returns the namespace commands: stat, lookup, create, mkdir,
// ls, rm, mv, chmod, chown, xattr.
func newFSCmds(o *clientOptions) []*cobra.Command {
	return []*cobra.Command{
		newStatCmd(o), newLookupCmd(o), newCreateCmd(o), newMkdirCmd(o), newLnCmd(o), newMknodCmd(o), newLsCmd(o),
		newRmCmd(o), newMvCmd(o), newChmodCmd(o), newChownCmd(o), newXattrCmd(o),
	}
}

// withClient runs fn with a client for the global flags and closes it.
func withClient(cmd *cobra.Command, o *clientOptions, fn func(ctx context.Context, c *client.Client) error) error {
	return withClientSet(cmd, o, nil, fn)
}

// withClientSet is withClient with the client's options adjusted by set
// (if not nil).
func withClientSet(cmd *cobra.Command, o *clientOptions, set func(*client.Options), fn func(ctx context.Context, c *client.Client) error) error {
	c, err := o.clientWith(cmd, set)
	if err != nil {
		return err
	}
	defer c.Close()
	err = fn(cmd.Context(), c)
	if err != nil && o.dial == nil && errors.Is(err, io.EOF) {
		// A node with TLS closes a plain connection without a word.
		err = fmt.Errorf("%w\n(a node closed the connection before answering: if the cluster uses TLS, "+
			"give --ca-file, and with tls.verify_incoming --cert-file and --key-file)", err)
	}
	return err
}

// newStatCmd returns "ghba stat".
func newStatCmd(o *clientOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "stat PATH",
		Short: "Show a path's metadata, its home node and how the lookup resolved it",
		Long: `Show a path's inode (its id, type, mode, owner, size, times), the node that
homes it, the lookup level that found the home (L1: LRU filter array, L2:
segment filter array, L3: group multicast, L4: authoritative step) and the
number of server-to-server hops it took. The id is the inode's
cluster-unique number: given at its creation, kept by renames ("-" for an
inode created before ids existed that its shard has not numbered yet).
With --json: one object with the fields path, id (absent when not numbered
yet), type ("file", "dir" or "symlink"), mode, uid, gid, size, atime, mtime,
ctime (Unix nanoseconds), nlink, version, home, level, hops, target for a
symlink (the service never resolves a path through one), anchor for a file
with several names (hard links: the shard that keeps its attributes, shown
as "record"), ancestors when any
ancestor directory does not let everyone search it: its permission codes
(HBA §4.2.2), each {depth, mode (execute bits), uid, gid}, which the
server checks on every access with ACLs on.`,
		Example: `  ghba stat /home/alice/notes.txt
  ghba --addr 127.0.0.1:7420 stat --json /home/alice | jq .level`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			p := args[0]
			if err := checkPath(p); err != nil {
				return err
			}
			return withClient(cmd, o, func(ctx context.Context, c *client.Client) error {
				st, err := c.Stat(ctx, p)
				if err != nil {
					return opError("stat", p, err)
				}
				if o.json {
					return writeJSON(cmd.OutOrStdout(), st)
				}
				return printStat(cmd.OutOrStdout(), st)
			})
		},
	}
}

// lookupJSON is the "lookup --json" object.
type lookupJSON struct {
	Path     string `json:"path"`
	Type     string `json:"type,omitempty"`
	Home     string `json:"home"`
	Leader   string `json:"leader,omitempty"`
	HomeAddr string `json:"home_addr,omitempty"`
	Level    string `json:"level"`
	Hops     int    `json:"hops"`
}

// newLookupCmd returns "ghba lookup".
func newLookupCmd(o *clientOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "lookup PATH",
		Short: "Find a path's home shard, its leader and the routing level that resolved it",
		Long: `Ask the cluster which shard homes PATH, through the G-HBA query path (L1 to
L4, see docs/design.md), without reading the inode, and which node leads that shard now. A
shard is named after the node that created it and keeps its name when its leader changes.
The request enters at a node of --addr, so give one address to see how a particular node
routes. With --json: an object {path, home, level, hops} (plus type, leader and home_addr).`,
		Example: `  ghba lookup /home/alice/notes.txt
  ghba --addr 127.0.0.1:7430 lookup --json /home/alice/notes.txt`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			p := args[0]
			if err := checkPath(p); err != nil {
				return err
			}
			return withClient(cmd, o, func(ctx context.Context, c *client.Client) error {
				r, err := c.Lookup(ctx, p)
				if err != nil {
					return opError("lookup", p, err)
				}
				if o.json {
					return writeJSON(cmd.OutOrStdout(), lookupJSON{r.Path, r.Type, r.Home, r.Leader, r.HomeAddr, r.Level, r.Hops})
				}
				return printLookup(cmd.OutOrStdout(), r)
			})
		},
	}
}

// opError prefixes err with "op path: " unless the message already names
// the path (servers usually say "stat /a: file does not exist").
func opError(op, p string, err error) error {
	if strings.Contains(err.Error(), p) {
		return err
	}
	return fmt.Errorf("%s %s: %w", op, p, err)
}

// ownerFlags are --mode, --uid and --gid of create and mkdir.
type ownerFlags struct {
	mode     string
	uid, gid uint32
}

// add defines the flags on cmd; defMode is the default --mode.
func (f *ownerFlags) add(cmd *cobra.Command, defMode string) {
	fl := cmd.Flags()
	fl.StringVar(&f.mode, "mode", defMode, "permission bits, octal")
	fl.Uint32Var(&f.uid, "uid", currentID(os.Getuid()), "owner user id")
	fl.Uint32Var(&f.gid, "gid", currentID(os.Getgid()), "owner group id")
}

// currentID converts os.Getuid/Getgid (-1 on some systems) to an id.
func currentID(id int) uint32 {
	if id < 0 {
		return 0
	}
	return uint32(id)
}

// parseMode parses octal permission bits (at most 07777).
func parseMode(s string) (uint32, error) {
	m, err := strconv.ParseUint(s, 8, 32)
	if err != nil || m > 0o7777 {
		return 0, usageErrorf("mode %q: want octal permission bits 0-7777 (e.g. 644, 0755)", s)
	}
	return uint32(m), nil
}

// newCreateCmd returns "ghba create".
func newCreateCmd(o *clientOptions) *cobra.Command {
	var (
		own     ownerFlags
		parents bool
	)
	cmd := &cobra.Command{
		Use:   "create [-p] PATH",
		Short: "Create an empty file",
		Long: `Create a regular file. Fails with exit code 4 if the name exists and 3 if the
parent directory does not (unless -p creates the missing parents). Prints
nothing on success; with --json the new inode and the hops the create took.`,
		Example: `  ghba create /home/alice/notes.txt
  ghba create -p --mode 600 --uid 1000 --gid 1000 /home/alice/.ssh/id_ed25519`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			p := args[0]
			if err := checkPath(p); err != nil {
				return err
			}
			mode, err := parseMode(own.mode)
			if err != nil {
				return err
			}
			return withClient(cmd, o, func(ctx context.Context, c *client.Client) error {
				if parents {
					if dir := path.Dir(p); dir != "/" {
						dmode := uint32(0o755)
						if _, err := c.Mkdir(ctx, &rpc.MkdirRequest{Path: dir, Mode: dmode, UID: own.uid, GID: own.gid, Parents: true}); err != nil {
							return fmt.Errorf("create %s: parent: %w", p, err)
						}
					}
				}
				r, err := c.Create(ctx, &rpc.CreateRequest{Path: p, Mode: mode, UID: own.uid, GID: own.gid})
				if err != nil {
					return opError("create", p, err)
				}
				if o.json {
					return writeJSON(cmd.OutOrStdout(), r)
				}
				return nil
			})
		},
	}
	own.add(cmd, "0644")
	cmd.Flags().BoolVarP(&parents, "parents", "p", false, "create missing parent directories")
	return cmd
}

// newLnCmd returns "ghba ln".
func newLnCmd(o *clientOptions) *cobra.Command {
	var (
		own      ownerFlags
		symbolic bool
	)
	cmd := &cobra.Command{
		Use:   "ln [-s] TARGET PATH",
		Short: "Create a hard link, or a symbolic link with -s",
		Long: `Without -s, make PATH another name of the existing file TARGET (a hard link,
as ln(1) does): both names then show one inode, with one id, one link count,
one set of attributes and one set of contents, whichever shards home them. A
directory cannot be linked (exit 6, as Linux's EPERM), and PATH must not
exist (exit 4).

With -s, create PATH as a symbolic link to TARGET. TARGET is kept verbatim
(it need not exist; the service never resolves a path through a link);
"stat PATH" shows it. Exit codes as for create.`,
		Example: `  ghba ln /src/main.go /backup/main.go
  ghba ln -s ../lib/libc.so.6 /usr/lib/libc.so`,
		Args: exactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			target, p := args[0], args[1]
			if err := checkPath(p); err != nil {
				return err
			}
			if target == "" {
				return usageErrorf("ln: empty target")
			}
			if !symbolic {
				if err := checkPath(target); err != nil {
					return err
				}
			}
			return withClient(cmd, o, func(ctx context.Context, c *client.Client) error {
				var out any
				if symbolic {
					r, err := c.Create(ctx, &rpc.CreateRequest{Path: p, Mode: 0o777, UID: own.uid, GID: own.gid, Symlink: target})
					if err != nil {
						return opError("ln", p, err)
					}
					out = r
				} else {
					in, err := c.Link(ctx, target, p)
					if err != nil {
						return opError("ln", p, err)
					}
					out = in
				}
				if o.json {
					return writeJSON(cmd.OutOrStdout(), out)
				}
				return nil
			})
		},
	}
	fl := cmd.Flags()
	fl.BoolVarP(&symbolic, "symbolic", "s", false, "make a symbolic link instead of a hard link")
	fl.Uint32Var(&own.uid, "uid", currentID(os.Getuid()), "owner user id of a symbolic link")
	fl.Uint32Var(&own.gid, "gid", currentID(os.Getgid()), "owner group id of a symbolic link")
	return cmd
}

// mknodTypes maps mknod(1)'s type letters (and s, for a socket) to the
// cluster's special file types.
var mknodTypes = map[string]string{
	"p": rpc.TypeFIFO, "c": rpc.TypeCharDev, "u": rpc.TypeCharDev, "b": rpc.TypeBlockDev, "s": rpc.TypeSocket,
}

// newMknodCmd returns "ghba mknod".
func newMknodCmd(o *clientOptions) *cobra.Command {
	var own ownerFlags
	cmd := &cobra.Command{
		Use:   "mknod PATH TYPE [MAJOR MINOR]",
		Short: "Create a FIFO, a socket or a device node",
		Long: `Create PATH as a special file, as mknod(1) does: TYPE p makes a FIFO (named
pipe), c (or u) a character device and b a block device, both with MAJOR and
MINOR, and s a Unix socket's node. The cluster keeps their metadata; what they
do is the business of the kernel of the machine that opens them through a
mount. Needs every node of the cluster to speak shard log format 3 (exit code
1 with "unsupported" until then). Exit codes as for create.`,
		Example: `  ghba mknod /run/app.fifo p
  ghba mknod --mode 660 /dev/sda1 b 8 1`,
		Args: cobra.RangeArgs(2, 4),
		RunE: func(cmd *cobra.Command, args []string) error {
			p := args[0]
			if err := checkPath(p); err != nil {
				return err
			}
			typ, ok := mknodTypes[args[1]]
			if !ok {
				return usageErrorf("mknod: type %q: want p, c, u, b or s", args[1])
			}
			dev := typ == rpc.TypeCharDev || typ == rpc.TypeBlockDev
			var rdev uint64
			switch {
			case dev && len(args) != 4:
				return usageErrorf("mknod: a %s device needs MAJOR and MINOR", args[1])
			case !dev && len(args) != 2:
				return usageErrorf("mknod: type %s takes no MAJOR and MINOR", args[1])
			case dev:
				major, err1 := strconv.ParseUint(args[2], 0, 32)
				minor, err2 := strconv.ParseUint(args[3], 0, 32)
				if err := errors.Join(err1, err2); err != nil {
					return usageErrorf("mknod: major and minor: %v", err)
				}
				rdev = unix.Mkdev(uint32(major), uint32(minor))
			}
			mode, err := parseMode(own.mode)
			if err != nil {
				return err
			}
			return withClient(cmd, o, func(ctx context.Context, c *client.Client) error {
				r, err := c.Create(ctx, &rpc.CreateRequest{Path: p, Type: typ, Rdev: rdev, Mode: mode, UID: own.uid, GID: own.gid})
				if err != nil {
					return opError("mknod", p, err)
				}
				if o.json {
					return writeJSON(cmd.OutOrStdout(), r)
				}
				return nil
			})
		},
	}
	own.add(cmd, "0644")
	return cmd
}

// newMkdirCmd returns "ghba mkdir".
func newMkdirCmd(o *clientOptions) *cobra.Command {
	var (
		own     ownerFlags
		parents bool
	)
	cmd := &cobra.Command{
		Use:   "mkdir [-p] PATH",
		Short: "Create a directory",
		Long: `Create a directory. With -p, create missing parents too and succeed if PATH
already is a directory. Prints nothing on success; with --json the inode,
the directories created and the hops.`,
		Example: `  ghba mkdir /home
  ghba mkdir -p --mode 700 /home/alice/projects/ghba`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			p := args[0]
			if err := checkPath(p); err != nil {
				return err
			}
			mode, err := parseMode(own.mode)
			if err != nil {
				return err
			}
			return withClient(cmd, o, func(ctx context.Context, c *client.Client) error {
				r, err := c.Mkdir(ctx, &rpc.MkdirRequest{Path: p, Mode: mode, UID: own.uid, GID: own.gid, Parents: parents})
				if err != nil {
					return opError("mkdir", p, err)
				}
				if o.json {
					if r.Created == nil {
						r.Created = []string{}
					}
					return writeJSON(cmd.OutOrStdout(), r)
				}
				return nil
			})
		},
	}
	own.add(cmd, "0755")
	cmd.Flags().BoolVarP(&parents, "parents", "p", false, "create missing parents; no error if PATH is already a directory")
	return cmd
}

// newLsCmd returns "ghba ls".
func newLsCmd(o *clientOptions) *cobra.Command {
	var pageSize int
	cmd := &cobra.Command{
		Use:   "ls [PATH]",
		Short: "List a directory (all pages, sorted by name)",
		Long: `List a directory's entries, sorted by name, fetching every page. PATH
defaults to /. With --json: an array of {name, type} objects (plus home,
the node that homes the entry).`,
		Example: `  ghba ls /home/alice
  ghba ls --json / | jq -r '.[] | select(.type == "dir") | .name'`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 1 {
				return usageErrorf("%s takes at most one path, got %d", cmd.CommandPath(), len(args))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			p := "/"
			if len(args) == 1 {
				p = args[0]
			}
			if err := checkPath(p); err != nil {
				return err
			}
			if pageSize < 0 {
				return usageErrorf("--page-size %d: must not be negative", pageSize)
			}
			return withClient(cmd, o, func(ctx context.Context, c *client.Client) error {
				entries, err := c.ReadDirAll(ctx, p, pageSize)
				if err != nil {
					return opError("ls", p, err)
				}
				if o.json {
					return writeJSON(cmd.OutOrStdout(), lsJSON(entries))
				}
				return printDir(cmd.OutOrStdout(), entries)
			})
		},
	}
	cmd.Flags().IntVar(&pageSize, "page-size", 0, "entries per ReadDir call (0: the server's default)")
	return cmd
}

// newRmCmd returns "ghba rm".
func newRmCmd(o *clientOptions) *cobra.Command {
	var recursive, force bool
	cmd := &cobra.Command{
		Use:   "rm [-r] [-f] PATH...",
		Short: "Remove files, empty directories, or with -r whole trees",
		Long: `Remove each PATH. A directory needs -r: then its whole tree is removed,
children first (up to 16 RPCs in flight). With -f a path that does not
exist is not an error. The exit code is that of the first failure.`,
		Example: `  ghba rm /home/alice/notes.txt
  ghba rm -r /home/alice/projects
  ghba rm -rf /tmp/scratch /tmp/old`,
		Args: minArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			for _, p := range args {
				if err := checkPath(p); err != nil {
					return err
				}
				if path.Clean(p) == "/" {
					return usageErrorf("rm: refusing to remove /")
				}
			}
			return withClient(cmd, o, func(ctx context.Context, c *client.Client) error {
				var errs []error
				for _, p := range args {
					err := removePath(ctx, c, p, recursive)
					if force && errors.Is(err, fs.ErrNotExist) {
						err = nil
					}
					if err != nil {
						errs = append(errs, opError("rm", p, err))
					}
				}
				return errors.Join(errs...)
			})
		},
	}
	cmd.Flags().BoolVarP(&recursive, "recursive", "r", false, "remove directories and their contents")
	cmd.Flags().BoolVarP(&force, "force", "f", false, "ignore paths that do not exist")
	return cmd
}

// removePath removes the file p, or the directory p: empty, or with
// recursive its whole tree.
func removePath(ctx context.Context, c *client.Client, p string, recursive bool) error {
	err := c.Unlink(ctx, p)
	if !errors.Is(err, rpc.ErrIsDir) {
		return err
	}
	if !recursive {
		return fmt.Errorf("%w (use -r)", err)
	}
	sem := make(chan struct{}, rmConcurrency)
	return removeTree(ctx, c, sem, p)
}

// removeTree removes the directory dir and everything below it. sem bounds
// the RPCs in flight (it is held only around single calls, never while
// waiting for children, so it cannot deadlock).
func removeTree(ctx context.Context, c *client.Client, sem chan struct{}, dir string) error {
	do := func(f func() error) error {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			return ctx.Err()
		}
		defer func() { <-sem }()
		return f()
	}
	var entries []rpc.DirEntry
	if err := do(func() (err error) {
		entries, err = c.ReadDirAll(ctx, dir, 0)
		return err
	}); err != nil {
		return err
	}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	work := make(chan rpc.DirEntry)
	for range min(len(entries), rmConcurrency) {
		wg.Go(func() {
			for e := range work {
				child := path.Join(dir, e.Name)
				var err error
				if e.Type == rpc.TypeDir {
					err = removeTree(ctx, c, sem, child)
				} else {
					err = do(func() error { return c.Unlink(ctx, child) })
					if errors.Is(err, rpc.ErrIsDir) { // replaced by a directory meanwhile
						err = removeTree(ctx, c, sem, child)
					}
				}
				if errors.Is(err, fs.ErrNotExist) { // removed by someone else
					err = nil
				}
				if err != nil {
					mu.Lock()
					if first == nil {
						first = fmt.Errorf("%s: %w", child, err)
					}
					mu.Unlock()
				}
			}
		})
	}
	for _, e := range entries {
		mu.Lock()
		failed := first != nil
		mu.Unlock()
		if failed {
			break
		}
		work <- e
	}
	close(work)
	wg.Wait()
	if first != nil {
		return first
	}
	return do(func() error { return c.Rmdir(ctx, dir) })
}

// newMvCmd returns "ghba mv".
func newMvCmd(o *clientOptions) *cobra.Command {
	var noClobber bool
	cmd := &cobra.Command{
		Use:   "mv [-n] SRC DST",
		Short: "Rename a file or directory, within or across directories",
		Long: `Rename SRC to DST atomically; DST's parent must exist. A file replaces a file
at DST and a directory an empty directory (a non-empty one: exit code 1; a
file onto a directory or the other way round: 1). With -n (--no-clobber)
an existing DST, of any type, is never replaced: exit code 4, checked in
the rename itself, so a DST created meanwhile is not replaced either. The
inode keeps its id. Renaming a directory re-keys every descendant on its
home; --json prints how many were re-keyed.`,
		Example: `  ghba mv /home/alice/notes.txt /home/alice/archive/notes-2024.txt
  ghba mv -n /home/alice/draft.txt /home/alice/final.txt
  ghba mv /home/alice/projects /home/bob/projects`,
		Args: exactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			src, dst := args[0], args[1]
			for _, p := range args {
				if err := checkPath(p); err != nil {
					return err
				}
			}
			return withClient(cmd, o, func(ctx context.Context, c *client.Client) error {
				r, err := c.RenameWith(ctx, &rpc.RenameRequest{Src: src, Dst: dst, NoReplace: noClobber})
				if err != nil {
					return opError("mv", src+" "+dst, err)
				}
				if o.json {
					return writeJSON(cmd.OutOrStdout(), struct {
						Src     string `json:"src"`
						Dst     string `json:"dst"`
						Rekeyed int64  `json:"rekeyed"`
					}{src, dst, r.Rekeyed})
				}
				return nil
			})
		},
	}
	cmd.Flags().BoolVarP(&noClobber, "no-clobber", "n", false, "fail (exit code 4) instead of replacing an existing DST")
	return cmd
}

// newChmodCmd returns "ghba chmod".
func newChmodCmd(o *clientOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "chmod MODE PATH",
		Short: "Change a path's permission bits (octal MODE)",
		Long: `Set the permission bits of PATH to MODE, given in octal (0-7777; symbolic
modes are not supported). --json prints the updated inode.`,
		Example: `  ghba chmod 600 /home/alice/notes.txt
  ghba chmod 2775 /srv/shared`,
		Args: exactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			mode, err := parseMode(args[0])
			if err != nil {
				return err
			}
			p := args[1]
			if err := checkPath(p); err != nil {
				return err
			}
			return setAttr(cmd, o, &rpc.SetAttrRequest{Path: p, Mode: &mode}, "chmod")
		},
	}
}

// parseOwner parses "UID:GID", "UID", "UID:" or ":GID" (numeric ids).
func parseOwner(s string) (uid, gid *uint32, err error) {
	bad := usageErrorf("owner %q: want UID:GID, UID or :GID with numeric ids", s)
	u, g, hasColon := strings.Cut(s, ":")
	parse := func(x string) (*uint32, error) {
		if x == "" {
			return nil, nil
		}
		n, err := strconv.ParseUint(x, 10, 32)
		if err != nil {
			return nil, bad
		}
		v := uint32(n)
		return &v, nil
	}
	if uid, err = parse(u); err != nil {
		return nil, nil, err
	}
	if hasColon {
		if gid, err = parse(g); err != nil {
			return nil, nil, err
		}
	}
	if uid == nil && gid == nil {
		return nil, nil, bad
	}
	return uid, gid, nil
}

// newChownCmd returns "ghba chown".
func newChownCmd(o *clientOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "chown UID:GID PATH",
		Short: "Change a path's owner and group (numeric ids)",
		Long: `Set the owner and/or group of PATH. OWNER is UID:GID, UID (owner only) or
:GID (group only), numeric. --json prints the updated inode.`,
		Example: `  ghba chown 1000:1000 /home/alice
  ghba chown :100 /srv/shared`,
		Args: exactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			uid, gid, err := parseOwner(args[0])
			if err != nil {
				return err
			}
			p := args[1]
			if err := checkPath(p); err != nil {
				return err
			}
			return setAttr(cmd, o, &rpc.SetAttrRequest{Path: p, UID: uid, GID: gid}, "chown")
		},
	}
}

// setAttr sends req and prints the result for --json.
func setAttr(cmd *cobra.Command, o *clientOptions, req *rpc.SetAttrRequest, op string) error {
	return withClient(cmd, o, func(ctx context.Context, c *client.Client) error {
		r, err := c.SetAttr(ctx, req)
		if err != nil {
			return opError(op, req.Path, err)
		}
		if o.json {
			return writeJSON(cmd.OutOrStdout(), r.Inode)
		}
		return nil
	})
}
