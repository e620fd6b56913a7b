package main

// The mdtest phases of "ghba bench" (issue 37): directories, files and
// trees created, stat'ed, read, renamed and removed as mdtest does, by
// --concurrency tasks of --items items each, over --iterations iterations,
// through the Go client and through a mounted file system (--via), with a
// summary in mdtest's shape.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mattn/go-isatty"
	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"golang.org/x/sys/unix"

	"github.com/ghba/ghba/rpc"
	"github.com/ghba/ghba/rpc/client"
)

// The mdtest phases (--phases names), in the order they run.
const (
	mdTreeCreate = "tree-create"
	mdDirCreate  = "dir-create"
	mdDirStat    = "dir-stat"
	mdDirRename  = "dir-rename"
	mdDirRemove  = "dir-remove"
	mdFileCreate = "file-create"
	mdFileStat   = "file-stat"
	mdFileRead   = "file-read"
	mdFileRemove = "file-remove"
	mdTreeRemove = "tree-remove"
	// phasesMdtest, given to --phases, selects every mdtest phase.
	phasesMdtest = "mdtest"
)

// Ways in (--via): the Go client, or a mounted file system.
const (
	viaClient = "client"
	viaMount  = "mount"
)

// maxTreeDirs bounds the directories of one --depth/--branch tree.
const maxTreeDirs = 1_000_000

// mdtestOptions are the flags of bench's mdtest phases.
type mdtestOptions struct {
	items      int
	uniqueDir  bool
	depth      int
	branch     int
	iterations int
	via        []string
	// vias is via (or --dir) parsed.
	vias []benchVia
}

// benchVia is one way in: the Go client, or the file system mounted at dir.
type benchVia struct {
	kind string // viaClient or viaMount
	dir  string // viaMount: the mount point
}

// String returns the way in as --via names it.
func (v benchVia) String() string {
	if v.kind == viaMount {
		return viaMount + ":" + v.dir
	}
	return v.kind
}

// mdtestFlags names the flags that select the mdtest phases when --phases
// is not given.
var mdtestFlags = []string{"items", "unique-dir", "depth", "branch", "iterations"}

// addMdtestFlags adds the mdtest phases' flags to bench's flag set.
func addMdtestFlags(f *pflag.FlagSet, mo *mdtestOptions) {
	f.IntVarP(&mo.items, "items", "n", 100, "mdtest phases: directories and files each task creates (mdtest -n)")
	f.BoolVarP(&mo.uniqueDir, "unique-dir", "u", false, "mdtest phases: a tree per task instead of one shared tree (mdtest -u)")
	f.IntVarP(&mo.depth, "depth", "z", 0, "mdtest phases: depth of the tree the items are spread over (mdtest -z)")
	f.IntVarP(&mo.branch, "branch", "b", 1, "mdtest phases: subdirectories of each tree directory above the leaves (mdtest -b)")
	f.IntVarP(&mo.iterations, "iterations", "i", 1, "mdtest phases: times every phase runs; the summary gives max, min, mean and std dev (mdtest -i)")
	f.StringSliceVar(&mo.via, "via", []string{viaClient}, "ways in: client (the Go client) and/or mount:DIR (the ghba mount at DIR); several, with the mdtest phases")
}

// resolveMdtest parses --via (and its alias --dir) and reports whether the
// run is of the mdtest phases: --phases names them (or "mdtest", which
// expands to all of them), or --phases is not given and an mdtest option
// is. For the other phases it leaves --via mount:DIR in bo.dir.
func resolveMdtest(cmd *cobra.Command, bo *benchOptions) (bool, error) {
	f := cmd.Flags()
	mo := &bo.md
	via := mo.via
	if bo.dir != "" {
		if f.Changed("via") {
			return false, usageErrorf("bench: --dir DIR is --via mount:DIR; give one of them")
		}
		via = []string{viaMount + ":" + bo.dir}
	}
	mo.vias = nil
	for _, v := range via {
		var bv benchVia
		switch kind, dir, _ := strings.Cut(v, ":"); {
		case v == viaClient:
			bv = benchVia{kind: viaClient}
		case kind == viaMount && dir != "":
			bv = benchVia{kind: viaMount, dir: dir}
		default:
			return false, usageErrorf("bench: --via %q: want client or mount:DIR", v)
		}
		if slices.ContainsFunc(mo.vias, func(o benchVia) bool { return o.kind == bv.kind }) {
			return false, usageErrorf("bench: --via %s: at most one client and one mount", v)
		}
		mo.vias = append(mo.vias, bv)
	}
	var md, other []string
	for _, p := range bo.phases {
		switch {
		case p == phasesMdtest:
			md = append(md, mdtestPhaseNames()...)
		case slices.Contains(mdtestPhaseNames(), p):
			md = append(md, p)
		default:
			other = append(other, p)
		}
	}
	mdFlag := slices.ContainsFunc(mdtestFlags, f.Changed)
	switch {
	case len(md) > 0 && len(other) > 0:
		return false, usageErrorf("bench: phases %s and %s do not run together (the mdtest phases are %s)",
			strings.Join(md, ","), strings.Join(other, ","), strings.Join(mdtestPhaseNames(), ", "))
	case len(md) == 0 && mdFlag && f.Changed("phases"):
		return false, usageErrorf("bench: --%s are options of the mdtest phases (--phases mdtest)", strings.Join(mdtestFlags, ", --"))
	case len(md) == 0 && !mdFlag:
		if len(mo.vias) != 1 {
			return false, usageErrorf("bench: several --via ways in run the mdtest phases only (--phases mdtest)")
		}
		bo.dir = mo.vias[0].dir
		return false, nil
	}
	if len(md) == 0 {
		md = mdtestPhaseNames()
	}
	bo.phases = md
	switch {
	case bo.trace != "":
		return false, usageErrorf("bench: --trace replays a trace; it has no mdtest phases")
	case mo.items < 0 || mo.depth < 0 || mo.branch < 1 || mo.iterations < 1:
		return false, usageErrorf("bench: --items and --depth must be at least 0, --branch and --iterations at least 1")
	case treeDirs(mo.depth, mo.branch) > maxTreeDirs:
		return false, usageErrorf("bench: --depth %d --branch %d: a tree of more than %d directories", mo.depth, mo.branch, maxTreeDirs)
	}
	return true, nil
}

// treeDirs returns the directories of a tree of depth levels below its
// root, each directory above the leaves with branch subdirectories, or
// more than maxTreeDirs.
func treeDirs(depth, branch int) int {
	n, level := 0, 1
	for range depth + 1 {
		n += level
		if n > maxTreeDirs {
			return maxTreeDirs + 1
		}
		level *= branch
	}
	return n
}

// mdItem is one operation's operand: a path, and for a rename the new one.
type mdItem struct{ path, to string }

// mdClient is what the operations through the Go client need.
type mdClient struct {
	c        *client.Client
	uid, gid uint32
}

// mdtestPhase is one mdtest phase: its names, the items each task works
// on in order, and its operation through the Go client and on a local path
// (through a mount).
type mdtestPhase struct {
	name  string // --phases
	title string // mdtest's name, in the summary
	items func(l *mdLayout) [][]mdItem
	// client runs the operation through the Go client; level and hops are
	// those the node reports (none: "" and 0).
	client func(ctx context.Context, m *mdClient, it mdItem) (level string, hops int, err error)
	// local makes the system calls a program makes, its paths being in
	// the mounted file system.
	local func(it mdItem) error
}

// mdtestPhases are the mdtest phases in the order they run.
var mdtestPhases = []mdtestPhase{
	{mdTreeCreate, "Tree creation", (*mdLayout).treeCreate, mdMkdir, localMkdir},
	{mdDirCreate, "Directory creation", (*mdLayout).dirs, mdMkdir, localMkdir},
	{mdDirStat, "Directory stat", (*mdLayout).dirs, mdStat, localStat},
	{mdDirRename, "Directory rename", (*mdLayout).dirRenames, mdRename, localRename},
	{mdDirRemove, "Directory removal", (*mdLayout).dirsToRemove, mdRmdir, localRmdir},
	{mdFileCreate, "File creation", (*mdLayout).files, mdCreate, localCreate},
	{mdFileStat, "File stat", (*mdLayout).files, mdStat, localStat},
	{mdFileRead, "File read", (*mdLayout).files, mdRead, localRead},
	{mdFileRemove, "File removal", (*mdLayout).files, mdUnlink, localUnlink},
	{mdTreeRemove, "Tree removal", (*mdLayout).treeRemove, mdRmdir, localRmdir},
}

// mdtestPhaseNames returns the mdtest phases' names in order.
func mdtestPhaseNames() []string {
	var out []string
	for _, ph := range mdtestPhases {
		out = append(out, ph.name)
	}
	return out
}

func mdMkdir(ctx context.Context, m *mdClient, it mdItem) (string, int, error) {
	r, err := m.c.Mkdir(ctx, &rpc.MkdirRequest{Path: it.path, Mode: 0o755, UID: m.uid, GID: m.gid})
	if err != nil {
		return "", 0, err
	}
	return "", r.Hops, nil
}

func mdCreate(ctx context.Context, m *mdClient, it mdItem) (string, int, error) {
	r, err := m.c.Create(ctx, &rpc.CreateRequest{Path: it.path, Mode: 0o644, UID: m.uid, GID: m.gid})
	if err != nil {
		return "", 0, err
	}
	return "", r.Hops, nil
}

func mdStat(ctx context.Context, m *mdClient, it mdItem) (string, int, error) {
	r, err := m.c.Stat(ctx, it.path)
	if err != nil {
		return "", 0, err
	}
	return r.Level, r.Hops, nil
}

// mdRead is the metadata of opening a file for reading: the stat that
// gives its inode (size and layout), which must be a file.
func mdRead(ctx context.Context, m *mdClient, it mdItem) (string, int, error) {
	r, err := m.c.Stat(ctx, it.path)
	if err != nil {
		return "", 0, err
	}
	if r.Type != rpc.TypeFile {
		return "", 0, fmt.Errorf("open %s for reading: a %s, not a file", it.path, r.Type)
	}
	return r.Level, r.Hops, nil
}

func mdRename(ctx context.Context, m *mdClient, it mdItem) (string, int, error) {
	_, err := m.c.Rename(ctx, it.path, it.to)
	return "", 0, err
}

func mdRmdir(ctx context.Context, m *mdClient, it mdItem) (string, int, error) {
	return "", 0, m.c.Rmdir(ctx, it.path)
}

func mdUnlink(ctx context.Context, m *mdClient, it mdItem) (string, int, error) {
	return "", 0, m.c.Unlink(ctx, it.path)
}

func localMkdir(it mdItem) error  { return unix.Mkdir(it.path, 0o755) }
func localStat(it mdItem) error   { return sysStat(it.path) }
func localRename(it mdItem) error { return unix.Rename(it.path, it.to) }
func localRmdir(it mdItem) error  { return unix.Rmdir(it.path) }
func localCreate(it mdItem) error { return sysCreate(it.path) }
func localUnlink(it mdItem) error { return unix.Unlink(it.path) }

// localRead opens a file for reading, reads it to its end and closes it.
func localRead(it mdItem) error {
	fd, err := unix.Open(it.path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	buf := make([]byte, 64<<10)
	for {
		n, err := unix.Read(fd, buf)
		if err != nil || n == 0 {
			cerr := unix.Close(fd)
			return errors.Join(err, cerr)
		}
	}
}

// sysCreate creates a file as open(2) with O_CREAT|O_EXCL then close(2) do.
func sysCreate(p string) error {
	fd, err := unix.Open(p, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return err
	}
	return unix.Close(fd)
}

// sysStat stats p as stat(2) does.
func sysStat(p string) error {
	var st unix.Stat_t
	return unix.Stat(p, &st)
}

// mdLayout names the paths of one iteration: below dir, one tree shared by
// every task, or with unique one tree per task, of depth levels and branch
// subdirectories per directory above the leaves (mdtest -z, -b); each task
// spreads its items round-robin over its tree's directories.
type mdLayout struct {
	dir                  string
	tasks, items         int
	depth, branch        int
	unique               bool
	renamed              bool // dir-rename runs: dir-remove removes the renamed directories
	treeSize             int
	treePaths            [][]string // per tree, its directories in heap order (parents first)
	dirNames, renameName func(task, i int) string
}

// newMdLayout lays out the paths of one iteration below dir.
func newMdLayout(dir string, mo *mdtestOptions, tasks int, renamed bool) *mdLayout {
	l := &mdLayout{dir: dir, tasks: tasks, items: mo.items, depth: mo.depth, branch: mo.branch,
		unique: mo.uniqueDir, renamed: renamed, treeSize: treeDirs(mo.depth, mo.branch)}
	trees := 1
	if l.unique {
		trees = tasks
	}
	for t := range trees {
		// Directory k's children are k*branch+1 … k*branch+branch.
		paths := make([]string, l.treeSize)
		paths[0] = dir + "/mdtest_tree." + strconv.Itoa(t)
		for k := 1; k < l.treeSize; k++ {
			paths[k] = paths[(k-1)/l.branch] + "/mdtest_tree." + strconv.Itoa(k)
		}
		l.treePaths = append(l.treePaths, paths)
	}
	return l
}

// tree returns the directories of task's tree.
func (l *mdLayout) tree(task int) []string {
	if l.unique {
		return l.treePaths[task]
	}
	return l.treePaths[0]
}

// treeCreate returns each tree's directories, parents first, for its task
// (the shared tree: task 0's, as in mdtest).
func (l *mdLayout) treeCreate() [][]mdItem {
	out := make([][]mdItem, l.tasks)
	for t, paths := range l.treePaths {
		for _, p := range paths {
			out[t] = append(out[t], mdItem{path: p})
		}
	}
	return out
}

// treeRemove returns treeCreate's directories, children first.
func (l *mdLayout) treeRemove() [][]mdItem {
	out := l.treeCreate()
	for _, items := range out {
		slices.Reverse(items)
	}
	return out
}

// named returns each task's items named by name (a prefix such as
// "dir.mdtest"), with suffix.
func (l *mdLayout) named(name, suffix string) [][]mdItem {
	out := make([][]mdItem, l.tasks)
	for t := range l.tasks {
		tree := l.tree(t)
		for i := range l.items {
			out[t] = append(out[t], mdItem{path: fmt.Sprintf("%s/%s.%d.%d%s", tree[i%len(tree)], name, t, i, suffix)})
		}
	}
	return out
}

// dirs returns each task's directories.
func (l *mdLayout) dirs() [][]mdItem { return l.named("dir.mdtest", "") }

// dirRenames renames each task's directories to their name with ".rn".
func (l *mdLayout) dirRenames() [][]mdItem {
	out, to := l.dirs(), l.named("dir.mdtest", ".rn")
	for t := range out {
		for i := range out[t] {
			out[t][i].to = to[t][i].path
		}
	}
	return out
}

// dirsToRemove returns each task's directories as dir-remove finds them:
// renamed if dir-rename runs.
func (l *mdLayout) dirsToRemove() [][]mdItem {
	if l.renamed {
		return l.named("dir.mdtest", ".rn")
	}
	return l.dirs()
}

// files returns each task's files.
func (l *mdLayout) files() [][]mdItem { return l.named("file.mdtest", "") }

// mdtestRun is one run of the mdtest phases.
type mdtestRun struct {
	ctx  context.Context
	bo   *benchOptions
	m    *mdClient // nil: no way in through the client
	rep  *mdtestReport
	done atomic.Int64 // operations done, for the progress bar
	bar  *progressbar.ProgressBar
}

// mdtestReport is the "bench --json" object of the mdtest phases.
type mdtestReport struct {
	Prefix       string `json:"prefix"`
	Tasks        int    `json:"tasks"`
	ItemsPerTask int    `json:"items_per_task"`
	UniqueDir    bool   `json:"unique_dir"`
	Depth        int    `json:"depth"`
	Branch       int    `json:"branch"`
	// TreeDirs is the number of directories of each tree.
	TreeDirs   int      `json:"tree_dirs"`
	Iterations int      `json:"iterations"`
	Via        []string `json:"via"`
	// Phases is every phase of every iteration, Node its way in.
	Phases []mdtestPhaseResult `json:"phases"`
	// Summary is, per way in and phase, the iterations together.
	Summary []*mdtestSummary `json:"summary"`
}

// mdtestPhaseResult is one phase of one iteration.
type mdtestPhaseResult struct {
	Iteration int `json:"iteration"`
	*phaseResult
}

// mdtestSummary is one phase through one way in over every iteration:
// mdtest's max, min, mean and (population) standard deviation of the
// iterations' rates, and the operations of all of them together (their
// latencies, levels and hops).
type mdtestSummary struct {
	Operation string    `json:"operation"`
	Rates     []float64 `json:"rates"`
	Max       float64   `json:"max"`
	Min       float64   `json:"min"`
	Mean      float64   `json:"mean"`
	StdDev    float64   `json:"std_dev"`
	*phaseResult
}

// runMdtest runs the mdtest phases through every --via way in and prints
// the summary.
func runMdtest(cmd *cobra.Command, o *clientOptions, bo *benchOptions) error {
	if slices.ContainsFunc(bo.md.vias, func(v benchVia) bool { return v.kind == viaClient }) {
		return withClient(cmd, o, func(ctx context.Context, c *client.Client) error {
			return runMdtestWith(ctx, cmd, o, bo, &mdClient{c: c, uid: currentID(os.Getuid()), gid: currentID(os.Getgid())})
		})
	}
	return runMdtestWith(cmd.Context(), cmd, o, bo, nil)
}

// runMdtestWith runs the mdtest phases with m for the client's way in.
func runMdtestWith(ctx context.Context, cmd *cobra.Command, o *clientOptions, bo *benchOptions, m *mdClient) error {
	mo := &bo.md
	b := &mdtestRun{ctx: ctx, bo: bo, m: m}
	b.rep = &mdtestReport{Prefix: bo.prefix, Tasks: bo.concurrency, ItemsPerTask: mo.items, UniqueDir: mo.uniqueDir,
		Depth: mo.depth, Branch: mo.branch, TreeDirs: treeDirs(mo.depth, mo.branch), Iterations: mo.iterations}
	for _, v := range mo.vias {
		b.rep.Via = append(b.rep.Via, v.String())
		if v.kind == viaMount {
			if st, err := os.Stat(v.dir); err != nil || !st.IsDir() {
				return usageErrorf("bench --via %s: not a directory (%v)", v, err)
			}
		}
	}
	phases := slices.DeleteFunc(slices.Clone(mdtestPhases), func(ph mdtestPhase) bool { return !slices.Contains(bo.phases, ph.name) })
	renamed := slices.Contains(bo.phases, mdDirRename)
	layout := func(v benchVia, it int) *mdLayout {
		return newMdLayout(fmt.Sprintf("%s/test-dir.%s-%d", bo.prefix, v.kind, it), mo, bo.concurrency, renamed)
	}
	stop := b.startProgress(cmd.ErrOrStderr(), phases, layout(benchVia{}, 0))
	defer stop()
	for _, v := range mo.vias {
		for it := range mo.iterations {
			if err := b.iteration(v, it, layout(v, it), phases); err != nil {
				return err
			}
		}
	}
	stop()
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	b.summarize(phases)
	var all []*phaseResult
	for _, r := range b.rep.Phases {
		all = append(all, r.phaseResult)
	}
	return reportBenchWith(cmd, o, bo, all, b.rep, func(w io.Writer) error { return printMdtest(w, b.rep) })
}

// iteration runs the phases once through v on l's paths: the iteration's
// directory is made (untimed) before the tree and removed after it. A
// phase that ctx stopped ends the iteration with ctx's error (not with the
// failure of removing the directory the stopped phases left full).
func (b *mdtestRun) iteration(v benchVia, it int, l *mdLayout, phases []mdtestPhase) error {
	local := func(p string) string { return filepath.Join(v.dir, p) }
	for _, ph := range phases {
		if ph.name == mdTreeCreate {
			if err := b.setup(v, local(l.dir)); err != nil {
				return err
			}
		}
		if b.bar != nil {
			b.bar.Describe(fmt.Sprintf("%s %s %d/%d", v.kind, ph.name, it+1, b.bo.md.iterations))
		}
		res := &phaseResult{Phase: ph.name, Node: v.String()}
		op := func(ctx context.Context, item mdItem) (string, int, error) { return ph.client(ctx, b.m, item) }
		if v.kind == viaMount {
			op = func(_ context.Context, item mdItem) (string, int, error) {
				if item.to != "" {
					item.to = local(item.to)
				}
				return "", 0, ph.local(mdItem{path: local(item.path), to: item.to})
			}
		}
		start := time.Now()
		b.runTasks(res, ph.items(l), op)
		res.finish(time.Since(start))
		b.rep.Phases = append(b.rep.Phases, mdtestPhaseResult{Iteration: it, phaseResult: res})
		if err := b.ctx.Err(); err != nil {
			return fmt.Errorf("bench: %w", err)
		}
		if ph.name == mdTreeRemove {
			if err := b.teardown(v, local(l.dir)); err != nil {
				return err
			}
		}
	}
	return nil
}

// setup makes the directory an iteration's tree is made in, with its
// parents.
func (b *mdtestRun) setup(v benchVia, dir string) error {
	var err error
	if v.kind == viaMount {
		err = os.MkdirAll(dir, 0o755)
	} else {
		_, err = b.m.c.Mkdir(b.ctx, &rpc.MkdirRequest{Path: dir, Mode: 0o755, UID: b.m.uid, GID: b.m.gid, Parents: true})
	}
	if err != nil {
		return fmt.Errorf("bench: mkdir %s: %w", dir, err)
	}
	return nil
}

// teardown removes the directory of an iteration's tree, which the tree's
// removal left empty.
func (b *mdtestRun) teardown(v benchVia, dir string) error {
	var err error
	if v.kind == viaMount {
		err = unix.Rmdir(dir)
	} else {
		err = b.m.c.Rmdir(b.ctx, dir)
	}
	if err != nil {
		return fmt.Errorf("bench: rmdir %s: %w", dir, err)
	}
	return nil
}

// runTasks runs each task's items in order, the tasks concurrently,
// recording latency, level, hops and errors in res.
func (b *mdtestRun) runTasks(res *phaseResult, tasks [][]mdItem, op func(ctx context.Context, it mdItem) (string, int, error)) {
	offset := make([]int, len(tasks))
	total := 0
	for t, items := range tasks {
		offset[t] = total
		total += len(items)
	}
	res.lat = make([]time.Duration, total)
	var wg sync.WaitGroup
	for t, items := range tasks {
		wg.Go(func() {
			for i, it := range items {
				if b.ctx.Err() != nil {
					return
				}
				t0 := time.Now()
				level, hops, err := op(b.ctx, it)
				res.lat[offset[t]+i] = time.Since(t0)
				res.record(level, hops, err)
				b.done.Add(1)
			}
		})
	}
	wg.Wait()
}

// startProgress shows a progress bar of every phase's operations on w if
// it is a terminal; stop ends it (more calls do nothing).
func (b *mdtestRun) startProgress(w io.Writer, phases []mdtestPhase, l *mdLayout) (stop func()) {
	f, ok := w.(*os.File)
	if !ok || !isatty.IsTerminal(f.Fd()) {
		return func() {}
	}
	var total int64
	for _, ph := range phases {
		for _, items := range ph.items(l) {
			total += int64(len(items))
		}
	}
	total *= int64(b.bo.md.iterations * len(b.bo.md.vias))
	b.bar = progressbar.NewOptions64(total,
		progressbar.OptionSetWriter(w), progressbar.OptionSetDescription("bench"),
		progressbar.OptionShowCount(), progressbar.OptionShowIts(), progressbar.OptionSetItsString("ops"),
		progressbar.OptionSetPredictTime(true), progressbar.OptionThrottle(200*time.Millisecond),
		progressbar.OptionClearOnFinish())
	done, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				_ = b.bar.Set64(b.done.Load())
				_ = b.bar.Finish()
				return
			case <-t.C:
				_ = b.bar.Set64(b.done.Load())
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			close(done)
			<-stopped
		})
	}
}

// summarize adds, per way in and phase, the iterations' summary.
func (b *mdtestRun) summarize(phases []mdtestPhase) {
	for _, v := range b.rep.Via {
		for _, ph := range phases {
			s := &mdtestSummary{Operation: ph.title, phaseResult: &phaseResult{Phase: ph.name, Node: v}}
			var seconds float64
			for _, r := range b.rep.Phases {
				if r.Node == v && r.Phase == ph.name {
					s.Rates = append(s.Rates, r.OpsPerSec)
					s.merge(r.phaseResult)
					seconds += r.Seconds
				}
			}
			s.finish(time.Duration(seconds * float64(time.Second)))
			s.Max, s.Min, s.Mean, s.StdDev = rateStats(s.Rates)
			b.rep.Summary = append(b.rep.Summary, s)
		}
	}
}

// merge adds r's operations to s.
func (s *mdtestSummary) merge(r *phaseResult) {
	s.Ops += r.Ops
	s.Errors += r.Errors
	s.lat = append(s.lat, r.lat...)
	for l, n := range r.Levels {
		if s.Levels == nil {
			s.Levels = map[string]int{}
		}
		s.Levels[l] += n
	}
	for h, n := range r.hist {
		if s.hist == nil {
			s.hist = map[int]int{}
		}
		s.hist[h] += n
	}
}

// rateStats returns the maximum, minimum, mean and population standard
// deviation of rates, as mdtest's summary gives them (all 0: no rates).
func rateStats(rates []float64) (hi, lo, mean, sd float64) {
	if len(rates) == 0 {
		return 0, 0, 0, 0
	}
	hi, lo = slices.Max(rates), slices.Min(rates)
	for _, r := range rates {
		mean += r
	}
	mean /= float64(len(rates))
	for _, r := range rates {
		sd += (r - mean) * (r - mean)
	}
	return hi, lo, mean, math.Sqrt(sd / float64(len(rates)))
}

// printMdtest prints the summary as mdtest does, a table per way in, with
// the latencies, levels and hops beside the rates.
func printMdtest(w io.Writer, rep *mdtestReport) error {
	shared := "one shared tree"
	if rep.UniqueDir {
		shared = "a tree per task"
	}
	dirs := "directories"
	if rep.TreeDirs == 1 {
		dirs = "directory"
	}
	fmt.Fprintf(w, "mdtest phases below %s: %d tasks, %d items per task, %s of depth %d and branch %d (%d %s), %d iterations\n",
		rep.Prefix, rep.Tasks, rep.ItemsPerTask, shared, rep.Depth, rep.Branch, rep.TreeDirs, dirs, rep.Iterations)
	for _, v := range rep.Via {
		fmt.Fprintf(w, "\nSUMMARY rate (ops/s) via %s, of %d iterations:\n", v, rep.Iterations)
		t := newTable(w, "OPERATION", "MAX", "MIN", "MEAN", "STD DEV", "OPS", "ERRORS", "P50", "P99", "L1", "L2", "L3", "L4", "HOPS/OP")
		for _, s := range rep.Summary {
			if s.Node != v {
				continue
			}
			t.row(s.Operation, fmt.Sprintf("%.3f", s.Max), fmt.Sprintf("%.3f", s.Min), fmt.Sprintf("%.3f", s.Mean), fmt.Sprintf("%.3f", s.StdDev),
				s.Ops, s.Errors, fmt.Sprintf("%.2fms", s.P50Ms), fmt.Sprintf("%.2fms", s.P99Ms),
				s.levelCell(rpc.LevelL1), s.levelCell(rpc.LevelL2), s.levelCell(rpc.LevelL3), s.levelCell(rpc.LevelL4),
				fmt.Sprintf("%.2f", s.MeanHops))
		}
		if err := t.flush(); err != nil {
			return err
		}
	}
	return nil
}
