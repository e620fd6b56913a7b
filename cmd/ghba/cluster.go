package main

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/spf13/cobra"

	"github.com/ghba/ghba/rpc"
)

// defaultLeaveWait bounds "ghba leave", which drains the node's files.
const defaultLeaveWait = 10 * time.Minute

// newClusterCmds returns the membership commands: join, leave, members,
// groups.
func newClusterCmds(o *clientOptions) []*cobra.Command {
	return []*cobra.Command{newJoinCmd(o), newLeaveCmd(o), newMembersCmd(o), newGroupsCmd(o)}
}

// firstAddr returns the first --addr address: join and leave act on one
// particular node.
func firstAddr(cmd *cobra.Command, o *clientOptions) (string, error) {
	addrs, err := o.addrs(cmd)
	if err != nil {
		return "", err
	}
	return addrs[0], nil
}

// newJoinCmd returns "ghba join".
func newJoinCmd(o *clientOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "join SERF_ADDR...",
		Short: "Ask a node to join the cluster through existing members' Serf addresses",
		Long: `Ask the node at --addr (the first address) to join the cluster's Serf pool
through the given Serf addresses (host:port of existing members). It then
joins a group as its configuration says. Agents usually join by themselves
through retry_join; this is for joining by hand.`,
		Example: `  ghba --addr 127.0.0.1:7440 join 127.0.0.1:7412
  ghba --addr 10.0.0.4:7400 join 10.0.0.1:7402 10.0.0.2:7402`,
		Args: minArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			for _, a := range args {
				if _, _, err := net.SplitHostPort(a); err != nil {
					return usageErrorf("join: %q is not a Serf address host:port", a)
				}
			}
			addr, err := firstAddr(cmd, o)
			if err != nil {
				return err
			}
			return withClient(cmd, o, func(ctx context.Context, c *rpc.Client) error {
				r, err := c.Join(ctx, addr, args)
				if err != nil {
					return fmt.Errorf("join via %s: %w", addr, err)
				}
				if o.json {
					return writeJSON(cmd.OutOrStdout(), r)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%s contacted %d of %d node(s)\n", addr, r.Joined, len(args))
				return nil
			})
		},
	}
}

// newLeaveCmd returns "ghba leave".
func newLeaveCmd(o *clientOptions) *cobra.Command {
	var (
		nodeID string
		wait   time.Duration
	)
	cmd := &cobra.Command{
		Use:   "leave",
		Short: "Ask a node to leave the cluster gracefully (drains its files first)",
		Long: `Ask the node at --addr (the first address) to leave the cluster: it hands
its filter replicas to group-mates, moves the files it homes to other nodes,
leaves its group's Raft and the Serf pool. The node keeps running until it
is stopped. --node-id guards against draining the wrong node. The call may
take long (it drains files): --wait bounds it, not --timeout.`,
		Example: `  ghba --addr 127.0.0.1:7430 leave --node-id node3
  ghba --addr 10.0.0.4:7400 leave --wait 30m`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			addr, err := firstAddr(cmd, o)
			if err != nil {
				return err
			}
			if wait <= 0 {
				return usageErrorf("--wait %v: must be positive", wait)
			}
			return withClient(cmd, o, func(ctx context.Context, c *rpc.Client) error {
				ctx, cancel := context.WithTimeout(ctx, wait)
				defer cancel()
				r, err := c.Leave(ctx, addr, nodeID)
				if err != nil {
					return fmt.Errorf("leave %s: %w", addr, err)
				}
				if o.json {
					return writeJSON(cmd.OutOrStdout(), r)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%s left: drained %d file(s), handed over %d replica(s)\n", addr, r.DrainedFiles, r.HandedReplicas)
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&nodeID, "node-id", "", "refuse unless the node at --addr has this id")
	cmd.Flags().DurationVar(&wait, "wait", defaultLeaveWait, "deadline of the whole leave (draining files can take long)")
	return cmd
}

// newMembersCmd returns "ghba members".
func newMembersCmd(o *clientOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "members",
		Short: "List the cluster's nodes: group, status, Raft role, files and replicas",
		Long: `List every node as the node at --addr sees it: id, group, Serf status
(alive, failed, leaving, left), RPC address, Raft role in its group, files
homed and segment-filter replicas held. With --json: an array of {id, group,
status, rpc_addr, raft_role, files, replicas_held} (plus raft_addr,
serf_addr, http_addr).`,
		Example: `  ghba members
  ghba --addr 127.0.0.1:7420 members --json | jq -r '.[] | select(.status == "alive") | .id'`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withClient(cmd, o, func(ctx context.Context, c *rpc.Client) error {
				r, err := c.Members(ctx)
				if err != nil {
					return fmt.Errorf("members: %w", err)
				}
				if o.json {
					return writeJSON(cmd.OutOrStdout(), membersJSON(r.Members))
				}
				return printMembers(cmd.OutOrStdout(), r.Members)
			})
		},
	}
}

// newGroupsCmd returns "ghba groups".
func newGroupsCmd(o *clientOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "groups",
		Short: "List the groups: members, Raft leader and replica assignment balance",
		Long: `List every group: its members, its Raft leader and how many segment-filter
replicas each member holds (the assignment balance). With --json: an array
of {group, members: [ids], leader} (plus replicas: {id: count}).`,
		Example: `  ghba groups
  ghba groups --json | jq -r '.[] | "\(.group) \(.leader)"'`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withClient(cmd, o, func(ctx context.Context, c *rpc.Client) error {
				r, err := c.Groups(ctx)
				if err != nil {
					return fmt.Errorf("groups: %w", err)
				}
				if o.json {
					return writeJSON(cmd.OutOrStdout(), groupsJSON(r.Groups))
				}
				return printGroups(cmd.OutOrStdout(), r.Groups)
			})
		},
	}
}
