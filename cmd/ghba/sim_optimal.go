package main

import (
	"fmt"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/ghba/ghba/routing/sim"
)

func newSimOptimalMCmd(o *simOptions) *cobra.Command {
	var (
		servers    []int
		minM, maxM int
		gf         ghbaFlags
		d          = sim.DefaultDelays
		base       sim.GHBAConfig // from the G-HBA flags (check)
	)
	cmd := &cobra.Command{
		Use:   "optimal-m",
		Short: "Group size M that maximizes normalized throughput Γ (G-HBA §2.5, Figs. 2, 3)",
		Long: `For every maximum group size M in the sweep, simulate G-HBA on the trace to
measure P_LRU (share resolved at L1) and P_L2 (share of L1 failures resolved
within the group), evaluate the latency model of G-HBA eq. 3 (as read in
routing.LatencyModel), and Γ = 1/(U_lat·U_space) (eq. 1).

U_space is the measured memory per server relative to a pure array at 8
bits/file (replicas + own local filter + L1 array). gamma_eq2 uses the
paper's eq. 2 literally, (N−M)/M replicas only: it grows without bound as M
approaches N, so its maximum is always the largest M swept.

The delays are ASSUMPTIONS (the paper does not publish its values):
  D_LRU = D_L2 = --d-mem (an in-memory array probe),
  D_group = --d-rtt + --d-per-msg·(M'−1)   (group multicast, grows with M),
  D_net   = --d-rtt + --d-per-msg·(N−1)    (system multicast, grows with N).
Values of M giving the same grouping as a smaller M are skipped.`,
		Example: `  ghba sim optimal-m --servers 30
  ghba sim optimal-m --servers 30,100 --json
  ghba sim optimal-m --servers 100 --max-m 16 --d-per-msg 0.05 --out sim-out/`,
		Args: noArgs,
		RunE: o.runE(func(*cobra.Command) error {
			if err := simPositiveInts("servers", servers, 2); err != nil {
				return err
			}
			if minM < 0 || maxM < 0 || (maxM > 0 && maxM < minM) {
				return usageErrorf("--min-m %d / --max-m %d: want 0 ≤ min ≤ max", minM, maxM)
			}
			if err := simCheckDelays(d.Mem, d.RTT, d.PerMsg); err != nil {
				return err
			}
			var err error
			if base, err = gf.config(); err != nil {
				return err
			}
			return nil
		}, func(cmd *cobra.Command) error {
			p := newSimProgress(cmd, o, "optimal-m", len(servers)*o.runs)
			var results []*sim.OptimalMResult
			for _, n := range servers {
				// OptimalM replays o.runs times itself; count its passes.
				p.next(fmt.Sprintf("optimal-m N=%d", n))
				r := o.replay(n, 0, p)
				res, err := sim.OptimalM(cmd.Context(), r, sim.OptimalMConfig{MinM: minM, MaxM: maxM, GHBA: base, Delays: d, Runs: o.runs})
				p.done()
				if err != nil {
					return simError(err)
				}
				results = append(results, res)
			}
			return printOptimalM(cmd, o, results)
		}),
	}
	f := cmd.Flags()
	f.IntSliceVar(&servers, "servers", []int{30}, "number of metadata servers N (list)")
	f.IntVar(&minM, "min-m", 0, "smallest M of the sweep (0: 2)")
	f.IntVar(&maxM, "max-m", 0, "largest M of the sweep (0: min(N−1, 2⌈√N⌉+2))")
	simDelayFlags(cmd, &d)
	gf.register(cmd)
	return cmd
}

func printOptimalM(cmd *cobra.Command, o *simOptions, rs []*sim.OptimalMResult) error {
	if err := simPrintJSON(cmd, o, rs); err != nil {
		return err
	}
	t := &simTable{header: []string{"servers", "M", "M'", "P_LRU%", "P_L2%", "latency ms", "space vs BFA8", "gamma", "gamma eq2"}}
	summary := &simTable{header: []string{"servers", "optimal M", "within 2%", "optimal M (eq. 2)"}}
	for _, r := range rs {
		for _, run := range r.Runs {
			k := strconv.Itoa(run.MaxGroup)
			t.add(simItoa(r.Servers), k, simItoa(r.GroupSize[k]), simPct(r.PLRU[k]), simPct(r.PL2[k]),
				simF4(r.Latency[k]), simRatio(r.Space[k]), simG(r.Gamma[k]), simG(r.GammaEq2[k]))
		}
		summary.add(simItoa(r.Servers), simItoa(r.OptimalM), fmt.Sprint(r.Near), simItoa(r.OptimalMEq2))
	}
	if !o.json {
		w := cmd.OutOrStdout()
		d := rs[0].Delays
		fmt.Fprintf(w, "Optimal group size (G-HBA §2.5), %s\nassumed delays: D_LRU = D_L2 = %v ms, D_group = %v + %v·(M'−1) ms, D_net = %v + %v·(N−1) ms\n",
			o.describe(), d.Mem, d.RTT, d.PerMsg, d.RTT, d.PerMsg)
		if err := t.print(w); err != nil {
			return err
		}
		fmt.Fprintln(w)
		if err := summary.print(w); err != nil {
			return err
		}
	}
	if o.out == "" {
		return nil
	}
	if err := t.writeCSV(o.out, "optimal_m.csv"); err != nil {
		return err
	}
	if err := summary.writeCSV(o.out, "optimal_m_summary.csv"); err != nil {
		return err
	}
	c := &simChart{title: "G-HBA normalized throughput (G-HBA Fig. 2)", xlabel: "max group size M", ylabel: "Γ / max Γ", legend: "br"}
	for _, r := range rs {
		best := r.Gamma[strconv.Itoa(r.OptimalM)]
		for _, run := range r.Runs {
			c.line("N="+strconv.Itoa(r.Servers)).add(float64(run.MaxGroup), r.Gamma[strconv.Itoa(run.MaxGroup)]/best)
		}
	}
	if err := c.save(o.out, "optimal_m_gamma.png"); err != nil {
		return err
	}
	if len(rs) > 1 {
		c := &simChart{title: "Optimal group size vs servers (G-HBA Fig. 3)", xlabel: "servers N", ylabel: "optimal M"}
		for _, r := range rs {
			c.line("optimal M").add(float64(r.Servers), float64(r.OptimalM))
		}
		return c.save(o.out, "optimal_m_vs_n.png")
	}
	return nil
}
