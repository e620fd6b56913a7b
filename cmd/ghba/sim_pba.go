package main

import (
	"context"
	"fmt"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/ghba/ghba/routing/sim"
)

func newSimPBACmd(o *simOptions) *cobra.Command {
	var (
		servers    []int
		bits       []float64
		hashes     []int
		thr        []float64
		thresholds []float64       // thr as shares of bits (check)
		cfgs       []sim.PBAConfig // every combination of the lists (check)
	)
	cmd := &cobra.Command{
		Use:   "pba",
		Short: "Pure Bloom filter array: simulated vs theoretical hit rates (HBA Figs. 2, 3, 6, 7, Table 4)",
		Long: `Simulate a pure Bloom filter array (PBA, HBA §4.2.1): every server keeps a
counting filter of the files it homes, replicated to every server; a lookup
probes all N filters and succeeds on a unique hit on the right home.

sim_hit_rate is the share of lookups of existing files with a unique hit on
the home; sim_false_new the share of lookups of absent (new) files with
exactly one positive. theory_hit_rate = (1−f)^(N−1) and theory_false_new =
N·f·(1−f)^(N−1) (HBA eq. 1), with f = 0.6185^(m/n), or (1−e^(−k·n/m))^k when
--hashes is given. theory_hit_rate_fill applies the same formulas to the
measured fill of the simulated filters.

Every flag but --json takes a comma-separated list; the configurations of one
server count share one pass over the trace. --threshold (percent of a
filter's bits changed before its replicas are updated; 0 = every change) gives
HBA Table 4.`,
		Example: `  ghba sim pba --servers 100 --bits-per-file 8 --json
  ghba sim pba --servers 10,100 --bits-per-file 4,8,12,16,20 --out sim-out/
  ghba sim pba --servers 100 --bits-per-file 16 --hashes 1,2,4,6,8,11,14
  ghba sim pba --servers 10 --bits-per-file 8 --threshold 100,10,0.001,0.00001`,
		Args: noArgs,
		RunE: o.runE(func(*cobra.Command) (err error) {
			if err := simPositiveInts("servers", servers, 1); err != nil {
				return err
			}
			if err := simPositiveInts("hashes", hashes, 0); err != nil {
				return err
			}
			if thresholds, err = simPercentages("threshold", thr); err != nil {
				return err
			}
			if len(bits) == 0 {
				return usageErrorf("--bits-per-file: want at least one value")
			}
			for _, b := range bits {
				if !(b > 0 && b <= 64) {
					return usageErrorf("--bits-per-file %v: want a value in (0, 64]", b)
				}
			}
			for _, b := range bits {
				for _, k := range hashes {
					for _, t := range thresholds {
						cfgs = append(cfgs, sim.PBAConfig{BitsPerFile: b, Hashes: k, Threshold: t})
					}
				}
			}
			return nil
		}, func(cmd *cobra.Command) error {
			results, err := simRunAveraged(cmd, o, "pba", servers, func(ctx context.Context, r sim.Replay) ([]sim.PBAResult, error) {
				return sim.PBA(ctx, r, cfgs...)
			})
			if err != nil {
				return err
			}
			return printPBA(cmd, o, results, len(bits) > 1, len(hashes) > 1, len(thresholds) > 1)
		}),
	}
	f := cmd.Flags()
	f.IntSliceVar(&servers, "servers", []int{10}, "number of metadata servers N (list)")
	f.Float64SliceVar(&bits, "bits-per-file", []float64{8}, "bits per file m/n of every filter (list)")
	f.IntSliceVar(&hashes, "hashes", []int{0}, "hash functions k (list); 0 = optimal for the bits per file")
	f.Float64SliceVar(&thr, "threshold", []float64{0}, "propagation threshold in percent of a filter's bits (list); 0 = every change")
	return cmd
}

func printPBA(cmd *cobra.Command, o *simOptions, rs []sim.PBAResult, byBits, byHashes, byThreshold bool) error {
	if err := simPrintJSON(cmd, o, rs); err != nil {
		return err
	}
	t := &simTable{header: []string{"servers", "bits/file", "k", "threshold%", "theory hit%", "sim hit%", "fill-theory hit%", "theory false-new%", "sim false-new%", "update msgs"}}
	for _, r := range rs {
		t.add(simItoa(r.Servers), simG(r.BitsPerFile), simItoa(r.Hashes), simG(r.ThresholdPercent),
			simPct(r.TheoryHitRate), simPct(r.SimHitRate), simPct(r.TheoryHitRateFill),
			simPct(r.TheoryFalseNew), simPct(r.SimFalseNew), simI64(r.UpdateMessages))
	}
	if more, err := t.emit(cmd, o, fmt.Sprintf("PBA (HBA §4.2.1), %s", o.describe()), "pba.csv"); err != nil || !more {
		return err
	}
	// x axis: the first swept dimension among bits, hashes, threshold, servers.
	xname, x := "servers N", func(r sim.PBAResult) float64 { return float64(r.Servers) }
	logX := false
	switch {
	case byBits:
		xname, x = "bits per file (m/n)", func(r sim.PBAResult) float64 { return r.BitsPerFile }
	case byHashes:
		xname, x = "hash functions k", func(r sim.PBAResult) float64 { return float64(r.Hashes) }
	case byThreshold:
		xname, x, logX = "propagation threshold (%)", func(r sim.PBAResult) float64 { return r.ThresholdPercent }, true
	}
	label := func(r sim.PBAResult) string {
		s := "N=" + strconv.Itoa(r.Servers)
		if !byBits {
			s += " m/n=" + simG(r.BitsPerFile)
		}
		if byBits && byHashes {
			s += " k=" + strconv.Itoa(r.Hashes)
		}
		return s
	}
	hit := &simChart{title: "PBA hit rate of existing files (HBA Figs. 2, 6, 7)", xlabel: xname, ylabel: "hit rate", logX: logX, legend: "br"}
	fresh := &simChart{title: "PBA false-hit rate of new files (HBA Fig. 3)", xlabel: xname, ylabel: "false-hit rate", logX: logX, legend: "tr"}
	for _, r := range rs {
		if logX && r.ThresholdPercent <= 0 {
			continue
		}
		hit.line("theory "+label(r)).add(x(r), r.TheoryHitRate)
		hit.line("sim "+label(r)).add(x(r), r.SimHitRate)
		fresh.line("theory "+label(r)).add(x(r), r.TheoryFalseNew)
		fresh.line("sim "+label(r)).add(x(r), r.SimFalseNew)
	}
	if err := hit.save(o.out, "pba_hit.png"); err != nil {
		return err
	}
	return fresh.save(o.out, "pba_false_new.png")
}
