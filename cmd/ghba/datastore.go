package main

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/ghba/ghba/node"
	"github.com/ghba/ghba/rpc"
	"github.com/ghba/ghba/rpc/client"
)

// newDataStoreCmd returns "ghba data-store" and its subcommands.
func newDataStoreCmd(o *clientOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "data-store",
		Short: "Show or set the object store that holds the contents of files (ghba mount)",
		Long: `The cluster keeps the URL of one object store for file contents: the blocks of
the files written through "ghba mount", and the store the nodes delete
objects from once no file references them (after data_gc_grace). The URL is
a record in the cluster (under /.ghba), so every node and every mount uses
the same store:

  file:///DIR      a directory (one machine, or a file system every node and
                   mount shares)
  s3://BUCKET?endpoint=http://HOST:PORT&use_path_style=true&region=us-east-1
                   an S3-compatible bucket; credentials from AWS_ACCESS_KEY_ID
                   and AWS_SECRET_ACCESS_KEY where the nodes and mounts run

Both take prefix=P/ to keep every key under P/. Reading it needs any valid
token, setting it the management role when ACLs are on.`,
		Example: `  ghba data-store set file:///srv/ghba-data
  ghba data-store show`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(newDataStoreShowCmd(o), newDataStoreSetCmd(o))
	return cmd
}

func newDataStoreShowCmd(o *clientOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "show",
		Short: "Show the cluster's data store",
		Long: `Show the URL of the cluster's data store and when it was set, or that none
is set. With --json: {url, set} (url "" when none is set; set in Unix
nanoseconds).`,
		Example: `  ghba data-store show
  ghba --json data-store show | jq -r .url`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withClient(cmd, o, func(ctx context.Context, c *client.Client) error {
				r, err := c.DataStore(ctx)
				if err != nil {
					return opError("data-store show", "", err)
				}
				if o.json {
					return writeJSON(cmd.OutOrStdout(), r.DataStore)
				}
				return printDataStore(cmd, &r.DataStore)
			})
		},
	}
}

func newDataStoreSetCmd(o *clientOptions) *cobra.Command {
	var force, noCheck bool
	cmd := &cobra.Command{
		Use:   "set URL [--force] [--no-check]",
		Short: "Set the cluster's data store",
		Long: `Set the cluster's data store to URL (file:///DIR or s3://BUCKET?...). The node
that serves the request first opens the store and writes, reads back and
deletes a probe object (--no-check skips this, for a store the nodes cannot
reach yet). Setting the URL that is set already changes nothing.

A different URL than the one set is refused (exit code 4): the files written
through ghba mount keep their contents in the old store, and their layouts
name objects that the new one does not have. Copy the objects first (the
keys stay the same), then give --force. Exit codes: 2 for a URL that is not
file:// or s3://, 1 for a store that fails its check, 5 when no node
answers, 6 without the management role. With --json: {url, set, changed}.`,
		Example: `  ghba data-store set file:///srv/ghba-data
  ghba data-store set 's3://ghba?endpoint=http://127.0.0.1:9000&use_path_style=true&region=us-east-1'
  ghba data-store set --force file:///mnt/new-data`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			url := args[0]
			if err := node.CheckDataStoreURL(url); err != nil {
				return usageError{err}
			}
			return withClient(cmd, o, func(ctx context.Context, c *client.Client) error {
				r, err := c.SetDataStore(ctx, &rpc.DataStoreSetRequest{URL: url, Force: force, NoCheck: noCheck})
				if err != nil {
					return opError("data-store set", url, err)
				}
				if o.json {
					return writeJSON(cmd.OutOrStdout(), r)
				}
				if !r.Changed {
					_, err := fmt.Fprintf(cmd.OutOrStdout(), "the data store is %s already\n", r.URL)
					return err
				}
				_, err = fmt.Fprintf(cmd.OutOrStdout(), "data store set to %s\n", r.URL)
				return err
			})
		},
	}
	f := cmd.Flags()
	f.BoolVar(&force, "force", false, "replace a different URL that is set (the contents in the old store are no longer found)")
	f.BoolVar(&noCheck, "no-check", false, "record the URL without checking that the store works from the node")
	return cmd
}

// printDataStore prints the data store record.
func printDataStore(cmd *cobra.Command, ds *rpc.DataStore) error {
	if ds.URL == "" {
		_, err := fmt.Fprintln(cmd.OutOrStdout(), "no data store is set (ghba data-store set URL)")
		return err
	}
	t := newTable(cmd.OutOrStdout())
	t.row("url", ds.URL)
	if ds.Set != 0 {
		t.row("set", time.Unix(0, ds.Set).Format(time.DateTime))
	}
	return t.flush()
}
