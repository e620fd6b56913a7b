package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"

	"github.com/spf13/cobra"

	"github.com/ghba/ghba/rpc"
	"github.com/ghba/ghba/rpc/tlsutil"
)

// defaultHealthAddr is the agent's default HTTP address (ports.http).
const defaultHealthAddr = "127.0.0.1:7403"

// healthBodyLimit bounds the part of a health answer that is printed.
const healthBodyLimit = 4096

// newHealthCmd returns "ghba health": a probe of one node's /v1/health
// (or /v1/health/live) for containers that have nothing but the binary, so
// no curl (deploy/compose.yaml's health checks).
func newHealthCmd(o *clientOptions) *cobra.Command {
	var (
		httpAddr string
		live     bool
	)
	cmd := &cobra.Command{
		Use:   "health [--http-addr HOST:HTTPPORT] [--live]",
		Short: "Probe a node's /v1/health on its HTTP port (exit 0 if it serves, 5 if not)",
		Long: `Ask the node at --http-addr (its HTTP port, ports.http; not the RPC port of
--addr) for /v1/health and print the answer. Exit 0 when it answers 200: the
node serves every request it accepts; exit 5 (unavailable) otherwise: it is
starting, stopping or unreachable. With --live, /v1/health/live: exit 0 as
long as the agent process runs. Each probe is bounded by --timeout.

For a node with TLS the probe speaks HTTPS and verifies the node against
--ca-file (env GHBA_CACERT), presenting --cert-file and --key-file when given.
Meant for container health checks where no curl exists (the image is FROM
scratch).`,
		Example: `  ghba health --http-addr 127.0.0.1:7413
  ghba health --live
  ghba health --http-addr 10.0.0.4:7403 --ca-file certs/ghba-agent-ca.pem`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if _, _, err := net.SplitHostPort(httpAddr); err != nil {
				return usageErrorf("--http-addr %q: want host:port", httpAddr)
			}
			if o.timeout <= 0 {
				return usageErrorf("--timeout %v: must be positive", o.timeout)
			}
			path := "/v1/health"
			if live {
				path = "/v1/health/live"
			}
			tc, err := tlsutil.New(o.tlsConfig(cmd), false)
			if err != nil {
				return usageErrorf("%v (--ca-file, --cert-file, --key-file)", err)
			}
			tr := &http.Transport{Proxy: nil}
			url := "http://" + httpAddr + path
			if tc != nil {
				tr.TLSClientConfig = tc.ClientConfig()
				url = "https://" + httpAddr + path
			}
			defer tr.CloseIdleConnections()
			ctx, cancel := context.WithTimeout(cmd.Context(), o.timeout)
			defer cancel()
			return probeHealth(ctx, &http.Client{Transport: tr}, url, cmd.OutOrStdout())
		},
	}
	cmd.Flags().StringVar(&httpAddr, "http-addr", defaultHealthAddr, "HTTP address host:port of the node to probe (its ports.http)")
	cmd.Flags().BoolVar(&live, "live", false, "probe /v1/health/live (the process runs) instead of /v1/health (the node serves)")
	return cmd
}

// probeHealth GETs url with hc, prints the answer's body to w and returns
// nil on 200, an error wrapping rpc.ErrUnavailable otherwise.
func probeHealth(ctx context.Context, hc *http.Client, url string, w io.Writer) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return usageErrorf("health: %w", err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("health: %w: %w", rpc.ErrUnavailable, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, healthBodyLimit))
	if err != nil {
		return fmt.Errorf("health: reading the answer of %s: %w: %w", url, rpc.ErrUnavailable, err)
	}
	if s := strings.TrimSpace(string(body)); s != "" {
		fmt.Fprintln(w, s)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("health: %s answered %s: %w", url, resp.Status, rpc.ErrUnavailable)
	}
	return nil
}
