package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/ghba/ghba/rpc"
	"github.com/ghba/ghba/rpc/client"
	"github.com/ghba/ghba/rpc/tlsutil"
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
	tls     tlsutil.Config
	token   string
	// dial is how the clients of the command connect (TLS or not); set
	// by client.
	dial func(ctx context.Context, network, addr string) (net.Conn, error)
}

// Environment variables of the client's TLS flags (Consul's names, with
// GHBA_ for CONSUL_).
const (
	envCACert     = "GHBA_CACERT"
	envClientCert = "GHBA_CLIENT_CERT"
	envClientKey  = "GHBA_CLIENT_KEY"
)

// addClientFlags defines the global client flags on fs.
func (o *clientOptions) addClientFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.addr, "addr", defaultAddr, "RPC address(es) host:port of the node(s) to talk to, comma-separated (env "+envAddr+")")
	fs.BoolVar(&o.json, "json", false, "print machine-readable JSON instead of a table")
	fs.DurationVar(&o.timeout, "timeout", defaultTimeout, "deadline of each RPC")
	fs.StringVar(&o.tls.CAFile, "ca-file", "", "CA certificate (PEM) of a cluster with TLS: talk TLS and verify the nodes against it (env "+envCACert+")")
	fs.StringVar(&o.tls.CertFile, "cert-file", "", "client certificate (PEM) for nodes with tls.verify_incoming (env "+envClientCert+")")
	fs.StringVar(&o.tls.KeyFile, "key-file", "", "key (PEM) of --cert-file (env "+envClientKey+")")
	fs.StringVar(&o.token, "token", "", "ACL token to present (env "+envToken+"; default: the one ghba login saved)")
	fs.BoolVar(&o.tls.VerifyServerHostname, "tls-verify-server-hostname", false, "also require the node's certificate to name "+tlsutil.ServerName)
}

// tlsConfig returns the TLS flags, each taken from its environment
// variable when the flag was not given.
func (o *clientOptions) tlsConfig(cmd *cobra.Command) tlsutil.Config {
	c := o.tls
	for _, f := range []struct {
		flag, env string
		dst       *string
	}{{"ca-file", envCACert, &c.CAFile}, {"cert-file", envClientCert, &c.CertFile}, {"key-file", envClientKey, &c.KeyFile}} {
		if fl := cmd.Flags().Lookup(f.flag); (fl == nil || !fl.Changed) && os.Getenv(f.env) != "" {
			*f.dst = os.Getenv(f.env)
		}
	}
	return c
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

// client returns a client.Client for the --addr nodes with the --timeout per
// call. The caller closes it.
func (o *clientOptions) client(cmd *cobra.Command) (*client.Client, error) {
	return o.clientWith(cmd, nil)
}

// clientWith is client with the options adjusted by set (if not nil).
func (o *clientOptions) clientWith(cmd *cobra.Command, set func(*client.Options)) (*client.Client, error) {
	addrs, err := o.addrs(cmd)
	if err != nil {
		return nil, err
	}
	if o.timeout <= 0 {
		return nil, usageErrorf("--timeout %v: must be positive", o.timeout)
	}
	tc, err := tlsutil.New(o.tlsConfig(cmd), false)
	if err != nil {
		return nil, usageErrorf("%v (--ca-file, --cert-file, --key-file)", err)
	}
	if tc != nil {
		d := &net.Dialer{KeepAlive: 15 * time.Second}
		o.dial = tc.Dialer(d.DialContext)
	}
	token, err := o.tokenToUse(cmd)
	if err != nil {
		return nil, err
	}
	opts := client.Options{Addrs: addrs, Timeout: o.timeout, Dial: o.dial, Token: token}
	if set != nil {
		set(&opts)
	}
	return client.New(opts), nil
}

// envToken names the environment variable of the ACL token.
const envToken = "GHBA_TOKEN"

// tokenFile returns where ghba login saves the token: ghba/token in the
// user's configuration directory ($XDG_CONFIG_HOME or ~/.config).
func tokenFile() (string, error) {
	dir, err := os.UserConfigDir()
	if err != nil {
		return "", fmt.Errorf("finding the user's config directory: %w", err)
	}
	return filepath.Join(dir, "ghba", "token"), nil
}

// tokenToUse returns the ACL token of the command: --token, else
// GHBA_TOKEN, else the one ghba login saved, else none.
func (o *clientOptions) tokenToUse(cmd *cobra.Command) (string, error) {
	if f := cmd.Flags().Lookup("token"); f != nil && f.Changed {
		return strings.TrimSpace(o.token), nil
	}
	if t := strings.TrimSpace(os.Getenv(envToken)); t != "" {
		return t, nil
	}
	path, err := tokenFile()
	if err != nil {
		return "", nil // no home: no saved token
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	} else if err != nil {
		return "", fmt.Errorf("reading the saved token: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
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

// rangeArgs requires between lo and hi arguments.
func rangeArgs(lo, hi int) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) < lo || len(args) > hi {
			return usageErrorf("%s needs %d to %d argument(s), got %d (usage: %s)", cmd.CommandPath(), lo, hi, len(args), cmd.UseLine())
		}
		return nil
	}
}
