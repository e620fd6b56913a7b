package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/ghba/ghba/cmd/ghba/mount"
	"github.com/ghba/ghba/node"
	"github.com/ghba/ghba/node/contents"
	"github.com/ghba/ghba/rpc"
	"github.com/ghba/ghba/rpc/client"
)

// envMountReady names the environment variable through which `ghba mount
// --background` tells the process it starts which file descriptor to
// report readiness on.
const envMountReady = "GHBA_MOUNT_READY_FD"

// mountFlags are the flags of `ghba mount`.
type mountFlags struct {
	background                   bool
	logFile, logLevel, tokenFile string
	entry, attr, negative        time.Duration
	allowOther, defaultPerms     bool
	retry                        time.Duration
	cacheEntries                 int
	debug, xattrs                bool
	atime                        string
	pprof                        string
}

// newMountCmds returns `ghba mount` and `ghba umount`.
func newMountCmds(co *clientOptions) []*cobra.Command {
	return []*cobra.Command{newMountCmd(co), newUmountCmd()}
}

func newMountCmd(co *clientOptions) *cobra.Command {
	var mf mountFlags
	cmd := &cobra.Command{
		Use:   "mount [flags] MOUNTPOINT",
		Short: "Mount the cluster as a POSIX file system (FUSE)",
		Long: `Mount the cluster's namespace on MOUNTPOINT, an empty directory, through FUSE:
unmodified programs (cp, tar, git, make, rsync, find) use it as a file system.
Metadata lives in the cluster; file contents live in the cluster's data store
(ghba data-store set URL), as blocks keyed by inode id.

Between mounts the consistency is close-to-open, as NFS gives: once close(2)
or fsync(2) returns in one mount, any mount that opens the file afterwards
sees its contents and size. Two mounts writing one file at once: the last
close wins block by block (4 MiB), and the size is the larger one unless a
writer truncated.

The mount runs in the foreground until it is unmounted (ghba umount, or
fusermount3 -u) or gets SIGINT or SIGTERM, which flush open files and
unmount. With --background it detaches once the mount serves.

With ACLs on, the mount presents a token (--token-file, --token, GHBA_TOKEN
or the saved login). New inodes are owned by the calling process's uid and
gid when the cluster lets the token act for them (ACLs off, or a token with
the management role: a trusted client, like NFS with AUTH_SYS; the kernel
then checks each caller's permissions, --default-permissions); any other
token acts as its own user.`,
		Example: `  ghba data-store set file:///var/lib/ghba-data
  mkdir -p /mnt/ghba && ghba mount --background /mnt/ghba
  cp -r ~/src/project /mnt/ghba/ && ls -l /mnt/ghba/project
  ghba umount /mnt/ghba`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error { return runMount(cmd, co, &mf, args[0]) },
	}
	f := cmd.Flags()
	f.BoolVar(&mf.background, "background", false, "detach once the mount serves (logs to --log-file)")
	f.StringVar(&mf.logFile, "log-file", "", "write the mount's log here (default: standard error; with --background, "+filepath.Join(os.TempDir(), "ghba-mount.NAME.log")+")")
	f.StringVar(&mf.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	f.StringVar(&mf.tokenFile, "token-file", "", "read the ACL token from this file")
	f.DurationVar(&mf.entry, "entry-timeout", time.Second, "how long the kernel may use a name without asking")
	f.DurationVar(&mf.attr, "attr-timeout", time.Second, "how long the kernel may use attributes without asking")
	f.DurationVar(&mf.negative, "negative-timeout", time.Second, "how long the kernel may use the absence of a name without asking")
	f.BoolVar(&mf.allowOther, "allow-other", false, "let users other than the one who mounted use the mount (needs user_allow_other in /etc/fuse.conf unless root)")
	f.BoolVar(&mf.defaultPerms, "default-permissions", true, "let the kernel check permissions by the inodes' modes and owners")
	f.DurationVar(&mf.retry, "retry-timeout", 20*time.Second, "how long an operation waits for an unavailable cluster before it fails with EIO")
	f.IntVar(&mf.cacheEntries, "cache-entries", mount.DefaultCache().Entries, "inodes the mount's metadata cache holds under leases")
	f.BoolVar(&mf.debug, "debug", false, "log every FUSE request")
	f.StringVar(&mf.atime, "atime", mount.AtimeRelative, "when reads update access times: relatime (a read after a change, or a day after the last, as Linux mounts do) or noatime")
	f.StringVar(&mf.pprof, "pprof", "", "serve Go's profiles (net/http/pprof) on this address, e.g. 127.0.0.1:6061, to see where the mount's memory and CPU go (no authentication: keep it on loopback)")
	f.BoolVar(&mf.xattrs, "xattrs", false, "serve extended attributes (getfattr, setfattr, cp --preserve=xattr, rsync -X); off, the kernel asks no more, and small writes cost half as much")
	return cmd
}

// runMount checks everything a mount needs (the mount point, the FUSE
// device, the cluster, its data store) so that each problem is one clear
// line and an exit code, then mounts.
func runMount(cmd *cobra.Command, co *clientOptions, mf *mountFlags, dir string) (err error) {
	defer func() {
		if err != nil {
			reportReady(fmt.Sprintf("%d %v", exitCode(err), err))
		}
	}()
	dir, err = filepath.Abs(dir)
	if err != nil {
		return usageErrorf("mount point: %v", err)
	}
	if err := mount.CheckAtime(mf.atime); err != nil {
		return usageErrorf("--atime: %v", err)
	}
	if mf.background && os.Getenv(envMountReady) == "" {
		return mountInBackground(cmd, mf, dir)
	}
	if err := checkMountPoint(dir); err != nil {
		return err
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		return fmt.Errorf("no FUSE device (/dev/fuse): %w: load the fuse module, or start the container with --device /dev/fuse --cap-add SYS_ADMIN", rpc.ErrUnavailable)
	}
	log, closeLog, err := mountLogger(mf, dir)
	if err != nil {
		return err
	}
	defer closeLog()
	if mf.pprof != "" {
		stopProfiles, err := serveProfiles(mf.pprof, log)
		if err != nil {
			return usageErrorf("--pprof: %v", err)
		}
		defer stopProfiles()
	}
	opts, data, err := mountOptions(cmd, co, mf, log)
	if err != nil {
		return err
	}
	fsys, err := mount.Mount(dir, opts)
	if err != nil {
		data.Close()
		return fmt.Errorf("%w (%w)", err, rpc.ErrUnavailable)
	}
	log.Info("mounted", "data_store", data.String())
	reportReady("")
	ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	done := make(chan struct{})
	go func() { fsys.Wait(); close(done) }()
	outside := false
	select {
	case <-done:
		outside = true
		log.Info("unmounted from outside")
	case <-ctx.Done():
		log.Info("signal received: flushing and unmounting")
	}
	uctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if outside {
		// The kernel has let go: the mount point may already hold a new
		// mount, which an unmount now would take down.
		fsys.Close(uctx)
		return nil
	}
	if err := fsys.Unmount(uctx); err != nil {
		// Busy: detach it, so that it goes once its users are done.
		log.Warn("unmount failed; detaching", "err", err)
		if derr := unix.Unmount(dir, unix.MNT_DETACH); derr != nil {
			log.Error("detaching failed", "err", derr)
		}
	}
	return nil
}

// serveProfiles serves Go's runtime profiles (net/http/pprof) on addr
// until the returned function is called, for example
//
//	go tool pprof http://127.0.0.1:6061/debug/pprof/heap
func serveProfiles(addr string, log *slog.Logger) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	srv := &http.Server{Handler: node.ProfilesHandler(), ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Warn("serving profiles stopped", "err", err)
		}
	}()
	log.Info("serving profiles", "addr", ln.Addr().String())
	return func() {
		srv.Close()
		<-done
	}, nil
}

// checkMountPoint accepts an existing empty directory (exit code 2
// otherwise).
func checkMountPoint(dir string) error {
	st, err := os.Stat(dir)
	switch {
	case err != nil:
		return usageErrorf("mount point %s: %v", dir, err)
	case !st.IsDir():
		return usageErrorf("mount point %s is not a directory", dir)
	}
	d, err := os.Open(dir)
	if err != nil {
		return usageErrorf("mount point %s: %v", dir, err)
	}
	defer d.Close()
	if names, _ := d.Readdirnames(1); len(names) > 0 {
		return usageErrorf("mount point %s is not empty", dir)
	}
	return nil
}

// mountOptions connects to the cluster and its data store.
func mountOptions(cmd *cobra.Command, co *clientOptions, mf *mountFlags, log *slog.Logger) (mount.Options, *contents.Store, error) {
	if mf.tokenFile != "" {
		b, err := os.ReadFile(mf.tokenFile)
		if err != nil {
			return mount.Options{}, nil, usageErrorf("--token-file: %v", err)
		}
		co.token = strings.TrimSpace(string(b))
		if err := cmd.Flags().Set("token", co.token); err != nil {
			return mount.Options{}, nil, err
		}
	}
	var copts client.Options
	c, err := co.clientWith(cmd, func(o *client.Options) { copts = *o })
	if err != nil {
		return mount.Options{}, nil, err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), co.timeout)
	defer cancel()
	if _, err := c.Stat(ctx, "/"); err != nil {
		return mount.Options{}, nil, fmt.Errorf("the cluster at %s: %w", strings.Join(c.Addrs(), ","), err)
	}
	ds, err := c.DataStore(ctx)
	if err != nil {
		return mount.Options{}, nil, fmt.Errorf("reading the cluster's data store: %w", err)
	}
	if ds.DataStore.URL == "" {
		return mount.Options{}, nil, usageErrorf("the cluster has no data store for file contents: set one with ghba data-store set URL")
	}
	data, err := contents.Open(ctx, ds.DataStore.URL)
	if err != nil {
		return mount.Options{}, nil, fmt.Errorf("the data store %s: %w: %w", ds.DataStore.URL, rpc.ErrUnavailable, err)
	}
	if err := data.Check(ctx); err != nil {
		data.Close()
		return mount.Options{}, nil, fmt.Errorf("the data store %s: %w: %w", ds.DataStore.URL, rpc.ErrUnavailable, err)
	}
	copts.Logger = log
	copts.Cache = mount.DefaultCache()
	copts.Cache.Entries = mf.cacheEntries
	return mount.Options{
		Client:             copts,
		Data:               data,
		Logger:             log,
		EntryTimeout:       mf.entry,
		AttrTimeout:        mf.attr,
		NegativeTimeout:    mf.negative,
		AllowOther:         mf.allowOther,
		DefaultPermissions: mf.defaultPerms,
		ActAsCaller:        true,
		RetryTimeout:       mf.retry,
		Debug:              mf.debug,
		Xattrs:             mf.xattrs,
		Atime:              mf.atime,
	}, data, nil
}

// mountLogger returns the mount's logger (text lines on --log-file or
// standard error).
func mountLogger(mf *mountFlags, dir string) (*slog.Logger, func(), error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(mf.logLevel)); err != nil {
		return nil, nil, usageErrorf("--log-level %q: want debug, info, warn or error", mf.logLevel)
	}
	var w io.Writer = os.Stderr
	closeLog := func() {}
	if mf.logFile != "" {
		f, err := os.OpenFile(mf.logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			return nil, nil, usageErrorf("--log-file: %v", err)
		}
		w, closeLog = f, func() { f.Close() }
	}
	h := slog.NewTextHandler(w, &slog.HandlerOptions{Level: level})
	return slog.New(h).With("mountpoint", dir), closeLog, nil
}

// mountInBackground starts the mount as a detached process and returns
// once it reports that it serves, or with its error line and exit code.
func mountInBackground(cmd *cobra.Command, mf *mountFlags, dir string) error {
	if err := checkMountPoint(dir); err != nil {
		return err
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("finding the ghba binary: %w", err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	defer r.Close()
	args := []string{}
	for _, a := range os.Args[1:] {
		if a != "--background" && a != "--background=true" {
			args = append(args, a)
		}
	}
	if mf.logFile == "" {
		mf.logFile = filepath.Join(os.TempDir(), "ghba-mount."+filepath.Base(dir)+".log")
		args = append([]string{"--log-file", mf.logFile}, args...)
	}
	child := exec.Command(exe, args...)
	child.Env = append(os.Environ(), envMountReady+"=3")
	child.ExtraFiles = []*os.File{w}
	child.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	child.Stdin, child.Stdout, child.Stderr = nil, nil, nil // /dev/null: the log is --log-file
	if err := child.Start(); err != nil {
		w.Close()
		return fmt.Errorf("starting the mount process: %w", err)
	}
	w.Close()
	go child.Wait() //nolint:errcheck // the parent leaves; the child outlives it
	line, rerr := bufio.NewReader(r).ReadString('\n')
	line = strings.TrimSpace(line)
	switch {
	case line == "ok":
		fmt.Fprintf(cmd.OutOrStdout(), "mounted on %s (pid %d, log %s)\n", dir, child.Process.Pid, mf.logFile)
		return nil
	case rerr != nil && line == "":
		return fmt.Errorf("the mount process exited before it served; see %s", mf.logFile)
	}
	code, msg, _ := strings.Cut(line, " ")
	return mountExit{code: code, msg: msg}
}

// mountExit is a background mount's failure: its exit code and message.
type mountExit struct{ code, msg string }

func (e mountExit) Error() string { return e.msg }

// exitCode returns the exit code the mount process reported (1 if it is
// not one).
func (e mountExit) exitCode() int {
	if c, err := strconv.Atoi(e.code); err == nil && c > 0 && c < 256 {
		return c
	}
	return exitError
}

// reportReady tells a `mount --background` parent that the mount serves
// (msg "") or why it failed.
func reportReady(msg string) {
	fd := os.Getenv(envMountReady)
	if fd != "3" {
		return
	}
	f := os.NewFile(3, "ready")
	if msg == "" {
		fmt.Fprintln(f, "ok")
	} else {
		fmt.Fprintln(f, msg)
	}
	f.Close()
}

func newUmountCmd() *cobra.Command {
	var lazy bool
	cmd := &cobra.Command{
		Use:   "umount [flags] MOUNTPOINT",
		Short: "Unmount a ghba mount, also one whose process died",
		Long: `Unmount a ghba mount. The mount process flushes its open files and exits.
A mount whose process was killed ("Transport endpoint is not connected") is
detached, so the mount point works again; a busy mount (a process has a file
open or its working directory there) fails with a message unless --lazy,
which detaches it at once and frees it when its users are done.`,
		Example: `  ghba umount /mnt/ghba
  ghba umount --lazy /mnt/ghba`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error { return runUmount(args[0], lazy) },
	}
	cmd.Flags().BoolVar(&lazy, "lazy", false, "detach a busy mount at once (it goes when its users are done)")
	return cmd
}

// runUmount unmounts dir: a clean unmount, or a detach when the mount's
// process is gone or --lazy.
func runUmount(dir string, lazy bool) error {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return usageErrorf("%v", err)
	}
	mounted, err := isFuseMount(dir)
	if err != nil {
		return err
	}
	if !mounted {
		return usageErrorf("%s is not a FUSE mount", dir)
	}
	_, statErr := os.Stat(dir)
	dead := errors.Is(statErr, syscall.ENOTCONN)
	flags := 0
	if lazy || dead {
		flags = unix.MNT_DETACH
	}
	if err := unmount(dir, flags); err != nil {
		if errors.Is(err, syscall.EBUSY) {
			return fmt.Errorf("%s is busy (a process has a file open or its working directory there): close it, or ghba umount --lazy", dir)
		}
		return fmt.Errorf("unmount %s: %w", dir, err)
	}
	return nil
}

// unmount unmounts dir: directly as root, through fusermount3 otherwise.
func unmount(dir string, flags int) error {
	if os.Geteuid() == 0 {
		return unix.Unmount(dir, flags)
	}
	args := []string{"-u", dir}
	if flags&unix.MNT_DETACH != 0 {
		args = []string{"-u", "-z", dir}
	}
	out, err := exec.Command("fusermount3", args...).CombinedOutput()
	if err != nil {
		if strings.Contains(string(out), "busy") {
			return syscall.EBUSY
		}
		return fmt.Errorf("fusermount3: %s: %w", strings.TrimSpace(string(out)), err)
	}
	return nil
}

// isFuseMount reports whether dir is the mount point of a FUSE file system
// (/proc/self/mountinfo).
func isFuseMount(dir string) (bool, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return false, fmt.Errorf("reading the mount table: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// id parent major:minor root mountpoint options ... - fstype source superoptions
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 || unescapeMount(fields[4]) != dir {
			continue
		}
		for i, fl := range fields {
			if fl == "-" && i+1 < len(fields) && strings.HasPrefix(fields[i+1], "fuse") {
				return true, nil
			}
		}
	}
	return false, sc.Err()
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var v int
			if _, err := fmt.Sscanf(s[i+1:i+4], "%03o", &v); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
