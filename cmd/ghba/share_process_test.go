package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ghba/ghba/rpc"
)

// procShareAgent is a "ghba share-agent" process.
type procShareAgent struct {
	cmd    *exec.Cmd
	stderr *strings.Builder
}

// startShareAgent starts "ghba share-agent args..." against n as token's
// user (GHBA_TOKEN; "" none), its gossip on a free loopback port; the
// test's end kills it if it still runs.
func (c *procCluster) startShareAgent(n *procNode, token string, args ...string) *procShareAgent {
	c.t.Helper()
	args = append([]string{"--addr", n.rpcAddr(), "share-agent", "--bind", "127.0.0.1:0"}, args...)
	cmd := exec.Command(c.bin, args...)
	cmd.Env = append(procEnv(), c.tls.cliEnv()...)
	if token != "" {
		cmd.Env = append(cmd.Env, envToken+"="+token)
	}
	if c.tls != nil {
		cmd.Env = append(cmd.Env, envEncrypt+"="+c.tls.gossipKey)
	}
	a := &procShareAgent{cmd: cmd, stderr: new(strings.Builder)}
	cmd.Stderr = a.stderr
	if err := cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	return a
}

// stop interrupts the agent and waits for its exit, which must be clean.
func (a *procShareAgent) stop(t *testing.T) {
	t.Helper()
	if err := a.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	if err := a.cmd.Wait(); err != nil {
		t.Errorf("share-agent after SIGINT: %v; its log:\n%s", err, a.stderr.String())
	}
}

// discovered returns what "ghba source discover --json" lists through n.
func (c *procCluster) discovered(n *procNode) []rpc.DiscoveredMachine {
	c.t.Helper()
	out, errOut, code := c.at(n, "--json", "source", "discover")
	if code != 0 {
		c.t.Fatalf("source discover: exit %d: %s", code, errOut)
	}
	var ms []rpc.DiscoveredMachine
	if err := json.Unmarshal([]byte(out), &ms); err != nil {
		c.t.Fatalf("source discover --json: %v: %s", err, out)
	}
	return ms
}

// waitDiscovered waits until n lists machine announcing share.
func (c *procCluster) waitDiscovered(n *procNode, machine, share string) {
	c.t.Helper()
	c.waitFor(machine+"'s share "+share+" discovered", 30*time.Second, nil, func() (bool, string) {
		ms := c.discovered(n)
		for _, m := range ms {
			for _, sh := range m.Shares {
				if m.Machine == machine && sh.Name == share && m.Status == "alive" {
					return true, ""
				}
			}
		}
		return false, fmt.Sprintf("%+v", ms)
	})
}

// TestProcessShareAgent runs "ghba share-agent" as a process beside two
// agents: the folder it announces is listed by the other node, "ghba
// source adopt" registers it (again: exit 4; a share nobody announces:
// exit 3), the share agent imports it within its recheck period, and once
// interrupted it leaves: no node lists it.
func TestProcessShareAgent(t *testing.T) {
	if testing.Short() {
		t.Skip("process test")
	}
	c := newProcClusterR(t, 2, 2)
	c.startAll()
	n1, n2 := c.nodes[0], c.nodes[1]
	src := t.TempDir()
	if err := os.MkdirAll(filepath.Join(src, "a"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "a", "one.txt"), []byte("1"), 0o644); err != nil {
		t.Fatal(err)
	}
	if ms := c.discovered(n1); len(ms) != 0 {
		t.Fatalf("discovered before any agent: %+v", ms)
	}
	a := c.startShareAgent(n1, c.token, "--machine", "ws1", "--recheck", "200ms", "docs="+src)
	c.waitDiscovered(n2, "ws1", "docs")
	if out, _, _ := c.at(n2, "source", "discover"); !strings.Contains(out, "ws1") || !strings.Contains(out, src) {
		t.Errorf("source discover:\n%s", out)
	}
	if _, errOut, code := c.at(n2, "source", "adopt", "ws1", "nothing"); code != exitNotFound {
		t.Errorf("adopt of a share not announced: exit %d, want %d: %s", code, exitNotFound, errOut)
	}
	if _, errOut, code := c.at(n2, "source", "adopt", "ws1", "docs", "--every", "1s"); code != 0 {
		t.Fatalf("source adopt: exit %d: %s", code, errOut)
	}
	if _, _, code := c.at(n1, "source", "adopt", "ws1", "docs"); code != exitExists {
		t.Errorf("second adopt: exit %d, want %d", code, exitExists)
	}
	ms := c.discovered(n1)
	if len(ms) != 1 || len(ms[0].Shares) != 1 || ms[0].Shares[0] != (rpc.DiscoveredShare{Name: "docs", Dir: src, Source: "docs"}) {
		t.Errorf("discovered after the adoption: %+v", ms)
	}
	c.waitFor("the share agent's scan of the adopted share", 30*time.Second, nil, func() (bool, string) {
		_, errOut, code := c.at(n2, "stat", "/sources/docs/a/one.txt")
		return code == 0, errOut
	})
	a.stop(t)
	if log := a.stderr.String(); !strings.Contains(log, "scan: docs: 3 entries") {
		t.Errorf("the agent's log shows no scan of docs:\n%s", log)
	}
	c.waitFor("no node lists ws1 after it left", 30*time.Second, nil, func() (bool, string) {
		ms1, ms2 := c.discovered(n1), c.discovered(n2)
		return len(ms1) == 0 && len(ms2) == 0, fmt.Sprintf("%+v %+v", ms1, ms2)
	})
}
