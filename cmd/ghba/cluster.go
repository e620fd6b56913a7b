package main

import (
	"context"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/ghba/ghba/rpc"
	"github.com/ghba/ghba/rpc/client"
)

// defaultLeaveWait bounds "ghba leave", which waits for the node's shard
// replicas to move to other members.
const defaultLeaveWait = 10 * time.Minute

// newClusterCmds returns the membership commands: join, leave, members,
// groups, shards.
func newClusterCmds(o *clientOptions) []*cobra.Command {
	return []*cobra.Command{newJoinCmd(o), newLeaveCmd(o), newMembersCmd(o), newGroupsCmd(o), newShardsCmd(o), newHealthCmd(o)}
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
			return withClient(cmd, o, func(ctx context.Context, c *client.Client) error {
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
		Short: "Ask a node to leave the cluster gracefully (its shard replicas move first)",
		Long: `Ask the node at --addr (the first address) to leave the cluster: its group
gives the shards it owns to other members and places its shard replicas on
other members; the node waits until the shards' leaders have moved every
replica off it (new replicas catch up by Raft snapshot: nothing is copied
file by file, and nothing is lost), then hands its filter replicas to
group-mates and leaves its group's Raft and the Serf pool; its agent then
shuts itself down (exit code 0). The last member of a group cannot leave: its
shards would have nowhere to go. --node-id guards against the wrong node.
The call may take long: --wait bounds it, not --timeout.`,
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
			return withClient(cmd, o, func(ctx context.Context, c *client.Client) error {
				ctx, cancel := context.WithTimeout(ctx, wait)
				defer cancel()
				r, err := c.Leave(ctx, addr, nodeID)
				if err != nil {
					return fmt.Errorf("leave %s: %w", addr, err)
				}
				if o.json {
					return writeJSON(cmd.OutOrStdout(), r)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%s left: moved %d shard replica(s), handed over shard(s) %s and %d filter replica(s)\n",
					addr, r.MovedShardReplicas, dash(strings.Join(r.HandedShards, ",")), r.HandedReplicas)
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&nodeID, "node-id", "", "refuse unless the node at --addr has this id")
	cmd.Flags().DurationVar(&wait, "wait", defaultLeaveWait, "deadline of the whole leave (moving shard replicas can take long)")
	return cmd
}

// defaultMembersWait bounds "members --wait" when --timeout is not given.
const defaultMembersWait = 2 * time.Minute

// newMembersCmd returns "ghba members".
func newMembersCmd(o *clientOptions) *cobra.Command {
	var wait int
	cmd := &cobra.Command{
		Use:   "members",
		Short: "List the cluster's nodes: group, status, Raft role, files, replicas and shards",
		Long: `List every node as the node at --addr sees it: id, group, status, RPC
address, Raft role in its group, files of the shards it leads,
segment-filter replicas held, and the shards it leads (LEADS) and hosts a
replica of (HOSTS), its build (BUILD) and the formats it speaks (VERSIONS:
log, the shard log; snap, shard snapshots; glog and gsnap, the group's log
and snapshots; rpc, the protocol; "in use" is the newest shard log format
every member speaks, which leaders write). Status: alive (serving every
request it accepts), starting (up, not serving yet: store, namespace, group
or shard replicas not ready), stopping (handing its leaderships over before
it exits), failed, leaving or left. With --json: an array of {id, group,
status, rpc_addr, raft_role, files, replicas_held, shards_led,
shards_hosted} (plus raft_addr, serf_addr, http_addr, build, versions:
{log, snap, glog, gsnap, rpc}, log_format_in_use).

--wait N waits until at least N nodes are alive, then lists them; it gives
up after --timeout (2m if not given) with exit code 5.`,
		Example: `  ghba members
  ghba --addr 127.0.0.1:7420 members --json | jq -r '.[] | select(.status == "alive") | .id'
  ghba members --wait 3 --timeout 60s`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if wait < 0 {
				return usageErrorf("--wait %d: must be positive", wait)
			}
			return withClient(cmd, o, func(ctx context.Context, c *client.Client) error {
				var r *rpc.MembersResponse
				var err error
				if wait > 0 {
					limit := defaultMembersWait
					if cmd.Flags().Changed("timeout") {
						limit = o.timeout
					}
					r, err = waitMembers(ctx, c, wait, limit)
				} else {
					r, err = c.Members(ctx)
				}
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
	cmd.Flags().IntVar(&wait, "wait", 0, "wait until at least N nodes are alive (serving)")
	return cmd
}

// waitMembers asks for the members every half second until at least want
// are alive, for at most limit.
func waitMembers(ctx context.Context, c *client.Client, want int, limit time.Duration) (*rpc.MembersResponse, error) {
	return poll(ctx, limit, func(ctx context.Context) (*rpc.MembersResponse, string, error) {
		r, err := c.Members(ctx)
		if err != nil {
			return nil, "", err
		}
		alive, starting := 0, []string{}
		for _, m := range r.Members {
			switch m.Status {
			case "alive":
				alive++
			case "starting":
				starting = append(starting, m.ID)
			}
		}
		if alive >= want {
			return r, "", nil
		}
		return nil, fmt.Sprintf("%d of %d nodes alive (starting: %v)", alive, want, starting), nil
	})
}

// defaultGroupsWait bounds "groups --wait" when --timeout is not given.
const defaultGroupsWait = 5 * time.Minute

// newGroupsCmd returns "ghba groups".
func newGroupsCmd(o *clientOptions) *cobra.Command {
	var wait bool
	cmd := &cobra.Command{
		Use:   "groups",
		Short: "List the groups: members, Raft leader, replica assignment balance, settled",
		Long: `List every group: its members, its Raft leader, its maximum size M as the
leader applies it (MAX; "auto:M" with max_group_size auto), how many
segment-filter replicas each member holds (the assignment balance) and
whether it is settled. A group is settled when every member that is up serves and sees
nothing about to change: it is an active member with a leader, no node is moving
between groups or without one, no group is about to split or merge (group
auto), and every filter replica its group assigns it is loaded. The last
line says whether the whole cluster is. For a group of auto size, a line
below the table gives how its leader chose M: the model's optimum, its
inputs (N, hit rates, multicast latency, memory), which were measured, and
Γ around the optimum. With --json: an array of {group, members: [ids],
leader, settled} (plus replicas: {id: count}, unsettled: why not,
max_group_size, auto, size_choice).

--wait waits until the cluster is settled, then lists the groups; it gives
up after --timeout (5m if not given) with exit code 5.`,
		Example: `  ghba groups
  ghba groups --json | jq -r '.[] | "\(.group) \(.leader) \(.settled)"'
  ghba groups --wait --timeout 2m`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withClient(cmd, o, func(ctx context.Context, c *client.Client) error {
				var r *rpc.GroupsResponse
				var err error
				if wait {
					limit := defaultGroupsWait
					if cmd.Flags().Changed("timeout") {
						limit = o.timeout
					}
					r, err = waitGroups(ctx, c, limit)
				} else {
					r, err = c.Groups(ctx)
				}
				if err != nil {
					return fmt.Errorf("groups: %w", err)
				}
				if o.json {
					return writeJSON(cmd.OutOrStdout(), groupsJSON(r.Groups))
				}
				return printGroups(cmd.OutOrStdout(), r)
			})
		},
	}
	cmd.Flags().BoolVar(&wait, "wait", false, "wait until the cluster's groups are settled")
	return cmd
}

// waitGroups asks for the groups every half second until the cluster is
// settled, for at most limit.
func waitGroups(ctx context.Context, c *client.Client, limit time.Duration) (*rpc.GroupsResponse, error) {
	return poll(ctx, limit, func(ctx context.Context) (*rpc.GroupsResponse, string, error) {
		r, err := c.Groups(ctx)
		if err != nil || r.Settled {
			return r, "", err
		}
		return nil, "not settled: " + r.Unsettled, nil
	})
}

// poll calls try every half second, for at most limit, until it returns a
// result; an error of try is remembered, not returned. On giving up, the
// error wraps rpc.ErrUnavailable (exit code 5) and says what try last
// reported.
func poll[T any](ctx context.Context, limit time.Duration, try func(context.Context) (*T, string, error)) (*T, error) {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	t := time.NewTicker(500 * time.Millisecond)
	defer t.Stop()
	var last string
	for {
		r, why, err := try(ctx)
		switch {
		case err != nil:
			last = err.Error()
		case r != nil:
			return r, nil
		default:
			last = why
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: waited %v: %s", rpc.ErrUnavailable, limit, last)
		case <-t.C:
		}
	}
}

// newShardsCmd returns "ghba shards".
func newShardsCmd(o *clientOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "shards",
		Short: "List the shards: leader, replicas, files, applied index and replication lag",
		Long: `List every shard of the cluster (the metadata of one home, replicated by
Raft on members of its group): its group, the node that leads it, the nodes
in its Raft configuration, the paths it homes, its leader's applied index
and the largest lag of a replica behind it, in log entries. A shard without
a leader (an election in progress, or no live majority) shows "-". With
--json: an array of {shard, leader, replicas: [ids], files, applied_index}
(plus group, max_lag).`,
		Example: `  ghba shards
  ghba shards --json | jq -r '.[] | select(.leader == "") | .shard'`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withClient(cmd, o, func(ctx context.Context, c *client.Client) error {
				r, err := c.Shards(ctx)
				if err != nil {
					return fmt.Errorf("shards: %w", err)
				}
				if o.json {
					return writeJSON(cmd.OutOrStdout(), shardsJSON(r.Shards))
				}
				return printShards(cmd.OutOrStdout(), r.Shards)
			})
		},
	}
}
