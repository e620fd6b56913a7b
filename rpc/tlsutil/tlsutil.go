// Package tlsutil turns the TLS settings of a node or a client (CA,
// certificate, key, what to verify) into crypto/tls configurations for
// listeners and dialers, and reloads the files on demand (an agent does on
// SIGHUP) without restarting a listener: every new connection uses the
// files as last loaded.
//
// The conventions are Consul's: every node presents its server certificate
// both when it accepts (server) and when it dials another node (client);
// server certificates name "server.ghba" (ghba tls cert create --server);
// with VerifyIncoming a listener requires a client certificate signed by the
// CA; with VerifyServerHostname a dialer also requires the server
// certificate to name ServerName ("server.ghba"), so that a client
// certificate cannot pose as a server.
package tlsutil

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
)

// ServerName is the DNS name every server certificate carries.
const ServerName = "server.ghba"

// Config is the TLS part of a node's or a client's configuration. The zero
// value means no TLS.
// The mapstructure names are the keys of the agent's config section tls.
type Config struct {
	// CAFile is the PEM file of the CA certificate(s) peers must be signed
	// by.
	CAFile string `mapstructure:"ca_file"`
	// CertFile and KeyFile are this side's certificate and key (PEM).
	// A node needs them; a client needs them when the nodes verify
	// incoming connections.
	CertFile string `mapstructure:"cert_file"`
	KeyFile  string `mapstructure:"key_file"`
	// VerifyIncoming makes listeners require a client certificate signed
	// by the CA.
	VerifyIncoming bool `mapstructure:"verify_incoming"`
	// VerifyServerHostname makes dialers require the server certificate
	// to name ServerName.
	VerifyServerHostname bool `mapstructure:"verify_server_hostname"`
}

// Enabled reports whether c asks for TLS.
func (c Config) Enabled() bool { return c.CAFile != "" || c.CertFile != "" || c.KeyFile != "" }

// Validate checks that c is complete for a side that listens (a node,
// listener true) or only dials (a client).
func (c Config) Validate(listener bool) error {
	if !c.Enabled() {
		return nil
	}
	if c.CAFile == "" {
		return errors.New("tls: ca_file is required with TLS")
	}
	if (c.CertFile == "") != (c.KeyFile == "") {
		return errors.New("tls: cert_file and key_file go together")
	}
	if listener && c.CertFile == "" {
		return errors.New("tls: a node needs cert_file and key_file")
	}
	return nil
}

// Configurator holds the loaded files of a Config.
type Configurator struct {
	cfg Config

	mu   sync.RWMutex
	cert *tls.Certificate // nil: none
	pool *x509.CertPool
}

// New loads the files of cfg. It returns nil, nil when cfg does not enable
// TLS.
func New(cfg Config, listener bool) (*Configurator, error) {
	if err := cfg.Validate(listener); err != nil {
		return nil, err
	}
	if !cfg.Enabled() {
		return nil, nil
	}
	c := &Configurator{cfg: cfg}
	if err := c.Reload(); err != nil {
		return nil, err
	}
	return c, nil
}

// Reload reads the files again; connections made from now on use them. On
// an error the files loaded before stay in use.
func (c *Configurator) Reload() error {
	caPEM, err := os.ReadFile(c.cfg.CAFile)
	if err != nil {
		return fmt.Errorf("tls: ca_file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return fmt.Errorf("tls: ca_file %s holds no PEM certificate", c.cfg.CAFile)
	}
	var cert *tls.Certificate
	if c.cfg.CertFile != "" {
		kp, err := tls.LoadX509KeyPair(c.cfg.CertFile, c.cfg.KeyFile)
		if err != nil {
			return fmt.Errorf("tls: cert_file/key_file: %w", err)
		}
		cert = &kp
	}
	c.mu.Lock()
	c.cert, c.pool = cert, pool
	c.mu.Unlock()
	return nil
}

func (c *Configurator) loaded() (*tls.Certificate, *x509.CertPool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.cert, c.pool
}

// ServerConfig returns the configuration of a listener: this side's
// certificate, and with VerifyIncoming a client certificate signed by the
// CA required.
func (c *Configurator) ServerConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			cert, pool := c.loaded()
			if cert == nil {
				return nil, errors.New("tls: no certificate to serve")
			}
			tc := &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{*cert}, ClientCAs: pool}
			if c.cfg.VerifyIncoming {
				tc.ClientAuth = tls.RequireAndVerifyClientCert
			} else {
				tc.ClientAuth = tls.VerifyClientCertIfGiven
			}
			return tc, nil
		},
	}
}

// Listener wraps ln so that its connections speak TLS (ServerConfig).
func (c *Configurator) Listener(ln net.Listener) net.Listener {
	return tls.NewListener(ln, c.ServerConfig())
}

// ClientConfig returns the configuration of one outgoing connection: this
// side's certificate if it has one, the server's chain verified against
// the CA, and its name too with VerifyServerHostname.
func (c *Configurator) ClientConfig() *tls.Config {
	cert, pool := c.loaded()
	tc := &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pool}
	if cert != nil {
		tc.Certificates = []tls.Certificate{*cert}
	}
	if c.cfg.VerifyServerHostname {
		tc.ServerName = ServerName
		return tc
	}
	// The chain is verified, the name is not (nodes are reached by
	// address, and certificates need not name every address).
	tc.InsecureSkipVerify = true
	tc.VerifyConnection = func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) == 0 {
			return errors.New("tls: the server sent no certificate")
		}
		inter := x509.NewCertPool()
		for _, ic := range cs.PeerCertificates[1:] {
			inter.AddCert(ic)
		}
		_, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{
			Roots: pool, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		})
		if err != nil {
			return fmt.Errorf("tls: server certificate: %w", err)
		}
		return nil
	}
	return tc
}

// Dialer returns a dial function (for client.Options.Dial and the Raft mux)
// that connects with base and then runs the TLS handshake
// (ClientConfig), within ctx.
func (c *Configurator) Dialer(base func(ctx context.Context, network, addr string) (net.Conn, error)) func(ctx context.Context, network, addr string) (net.Conn, error) {
	if base == nil {
		d := &net.Dialer{}
		base = d.DialContext
	}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		raw, err := base(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		tc := tls.Client(raw, c.ClientConfig())
		if err := tc.HandshakeContext(ctx); err != nil {
			_ = raw.Close()
			return nil, fmt.Errorf("tls handshake with %s: %w", addr, err)
		}
		return tc, nil
	}
}
