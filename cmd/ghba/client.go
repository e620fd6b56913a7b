package main

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/ghba/ghba/rpc"
)

// Client defaults.
const (
	// defaultAddr is the RPC address used when neither --addr nor GHBA_ADDR
	// is given (the default ports.rpc on this host).
	defaultAddr = "127.0.0.1:7400"
	// defaultTimeout bounds each RPC of a client command.
	defaultTimeout = 10 * time.Second
	// envAddr names the environment variable that replaces defaultAddr.
	envAddr = "GHBA_ADDR"
)

// clientOptions are the global flags of the client commands (persistent
// flags of the root command).
type clientOptions struct {
	addr    string
	json    bool
	timeout time.Duration
}

// addClientFlags defines the global client flags on fs.
func (o *clientOptions) addClientFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.addr, "addr", defaultAddr, "RPC address(es) host:port of the node(s) to talk to, comma-separated (env "+envAddr+")")
	fs.BoolVar(&o.json, "json", false, "print machine-readable JSON instead of a table")
	fs.DurationVar(&o.timeout, "timeout", defaultTimeout, "deadline of each RPC")
}

// addrs returns the addresses from --addr, or from GHBA_ADDR when the flag
// was not given.
func (o *clientOptions) addrs(cmd *cobra.Command) ([]string, error) {
	raw := o.addr
	if f := cmd.Flags().Lookup("addr"); (f == nil || !f.Changed) && os.Getenv(envAddr) != "" {
		raw = os.Getenv(envAddr)
	}
	var out []string
	for a := range strings.SplitSeq(raw, ",") {
		a = strings.TrimSpace(a)
		if a == "" {
			continue
		}
		if !strings.Contains(a, ":") {
			return nil, usageErrorf("--addr %q: want host:port", a)
		}
		out = append(out, a)
	}
	if len(out) == 0 {
		return nil, usageErrorf("--addr: no address given")
	}
	return out, nil
}

// client returns an rpc.Client for the --addr nodes with the --timeout per
// call. The caller closes it.
func (o *clientOptions) client(cmd *cobra.Command) (*rpc.Client, error) {
	addrs, err := o.addrs(cmd)
	if err != nil {
		return nil, err
	}
	if o.timeout <= 0 {
		return nil, usageErrorf("--timeout %v: must be positive", o.timeout)
	}
	return rpc.NewClient(rpc.Options{Addrs: addrs, Timeout: o.timeout}), nil
}

// noArgs, exactArgs, minArgs and rangeArgs are cobra argument validators
// whose errors are usage errors (exit code 2).
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usageErrorf("%s takes no arguments, got %q", cmd.CommandPath(), args)
	}
	return nil
}

// exactArgs requires exactly n arguments.
func exactArgs(n int) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != n {
			return usageErrorf("%s needs %d argument(s), got %d (usage: %s)", cmd.CommandPath(), n, len(args), cmd.UseLine())
		}
		return nil
	}
}

// minArgs requires at least n arguments.
func minArgs(n int) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) < n {
			return usageErrorf("%s needs at least %d argument(s), got %d (usage: %s)", cmd.CommandPath(), n, len(args), cmd.UseLine())
		}
		return nil
	}
}

// checkPath rejects a path that is not absolute before it is sent (the
// server validates the rest).
func checkPath(p string) error {
	if !strings.HasPrefix(p, "/") {
		return fmt.Errorf("%q: %w: must be absolute (start with /)", p, rpc.ErrInvalidPath)
	}
	return nil
}
