// Command etcdbench drives an etcd cluster the way "ghba bench" drives a
// ghba cluster, so that the two can be measured side by side on one machine
// (scripts/compare-etcd.sh runs both).
//
// Workload: the same tree of --paths paths as "ghba bench" lays out (about
// one directory per --files-per-dir files, two levels, below --prefix), each
// path one flat etcd key. --concurrency client goroutines share one
// clientv3 client per --conns (goroutine i uses client i mod conns) and take
// the next path from a shared counter, as "ghba bench" does. Phases, in order:
//
//	put               Put(key = path, value = --value-size bytes): the create
//	get-serializable  Get(path, WithSerializable()): answered by the member
//	                  the request reaches, from its local state
//	get-linearizable  Get(path): the default, confirmed through the leader
//
// Per phase it prints ops, errors, ops/s, p50 and p99 (nearest rank), the
// same columns as "ghba bench"; --json prints one object instead. A get
// that finds no key counts as an error. Exits 1 if more than --max-errors
// operations failed.
//
// It is its own Go module so that the ghba module never depends on etcd.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"text/tabwriter"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// Phases, in the order they run.
const (
	phasePut    = "put"
	phaseGetSer = "get-serializable"
	phaseGetLin = "get-linearizable"
)

var allPhases = []string{phasePut, phaseGetSer, phaseGetLin}

type options struct {
	endpoints   string
	concurrency int
	conns       int
	paths       int
	filesPerDir int
	valueSize   int
	prefix      string
	phases      string
	timeout     time.Duration
	maxErrors   int
	json        bool
}

// phaseResult is one phase's measurements; the JSON field names are those
// of "ghba bench --json".
type phaseResult struct {
	Phase     string          `json:"phase"`
	Node      string          `json:"node"`
	Ops       int             `json:"ops"`
	Errors    int             `json:"errors"`
	Seconds   float64         `json:"seconds"`
	OpsPerSec float64         `json:"ops_per_sec"`
	P50Ms     float64         `json:"p50_ms"`
	P99Ms     float64         `json:"p99_ms"`
	errs      []error         // first few errors
	mu        sync.Mutex      // guards Ops, Errors, errs
	lat       []time.Duration // per op, indexed by op
}

// report is the --json object.
type report struct {
	Prefix        string         `json:"prefix"`
	Paths         int            `json:"paths"`
	Dirs          int            `json:"dirs"`
	Files         int            `json:"files"`
	Concurrency   int            `json:"concurrency"`
	Conns         int            `json:"conns"`
	ValueSize     int            `json:"value_size"`
	Endpoints     []string       `json:"endpoints"`
	ServerVersion string         `json:"server_version"`
	Phases        []*phaseResult `json:"phases"`
}

func main() {
	o := &options{}
	fs := flag.NewFlagSet("etcdbench", flag.ContinueOnError)
	fs.StringVar(&o.endpoints, "endpoints", "127.0.0.1:2379", "comma-separated etcd client endpoints")
	fs.IntVar(&o.concurrency, "c", 16, "client goroutines")
	fs.IntVar(&o.concurrency, "concurrency", 16, "client goroutines (same as -c)")
	fs.IntVar(&o.conns, "conns", 1, "clientv3 clients (each with its own connections), shared round-robin by the goroutines")
	fs.IntVar(&o.paths, "paths", 20000, "keys (the paths of ghba bench's tree)")
	fs.IntVar(&o.filesPerDir, "files-per-dir", 20, "files per directory of the tree (as ghba bench)")
	fs.IntVar(&o.valueSize, "value-size", 128, "bytes per value")
	fs.StringVar(&o.prefix, "prefix", "", "tree prefix (default /bench-<time>)")
	fs.StringVar(&o.phases, "phases", strings.Join(allPhases, ","), "phases to run: "+strings.Join(allPhases, ", "))
	fs.DurationVar(&o.timeout, "timeout", 10*time.Second, "timeout per operation")
	fs.IntVar(&o.maxErrors, "max-errors", 0, "failed operations tolerated before the exit code is 1")
	fs.BoolVar(&o.json, "json", false, "print one JSON object instead of a table")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: etcdbench [flags]\n\nPut, then get (serializable, then linearizable) the paths of ghba bench's tree as etcd keys.\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(os.Args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		os.Exit(2)
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "etcdbench: unexpected arguments %q\n", fs.Args())
		os.Exit(2)
	}
	if err := run(o, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "etcdbench:", err)
		os.Exit(1)
	}
}

func run(o *options, w io.Writer) error {
	if o.paths < 1 || o.filesPerDir < 1 || o.concurrency < 1 || o.conns < 1 || o.valueSize < 0 {
		return errors.New("--paths, --files-per-dir, -c and --conns must be at least 1, --value-size at least 0")
	}
	phases := strings.Split(o.phases, ",")
	for _, p := range phases {
		if !slices.Contains(allPhases, p) {
			return fmt.Errorf("unknown phase %q (want %s)", p, strings.Join(allPhases, ", "))
		}
	}
	if o.prefix == "" {
		o.prefix = "/bench-" + strconv.FormatInt(time.Now().Unix(), 36)
	}
	o.prefix = strings.TrimRight(o.prefix, "/")
	var endpoints []string
	for e := range strings.SplitSeq(o.endpoints, ",") {
		if e = strings.TrimSpace(e); e != "" {
			endpoints = append(endpoints, e)
		}
	}
	if len(endpoints) == 0 {
		return errors.New("--endpoints is empty")
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	clients := make([]*clientv3.Client, o.conns)
	for i := range clients {
		c, err := clientv3.New(clientv3.Config{
			Endpoints:   endpoints,
			DialTimeout: 5 * time.Second,
			Logger:      zap.NewNop(),
		})
		if err != nil {
			return fmt.Errorf("connecting to %s: %w", o.endpoints, err)
		}
		defer c.Close()
		clients[i] = c
	}
	sctx, cancel := context.WithTimeout(ctx, o.timeout)
	st, err := clients[0].Status(sctx, endpoints[0])
	cancel()
	if err != nil {
		return fmt.Errorf("status of %s: %w", endpoints[0], err)
	}

	tree := makeTree(o.prefix, o.paths, o.filesPerDir)
	keys := tree.all()
	rep := &report{
		Prefix: o.prefix, Paths: o.paths, Files: len(tree.files), Concurrency: o.concurrency,
		Conns: o.conns, ValueSize: o.valueSize, Endpoints: endpoints, ServerVersion: st.Version,
	}
	for _, l := range tree.dirs {
		rep.Dirs += len(l)
	}
	node := strings.Join(endpoints, ",")
	if len(endpoints) > 1 {
		node = "any"
	}
	value := strings.Repeat("v", o.valueSize)
	get := func(opts ...clientv3.OpOption) func(context.Context, *clientv3.Client, string) error {
		return func(ctx context.Context, c *clientv3.Client, k string) error {
			r, err := c.Do(ctx, clientv3.OpGet(k, opts...))
			if err != nil {
				return err
			}
			if n := len(r.Get().Kvs); n != 1 {
				return fmt.Errorf("get %s: %d keys, want 1", k, n)
			}
			return nil
		}
	}
	ops := map[string]func(context.Context, *clientv3.Client, string) error{
		phasePut: func(ctx context.Context, c *clientv3.Client, k string) error {
			_, err := c.Do(ctx, clientv3.OpPut(k, value))
			return err
		},
		phaseGetSer: get(clientv3.WithSerializable()),
		phaseGetLin: get(),
	}
	for _, ph := range allPhases {
		if !slices.Contains(phases, ph) {
			continue
		}
		res := &phaseResult{Phase: ph, Node: node}
		start := time.Now()
		runOps(ctx, res, keys, o.concurrency, clients, o.timeout, ops[ph])
		res.finish(time.Since(start))
		rep.Phases = append(rep.Phases, res)
	}
	if err := ctx.Err(); err != nil {
		return err
	}

	failed := 0
	var firstErrs []error
	for _, ph := range rep.Phases {
		failed += ph.Errors
		for _, e := range ph.errs {
			firstErrs = append(firstErrs, fmt.Errorf("%s: %w", ph.Phase, e))
		}
	}
	if o.json {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		err = enc.Encode(rep)
	} else {
		err = printReport(w, rep)
	}
	if err != nil {
		return err
	}
	for _, e := range firstErrs {
		fmt.Fprintln(os.Stderr, "etcdbench: error:", e)
	}
	if failed > o.maxErrors {
		return fmt.Errorf("%d operations failed (first: %v)", failed, firstErrs[0])
	}
	return nil
}

// runOps runs op on every key with conc goroutines (goroutine g uses
// clients[g mod len(clients)]), recording latencies and errors in res.
func runOps(ctx context.Context, res *phaseResult, keys []string, conc int, clients []*clientv3.Client, timeout time.Duration, op func(context.Context, *clientv3.Client, string) error) {
	res.lat = make([]time.Duration, len(keys))
	var next atomic.Int64
	var wg sync.WaitGroup
	for g := range min(conc, len(keys)) {
		c := clients[g%len(clients)]
		wg.Go(func() {
			for ctx.Err() == nil {
				i := int(next.Add(1)) - 1
				if i >= len(keys) {
					return
				}
				octx, cancel := context.WithTimeout(ctx, timeout)
				t0 := time.Now()
				err := op(octx, c, keys[i])
				res.lat[i] = time.Since(t0)
				cancel()
				res.record(err)
			}
		})
	}
	wg.Wait()
}

func (r *phaseResult) record(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.Ops++
	if err != nil {
		r.Errors++
		if len(r.errs) < 3 {
			r.errs = append(r.errs, err)
		}
	}
}

// finish computes the rate and percentiles after the phase took d.
func (r *phaseResult) finish(d time.Duration) {
	r.Seconds = d.Seconds()
	if r.Seconds > 0 {
		r.OpsPerSec = float64(r.Ops) / r.Seconds
	}
	lat := slices.Clone(r.lat[:r.Ops])
	if r.Ops < len(r.lat) { // interrupted: unfinished slots are zero
		lat = slices.DeleteFunc(slices.Clone(r.lat), func(d time.Duration) bool { return d == 0 })
	}
	slices.Sort(lat)
	r.P50Ms = percentileMs(lat, 0.50)
	r.P99Ms = percentileMs(lat, 0.99)
}

// percentileMs returns the q-quantile (nearest rank) of sorted in ms, as
// "ghba bench" computes it.
func percentileMs(sorted []time.Duration, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	i = max(0, min(i, len(sorted)-1))
	return float64(sorted[i].Microseconds()) / 1000
}

func printReport(w io.Writer, rep *report) error {
	fmt.Fprintf(w, "etcd %s at %s: %d keys (tree %s: %d dirs, %d files), %d-byte values, %d client goroutines, %d clientv3 client(s)\n\n",
		rep.ServerVersion, strings.Join(rep.Endpoints, ","), rep.Paths, rep.Prefix, rep.Dirs, rep.Files,
		rep.ValueSize, rep.Concurrency, rep.Conns)
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "PHASE\tNODE\tOPS\tERRORS\tOPS/S\tP50\tP99")
	for _, ph := range rep.Phases {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%.0f\t%.2fms\t%.2fms\n",
			ph.Phase, ph.Node, ph.Ops, ph.Errors, ph.OpsPerSec, ph.P50Ms, ph.P99Ms)
	}
	return tw.Flush()
}

// tree is the namespace "ghba bench" creates: directories (parents before
// children) and files, all below prefix.
type tree struct {
	dirs  [][]string
	files []string
}

func (t *tree) all() []string {
	var out []string
	for _, l := range t.dirs {
		out = append(out, l...)
	}
	return append(out, t.files...)
}

// makeTree is makeBenchTree of cmd/ghba/bench.go (keep the two the same):
// about one directory per filesPerDir files, in two levels (√dirs
// first-level directories, the rest below them), files round-robin over
// all directories.
func makeTree(prefix string, n, filesPerDir int) *tree {
	t := &tree{}
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
