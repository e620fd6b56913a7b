package main

import (
	"github.com/spf13/cobra"

	"github.com/ghba/ghba/routing/sim"
)

func newSimMigrationCmd(o *simOptions) *cobra.Command {
	var (
		servers []int
		maxM    int
	)
	cmd := &cobra.Command{
		Use:   "migration",
		Short: "Replicas moved when one server joins: HBA vs hash placement vs G-HBA (G-HBA Fig. 5)",
		Long: `Count the filter replicas that must move when one server joins a system of
N servers:
  hba:  the newcomer copies every server's filter (N);
  hash: the group the newcomer joins recomputes members[hash(origin) mod M']
        for its N−M' origins (routing.HashHolder before and after);
  ghba: the light-weight migration of routing.Assignment.AddMember (each
        member hands over current − (N−M')/(M'+1) replicas).
The servers form the groups of N+1 servers (at most --max-group each, sizes
differing by at most one) and the newcomer joins its group. This runs on the
structures alone: the trace flags do not change it.`,
		Example: `  ghba sim migration --servers 100 --max-group 9 --json
  ghba sim migration --servers 10,20,40,60,80,100 --max-group 9 --out sim-out/`,
		Args: noArgs,
		RunE: o.runE(func(*cobra.Command) error {
			if err := simPositiveInts("servers", servers, 1); err != nil {
				return err
			}
			if maxM < 1 {
				return usageErrorf("--max-group %d: want at least 1", maxM)
			}
			return nil
		}, func(cmd *cobra.Command) error {
			var rs []sim.MigrationResult
			for _, n := range servers {
				if err := cmd.Context().Err(); err != nil {
					return err
				}
				r, err := sim.Migration(sim.MigrationConfig{Servers: n, MaxGroup: maxM})
				if err != nil {
					return simError(err)
				}
				rs = append(rs, r)
			}
			return printMigration(cmd, o, rs)
		}),
	}
	f := cmd.Flags()
	f.IntSliceVar(&servers, "servers", []int{100}, "number of servers N before the join (list)")
	f.IntVar(&maxM, "max-group", 9, "maximum group size M")
	return cmd
}

func printMigration(cmd *cobra.Command, o *simOptions, rs []sim.MigrationResult) error {
	if err := simPrintJSON(cmd, o, rs); err != nil {
		return err
	}
	t := &simTable{header: []string{"servers", "M", "M' before", "origins", "HBA", "hash", "hash expected", "G-HBA", "G-HBA expected", "IDBFA misroutes"}}
	for _, r := range rs {
		t.add(simItoa(r.Servers), simItoa(r.MaxGroup), simItoa(r.GroupSizeBefore), simItoa(r.Origins), simItoa(r.HBA),
			simItoa(r.Hash), simF2(r.HashExpected), simItoa(r.GHBA), simF2(r.GHBAExpected), simItoa(r.IDBFAMisroutes))
	}
	if more, err := t.emit(cmd, o, "Replicas moved when one server joins (G-HBA §2.4, Fig. 5)", "migration.csv"); err != nil || !more {
		return err
	}
	c := &simChart{title: "Replicas migrated when a server joins (G-HBA Fig. 5)", xlabel: "servers N", ylabel: "replicas moved"}
	for _, r := range rs {
		x := float64(r.Servers)
		c.line("HBA").add(x, float64(r.HBA))
		c.line("hash placement").add(x, float64(r.Hash))
		c.line("G-HBA").add(x, float64(r.GHBA))
	}
	return c.save(o.out, "migration.png")
}
