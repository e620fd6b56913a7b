package main

import (
	"context"
	"fmt"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/ghba/ghba/routing/sim"
)

func newSimHBACmd(o *simOptions) *cobra.Command {
	var (
		servers []int
		entries []int
		thr     []float64
		lruBits float64
		bits    float64
		adm     string
		cfg     sim.HBAConfig // from the flags (check)
	)
	cmd := &cobra.Command{
		Use:   "hba",
		Short: "HBA: LRU filter array over a PBA, vs PBA at 8/12/16 bits/file (HBA Figs. 8–13, Tables 4–6)",
		Long: `Simulate HBA (HBA §4.2.2): every server keeps an LRU list of the recently
accessed files it homes and an LRU filter of it (--lru-bits bits per entry);
the L1 array holds every server's LRU filter, the L2 array every server's
local filter at --bits-per-file. A lookup is resolved at L1 by a unique hit
on the home, else at L2, else it misses (broadcast). Replicas are updated by
deltas only when the owner's changed share of bits passes --threshold; each
propagation is one multicast update message.

PBA baselines at 8, 12 and 16 bits/file run on the same pass with the same
threshold. Memory is per server relative to PBA at 8 bits/file (filters
only: L2 + L1; the LRU list itself is reported apart).

--servers, --lru-entries and --threshold take lists; a --threshold sweep
gives hit rate vs update messages (HBA Fig. 12).

--l1-admission frequency lists a path in its home's LRU list only on its
second access within a window of 10× --lru-entries accesses (an adaptive
Bloom filter counts them), so a one-time scan does not flush the hot set;
lru (the default) lists every accessed path, as HBA does.`,
		Example: `  ghba sim hba --servers 10 --lru-entries 300 --json
  ghba sim hba --servers 100 --lru-entries 50,100,200,400
  ghba sim hba --servers 50 --lru-entries 300 --threshold 100,10,1,0.1,0.001 --out sim-out/
  ghba sim hba --servers 10,20,40,60,80,100 --lru-entries 300 --tif 4
  ghba sim hba --servers 10 --lru-entries 300 --scan-frac 0.3 --l1-admission frequency`,
		Args: noArgs,
		RunE: o.runE(func(cmd *cobra.Command) error {
			if err := simPositiveInts("servers", servers, 1); err != nil {
				return err
			}
			if err := simPositiveInts("lru-entries", entries, 0); err != nil {
				return err
			}
			thresholds, err := simPercentages("threshold", thr)
			if err != nil {
				return err
			}
			if !(lruBits > 0 && lruBits <= 64) || !(bits > 0 && bits <= 64) {
				return usageErrorf("--lru-bits %v / --bits-per-file %v: want values in (0, 64]", lruBits, bits)
			}
			a, err := simL1Admission(adm)
			if err != nil {
				return err
			}
			cfg = sim.HBAConfig{LRUEntries: entries, Thresholds: thresholds, LRUBitsPerEntry: lruBits, BitsPerFile: bits, L1Admission: a}
			return nil
		}, func(cmd *cobra.Command) error {
			results, err := simRunAveraged(cmd, o, "hba", servers, func(ctx context.Context, r sim.Replay) ([]sim.HBAResult, error) {
				return sim.HBA(ctx, r, cfg)
			})
			if err != nil {
				return err
			}
			return printHBA(cmd, o, results, len(servers) > 1, len(entries) > 1, len(cfg.Thresholds) > 1)
		}),
	}
	f := cmd.Flags()
	f.IntSliceVar(&servers, "servers", []int{10}, "number of metadata servers N (list)")
	f.IntSliceVar(&entries, "lru-entries", []int{300}, "LRU list entries per server (list)")
	f.Float64SliceVar(&thr, "threshold", []float64{1}, "propagation threshold in percent of a filter's bits (list); 0 = every change")
	f.Float64Var(&lruBits, "lru-bits", 20, "bits per entry of the LRU filters")
	f.Float64Var(&bits, "bits-per-file", 8, "bits per file of the L2 (local) filters")
	simL1AdmissionFlag(cmd, &adm)
	return cmd
}

func printHBA(cmd *cobra.Command, o *simOptions, rs []sim.HBAResult, byServers, byEntries, byThreshold bool) error {
	if err := simPrintJSON(cmd, o, rs); err != nil {
		return err
	}
	t := &simTable{header: []string{"servers", "LRU", "threshold%", "HBA hit%", "LRU hit%", "PBA8%", "PBA12%", "PBA16%",
		"HBA mem", "PBA12 mem", "PBA16 mem", "L1 msgs", "L2 msgs", "msgs/s"}}
	for _, r := range rs {
		t.add(simItoa(r.Servers), simItoa(r.LRUEntries), simG(r.ThresholdPercent), simPct(r.HitRate), simPct(r.LRUHitRate),
			simPct(r.PBA8HitRate), simPct(r.PBA12HitRate), simPct(r.PBA16HitRate),
			simRatio(r.HBAMemoryVsPBA8), simRatio(r.PBA12MemoryVsPBA8), simRatio(r.PBA16MemoryVsPBA8),
			simI64(r.L1Messages), simI64(r.L2Messages), simF2(r.MessagesPerSecond))
	}
	if more, err := t.emit(cmd, o, fmt.Sprintf("HBA (HBA §4.2.2), %s; L1 admission %s; memory relative to PBA at 8 bits/file", o.describe(), rs[0].L1Admission), "hba.csv"); err != nil || !more {
		return err
	}
	if byThreshold {
		c := &simChart{title: "HBA hit rate vs update traffic (HBA Fig. 12)", xlabel: "update messages per second (trace time)", ylabel: "hit rate", legend: "br"}
		for _, r := range rs {
			c.line(fmt.Sprintf("HBA N=%d LRU=%d", r.Servers, r.LRUEntries)).add(r.MessagesPerSecond, r.HitRate)
		}
		if err := c.save(o.out, "hba_threshold.png"); err != nil {
			return err
		}
	}
	if byServers || byEntries {
		xname, x := "servers N", func(r sim.HBAResult) float64 { return float64(r.Servers) }
		key := func(r sim.HBAResult) string { return "LRU=" + strconv.Itoa(r.LRUEntries) }
		if !byServers {
			xname, x = "LRU entries per server", func(r sim.HBAResult) float64 { return float64(r.LRUEntries) }
			key = func(r sim.HBAResult) string { return "N=" + strconv.Itoa(r.Servers) }
		}
		c := &simChart{title: "HBA vs PBA hit rates (HBA Figs. 8–11)", xlabel: xname, ylabel: "hit rate", legend: "br"}
		for _, r := range rs {
			if byThreshold && r.ThresholdPercent != rs[0].ThresholdPercent {
				continue
			}
			c.line("HBA "+key(r)).add(x(r), r.HitRate)
			c.line("LRU "+key(r)).add(x(r), r.LRUHitRate)
			if byServers && r.LRUEntries == rs[0].LRUEntries {
				c.line("PBA8").add(x(r), r.PBA8HitRate)
				c.line("PBA12").add(x(r), r.PBA12HitRate)
				c.line("PBA16").add(x(r), r.PBA16HitRate)
			}
		}
		if err := c.save(o.out, "hba_hit.png"); err != nil {
			return err
		}
	}
	return nil
}
