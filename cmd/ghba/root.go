package main

import (
	"github.com/spf13/cobra"
)

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "ghba",
		Short: "G-HBA: a distributed metadata service routed by Bloom filter arrays",
		Long: `ghba is a distributed, consistent metadata service for very large file systems.
Replicated Bloom filter arrays (HBA, G-HBA) route a path to its home metadata
server in one hop most of the time.`,
		Example:       "  ghba sim pba --servers 100 --bits-per-file 8 --json",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	root.AddCommand(newSimCmd())
	return root
}
