package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/ghba/ghba/node"
)

// agentNode is what the agent needs from a node.Node (tests substitute a
// fake through newAgentNode).
type agentNode interface {
	Start(ctx context.Context) error
	Shutdown(ctx context.Context) error
	// Stop hands the node's leaderships over (bounded by the config key
	// stop_handover_timeout), then shuts it down (SIGINT/SIGTERM).
	Stop(ctx context.Context) error
	// Done is closed when the node stops serving for good: it left the
	// cluster, or a fatal error stopped it (Err).
	Done() <-chan struct{}
	Err() error
	// ReloadTLS reads the TLS files again (SIGHUP).
	ReloadTLS() error
}

// newAgentNode creates the node the agent runs.
var newAgentNode = func(cfg node.Config, logger *slog.Logger) (agentNode, error) {
	var opts []node.Option
	if v := os.Getenv(pinLogFormatEnv); v != "" {
		f, err := strconv.ParseUint(v, 10, 8)
		if err != nil || f == 0 {
			return nil, fmt.Errorf("%s=%q: want a shard log format (1, 2, …)", pinLogFormatEnv, v)
		}
		logger.Warn("test switch: this node speaks an older shard log format", "env", pinLogFormatEnv, "format", f)
		opts = append(opts, node.WithLogFormatPin(byte(f)))
	}
	return node.New(cfg, logger, opts...)
}

// pinLogFormatEnv names the test-only switch that makes the agent speak an
// older shard log format, standing in for an older build in the
// rolling-upgrade tests (node.WithLogFormatPin).
const pinLogFormatEnv = "GHBA_TEST_PIN_LOG_FORMAT"

// defaultShutdownTimeout bounds a clean shutdown (Serf leave, Raft, Badger).
const defaultShutdownTimeout = 30 * time.Second

// newAgentCmd returns "ghba agent".
func newAgentCmd() *cobra.Command {
	var (
		configFile      string
		check           bool
		shutdownTimeout time.Duration
	)
	cmd := &cobra.Command{
		Use:   "agent --config FILE",
		Short: "Run a metadata server (one node of the cluster)",
		Long: `Run one ghba metadata server until SIGINT or SIGTERM, then stop it
gracefully: hand every shard leadership it holds to a caught-up replica (at most
stop_handover_timeout, default 10s; requests wait for each move and are served
by the new leader), finish in-flight RPCs, close Raft, Serf and the Badger
store. To the cluster the stopped node is down until it restarts (its replicas
are missing, nothing fails over); use "ghba leave" to drain it and leave for good.

Configuration comes from, in increasing order of precedence: the defaults,
the YAML file given with --config, GHBA_<KEY> environment variables (nested
keys joined with "_", e.g. GHBA_PORTS_RPC=7410; lists comma-separated, e.g.
GHBA_RETRY_JOIN=10.0.0.1:7402,10.0.0.2:7402) and the flags below. Keys:

  node_id, data_dir, bind_addr, advertise_addr,
  ports: {rpc, raft, serf, http}, group, bootstrap, retry_join,
  tls: {ca_file, cert_file, key_file, verify_incoming, verify_server_hostname}
  (TLS on the RPC, Raft and HTTP ports; SIGHUP reloads the files), encrypt
  (Serf gossip key from ghba keygen),
  max_group_size, replication, replica_repair_after, shard_log_store,
  bits_per_file, filter_capacity, lru_entries, lru_bits_per_file, l1_admission,
  filter_memory_mb, propagate_threshold, propagate_interval, placement, placement_spread,
  scheme, log_level, log_format

An unknown key or a bad value stops the agent with exit code 2 and a message
naming the key. --check only loads and validates the configuration and
prints it as JSON.`,
		Example: `  ghba agent --config testdata/node1.yaml
  GHBA_DATA_DIR=/tmp/ghba/node2 ghba agent --config testdata/node2.yaml --log-format json
  ghba agent --node-id n4 --data-dir /var/lib/ghba --rpc-port 7440 --raft-port 7441 \
      --serf-port 7442 --http-port 7443 --retry-join 127.0.0.1:7412
  ghba agent --config node.yaml --check`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := loadConfig(configFile, cmd.Flags())
			if err != nil {
				return usageError{err}
			}
			if check {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(configMap(cfg))
			}
			return runAgent(cmd.Context(), cfg, cmd.ErrOrStderr(), shutdownTimeout)
		},
	}
	f := cmd.Flags()
	f.StringVarP(&configFile, "config", "c", "", "YAML config file")
	f.BoolVar(&check, "check", false, "validate the configuration, print it as JSON and exit")
	f.DurationVar(&shutdownTimeout, "shutdown-timeout", defaultShutdownTimeout, "bound on a clean shutdown after SIGINT/SIGTERM")
	addAgentFlags(f)
	return cmd
}

// newLogger returns the agent's base logger: text or JSON lines on w at
// the configured level. node.New adds the node_id attribute to every line
// it logs; the agent's own lines get it from runAgent.
func newLogger(w io.Writer, cfg agentConfig) *slog.Logger {
	var level slog.Level
	switch strings.ToLower(cfg.LogLevel) {
	case "debug":
		level = slog.LevelDebug
	case "warn":
		level = slog.LevelWarn
	case "error":
		level = slog.LevelError
	default:
		level = slog.LevelInfo
	}
	opts := &slog.HandlerOptions{Level: level}
	var h slog.Handler
	if cfg.LogFormat == logFormatJSON {
		h = slog.NewJSONHandler(w, opts)
	} else {
		h = slog.NewTextHandler(w, opts)
	}
	return slog.New(h)
}

// runAgent starts the node and runs it until ctx ends (SIGINT/SIGTERM
// through main's NotifyContext) or the node has left the cluster (ghba
// leave), then shuts it down within shutdownTimeout. A second signal during
// the shutdown exits the process at once.
func runAgent(ctx context.Context, cfg agentConfig, logw io.Writer, shutdownTimeout time.Duration) error {
	base := newLogger(logw, cfg)
	logger := base.With("node_id", cfg.NodeID)
	n, err := newAgentNode(cfg.Config, base)
	if err != nil {
		return fmt.Errorf("creating node: %w", err)
	}
	// Start closes whatever it opened when it fails.
	if err := n.Start(ctx); err != nil {
		return fmt.Errorf("starting node %s: %w", cfg.NodeID, err)
	}
	logger.Info("agent running",
		"rpc", net.JoinHostPort(cfg.Advertise(), strconv.Itoa(cfg.Ports.RPC)),
		"serf", net.JoinHostPort(cfg.Advertise(), strconv.Itoa(cfg.Ports.Serf)),
		"http", net.JoinHostPort(cfg.Advertise(), strconv.Itoa(cfg.Ports.HTTP)),
		"data_dir", cfg.DataDir)
	// SIGHUP reloads the TLS certificates (config tls).
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	var fatal error
	graceful := false
wait:
	for {
		select {
		case <-hup:
			if err := n.ReloadTLS(); err != nil {
				logger.Error("SIGHUP: reloading the TLS certificates failed; the ones loaded before stay in use", "err", err)
			}
		case <-ctx.Done():
			logger.Info("signal received: handing leaderships over and shutting down", "timeout", shutdownTimeout)
			graceful = true
			break wait
		case <-n.Done():
			if fatal = n.Err(); fatal != nil {
				logger.Error("node stopped on a fatal error: shutting down", "err", fatal, "timeout", shutdownTimeout)
			} else {
				logger.Info("node left the cluster: shutting down", "timeout", shutdownTimeout)
			}
			break wait
		}
	}

	forced := make(chan os.Signal, 1)
	signal.Notify(forced, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(forced)
	stopped := make(chan struct{})
	defer close(stopped)
	go func() {
		select {
		case <-forced:
			logger.Error("second signal: exiting without a clean shutdown")
			os.Exit(exitError)
		case <-stopped:
		}
	}()

	sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	stop := n.Shutdown
	if graceful {
		stop = n.Stop
	}
	if err := stop(sctx); err != nil {
		logger.Error("shutdown failed", "err", err)
		return fmt.Errorf("shutting down node %s: %w", cfg.NodeID, err)
	}
	if fatal != nil {
		return fmt.Errorf("node %s: %w", cfg.NodeID, fatal)
	}
	logger.Info("agent stopped")
	return nil
}
