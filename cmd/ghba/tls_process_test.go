package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ghba/ghba/rpc"
	"github.com/ghba/ghba/rpc/client"
	"github.com/ghba/ghba/rpc/tlsutil"
)

// procTLS is the PKI and gossip key of a procCluster with TLS (useTLS):
// made with the binary's own ghba tls and ghba keygen.
type procTLS struct {
	dir                  string
	ca                   string
	serverCert, serverKy string
	clientCert, clientKy string
	gossipKey            string
}

// useTLS makes a CA, a server and a client certificate and a gossip key
// with the binary, and secures every node added from now on: TLS on every
// port with verify_incoming and verify_server_hostname, gossip encrypted.
func (c *procCluster) useTLS() *procTLS {
	c.t.Helper()
	dir := filepath.Join(c.dir, "pki")
	for _, args := range [][]string{
		{"tls", "ca", "create", "--dir", dir},
		{"tls", "cert", "create", "--server", "--dir", dir},
		{"tls", "cert", "create", "--client", "--dir", dir},
	} {
		if _, errOut, code := c.cli(args...); code != 0 {
			c.t.Fatalf("ghba %s: exit %d: %s", strings.Join(args, " "), code, errOut)
		}
	}
	key, errOut, code := c.cli("keygen")
	if code != 0 {
		c.t.Fatalf("ghba keygen: exit %d: %s", code, errOut)
	}
	c.tls = &procTLS{
		dir:        dir,
		ca:         filepath.Join(dir, "ghba-agent-ca.pem"),
		serverCert: filepath.Join(dir, "server-ghba-0.pem"), serverKy: filepath.Join(dir, "server-ghba-0-key.pem"),
		clientCert: filepath.Join(dir, "client-ghba-0.pem"), clientKy: filepath.Join(dir, "client-ghba-0-key.pem"),
		gossipKey: strings.TrimSpace(key),
	}
	return c.tls
}

// agentConfig is the config section of node id: its own copy of the
// server certificate (so that one node's can be replaced at a time);
// encrypt overrides the gossip key when not empty.
func (p *procTLS) agentConfig(t testing.TB, id, encrypt string) string {
	cert, key := p.nodeFiles(id)
	copyFile(t, p.serverCert, cert)
	copyFile(t, p.serverKy, key)
	if encrypt == "" {
		encrypt = p.gossipKey
	}
	return fmt.Sprintf("tls:\n  ca_file: %s\n  cert_file: %s\n  key_file: %s\n  verify_incoming: true\n  verify_server_hostname: true\nencrypt: %q\n",
		strconv.Quote(p.ca), strconv.Quote(cert), strconv.Quote(key), encrypt)
}

// nodeFiles are node id's certificate and key files.
func (p *procTLS) nodeFiles(id string) (cert, key string) {
	return filepath.Join(p.dir, id+".pem"), filepath.Join(p.dir, id+"-key.pem")
}

// cliEnv is the environment that makes the CLI use the client
// certificate (nil without TLS).
func (p *procTLS) cliEnv() []string {
	if p == nil {
		return nil
	}
	return []string{envCACert + "=" + p.ca, envClientCert + "=" + p.clientCert, envClientKey + "=" + p.clientKy}
}

// configurator loads the client side (nil without TLS).
func (p *procTLS) configurator(t testing.TB) *tlsutil.Configurator {
	if p == nil {
		return nil
	}
	tc, err := tlsutil.New(tlsutil.Config{CAFile: p.ca, CertFile: p.clientCert, KeyFile: p.clientKy, VerifyServerHostname: true}, false)
	if err != nil {
		t.Fatal(err)
	}
	return tc
}

// dialer is the harness's RPC dialer (nil: plain TCP).
func (p *procTLS) dialer(t testing.TB) func(ctx context.Context, network, addr string) (net.Conn, error) {
	if p == nil {
		return nil
	}
	return p.configurator(t).Dialer(nil)
}

// clientConfig is the harness's HTTPS client configuration.
func (p *procTLS) clientConfig(t testing.TB) *tls.Config {
	return p.configurator(t).ClientConfig()
}

// TestProcessTLS: 3 agents with TLS on every port (mutual authentication,
// server names verified) and gossip encryption, all made with ghba tls and
// ghba keygen.
//
//   - The cluster forms and serves through the CLI with the client
//     certificate, and its status over HTTPS.
//   - Refused: a plain TCP client, a client without a certificate, a
//     client whose certificate another CA signed, plain HTTP.
//   - Rolling certificate reload: new server certificates written over the
//     old files, SIGHUP to one node at a time; each then presents its new
//     certificate, and writes and a restart of a node keep working.
//   - A node with another gossip key cannot join.
//   - Gossip key rotation (ghba keyring --install, --use, --remove) on
//     every member; a restarted member keeps the rotated keyring; a node
//     with only the removed key cannot join.
func TestProcessTLS(t *testing.T) {
	if testing.Short() {
		t.Skip("starts agent processes")
	}
	c := newProcCluster(t, 0)
	p := c.useTLS()
	for range 3 {
		c.addNode()
	}
	c.startAll()
	if _, errOut, code := c.at(c.nodes[0], "mkdir", "-p", "/tls"); code != 0 {
		t.Fatalf("mkdir over TLS: exit %d: %s", code, errOut)
	}
	for i, n := range c.nodes {
		if _, errOut, code := c.at(n, "create", fmt.Sprintf("/tls/f%d", i)); code != 0 {
			t.Fatalf("create via %s: exit %d: %s", n.id, code, errOut)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	n1 := c.nodes[0]

	// Refused connections.
	refused := func(what string, dial func(ctx context.Context, network, addr string) (net.Conn, error)) {
		t.Helper()
		cl := client.New(client.Options{Addrs: []string{n1.rpcAddr()}, Timeout: 5 * time.Second, MaxAttempts: 1, Dial: dial})
		defer cl.Close()
		if _, err := cl.Stat(ctx, "/tls/f0"); err == nil {
			t.Errorf("%s: stat answered", what)
		} else {
			t.Logf("%s: %v", what, err)
		}
	}
	refused("plain TCP client", nil)
	noCert, err := tlsutil.New(tlsutil.Config{CAFile: p.ca}, false)
	if err != nil {
		t.Fatal(err)
	}
	refused("client without a certificate", noCert.Dialer(nil))
	other := filepath.Join(c.dir, "other-pki")
	for _, args := range [][]string{{"tls", "ca", "create", "--dir", other}, {"tls", "cert", "create", "--client", "--dir", other}} {
		if _, errOut, code := c.cli(args...); code != 0 {
			t.Fatalf("ghba %s: exit %d: %s", strings.Join(args, " "), code, errOut)
		}
	}
	foreign, err := tlsutil.New(tlsutil.Config{CAFile: p.ca, CertFile: filepath.Join(other, "client-ghba-0.pem"),
		KeyFile: filepath.Join(other, "client-ghba-0-key.pem")}, false)
	if err != nil {
		t.Fatal(err)
	}
	refused("client with a certificate of another CA", foreign.Dialer(nil))
	if resp, err := (&http.Client{Timeout: 5 * time.Second}).Get("http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(n1.http)) + "/v1/status"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Errorf("plain HTTP status answered %s", resp.Status)
		}
	}
	if _, errOut, code := c.cli("--addr", n1.rpcAddr(), "--ca-file", "", "--cert-file", "", "--key-file", "", "stat", "/"); code != exitUnavail || !strings.Contains(errOut, "--ca-file") {
		t.Errorf("the CLI without TLS flags: exit %d, want %d with a hint naming --ca-file: %s", code, exitUnavail, errOut)
	}

	// Rolling reload: node by node, a new certificate (same CA) over the
	// node's files, then SIGHUP; the node presents it from then on, and
	// writes through it commit on all three.
	for i, n := range c.nodes {
		if _, errOut, code := c.cli("tls", "cert", "create", "--server", "--dir", p.dir); code != 0 {
			t.Fatalf("new server certificate: exit %d: %s", code, errOut)
		}
		fresh := filepath.Join(p.dir, fmt.Sprintf("server-ghba-%d.pem", i+1))
		cert, key := p.nodeFiles(n.id)
		copyFile(t, fresh, cert)
		copyFile(t, strings.TrimSuffix(fresh, ".pem")+"-key.pem", key)
		want := fileSerial(t, cert)
		if err := n.run.cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		c.waitFor(n.id+" presents its new certificate", 30*time.Second, func() { c.checkRunning(c.nodes...) }, func() (bool, string) {
			got, err := servedSerial(p, t, n.rpcAddr())
			if err != nil {
				return false, err.Error()
			}
			return got == want, fmt.Sprintf("serial %s, want %s", got, want)
		})
		if _, errOut, code := c.at(n, "create", fmt.Sprintf("/tls/reloaded%d", i)); code != 0 {
			t.Fatalf("create via %s after its reload: exit %d: %s", n.id, code, errOut)
		}
	}
	// New connections everywhere: node2 restarts with its new certificate
	// and rejoins.
	n2 := c.nodes[1]
	if err := c.stop(n2); err != nil {
		t.Fatalf("stopping %s: %v", n2.id, err)
	}
	c.start(n2)
	c.waitReady("node2 back after the reloads", c.nodes...)
	for i := range c.nodes {
		for _, n := range c.nodes {
			if _, errOut, code := c.at(n, "stat", fmt.Sprintf("/tls/reloaded%d", i)); code != 0 {
				t.Fatalf("stat via %s: exit %d: %s", n.id, code, errOut)
			}
		}
	}

	// A node with another gossip key cannot join: node1 never sees it.
	otherKey, errOut, code := c.cli("keygen")
	if code != 0 {
		t.Fatalf("keygen: exit %d: %s", code, errOut)
	}
	n4 := c.addNodeWith(procNodeOpts{Encrypt: strings.TrimSpace(otherKey)})
	c.start(n4)
	deadline := time.Now().Add(8 * time.Second)
	for time.Now().Before(deadline) {
		ms, err := c.members(n1)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range ms {
			if m.ID == n4.id {
				t.Fatalf("%s with another gossip key joined: %+v", n4.id, m)
			}
		}
		time.Sleep(procPollInterval)
	}
	c.kill(n4)

	// Key rotation on every member: install, use, remove; the members keep
	// the new keyring over a restart although their config names the old
	// key, and a node with only the old key cannot join any more.
	newKey, errOut, code := c.cli("keygen")
	if code != 0 {
		t.Fatalf("keygen: exit %d: %s", code, errOut)
	}
	newKey = strings.TrimSpace(newKey)
	for _, args := range [][]string{{"keyring", "--install", newKey}, {"keyring", "--use", newKey}, {"keyring", "--remove", p.gossipKey}} {
		if out, errOut, code := c.at(n1, args...); code != 0 {
			t.Fatalf("ghba %s: exit %d: %s%s", args[1], code, out, errOut)
		}
	}
	out, errOut, code := c.at(n1, "--json", "keyring")
	if code != 0 {
		t.Fatalf("keyring: exit %d: %s", code, errOut)
	}
	var kr rpc.KeyringResponse
	if err := json.Unmarshal([]byte(out), &kr); err != nil {
		t.Fatalf("keyring --json: %v: %s", err, out)
	}
	if len(kr.Keys) != 1 || kr.Keys[newKey] != 3 || kr.PrimaryKeys[newKey] != 3 || kr.Members != 3 {
		t.Fatalf("after the rotation: %+v", kr)
	}
	n3 := c.nodes[2]
	if err := c.stop(n3); err != nil {
		t.Fatalf("stopping %s: %v", n3.id, err)
	}
	c.start(n3)
	c.waitReady("node3 back with the rotated keyring", c.nodes[:3]...)
	n5 := c.addNodeWith(procNodeOpts{}) // encrypt: the old key
	c.start(n5)
	deadline = time.Now().Add(8 * time.Second)
	for time.Now().Before(deadline) {
		ms, err := c.members(n1)
		if err != nil {
			t.Fatal(err)
		}
		if slices.ContainsFunc(ms, func(m rpc.Member) bool { return m.ID == n5.id }) {
			t.Fatalf("%s with the removed key joined", n5.id)
		}
		time.Sleep(procPollInterval)
	}
	c.kill(n5)
}

// copyFile copies src to dst (mode 0600).
func copyFile(t testing.TB, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// servedSerial returns the serial number of the certificate addr presents.
func servedSerial(p *procTLS, t testing.TB, addr string) (string, error) {
	tc := p.configurator(t).ClientConfig()
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, tc)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	cs := conn.ConnectionState()
	if len(cs.PeerCertificates) == 0 {
		return "", errors.New("no certificate")
	}
	return cs.PeerCertificates[0].SerialNumber.String(), nil
}

// fileSerial returns the serial number of the PEM certificate in path.
func fileSerial(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode(b)
	if blk == nil {
		t.Fatalf("%s: no PEM", path)
	}
	cert, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return cert.SerialNumber.String()
}
