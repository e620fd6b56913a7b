package main

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/ghba/ghba/routing/sim"
)

// Default trace of "ghba sim spill" and "ghba sim update": per server, as
// "ghba sim budget" (500 files and 2,500 ops per server, 150 LRU entries),
// so that every N sees the same files and load per server.
const (
	spillFilesPerServer      = budgetFilesPerServer
	spillOpsPerServer        = budgetOpsPerServer
	spillLRUEntries          = budgetLRUEntries
	spillQuickFilesPerServer = budgetQuickFilesPerServer
	spillQuickOpsPerServer   = budgetQuickOpsPerServer
)

// simPerServer holds --files-per-server and --ops-per-server.
type simPerServer struct {
	files, ops int
}

// register adds the two flags.
func (p *simPerServer) register(cmd *cobra.Command) {
	f := cmd.Flags()
	f.IntVar(&p.files, "files-per-server", spillFilesPerServer, fmt.Sprintf("initial files per server of the generated trace, i.e. --files = this × N (0: --files for every N; --quick: %d)", spillQuickFilesPerServer))
	f.IntVar(&p.ops, "ops-per-server", spillOpsPerServer, fmt.Sprintf("timed operations per server of the generated trace, i.e. --ops = this × N (0: --ops for every N; --quick: %d)", spillQuickOpsPerServer))
}

// registerWithGHBA adds the two flags and gf's G-HBA flags, whose LRU
// filters default to spillLRUEntries entries (sized for the per-server
// traces).
func (p *simPerServer) registerWithGHBA(cmd *cobra.Command, gf *ghbaFlags) {
	p.register(cmd)
	gf.register(cmd)
	gf.entries = spillLRUEntries
	cmd.Flags().Lookup("lru-entries").DefValue = strconv.Itoa(spillLRUEntries)
}

// ghbaBase checks the per-server flags and returns the G-HBA template of
// gf with maximum group size maxGroup.
func (p *simPerServer) ghbaBase(cmd *cobra.Command, o *simOptions, gf *ghbaFlags, maxGroup int) (sim.GHBAConfig, error) {
	if err := p.check(cmd, o); err != nil {
		return sim.GHBAConfig{}, err
	}
	base, err := gf.config()
	if err != nil {
		return sim.GHBAConfig{}, err
	}
	base.MaxGroup = maxGroup
	return base, nil
}

// check validates the flags and applies --quick and an explicit --files or
// --ops (a total for every N), as "ghba sim budget" does.
func (p *simPerServer) check(cmd *cobra.Command, o *simOptions) error {
	if p.files < 0 || p.ops < 0 {
		return usageErrorf("--files-per-server %d / --ops-per-server %d: want at least 0", p.files, p.ops)
	}
	fl := cmd.Flags()
	if o.quick {
		if !fl.Changed("files-per-server") {
			p.files = spillQuickFilesPerServer
		}
		if !fl.Changed("ops-per-server") {
			p.ops = spillQuickOpsPerServer
		}
	}
	if fl.Changed("files") && !fl.Changed("files-per-server") {
		p.files = 0
	}
	if fl.Changed("ops") && !fl.Changed("ops-per-server") {
		p.ops = 0
	}
	return nil
}

// simDelayFlags registers the assumed latency constants of sim.Delays
// (the flags of "ghba sim optimal-m").
func simDelayFlags(cmd *cobra.Command, d *sim.Delays) {
	f := cmd.Flags()
	f.Float64Var(&d.Mem, "d-mem", d.Mem, "assumed D_LRU = D_L2 in ms: probing an in-memory filter array")
	f.Float64Var(&d.RTT, "d-rtt", d.RTT, "assumed LAN round trip in ms (base of D_group, D_net and update multicasts)")
	f.Float64Var(&d.PerMsg, "d-per-msg", d.PerMsg, "assumed ms per additional multicast recipient")
}

// simCheckDelays rejects negative or infinite delays.
func simCheckDelays(xs ...float64) error {
	for _, x := range xs {
		if !(x >= 0) || math.IsInf(x, 0) {
			return usageErrorf("delays must be finite and not negative")
		}
	}
	return nil
}

// spillMemory is one --memory value: a share of HBA's replica memory at the
// highest intensity, or bytes.
type spillMemory struct {
	text  string
	share float64 // with pct
	bytes int64
	pct   bool
}

func parseSpillMemory(s string) (spillMemory, error) {
	t := strings.TrimSpace(s)
	m := spillMemory{text: t}
	if num, ok := strings.CutSuffix(t, "%"); ok {
		v, err := strconv.ParseFloat(num, 64)
		if err != nil || !(v >= 0) || math.IsInf(v, 0) {
			return m, usageErrorf("--memory %q: want a percentage of HBA's replica memory (50%%) or bytes with B, KiB, MiB or GiB", s)
		}
		m.share, m.pct = v/100, true
		return m, nil
	}
	b, err := parseBudget(t)
	if err != nil || b.kind != 'b' {
		return m, usageErrorf("--memory %q: want a percentage of HBA's replica memory (50%%) or bytes with B, KiB, MiB or GiB", s)
	}
	m.bytes = b.bytes
	return m, nil
}

// resolve returns the bytes for n servers whose replicas are rb bytes at
// the highest intensity.
func (m spillMemory) resolve(n int, rb int64) int64 {
	if !m.pct {
		return m.bytes
	}
	return int64(math.Round(m.share * float64(n-1) * float64(rb)))
}

// spillRow is one simulated (N, intensity) with its memory sizes.
type spillRow struct {
	// Intensity is the trace intensifying factor: Intensity disjoint copies
	// of the base trace replayed together (files and ops × Intensity).
	Intensity int `json:"intensity"`
	// Ops is the timed operations of the intensified trace.
	Ops int `json:"ops"`
	// MemoryLabels are the --memory values of Points, in order.
	MemoryLabels []string `json:"memory_labels"`
	*sim.SpillResult
}

func newSimSpillCmd(o *simOptions) *cobra.Command {
	var (
		servers     []int
		maxGroup    int
		intensities []int
		memories    []string
		per         simPerServer
		gf          ghbaFlags
		d           = sim.DefaultDelays
		disk        = sim.DefaultDiskDelay
		mems        []spillMemory  // parsed --memory (check)
		base        sim.GHBAConfig // from the G-HBA flags (check)
	)
	cmd := &cobra.Command{
		Use:   "spill",
		Short: "Lookup latency vs operation intensity when replicas spill to disk: HBA vs G-HBA (G-HBA §3.2, Fig. 4)",
		Long: `Average latency of metadata lookups as a function of the operation intensity,
for HBA and G-HBA at several memory sizes per server (G-HBA §3.2 "Average
Latency", Fig. 4).

Intensity K replays K disjoint copies of the base trace together (TIF K,
HBA §5, G-HBA §3): K× the files and K× the operations. Filters are sized for
the files per server, so a replica grows with K, and a fixed memory holds
fewer of them. A server's memory of B bytes for filter replicas holds
⌊B / replica bytes⌋ replicas; the rest are on disk. HBA holds N−1 replicas,
G-HBA its segment, about (N−M')/M'. Each probe of a spilled replica costs one
disk access (--d-disk, an ASSUMPTION); own filters and the L1 array stay in
memory.

HBA and G-HBA are simulated on the same pass (same placement and entry
servers) for their hit rates; spilling slows lookups without changing them,
so every memory size is evaluated on one pass with G-HBA eq. 3
(routing.LatencyModel):
  HBA:   D_LRU + (1−P_LRU)·D_L2 + (1−P_LRU)(1−P_L2)·D_net (eq. 3, M = 1),
         D_L2 = D_mem + spilled·D_disk;
  G-HBA: eq. 3 with M = M', D_L2 = D_mem + mean spilled·D_disk,
         D_group = --d-rtt + --d-per-msg·(M'−1) + the slowest member's
         spilled·D_disk (the L3 multicast waits for every member);
  D_net = --d-rtt + --d-per-msg·(N−1) for both.

--memory lists memory sizes per server: P% of HBA's replica memory at the
highest intensity ((N−1) replicas of that size; 100% never spills), or bytes
(64KiB, 2MiB). The trace is scaled per server at intensity 1
(--files-per-server, --ops-per-server; an explicit --files / --ops is the
total for every N). --tif and --trace do not apply: --intensity sets the TIF
of the generated trace. --out also writes spill.csv and spill_latency.png.`,
		Example: `  ghba sim spill
  ghba sim spill --servers 100 --max-group 9 --intensity 1,2,4,8 --memory 100%,50%,25%,10% --json
  ghba sim spill --memory 64KiB,256KiB,1MiB --d-disk 8 --out sim-out/`,
		Args: noArgs,
		RunE: o.runE(func(cmd *cobra.Command) error {
			if err := simPositiveInts("servers", servers, 2); err != nil {
				return err
			}
			if err := simPositiveInts("intensity", intensities, 1); err != nil {
				return err
			}
			if maxGroup < 1 {
				return usageErrorf("--max-group %d: want at least 1", maxGroup)
			}
			if cmd.Flags().Changed("tif") {
				return usageErrorf("--tif: spill sets the trace intensifying factor from --intensity")
			}
			if o.trace != "" {
				return usageErrorf("--trace: spill intensifies the generated trace; a trace file cannot be scaled up")
			}
			if err := simCheckDelays(d.Mem, d.RTT, d.PerMsg, disk); err != nil {
				return err
			}
			if len(memories) == 0 {
				return usageErrorf("--memory: want at least one value")
			}
			mems = make([]spillMemory, len(memories))
			for i, s := range memories {
				m, err := parseSpillMemory(s)
				if err != nil {
					return err
				}
				mems[i] = m
			}
			var err error
			base, err = per.ghbaBase(cmd, o, &gf, maxGroup)
			return err
		}, func(cmd *cobra.Command) error {
			rows, err := runSpill(cmd, o, servers, intensities, mems, per, base, d, disk)
			if err != nil {
				return err
			}
			return printSpill(cmd, o, rows, per, base)
		}),
	}
	f := cmd.Flags()
	f.IntSliceVar(&servers, "servers", []int{100}, "number of metadata servers N (list)")
	f.IntVar(&maxGroup, "max-group", 9, "maximum group size M (G-HBA's optimum at N = 100, §3.2)")
	f.IntSliceVar(&intensities, "intensity", []int{1, 2, 4, 8}, "operation intensities: K disjoint copies of the base trace replayed together (list)")
	f.StringSliceVar(&memories, "memory", []string{"100%", "50%", "25%", "10%"}, "memory per server for filter replicas: P% of HBA's replica memory at the highest intensity, or bytes (KiB, MiB, GiB) (list)")
	f.Float64Var(&disk, "d-disk", disk, "assumed ms of one disk access, paid per spilled replica a probe reads")
	simDelayFlags(cmd, &d)
	per.registerWithGHBA(cmd, &gf)
	return cmd
}

// runSpill simulates every (N, intensity) once per seed (--runs, averaged
// by sim.Spill) and evaluates every memory size on it.
func runSpill(cmd *cobra.Command, o *simOptions, servers, intensities []int, mems []spillMemory, per simPerServer,
	base sim.GHBAConfig, d sim.Delays, disk float64) ([]spillRow, error) {
	p := newSimProgress(cmd, o, "spill", len(servers)*len(intensities)*o.runs)
	labels := make([]string, len(mems))
	for i, m := range mems {
		labels[i] = m.text
	}
	top := intensities[0]
	for _, k := range intensities {
		top = max(top, k)
	}
	var rows []spillRow
	for _, n := range servers {
		on := o.forServers(n, per.files, per.ops)
		// Replica size at the highest intensity: the reference of P%.
		initial, err := sim.InitialFiles(cmd.Context(), on.intensified(top).source())
		if err != nil {
			return nil, simError(err)
		}
		rb, err := sim.ReplicaBytes(initial, n, base.BitsPerFile)
		if err != nil {
			return nil, simError(err)
		}
		memory := make([]int64, len(mems))
		for i, m := range mems {
			memory[i] = m.resolve(n, rb)
		}
		for _, k := range intensities {
			ok := on.intensified(k)
			p.total = ok.expectedRecords()
			p.next(fmt.Sprintf("spill N=%d intensity=%d", n, k))
			r := ok.replay(n, 0, p)
			res, err := sim.Spill(cmd.Context(), r, sim.SpillConfig{GHBA: base, Memory: memory, Delays: d, Disk: disk, Runs: o.runs})
			p.done()
			if err != nil {
				return nil, simError(err)
			}
			rows = append(rows, spillRow{Intensity: k, Ops: ok.ops, MemoryLabels: labels, SpillResult: res})
		}
	}
	return rows, nil
}

// intensified returns the options of k disjoint copies of o's generated
// trace replayed together: k× the files and ops, TIF k.
func (o *simOptions) intensified(k int) *simOptions {
	ok := *o
	ok.files, ok.ops, ok.tif = o.files*k, o.ops*k, k
	return &ok
}

func printSpill(cmd *cobra.Command, o *simOptions, rows []spillRow, per simPerServer, base sim.GHBAConfig) error {
	if err := simPrintJSON(cmd, o, rows); err != nil {
		return err
	}
	t := &simTable{header: []string{"servers", "M'", "intensity", "ops", "replica B", "memory", "memory B",
		"HBA spilled", "G-HBA spilled", "HBA P_LRU%", "HBA P_L2%", "G-HBA P_LRU%", "G-HBA P_L2%",
		"HBA ms", "G-HBA ms", "HBA/G-HBA"}}
	for _, r := range rows {
		for i, pt := range r.Points {
			ratio := math.NaN()
			if pt.GHBALatency > 0 {
				ratio = pt.HBALatency / pt.GHBALatency
			}
			t.add(simItoa(r.Servers), simItoa(r.GroupSizeMax), simItoa(r.Intensity), simItoa(r.Ops), simI64(r.ReplicaBytes),
				r.MemoryLabels[i], simI64(pt.MemoryBytes), simItoa(pt.HBASpilled), simF2(pt.GHBASpilledMean),
				simPct(r.HBA.PLRU), simPct(r.HBA.PL2), simPct(r.GHBA.PLRU), simPct(r.GHBA.PL2),
				simF4(pt.HBALatency), simF4(pt.GHBALatency), simF2(ratio))
		}
	}
	r0 := rows[0]
	trace := fmt.Sprintf("generated trace ×intensity: %s, %s at intensity 1, seed %d",
		budgetPerServer(per.files, o.files, "files"), budgetPerServer(per.ops, o.ops, "ops"), o.seed)
	title := fmt.Sprintf("Lookup latency when replicas spill to disk (G-HBA §3.2, Fig. 4), %s; M %d, LRU %d entries, %v bits/file, threshold %v%%\n"+
		"assumed delays: D_mem = %v ms, D_group = %v + %v·(M'−1) ms, D_net = %v + %v·(N−1) ms, D_disk = %v ms per spilled replica probed",
		trace, r0.MaxGroup, base.LRUEntries, base.BitsPerFile, base.Threshold*100, r0.Delays.Mem, r0.Delays.RTT, r0.Delays.PerMsg,
		r0.Delays.RTT, r0.Delays.PerMsg, r0.DiskMs)
	if more, err := t.emit(cmd, o, title, "spill.csv"); err != nil || !more {
		return err
	}
	c := &simChart{title: "Average lookup latency vs operation intensity (G-HBA Fig. 4)",
		xlabel: "timed operations (millions)", ylabel: "mean lookup latency (ms)", legend: "tl", yPrec: 2}
	multi := len(rows) > 0 && rows[0].Servers != rows[len(rows)-1].Servers
	for _, r := range rows {
		for i, pt := range r.Points {
			suffix := " " + r.MemoryLabels[i]
			if multi {
				suffix += " N=" + strconv.Itoa(r.Servers)
			}
			x := float64(r.Ops) / 1e6
			c.line("HBA"+suffix).add(x, pt.HBALatency)
			c.line("G-HBA"+suffix).add(x, pt.GHBALatency)
		}
	}
	return c.save(o.out, "spill_latency.png")
}
