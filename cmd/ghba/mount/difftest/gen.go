package difftest

import (
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// pcgStream is the second PCG word: fixed, so a sequence depends on the seed only.
const pcgStream = 0x6768626164696666 // "ghbadiff"

// pathMax is PATH_MAX: a path of this many bytes or more is ENAMETOOLONG.
const pathMax = 4096

// Generate returns n ops derived from seed alone (PCG from math/rand/v2).
// Generate(seed, m) is a prefix of Generate(seed, n) for m < n.
//
// The generator keeps a model of the tree it has built (files, directories,
// symbolic links, open descriptors), so most ops name existing paths and
// descriptors, and it aims some ops at error cases on purpose: missing
// paths, paths through a file, empty paths, names of 256 bytes, paths of
// PATH_MAX bytes, renames that must fail (EISDIR, ENOTDIR, ENOTEMPTY,
// EINVAL, EEXIST), and so on. The model only steers the choices: it need not
// predict outcomes exactly, and an op that fails unexpectedly is still a
// valid comparison. FIFOs, devices and sockets are modelled as files (an
// open of a FIFO does not wait: Run opens with O_NONBLOCK; an open of a
// device fails on a file system mounted nodev, as FUSE mounts and
// TmpfsDir's are; of a socket, with ENXIO); extended attributes are set on
// any path, with names in the user namespace and invalid ones.
//
// Hard links: new names for existing files (often for ones that have
// several names already) and for symbolic links, and links aimed at EEXIST
// (an existing name, the source itself, another name of its inode), EPERM
// (a directory), ENOENT (a missing source) and bad paths. The model knows
// which names share an inode (mnode.ino), and now and then the generator
// works on one through two of its names in a few consecutive ops
// (viaLinks): write through one and read through the other (open, write,
// close, open, read; or both open at once), chmod, chown, utimens or
// truncate through one and stat the other, unlink one and use the other
// (and link it again), rename one onto the other (which does nothing), set
// an extended attribute through one and get it through the other. Unlink
// and rename pick names of such inodes more often than others.
func Generate(seed uint64, n int) []Op {
	g := &gen{r: rand.New(rand.NewPCG(seed, pcgStream)), nodes: map[string]mnode{}, kids: map[string]int{}}
	table := []struct {
		w int
		f func() Op
	}{
		{14, g.open}, {4, g.fdOp(g.close)}, {5, g.fdOp(g.write)}, {7, g.fdOp(g.pwrite)}, {4, g.fdOp(g.read)},
		{6, g.fdOp(g.pread)}, {3, g.fdOp(g.lseek)}, {3, g.fdOp(g.ftruncate)}, {3, g.fdOp(g.fstat)},
		{1, g.fdOp(g.fsync)}, {1, g.fdOp(g.fchmod)}, {1, g.fdOp(g.fchown)},
		{3, g.truncate}, {9, g.mkdir}, {4, g.rmdir}, {5, g.unlink}, {13, g.rename},
		{4, g.symlink}, {2, g.readlink}, {3, g.chmod}, {2, g.chown}, {1, g.lchown},
		{3, g.utimens}, {4, g.stat}, {3, g.lstat}, {4, g.readdir}, {2, g.access},
		{2, g.mkfifo}, {2, g.mknod}, {3, g.setxattr}, {2, g.getxattr}, {2, g.listxattr}, {1, g.removexattr},
		{5, g.link}, {3, g.viaLinks},
	}
	total := 0
	for _, e := range table {
		total += e.w
	}
	ops := make([]Op, 0, n)
	for len(ops) < n {
		if len(g.queue) > 0 { // the rest of what viaLinks began
			ops = append(ops, g.queue[0])
			g.queue = g.queue[1:]
			continue
		}
		x := g.r.IntN(total)
		for _, e := range table {
			if x < e.w {
				ops = append(ops, e.f())
				break
			}
			x -= e.w
		}
	}
	return ops
}

type mkind uint8

const (
	mFile mkind = iota + 1
	mDir
	mLink
)

// mnode is a name of the model. Names with the same ino are hard links of
// one inode (a directory's ino is its own).
type mnode struct {
	kind   mkind
	target string
	ino    int
}

type mfd struct {
	open bool
	dir  bool
	acc  int
}

// gen is the generator's state: its random source and its model of the tree
// (paths relative to the root; the root itself is "" and not in nodes).
type gen struct {
	r       *rand.Rand
	nodes   map[string]mnode
	kids    map[string]int // number of children of each directory in nodes ("" the root)
	sorted  []string       // the keys of nodes, sorted; nil when stale
	fds     [MaxFD]mfd
	lastIno int  // the last mnode.ino given out
	queue   []Op // ops that Generate emits next, before drawing new ones (viaLinks)
}

// add puts p in the model; a node without an ino is a new inode and gets
// one, a node with one (a rename, a link) keeps it.
func (g *gen) add(p string, n mnode) {
	if n.ino == 0 {
		g.lastIno++
		n.ino = g.lastIno
	}
	if _, ok := g.nodes[p]; !ok {
		g.kids[parentOf(p)]++
	}
	g.nodes[p] = n
	g.sorted = nil
}

func (g *gen) del(p string) {
	if _, ok := g.nodes[p]; ok {
		delete(g.nodes, p)
		delete(g.kids, p)
		if g.kids[parentOf(p)]--; g.kids[parentOf(p)] <= 0 {
			delete(g.kids, parentOf(p))
		}
		g.sorted = nil
	}
}

func join(dir, name string) string {
	if dir == "" {
		return name
	}
	return dir + "/" + name
}

func parentOf(p string) string {
	if i := strings.LastIndexByte(p, '/'); i >= 0 {
		return p[:i]
	}
	return ""
}

func (g *gen) chance(pct int) bool { return g.r.IntN(100) < pct }

func (g *gen) oneOf(xs ...string) string { return xs[g.r.IntN(len(xs))] }

// list returns the paths of the model whose node satisfies keep, sorted.
func (g *gen) list(keep func(string, mnode) bool) []string {
	if g.sorted == nil {
		g.sorted = make([]string, 0, len(g.nodes))
		for p := range g.nodes {
			g.sorted = append(g.sorted, p)
		}
		sort.Strings(g.sorted)
	}
	var out []string
	for _, p := range g.sorted {
		if keep(p, g.nodes[p]) {
			out = append(out, p)
		}
	}
	return out
}

func (g *gen) ofKind(k mkind) []string {
	return g.list(func(_ string, n mnode) bool { return n.kind == k })
}

func (g *gen) pick(ps []string) (string, bool) {
	if len(ps) == 0 {
		return "", false
	}
	return ps[g.r.IntN(len(ps))], true
}

func (g *gen) isDir(p string) bool {
	return p == "" || g.nodes[p].kind == mDir
}

func (g *gen) exists(p string) bool {
	_, ok := g.nodes[p]
	return ok
}

func (g *gen) children(dir string) []string {
	prefix := ""
	if dir != "" {
		prefix = dir + "/"
	}
	return g.list(func(p string, _ mnode) bool {
		return strings.HasPrefix(p, prefix) && !strings.Contains(p[len(prefix):], "/")
	})
}

// creatable reports whether the model says p can be created: its parent is
// a directory, its name has 1 to 255 bytes and the path is short enough.
func (g *gen) creatable(p string) bool {
	parent := parentOf(p)
	base := strings.TrimPrefix(p[len(parent):], "/")
	return !g.exists(p) && g.isDir(parent) && base != "" && base != "." && len(base) <= 255 && len(p) < pathMax
}

// resolve follows the symbolic links of the model from p (a path that
// exists or not) and returns where it ends.
func (g *gen) resolve(p string) (string, mnode, bool) {
	for range 8 {
		n, ok := g.nodes[p]
		if !ok || n.kind != mLink {
			return p, n, ok
		}
		if n.target == "" || strings.HasSuffix(n.target, "/") || strings.Contains(n.target, "//") {
			return "", mnode{}, false
		}
		p = strings.TrimPrefix(join(parentOf(p), n.target), "./")
	}
	return "", mnode{}, false
}

func (g *gen) emptyDir(p string) bool {
	return g.isDir(p) && g.kids[p] == 0
}

// dir picks an existing directory ("" is the root), shallow ones more often.
func (g *gen) dir() string {
	dirs := append([]string{""}, g.ofKind(mDir)...)
	if g.chance(30) {
		return ""
	}
	d, _ := g.pick(dirs)
	return d
}

// shortNames collide often, so creates meet existing names.
var shortNames = []string{"a", "b", "c", "d", "e", "f", "g", "h"}

// oddNames are valid names a text-based implementation might mangle.
var oddNames = []string{
	"x y", ".hidden", "ünï", "日本", "a.txt", "-n", "UPPER", "%s%d", `back\slash`, "'q'", `"dq"`,
	"tab\there", "nl\nname", "*", "?", "\xff\xfe", " ", "...", "~", "a=b", "#c",
}

// longName returns a name of exactly n bytes (a leading letter from the
// short names, then ASCII or two-byte UTF-8 filler).
func (g *gen) longName(n int) string {
	head := g.oneOf(shortNames...)
	if g.chance(30) {
		rest := n - len(head)
		return head + strings.Repeat("é", rest/2) + strings.Repeat("z", rest%2)
	}
	return head + strings.Repeat("L", n-len(head))
}

// name returns a name to create or look up: mostly short and colliding,
// sometimes odd, sometimes 255 bytes (valid), rarely 256 bytes (ENAMETOOLONG).
func (g *gen) name() string {
	switch x := g.r.IntN(100); {
	case x < 82:
		return g.oneOf(shortNames...)
	case x < 92:
		return g.oneOf(oddNames...)
	case x < 98:
		return g.longName(255)
	default:
		return g.longName(256)
	}
}

// fresh returns a path in dir that the model says does not exist, with a
// valid name.
func (g *gen) fresh(dir string) string {
	for range 6 {
		n := g.name()
		if len(n) <= 255 && !g.exists(join(dir, n)) {
			return join(dir, n)
		}
	}
	for i := 0; ; i++ {
		p := join(dir, "n"+strconv.Itoa(i))
		if !g.exists(p) {
			return p
		}
	}
}

// badPath returns a path that should fail for most ops: missing, through a
// file or a dangling or looping link, empty, with a 256-byte name, or at
// least PATH_MAX bytes long.
func (g *gen) badPath() string {
	switch g.r.IntN(9) {
	case 0, 1:
		return g.fresh(g.dir())
	case 2:
		return join(g.fresh(g.dir()), g.oneOf(shortNames...))
	case 3:
		if f, ok := g.pick(g.ofKind(mFile)); ok {
			return join(f, g.oneOf(shortNames...))
		}
		return ""
	case 4:
		if f, ok := g.pick(g.ofKind(mFile)); ok {
			return f + "/"
		}
		return g.fresh("") + "/"
	case 5:
		if l, ok := g.pick(g.ofKind(mLink)); ok {
			return join(l, g.oneOf(shortNames...))
		}
		return ""
	case 6:
		return ""
	case 7:
		return join(g.dir(), g.longName(256))
	default:
		p := g.dir()
		for len(p) < pathMax {
			p = join(p, g.longName(255))
		}
		return p
	}
}

// any returns an existing path of any kind, or a bad one some of the time.
func (g *gen) any() string {
	if g.chance(12) {
		return g.badPath()
	}
	if p, ok := g.pick(g.list(func(string, mnode) bool { return true })); ok {
		return p
	}
	return g.badPath()
}

// of returns an existing path of kind k, falling back on any path.
func (g *gen) of(k mkind) string {
	if p, ok := g.pick(g.ofKind(k)); ok {
		return p
	}
	return g.any()
}

func (g *gen) slot(wantOpen bool) int {
	var open, free []int
	for i, f := range g.fds {
		if f.open {
			open = append(open, i)
		} else {
			free = append(free, i)
		}
	}
	if wantOpen && len(open) > 0 && g.chance(92) {
		return open[g.r.IntN(len(open))]
	}
	if !wantOpen && len(free) > 0 && g.chance(85) {
		return free[g.r.IntN(len(free))]
	}
	return g.r.IntN(MaxFD)
}

// fileSlot prefers open descriptors of regular files whose access mode
// allows the op (need is O_RDONLY for reads, O_WRONLY for writes, O_RDWR
// for either); now and then it takes any slot (EBADF, EISDIR).
func (g *gen) fileSlot(need int) int {
	var fit []int
	for i, f := range g.fds {
		if !f.open || f.dir {
			continue
		}
		if need == unix.O_RDWR || f.acc == unix.O_RDWR || f.acc == need {
			fit = append(fit, i)
		}
	}
	if len(fit) > 0 && g.chance(90) {
		return fit[g.r.IntN(len(fit))]
	}
	return g.slot(true)
}

func (g *gen) createMode() uint32 {
	modes := []uint32{0o644, 0o644, 0o600, 0o755, 0o444, 0o777, 0o000, 0o4755, 0o2755, 0o1644, 0o640}
	if g.chance(10) {
		return uint32(g.r.IntN(0o7777 + 1))
	}
	return modes[g.r.IntN(len(modes))]
}

func (g *gen) chmodMode() uint32 {
	modes := []uint32{0o644, 0o600, 0o755, 0o700, 0o444, 0o000, 0o777, 0o4755, 0o2755, 0o6777, 0o1777, 0o2775, 0o111}
	if g.chance(25) {
		return uint32(g.r.IntN(0o7777 + 1))
	}
	return modes[g.r.IntN(len(modes))]
}

func (g *gen) id() int {
	ids := []int{0, 0, 1, 2, 1000, 65534, 100000, -1}
	return ids[g.r.IntN(len(ids))]
}

// offset returns a file offset: small, at page boundaries, or far past the
// end to make holes; rarely negative (EINVAL).
func (g *gen) offset() int64 {
	switch g.r.IntN(12) {
	case 0:
		return 0
	case 1, 2, 3:
		return g.r.Int64N(8192)
	case 4:
		return int64(4096*(1+g.r.IntN(4)) + g.r.IntN(3) - 1)
	case 5:
		return int64(65536 + g.r.IntN(3) - 1)
	case 6, 7:
		return g.r.Int64N(256 << 10)
	case 8, 9:
		return (1 << 20) + g.r.Int64N(3<<20)
	case 10:
		return g.r.Int64N(64 << 10)
	default:
		if g.chance(30) {
			return -1 - g.r.Int64N(4096)
		}
		return g.r.Int64N(1 << 12)
	}
}

func (g *gen) size() int64 {
	switch g.r.IntN(8) {
	case 0:
		return 0
	case 1, 2:
		return g.r.Int64N(200)
	case 3:
		return 4096
	case 4:
		return g.r.Int64N(1 << 17)
	case 5:
		return (1 << 20) + g.r.Int64N(3<<20)
	case 6:
		if g.chance(40) {
			return -1
		}
		return g.r.Int64N(10000)
	default:
		return g.r.Int64N(5000)
	}
}

func (g *gen) ioLen() int {
	switch g.r.IntN(10) {
	case 0:
		return 0
	case 1, 2, 3:
		return 1 + g.r.IntN(64)
	case 4:
		return 4096
	case 5:
		return 4097
	case 6, 7:
		return 1 + g.r.IntN(8192)
	default:
		return 1 + g.r.IntN(65536)
	}
}

// payload fills the data of a write: mostly generated, sometimes literal.
func (g *gen) payload(op *Op) {
	if g.chance(10) {
		op.Data = g.oneOf("hello\n", "x", "The quick brown fox\n", "\x00\x01\x02", strings.Repeat("ab", 2500))
		return
	}
	op.Len = g.ioLen()
	op.Pat = g.r.Uint64() >> 40
}

func (g *gen) open() Op {
	op := Op{Kind: OpOpen, FD: g.slot(false)}
	acc := []int{unix.O_RDONLY, unix.O_WRONLY, unix.O_RDWR}[g.r.IntN(3)]
	isDir := false
	ok := true
	switch g.r.IntN(20) {
	case 0, 1, 2, 3, 4, 5: // create
		dir := g.dir()
		var p string
		if g.chance(75) {
			p = g.fresh(dir)
		} else {
			p = join(dir, g.name())
		}
		if acc == unix.O_RDONLY && g.chance(70) {
			acc = unix.O_RDWR
		}
		flags := acc | unix.O_CREAT
		if g.chance(35) {
			flags |= unix.O_EXCL
		}
		if g.chance(20) {
			flags |= unix.O_TRUNC
		}
		if g.chance(15) {
			flags |= unix.O_APPEND
		}
		op.Path, op.Flags, op.Mode = p, flags, g.createMode()
		n, exists := g.nodes[p]
		switch {
		case g.creatable(p):
			g.add(p, mnode{kind: mFile})
		case !exists || flags&unix.O_EXCL != 0 || n.kind == mDir:
			ok = false
		}
	case 6, 7, 8, 9, 10: // an existing file
		op.Path = g.of(mFile)
		flags := acc
		if acc != unix.O_RDONLY && g.chance(25) {
			flags |= unix.O_TRUNC
		}
		if g.chance(20) {
			flags |= unix.O_APPEND
		}
		if g.chance(10) {
			flags |= unix.O_CREAT
			if g.chance(50) {
				flags |= unix.O_EXCL
			}
			op.Mode = g.createMode()
		}
		op.Flags = flags
		ok = g.nodes[op.Path].kind == mFile && flags&unix.O_EXCL == 0
	case 11, 12: // a directory
		op.Path = g.of(mDir)
		if g.chance(10) {
			op.Path = "."
		}
		op.Flags = unix.O_RDONLY | unix.O_DIRECTORY
		if g.chance(25) {
			op.Flags = acc
		}
		isDir = true
		ok = op.Flags&unix.O_ACCMODE == unix.O_RDONLY
	case 13, 14: // a symbolic link: followed, O_NOFOLLOW (ELOOP), O_CREAT through a dangling one
		op.Path = g.of(mLink)
		op.Flags = acc
		switch g.r.IntN(4) {
		case 0:
			op.Flags |= unix.O_NOFOLLOW
		case 1:
			op.Flags |= unix.O_CREAT
			op.Mode = g.createMode()
			if g.chance(30) {
				op.Flags |= unix.O_EXCL
			}
		}
		final, n, exists := g.resolve(op.Path)
		switch {
		case op.Flags&(unix.O_NOFOLLOW|unix.O_EXCL) != 0:
			ok = false
		case exists:
			ok = n.kind == mFile || (n.kind == mDir && acc == unix.O_RDONLY)
			isDir = n.kind == mDir
		case op.Flags&unix.O_CREAT != 0 && g.creatable(final):
			g.add(final, mnode{kind: mFile})
		default:
			ok = false
		}
	case 15: // O_DIRECTORY on a file: ENOTDIR
		op.Path = g.of(mFile)
		op.Flags = unix.O_RDONLY | unix.O_DIRECTORY
		ok = false
	default: // bad paths, with or without O_CREAT
		op.Path = g.badPath()
		op.Flags = acc
		if g.chance(40) {
			op.Flags |= unix.O_CREAT
			op.Mode = g.createMode()
		}
		ok = false
	}
	g.fds[op.FD] = mfd{open: ok, dir: isDir, acc: op.Flags & unix.O_ACCMODE}
	return op
}

// fdOp wraps the generator of a descriptor op: while the model has no open
// descriptor, it mostly opens one instead.
func (g *gen) fdOp(f func() Op) func() Op {
	return func() Op {
		for _, fd := range g.fds {
			if fd.open {
				return f()
			}
		}
		if g.chance(85) {
			return g.open()
		}
		return f()
	}
}

func (g *gen) close() Op {
	op := Op{Kind: OpClose, FD: g.slot(true)}
	g.fds[op.FD] = mfd{}
	return op
}

func (g *gen) write() Op {
	op := Op{Kind: OpWrite, FD: g.fileSlot(unix.O_WRONLY)}
	g.payload(&op)
	return op
}

func (g *gen) pwrite() Op {
	op := Op{Kind: OpPwrite, FD: g.fileSlot(unix.O_WRONLY), Off: g.offset()}
	g.payload(&op)
	return op
}

func (g *gen) read() Op {
	return Op{Kind: OpRead, FD: g.fileSlot(unix.O_RDONLY), Len: g.ioLen()}
}

func (g *gen) pread() Op {
	return Op{Kind: OpPread, FD: g.fileSlot(unix.O_RDONLY), Off: g.offset(), Len: g.ioLen()}
}

func (g *gen) lseek() Op {
	op := Op{Kind: OpLseek, FD: g.fileSlot(unix.O_RDWR)}
	switch g.r.IntN(3) {
	case 0:
		op.Whence, op.Off = unix.SEEK_SET, g.offset()
	case 1:
		op.Whence, op.Off = unix.SEEK_CUR, g.r.Int64N(8192)-2048
	default:
		op.Whence, op.Off = unix.SEEK_END, g.r.Int64N(8192)-4096
	}
	return op
}

func (g *gen) ftruncate() Op {
	return Op{Kind: OpFtruncate, FD: g.fileSlot(unix.O_WRONLY), Size: g.size()}
}

func (g *gen) fstat() Op { return Op{Kind: OpFstat, FD: g.slot(true)} }

func (g *gen) fsync() Op { return Op{Kind: OpFsync, FD: g.slot(true)} }

func (g *gen) fchmod() Op {
	return Op{Kind: OpFchmod, FD: g.slot(true), Mode: g.chmodMode()}
}

func (g *gen) fchown() Op {
	return Op{Kind: OpFchown, FD: g.slot(true), UID: g.id(), GID: g.id()}
}

func (g *gen) truncate() Op {
	op := Op{Kind: OpTruncate, Size: g.size()}
	switch x := g.r.IntN(10); {
	case x < 7:
		op.Path = g.of(mFile)
	case x < 8:
		op.Path = g.of(mDir) // EISDIR
	case x < 9:
		op.Path = g.of(mLink)
	default:
		op.Path = g.badPath()
	}
	return op
}

func (g *gen) mkdir() Op {
	modes := []uint32{0o755, 0o755, 0o700, 0o777, 0o1777, 0o2755, 0o555, 0o000, 0o750}
	op := Op{Kind: OpMkdir, Mode: modes[g.r.IntN(len(modes))]}
	switch x := g.r.IntN(20); {
	case x < 14:
		op.Path = g.fresh(g.dir())
	case x < 16:
		op.Path = g.any() // EEXIST mostly
	case x < 18:
		op.Path = g.badPath()
	default:
		// deepen the longest directory path with a 255-byte name, towards
		// paths of PATH_MAX bytes
		dirs := g.ofKind(mDir)
		deepest := ""
		for _, d := range dirs {
			if len(d) > len(deepest) {
				deepest = d
			}
		}
		op.Path = join(deepest, g.longName(255))
	}
	if g.creatable(op.Path) {
		g.add(op.Path, mnode{kind: mDir})
	}
	return op
}

// remove deletes p and everything below it from the model.
func (g *gen) remove(p string) {
	for _, q := range g.list(func(q string, _ mnode) bool { return q == p || strings.HasPrefix(q, p+"/") }) {
		g.del(q)
	}
}

func (g *gen) rmdir() Op {
	op := Op{Kind: OpRmdir}
	empty := g.list(func(p string, n mnode) bool { return n.kind == mDir && g.emptyDir(p) })
	switch x := g.r.IntN(10); {
	case x < 5:
		var ok bool
		if op.Path, ok = g.pick(empty); !ok {
			op.Path = g.of(mDir)
		}
	case x < 7:
		op.Path = g.of(mDir) // ENOTEMPTY when not empty
	case x < 8:
		op.Path = g.of(mFile) // ENOTDIR
	case x < 9:
		op.Path = g.of(mLink) // ENOTDIR
	default:
		op.Path = g.badPath()
	}
	if g.nodes[op.Path].kind == mDir && g.emptyDir(op.Path) {
		g.del(op.Path)
	}
	return op
}

func (g *gen) unlink() Op {
	op := Op{Kind: OpUnlink}
	switch x := g.r.IntN(10); {
	case x < 5:
		op.Path = g.of(mFile)
		if l, ok := g.pick(g.linked(0)); ok && g.chance(30) {
			op.Path = l // one of several names: the others stay
		}
	case x < 7:
		op.Path = g.of(mLink)
	case x < 8:
		op.Path = g.of(mDir) // EISDIR
	default:
		op.Path = g.badPath()
	}
	if k := g.nodes[op.Path].kind; k == mFile || k == mLink {
		g.del(op.Path)
	}
	return op
}

// rename aims at the interesting cases: over existing files and
// directories, across directories, into a descendant, onto an ancestor,
// onto another name of the same inode (nothing happens), a name of an inode
// with several to a new name, with RENAME_NOREPLACE, and from or to bad
// paths.
func (g *gen) rename() Op {
	op := Op{Kind: OpRename}
	files, dirs, links := g.ofKind(mFile), g.ofKind(mDir), g.ofKind(mLink)
	empty := g.list(func(p string, n mnode) bool { return n.kind == mDir && g.emptyDir(p) })
	full := g.list(func(p string, n mnode) bool { return n.kind == mDir && !g.emptyDir(p) })
	pickOr := func(ps []string, k mkind) string {
		if p, ok := g.pick(ps); ok {
			return p
		}
		return g.of(k)
	}
	switch g.r.IntN(17) {
	case 0, 1: // a file to a new name, often in another directory
		op.Path, op.To = pickOr(files, mFile), g.fresh(g.dir())
		if l, ok := g.pick(g.linked(0)); ok && g.chance(25) {
			op.Path = l
		}
	case 2, 3: // a file over a file
		op.Path, op.To = pickOr(files, mFile), pickOr(files, mFile)
	case 4, 5: // a directory to a new name elsewhere (EINVAL if below itself)
		op.Path, op.To = pickOr(dirs, mDir), g.fresh(g.dir())
	case 6: // an empty directory over an empty directory
		op.Path, op.To = pickOr(empty, mDir), pickOr(empty, mDir)
	case 7: // a file over a directory: EISDIR
		op.Path, op.To = pickOr(files, mFile), pickOr(dirs, mDir)
	case 8: // a directory over a file: ENOTDIR
		op.Path, op.To = pickOr(dirs, mDir), pickOr(files, mFile)
	case 9: // a directory over a non-empty directory: ENOTEMPTY
		op.Path, op.To = pickOr(dirs, mDir), pickOr(full, mDir)
	case 10: // a directory into its own subtree: EINVAL
		d := pickOr(dirs, mDir)
		sub := d
		if kids := g.children(d); len(kids) > 0 && g.chance(50) {
			sub = kids[g.r.IntN(len(kids))]
		}
		op.Path, op.To = d, join(sub, g.oneOf(shortNames...))
	case 11: // onto an ancestor (ENOTEMPTY), or onto itself (no-op)
		p := g.any()
		op.Path, op.To = p, parentOf(p)
		if op.To == "" || g.chance(30) {
			op.To = p
		}
	case 12: // RENAME_NOREPLACE: EEXIST over anything, fine to a new name
		op.Path, op.Flags = g.any(), unix.RENAME_NOREPLACE
		if g.chance(60) {
			op.To = g.any()
		} else {
			op.To = g.fresh(g.dir())
		}
	case 13: // symbolic links move like files
		op.Path = pickOr(links, mLink)
		if g.chance(50) {
			op.To = g.fresh(g.dir())
		} else {
			op.To = g.any()
		}
	case 14: // bad source or destination
		if g.chance(50) {
			op.Path, op.To = g.badPath(), g.any()
		} else {
			op.Path, op.To = g.any(), g.badPath()
		}
	case 15: // onto another name of the same inode: ok, and nothing happens
		if a, b, ok := g.twoNames(0); ok {
			op.Path, op.To = a, b
		} else {
			op.Path, op.To = pickOr(files, mFile), pickOr(files, mFile)
		}
	default:
		op.Path, op.To = g.any(), g.any()
	}
	g.modelRename(op.Path, op.To, op.Flags)
	return op
}

// modelRename applies a rename to the model if it should succeed.
func (g *gen) modelRename(from, to string, flags int) {
	src, ok := g.nodes[from]
	if !ok || strings.HasSuffix(from, "/") {
		return
	}
	if _, exists := g.nodes[to]; !exists && !g.creatable(to) {
		return
	}
	if from == to || strings.HasPrefix(to, from+"/") || strings.HasPrefix(from, to+"/") {
		return
	}
	if dst, exists := g.nodes[to]; exists {
		if flags&unix.RENAME_NOREPLACE != 0 {
			return
		}
		if dst.ino == src.ino {
			return // two names of one inode: rename does nothing, both stay
		}
		srcDir, dstDir := src.kind == mDir, dst.kind == mDir
		if srcDir != dstDir || (dstDir && !g.emptyDir(to)) {
			return
		}
		g.remove(to)
	}
	subtree := g.list(func(q string, _ mnode) bool { return q == from || strings.HasPrefix(q, from+"/") })
	nodes := make([]mnode, len(subtree))
	for i, q := range subtree {
		nodes[i] = g.nodes[q]
	}
	g.remove(from)
	for i, q := range subtree { // parents before children
		g.add(to+q[len(from):], nodes[i])
	}
}

func (g *gen) symlink() Op {
	op := Op{Kind: OpSymlink}
	dir := g.dir()
	switch x := g.r.IntN(20); {
	case x < 15:
		op.Path = g.fresh(dir)
	case x < 18:
		op.Path = g.any() // EEXIST mostly
	default:
		op.Path = g.badPath()
	}
	dir = parentOf(op.Path)
	// the target resolves from the link's directory; without "..", only
	// paths below it can be named
	below := g.list(func(p string, _ mnode) bool { return dir == "" || strings.HasPrefix(p, dir+"/") })
	switch x := g.r.IntN(20); {
	case x < 11:
		if p, ok := g.pick(below); ok {
			op.Target = strings.TrimPrefix(p, dir+"/")
			if dir == "" {
				op.Target = p
			}
		} else {
			op.Target = g.oneOf(shortNames...)
		}
	case x < 15: // dangling
		op.Target = g.oneOf(shortNames...) + "/" + g.oneOf(shortNames...)
		if g.chance(50) {
			op.Target = "missing-" + g.oneOf(shortNames...)
		}
	case x < 16: // a loop
		op.Target = op.Path[len(dir):]
		op.Target = strings.TrimPrefix(op.Target, "/")
	case x < 17:
		op.Target = "."
	case x < 18: // the longest target (4095 bytes) or one too long
		n := pathMax - 1
		if g.chance(40) {
			n = pathMax
		}
		op.Target = strings.Repeat("t/", n/2) + strings.Repeat("t", n%2)
	case x < 19:
		op.Target = "" // ENOENT
	default:
		op.Target = g.oneOf(oddNames...)
	}
	if g.creatable(op.Path) && op.Target != "" && len(op.Target) < pathMax {
		g.add(op.Path, mnode{kind: mLink, target: op.Target})
	}
	return op
}

func (g *gen) readlink() Op {
	op := Op{Kind: OpReadlink}
	switch x := g.r.IntN(10); {
	case x < 7:
		op.Path = g.of(mLink)
	case x < 9:
		op.Path = g.of(mFile) // EINVAL
	default:
		op.Path = g.any()
	}
	return op
}

func (g *gen) chmod() Op { return Op{Kind: OpChmod, Path: g.any(), Mode: g.chmodMode()} }

func (g *gen) chown() Op { return Op{Kind: OpChown, Path: g.any(), UID: g.id(), GID: g.id()} }

func (g *gen) lchown() Op {
	p := g.any()
	if g.chance(60) {
		p = g.of(mLink)
	}
	return Op{Kind: OpLchown, Path: p, UID: g.id(), GID: g.id()}
}

func (g *gen) time() Time {
	switch x := g.r.IntN(8); {
	case x < 4:
		t := Time{Kind: TimeExact, Sec: g.r.Int64N(2_000_000_000)}
		switch g.r.IntN(10) {
		case 0, 1, 2:
		case 3:
			t.Nsec = 999_999_999
		case 4:
			t.Sec = 7_258_118_400 + g.r.Int64N(1<<20) // year 2200: past 2038
		default:
			t.Nsec = g.r.Int64N(1_000_000_000)
		}
		return t
	case x < 6:
		return Time{Kind: TimeNow}
	default:
		return Time{Kind: TimeOmit}
	}
}

func (g *gen) utimens() Op {
	op := Op{Kind: OpUtimens, Path: g.any(), Atime: g.time(), Mtime: g.time()}
	if g.chance(30) {
		op.Path = g.of(mLink)
		op.NoFollow = g.chance(60)
	} else if g.chance(10) {
		op.NoFollow = true
	}
	return op
}

func (g *gen) stat() Op { return Op{Kind: OpStat, Path: g.any()} }

func (g *gen) lstat() Op {
	p := g.any()
	if g.chance(40) {
		p = g.of(mLink)
	}
	return Op{Kind: OpLstat, Path: p}
}

func (g *gen) readdir() Op {
	op := Op{Kind: OpReaddir}
	switch x := g.r.IntN(10); {
	case x < 6:
		op.Path = g.of(mDir)
	case x < 7:
		op.Path = "."
	case x < 8:
		op.Path = g.of(mFile) // ENOTDIR
	default:
		op.Path = g.any()
	}
	return op
}

func (g *gen) access() Op {
	modes := []int{unix.F_OK, unix.R_OK, unix.W_OK, unix.X_OK, unix.R_OK | unix.W_OK, unix.R_OK | unix.X_OK, unix.R_OK | unix.W_OK | unix.X_OK}
	return Op{Kind: OpAccess, Path: g.any(), Flags: modes[g.r.IntN(len(modes))]}
}

// mkfifo makes a FIFO at a fresh path mostly, else where mkdir would fail.
func (g *gen) mkfifo() Op {
	return g.placeSpecial(Op{Kind: OpMkfifo, Mode: g.createMode()})
}

// placeSpecial gives a mkfifo or mknod its path: a fresh one mostly, else
// where mkdir would fail; the model keeps what it makes as a file.
func (g *gen) placeSpecial(op Op) Op {
	switch x := g.r.IntN(10); {
	case x < 8:
		op.Path = g.fresh(g.dir())
	case x < 9:
		op.Path = g.any() // EEXIST mostly
	default:
		op.Path = g.badPath()
	}
	if g.creatable(op.Path) {
		g.add(op.Path, mnode{kind: mFile})
	}
	return op
}

// nodeDevs are the device numbers mknod uses: a real one (1:3 is
// /dev/null), one of the majors Linux leaves for local use, and the
// largest major and minor.
var nodeDevs = []uint64{unix.Mkdev(1, 3), unix.Mkdev(240, 7), unix.Mkdev(4095, 1<<20-1)}

// mknod makes a character or block device or a socket at a fresh path
// mostly, else where mkdir would fail.
func (g *gen) mknod() Op {
	op := Op{Kind: OpMknod, Mode: g.createMode()}
	switch g.r.IntN(3) {
	case 0:
		op.Type = unix.S_IFCHR
	case 1:
		op.Type = unix.S_IFBLK
	default:
		op.Type = unix.S_IFSOCK
	}
	if op.Type != unix.S_IFSOCK {
		op.Dev = nodeDevs[g.r.IntN(len(nodeDevs))]
	}
	return g.placeSpecial(op)
}

// xattrName returns an attribute name: mostly one of a few in the user
// namespace, so that sets, gets and removes meet; sometimes one of 255
// bytes (the longest), one of 256 (ERANGE), an empty one, an empty name in
// the user namespace or one in no namespace.
func (g *gen) xattrName() string {
	switch x := g.r.IntN(100); {
	case x < 88:
		return g.oneOf("user.a", "user.b", "user.c", "user.with space")
	case x < 92:
		return "user." + strings.Repeat("x", 250)
	case x < 94:
		return "user." + strings.Repeat("x", 251)
	case x < 96:
		return "user."
	case x < 98:
		return "nouser.a"
	default:
		return ""
	}
}

func (g *gen) setxattr() Op {
	op := Op{Kind: OpSetxattr, Path: g.any(), Name: g.xattrName()}
	if g.chance(15) {
		op.Data = g.oneOf("", "v", "a value\n", "\x00\x01")
	} else {
		op.Len, op.Pat = 1+g.r.IntN(300), g.r.Uint64()>>40
	}
	switch x := g.r.IntN(100); {
	case x < 60:
	case x < 80:
		op.Flags = unix.XATTR_CREATE
	case x < 95:
		op.Flags = unix.XATTR_REPLACE
	default:
		op.Flags = unix.XATTR_CREATE | unix.XATTR_REPLACE
	}
	return op
}

func (g *gen) getxattr() Op {
	return Op{Kind: OpGetxattr, Path: g.any(), Name: g.xattrName(), Len: []int{0, 0, 1, 64, 512, 512}[g.r.IntN(6)]}
}

func (g *gen) listxattr() Op {
	return Op{Kind: OpListxattr, Path: g.any(), Len: []int{0, 3, 512, 512}[g.r.IntN(4)]}
}

func (g *gen) removexattr() Op {
	return Op{Kind: OpRemovexattr, Path: g.any(), Name: g.xattrName()}
}

// linked returns the names of inodes with several names (hard links),
// sorted; of kind k only unless k is 0.
func (g *gen) linked(k mkind) []string {
	count := map[int]int{}
	for _, n := range g.nodes {
		count[n.ino]++
	}
	return g.list(func(_ string, n mnode) bool { return count[n.ino] > 1 && (k == 0 || n.kind == k) })
}

// twoNames picks an inode with several names (of kind k, or any kind if k
// is 0) and two different names of it.
func (g *gen) twoNames(k mkind) (string, string, bool) {
	a, ok := g.pick(g.linked(k))
	if !ok {
		return "", "", false
	}
	ino := g.nodes[a].ino
	others := g.list(func(p string, n mnode) bool { return n.ino == ino && p != a })
	b, ok := g.pick(others)
	return a, b, ok
}

// modelLink applies a link to the model if it should succeed: to becomes
// another name of from's inode.
func (g *gen) modelLink(from, to string) {
	src, ok := g.nodes[from]
	if !ok || src.kind == mDir || strings.HasSuffix(from, "/") || !g.creatable(to) {
		return
	}
	g.add(to, src)
}

// link makes a hard link: mostly a new name, in any directory, for an
// existing file (a FIFO, a device or a socket among them), often one that
// has several names already, or for a symbolic link (linked itself, not
// followed); else onto an existing name (EEXIST: the source itself,
// another name of its inode, anything), from a directory (EPERM), from a
// missing name (ENOENT), or from or to a bad path.
func (g *gen) link() Op {
	op := Op{Kind: OpLink}
	switch x := g.r.IntN(20); {
	case x < 9: // a file, to a new name
		op.Path = g.of(mFile)
		if l, ok := g.pick(g.linked(mFile)); ok && g.chance(30) {
			op.Path = l
		}
		op.To = g.fresh(g.dir())
	case x < 11: // a symbolic link, to a new name
		op.Path, op.To = g.of(mLink), g.fresh(g.dir())
	case x < 13: // onto an existing name: EEXIST
		op.Path = g.of(mFile)
		switch g.r.IntN(3) {
		case 0:
			op.To = op.Path
		case 1:
			if a, b, ok := g.twoNames(0); ok {
				op.Path, op.To = a, b
			} else {
				op.To = g.of(mFile)
			}
		default:
			op.To = g.any()
		}
	case x < 15: // a directory: EPERM
		op.Path = g.of(mDir)
		if g.chance(20) {
			op.Path = "."
		}
		op.To = g.fresh(g.dir())
	case x < 17: // a missing source: ENOENT
		op.Path, op.To = g.fresh(g.dir()), g.fresh(g.dir())
	default: // a bad source or destination
		if g.chance(50) {
			op.Path, op.To = g.badPath(), g.fresh(g.dir())
		} else {
			op.Path, op.To = g.of(mFile), g.badPath()
		}
	}
	g.modelLink(op.Path, op.To)
	return op
}

// viaLinks works on an inode through two of its names, in a few ops that
// Generate emits one after the other (the first is returned, the others
// queued), so that a file system that keeps a name's contents or
// attributes apart from its other names' shows. Without an inode of
// several names, it links a file to a new name instead.
func (g *gen) viaLinks() Op {
	a, b, ok := g.twoNames(mFile)
	if !ok {
		op := Op{Kind: OpLink, Path: g.of(mFile), To: g.fresh(g.dir())}
		g.modelLink(op.Path, op.To)
		return op
	}
	var ops []Op
	emit := func(op Op) { ops = append(ops, op) }
	switch g.r.IntN(9) {
	case 0, 1: // write through a, read through b: open, write, close, open, read
		s := g.slot(false)
		w := Op{Kind: OpOpen, FD: s, Path: a, Flags: unix.O_WRONLY}
		if g.chance(25) {
			w.Flags |= unix.O_TRUNC
		} else if g.chance(25) {
			w.Flags |= unix.O_APPEND
		}
		emit(w)
		wr := Op{Kind: OpWrite, FD: s}
		if g.chance(40) {
			wr.Kind, wr.Off = OpPwrite, g.offset()
		}
		g.payload(&wr)
		emit(wr)
		emit(Op{Kind: OpClose, FD: s})
		emit(Op{Kind: OpOpen, FD: s, Path: b, Flags: unix.O_RDONLY})
		emit(Op{Kind: OpRead, FD: s, Len: min(len(wr.Payload())+g.r.IntN(100)+1, 1<<17)})
		g.fds[s] = mfd{open: true, acc: unix.O_RDONLY}
		if g.chance(50) {
			emit(Op{Kind: OpClose, FD: s})
			g.fds[s] = mfd{}
		}
	case 2: // both names open at once: what one descriptor writes, the other reads
		s1 := g.slot(false)
		s2 := g.slot(false)
		if s2 == s1 {
			s2 = (s1 + 1 + g.r.IntN(MaxFD-1)) % MaxFD
		}
		emit(Op{Kind: OpOpen, FD: s1, Path: a, Flags: unix.O_RDWR})
		emit(Op{Kind: OpOpen, FD: s2, Path: b, Flags: unix.O_RDWR | g.pickFlag(unix.O_APPEND, 30)})
		wr := Op{Kind: OpPwrite, FD: s1, Off: g.r.Int64N(8192)}
		g.payload(&wr)
		emit(wr)
		emit(Op{Kind: OpPread, FD: s2, Off: wr.Off, Len: len(wr.Payload()) + 1})
		wr2 := Op{Kind: OpWrite, FD: s2}
		g.payload(&wr2)
		emit(wr2)
		emit(Op{Kind: OpFstat, FD: s1})
		emit(Op{Kind: OpPread, FD: s1, Off: 0, Len: g.ioLen()})
		g.fds[s1] = mfd{open: true, acc: unix.O_RDWR}
		g.fds[s2] = mfd{open: true, acc: unix.O_RDWR}
	case 3: // attributes through a, seen through b
		switch g.r.IntN(4) {
		case 0:
			emit(Op{Kind: OpChmod, Path: a, Mode: g.chmodMode()})
		case 1:
			emit(Op{Kind: OpChown, Path: a, UID: g.id(), GID: g.id()})
		case 2:
			emit(Op{Kind: OpUtimens, Path: a, Atime: g.time(), Mtime: g.time()})
		default:
			emit(Op{Kind: OpTruncate, Path: a, Size: g.size()})
		}
		emit(Op{Kind: []Kind{OpStat, OpLstat}[g.r.IntN(2)], Path: b})
		if g.chance(30) {
			emit(Op{Kind: OpAccess, Path: b, Flags: []int{unix.R_OK, unix.W_OK, unix.X_OK}[g.r.IntN(3)]})
		}
	case 4, 5: // unlink a: b stays, with its contents and one link fewer
		s := g.slot(false)
		held := g.chance(40)
		if held { // a descriptor of a, kept across the unlink
			emit(Op{Kind: OpOpen, FD: s, Path: a, Flags: unix.O_RDWR})
		}
		emit(Op{Kind: OpUnlink, Path: a})
		g.del(a)
		emit(Op{Kind: OpStat, Path: b})
		if held {
			wr := Op{Kind: OpWrite, FD: s}
			g.payload(&wr)
			emit(wr)
			emit(Op{Kind: OpFstat, FD: s})
		}
		emit(Op{Kind: OpOpen, FD: s, Path: b, Flags: unix.O_RDONLY})
		emit(Op{Kind: OpPread, FD: s, Off: 0, Len: g.ioLen()})
		g.fds[s] = mfd{open: true, acc: unix.O_RDONLY}
		if g.chance(40) { // and b gets a new name
			c := g.fresh(g.dir())
			emit(Op{Kind: OpLink, Path: b, To: c})
			g.modelLink(b, c)
			emit(Op{Kind: OpLstat, Path: c})
		}
	case 6, 7: // rename a onto b: nothing happens, both names stay
		r := Op{Kind: OpRename, Path: a, To: b}
		if g.chance(20) {
			r.Flags = unix.RENAME_NOREPLACE // EEXIST
		}
		emit(r)
		g.modelRename(r.Path, r.To, r.Flags)
		emit(Op{Kind: OpLstat, Path: a})
		emit(Op{Kind: OpLstat, Path: b})
		if g.chance(50) {
			emit(Op{Kind: OpReaddir, Path: parentOrDot(a)})
		}
	default: // an extended attribute set through a, read through b
		emit(Op{Kind: OpSetxattr, Path: a, Name: "user.a", Data: g.oneOf("v", "linked\n")})
		emit(Op{Kind: OpGetxattr, Path: b, Name: "user.a", Len: 64})
		emit(Op{Kind: OpListxattr, Path: b, Len: 512})
	}
	g.queue = append(g.queue, ops[1:]...)
	return ops[0]
}

// pickFlag returns flag pct percent of the time, else 0.
func (g *gen) pickFlag(flag, pct int) int {
	if g.chance(pct) {
		return flag
	}
	return 0
}

// parentOrDot names p's directory as an op's path: "." for the root.
func parentOrDot(p string) string {
	if d := parentOf(p); d != "" {
		return d
	}
	return "."
}
