package main

import (
	"context"
	"fmt"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/ghba/ghba/routing/sim"
)

// ghbaFlags are the G-HBA model flags shared by ghba and optimal-m.
type ghbaFlags struct {
	entries int
	lruBits float64
	bits    float64
	thr     float64
}

func (g *ghbaFlags) register(cmd *cobra.Command) {
	f := cmd.Flags()
	f.IntVar(&g.entries, "lru-entries", 300, "LRU list entries per server (L1)")
	f.Float64Var(&g.lruBits, "lru-bits", 20, "bits per entry of the LRU filters")
	f.Float64Var(&g.bits, "bits-per-file", 8, "bits per file of the local filters and their segment replicas")
	f.Float64Var(&g.thr, "threshold", 1, "propagation threshold in percent of a filter's bits; 0 = every change")
}

func (g *ghbaFlags) config() (sim.GHBAConfig, error) {
	switch {
	case g.entries < 0:
		return sim.GHBAConfig{}, usageErrorf("--lru-entries %d: want at least 0", g.entries)
	case !(g.lruBits > 0 && g.lruBits <= 64) || !(g.bits > 0 && g.bits <= 64):
		return sim.GHBAConfig{}, usageErrorf("--lru-bits %v / --bits-per-file %v: want values in (0, 64]", g.lruBits, g.bits)
	case !(g.thr >= 0 && g.thr <= 100):
		return sim.GHBAConfig{}, usageErrorf("--threshold %v: want a percentage in [0, 100]", g.thr)
	}
	return sim.GHBAConfig{LRUEntries: g.entries, LRUBitsPerEntry: g.lruBits, BitsPerFile: g.bits, Threshold: g.thr / 100}, nil
}

func newSimGHBACmd(o *simOptions) *cobra.Command {
	var (
		servers []int
		groups  []int
		gf      ghbaFlags
		adm     string
		cfgs    []sim.GHBAConfig // one per --max-group (check)
	)
	cmd := &cobra.Command{
		Use:   "ghba",
		Short: "G-HBA: lookups resolved per level L1..L4 and memory vs BFA8 (G-HBA Fig. 7, Table 4)",
		Long: `Simulate G-HBA (G-HBA §2): N servers in ⌈N/M⌉ groups of at most M (sizes
differ by at most one). Each group's Assignment gives each member about
(N−M')/M' replicas of outside servers' local filters; a server's L2 segment
array is those replicas plus its own local filter. L1 is the array of every
server's LRU filter.

A request enters a random server X. L1: a unique hit on the home resolves it.
L2: X's segment array; a unique hit on the home resolves it (a unique hit on a
wrong server is a false positive: one wasted hop, go on). L3: multicast to
X's group; exactly one positive across the group's segment arrays and local
filters, on the home, resolves it. L4: system-wide multicast.

memory_vs_bfa8 is the memory per server of the segment array (replicas + own
local filter) relative to a pure array of N filters at 8 bits/file, for
members of the largest groups: ((N−M')/M'+1)/N, G-HBA Table 4.
memory_vs_bfa8_total adds the L1 array (N LRU filters) at the simulated
scale, where files per server are far fewer than in the paper.
Update traffic: LRU filters are multicast past the threshold; a local filter
goes to its holder in every other group (found through that group's IDBFA).

--l1-admission frequency lists a path in its home's LRU list only on its
second access within a window of 10× --lru-entries accesses (an adaptive
Bloom filter counts them), so a one-time scan does not flush the hot set;
lru (the default) lists every accessed path, as HBA does.`,
		Example: `  ghba sim ghba --servers 100 --max-group 9 --json
  ghba sim ghba --servers 20,40,60,80,100 --max-group 9 --out sim-out/
  ghba sim ghba --servers 100 --max-group 9 --bits-per-file 16
  ghba sim ghba --servers 100 --max-group 9 --scan-frac 0.3 --l1-admission frequency`,
		Args: noArgs,
		RunE: o.runE(func(*cobra.Command) error {
			if err := simPositiveInts("servers", servers, 1); err != nil {
				return err
			}
			if err := simPositiveInts("max-group", groups, 1); err != nil {
				return err
			}
			base, err := gf.config()
			if err != nil {
				return err
			}
			if base.L1Admission, err = simL1Admission(adm); err != nil {
				return err
			}
			cfgs = make([]sim.GHBAConfig, len(groups))
			for i, m := range groups {
				cfgs[i] = base
				cfgs[i].MaxGroup = m
			}
			return nil
		}, func(cmd *cobra.Command) error {
			results, err := simRunAveraged(cmd, o, "ghba", servers, func(ctx context.Context, r sim.Replay) ([]sim.GHBAResult, error) {
				return sim.GHBA(ctx, r, cfgs...)
			})
			if err != nil {
				return err
			}
			return printGHBA(cmd, o, results, len(servers) > 1)
		}),
	}
	f := cmd.Flags()
	f.IntSliceVar(&servers, "servers", []int{100}, "number of metadata servers N (list)")
	f.IntSliceVar(&groups, "max-group", []int{9}, "maximum group size M (list)")
	gf.register(cmd)
	simL1AdmissionFlag(cmd, &adm)
	return cmd
}

func printGHBA(cmd *cobra.Command, o *simOptions, rs []sim.GHBAResult, byServers bool) error {
	if err := simPrintJSON(cmd, o, rs); err != nil {
		return err
	}
	t := &simTable{header: []string{"servers", "M", "groups", "L1%", "L2%", "L3%", "L4%", "L1+L2%", "in group%",
		"FP L1%", "FP L2%", "FP L3%", "hops", "msgs/lookup", "replicas", "mem vs BFA8", "segment", "L1 part"}}
	for _, r := range rs {
		t.add(simItoa(r.Servers), simItoa(r.MaxGroup), simItoa(r.Groups),
			simPct(r.Levels["L1"]), simPct(r.Levels["L2"]), simPct(r.Levels["L3"]), simPct(r.Levels["L4"]),
			simPct(r.L1L2), simPct(r.WithinGroup),
			simPct(r.FalsePositives["L1"]), simPct(r.FalsePositives["L2"]), simPct(r.FalsePositives["L3"]),
			simF2(r.MeanHops), simF2(r.MeanMessages), simF2(r.ReplicasMean), simRatio(r.TotalMemoryVsBFA8), simRatio(r.MemoryVsBFA8), simRatio(r.LRUMemoryVsBFA8))
	}
	if more, err := t.emit(cmd, o, fmt.Sprintf("G-HBA (G-HBA §2), %s; LRU %d entries (admission %s), %v bits/file, threshold %v%%",
		o.describe(), rs[0].LRUEntries, rs[0].L1Admission, rs[0].BitsPerFile, rs[0].ThresholdPercent), "ghba.csv"); err != nil || !more {
		return err
	}
	xname, x := "max group size M", func(r sim.GHBAResult) float64 { return float64(r.MaxGroup) }
	key := func(r sim.GHBAResult) string { return " N=" + strconv.Itoa(r.Servers) }
	if byServers {
		xname, x = "servers N", func(r sim.GHBAResult) float64 { return float64(r.Servers) }
		key = func(r sim.GHBAResult) string { return " M=" + strconv.Itoa(r.MaxGroup) }
	}
	c := &simChart{title: "G-HBA: share of lookups resolved by level (G-HBA Fig. 7)", xlabel: xname, ylabel: "cumulative share of lookups", legend: "br"}
	m := &simChart{title: "G-HBA memory per server vs BFA8 (G-HBA Table 4)", xlabel: xname, ylabel: "memory / BFA8"}
	for _, r := range rs {
		c.line("L1"+key(r)).add(x(r), r.Levels["L1"])
		c.line("L1+L2"+key(r)).add(x(r), r.L1L2)
		c.line("L1+L2+L3"+key(r)).add(x(r), r.WithinGroup)
		m.line("G-HBA"+key(r)).add(x(r), r.TotalMemoryVsBFA8)
	}
	if err := c.save(o.out, "ghba_levels.png"); err != nil {
		return err
	}
	return m.save(o.out, "ghba_memory.png")
}
