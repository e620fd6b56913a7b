package main

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/ghba/ghba/rpc/tlsutil"
)

// Names and defaults of "ghba tls" and "ghba keygen" (Consul's conventions,
// with the domain "ghba").
const (
	caCertFile = "ghba-agent-ca.pem"
	caKeyFile  = "ghba-agent-ca-key.pem"

	// tlsServerName is the DNS name of every server certificate; agents
	// with verify_server_hostname require it.
	tlsServerName = tlsutil.ServerName
	// tlsClientName is the DNS name of client certificates.
	tlsClientName = "client.ghba"

	defaultCADays   = 5 * 365
	defaultCertDays = 365
	defaultCAName   = "ghba CA"

	// gossipKeyBytes is the size of a gossip encryption key: memberlist
	// takes 16, 24 or 32 bytes (AES-128/192/256); keygen makes AES-256 keys.
	gossipKeyBytes = 32

	// clockSkew backdates NotBefore so that a certificate is valid at once
	// on machines whose clocks are slightly behind.
	clockSkew = time.Minute
	// maxCertFiles bounds the numbered file names cert create tries.
	maxCertFiles = 10000
)

// tlsConfigHelp is the part of the help texts that says how the files are
// used.
const tlsConfigHelp = `Each agent's configuration names the files in its tls section (the same CA
everywhere, each node its own certificate and key), with the gossip key of
"ghba keygen" in encrypt:

  tls:
    ca_file: /etc/ghba/certs/ghba-agent-ca.pem
    cert_file: /etc/ghba/certs/server-ghba-0.pem
    key_file: /etc/ghba/certs/server-ghba-0-key.pem
    verify_incoming: true         # require certificates signed by the CA
    verify_server_hostname: true  # require servers' certificates to name server.ghba
  encrypt: "<output of ghba keygen>"`

// newTLSCmd returns "ghba tls" and its subcommands "ca create" and
// "cert create".
func newTLSCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "tls",
		Short: "Create a certificate authority and agent/client certificates for TLS",
		Long: `Create the files that TLS between agents and clients needs: a certificate
authority (CA), then server certificates for the agents and client
certificates for the ghba CLI and other clients, all signed by that CA.
Keys are ECDSA P-256; key files are written with mode 0600. Existing files
are never overwritten.

  ghba tls ca create            → ghba-agent-ca.pem, ghba-agent-ca-key.pem
  ghba tls cert create --server → server-ghba-N.pem, server-ghba-N-key.pem
  ghba tls cert create --client → client-ghba-N.pem, client-ghba-N-key.pem

Copy the CA certificate (not its key) and one server certificate and key to
every node.

` + tlsConfigHelp,
		Example: `  ghba tls ca create --dir certs
  ghba tls cert create --server --dir certs --node node1
  ghba tls cert create --client --dir certs`,
		Args: subcommandArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	cmd.AddCommand(newTLSCACmd(), newTLSCertCmd())
	return cmd
}

// subcommandArgs makes an unknown subcommand of a command that only groups
// subcommands a usage error (cobra would print the help and exit 0).
func subcommandArgs(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	msg := fmt.Sprintf("unknown command %q for %s", args[0], cmd.CommandPath())
	if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
		msg += "; did you mean " + strings.Join(s, " or ") + "?"
	}
	return usageErrorf("%s (see %s --help)", msg, cmd.CommandPath())
}

// newTLSCACmd returns "ghba tls ca" with its subcommand "create".
func newTLSCACmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "ca",
		Short: "Manage the certificate authority that signs agent and client certificates",
		Long: `Manage the certificate authority (CA) that signs the certificates of agents
and clients: "ghba tls ca create" makes a new one.`,
		Example: `  ghba tls ca create --dir certs`,
		Args:    subcommandArgs,
		RunE:    func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(newTLSCACreateCmd())
	return cmd
}

// newTLSCACreateCmd returns "ghba tls ca create".
func newTLSCACreateCmd() *cobra.Command {
	var (
		dir  string
		days int
		name string
	)
	cmd := &cobra.Command{
		Use:   "create",
		Short: "Create a new certificate authority (ghba-agent-ca.pem and ghba-agent-ca-key.pem)",
		Long: `Create a self-signed certificate authority in --dir (created if needed):
ghba-agent-ca.pem is the CA certificate, ghba-agent-ca-key.pem its ECDSA
P-256 private key (PKCS#8, mode 0600). It refuses (exit code 1) if either
file exists already. It prints the two paths written.

The certificate goes to every node and client (tls.ca_file, ghba --ca-file);
the key signs certificates ("ghba tls cert create") and should stay on the
machine that makes them.

` + tlsConfigHelp,
		Example: `  ghba tls ca create --dir certs
  ghba tls ca create --dir /etc/ghba/ca --days 3650 --common-name "ghba CA prod"`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if dir == "" {
				return usageErrorf("--dir: no directory given")
			}
			if days < 1 {
				return usageErrorf("--days %d: want at least 1", days)
			}
			if strings.TrimSpace(name) == "" {
				return usageErrorf("--common-name: want a non-empty name")
			}
			certPath, keyPath := filepath.Join(dir, caCertFile), filepath.Join(dir, caKeyFile)
			for _, p := range []string{certPath, keyPath} {
				if err := refuseExisting(p); err != nil {
					return err
				}
			}
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return fmt.Errorf("ca create: %w", err)
			}
			certDER, keyDER, err := createCA(name, days, time.Now())
			if err != nil {
				return fmt.Errorf("ca create: %w", err)
			}
			if err := writePair(certPath, certDER, keyPath, keyDER); err != nil {
				if errors.Is(err, fs.ErrExist) {
					// Created by someone else since the check above.
					return refuseExisting(certPath, keyPath)
				}
				return fmt.Errorf("ca create: %w", err)
			}
			fmt.Fprintln(cmd.OutOrStdout(), certPath)
			fmt.Fprintln(cmd.OutOrStdout(), keyPath)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&dir, "dir", "", "directory to write the CA certificate and key into (created if needed; required)")
	f.IntVar(&days, "days", defaultCADays, "days the CA certificate is valid")
	f.StringVar(&name, "common-name", defaultCAName, "common name (CN) of the CA certificate")
	return cmd
}

// refuseExisting returns an error naming the first of paths that exists
// (or cannot be checked), nil if none does. The error deliberately does not
// wrap fs.ErrExist: refusing to overwrite is exit code 1, not 4 (which the
// CLI uses for namespace paths that exist).
func refuseExisting(paths ...string) error {
	for _, p := range paths {
		_, err := os.Lstat(p)
		switch {
		case err == nil:
			return fmt.Errorf("%s already exists; refusing to overwrite it (remove it or use another --dir)", p)
		case !errors.Is(err, fs.ErrNotExist):
			return fmt.Errorf("check %s: %w", p, err)
		}
	}
	return nil
}

// createCA returns the DER certificate and PKCS#8 key of a new self-signed
// CA named name, valid from now for days days.
func createCA(name string, days int, now time.Time) (certDER, keyDER []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generate key: %w", err)
	}
	serial, err := randomSerial()
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             now.Add(-clockSkew),
		NotAfter:              now.AddDate(0, 0, days),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		// SubjectKeyId: CreateCertificate computes it for a CA.
	}
	certDER, err = x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, nil, fmt.Errorf("sign CA certificate: %w", err)
	}
	keyDER, err = x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, fmt.Errorf("encode key: %w", err)
	}
	return certDER, keyDER, nil
}

// randomSerial returns a random positive 128-bit serial number.
func randomSerial() (*big.Int, error) {
	limit := new(big.Int).Lsh(big.NewInt(1), 128)
	for {
		n, err := rand.Int(rand.Reader, limit)
		if err != nil {
			return nil, fmt.Errorf("serial number: %w", err)
		}
		if n.Sign() > 0 {
			return n, nil
		}
	}
}

// subjectKeyID returns the subject key identifier of pub as Go's x509
// computes it for CA certificates (RFC 7093 §2 method 1: the leftmost 160
// bits of the SHA-256 hash of the public key), for leaf certificates,
// which Go leaves without one.
func subjectKeyID(pub *ecdsa.PublicKey) ([]byte, error) {
	b, err := pub.Bytes()
	if err != nil {
		return nil, fmt.Errorf("subject key id: %w", err)
	}
	h := sha256.Sum256(b)
	return h[:20], nil
}

// newTLSCertCmd returns "ghba tls cert" with its subcommand "create".
func newTLSCertCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "cert",
		Short: "Manage server and client certificates signed by the CA",
		Long: `Manage the certificates of agents (servers) and clients, signed by the CA of
"ghba tls ca create": "ghba tls cert create" makes a new one.`,
		Example: `  ghba tls cert create --server --dir certs`,
		Args:    subcommandArgs,
		RunE:    func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(newTLSCertCreateCmd())
	return cmd
}

// certOptions are the flags of "ghba tls cert create".
type certOptions struct {
	server, client bool
	dir            string
	caFile         string
	keyFile        string
	days           int
	node           string
	dnsNames       []string
	ipAddrs        []string
}

// newTLSCertCreateCmd returns "ghba tls cert create".
func newTLSCertCreateCmd() *cobra.Command {
	o := &certOptions{}
	cmd := &cobra.Command{
		Use:   "create --server|--client",
		Short: "Create a server or client certificate and key signed by the CA",
		Long: `Create a certificate and its ECDSA P-256 key (PKCS#8, mode 0600) in --dir,
signed by the CA (by default ghba-agent-ca.pem and ghba-agent-ca-key.pem in
--dir). It prints the two paths written. Files are numbered so that several
live in one directory: the first N not taken is used.

--server: server-ghba-N.pem and server-ghba-N-key.pem, for an agent
(tls.cert_file and tls.key_file). The certificate names server.ghba,
localhost, NODE.server.ghba with --node NODE, and 127.0.0.1 and ::1, plus
--additional-dnsname and --additional-ipaddress. It is valid for server and
client authentication: agents present it both when they accept connections
and when they dial each other. Agents with verify_server_hostname require
peers' certificates to name server.ghba.

--client: client-ghba-N.pem and client-ghba-N-key.pem, for the ghba CLI and
other clients when agents set verify_incoming (ghba --ca-file
ghba-agent-ca.pem --cert-file client-ghba-0.pem --key-file
client-ghba-0-key.pem ...). The certificate names client.ghba and is valid
for client authentication only, so it cannot pose as a server.

` + tlsConfigHelp,
		Example: `  ghba tls cert create --server --dir certs --node node1
  ghba tls cert create --server --dir certs --additional-dnsname ghba1.example.com --additional-ipaddress 10.0.0.1
  ghba tls cert create --client --dir certs --days 30
  ghba tls cert create --server --dir node-certs --ca ca/ghba-agent-ca.pem --key ca/ghba-agent-ca-key.pem`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			tmpl, err := o.template(time.Now())
			if err != nil {
				return err
			}
			ca, caKey, err := loadCA(o.caFile, o.keyFile)
			if err != nil {
				return fmt.Errorf("cert create: %w", err)
			}
			if time.Now().After(ca.NotAfter) {
				return fmt.Errorf("cert create: the CA certificate %s expired on %s", o.caFile, ca.NotAfter.Format(time.RFC3339))
			}
			if tmpl.NotAfter.After(ca.NotAfter) {
				fmt.Fprintf(cmd.ErrOrStderr(), "warning: the certificate is valid until %s but the CA only until %s; it will not verify after that\n",
					tmpl.NotAfter.Format(time.DateOnly), ca.NotAfter.Format(time.DateOnly))
			}
			certDER, keyDER, err := signCert(tmpl, ca, caKey)
			if err != nil {
				return fmt.Errorf("cert create: %w", err)
			}
			prefix := "server-ghba-"
			if o.client {
				prefix = "client-ghba-"
			}
			// Another process may take the free name between nextFree and
			// writing: then try the next one.
			for range maxCertFiles {
				certPath, keyPath := nextFree(o.dir, prefix)
				if certPath == "" {
					return fmt.Errorf("cert create: no free file name %s<N>.pem in %s", prefix, o.dir)
				}
				err := writePair(certPath, certDER, keyPath, keyDER)
				if errors.Is(err, fs.ErrExist) {
					continue
				}
				if err != nil {
					return fmt.Errorf("cert create: %w", err)
				}
				fmt.Fprintln(cmd.OutOrStdout(), certPath)
				fmt.Fprintln(cmd.OutOrStdout(), keyPath)
				return nil
			}
			return fmt.Errorf("cert create: no free file name %s<N>.pem in %s", prefix, o.dir)
		},
	}
	f := cmd.Flags()
	f.BoolVar(&o.server, "server", false, "create a server (agent) certificate: server-ghba-N.pem")
	f.BoolVar(&o.client, "client", false, "create a client certificate: client-ghba-N.pem")
	f.StringVar(&o.dir, "dir", "", "directory of the CA files and of the certificate and key written (required)")
	f.StringVar(&o.caFile, "ca", "", "CA certificate (default DIR/"+caCertFile+")")
	f.StringVar(&o.keyFile, "key", "", "CA private key (default DIR/"+caKeyFile+")")
	f.IntVar(&o.days, "days", defaultCertDays, "days the certificate is valid")
	f.StringVar(&o.node, "node", "", "server only: also name NODE.server.ghba (the agent's node_id)")
	f.StringSliceVar(&o.dnsNames, "additional-dnsname", nil, "server only: also name this DNS name (repeat or separate with commas)")
	f.StringSliceVar(&o.ipAddrs, "additional-ipaddress", nil, "server only: also name this IP address (repeat or separate with commas)")
	return cmd
}

// template checks the flags, fills in the CA defaults and returns the
// template of the certificate, valid from now.
func (o *certOptions) template(now time.Time) (*x509.Certificate, error) {
	if o.server == o.client {
		return nil, usageErrorf("give exactly one of --server and --client")
	}
	if o.dir == "" {
		return nil, usageErrorf("--dir: no directory given")
	}
	if o.days < 1 {
		return nil, usageErrorf("--days %d: want at least 1", o.days)
	}
	if o.caFile == "" {
		o.caFile = filepath.Join(o.dir, caCertFile)
	}
	if o.keyFile == "" {
		o.keyFile = filepath.Join(o.dir, caKeyFile)
	}
	if o.client && (o.node != "" || len(o.dnsNames) > 0 || len(o.ipAddrs) > 0) {
		return nil, usageErrorf("--node, --additional-dnsname and --additional-ipaddress are for --server certificates")
	}
	serial, err := randomSerial()
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		NotBefore:             now.Add(-clockSkew),
		NotAfter:              now.AddDate(0, 0, o.days),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		BasicConstraintsValid: true,
	}
	if o.client {
		tmpl.DNSNames = []string{tlsClientName}
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	} else {
		names := []string{tlsServerName, "localhost"}
		if o.node != "" {
			if !validDNSLabel(o.node) {
				return nil, usageErrorf("--node %q: want a DNS label (letters, digits, '-' and '_', at most 63)", o.node)
			}
			names = append(names, o.node+"."+tlsServerName)
		}
		for _, n := range o.dnsNames {
			n = strings.TrimSuffix(strings.TrimSpace(n), ".")
			if !validDNSName(n) {
				return nil, usageErrorf("--additional-dnsname %q: want a DNS name", n)
			}
			if !slices.Contains(names, n) {
				names = append(names, n)
			}
		}
		ips := []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}
		for _, s := range o.ipAddrs {
			ip := net.ParseIP(strings.TrimSpace(s))
			if ip == nil {
				return nil, usageErrorf("--additional-ipaddress %q: want an IP address", s)
			}
			if !slices.ContainsFunc(ips, ip.Equal) {
				ips = append(ips, ip)
			}
		}
		tmpl.DNSNames, tmpl.IPAddresses = names, ips
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	}
	tmpl.Subject = pkix.Name{CommonName: tmpl.DNSNames[0]}
	return tmpl, nil
}

// validDNSLabel reports whether s is one label of a host name (letters,
// digits, '-' and '_', not starting or ending with '-', 1 to 63 bytes).
func validDNSLabel(s string) bool {
	if len(s) == 0 || len(s) > 63 || s[0] == '-' || s[len(s)-1] == '-' {
		return false
	}
	for _, c := range []byte(s) {
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '-', c == '_':
		default:
			return false
		}
	}
	return true
}

// validDNSName reports whether s is a host name: dot-separated labels, the
// first of which may be the wildcard "*".
func validDNSName(s string) bool {
	if len(s) == 0 || len(s) > 253 {
		return false
	}
	for i, l := range strings.Split(s, ".") {
		if !(validDNSLabel(l) || (i == 0 && l == "*" && strings.Contains(s, "."))) {
			return false
		}
	}
	return true
}

// loadCA reads the CA certificate (the first PEM certificate of certFile)
// and its private key, and checks that they belong together and that the
// certificate is a CA.
func loadCA(certFile, keyFile string) (*x509.Certificate, crypto.Signer, error) {
	certPEM, err := os.ReadFile(certFile)
	if err != nil {
		return nil, nil, fmt.Errorf("CA certificate: %w", err)
	}
	var ca *x509.Certificate
	for rest := certPEM; ca == nil; {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			return nil, nil, fmt.Errorf("CA certificate %s: no PEM CERTIFICATE block", certFile)
		}
		if b.Type != "CERTIFICATE" {
			continue
		}
		if ca, err = x509.ParseCertificate(b.Bytes); err != nil {
			return nil, nil, fmt.Errorf("CA certificate %s: %w", certFile, err)
		}
	}
	if !ca.IsCA || ca.KeyUsage&x509.KeyUsageCertSign == 0 {
		return nil, nil, fmt.Errorf("CA certificate %s: not a CA certificate (no CA basic constraint or no cert-sign key usage)", certFile)
	}
	keyPEM, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, nil, fmt.Errorf("CA key: %w", err)
	}
	key, err := parsePrivateKey(keyPEM)
	if err != nil {
		return nil, nil, fmt.Errorf("CA key %s: %w", keyFile, err)
	}
	pub, ok := key.Public().(interface{ Equal(crypto.PublicKey) bool })
	if !ok || !pub.Equal(ca.PublicKey) {
		return nil, nil, fmt.Errorf("CA key %s does not belong to the CA certificate %s", keyFile, certFile)
	}
	return ca, key, nil
}

// parsePrivateKey returns the first private key in keyPEM: PKCS#8
// ("PRIVATE KEY", what ca create writes), SEC 1 ("EC PRIVATE KEY") or
// PKCS#1 ("RSA PRIVATE KEY").
func parsePrivateKey(keyPEM []byte) (crypto.Signer, error) {
	for rest := keyPEM; ; {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			return nil, errors.New("no PEM private key block")
		}
		var (
			k   any
			err error
		)
		switch b.Type {
		case "PRIVATE KEY":
			k, err = x509.ParsePKCS8PrivateKey(b.Bytes)
		case "EC PRIVATE KEY":
			k, err = x509.ParseECPrivateKey(b.Bytes)
		case "RSA PRIVATE KEY":
			k, err = x509.ParsePKCS1PrivateKey(b.Bytes)
		default:
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("parse %s: %w", b.Type, err)
		}
		s, ok := k.(crypto.Signer)
		if !ok {
			return nil, fmt.Errorf("%T cannot sign", k)
		}
		return s, nil
	}
}

// signCert generates a P-256 key and signs tmpl for it with the CA; it
// returns the DER certificate and PKCS#8 key.
func signCert(tmpl, ca *x509.Certificate, caKey crypto.Signer) (certDER, keyDER []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generate key: %w", err)
	}
	if tmpl.SubjectKeyId, err = subjectKeyID(&key.PublicKey); err != nil {
		return nil, nil, err
	}
	tmpl.AuthorityKeyId = ca.SubjectKeyId
	certDER, err = x509.CreateCertificate(rand.Reader, tmpl, ca, key.Public(), caKey)
	if err != nil {
		return nil, nil, fmt.Errorf("sign certificate: %w", err)
	}
	keyDER, err = x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, fmt.Errorf("encode key: %w", err)
	}
	return certDER, keyDER, nil
}

// nextFree returns the paths DIR/PREFIX<N>.pem and DIR/PREFIX<N>-key.pem
// for the smallest N for which neither exists, or empty paths if the first
// maxCertFiles are all taken.
func nextFree(dir, prefix string) (certPath, keyPath string) {
	for n := range maxCertFiles {
		c := filepath.Join(dir, fmt.Sprintf("%s%d.pem", prefix, n))
		k := filepath.Join(dir, fmt.Sprintf("%s%d-key.pem", prefix, n))
		if !exists(c) && !exists(k) {
			return c, k
		}
	}
	return "", ""
}

// exists reports whether something is at path (an error other than "does
// not exist" counts as taken).
func exists(path string) bool {
	_, err := os.Lstat(path)
	return !errors.Is(err, fs.ErrNotExist)
}

// writePair writes a certificate (mode 0644) and its key (mode 0600),
// neither of which may exist; if the second cannot be written the first is
// removed again. An error wraps fs.ErrExist if either existed.
func writePair(certPath string, certDER []byte, keyPath string, keyDER []byte) error {
	if err := writePEM(keyPath, "PRIVATE KEY", keyDER, 0o600); err != nil {
		return err
	}
	if err := writePEM(certPath, "CERTIFICATE", certDER, 0o644); err != nil {
		os.Remove(keyPath)
		return err
	}
	return nil
}

// writePEM writes der as one PEM block of type typ to a new file path with
// the given mode (not subject to the umask). It fails, wrapping
// fs.ErrExist, if path exists; on another error it removes the file.
func writePEM(path string, typ string, der []byte, mode os.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	err = f.Chmod(mode)
	if err == nil {
		err = pem.Encode(f, &pem.Block{Type: typ, Bytes: der})
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// newKeygenCmd returns "ghba keygen".
func newKeygenCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "keygen",
		Short: "Print a new gossip encryption key (base64, for encrypt in the agent config)",
		Long: `Print a new key for encrypting the agents' gossip (Serf) traffic: 32 random
bytes (an AES-256 key), base64-encoded, on one line. Every agent of a cluster
needs the same key, in its configuration:

  encrypt: "<the key>"

Agents with different keys, or with and without one, cannot gossip with
each other. Keep the key secret, like the CA key of "ghba tls ca create".`,
		Example: `  ghba keygen
  echo "encrypt: \"$(ghba keygen)\"" >> node1.yaml`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			key, err := gossipKey()
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), key)
			return nil
		},
	}
}

// gossipKey returns a new gossip encryption key: gossipKeyBytes random
// bytes, standard base64.
func gossipKey() (string, error) {
	b := make([]byte, gossipKeyBytes)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("keygen: %w", err)
	}
	return base64.StdEncoding.EncodeToString(b), nil
}
