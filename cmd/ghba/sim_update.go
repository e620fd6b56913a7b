package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/ghba/ghba/routing/sim"
)

func newSimUpdateCmd(o *simOptions) *cobra.Command {
	var (
		servers  []int
		maxGroup int
		per      simPerServer
		gf       ghbaFlags
		d        = sim.DefaultDelays
		base     sim.GHBAConfig // from the G-HBA flags (check)
	)
	cmd := &cobra.Command{
		Use:   "update",
		Short: "Latency of updating stale filter replicas: HBA vs G-HBA (G-HBA §2.3, Fig. 6)",
		Long: `Average latency of updating the replicas of a local filter that has changed
past the propagation threshold, for HBA and G-HBA, as a function of N (G-HBA
§2.3 "Updating Replica", §3.3, Fig. 6).

HBA multicasts the update to every other server (N−1 recipients); G-HBA
sends it to the holder of the replica in each other group, found through that
group's IDBFA (a multiple hit there costs one more message, dropped by the
wrong member). HBA and G-HBA are simulated on the same pass; the table gives
the propagations, the messages per update (G-HBA: measured, weighted by
each origin's propagations) and the latency of one update, a multicast to r
recipients taking --d-rtt + --d-per-msg·r (the convention of D_group and
D_net in "ghba sim optimal-m": HBA's update takes D_net). The delays are
ASSUMPTIONS. LRU filter updates are multicast to every server in both schemes
and are not counted.

The trace is scaled per server (--files-per-server, --ops-per-server; an
explicit --files / --ops is the total for every N). --out also writes
update.csv and update_latency.png.`,
		Example: `  ghba sim update
  ghba sim update --servers 20,40,60,80,100 --max-group 9 --json
  ghba sim update --servers 100,300,1000 --d-per-msg 0.05 --out sim-out/`,
		Args: noArgs,
		RunE: o.runE(func(cmd *cobra.Command) error {
			if err := simPositiveInts("servers", servers, 2); err != nil {
				return err
			}
			if maxGroup < 1 {
				return usageErrorf("--max-group %d: want at least 1", maxGroup)
			}
			if err := simCheckDelays(d.Mem, d.RTT, d.PerMsg); err != nil {
				return err
			}
			var err error
			base, err = per.ghbaBase(cmd, o, &gf, maxGroup)
			return err
		}, func(cmd *cobra.Command) error {
			p := newSimProgress(cmd, o, "update", len(servers)*o.runs)
			var rs []*sim.UpdateResult
			for _, n := range servers {
				on := o.forServers(n, per.files, per.ops)
				p.total = on.expectedRecords()
				p.next(fmt.Sprintf("update N=%d", n))
				res, err := sim.UpdateLatency(cmd.Context(), on.replay(n, 0, p), sim.UpdateConfig{GHBA: base, Delays: d, Runs: o.runs})
				p.done()
				if err != nil {
					return simError(err)
				}
				rs = append(rs, res)
			}
			return printUpdate(cmd, o, rs, per)
		}),
	}
	f := cmd.Flags()
	f.IntSliceVar(&servers, "servers", []int{20, 40, 60, 80, 100}, "number of metadata servers N (list)")
	f.IntVar(&maxGroup, "max-group", 9, "maximum group size M (G-HBA's optimum at N = 100, §3.2)")
	simDelayFlags(cmd, &d)
	per.registerWithGHBA(cmd, &gf)
	return cmd
}

func printUpdate(cmd *cobra.Command, o *simOptions, rs []*sim.UpdateResult, per simPerServer) error {
	if err := simPrintJSON(cmd, o, rs); err != nil {
		return err
	}
	t := &simTable{header: []string{"servers", "M", "groups", "HBA updates", "G-HBA updates", "HBA msgs/update", "G-HBA msgs/update",
		"HBA ms", "G-HBA ms", "HBA/G-HBA", "HBA msgs/s", "G-HBA msgs/s"}}
	for _, r := range rs {
		ratio := "-"
		if r.GHBALatency > 0 {
			ratio = simF2(r.HBALatency / r.GHBALatency)
		}
		t.add(simItoa(r.Servers), simItoa(r.MaxGroup), simItoa(r.Groups), simF2(r.HBAUpdates), simF2(r.GHBAUpdates),
			simF2(r.HBAMessagesPerUpdate), simF2(r.GHBAMessagesPerUpdate), simF4(r.HBALatency), simF4(r.GHBALatency), ratio,
			simF2(r.HBAMessagesPerSecond), simF2(r.GHBAMessagesPerSecond))
	}
	trace := o.describe()
	if o.trace == "" && (per.files > 0 || per.ops > 0) {
		trace = fmt.Sprintf("generated trace: %s, %s, TIF %d, seed %d",
			budgetPerServer(per.files, o.files, "files"), budgetPerServer(per.ops, o.ops, "ops"), o.tif, o.seed)
	}
	d := rs[0].Delays
	title := fmt.Sprintf("Latency of updating stale replicas (G-HBA §2.3, Fig. 6), %s\nassumed delays: a multicast to r recipients takes %v + %v·r ms",
		trace, d.RTT, d.PerMsg)
	if more, err := t.emit(cmd, o, title, "update.csv"); err != nil || !more {
		return err
	}
	c := &simChart{title: "Average latency of updating stale replicas (G-HBA Fig. 6)",
		xlabel: "servers N", ylabel: "latency of one update (ms)", legend: "tl", yPrec: 2}
	for _, r := range rs {
		x := float64(r.Servers)
		c.line("HBA").add(x, r.HBALatency)
		c.line("G-HBA").add(x, r.GHBALatency)
	}
	return c.save(o.out, "update_latency.png")
}
