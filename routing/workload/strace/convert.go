package strace

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"maps"
	"path"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/ghba/ghba/routing/workload"
)

// Options control Convert.
type Options struct {
	// PIDAsClient gives every process its own client id (0, 1, 2, … in
	// order of first appearance in the trace); otherwise every record
	// comes from client 0. Threads (clone with CLONE_THREAD, when the
	// clone is traced) share their process's client.
	PIDAsClient bool
	// Cwd is the working directory the traced command started in, used to
	// resolve relative paths until a chdir or a -y decoration tells
	// better. "" means unknown: a relative path of a process whose working
	// directory is unknown waits until a -y decoration shows the directory
	// (if the process did not change directory in between); otherwise it
	// is skipped (and counted).
	Cwd string
	// Prefix keeps only paths equal to or under this directory (matched
	// before Rewrites; paths are not rebased, use a Rewrite for that). ""
	// keeps every path.
	Prefix string
	// KeepSystem keeps paths under /proc, /sys and /dev, which are dropped
	// by default: they are not part of a file system's namespace.
	KeepSystem bool
	// DropFailed drops failed calls instead of recording them as stat.
	DropFailed bool
	// Rewrites replace path prefixes in the output (the first match
	// wins), for example to hide a home directory. They apply to whole
	// components: Old "/home/al" does not match "/home/alice".
	Rewrites []Rewrite
}

// Rewrite maps paths equal to or under Old to the same place under New.
type Rewrite struct{ Old, New string }

// ParseRewrite parses "OLD=NEW" (both absolute paths).
func ParseRewrite(s string) (Rewrite, error) {
	old, nw, ok := strings.Cut(s, "=")
	if !ok {
		return Rewrite{}, fmt.Errorf("rewrite %q: want OLD=NEW: %w", s, ErrOptions)
	}
	r := Rewrite{Old: old, New: nw}
	return r, r.check()
}

func (r Rewrite) check() error {
	if !path.IsAbs(r.Old) || !path.IsAbs(r.New) {
		return fmt.Errorf("rewrite %s=%s: both paths must be absolute: %w", r.Old, r.New, ErrOptions)
	}
	return nil
}

// ErrOptions is wrapped by errors about invalid Options.
var ErrOptions = errors.New("strace: invalid options")

func (o *Options) normalize() error {
	if o.Cwd != "" {
		if !path.IsAbs(o.Cwd) {
			return fmt.Errorf("working directory %q is not absolute: %w", o.Cwd, ErrOptions)
		}
		o.Cwd = path.Clean(o.Cwd)
	}
	if o.Prefix != "" {
		if !path.IsAbs(o.Prefix) {
			return fmt.Errorf("prefix %q is not absolute: %w", o.Prefix, ErrOptions)
		}
		o.Prefix = path.Clean(o.Prefix)
	}
	rw := make([]Rewrite, len(o.Rewrites))
	for i, r := range o.Rewrites {
		if err := r.check(); err != nil {
			return err
		}
		rw[i] = Rewrite{Old: path.Clean(r.Old), New: path.Clean(r.New)}
	}
	o.Rewrites = rw
	return nil
}

// Stats describes a conversion.
type Stats struct {
	Lines     int // lines read
	Calls     int // system calls parsed (an unfinished call and its resumption count once)
	Records   int // records written, exists records included
	Exists    int // exists records written
	Processes int // distinct process ids seen
	Clients   int // distinct client ids written
	// Skipped counts lines and calls that produced no record, by reason.
	Skipped map[string]int
}

// Skip reasons counted in Stats.Skipped.
const (
	SkipUnparsable   = "unparsable line"
	SkipTooLong      = "line too long"
	SkipMessage      = "strace message"
	SkipOther        = "other system call"
	SkipFDOnly       = "fd-only call (fstat, fd without path)"
	SkipUnknownFD    = "unknown file descriptor"
	SkipUnknownCwd   = "relative path, unknown working directory"
	SkipBadPath      = "missing, truncated or invalid path"
	SkipSystem       = "path under /proc, /sys or /dev"
	SkipPrefix       = "path outside --prefix"
	SkipFailed       = "failed call (dropped)"
	SkipUnknownRet   = "unknown result"
	SkipNotResumed   = "unfinished call never resumed"
	SkipOrphanResume = "resumed call without its start"
	SkipRereaddir    = "getdents64 after the first on an fd"
	SkipExchange     = "rename with RENAME_EXCHANGE"
)

func (s *Stats) skip(reason string) {
	if s.Skipped == nil {
		s.Skipped = make(map[string]int)
	}
	s.Skipped[reason]++
}

// WriteSummary writes a human-readable summary, one item per line.
func (s Stats) WriteSummary(w io.Writer) error {
	_, err := fmt.Fprintf(w, "strace: %d lines, %d system calls from %d processes → %d records (%d exists) from %d clients\n",
		s.Lines, s.Calls, s.Processes, s.Records, s.Exists, s.Clients)
	if err != nil {
		return fmt.Errorf("write summary: %w", err)
	}
	for _, k := range slices.Sorted(maps.Keys(s.Skipped)) {
		if _, err := fmt.Fprintf(w, "  skipped %8d  %s\n", s.Skipped[k], k); err != nil {
			return fmt.Errorf("write summary: %w", err)
		}
	}
	return nil
}

// maxLine is the longest strace line Convert reads; longer lines (huge
// execve argument lists, say) are skipped.
const maxLine = 1 << 20

// Convert reads strace output from r and writes the trace to w (the caller
// flushes w). It returns what it did; the error is about reading or
// writing, never about malformed strace lines, which are skipped and
// counted.
//
// Record strace with -f (follow children), -tt or -ttt (timestamps; -t
// loses sub-second order, -r is not supported), and ideally -y (file
// descriptors decorated with their paths, AT_FDCWD with the working
// directory). The calls to trace are %file and getdents64; add %process
// (clone, fork, vfork: children inherit the working directory and file
// descriptors) and fchdir when not using -y.
//
// Mapping (failed calls, = -1 ERRNO, become stat of their path unless
// Options.DropFailed: a metadata service answers those lookups too):
//
//	stat lstat stat64 lstat64 newfstatat fstatat64 statx access
//	faccessat faccessat2 readlink readlinkat execve execveat   → stat
//	chdir                                                      → stat (and the new cwd)
//	open openat openat2                                        → open; with O_CREAT → create
//	                                                             unless the path is known to exist
//	                                                             (and not O_EXCL)
//	creat link linkat symlink symlinkat                        → create (of the new name)
//	mkdir mkdirat                                              → mkdir
//	unlink unlinkat                                            → unlink (rmdir with AT_REMOVEDIR)
//	rmdir                                                      → rmdir
//	rename renameat renameat2                                  → rename (RENAME_EXCHANGE skipped)
//	getdents64 getdents                                        → readdir of the fd's directory,
//	                                                             once per open
//	fchdir                                                     → the new cwd, no record
//
// Relative paths resolve against the calling process's working directory,
// *at paths against their directory fd (known from an earlier open or a
// -y decoration); paths are cleaned lexically (path.Clean, symlinks are not
// followed). A relative path met while the working directory is unknown
// resolves against the directory a later -y decoration shows, unless the
// process changes directory first. An fstat-like call (empty path with AT_EMPTY_PATH) is not a
// lookup and is skipped. A child process inherits its parent's working
// directory and descriptors when its clone, fork or vfork is traced;
// otherwise it starts from the working directory of the first process.
//
// Output: the exists records first (time 0, sorted by path, directories
// with a trailing slash): every path the trace shows to exist before it
// creates it (a successful lookup, open, unlink, rename or listing, or an
// EEXIST); then the timed records sorted by the start time of their call,
// in seconds since the earliest timestamp (a -tt clock that wraps past
// midnight moves to the next day). A path is a directory when the trace
// says so anywhere: O_DIRECTORY, S_IFDIR in a stat result, a listing,
// mkdir, rmdir, chdir, or a successfully accessed path below it. Without
// timestamps, records are 1 µs apart in line order. A rename of one path
// inside and one outside the kept paths (Prefix, /proc…) becomes an
// unlink or a create.
func Convert(r io.Reader, w *workload.Writer, opt Options) (Stats, error) {
	c, err := newConverter(opt)
	if err != nil {
		return Stats{}, err
	}
	br := bufio.NewReaderSize(r, 64<<10)
	var long []byte // a line longer than the buffer, so far
	tooLong := false
	for {
		b, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			if len(long)+len(b) > maxLine {
				tooLong, long = true, long[:0]
			}
			if !tooLong {
				long = append(long, b...)
			}
			continue
		}
		switch {
		case tooLong || len(long)+len(b) > maxLine:
			c.stats.Lines++
			c.stats.skip(SkipTooLong)
			tooLong, long = false, long[:0]
		case len(long) > 0:
			c.line(string(append(long, b...)))
			long = long[:0]
		case len(b) > 0:
			c.line(string(b))
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return c.stats, fmt.Errorf("read strace output: %w", err)
		}
	}
	return c.finish(w)
}

// ---- conversion state ----

type fdEntry struct {
	path   string
	listed bool // a getdents was recorded since the open
}

type fdTable struct{ m map[int]*fdEntry }

func (t *fdTable) clone() *fdTable {
	n := &fdTable{m: make(map[int]*fdEntry, len(t.m))}
	for k, v := range t.m {
		e := *v
		n.m[k] = &e
	}
	return n
}

type fsState struct {
	cwd string
	set bool // changed by this process (chdir, fchdir, -y)
	// pending indexes the events (in converter.events) whose relative
	// paths wait for the working directory while it is unknown.
	pending []int
}

type proc struct {
	fs       *fsState
	fds      *fdTable
	leader   int // thread-group leader (the client)
	implicit bool
	pending  *Line
	pendLine int
}

// op kinds before the namespace pass decides create versus open.
type evKind uint8

const (
	evLookup evKind = iota + 1 // stat, open, readdir, failed calls
	evOpenCr                   // open with O_CREAT (create or open)
	evCreate                   // creat, link, symlink, open O_CREAT|O_EXCL
	evMkdir
	evUnlink
	evRmdir
	evRename
)

type event struct {
	t      time.Duration
	line   int
	pid    int
	kind   evKind
	op     workload.Op // for evLookup
	path   string
	path2  string
	failed bool
	errno  string
	dir    bool // the call shows path is a directory
}

type converter struct {
	opt     Options
	stats   Stats
	procs   map[int]*proc
	leaders map[int]int // pid → thread-group leader, kept after exits
	root    *proc
	events  []event
	sawTime bool
	firstT  time.Duration // earliest timestamp
	// -tt clock handling
	lastRaw time.Duration
	dayOff  time.Duration
	lastT   time.Duration
}

func newConverter(opt Options) (*converter, error) {
	if err := opt.normalize(); err != nil {
		return nil, err
	}
	return &converter{opt: opt, procs: make(map[int]*proc), leaders: make(map[int]int)}, nil
}

// proc returns the state of pid, creating it (inheriting from the first
// process) when the pid is new.
func (c *converter) proc(pid int) *proc {
	if p := c.procs[pid]; p != nil {
		return p
	}
	p := &proc{fds: &fdTable{m: map[int]*fdEntry{}}, leader: pid}
	if c.root == nil {
		p.fs = &fsState{cwd: c.opt.Cwd}
		c.root = p
	} else {
		p.fs = &fsState{cwd: c.root.fs.cwd}
		p.implicit = true
	}
	c.procs[pid] = p
	if _, ok := c.leaders[pid]; !ok {
		c.leaders[pid] = pid
		c.stats.Processes++
	}
	return p
}

func (c *converter) line(s string) {
	c.stats.Lines++
	l, err := ParseLine(s)
	if err != nil {
		if errors.Is(err, ErrMessage) {
			c.stats.skip(SkipMessage)
		} else if strings.TrimSpace(s) != "" {
			c.stats.skip(SkipUnparsable)
		}
		return
	}
	t := c.clock(l)
	p := c.proc(l.PID)
	switch l.Kind {
	case Signal:
		return
	case Exit:
		if p.pending != nil {
			c.stats.skip(SkipNotResumed)
		}
		delete(c.procs, l.PID)
		return
	case Unfinished:
		if p.pending != nil {
			c.stats.skip(SkipNotResumed)
		}
		l.Time = t
		p.pending, p.pendLine = &l, c.stats.Lines
		return
	case Resumed:
		if p.pending == nil || p.pending.Name != l.Name {
			c.stats.skip(SkipOrphanResume)
			p.pending = nil
			return
		}
		start := p.pending
		p.pending = nil
		args := start.Args
		switch {
		case args == "":
			args = l.Args
		case l.Args != "":
			args = strings.TrimRight(args, ", ") + ", " + strings.TrimLeft(l.Args, ", ")
		}
		c.call(p, l.PID, start.Time, p.pendLine, start.Name, args, l.Ret)
	case Call:
		c.call(p, l.PID, t, c.stats.Lines, l.Name, l.Args, l.Ret)
	}
}

// clock turns a line's timestamp into a monotone time: a -tt clock that
// goes back by more than 12 hours has passed midnight.
func (c *converter) clock(l Line) time.Duration {
	if !l.HasTime {
		return c.lastT
	}
	if c.sawTime && l.Time+12*time.Hour < c.lastRaw {
		c.dayOff += 24 * time.Hour
	}
	c.lastRaw = l.Time
	c.lastT = l.Time + c.dayOff
	if !c.sawTime || c.lastT < c.firstT {
		c.firstT = c.lastT
	}
	c.sawTime = true
	return c.lastT
}

// resolve makes name absolute against the fd argument dirArg ("" for the
// working directory). It records why it failed in the stats. The result
// is relative (cleaned) when the working directory is unknown.
func (c *converter) resolve(p *proc, dirArg, name string) (string, bool) {
	if name == "" {
		c.stats.skip(SkipBadPath)
		return "", false
	}
	base := ""
	if dirArg != "" {
		fd, cwd, deco, ok := FD(dirArg)
		switch {
		case !ok:
			c.stats.skip(SkipUnknownFD)
			return "", false
		case cwd:
			if deco != "" {
				c.setCwd(p.fs, path.Clean(deco), true)
			}
		case deco != "":
			base = path.Clean(deco)
		default:
			if e := p.fds.m[fd]; e != nil {
				base = e.path
			}
		}
		if !cwd && base == "" && !path.IsAbs(name) {
			c.stats.skip(SkipUnknownFD)
			return "", false
		}
	}
	if path.IsAbs(name) {
		return path.Clean(name), true
	}
	if base == "" {
		base = p.fs.cwd
	}
	if base == "" {
		// Relative to a working directory not known yet: emit keeps
		// the event until setCwd learns it (finish counts the rest).
		return path.Clean(name), true
	}
	return path.Join(base, name), true
}

// setCwd changes a working directory. observed is true when the
// directory was seen (a -y decoration) rather than changed: if it was
// unknown, it was the same since the last change, so the relative paths
// waiting for it resolve against it.
func (c *converter) setCwd(fs *fsState, cwd string, observed bool) {
	if observed && fs.cwd == "" {
		c.resolvePending(fs.pending, cwd)
	}
	fs.pending = nil
	fs.cwd, fs.set = cwd, true
}

// resolvePending makes the relative paths of the events pending absolute
// against cwd.
func (c *converter) resolvePending(pending []int, cwd string) {
	for _, i := range pending {
		ev := &c.events[i]
		if !path.IsAbs(ev.path) {
			ev.path = path.Join(cwd, ev.path)
		}
		if ev.kind == evRename && !path.IsAbs(ev.path2) {
			ev.path2 = path.Join(cwd, ev.path2)
		}
	}
}

// pathArg decodes args[i] as a path string and resolves it.
func (c *converter) pathArg(p *proc, args []string, dirIdx, i int) (string, bool) {
	if i >= len(args) {
		c.stats.skip(SkipBadPath)
		return "", false
	}
	s, trunc, ok := String(args[i])
	if !ok || trunc || strings.IndexByte(s, 0) >= 0 {
		c.stats.skip(SkipBadPath)
		return "", false
	}
	dir := ""
	if dirIdx >= 0 {
		if dirIdx >= len(args) {
			c.stats.skip(SkipBadPath)
			return "", false
		}
		dir = args[dirIdx]
	}
	return c.resolve(p, dir, s)
}

func (c *converter) fdPath(p *proc, arg string) (int, string, bool) {
	fd, cwd, deco, ok := FD(arg)
	switch {
	case !ok:
		return 0, "", false
	case cwd:
		if deco != "" {
			return fd, path.Clean(deco), true
		}
		return fd, p.fs.cwd, p.fs.cwd != ""
	case deco != "":
		return fd, path.Clean(deco), true
	}
	if e := p.fds.m[fd]; e != nil {
		return fd, e.path, true
	}
	return fd, "", false
}

// emit adds an event; one with a relative path waits for p's working
// directory.
func (c *converter) emit(p *proc, ev event) {
	if !path.IsAbs(ev.path) || ev.kind == evRename && !path.IsAbs(ev.path2) {
		p.fs.pending = append(p.fs.pending, len(c.events))
	}
	c.events = append(c.events, ev)
}

// sysCall is one complete system call being converted.
type sysCall struct {
	p       *proc
	name    string
	argText string
	args    []string
	res     Result
	// ev is the event the call emits, with its time, line, process and
	// outcome set.
	ev event
}

// callHandler converts one kind of system call.
type callHandler func(c *converter, sc *sysCall)

// callHandlers maps the name of every system call the converter handles
// to its handler; the others are skipped (SkipOther).
var callHandlers = func() map[string]callHandler {
	m := map[string]callHandler{}
	add := func(h callHandler, names ...string) {
		for _, n := range names {
			m[n] = h
		}
	}
	add(lookupCall(-1, 0), "stat", "lstat", "stat64", "lstat64", "access", "readlink", "execve")
	add(statAtCall, "newfstatat", "fstatat64", "statx", "faccessat", "faccessat2", "readlinkat", "execveat")
	add(chdirCall, "chdir")
	add(fchdirCall, "fchdir")
	add(openCall, "open", "openat", "openat2", "creat")
	add(getdentsCall, "getdents64", "getdents")
	add(changeCall(evMkdir, -1, 0), "mkdir")
	add(changeCall(evMkdir, 0, 1), "mkdirat")
	add(changeCall(evRmdir, -1, 0), "rmdir")
	add(changeCall(evUnlink, -1, 0), "unlink")
	add(unlinkatCall, "unlinkat")
	add(changeCall(evCreate, -1, 1), "link", "symlink")
	add(changeCall(evCreate, 2, 3), "linkat")
	add(changeCall(evCreate, 1, 2), "symlinkat")
	add(renameCall, "rename", "renameat", "renameat2")
	add(cloneCall, "clone", "clone3", "fork", "vfork")
	add(closeCall, "close")
	add(dupCall, "dup", "dup2", "dup3")
	return m
}()

// call handles one complete system call.
func (c *converter) call(p *proc, pid int, t time.Duration, line int, name, argText, ret string) {
	c.stats.Calls++
	res, err := ParseResult(ret)
	if err != nil {
		c.stats.skip(SkipUnknownRet)
		return
	}
	h := callHandlers[name]
	if !res.Known && name != "execve" && name != "execveat" {
		// execve's result is "?" when another thread's exec wins; other
		// calls with "?" were cut by the process's death.
		if h != nil {
			c.stats.skip(SkipUnknownRet)
		} else {
			c.stats.skip(SkipOther)
		}
		return
	}
	if h == nil {
		c.stats.skip(SkipOther)
		return
	}
	h(c, &sysCall{p: p, name: name, argText: argText, args: SplitArgs(argText), res: res,
		ev: event{t: t, line: line, pid: pid, failed: res.Failed(), errno: res.Errno}})
}

// handled reports whether call converts system calls called name.
func handled(name string) bool { return callHandlers[name] != nil }

// lookupCall returns the handler of a call that looks the path at
// args[pathIdx] up (relative to the directory fd at args[dirIdx], if not
// negative).
func lookupCall(dirIdx, pathIdx int) callHandler {
	return func(c *converter, sc *sysCall) { c.lookup(sc, workload.OpStat, dirIdx, pathIdx) }
}

// lookup emits a lookup of the path at args[pathIdx] by op.
func (c *converter) lookup(sc *sysCall, op workload.Op, dirIdx, pathIdx int) {
	pth, ok := c.pathArg(sc.p, sc.args, dirIdx, pathIdx)
	if !ok {
		return
	}
	ev := sc.ev
	ev.kind, ev.op, ev.path = evLookup, op, pth
	ev.dir = !ev.failed && strings.Contains(sc.argText, "S_IFDIR")
	c.emit(sc.p, ev)
}

// statAtCall handles the *at forms of stat, access, readlink and execve.
func statAtCall(c *converter, sc *sysCall) {
	if len(sc.args) >= 2 && sc.args[1] == `""` {
		c.stats.skip(SkipFDOnly) // fstat through AT_EMPTY_PATH
		return
	}
	c.lookup(sc, workload.OpStat, 0, 1)
}

func chdirCall(c *converter, sc *sysCall) {
	pth, ok := c.pathArg(sc.p, sc.args, -1, 0)
	if !ok {
		return
	}
	ev := sc.ev
	ev.kind, ev.op, ev.path, ev.dir = evLookup, workload.OpStat, pth, !ev.failed
	c.emit(sc.p, ev)
	if !ev.failed {
		if path.IsAbs(pth) {
			c.setCwd(sc.p.fs, pth, false)
		} else {
			c.setCwd(sc.p.fs, "", false) // relative to an unknown directory
		}
	}
}

func fchdirCall(c *converter, sc *sysCall) {
	if len(sc.args) < 1 {
		c.stats.skip(SkipBadPath)
		return
	}
	if _, pth, ok := c.fdPath(sc.p, sc.args[0]); ok && !sc.ev.failed {
		c.setCwd(sc.p.fs, pth, false)
		c.dirHint(sc.p, sc.ev, pth)
	} else {
		c.stats.skip(SkipUnknownFD)
	}
}

// openCall handles open, openat, openat2 and creat: a create, an open
// that may create, or a lookup; the descriptor it returns is remembered.
func openCall(c *converter, sc *sysCall) {
	args := sc.args
	dirIdx, pathIdx, flags := -1, 0, ""
	switch sc.name {
	case "openat", "openat2":
		dirIdx, pathIdx = 0, 1
		if len(args) > 2 {
			flags = args[2]
		}
	case "open":
		if len(args) > 1 {
			flags = args[1]
		}
	case "creat":
		flags = "O_CREAT|O_WRONLY|O_TRUNC"
	}
	pth, ok := c.pathArg(sc.p, args, dirIdx, pathIdx)
	if !ok {
		return
	}
	ev := sc.ev
	ev.path = pth
	switch {
	case ev.failed:
		ev.kind, ev.op = evLookup, workload.OpStat
	case HasFlag(flags, "O_CREAT") && HasFlag(flags, "O_EXCL"):
		ev.kind = evCreate
	case HasFlag(flags, "O_CREAT"):
		ev.kind = evOpenCr
	default:
		ev.kind, ev.op = evLookup, workload.OpOpen
		ev.dir = HasFlag(flags, "O_DIRECTORY")
	}
	if fd := int(sc.res.Value); !ev.failed && sc.res.Value >= 0 {
		if path.IsAbs(pth) {
			sc.p.fds.m[fd] = &fdEntry{path: pth}
		} else {
			delete(sc.p.fds.m, fd)
		}
	}
	c.emit(sc.p, ev)
}

// getdentsCall emits a readdir of the directory open at the descriptor,
// once per opening.
func getdentsCall(c *converter, sc *sysCall) {
	if len(sc.args) < 1 {
		c.stats.skip(SkipBadPath)
		return
	}
	fd, pth, ok := c.fdPath(sc.p, sc.args[0])
	if !ok {
		c.stats.skip(SkipUnknownFD)
		return
	}
	e := sc.p.fds.m[fd]
	if e == nil || e.path != pth {
		e = &fdEntry{path: pth}
		sc.p.fds.m[fd] = e
	}
	if e.listed {
		c.stats.skip(SkipRereaddir)
		return
	}
	e.listed = true
	ev := sc.ev
	ev.kind, ev.op, ev.path, ev.dir = evLookup, workload.OpReaddir, pth, !ev.failed
	c.emit(sc.p, ev)
}

// changeCall returns the handler of a call that makes a change of kind to
// the path at args[pathIdx] (relative to the directory fd at
// args[dirIdx], if not negative).
func changeCall(kind evKind, dirIdx, pathIdx int) callHandler {
	return func(c *converter, sc *sysCall) { c.change(sc.p, &sc.ev, kind, sc.args, dirIdx, pathIdx) }
}

func unlinkatCall(c *converter, sc *sysCall) {
	kind := evUnlink
	if len(sc.args) > 2 && HasFlag(sc.args[2], "AT_REMOVEDIR") {
		kind = evRmdir
	}
	c.change(sc.p, &sc.ev, kind, sc.args, 0, 1)
}

// renameCall handles rename, renameat and renameat2 (but for an
// exchange); a failed rename is a lookup of its source.
func renameCall(c *converter, sc *sysCall) {
	d1, p1, d2, p2 := -1, 0, -1, 1
	if sc.name != "rename" {
		d1, p1, d2, p2 = 0, 1, 2, 3
	}
	if sc.name == "renameat2" && len(sc.args) > 4 && HasFlag(sc.args[4], "RENAME_EXCHANGE") {
		c.stats.skip(SkipExchange)
		return
	}
	src, ok := c.pathArg(sc.p, sc.args, d1, p1)
	if !ok {
		return
	}
	ev := sc.ev
	if ev.failed {
		ev.kind, ev.op, ev.path = evLookup, workload.OpStat, src
		c.emit(sc.p, ev)
		return
	}
	dst, ok := c.pathArg(sc.p, sc.args, d2, p2)
	if !ok {
		return
	}
	ev.kind, ev.path, ev.path2 = evRename, src, dst
	c.emit(sc.p, ev)
}

func cloneCall(c *converter, sc *sysCall) {
	if !sc.ev.failed && sc.res.Value > 0 {
		c.child(sc.p, int(sc.res.Value), sc.name, sc.argText)
	}
}

func closeCall(c *converter, sc *sysCall) {
	if len(sc.args) == 1 && !sc.ev.failed {
		if fd, _, _, ok := FD(sc.args[0]); ok {
			delete(sc.p.fds.m, fd)
		}
	}
}

func dupCall(c *converter, sc *sysCall) {
	if len(sc.args) >= 1 && !sc.ev.failed && sc.res.Value >= 0 {
		if _, pth, ok := c.fdPath(sc.p, sc.args[0]); ok {
			sc.p.fds.m[int(sc.res.Value)] = &fdEntry{path: pth}
		}
	}
}

// dirHint records that pth is a directory without a timed record.
func (c *converter) dirHint(p *proc, ev event, pth string) {
	ev.kind, ev.path, ev.dir = 0, pth, true
	c.emit(p, ev)
}

// change handles the namespace-changing calls of one path; a failed call
// becomes a stat.
func (c *converter) change(p *proc, ev *event, kind evKind, args []string, dirIdx, pathIdx int) {
	pth, ok := c.pathArg(p, args, dirIdx, pathIdx)
	if !ok {
		return
	}
	ev.path = pth
	if ev.failed {
		ev.kind, ev.op = evLookup, workload.OpStat
	} else {
		ev.kind = kind
		ev.dir = kind == evMkdir || kind == evRmdir
	}
	c.emit(p, *ev)
}

// child sets up the state of a new process or thread.
func (c *converter) child(parent *proc, pid int, name, args string) {
	shareFS := name == "clone" || name == "clone3"
	shareFiles, thread := shareFS && HasFlag(args, "CLONE_FILES"), shareFS && HasFlag(args, "CLONE_THREAD")
	shareFS = shareFS && HasFlag(args, "CLONE_FS")
	ch := c.procs[pid]
	if ch == nil {
		ch = &proc{}
		c.procs[pid] = ch
		if _, ok := c.leaders[pid]; !ok {
			c.stats.Processes++
		}
	} else if !ch.implicit {
		return // a pid seen twice: keep what it did
	}
	ch.implicit = false
	ch.leader = pid
	if thread {
		ch.leader = parent.leader
	}
	c.leaders[pid] = ch.leader
	// The child may have run before its parent's clone returned; its
	// relative paths, if any, resolve against the parent's directory.
	if ch.fs == nil || !ch.fs.set {
		var pending []int
		if ch.fs != nil {
			pending = ch.fs.pending
		}
		if shareFS {
			ch.fs = parent.fs
		} else {
			ch.fs = &fsState{cwd: parent.fs.cwd}
		}
		if ch.fs.cwd != "" {
			c.resolvePending(pending, ch.fs.cwd)
		} else {
			ch.fs.pending = append(ch.fs.pending, pending...)
		}
	}
	switch {
	case ch.fds == nil:
		if shareFiles {
			ch.fds = parent.fds
		} else {
			ch.fds = parent.fds.clone()
		}
	case shareFiles:
		for fd, e := range ch.fds.m {
			parent.fds.m[fd] = e
		}
		ch.fds = parent.fds
	default:
		for fd, e := range parent.fds.m {
			if _, ok := ch.fds.m[fd]; !ok {
				ne := *e
				ch.fds.m[fd] = &ne
			}
		}
	}
}

// ---- output ----

// keep applies the path filters and rewrites; it returns the output path.
func (c *converter) keep(p string) (string, string) {
	if !c.opt.KeepSystem {
		for _, sys := range [...]string{"/proc", "/sys", "/dev"} {
			if under(p, sys) {
				return "", SkipSystem
			}
		}
	}
	if c.opt.Prefix != "" && !under(p, c.opt.Prefix) {
		return "", SkipPrefix
	}
	for _, r := range c.opt.Rewrites {
		if under(p, r.Old) {
			if r.Old == "/" {
				return path.Join(r.New, p), ""
			}
			return path.Join(r.New, p[len(r.Old):]), ""
		}
	}
	return p, ""
}

// under reports whether p is dir or below it.
func under(p, dir string) bool {
	if dir == "/" {
		return true
	}
	return p == dir || strings.HasPrefix(p, dir) && len(p) > len(dir) && p[len(dir)] == '/'
}

// existence of a path during the namespace pass.
type existence uint8

const (
	unknown existence = iota
	present
	absent
)

type namespace struct {
	state   map[string]existence
	initial map[string]bool // paths declared with exists
	dirs    map[string]bool
}

// seen marks p as present; a path first seen present existed before the
// trace.
func (ns *namespace) seen(p string) {
	if ns.state[p] == unknown {
		ns.initial[p] = true
	}
	ns.state[p] = present
}

func (ns *namespace) markDir(p string, ancestors bool) {
	ns.dirs[p] = true
	if ancestors {
		for q := path.Dir(p); q != "/" && !ns.dirs[q]; q = path.Dir(q) {
			ns.dirs[q] = true
		}
	}
}

func (c *converter) finish(w *workload.Writer) (Stats, error) {
	for _, p := range c.procs {
		if p.pending != nil {
			c.stats.skip(SkipNotResumed)
		}
	}
	evs := c.events
	if !c.sawTime {
		for i := range evs {
			evs[i].t = time.Duration(evs[i].line) * time.Microsecond
		}
	}
	sort.SliceStable(evs, func(i, j int) bool { return evs[i].t < evs[j].t })
	base := c.firstT
	if len(evs) > 0 && (!c.sawTime || evs[0].t < base) {
		base = evs[0].t // lines without timestamps before the first one
	}
	leaders := c.leaders
	ns := &namespace{state: map[string]existence{}, initial: map[string]bool{}, dirs: map[string]bool{}}
	clients := map[int]int{}
	var recs []workload.Record
	for _, ev := range evs {
		if !path.IsAbs(ev.path) || ev.kind == evRename && !path.IsAbs(ev.path2) {
			c.stats.skip(SkipUnknownCwd)
			continue
		}
		rec, ok := c.record(ev, ns)
		if !ok {
			continue
		}
		rec.Time = ev.t - base
		if c.opt.PIDAsClient {
			leader, ok := leaders[ev.pid]
			if !ok {
				leader = ev.pid
			}
			id, ok := clients[leader]
			if !ok {
				id = len(clients)
				clients[leader] = id
			}
			rec.Client = id
		} else {
			clients[0] = 0
		}
		recs = append(recs, rec)
	}
	c.stats.Clients = len(clients)
	// Exists records: sorted paths put parents first.
	for _, p := range slices.Sorted(maps.Keys(ns.initial)) {
		if p == "/" {
			continue
		}
		if err := w.Write(workload.Record{Op: workload.OpExists, Path: p, Dir: ns.dirs[p]}); err != nil {
			return c.stats, err
		}
		c.stats.Exists++
		c.stats.Records++
	}
	for _, rec := range recs {
		switch rec.Op {
		case workload.OpStat, workload.OpOpen:
			rec.Dir = ns.dirs[rec.Path] && rec.Path != "/"
		case workload.OpRename:
			rec.Dir = ns.dirs[rec.Path] || ns.dirs[rec.Path2]
		}
		if err := w.Write(rec); err != nil {
			return c.stats, err
		}
		c.stats.Records++
	}
	return c.stats, nil
}

// record runs the namespace pass for one event and returns its record.
func (c *converter) record(ev event, ns *namespace) (workload.Record, bool) {
	p, why := c.keep(ev.path)
	p2, why2 := "", ""
	if ev.kind == evRename {
		p2, why2 = c.keep(ev.path2)
	}
	if ev.kind == 0 { // a directory hint only
		if why == "" {
			ns.markDir(p, true)
		}
		return workload.Record{}, false
	}
	if ev.failed && c.opt.DropFailed {
		c.stats.skip(SkipFailed)
		return workload.Record{}, false
	}
	if ev.kind == evRename && (why == "") != (why2 == "") {
		// One side is filtered out: the other appears or disappears.
		if why == "" {
			ev.kind = evUnlink
			if ns.dirs[p] {
				ev.kind = evRmdir
			}
		} else {
			ev.kind, p, why = evCreate, p2, ""
		}
	}
	if why != "" {
		c.stats.skip(why)
		return workload.Record{}, false
	}
	rec := workload.Record{Path: p}
	if ev.dir {
		ns.markDir(p, false)
	}
	switch ev.kind {
	case evLookup:
		rec.Op = ev.op
		switch {
		case !ev.failed || ev.errno == "EEXIST":
			ns.seen(p)
			if p != "/" {
				ns.markDir(path.Dir(p), true)
			}
		case ev.errno == "ENOENT" && ns.state[p] == unknown:
			ns.state[p] = absent
		}
	case evOpenCr, evCreate:
		rec.Op = workload.OpOpen
		if ev.kind == evCreate || ns.state[p] != present {
			rec.Op = workload.OpCreate
		}
		if rec.Op == workload.OpCreate && ns.state[p] == unknown {
			ns.state[p] = absent // created: it was not there before
		}
		ns.seen(p)
		ns.markDir(path.Dir(p), true)
	case evMkdir:
		rec.Op = workload.OpMkdir
		if ns.state[p] == unknown {
			ns.state[p] = absent
		}
		ns.seen(p)
		ns.markDir(p, true)
	case evUnlink, evRmdir:
		rec.Op = workload.OpUnlink
		if ev.kind == evRmdir {
			rec.Op = workload.OpRmdir
		}
		ns.seen(p)
		ns.markDir(path.Dir(p), true)
		ns.state[p] = absent
	case evRename:
		rec.Op, rec.Path2 = workload.OpRename, p2
		ns.seen(p)
		ns.markDir(path.Dir(p), true)
		ns.markDir(path.Dir(p2), true)
		if ns.state[p2] == unknown {
			ns.state[p2] = absent
		}
		// Move the known states of a directory's subtree.
		var moved []string
		if ns.dirs[p] {
			prefix := p + "/"
			for q := range ns.state {
				if strings.HasPrefix(q, prefix) {
					moved = append(moved, q)
				}
			}
		}
		for _, q := range moved {
			nq := p2 + q[len(p):]
			ns.state[nq] = ns.state[q]
			ns.state[q] = absent
			if ns.dirs[q] {
				ns.dirs[nq] = true
			}
		}
		if ns.dirs[p] {
			ns.dirs[p2] = true
		}
		ns.state[p] = absent
		ns.state[p2] = present
		if p == p2 {
			return workload.Record{}, false
		}
	}
	if rec.Path2 == "/" || rec.Path == "/" && (rec.Op == workload.OpRename || rec.Op == workload.OpUnlink || rec.Op == workload.OpRmdir || rec.Op == workload.OpCreate || rec.Op == workload.OpMkdir) {
		c.stats.skip(SkipBadPath)
		return workload.Record{}, false
	}
	return rec, true
}
