package difftest

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Umask is the file mode creation mask Run applies (on its own thread only).
const Umask = 0o022

// nowSlack is how far from the wall clock around a utimensat call a
// UTIME_NOW timestamp may be and still count as "now" (coarse kernel clocks,
// file systems with a coarse granularity).
const nowSlack = 2 * time.Second

// FileType is the type of a file as stat or readdir report it.
type FileType uint8

// The file types.
const (
	TypeUnknown FileType = iota
	TypeFile
	TypeDir
	TypeSymlink
	TypeFIFO
	TypeSocket
	TypeCharDev
	TypeBlockDev
)

// String names the type.
func (t FileType) String() string {
	switch t {
	case TypeFile:
		return "file"
	case TypeDir:
		return "dir"
	case TypeSymlink:
		return "symlink"
	case TypeFIFO:
		return "fifo"
	case TypeSocket:
		return "socket"
	case TypeCharDev:
		return "chardev"
	case TypeBlockDev:
		return "blockdev"
	}
	return "unknown"
}

func typeOfMode(m uint32) FileType {
	switch m & unix.S_IFMT {
	case unix.S_IFREG:
		return TypeFile
	case unix.S_IFDIR:
		return TypeDir
	case unix.S_IFLNK:
		return TypeSymlink
	case unix.S_IFIFO:
		return TypeFIFO
	case unix.S_IFSOCK:
		return TypeSocket
	case unix.S_IFCHR:
		return TypeCharDev
	case unix.S_IFBLK:
		return TypeBlockDev
	}
	return TypeUnknown
}

func typeOfDT(t uint8) FileType {
	switch t {
	case unix.DT_REG:
		return TypeFile
	case unix.DT_DIR:
		return TypeDir
	case unix.DT_LNK:
		return TypeSymlink
	case unix.DT_FIFO:
		return TypeFIFO
	case unix.DT_SOCK:
		return TypeSocket
	case unix.DT_CHR:
		return TypeCharDev
	case unix.DT_BLK:
		return TypeBlockDev
	}
	return TypeUnknown
}

// Stat is the part of a stat result that two file systems must agree on:
// not inode numbers, not ctime, not st_blocks, not the size of a
// directory. Atime and Mtime are TimeUnset unless the runner knows them to
// be set explicitly (see Run).
type Stat struct {
	Type  FileType
	Perm  uint32 // mode & 07777
	Size  int64  // 0 for directories
	Nlink uint64
	UID   uint32
	GID   uint32
	Atime Time
	Mtime Time
	Rdev  uint64 // the device number of a character or block device
}

// String gives a compact form such as {file 0644 size=5 nlink=1 uid=0 gid=0}.
func (s Stat) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "{%s %04o", s.Type, s.Perm)
	if s.Type != TypeDir {
		fmt.Fprintf(&b, " size=%d", s.Size)
	}
	fmt.Fprintf(&b, " nlink=%d uid=%d gid=%d", s.Nlink, s.UID, s.GID)
	if s.Type == TypeCharDev || s.Type == TypeBlockDev {
		fmt.Fprintf(&b, " rdev=%d:%d", unix.Major(s.Rdev), unix.Minor(s.Rdev))
	}
	if s.Atime.Kind != TimeUnset {
		fmt.Fprintf(&b, " atime=%s", s.Atime)
	}
	if s.Mtime.Kind != TimeUnset {
		fmt.Fprintf(&b, " mtime=%s", s.Mtime)
	}
	b.WriteByte('}')
	return b.String()
}

// Entry is one directory entry as OpReaddir reports it. A DT_UNKNOWN type is
// replaced by the type lstat gives.
type Entry struct {
	Name string
	Type FileType
}

// Result is what one op returned. On failure only Op and Errno are set.
type Result struct {
	Op      Op
	Errno   unix.Errno // 0 on success
	N       int64      // bytes written or read; the offset lseek returned
	Data    []byte     // read, pread: the bytes read
	Stat    *Stat      // open (of the new descriptor), fstat, stat, lstat, utimens (after the call)
	Target  string     // readlink
	Entries []Entry    // readdir, sorted by name
	Names   []string   // listxattr, sorted
}

// ErrnoString names an errno ("ENOENT"), or "ok" for 0.
func ErrnoString(e unix.Errno) string {
	if e == 0 {
		return "ok"
	}
	if n := unix.ErrnoName(e); n != "" {
		return n
	}
	return "errno " + strconv.Itoa(int(e))
}

// String gives a one-line summary; read data appears as its length, a short
// hash and its first bytes.
func (r Result) String() string {
	var b strings.Builder
	b.WriteString(ErrnoString(r.Errno))
	if r.Errno != 0 {
		return b.String()
	}
	switch r.Op.Kind {
	case OpWrite, OpPwrite, OpLseek:
		fmt.Fprintf(&b, " n=%d", r.N)
	case OpRead, OpPread:
		fmt.Fprintf(&b, " n=%d %s", r.N, describeData(r.Data))
	case OpGetxattr:
		fmt.Fprintf(&b, " n=%d", r.N)
		if r.Op.Len > 0 {
			fmt.Fprintf(&b, " %s", describeData(r.Data))
		}
	case OpListxattr:
		fmt.Fprintf(&b, " n=%d %q", r.N, r.Names)
	}
	if r.Stat != nil {
		fmt.Fprintf(&b, " %s", *r.Stat)
	}
	if r.Op.Kind == OpReadlink {
		fmt.Fprintf(&b, " target=%s", strconv.Quote(r.Target))
	}
	if r.Op.Kind == OpReaddir {
		b.WriteString(" [")
		for i, e := range r.Entries {
			if i > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "%s %s", strconv.Quote(e.Name), e.Type)
		}
		b.WriteString("]")
	}
	return b.String()
}

func describeData(d []byte) string {
	sum := sha256.Sum256(d)
	head := d
	if len(head) > 24 {
		head = head[:24]
	}
	return fmt.Sprintf("sha256:%x %q", sum[:6], head)
}

// tracked says which timestamps of an inode were last set explicitly.
type tracked uint8

const (
	trackAtime tracked = 1 << iota
	trackMtime
)

// runner holds the state of one Run: the descriptor slots and the inodes
// whose timestamps were set explicitly and not disturbed since.
type runner struct {
	fds   [MaxFD]int
	fdIno [MaxFD]uint64
	times map[uint64]tracked
	buf   []byte
}

// Run executes ops in the directory root and returns one Result per op.
//
// All ops run on one OS thread that has its own working directory (root) and
// umask (Umask), so relative paths resolve against root whatever their length
// and the process's working directory and umask are untouched. Descriptors
// live in MaxFD slots named by Op.FD; an op on an empty slot fails with EBADF
// without a system call. Every descriptor still open is closed at the end.
//
// An lseek on a directory descriptor is not made (directory offsets are
// opaque to applications) and reports ok with N 0.
//
// Timestamps: an explicit atime or mtime set by utimens on a regular file
// (mtime only on a symbolic link) is reported by later stat, lstat, fstat and
// open results of that inode until an op may have changed it (a write,
// truncate or O_TRUNC open for mtime, a read for atime, an unlink or rename
// over it for both). Directories' timestamps are reported only in the result
// of the utimens op itself. A symbolic link's atime is never reported: any
// lookup that follows the link updates it. UTIME_NOW is reported as TimeNow when the new
// value is within a couple of seconds of the call, UTIME_OMIT as TimeOmit
// when the value did not change; otherwise the raw value is reported (and
// will differ from the other side).
//
// The error is about setting up (an invalid op, an inaccessible root), never
// about an op's outcome.
func Run(root string, ops []Op) ([]Result, error) {
	for i, op := range ops {
		if err := op.Validate(); err != nil {
			return nil, fmt.Errorf("op %d: %w", i, err)
		}
	}
	type outcome struct {
		res []Result
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		// The thread is never unlocked: its working directory and umask
		// differ from the process's, so it must end with this goroutine.
		runtime.LockOSThread()
		if err := unix.Unshare(unix.CLONE_FS); err != nil {
			done <- outcome{err: fmt.Errorf("unshare(CLONE_FS): %w", err)}
			return
		}
		if err := unix.Chdir(root); err != nil {
			_ = unix.Chdir("/")
			done <- outcome{err: fmt.Errorf("chdir %s: %w", root, err)}
			return
		}
		unix.Umask(Umask)
		r := &runner{times: map[uint64]tracked{}, buf: make([]byte, 64*1024)}
		for i := range r.fds {
			r.fds[i] = -1
		}
		res := make([]Result, len(ops))
		for i, op := range ops {
			res[i] = r.exec(op)
		}
		for i := range r.fds {
			r.closeSlot(i)
		}
		// Leave root before reporting, so that nothing of this thread,
		// which ends a moment later, holds the file system (unmount: EBUSY).
		_ = unix.Chdir("/")
		done <- outcome{res: res}
	}()
	o := <-done
	return o.res, o.err
}

func errnoOf(err error) unix.Errno {
	if err == nil {
		return 0
	}
	var e unix.Errno
	if errors.As(err, &e) {
		return e
	}
	return unix.EIO
}

func (r *runner) closeSlot(i int) {
	if r.fds[i] >= 0 {
		_ = unix.Close(r.fds[i])
		r.fds[i] = -1
	}
}

func (r *runner) fd(i int) (int, error) {
	if r.fds[i] < 0 {
		return -1, unix.EBADF
	}
	return r.fds[i], nil
}

func (r *runner) exec(op Op) Result {
	res := Result{Op: op}
	if err := r.do(op, &res); err != nil {
		return Result{Op: op, Errno: errnoOf(err)}
	}
	return res
}

func (r *runner) untrack(ino uint64, what tracked) {
	if t, ok := r.times[ino]; ok {
		if t &^= what; t == 0 {
			delete(r.times, ino)
		} else {
			r.times[ino] = t
		}
	}
}

// untrackPath forgets the tracked timestamps of the inode at path, if any.
func (r *runner) untrackPath(path string, follow bool, what tracked) {
	var st unix.Stat_t
	flags := unix.AT_SYMLINK_NOFOLLOW
	if follow {
		flags = 0
	}
	if unix.Fstatat(unix.AT_FDCWD, path, &st, flags) == nil {
		r.untrack(st.Ino, what)
	}
}

func (r *runner) stat(st *unix.Stat_t) *Stat {
	s := &Stat{
		Type:  typeOfMode(st.Mode),
		Perm:  st.Mode & 07777,
		UID:   st.Uid,
		GID:   st.Gid,
		Nlink: uint64(st.Nlink),
	}
	if s.Type == TypeCharDev || s.Type == TypeBlockDev {
		s.Rdev = st.Rdev
	}
	if s.Type != TypeDir {
		s.Size = st.Size
		t := r.times[st.Ino]
		if t&trackAtime != 0 && s.Type == TypeFile {
			s.Atime = Time{Kind: TimeExact, Sec: st.Atim.Sec, Nsec: st.Atim.Nsec}
		}
		if t&trackMtime != 0 {
			s.Mtime = Time{Kind: TimeExact, Sec: st.Mtim.Sec, Nsec: st.Mtim.Nsec}
		}
	}
	return s
}

// do carries out op by the handler of its kind (opHandlers), which fills
// res; a kind without one fails with ENOSYS.
func (r *runner) do(op Op, res *Result) error {
	h := opHandlers[op.Kind]
	if h == nil {
		return unix.ENOSYS
	}
	return h(r, op, res)
}

// opHandler carries out an op of one kind, filling res.
type opHandler func(r *runner, op Op, res *Result) error

// opHandlers maps every kind of op the runner carries out to its handler.
var opHandlers = map[Kind]opHandler{
	OpOpen:      (*runner).open,
	OpClose:     onFD(closeFD),
	OpWrite:     onFD((*runner).write),
	OpPwrite:    onFD((*runner).write),
	OpRead:      onFD((*runner).read),
	OpPread:     onFD((*runner).read),
	OpLseek:     onFD(lseek),
	OpFtruncate: onFD(ftruncate),
	OpFstat:     onFD(fstat),
	OpFsync:     onFD(func(_ *runner, fd int, _ Op, _ *Result) error { return unix.Fsync(fd) }),
	OpFchmod:    onFD(func(_ *runner, fd int, op Op, _ *Result) error { return unix.Fchmod(fd, op.Mode) }),
	OpFchown:    onFD(func(_ *runner, fd int, op Op, _ *Result) error { return unix.Fchown(fd, op.UID, op.GID) }),
	OpTruncate: func(r *runner, op Op, _ *Result) error {
		r.untrackPath(op.Path, true, trackMtime)
		return unix.Truncate(op.Path, op.Size)
	},
	OpMkdir: func(_ *runner, op Op, _ *Result) error { return unix.Mkdir(op.Path, op.Mode) },
	OpRmdir: func(_ *runner, op Op, _ *Result) error { return unix.Rmdir(op.Path) },
	OpUnlink: func(r *runner, op Op, _ *Result) error {
		r.untrackPath(op.Path, false, trackAtime|trackMtime)
		return unix.Unlink(op.Path)
	},
	OpRename:   (*runner).rename,
	OpLink:     link,
	OpSymlink:  func(_ *runner, op Op, _ *Result) error { return unix.Symlink(op.Target, op.Path) },
	OpReadlink: (*runner).readlink,
	OpChmod:    func(_ *runner, op Op, _ *Result) error { return unix.Chmod(op.Path, op.Mode) },
	OpChown:    func(_ *runner, op Op, _ *Result) error { return unix.Chown(op.Path, op.UID, op.GID) },
	OpLchown:   func(_ *runner, op Op, _ *Result) error { return unix.Lchown(op.Path, op.UID, op.GID) },
	OpUtimens:  (*runner).utimens,
	OpStat:     (*runner).statPath,
	OpLstat:    (*runner).statPath,
	OpReaddir: func(r *runner, op Op, res *Result) error {
		entries, err := r.readdir(op.Path)
		if err != nil {
			return err
		}
		res.Entries = entries
		return nil
	},
	OpMkfifo: func(_ *runner, op Op, _ *Result) error { return unix.Mkfifo(op.Path, op.Mode) },
	OpMknod:  func(_ *runner, op Op, _ *Result) error { return unix.Mknod(op.Path, op.Type|op.Mode, int(op.Dev)) },
	OpSetxattr: func(_ *runner, op Op, _ *Result) error {
		return unix.Lsetxattr(op.Path, op.Name, op.Payload(), op.Flags)
	},
	OpGetxattr:    (*runner).getxattr,
	OpListxattr:   (*runner).listxattr,
	OpRemovexattr: func(_ *runner, op Op, _ *Result) error { return unix.Lremovexattr(op.Path, op.Name) },
	OpAccess:      func(_ *runner, op Op, _ *Result) error { return unix.Access(op.Path, uint32(op.Flags)) },
}

// onFD makes the handler of an op on the descriptor in slot op.FD: an
// empty slot fails with EBADF without a system call.
func onFD(f func(r *runner, fd int, op Op, res *Result) error) opHandler {
	return func(r *runner, op Op, res *Result) error {
		fd, err := r.fd(op.FD)
		if err != nil {
			return err
		}
		return f(r, fd, op, res)
	}
}

// open opens op.Path into slot op.FD, closing what the slot held.
func (r *runner) open(op Op, res *Result) error {
	var st unix.Stat_t
	r.closeSlot(op.FD)
	// O_NONBLOCK: an open of a FIFO (mkfifo) must not wait for the other
	// end; on the other types it changes nothing.
	fd, err := unix.Open(op.Path, op.Flags|unix.O_CLOEXEC|unix.O_NONBLOCK, op.Mode)
	if err != nil {
		return err
	}
	r.fds[op.FD] = fd
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	r.fdIno[op.FD] = st.Ino
	if op.Flags&unix.O_TRUNC != 0 {
		r.untrack(st.Ino, trackMtime)
	}
	res.Stat = r.stat(&st)
	return nil
}

// getxattr reads attribute op.Name of op.Path into a buffer of op.Len
// bytes (nil when 0: the size is asked).
func (r *runner) getxattr(op Op, res *Result) error {
	var buf []byte
	if op.Len > 0 {
		buf = make([]byte, op.Len)
	}
	n, err := unix.Lgetxattr(op.Path, op.Name, buf)
	if err != nil {
		return err
	}
	res.N = int64(n)
	if buf != nil {
		res.Data = buf[:n]
	}
	return nil
}

// listxattr lists op.Path's attribute names into a buffer of op.Len bytes
// (nil when 0: the size is asked); the names are kept sorted, as file
// systems list them in different orders.
func (r *runner) listxattr(op Op, res *Result) error {
	var buf []byte
	if op.Len > 0 {
		buf = make([]byte, op.Len)
	}
	n, err := unix.Llistxattr(op.Path, buf)
	if err != nil {
		return err
	}
	res.N = int64(n)
	if n > 0 && buf != nil {
		res.Names = strings.Split(strings.TrimSuffix(string(buf[:n]), "\x00"), "\x00")
		sort.Strings(res.Names)
	}
	return nil
}

// closeFD closes fd, emptying its slot.
func closeFD(r *runner, fd int, op Op, _ *Result) error {
	r.fds[op.FD] = -1
	return unix.Close(fd)
}

// write writes op's payload to fd: at its offset (OpWrite) or at op.Off
// (OpPwrite).
func (r *runner) write(fd int, op Op, res *Result) error {
	r.untrack(r.fdIno[op.FD], trackMtime)
	var n int
	var err error
	if op.Kind == OpWrite {
		n, err = unix.Write(fd, op.Payload())
	} else {
		n, err = unix.Pwrite(fd, op.Payload(), op.Off)
	}
	res.N = int64(n)
	return err
}

// read reads op.Len bytes from fd: at its offset (OpRead) or at op.Off
// (OpPread).
func (r *runner) read(fd int, op Op, res *Result) error {
	r.untrack(r.fdIno[op.FD], trackAtime)
	buf := make([]byte, op.Len)
	var n int
	var err error
	if op.Kind == OpRead {
		n, err = unix.Read(fd, buf)
	} else {
		n, err = unix.Pread(fd, buf, op.Off)
	}
	if err != nil {
		return err
	}
	res.N = int64(n)
	res.Data = buf[:n]
	return nil
}

// lseek moves fd's offset, except on a directory.
func lseek(_ *runner, fd int, op Op, res *Result) error {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err == nil && typeOfMode(st.Mode) == TypeDir {
		// Offsets in a directory are opaque cookies of the file
		// system (POSIX: only telldir's values mean anything), and
		// SEEK_END differs (tmpfs: EINVAL; ext4: a hash offset).
		// Not compared: no call, ok, N 0.
		return nil
	}
	var err error
	res.N, err = unix.Seek(fd, op.Off, op.Whence)
	return err
}

// ftruncate truncates fd to op.Size.
func ftruncate(r *runner, fd int, op Op, _ *Result) error {
	r.untrack(r.fdIno[op.FD], trackMtime)
	return unix.Ftruncate(fd, op.Size)
}

// fstat stats fd.
func fstat(r *runner, fd int, _ Op, res *Result) error {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	res.Stat = r.stat(&st)
	return nil
}

// rename renames op.Path to op.To, with op.Flags (renameat2) if any.
func (r *runner) rename(op Op, _ *Result) error {
	if op.Flags&unix.RENAME_EXCHANGE == 0 {
		r.untrackPath(op.To, false, trackAtime|trackMtime)
	}
	if op.Flags == 0 {
		return unix.Rename(op.Path, op.To)
	}
	return unix.Renameat2(unix.AT_FDCWD, op.Path, unix.AT_FDCWD, op.To, uint(op.Flags))
}

// link makes op.To another name of op.Path's inode: linkat with flags 0,
// so that a final symbolic link of op.Path is linked itself, not followed
// (a directory: EPERM). Timestamps stay tracked: a link changes the
// inode's ctime only.
func link(_ *runner, op Op, _ *Result) error {
	return unix.Linkat(unix.AT_FDCWD, op.Path, unix.AT_FDCWD, op.To, 0)
}

// readlink reads the symbolic link op.Path.
func (r *runner) readlink(op Op, res *Result) error {
	n, err := unix.Readlink(op.Path, r.buf)
	if err != nil {
		return err
	}
	res.Target = string(r.buf[:n])
	return nil
}

// statPath stats op.Path, following a final symbolic link (OpStat) or
// not (OpLstat).
func (r *runner) statPath(op Op, res *Result) error {
	var st unix.Stat_t
	var err error
	if op.Kind == OpStat {
		err = unix.Stat(op.Path, &st)
	} else {
		err = unix.Lstat(op.Path, &st)
	}
	if err != nil {
		return err
	}
	res.Stat = r.stat(&st)
	return nil
}

func utimeSpec(t Time) unix.Timespec {
	switch t.Kind {
	case TimeNow:
		return unix.Timespec{Nsec: unix.UTIME_NOW}
	case TimeOmit:
		return unix.Timespec{Nsec: unix.UTIME_OMIT}
	}
	return unix.Timespec{Sec: t.Sec, Nsec: t.Nsec}
}

// timeResult normalises a timestamp after utimensat: exact values as they
// are, UTIME_NOW as TimeNow if close to the call, UTIME_OMIT as TimeOmit if
// unchanged.
func timeResult(want Time, pre, post unix.Timespec, preOK bool, before, after time.Time) Time {
	raw := Time{Kind: TimeExact, Sec: post.Sec, Nsec: post.Nsec}
	switch want.Kind {
	case TimeNow:
		t := time.Unix(post.Sec, post.Nsec)
		if !t.Before(before.Add(-nowSlack)) && !t.After(after.Add(nowSlack)) {
			return Time{Kind: TimeNow}
		}
	case TimeOmit:
		if preOK && pre == post {
			return Time{Kind: TimeOmit}
		}
	}
	return raw
}

func (r *runner) utimens(op Op, res *Result) error {
	flags := 0
	if op.NoFollow {
		flags = unix.AT_SYMLINK_NOFOLLOW
	}
	var pre, post unix.Stat_t
	preOK := unix.Fstatat(unix.AT_FDCWD, op.Path, &pre, flags) == nil
	before := time.Now()
	err := unix.UtimesNanoAt(unix.AT_FDCWD, op.Path, []unix.Timespec{utimeSpec(op.Atime), utimeSpec(op.Mtime)}, flags)
	after := time.Now()
	if err != nil {
		return err
	}
	if err := unix.Fstatat(unix.AT_FDCWD, op.Path, &post, flags); err != nil {
		return err
	}
	typ := typeOfMode(post.Mode)
	t := r.times[post.Ino]
	for _, x := range []struct {
		bit  tracked
		kind TimeKind
	}{{trackAtime, op.Atime.Kind}, {trackMtime, op.Mtime.Kind}} {
		switch {
		case typ != TypeFile && (typ != TypeSymlink || x.bit != trackMtime):
			// not tracked: directories, a symlink's atime (following it changes it)
		case x.kind == TimeExact:
			t |= x.bit
		case x.kind == TimeNow:
			t &^= x.bit
		}
	}
	if t == 0 {
		delete(r.times, post.Ino)
	} else {
		r.times[post.Ino] = t
	}
	s := r.stat(&post)
	if typ != TypeSymlink {
		// Following a link updates its atime, even the lookup of the stat
		// just made ("l/l" with l -> "."): never compared on links.
		s.Atime = timeResult(op.Atime, pre.Atim, post.Atim, preOK, before, after)
	}
	s.Mtime = timeResult(op.Mtime, pre.Mtim, post.Mtim, preOK, before, after)
	res.Stat = s
	return nil
}

// readdir lists the directory at path (relative to the working directory):
// all entries, "." and ".." included, sorted by name.
func (r *runner) readdir(path string) ([]Entry, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	return listDir(fd, r.buf, true)
}

// listDir reads all entries of the open directory fd. With dots false, "."
// and ".." are left out.
func listDir(fd int, buf []byte, dots bool) ([]Entry, error) {
	var out []Entry
	for {
		n, err := unix.Getdents(fd, buf)
		if err != nil {
			return nil, err
		}
		if n <= 0 {
			break
		}
		for off := 0; off < n; {
			// struct linux_dirent64: ino u64, off s64, reclen u16, type u8, name
			reclen := int(binary.NativeEndian.Uint16(buf[off+16:]))
			if reclen <= 19 || off+reclen > n {
				return nil, fmt.Errorf("getdents: bad record length %d: %w", reclen, unix.EIO)
			}
			typ := buf[off+18]
			name := buf[off+19 : off+reclen]
			if i := indexByte(name, 0); i >= 0 {
				name = name[:i]
			}
			off += reclen
			e := Entry{Name: string(name), Type: typeOfDT(typ)}
			if !dots && (e.Name == "." || e.Name == "..") {
				continue
			}
			if e.Type == TypeUnknown {
				var st unix.Stat_t
				if unix.Fstatat(fd, e.Name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil {
					e.Type = typeOfMode(st.Mode)
				}
			}
			out = append(out, e)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func indexByte(b []byte, c byte) int {
	for i, x := range b {
		if x == c {
			return i
		}
	}
	return -1
}
