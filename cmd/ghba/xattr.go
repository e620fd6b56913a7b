package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/ghba/ghba/rpc"
	"github.com/ghba/ghba/rpc/client"
)

// newXattrCmd returns `ghba xattr` and its subcommands: the extended
// attributes of a path, as getfattr(1) and setfattr(1) handle them.
func newXattrCmd(o *clientOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "xattr",
		Short: "List, read, set and remove a path's extended attributes",
		Long: `Extended attributes are name=value pairs of an inode, as setxattr(2) keeps
them: names in the namespaces "user.", "trusted." and "security." (at most 255
bytes), values of at most 64 KiB, and at most 64 KiB of names and values per
inode. A rename keeps them. With ACLs on, "user." attributes of regular files
and directories may be changed with write permission, the others by root only.
They need every node of the cluster to speak shard log format 4 (exit code 1
with "unsupported" until then).`,
		Example: `  ghba xattr set /data/a.jpg user.origin camera-2
  ghba xattr get /data/a.jpg user.origin
  ghba xattr list /data/a.jpg
  ghba xattr rm /data/a.jpg user.origin`,
	}
	cmd.AddCommand(newXattrListCmd(o), newXattrGetCmd(o), newXattrSetCmd(o), newXattrRmCmd(o))
	return cmd
}

// withXattrs runs fn with the extended attributes of path p.
func withXattrs(cmd *cobra.Command, o *clientOptions, p string, fn func(xs []rpc.Xattr) error) error {
	if err := checkPath(p); err != nil {
		return err
	}
	return withClient(cmd, o, func(ctx context.Context, c *client.Client) error {
		st, err := c.Stat(ctx, p)
		if err != nil {
			return opError("xattr", p, err)
		}
		return fn(st.Inode.Xattrs)
	})
}

func newXattrListCmd(o *clientOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "list PATH",
		Short: "Print the names of a path's extended attributes, one a line",
		Long: `Print the names of PATH's extended attributes, one a line, sorted. --json prints
them with their values (base64, as JSON carries bytes).`,
		Example: `  ghba xattr list /data/a.jpg
  ghba --json xattr list /data/a.jpg`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withXattrs(cmd, o, args[0], func(xs []rpc.Xattr) error {
				if o.json {
					return writeJSON(cmd.OutOrStdout(), append([]rpc.Xattr{}, xs...))
				}
				for _, x := range xs {
					fmt.Fprintln(cmd.OutOrStdout(), x.Name)
				}
				return nil
			})
		},
	}
}

func newXattrGetCmd(o *clientOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "get PATH NAME",
		Short: "Print the value of one extended attribute",
		Long: `Print the value of PATH's extended attribute NAME as it is, bytes for bytes
(no newline is added). Exit code 1 with "no such extended attribute" when PATH
has none of that name.`,
		Example: `  ghba xattr get /data/a.jpg user.origin`,
		Args:    exactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, name := args[0], args[1]
			return withXattrs(cmd, o, p, func(xs []rpc.Xattr) error {
				for _, x := range xs {
					if x.Name == name {
						_, err := cmd.OutOrStdout().Write(x.Value)
						return err
					}
				}
				return fmt.Errorf("%s: %w: %s", p, rpc.ErrNoAttr, name)
			})
		},
	}
}

func newXattrSetCmd(o *clientOptions) *cobra.Command {
	var create, replace bool
	cmd := &cobra.Command{
		Use:   "set PATH NAME VALUE",
		Short: "Set one extended attribute",
		Long: `Set PATH's extended attribute NAME to VALUE (its bytes, as given). --create
fails (exit code 4) if the attribute exists, --replace (exit code 1) if it does
not; past 64 KiB of attributes on the inode the change is refused ("no
space"). --json prints the updated inode.`,
		Example: `  ghba xattr set /data/a.jpg user.origin camera-2
  ghba xattr set --create /data/a.jpg user.checked yes`,
		Args: exactArgs(3),
		RunE: func(cmd *cobra.Command, args []string) error {
			p := args[0]
			if err := checkPath(p); err != nil {
				return err
			}
			if create && replace {
				return usageErrorf("xattr set: --create and --replace exclude each other")
			}
			ch := &rpc.XattrChange{Name: args[1], Value: []byte(args[2]), Create: create, Replace: replace}
			return setAttr(cmd, o, &rpc.SetAttrRequest{Path: p, Xattr: ch}, "xattr set")
		},
	}
	cmd.Flags().BoolVar(&create, "create", false, "fail if the attribute exists (XATTR_CREATE)")
	cmd.Flags().BoolVar(&replace, "replace", false, "fail if the attribute does not exist (XATTR_REPLACE)")
	return cmd
}

func newXattrRmCmd(o *clientOptions) *cobra.Command {
	return &cobra.Command{
		Use:     "rm PATH NAME",
		Short:   "Remove one extended attribute",
		Long:    `Remove PATH's extended attribute NAME (exit code 1 when it has none of that name).`,
		Example: `  ghba xattr rm /data/a.jpg user.origin`,
		Args:    exactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			p := args[0]
			if err := checkPath(p); err != nil {
				return err
			}
			ch := &rpc.XattrChange{Name: args[1], Remove: true}
			return setAttr(cmd, o, &rpc.SetAttrRequest{Path: p, Xattr: ch}, "xattr rm")
		},
	}
}
