package main

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
)

// runCmd executes cmd (built directly: "ghba tls" and "ghba keygen" are
// registered in the root command elsewhere) with args and returns its
// stdout, stderr and error.
func runCmd(t *testing.T, cmd *cobra.Command, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var out, errOut bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	cmd.SetArgs(args)
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	err = cmd.Execute()
	return out.String(), errOut.String(), err
}

// runTLS runs "ghba tls ARGS..." and fails the test on an error.
func runTLS(t *testing.T, args ...string) []string {
	t.Helper()
	out, errOut, err := runCmd(t, newTLSCmd(), args...)
	if err != nil {
		t.Fatalf("ghba tls %s: %v (stderr %q)", strings.Join(args, " "), err, errOut)
	}
	return strings.Fields(out)
}

// readCert parses the one PEM certificate in path.
func readCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	blk, rest := pem.Decode(b)
	if blk == nil || blk.Type != "CERTIFICATE" || len(bytes.TrimSpace(rest)) != 0 {
		t.Fatalf("%s: want exactly one CERTIFICATE PEM block", path)
	}
	c, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return c
}

// checkKeyFile checks that path is a mode-0600 PKCS#8 PEM key.
func checkKeyFile(t *testing.T, path string) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if m := fi.Mode().Perm(); m != 0o600 {
		t.Errorf("%s: mode %v, want 0600", path, m)
	}
	b, _ := os.ReadFile(path)
	blk, _ := pem.Decode(b)
	if blk == nil || blk.Type != "PRIVATE KEY" {
		t.Fatalf("%s: want a PRIVATE KEY PEM block", path)
	}
	if _, err := x509.ParsePKCS8PrivateKey(blk.Bytes); err != nil {
		t.Errorf("%s: %v", path, err)
	}
}

// createTestCA runs "ghba tls ca create" into a new temporary directory and
// returns the directory and a pool holding the CA.
func createTestCA(t *testing.T) (string, *x509.CertPool) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "certs") // ca create makes it
	runTLS(t, "ca", "create", "--dir", dir)
	pool := x509.NewCertPool()
	pool.AddCert(readCert(t, filepath.Join(dir, caCertFile)))
	return dir, pool
}

func TestTLSCommands(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "certs")
	caCert, caKey := filepath.Join(dir, caCertFile), filepath.Join(dir, caKeyFile)

	t.Run("ca create", func(t *testing.T) {
		out := runTLS(t, "ca", "create", "--dir", dir, "--days", "30", "--common-name", "test CA")
		if want := []string{caCert, caKey}; !slices.Equal(out, want) {
			t.Errorf("printed %q, want %q", out, want)
		}
		checkKeyFile(t, caKey)
		ca := readCert(t, caCert)
		if !ca.IsCA || !ca.BasicConstraintsValid {
			t.Errorf("IsCA %v, BasicConstraintsValid %v", ca.IsCA, ca.BasicConstraintsValid)
		}
		if want := x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature; ca.KeyUsage != want {
			t.Errorf("KeyUsage %v, want %v", ca.KeyUsage, want)
		}
		if ca.Subject.CommonName != "test CA" {
			t.Errorf("CN %q", ca.Subject.CommonName)
		}
		if len(ca.SubjectKeyId) == 0 {
			t.Error("no SubjectKeyId")
		}
		if ca.SerialNumber.Sign() <= 0 || ca.SerialNumber.BitLen() > 128 {
			t.Errorf("serial %v: want a positive 128-bit number", ca.SerialNumber)
		}
		if err := ca.CheckSignatureFrom(ca); err != nil {
			t.Errorf("not self-signed: %v", err)
		}
		if d := time.Until(ca.NotAfter); d < 29*24*time.Hour || d > 31*24*time.Hour {
			t.Errorf("NotAfter %v: want in 30 days", ca.NotAfter)
		}
	})

	t.Run("ca create refuses to overwrite", func(t *testing.T) {
		before := [][]byte{}
		for _, p := range []string{caCert, caKey} {
			b, _ := os.ReadFile(p)
			before = append(before, b)
		}
		out, _, err := runCmd(t, newTLSCmd(), "ca", "create", "--dir", dir)
		if err == nil {
			t.Fatal("second ca create succeeded")
		}
		if code := exitCode(err); code != exitError {
			t.Errorf("exit %d, want %d", code, exitError)
		}
		if !strings.Contains(err.Error(), caCert) {
			t.Errorf("error %q does not name %s", err, caCert)
		}
		if out != "" {
			t.Errorf("printed %q", out)
		}
		for i, p := range []string{caCert, caKey} {
			if b, _ := os.ReadFile(p); !bytes.Equal(b, before[i]) {
				t.Errorf("%s changed", p)
			}
		}
		// Only the key left behind: refused too, naming the key.
		other := t.TempDir()
		if err := os.WriteFile(filepath.Join(other, caKeyFile), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
		_, _, err = runCmd(t, newTLSCmd(), "ca", "create", "--dir", other)
		if err == nil || !strings.Contains(err.Error(), caKeyFile) {
			t.Errorf("ca create over a lone key: %v", err)
		}
		if _, err := os.Stat(filepath.Join(other, caCertFile)); err == nil {
			t.Error("ca create wrote the certificate next to an existing key")
		}
	})

	pool := x509.NewCertPool()
	pool.AddCert(readCert(t, caCert))
	ca := readCert(t, caCert)

	// Each row runs cert create once, in order, in the same directory.
	certs := map[string]*x509.Certificate{}
	tests := []struct {
		name      string
		args      []string
		wantFile  string
		server    bool
		wantDNS   []string
		wantIPs   []string
		unwantDNS []string
	}{
		{
			name: "server 0", args: []string{"--server"}, wantFile: "server-ghba-0", server: true,
			wantDNS: []string{"server.ghba", "localhost"}, wantIPs: []string{"127.0.0.1", "::1"},
		},
		{
			name: "server 1 with node and additional names", wantFile: "server-ghba-1", server: true,
			args:    []string{"--server", "--node", "n1", "--additional-ipaddress", "10.1.2.3", "--additional-dnsname", "ghba1.example.com", "--days", "7"},
			wantDNS: []string{"server.ghba", "localhost", "n1.server.ghba", "ghba1.example.com"},
			wantIPs: []string{"127.0.0.1", "::1", "10.1.2.3"},
		},
		{
			name: "client 0", args: []string{"--client"}, wantFile: "client-ghba-0",
			wantDNS: []string{"client.ghba"}, unwantDNS: []string{"server.ghba"},
		},
		{
			name: "server 2 with explicit CA files", wantFile: "server-ghba-2", server: true,
			args:    []string{"--server", "--ca", caCert, "--key", caKey},
			wantDNS: []string{"server.ghba", "localhost"}, wantIPs: []string{"127.0.0.1", "::1"},
		},
	}
	for _, tt := range tests {
		t.Run("cert create "+tt.name, func(t *testing.T) {
			out := runTLS(t, append([]string{"cert", "create", "--dir", dir}, tt.args...)...)
			certPath, keyPath := filepath.Join(dir, tt.wantFile+".pem"), filepath.Join(dir, tt.wantFile+"-key.pem")
			if want := []string{certPath, keyPath}; !slices.Equal(out, want) {
				t.Fatalf("printed %q, want %q", out, want)
			}
			checkKeyFile(t, keyPath)
			if _, err := tls.LoadX509KeyPair(certPath, keyPath); err != nil {
				t.Fatalf("LoadX509KeyPair: %v", err)
			}
			c := readCert(t, certPath)
			certs[tt.wantFile] = c
			if !slices.Equal(c.DNSNames, tt.wantDNS) {
				t.Errorf("DNSNames %q, want %q", c.DNSNames, tt.wantDNS)
			}
			var ips []string
			for _, ip := range c.IPAddresses {
				ips = append(ips, ip.String())
			}
			if !slices.Equal(ips, tt.wantIPs) {
				t.Errorf("IPAddresses %q, want %q", ips, tt.wantIPs)
			}
			if c.Subject.CommonName != tt.wantDNS[0] {
				t.Errorf("CN %q, want %q", c.Subject.CommonName, tt.wantDNS[0])
			}
			if c.IsCA {
				t.Error("leaf is a CA")
			}
			if want := x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment; c.KeyUsage != want {
				t.Errorf("KeyUsage %v, want %v", c.KeyUsage, want)
			}
			if len(c.AuthorityKeyId) == 0 || !bytes.Equal(c.AuthorityKeyId, ca.SubjectKeyId) {
				t.Errorf("AuthorityKeyId %x, want the CA's SubjectKeyId %x", c.AuthorityKeyId, ca.SubjectKeyId)
			}
			if len(c.SubjectKeyId) == 0 {
				t.Error("no SubjectKeyId")
			}
			if c.SerialNumber.Sign() <= 0 || c.SerialNumber.BitLen() > 128 {
				t.Errorf("serial %v", c.SerialNumber)
			}
			// Client authentication: every certificate.
			if _, err := c.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
				t.Errorf("not valid for client auth: %v", err)
			}
			// Server authentication as server.ghba: server certificates only.
			for _, name := range append([]string{"server.ghba"}, tt.unwantDNS...) {
				_, err := c.Verify(x509.VerifyOptions{Roots: pool, DNSName: name, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
				if tt.server && err != nil {
					t.Errorf("not valid for server auth as %s: %v", name, err)
				}
				if !tt.server && err == nil {
					t.Errorf("client certificate valid for server auth as %s", name)
				}
			}
			// A client certificate is not a server certificate under any name.
			if !tt.server {
				if _, err := c.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err == nil {
					t.Error("client certificate valid for server auth")
				}
			}
		})
	}
	if len(certs) != len(tests) {
		t.Fatal("a cert create failed")
	}
	if c := certs["server-ghba-1"]; time.Until(c.NotAfter) > 8*24*time.Hour {
		t.Errorf("--days 7: NotAfter %v", c.NotAfter)
	}
	if c := certs["server-ghba-0"]; time.Until(c.NotAfter) < 364*24*time.Hour {
		t.Errorf("default days: NotAfter %v", c.NotAfter)
	}

	t.Run("next free number fills gaps", func(t *testing.T) {
		// client-ghba-1's key name taken by something else: N=1 is skipped.
		if err := os.WriteFile(filepath.Join(dir, "client-ghba-1-key.pem"), nil, 0o600); err != nil {
			t.Fatal(err)
		}
		out := runTLS(t, "cert", "create", "--client", "--dir", dir)
		if want := filepath.Join(dir, "client-ghba-2.pem"); len(out) != 2 || out[0] != want {
			t.Errorf("printed %q, want %s first", out, want)
		}
	})

	t.Run("mutual TLS handshake", func(t *testing.T) {
		serverCert, err := tls.LoadX509KeyPair(filepath.Join(dir, "server-ghba-0.pem"), filepath.Join(dir, "server-ghba-0-key.pem"))
		if err != nil {
			t.Fatal(err)
		}
		clientCert, err := tls.LoadX509KeyPair(filepath.Join(dir, "client-ghba-0.pem"), filepath.Join(dir, "client-ghba-0-key.pem"))
		if err != nil {
			t.Fatal(err)
		}
		// A client certificate from another CA.
		otherDir, _ := createTestCA(t)
		runTLS(t, "cert", "create", "--client", "--dir", otherDir)
		strangerCert, err := tls.LoadX509KeyPair(filepath.Join(otherDir, "client-ghba-0.pem"), filepath.Join(otherDir, "client-ghba-0-key.pem"))
		if err != nil {
			t.Fatal(err)
		}

		ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{
			MinVersion:   tls.VersionTLS12,
			Certificates: []tls.Certificate{serverCert},
			ClientCAs:    pool,
			ClientAuth:   tls.RequireAndVerifyClientCert,
		})
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		// The server echoes one byte per connection and reports the
		// handshake's outcome.
		serverErrs := make(chan error, 1)
		go func() {
			for {
				conn, err := ln.Accept()
				if err != nil {
					return
				}
				conn.SetDeadline(time.Now().Add(10 * time.Second))
				err = conn.(*tls.Conn).Handshake()
				if err == nil {
					b := make([]byte, 1)
					if _, err = io.ReadFull(conn, b); err == nil {
						_, err = conn.Write(b)
					}
				}
				conn.Close()
				serverErrs <- err
			}
		}()

		tests := []struct {
			name string
			cert tls.Certificate
			ok   bool
		}{
			{"client certificate of the CA", clientCert, true},
			{"server certificate of the CA as client", serverCert, true},
			{"client certificate of another CA", strangerCert, false},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				conn, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{
					MinVersion: tls.VersionTLS12,
					// Always send the certificate: with Certificates,
					// crypto/tls sends none that is not issued by a CA
					// the server names, and the server would not get
					// to verify (and refuse) it.
					GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &tt.cert, nil },
					RootCAs:              pool,
					ServerName:           "server.ghba",
				})
				var got []byte
				if err == nil {
					conn.SetDeadline(time.Now().Add(10 * time.Second))
					got = make([]byte, 1)
					if _, err = conn.Write([]byte{42}); err == nil {
						_, err = io.ReadFull(conn, got)
					}
					conn.Close()
				}
				serverErr := <-serverErrs
				if tt.ok {
					if err != nil || serverErr != nil {
						t.Fatalf("client: %v, server: %v", err, serverErr)
					}
					if got[0] != 42 {
						t.Errorf("echoed %d", got[0])
					}
					return
				}
				if err == nil {
					t.Error("client exchanged a byte with a certificate of another CA")
				}
				var unknown x509.UnknownAuthorityError
				if !errors.As(serverErr, &unknown) {
					t.Errorf("server: %v, want an unknown authority error", serverErr)
				}
			})
		}
	})

	t.Run("client certificate refused as server certificate", func(t *testing.T) {
		clientCert, err := tls.LoadX509KeyPair(filepath.Join(dir, "client-ghba-0.pem"), filepath.Join(dir, "client-ghba-0-key.pem"))
		if err != nil {
			t.Fatal(err)
		}
		ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{clientCert}})
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		go func() {
			if conn, err := ln.Accept(); err == nil {
				conn.(*tls.Conn).Handshake()
				conn.Close()
			}
		}()
		conn, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{RootCAs: pool, ServerName: "client.ghba"})
		if err == nil {
			conn.Close()
			t.Fatal("a client certificate passed as a server certificate")
		}
	})

	t.Run("errors", func(t *testing.T) {
		empty := t.TempDir()
		tests := []struct {
			name string
			args []string
			want int
		}{
			{"both --server and --client", []string{"cert", "create", "--server", "--client", "--dir", dir}, exitUsage},
			{"neither --server nor --client", []string{"cert", "create", "--dir", dir}, exitUsage},
			{"cert without --dir", []string{"cert", "create", "--server"}, exitUsage},
			{"cert --days 0", []string{"cert", "create", "--server", "--dir", dir, "--days", "0"}, exitUsage},
			{"bad --additional-ipaddress", []string{"cert", "create", "--server", "--dir", dir, "--additional-ipaddress", "10.1.2"}, exitUsage},
			{"bad --additional-dnsname", []string{"cert", "create", "--server", "--dir", dir, "--additional-dnsname", "a b"}, exitUsage},
			{"bad --node", []string{"cert", "create", "--server", "--dir", dir, "--node", "a.b"}, exitUsage},
			{"--client with --node", []string{"cert", "create", "--client", "--dir", dir, "--node", "n1"}, exitUsage},
			{"argument", []string{"cert", "create", "--server", "--dir", dir, "extra"}, exitUsage},
			{"unknown flag", []string{"cert", "create", "--server", "--dir", dir, "--bogus"}, exitUsage},
			{"ca without --dir", []string{"ca", "create"}, exitUsage},
			{"ca --days -1", []string{"ca", "create", "--dir", empty, "--days", "-1"}, exitUsage},
			{"unknown subcommand", []string{"bogus"}, exitUsage},
			{"unknown ca subcommand", []string{"ca", "bogus"}, exitUsage},
			{"no CA in --dir", []string{"cert", "create", "--server", "--dir", empty}, exitNotFound},
			{"missing --key", []string{"cert", "create", "--server", "--dir", empty, "--ca", caCert, "--key", filepath.Join(empty, "k.pem")}, exitNotFound},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				before, _ := os.ReadDir(dir)
				out, _, err := runCmd(t, newTLSCmd(), tt.args...)
				if err == nil {
					t.Fatalf("no error (stdout %q)", out)
				}
				if code := exitCode(err); code != tt.want {
					t.Errorf("exit %d, want %d (%v)", code, tt.want, err)
				}
				if after, _ := os.ReadDir(dir); len(after) != len(before) {
					t.Errorf("files written in %s after an error", dir)
				}
			})
		}
		// A key that does not belong to the CA certificate.
		otherDir, _ := createTestCA(t)
		_, _, err := runCmd(t, newTLSCmd(), "cert", "create", "--server", "--dir", empty,
			"--ca", caCert, "--key", filepath.Join(otherDir, caKeyFile))
		if err == nil || !strings.Contains(err.Error(), "does not belong") {
			t.Errorf("mismatched CA key: %v", err)
		}
		if entries, _ := os.ReadDir(empty); len(entries) != 0 {
			t.Errorf("files written after an error: %v", entries)
		}
	})

	t.Run("help", func(t *testing.T) {
		for _, args := range [][]string{{"--help"}, {"ca", "create", "--help"}, {"cert", "create", "--help"}} {
			out, _, err := runCmd(t, newTLSCmd(), args...)
			if err != nil || !strings.Contains(out, "Example") || !strings.Contains(out, "verify_server_hostname") {
				t.Errorf("tls %q: err %v, help without Example or config:\n%s", args, err, out)
			}
		}
	})
}

func TestKeygen(t *testing.T) {
	seen := map[string]bool{}
	for range 2 {
		out, _, err := runCmd(t, newKeygenCmd())
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasSuffix(out, "\n") || strings.Count(out, "\n") != 1 {
			t.Errorf("output %q: want one newline-terminated line", out)
		}
		key := strings.TrimSuffix(out, "\n")
		b, err := base64.StdEncoding.DecodeString(key)
		if err != nil {
			t.Fatalf("%q: %v", key, err)
		}
		if len(b) != 32 {
			t.Errorf("%d bytes, want 32", len(b))
		}
		if seen[key] {
			t.Errorf("the same key twice: %s", key)
		}
		seen[key] = true
	}
	if _, _, err := runCmd(t, newKeygenCmd(), "extra"); exitCode(err) != exitUsage {
		t.Errorf("keygen extra: %v, want a usage error", err)
	}
}
