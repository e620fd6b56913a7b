package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"

	"github.com/ghba/ghba/rpc"
	"github.com/ghba/ghba/rpc/client"
)

// Bench phases, in the order they run.
const (
	phaseMkdir  = "mkdir"
	phaseCreate = "create"
	phaseStat   = "stat"
	// phaseStatUncached stats every path through a client without the
	// home cache: every stat enters at one of the --addr nodes and is
	// routed by the cluster, as in a sweep larger than any client cache.
	phaseStatUncached = "stat-uncached"
	// phaseStatRouted stats every path through a client without the home
	// cache that routes by the shards' filters (client.Options.RouteRefresh):
	// every stat goes to the node the filters name.
	phaseStatRouted = "stat-routed"
	phaseLookup     = "lookup"
	// phaseUnlink removes every file (not run by default).
	phaseUnlink = "unlink"
)

var allPhases = []string{phaseMkdir, phaseCreate, phaseStat, phaseStatUncached, phaseStatRouted, phaseLookup, phaseUnlink}

// dirPhases are the phases bench --dir runs: the file system's own calls.
var dirPhases = []string{phaseMkdir, phaseCreate, phaseStat, phaseUnlink}

// defaultPhases are the phases bench runs unless --phases says otherwise.
var defaultPhases = []string{phaseMkdir, phaseCreate, phaseStat, phaseLookup}

// benchOptions are the flags of "ghba bench".
type benchOptions struct {
	paths       int
	filesPerDir int
	concurrency int
	prefix      string
	phases      []string
	eachNode    bool
	maxErrors   int
	// trace replays a trace file instead of the generated tree
	// (bench_trace.go).
	trace        string
	clients      int
	cacheModes   []string
	cacheEntries int
	// prefetchGroup is the nexus cache's prefetch group
	// (client.CacheOptions.Group).
	prefetchGroup int
	// listPrefetch is the caches' client.CacheOptions.ListPrefetch.
	listPrefetch int
	traceOrder   bool
	// dir runs the phases through this directory of a mounted file system
	// (a ghba mount) instead of the Go client (bench_dir.go); --via
	// mount:DIR sets it too.
	dir string
	// md holds the options of the mdtest phases (bench_mdtest.go).
	md mdtestOptions
}

// benchTree is the generated namespace: directories (parents before
// children) and files, all below prefix.
type benchTree struct {
	prefix string
	dirs   [][]string // dirs[0]: first level, dirs[1]: second level
	files  []string
}

// all returns every directory then every file.
func (t *benchTree) all() []string {
	var out []string
	for _, l := range t.dirs {
		out = append(out, l...)
	}
	return append(out, t.files...)
}

// makeBenchTree lays out n paths below prefix: about one directory per
// filesPerDir files, in two levels (√dirs first-level directories, the
// rest spread below them), files spread round-robin over all directories.
func makeBenchTree(prefix string, n, filesPerDir int) *benchTree {
	t := &benchTree{prefix: prefix}
	nd := min(n, max(1, (n+filesPerDir)/(filesPerDir+1)))
	top := min(nd, max(1, int(math.Ceil(math.Sqrt(float64(nd))))))
	var first, second []string
	for i := range top {
		first = append(first, fmt.Sprintf("%s/d%03d", prefix, i))
	}
	for j := range nd - top {
		second = append(second, fmt.Sprintf("%s/s%03d", first[j%top], j/top))
	}
	t.dirs = [][]string{first}
	if len(second) > 0 {
		t.dirs = append(t.dirs, second)
	}
	all := append(slices.Clone(first), second...)
	for k := range n - nd {
		t.files = append(t.files, fmt.Sprintf("%s/f%06d", all[k%len(all)], k))
	}
	return t
}

// phaseResult is one phase's measurements ("bench --json" prints them).
type phaseResult struct {
	Phase     string          `json:"phase"`
	Node      string          `json:"node"`
	Ops       int             `json:"ops"`
	Errors    int             `json:"errors"`
	Seconds   float64         `json:"seconds"`
	OpsPerSec float64         `json:"ops_per_sec"`
	P50Ms     float64         `json:"p50_ms"`
	P99Ms     float64         `json:"p99_ms"`
	Levels    map[string]int  `json:"levels,omitempty"`
	MeanHops  float64         `json:"mean_hops"`
	errs      []error         // first few errors
	hist      map[int]int     // hops → count
	mu        sync.Mutex      // guards Levels, errs, hist
	lat       []time.Duration // per op, indexed by op
}

// benchReport is the "bench --json" object.
type benchReport struct {
	Prefix      string         `json:"prefix"`
	Paths       int            `json:"paths"`
	Dirs        int            `json:"dirs"`
	Files       int            `json:"files"`
	Concurrency int            `json:"concurrency"`
	Nodes       []string       `json:"nodes"`
	Phases      []*phaseResult `json:"phases"`
}

// newBenchCmd returns "ghba bench".
func newBenchCmd(o *clientOptions) *cobra.Command {
	bo := &benchOptions{}
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Load a tree of paths into the cluster and measure create, stat and lookup",
		Long: `Create a tree of --paths paths (directories and files) below --prefix through
the --addr nodes with --concurrency client goroutines, then stat every path
through a normal client (which caches homes), then look every path up
through each node in turn (no client cache: the request enters at that node
and the cluster routes it). Prints, per phase and node, operations per
second, p50/p99 latency, the lookups resolved per level (L1..L4) and the
mean hops. --json prints one object instead.

The stat-uncached phase (not run by default) stats every path again
through a client without the home cache: each stat enters at a random --addr
node and is routed by the cluster, as in a sweep larger than any client
cache. The stat-routed phase (not run by default) does the same through a
client that holds no home cache but fetches the shards' Bloom filters from
their leaders and sends each stat to the node whose filter alone has the
path (each filter is bits_per_file × filter_capacity bits).

With --each-node (the default) the lookup phase runs once per alive member
(from "members"), else once through --addr. --phases selects phases: run
"--phases stat,lookup" again with the same --prefix and --paths to measure
reads of an existing tree. Exits 1 if more than --max-errors operations
fail (default 0).

With --trace FILE, bench replays a metadata trace (docs/trace-format.md;
for example one recorded with "ghba trace from-strace") instead: it creates
the paths the trace declares existing below --prefix-MODE, then replays every
client stream of the trace in a closed loop (a stream whose first record
comes after another's last starts when that one has finished, as in the
recording; --trace-order=false starts all at once), each on one of --clients
clients (default one per stream), once per --cache mode: off (every stat
asks the cluster), lru (a metadata cache of --cache-entries inodes per
client, held under the nodes' leases) or nexus (the same cache, which also
prefetches, with a missed path, --prefetch-group paths that follow it in
the client's relationship graph: its strongest successors, Nexus §4, and
beyond two, theirs). With --list-prefetch N, both caches also fetch up to
N entries of each directory the trace lists, as a listing that returns
attributes would (client.CacheOptions.ListPrefetch). It prints per mode the operations per
second, the mean and p99 stat time, and the local hit rate. A mode may be
given more than once (--cache off,nexus,off,nexus): each replay then runs
under a prefix of its own (--prefix-MODE-2, ...), and rounds that
alternate share whatever else the machine is doing.

With --dir DIR, the mkdir, create, stat and unlink phases run through the
file system mounted at DIR (a ghba mount) with the system calls a program
makes (mkdir, open with O_CREAT|O_EXCL then close, stat, unlink), the tree
at DIR/--prefix: the same phases as through the Go client, to compare the
two in one sitting. --concurrency goroutines each make one call at a time
(each a thread blocked in the kernel, as --concurrency processes would be).
--via mount:DIR is the same as --dir DIR.

With --phases mdtest (or any of its phases by name, or any of the options
below without --phases), bench runs mdtest's phases instead: each of
--concurrency tasks works on --items directories and --items files (mdtest
-n), spread round-robin over the directories of a tree of --depth levels
with --branch subdirectories per directory (mdtest -z, -b): one tree shared
by every task, or with --unique-dir one per task (mdtest -u). In order:
tree-create (the tree, by task 0 or each task its own), dir-create,
dir-stat, dir-rename (each directory to NAME.rn), dir-remove, file-create,
file-stat, file-read (through the client the open's metadata: a stat of a
file; through a mount open, read to the end, close), file-remove,
tree-remove (children first). The phases run --iterations times (mdtest
-i), each iteration in PREFIX/test-dir.VIA-N, which tree-remove leaves
removed. --via lists the ways in, each running every iteration: client (the
Go client) and mount:DIR (the ghba mount at DIR, system calls as with
--dir), so that the two compare in one run. It prints per way in and phase
the max, min and mean ops/s over the iterations and their standard
deviation (population, as mdtest), then the operations, errors, p50/p99
latency, lookup levels (stats through the client) and hops of all
iterations together; --json prints one object with every iteration's
phases and the summary. On a terminal a progress bar goes to stderr.`,
		Example: `  ghba --addr 127.0.0.1:7410,127.0.0.1:7420,127.0.0.1:7430 bench --paths 3000
  ghba bench --paths 100000 --concurrency 16 --prefix /bench1 --json
  ghba --addr 127.0.0.1:7410 bench --paths 100000 --prefix /bench1 --phases stat,lookup
  ghba bench --paths 20000 --phases mkdir,create,stat,stat-uncached,stat-routed
  ghba bench --trace testdata/traces/go-build.trace --cache off,lru,nexus
  ghba bench --trace testdata/traces/go-build.trace --cache nexus --cache-entries 299 --prefetch-group 16
  ghba bench --paths 20000 --prefix /b1 --phases mkdir,create,stat,unlink
  ghba bench --dir /mnt/ghba --paths 20000 --prefix /b2 --phases mkdir,create,stat,unlink
  ghba bench --phases mdtest --items 1000 --concurrency 16 --iterations 3
  ghba bench --phases mdtest -n 200 -c 16 --unique-dir --depth 2 --branch 4 --via client,mount:/mnt/ghba`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			for _, m := range bo.cacheModes {
				if m != cacheOff && m != cacheLRU && m != cacheNexus {
					return usageErrorf("bench: --cache %q: want off, lru or nexus", m)
				}
			}
			if bo.paths < 1 || bo.filesPerDir < 1 || bo.concurrency < 1 {
				return usageErrorf("bench: --paths, --files-per-dir and --concurrency must be at least 1")
			}
			mdtest, err := resolveMdtest(cmd, bo)
			if err != nil {
				return err
			}
			for _, p := range bo.phases {
				if !mdtest && !slices.Contains(allPhases, p) {
					return usageErrorf("bench: unknown phase %q (want %s, or %s: %s)", p, strings.Join(allPhases, ", "),
						phasesMdtest, strings.Join(mdtestPhaseNames(), ", "))
				}
			}
			if bo.prefix == "" {
				bo.prefix = "/bench-" + strconv.FormatInt(time.Now().Unix(), 36)
			}
			if err := checkPath(bo.prefix); err != nil {
				return err
			}
			bo.prefix = strings.TrimRight(bo.prefix, "/")
			if bo.prefix == "" {
				return usageErrorf("bench: --prefix must not be /")
			}
			if bo.trace != "" {
				return runTraceBench(cmd, o, bo)
			}
			if mdtest {
				return runMdtest(cmd, o, bo)
			}
			if bo.dir != "" {
				return runDirBench(cmd, o, bo)
			}
			return withClient(cmd, o, func(ctx context.Context, c *client.Client) error {
				return runBench(ctx, cmd, o, bo, c)
			})
		},
	}
	f := cmd.Flags()
	f.IntVar(&bo.paths, "paths", 3000, "paths to create (directories and files)")
	f.IntVar(&bo.filesPerDir, "files-per-dir", 20, "files per directory")
	f.IntVarP(&bo.concurrency, "concurrency", "c", 16, "client goroutines")
	f.StringVar(&bo.prefix, "prefix", "", "directory the tree is created in (default /bench-<time>)")
	f.StringSliceVar(&bo.phases, "phases", defaultPhases, "phases to run: mkdir, create, stat, stat-uncached, stat-routed, lookup, unlink (with --dir: mkdir, create, stat, unlink); "+
		"or the mdtest phases: mdtest (all of them), tree-create, dir-create, dir-stat, dir-rename, dir-remove, file-create, file-stat, file-read, file-remove, tree-remove")
	f.StringVar(&bo.dir, "dir", "", "run the phases through the file system mounted here (ghba mount) instead of the Go client (--via mount:DIR)")
	f.BoolVar(&bo.eachNode, "each-node", true, "run the lookup phase through every alive member")
	f.IntVar(&bo.maxErrors, "max-errors", 0, "failed operations tolerated before the exit code is 1")
	f.StringVar(&bo.trace, "trace", "", "replay this trace file instead of the generated tree")
	f.IntVar(&bo.clients, "clients", 0, "with --trace: replay clients (default: one per client stream of the trace)")
	f.StringSliceVar(&bo.cacheModes, "cache", []string{cacheOff}, "with --trace: client metadata cache modes to run, in turn: off, lru, nexus (a mode may repeat: off,nexus,off,nexus)")
	f.IntVar(&bo.cacheEntries, "cache-entries", 0, "with --trace: inodes each client's cache holds (default: 10% of the trace's distinct paths)")
	f.IntVar(&bo.prefetchGroup, "prefetch-group", 2, "with --trace and --cache nexus: paths prefetched with each miss (2: the paper's group)")
	f.IntVar(&bo.listPrefetch, "list-prefetch", 0, "with --trace and --cache lru or nexus: entries of each directory listing fetched into the cache (0: none)")
	f.BoolVar(&bo.traceOrder, "trace-order", true, "with --trace: start a client stream after the streams that ended before it began in the recording (false: all at once)")
	addMdtestFlags(f, &bo.md)
	return cmd
}

// runBench runs the selected phases with client c and prints the report.
func runBench(ctx context.Context, cmd *cobra.Command, o *clientOptions, bo *benchOptions, c *client.Client) error {
	tree := makeBenchTree(bo.prefix, bo.paths, bo.filesPerDir)
	b := &benchRun{ctx: ctx, o: o, bo: bo, c: c, paths: tree.all(), uid: currentID(os.Getuid()), gid: currentID(os.Getgid())}
	nodes := benchNodes(ctx, cmd, bo, c)
	b.rep = &benchReport{
		Prefix: bo.prefix, Paths: bo.paths, Files: len(tree.files), Concurrency: bo.concurrency,
		Nodes: nodes,
	}
	for _, l := range tree.dirs {
		b.rep.Dirs += len(l)
	}
	b.entry = strings.Join(c.Addrs(), ",")
	if len(c.Addrs()) > 1 {
		b.entry = "any"
	}
	run := func(phase string) bool { return slices.Contains(bo.phases, phase) }
	if run(phaseMkdir) {
		if err := b.mkdirPhase(tree.dirs); err != nil {
			return err
		}
	}
	if run(phaseCreate) {
		b.createPhase(tree.files)
	}
	if run(phaseStat) {
		b.statPhase(phaseStat, c)
	}
	if run(phaseStatUncached) {
		nc := client.New(client.Options{Addrs: c.Addrs(), Timeout: o.timeout, Dial: o.dial, HomeCacheSize: -1})
		b.statPhase(phaseStatUncached, nc)
		nc.Close()
	}
	if run(phaseStatRouted) {
		nc := client.New(client.Options{Addrs: c.Addrs(), Timeout: o.timeout, Dial: o.dial, HomeCacheSize: -1, RouteRefresh: time.Second})
		if err := nc.RefreshFilters(ctx); err != nil { // route from the first stat on
			fmt.Fprintf(cmd.ErrOrStderr(), "bench: fetching the shards' filters: %v\n", err)
		}
		b.statPhase(phaseStatRouted, nc)
		nc.Close()
	}
	if run(phaseLookup) {
		for _, addr := range nodes {
			b.lookupPhase(addr)
		}
	}
	if run(phaseUnlink) {
		b.unlinkPhase(tree.files)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	return reportBench(cmd, o, bo, b.rep)
}

// benchRun is one run of the bench's phases through client c, adding
// each phase's result to rep.
type benchRun struct {
	ctx      context.Context
	o        *clientOptions
	bo       *benchOptions
	c        *client.Client
	rep      *benchReport
	entry    string   // the node the phases but lookup go through ("any": --addr lists several)
	paths    []string // every path of the tree
	uid, gid uint32
}

// timed runs one phase through node, timing it, and adds its result to
// the report.
func (b *benchRun) timed(phase, node string, run func(res *phaseResult)) {
	res := &phaseResult{Phase: phase, Node: node}
	start := time.Now()
	run(res)
	res.finish(time.Since(start))
	b.rep.Phases = append(b.rep.Phases, res)
}

// mkdirPhase creates the prefix, then the tree's directories level by
// level.
func (b *benchRun) mkdirPhase(levels [][]string) error {
	if _, err := b.c.Mkdir(b.ctx, &rpc.MkdirRequest{Path: b.bo.prefix, Mode: 0o755, UID: b.uid, GID: b.gid, Parents: true}); err != nil {
		return fmt.Errorf("bench: mkdir %s: %w", b.bo.prefix, err)
	}
	b.timed(phaseMkdir, b.entry, func(res *phaseResult) {
		for _, level := range levels {
			runOps(b.ctx, res, level, b.bo.concurrency, func(ctx context.Context, p string) (string, int, error) {
				r, err := b.c.Mkdir(ctx, &rpc.MkdirRequest{Path: p, Mode: 0o755, UID: b.uid, GID: b.gid})
				if err != nil {
					return "", 0, err
				}
				return "", r.Hops, nil
			})
		}
	})
	return nil
}

// createPhase creates the tree's files.
func (b *benchRun) createPhase(files []string) {
	b.timed(phaseCreate, b.entry, func(res *phaseResult) {
		runOps(b.ctx, res, files, b.bo.concurrency, func(ctx context.Context, p string) (string, int, error) {
			r, err := b.c.Create(ctx, &rpc.CreateRequest{Path: p, Mode: 0o644, UID: b.uid, GID: b.gid})
			if err != nil {
				return "", 0, err
			}
			return "", r.Hops, nil
		})
	})
}

// statPhase stats every path through client sc.
func (b *benchRun) statPhase(phase string, sc *client.Client) {
	b.timed(phase, b.entry, func(res *phaseResult) {
		runOps(b.ctx, res, b.paths, b.bo.concurrency, func(ctx context.Context, p string) (string, int, error) {
			r, err := sc.Stat(ctx, p)
			if err != nil {
				return "", 0, err
			}
			return r.Level, r.Hops, nil
		})
	})
}

// unlinkPhase removes the tree's files.
func (b *benchRun) unlinkPhase(files []string) {
	b.timed(phaseUnlink, b.entry, func(res *phaseResult) {
		runOps(b.ctx, res, files, b.bo.concurrency, func(ctx context.Context, p string) (string, int, error) {
			return "", 0, b.c.Unlink(ctx, p)
		})
	})
}

// lookupPhase looks every path up through the node at addr alone.
func (b *benchRun) lookupPhase(addr string) {
	nc := client.New(client.Options{Addrs: []string{addr}, Timeout: b.o.timeout, Dial: b.o.dial, HomeCacheSize: -1, MaxAttempts: 1})
	defer nc.Close()
	b.timed(phaseLookup, addr, func(res *phaseResult) {
		runOps(b.ctx, res, b.paths, b.bo.concurrency, func(ctx context.Context, p string) (string, int, error) {
			r, err := nc.Lookup(ctx, p)
			if err != nil {
				return "", 0, err
			}
			return r.Level, r.Hops, nil
		})
	})
}

// benchNodes returns the nodes the lookup phase goes through: those of
// --addr, or with --each-node every alive member of the cluster.
func benchNodes(ctx context.Context, cmd *cobra.Command, bo *benchOptions, c *client.Client) []string {
	nodes := c.Addrs()
	if !bo.eachNode {
		return nodes
	}
	m, err := c.Members(ctx)
	if err != nil {
		fmt.Fprintf(cmd.ErrOrStderr(), "bench: members: %v (looking up through --addr only)\n", err)
		return nodes
	}
	if alive := m.AliveAddrs(); len(alive) > 0 {
		nodes = alive
	}
	return nodes
}

// reportBench prints the report (--json: as JSON) and the first errors of
// every phase; it fails when more than --max-errors operations failed.
func reportBench(cmd *cobra.Command, o *clientOptions, bo *benchOptions, rep *benchReport) error {
	return reportBenchWith(cmd, o, bo, rep.Phases, rep, func(w io.Writer) error { return printBench(w, rep) })
}

// reportBenchWith prints report v (--json: as JSON, else with print) and
// the first errors of phases; it fails when more than --max-errors
// operations failed.
func reportBenchWith(cmd *cobra.Command, o *clientOptions, bo *benchOptions, phases []*phaseResult, v any, print func(io.Writer) error) error {
	failed := 0
	var firstErrs []error
	for _, ph := range phases {
		failed += ph.Errors
		for _, e := range ph.errs {
			firstErrs = append(firstErrs, fmt.Errorf("%s via %s: %w", ph.Phase, ph.Node, e))
		}
	}
	var err error
	if o.json {
		err = writeJSON(cmd.OutOrStdout(), v)
	} else {
		err = print(cmd.OutOrStdout())
	}
	if err != nil {
		return err
	}
	for _, e := range firstErrs {
		fmt.Fprintln(cmd.ErrOrStderr(), "bench: error:", e)
	}
	if failed > bo.maxErrors {
		return fmt.Errorf("%w: %d of them (first: %v)", errBenchFailed, failed, firstErrs[0])
	}
	return nil
}

// runOps runs op on every path with conc goroutines, recording latency,
// level, hops and errors in res.
func runOps(ctx context.Context, res *phaseResult, paths []string, conc int, op func(ctx context.Context, p string) (level string, hops int, err error)) {
	base := len(res.lat)
	res.lat = append(res.lat, make([]time.Duration, len(paths))...)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(conc, len(paths)) {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := int(next.Add(1)) - 1
				if i >= len(paths) {
					return
				}
				t0 := time.Now()
				level, hops, err := op(ctx, paths[i])
				res.lat[base+i] = time.Since(t0)
				res.record(level, hops, err)
			}
		})
	}
	wg.Wait()
}

// record counts one operation's outcome.
func (r *phaseResult) record(level string, hops int, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.Ops++
	if err != nil {
		r.Errors++
		if len(r.errs) < 3 {
			r.errs = append(r.errs, err)
		}
		return
	}
	if level != "" {
		if r.Levels == nil {
			r.Levels = map[string]int{}
		}
		r.Levels[level]++
	}
	if r.hist == nil {
		r.hist = map[int]int{}
	}
	r.hist[hops]++
}

// finish computes the rates and percentiles after the phase took d.
func (r *phaseResult) finish(d time.Duration) {
	r.Seconds = d.Seconds()
	if r.Seconds > 0 {
		r.OpsPerSec = float64(r.Ops) / r.Seconds
	}
	lat := slices.Clone(r.lat)
	slices.Sort(lat)
	r.P50Ms = percentileMs(lat, 0.50)
	r.P99Ms = percentileMs(lat, 0.99)
	ok, hops := 0, 0
	for h, n := range r.hist {
		ok += n
		hops += h * n
	}
	if ok > 0 {
		r.MeanHops = float64(hops) / float64(ok)
	}
}

// percentileMs returns the q-quantile (nearest rank) of sorted in ms.
func percentileMs(sorted []time.Duration, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	i = max(0, min(i, len(sorted)-1))
	return float64(sorted[i].Microseconds()) / 1000
}

// printBench prints the phases as a table.
func printBench(w io.Writer, rep *benchReport) error {
	fmt.Fprintf(w, "tree %s: %d paths (%d dirs, %d files), %d client goroutines\n\n",
		rep.Prefix, rep.Paths, rep.Dirs, rep.Files, rep.Concurrency)
	t := newTable(w, "PHASE", "NODE", "OPS", "ERRORS", "OPS/S", "P50", "P99", "L1", "L2", "L3", "L4", "HOPS/OP")
	for _, ph := range rep.Phases {
		t.row(ph.Phase, ph.Node, ph.Ops, ph.Errors, fmt.Sprintf("%.0f", ph.OpsPerSec),
			fmt.Sprintf("%.2fms", ph.P50Ms), fmt.Sprintf("%.2fms", ph.P99Ms),
			ph.levelCell(rpc.LevelL1), ph.levelCell(rpc.LevelL2), ph.levelCell(rpc.LevelL3), ph.levelCell(rpc.LevelL4),
			fmt.Sprintf("%.2f", ph.MeanHops))
	}
	return t.flush()
}

// levelCell is a table cell of the operations level l resolved, with their
// share of those that succeeded ("-": the operation reports no levels).
func (r *phaseResult) levelCell(l string) string {
	if r.Levels == nil {
		return "-"
	}
	n := r.Levels[l]
	ok := r.Ops - r.Errors
	if ok == 0 {
		return strconv.Itoa(n)
	}
	return fmt.Sprintf("%d (%.0f%%)", n, 100*float64(n)/float64(ok))
}

// errBenchFailed is returned when more than --max-errors operations
// failed (exit code 1 whatever the operations' errors were).
var errBenchFailed = errors.New("bench: operations failed")
