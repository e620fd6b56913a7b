package tlsutil

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// pki is a test CA that signs leaf certificates into files.
type pki struct {
	t    *testing.T
	dir  string
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	ca   string // CA file
	n    int64
}

func newPKI(t *testing.T) *pki {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	p := &pki{t: t, dir: t.TempDir(), cert: cert, key: key, n: 1}
	p.ca = filepath.Join(p.dir, "ca.pem")
	writePEM(t, p.ca, "CERTIFICATE", der)
	return p
}

// leaf writes a certificate for dns (none: no name) with the given uses
// into cert and key, and returns its serial number.
func (p *pki) leaf(cert, key string, dns []string, uses ...x509.ExtKeyUsage) *big.Int {
	p.t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		p.t.Fatal(err)
	}
	p.n++
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(p.n), Subject: pkix.Name{CommonName: "leaf"}, DNSNames: dns,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: uses}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.cert, &k.PublicKey, p.key)
	if err != nil {
		p.t.Fatal(err)
	}
	kd, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		p.t.Fatal(err)
	}
	writePEM(p.t, cert, "CERTIFICATE", der)
	writePEM(p.t, key, "PRIVATE KEY", kd)
	return tmpl.SerialNumber
}

func writePEM(t *testing.T, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// serve accepts TLS connections on loopback with c until the test ends.
func serve(t *testing.T, c *Configurator) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tl := c.Listener(ln)
	t.Cleanup(func() { tl.Close() })
	go func() {
		for {
			conn, err := tl.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				b := make([]byte, 1)
				if _, err := conn.Read(b); err == nil {
					_, _ = conn.Write(b)
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// exchange dials addr with c, sends a byte and reads it back, and returns
// the serial number of the server's certificate.
func exchange(c *Configurator, addr string) (*big.Int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := c.Dialer(nil)(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	if _, err := conn.Write([]byte{7}); err != nil {
		return nil, err
	}
	b := make([]byte, 1)
	if _, err := conn.Read(b); err != nil {
		return nil, err
	}
	return peerSerial(conn), nil
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name     string
		c        Config
		listener bool
		ok       bool
	}{
		{"off", Config{}, true, true},
		{"node", Config{CAFile: "ca", CertFile: "c", KeyFile: "k"}, true, true},
		{"client without certificate", Config{CAFile: "ca"}, false, true},
		{"node without certificate", Config{CAFile: "ca"}, true, false},
		{"no CA", Config{CertFile: "c", KeyFile: "k"}, true, false},
		{"cert without key", Config{CAFile: "ca", CertFile: "c"}, false, false},
	} {
		if err := tc.c.Validate(tc.listener); (err == nil) != tc.ok {
			t.Errorf("%s: Validate = %v, want ok %v", tc.name, err, tc.ok)
		}
	}
}

// TestMutualTLSAndReload: a server that verifies incoming certificates
// talks to a client signed by its CA, not to one without a certificate;
// hostname verification refuses a server certificate without the server
// name; Reload takes new files for new connections, and a failed reload
// keeps the old ones.
func TestMutualTLSAndReload(t *testing.T) {
	p := newPKI(t)
	srvCert, srvKey := filepath.Join(p.dir, "srv.pem"), filepath.Join(p.dir, "srv-key.pem")
	first := p.leaf(srvCert, srvKey, []string{ServerName}, x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth)
	cliCert, cliKey := filepath.Join(p.dir, "cli.pem"), filepath.Join(p.dir, "cli-key.pem")
	p.leaf(cliCert, cliKey, nil, x509.ExtKeyUsageClientAuth)

	srv, err := New(Config{CAFile: p.ca, CertFile: srvCert, KeyFile: srvKey, VerifyIncoming: true}, true)
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, srv)
	cli, err := New(Config{CAFile: p.ca, CertFile: cliCert, KeyFile: cliKey, VerifyServerHostname: true}, false)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := exchange(cli, addr); err != nil || got.Cmp(first) != 0 {
		t.Fatalf("exchange: serial %v, %v; want %v", got, err, first)
	}
	anon, err := New(Config{CAFile: p.ca}, false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := exchange(anon, addr); err == nil {
		t.Error("a client without a certificate was served")
	}

	// A new server certificate without the server name: served after
	// Reload; refused by a client that verifies the name, accepted by one
	// that verifies the chain only.
	second := p.leaf(srvCert, srvKey, []string{"elsewhere"}, x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth)
	if err := srv.Reload(); err != nil {
		t.Fatal(err)
	}
	if _, err := exchange(cli, addr); err == nil {
		t.Error("a server certificate without the server name passed hostname verification")
	}
	chainOnly, err := New(Config{CAFile: p.ca, CertFile: cliCert, KeyFile: cliKey}, false)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := exchange(chainOnly, addr); err != nil || got.Cmp(second) != 0 {
		t.Fatalf("after reload: serial %v, %v; want %v", got, err, second)
	}

	// A broken file: Reload fails, the last good files stay in use.
	if err := os.WriteFile(srvKey, []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := srv.Reload(); err == nil {
		t.Error("Reload of a broken key succeeded")
	}
	if got, err := exchange(chainOnly, addr); err != nil || got.Cmp(second) != 0 {
		t.Errorf("after a failed reload: serial %v, %v; want %v", got, err, second)
	}
}

// peerSerial returns the serial number of the certificate the server of a
// TLS connection presented.
func peerSerial(conn net.Conn) *big.Int {
	tc, ok := conn.(*tls.Conn)
	if !ok {
		return nil
	}
	cs := tc.ConnectionState()
	if len(cs.PeerCertificates) == 0 {
		return nil
	}
	return cs.PeerCertificates[0].SerialNumber
}
