package main

import (
	"strings"

	"github.com/spf13/cobra"
)

// newRootCmd returns the ghba command tree: the agent, the cluster and
// namespace client commands (sharing the global --addr, --json and
// --timeout flags), bench and sim.
func newRootCmd() *cobra.Command {
	co := &clientOptions{}
	root := &cobra.Command{
		Use:   "ghba",
		Short: "G-HBA: a distributed metadata service routed by Bloom filter arrays",
		Long: `ghba is a distributed, consistent metadata service for very large file systems.
Replicated Bloom filter arrays (HBA, G-HBA) route a path to its home metadata
server in one hop most of the time.

"ghba agent" runs a server; the other commands are clients that talk to the
node(s) given by --addr (or $GHBA_ADDR). Exit codes: 0 ok, 1 error, 2 usage,
3 not found, 4 already exists, 5 unavailable, 6 permission refused, 7 a missing,
wrong, revoked or expired token.`,
		Example: `  ghba agent --config testdata/node1.yaml
  ghba --addr 127.0.0.1:7410 members
  ghba mkdir -p /home/alice && ghba create /home/alice/notes.txt && ghba stat /home/alice/notes.txt
  ghba sim pba --servers 100 --bits-per-file 8 --json`,
		SilenceUsage:  true,
		SilenceErrors: true,
		// Args and RunE make an unknown command a usage error (exit 2)
		// instead of cobra's help output with exit 0.
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return nil
			}
			msg := "unknown command " + `"` + args[0] + `"` + " for ghba"
			if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
				msg += "; did you mean " + strings.Join(s, " or ") + "?"
			}
			return usageErrorf("%s (see ghba --help)", msg)
		},
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	co.addClientFlags(root.PersistentFlags())
	root.AddGroup(
		&cobra.Group{ID: "server", Title: "Server:"},
		&cobra.Group{ID: "cluster", Title: "Cluster:"},
		&cobra.Group{ID: "namespace", Title: "Namespace:"},
		&cobra.Group{ID: "security", Title: "Security:"},
		&cobra.Group{ID: "tools", Title: "Benchmarks and simulation:"},
	)
	add := func(group string, cmds ...*cobra.Command) {
		for _, c := range cmds {
			c.GroupID = group
			root.AddCommand(c)
		}
	}
	add("server", newAgentCmd())
	add("cluster", newClusterCmds(co)...)
	add("security", newTLSCmd(), newKeygenCmd(), newKeyringCmd(co))
	add("security", newACLCmds(co)...)
	add("namespace", newFSCmds(co)...)
	add("namespace", newImportCmd(co), newFindCmd(co), newSourceCmd(co), newScanCmd(co), newShareAgentCmd(co))
	add("namespace", newDataStoreCmd(co))
	add("namespace", newMountCmds(co)...)
	add("tools", newBenchCmd(co), newSimCmd())
	add("tools", newTraceCmd())
	return root
}
