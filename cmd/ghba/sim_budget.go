package main

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/ghba/ghba/routing/sim"
)

// Default trace of "ghba sim budget": per server, so that every N sees the
// same files and load per server (and the same LRU share of them). The
// default sweep (N = 10 … 1,000) takes about a minute on a 2-core machine;
// the namespace grows with N, and a directory rename scans it.
const (
	budgetFilesPerServer      = 500
	budgetOpsPerServer        = 2500
	budgetLRUEntries          = 150 // 300 entries over ~1,100 files per server, as in "ghba sim ghba"
	budgetQuickFilesPerServer = 100
	budgetQuickOpsPerServer   = 500
)

// budgetSpec is one --budgets value: a number of replicas per server, a
// multiple of the largest G-HBA segment, every other server's filter
// ("all"), or a number of bytes.
type budgetSpec struct {
	text     string
	replicas int     // kind 'r'
	segments float64 // kind 'x'
	bytes    int64   // kind 'b'
	kind     byte    // 'r', 'x', 'a' (all), 'b'
}

var budgetUnits = []struct {
	suffix string
	scale  int64
}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"B", 1}}

func parseBudget(s string) (budgetSpec, error) {
	t := strings.TrimSpace(s)
	sp := budgetSpec{text: t}
	bad := usageErrorf("--budgets %q: want replicas per server (0 = G-HBA), Kx (K times the largest segment), all (HBA), or bytes with B, KiB, MiB or GiB", s)
	switch {
	case t == "all" || t == "hba":
		sp.kind = 'a'
		return sp, nil
	case strings.HasSuffix(t, "x"):
		k, err := strconv.ParseFloat(strings.TrimSuffix(t, "x"), 64)
		if err != nil || !(k >= 0) || math.IsInf(k, 0) {
			return sp, bad
		}
		sp.kind, sp.segments = 'x', k
		return sp, nil
	}
	for _, u := range budgetUnits {
		if num, ok := strings.CutSuffix(t, u.suffix); ok {
			v, err := strconv.ParseFloat(num, 64)
			if err != nil || !(v >= 0) || v*float64(u.scale) > math.MaxInt64/2 {
				return sp, bad
			}
			sp.kind, sp.bytes = 'b', int64(v*float64(u.scale))
			return sp, nil
		}
	}
	r, err := strconv.Atoi(t)
	if err != nil || r < 0 {
		return sp, bad
	}
	sp.kind, sp.replicas = 'r', r
	return sp, nil
}

// resolve returns the budget in bytes for n servers, whose largest segment
// is seg replicas of rb bytes each, and the replicas it allows (at most
// n−1). Replica counts above n−1 are lowered to n−1.
func (b budgetSpec) resolve(n, seg int, rb int64) (bytes int64, replicas int) {
	switch b.kind {
	case 'a':
		replicas = n - 1
	case 'x':
		replicas = min(int(b.segments*float64(seg)), n-1)
	case 'b':
		return b.bytes, min(sim.BudgetReplicas(b.bytes, rb), n-1)
	default:
		replicas = min(b.replicas, n-1)
	}
	return int64(replicas) * rb, replicas
}

// budgetRow is one configuration of the sweep.
type budgetRow struct {
	Budget         string `json:"budget"`
	BudgetReplicas int    `json:"budget_replicas"`
	// ReplicaMemoryVsHBA is the replica memory per server over HBA's
	// (N−1 replicas).
	ReplicaMemoryVsHBA float64 `json:"replica_memory_vs_hba"`
	sim.GHBAResult
}

func newSimBudgetCmd(o *simOptions) *cobra.Command {
	var (
		servers  []int
		maxGroup int
		budgets  []string
		filesPer int
		opsPer   int
		gf       ghbaFlags
		specs    []budgetSpec   // the parsed --budgets (check)
		base     sim.GHBAConfig // from the G-HBA flags (check)
	)
	cmd := &cobra.Command{
		Use:   "budget",
		Short: "G-HBA with filter replicas by memory budget: hops vs memory per server, from G-HBA to HBA",
		Long: `Simulate G-HBA (G-HBA §2) where each server's memory budget buys filter
replicas beyond its segment, as the server's budget policy does: the segment
(about (N−M')/M' replicas, G-HBA §2.2) is always held; a budget of B bytes of
replicas per server adds, while the replicas' bytes stay within B, its
group-mates' local filters (by id), then other servers' in a per-server
rendezvous-hash order. Budget 0 is G-HBA; N−1 replicas is HBA's L2. L2 probes
the segment, the extras and the own filter (unique-hit rule); L3 and L4 are
G-HBA's. Extra replicas are updated like segment replicas (one message per
holder and propagation).

--budgets lists per-server budgets: a number of replicas (0 = pure G-HBA),
Kx = K times the largest segment any server holds (1x: every segment fits,
the servers of smaller segments get a few extras), all = N−1 (HBA), or bytes
(64KiB, 2MiB, …). A replica is
the local filter's bit array: bits per file × files per server / 8 bytes.

The generated trace is scaled per server (--files-per-server and
--ops-per-server; 0, or an explicit --files / --ops, uses those totals for
every N), so every N sees the same files and load per server; the LRU default
is 150 entries (300 over ~1,100 files per server in "ghba sim ghba").
Memory scales linearly with files per server.

The table gives, per N and budget: replicas and replica MiB per server, the
share of lookups resolved per level, false unique hits at L2, mean hops and
messages per lookup, update messages per second. --out also writes
budget.csv and budget_hops.png (hops vs memory per server, one line per N,
log x) and budget_l2.png (share of L1 failures resolved at L2).`,
		Example: `  ghba sim budget
  ghba sim budget --servers 10,100 --budgets 0,2x,all --json
  ghba sim budget --servers 30,100,300 --bits-per-file 16 --out sim-out/
  ghba sim budget --servers 100 --budgets 0,64KiB,256KiB,1MiB --max-group 10`,
		Args: noArgs,
		RunE: o.runE(func(cmd *cobra.Command) error {
			if err := simPositiveInts("servers", servers, 1); err != nil {
				return err
			}
			if maxGroup < 1 {
				return usageErrorf("--max-group %d: want at least 1", maxGroup)
			}
			if filesPer < 0 || opsPer < 0 {
				return usageErrorf("--files-per-server %d / --ops-per-server %d: want at least 0", filesPer, opsPer)
			}
			if len(budgets) == 0 {
				return usageErrorf("--budgets: want at least one value")
			}
			specs = make([]budgetSpec, len(budgets))
			for i, b := range budgets {
				sp, err := parseBudget(b)
				if err != nil {
					return err
				}
				specs[i] = sp
			}
			var err error
			if base, err = gf.config(); err != nil {
				return err
			}
			base.MaxGroup = maxGroup
			if o.quick {
				if !cmd.Flags().Changed("files-per-server") {
					filesPer = budgetQuickFilesPerServer
				}
				if !cmd.Flags().Changed("ops-per-server") {
					opsPer = budgetQuickOpsPerServer
				}
			}
			if cmd.Flags().Changed("files") && !cmd.Flags().Changed("files-per-server") {
				filesPer = 0
			}
			if cmd.Flags().Changed("ops") && !cmd.Flags().Changed("ops-per-server") {
				opsPer = 0
			}
			return nil
		}, func(cmd *cobra.Command) error {
			rows, err := runBudget(cmd, o, servers, specs, base, filesPer, opsPer)
			if err != nil {
				return err
			}
			return printBudget(cmd, o, rows, filesPer, opsPer)
		}),
	}
	f := cmd.Flags()
	f.IntSliceVar(&servers, "servers", []int{10, 30, 100, 300, 1000}, "number of metadata servers N (list)")
	f.IntVar(&maxGroup, "max-group", 8, "maximum group size M (\"ghba sim optimal-m\": 6–13 within 2% of the best at N = 100)")
	f.StringSliceVar(&budgets, "budgets", []string{"0", "1x", "2x", "4x", "8x", "all"}, "memory budgets per server: replicas, Kx (times the largest segment), all, or bytes (KiB, MiB, GiB) (list)")
	f.IntVar(&filesPer, "files-per-server", budgetFilesPerServer, fmt.Sprintf("initial files per server of the generated trace, i.e. --files = this × N (0: --files for every N; --quick: %d)", budgetQuickFilesPerServer))
	f.IntVar(&opsPer, "ops-per-server", budgetOpsPerServer, fmt.Sprintf("timed operations per server of the generated trace, i.e. --ops = this × N (0: --ops for every N; --quick: %d)", budgetQuickOpsPerServer))
	gf.register(cmd)
	gf.entries = budgetLRUEntries
	f.Lookup("lru-entries").DefValue = strconv.Itoa(budgetLRUEntries)
	return cmd
}

// forServers returns the options of the trace for n servers.
func (o *simOptions) forServers(n, filesPer, opsPer int) *simOptions {
	on := *o
	if o.trace == "" {
		if filesPer > 0 {
			on.files = max(filesPer*n, on.tif)
		}
		if opsPer > 0 {
			on.ops = max(opsPer*n, on.tif)
		}
	}
	return &on
}

// runBudget simulates every budget of specs for every N: one pass per N
// and seed (--runs), all budgets on it, averaged over the seeds.
func runBudget(cmd *cobra.Command, o *simOptions, servers []int, specs []budgetSpec, base sim.GHBAConfig,
	filesPer, opsPer int) ([]budgetRow, error) {
	p := newSimProgress(cmd, o, "budget", len(servers)*o.runs)
	var rows []budgetRow
	for _, n := range servers {
		on := o.forServers(n, filesPer, opsPer)
		p.total = on.expectedRecords()
		initial, err := sim.InitialFiles(cmd.Context(), on.source())
		if err != nil {
			return nil, simError(err)
		}
		rb, err := sim.ReplicaBytes(initial, n, base.BitsPerFile)
		if err != nil {
			return nil, simError(err)
		}
		_, seg := sim.SegmentReplicas(n, base.MaxGroup)
		var cfgs []sim.GHBAConfig
		var labels []budgetRow
		seen := make(map[int64]int) // budget bytes -> index in cfgs
		for _, sp := range specs {
			bytes, replicas := sp.resolve(n, seg, rb)
			label := sp.text
			if sp.kind != 'r' {
				label = fmt.Sprintf("%s (%d)", sp.text, replicas)
			}
			if i, ok := seen[bytes]; ok {
				// The same budget twice (8x may be N−1): one row, named
				// "all" if either name is.
				if sp.kind == 'a' {
					labels[i].Budget = label
				}
				continue
			}
			seen[bytes] = len(cfgs)
			cfg := base
			cfg.MemoryBudget = bytes
			cfgs = append(cfgs, cfg)
			labels = append(labels, budgetRow{Budget: label, BudgetReplicas: replicas})
		}
		per := make([][]sim.GHBAResult, len(cfgs))
		for i := 0; i < o.runs; i++ {
			p.next(fmt.Sprintf("budget N=%d seed=%d", n, o.seed+int64(i)))
			rs, err := sim.GHBA(cmd.Context(), on.replay(n, i, p), cfgs...)
			p.done()
			if err != nil {
				return nil, simError(err)
			}
			for j := range rs {
				per[j] = append(per[j], rs[j])
			}
		}
		for j := range per {
			row := labels[j]
			row.GHBAResult = sim.Mean(per[j])
			if hba := float64(n-1) * float64(row.ReplicaBytes); hba > 0 {
				row.ReplicaMemoryVsHBA = row.ReplicaMemoryMean / hba
			}
			rows = append(rows, row)
		}
	}
	return rows, nil
}

func printBudget(cmd *cobra.Command, o *simOptions, rows []budgetRow, filesPer, opsPer int) error {
	if err := simPrintJSON(cmd, o, rows); err != nil {
		return err
	}
	t := &simTable{header: []string{"servers", "M", "budget", "budget bytes", "replicas", "replica MiB", "vs HBA",
		"L1%", "L2%", "L3%", "L4%", "FP L2%", "hops", "msgs/lookup", "upd msgs/s"}}
	for _, r := range rows {
		t.add(simItoa(r.Servers), simItoa(r.MaxGroup), r.Budget, simI64(r.MemoryBudget), simF2(r.ReplicasMean),
			simF4(r.ReplicaMemoryMean/(1<<20)), simRatio(r.ReplicaMemoryVsHBA),
			simPct(r.Levels["L1"]), simPct(r.Levels["L2"]), simPct(r.Levels["L3"]), simPct(r.Levels["L4"]),
			simPct(r.FalsePositives["L2"]), simF4(r.MeanHops), simF2(r.MeanMessages), simF2(r.MessagesPerSecond))
	}
	trace := o.describe()
	if o.trace == "" && (filesPer > 0 || opsPer > 0) {
		trace = fmt.Sprintf("generated trace: %s, %s, TIF %d, seed %d",
			budgetPerServer(filesPer, o.files, "files"), budgetPerServer(opsPer, o.ops, "ops"), o.tif, o.seed)
	}
	r0 := rows[0]
	title := fmt.Sprintf("G-HBA with replicas by memory budget, %s; M %d, LRU %d entries, %v bits/file (replica %d bytes at N=%d), threshold %v%%",
		trace, r0.MaxGroup, r0.LRUEntries, r0.BitsPerFile, r0.ReplicaBytes, r0.Servers, r0.ThresholdPercent)
	if more, err := t.emit(cmd, o, title, "budget.csv"); err != nil || !more {
		return err
	}
	h := &simChart{title: "G-HBA replicas by memory budget: hops per lookup vs filter memory per server",
		xlabel: "replica memory per server (MiB, log scale)", ylabel: "mean hops per lookup", logX: true, legend: "br", yPrec: 2}
	l2 := &simChart{title: "G-HBA replicas by memory budget: L1 failures resolved at L2",
		xlabel: "replica memory per server (MiB, log scale)", ylabel: "share of L1 failures resolved at L2", logX: true, legend: "tl", yPrec: 2}
	for _, r := range rows {
		x := r.ReplicaMemoryMean / (1 << 20)
		if !(x > 0) {
			continue // no replica at all (a single group, budget 0): off a log axis
		}
		name := "N=" + strconv.Itoa(r.Servers)
		h.line(name).add(x, r.MeanHops)
		l2.line(name).add(x, r.PL2Local)
	}
	if len(h.series) == 0 {
		return nil
	}
	if err := h.save(o.out, "budget_hops.png"); err != nil {
		return err
	}
	return l2.save(o.out, "budget_l2.png")
}

// budgetPerServer describes a per-server trace size, or the total used for
// every N.
func budgetPerServer(per, total int, what string) string {
	if per > 0 {
		return fmt.Sprintf("%d %s per server", per, what)
	}
	return fmt.Sprintf("%d %s in all", total, what)
}
