package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/ghba/ghba/node"
	"github.com/ghba/ghba/rpc/client"
)

// envEncrypt names the environment variable that gives share-agent the
// cluster's gossip key (a flag would show it in ps).
const envEncrypt = "GHBA_ENCRYPT"

// newShareAgentCmd returns "ghba share-agent".
func newShareAgentCmd(o *clientOptions) *cobra.Command {
	var (
		machine, bind, advertise, logLevel string
		join                               []string
		noScan                             bool
		workers                            int
		recheck                            time.Duration
	)
	cmd := &cobra.Command{
		Use:   "share-agent [NAME=]DIR... [--join HOST:PORT]",
		Short: "Announce this machine's shared folders to the cluster and scan those adopted",
		Long: `Announce the folders DIR... of this machine (each named NAME, default the
folder's last element) to the cluster, so that "ghba source discover" lists
them and an operator adopts one as a source with "ghba source adopt"; then,
as "ghba scan" does, import the adopted ones and keep them in sync on their
schedules (--no-scan: only announce). Runs until interrupted (SIGINT,
SIGTERM), then leaves: the cluster stops listing the machine at once. A
machine that stops without leaving is listed as failed.

The agent joins the cluster's gossip (Serf) as a member of role "share",
which the nodes never count as a server: through --join (nodes' Serf
addresses, ports.serf of their configs), or else the Serf addresses of the
members the node at --addr lists. It listens on --bind (UDP and TCP), which
the nodes must reach. With gossip encryption on, give the cluster's key
(its encrypt, the primary one after a rotation) in $` + envEncrypt + `.`,
		Example: `  ghba --addr node1:7410 share-agent docs=/srv/share/docs /home --machine ws1
  GHBA_ENCRYPT=$(cat gossip.key) ghba share-agent /srv/share --join node1:7412 --bind 0.0.0.0:7946`,
		Args: minArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			shares := make([]node.Share, len(args))
			for i, a := range args {
				sh, err := node.ParseShare(a)
				if err != nil {
					return usageErrorf("share-agent: %v", err)
				}
				shares[i] = sh
			}
			host, port, err := net.SplitHostPort(bind)
			if err != nil {
				return usageErrorf("share-agent: --bind %q: want HOST:PORT", bind)
			}
			p, err := strconv.Atoi(port)
			if err != nil || p < 0 || p > 65535 {
				return usageErrorf("share-agent: --bind %q: not a port number", bind)
			}
			if recheck < 100*time.Millisecond {
				return usageErrorf("share-agent: --recheck must be at least 100ms")
			}
			if workers < 0 {
				return usageErrorf("share-agent: --workers must be at least 1 (0: the default)")
			}
			if machine == "" {
				if machine, err = os.Hostname(); err != nil {
					return fmt.Errorf("share-agent: this machine's name: %w", err)
				}
			}
			log, err := newCLILogger(cmd, logLevel)
			if err != nil {
				return err
			}
			log = log.With("machine", machine)
			return withClientSet(cmd, o, importClient, func(ctx context.Context, c *client.Client) error {
				if len(join) == 0 {
					if join, err = serfAddrs(ctx, c); err != nil {
						return err
					}
				}
				a, err := node.StartShareAgent(ctx, node.ShareAgentConfig{
					Machine: machine, Shares: shares, BindAddr: host, BindPort: p, AdvertiseAddr: advertise,
					Join: join, Encrypt: os.Getenv(envEncrypt), Logger: log,
				})
				if err != nil {
					if errors.Is(err, node.ErrNoCluster) && ctx.Err() != nil {
						return nil // interrupted before it joined
					}
					return fmt.Errorf("share-agent: %w", err)
				}
				log.Info("announcing shares", "shares", args, "gossip_addr", a.Addr())
				defer func() {
					if err := a.Close(); err != nil {
						log.Warn("share agent: leaving the gossip", "err", err)
					}
				}()
				if noScan {
					<-ctx.Done()
					return nil
				}
				return runScan(ctx, cmd, c, machine, nil, false, workers, recheck)
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&machine, "machine", "", "this machine's name in the sources adopted from it (default: its host name)")
	f.StringSliceVar(&join, "join", nil, "Serf addresses host:port of cluster nodes (default: those the node at --addr lists)")
	f.StringVar(&bind, "bind", "0.0.0.0:7946", "address host:port the agent's gossip listens on (port 0: any free one)")
	f.StringVar(&advertise, "advertise", "", "address the nodes reach the agent at (default: from --bind, or this machine's private IP)")
	f.BoolVar(&noScan, "no-scan", false, "only announce; another process (ghba scan) imports the adopted shares")
	f.IntVarP(&workers, "workers", "w", 0, "operations in progress per scan (0: as ghba scan)")
	f.DurationVar(&recheck, "recheck", 10*time.Second, "how often to look for newly adopted shares")
	f.StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	return cmd
}

// serfAddrs returns the Serf addresses of the cluster's live members, as
// the node the client talks to lists them.
func serfAddrs(ctx context.Context, c *client.Client) ([]string, error) {
	r, err := c.Members(ctx)
	if err != nil {
		return nil, opError("share-agent: listing the members to join", "", err)
	}
	var out []string
	for _, m := range r.Members {
		if m.SerfAddr != "" && m.Status != "left" && m.Status != "failed" {
			out = append(out, m.SerfAddr)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("share-agent: the cluster lists no member with a Serf address; give --join")
	}
	return out, nil
}

// newCLILogger returns a text logger on the command's stderr at level
// ("debug", "info", "warn" or "error").
func newCLILogger(cmd *cobra.Command, level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(strings.ToUpper(level))); err != nil {
		return nil, usageErrorf("--log-level %q: want debug, info, warn or error", level)
	}
	return slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: l})), nil
}
