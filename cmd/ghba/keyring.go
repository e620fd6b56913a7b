package main

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/ghba/ghba/rpc"
	"github.com/ghba/ghba/rpc/client"
	"github.com/spf13/cobra"
)

// newKeyringCmd returns "ghba keyring".
func newKeyringCmd(o *clientOptions) *cobra.Command {
	var install, use, remove string
	cmd := &cobra.Command{
		Use:   "keyring [--install KEY | --use KEY | --remove KEY]",
		Short: "List or rotate the gossip encryption keys of every member",
		Long: `Manage the keys Serf encrypts gossip with (config encrypt), on every member at
once through Serf's key manager. Without a flag it lists the keys: for each,
how many members hold it and how many use it as the primary key (the one
messages are encrypted with; every installed key decrypts).

Rotate a key in three steps, each on every member: --install NEW, then --use
NEW, then --remove OLD. A node keeps its keys in data_dir/serf/local.keyring,
so a rotated key survives a restart (the encrypt key of the config is then
ignored); a new node needs a key the members still hold. A member that could
not do an operation is named with its reason, and the exit code is 1.

With --json: {keys: {KEY: members}, primary_keys: {KEY: members}, members,
answered, failed, messages}.`,
		Example: `  ghba keyring
  NEW=$(ghba keygen) && ghba keyring --install "$NEW" && ghba keyring --use "$NEW"
  ghba keyring --remove OLDKEY`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			op, key := rpc.KeyringList, ""
			n := 0
			for _, f := range []struct{ op, key string }{{rpc.KeyringInstall, install}, {rpc.KeyringUse, use}, {rpc.KeyringRemove, remove}} {
				if f.key != "" {
					op, key = f.op, f.key
					n++
				}
			}
			if n > 1 {
				return usageErrorf("keyring: give at most one of --install, --use and --remove")
			}
			return withClient(cmd, o, func(ctx context.Context, c *client.Client) error {
				r, err := c.Keyring(ctx, op, key)
				if err != nil {
					return fmt.Errorf("keyring: %w", err)
				}
				if o.json {
					return writeJSON(cmd.OutOrStdout(), r)
				}
				if op != rpc.KeyringList {
					fmt.Fprintf(cmd.OutOrStdout(), "%s: done on %d of %d members\n", op, r.Answered-r.Failed, r.Members)
					return nil
				}
				t := newTable(cmd.OutOrStdout(), "KEY", "MEMBERS", "PRIMARY ON")
				for _, k := range slices.Sorted(maps.Keys(r.Keys)) {
					t.row(k, fmt.Sprintf("%d/%d", r.Keys[k], r.Members), r.PrimaryKeys[k])
				}
				return t.flush()
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&install, "install", "", "install KEY (base64, from ghba keygen) on every member")
	f.StringVar(&use, "use", "", "make the installed KEY the primary key on every member")
	f.StringVar(&remove, "remove", "", "remove KEY (not the primary) from every member")
	return cmd
}
