package main

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ghba/ghba/node/nodetest"
	"github.com/ghba/ghba/rpc/rpctest"
)

// TestAgentRealNode runs "ghba agent" in process with the real node on
// free loopback ports, drives it with the CLI commands, and stops it the
// way SIGTERM does.
func TestAgentRealNode(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a real node (Raft, Serf, Badger)")
	}
	clearEnv(t)
	ports := nodetest.FreePorts(t, 4)
	rpcAddr := "127.0.0.1:" + strconv.Itoa(ports[0])
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	logs := new(rpctest.SyncBuffer)
	done := make(chan error, 1)
	go func() {
		root := newRootCmd()
		root.SetOut(new(strings.Builder))
		root.SetErr(logs)
		root.SetArgs([]string{"agent", "--node-id", "t1", "--data-dir", t.TempDir(), "--group", "g1", "--bootstrap",
			"--rpc-port", strconv.Itoa(ports[0]), "--raft-port", strconv.Itoa(ports[1]),
			"--serf-port", strconv.Itoa(ports[2]), "--http-port", strconv.Itoa(ports[3]), "--log-level", "warn"})
		done <- root.ExecuteContext(ctx)
	}()
	cli := func(args ...string) (string, string, int) {
		return runCLI(t, append([]string{"--addr", rpcAddr, "--timeout", "5s"}, args...)...)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		_, errOut, code := cli("stat", "/")
		if code == 0 {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("agent exited early: %v\n%s", err, logs.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("node not serving after 60s: exit %d %s", code, errOut)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, args := range [][]string{
		{"mkdir", "-p", "/a/b"},
		{"create", "/a/b/f"},
		{"chmod", "600", "/a/b/f"},
		{"chown", "7:8", "/a/b/f"},
		{"mv", "/a/b/f", "/a/g"},
	} {
		if _, errOut, code := cli(args...); code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, errOut)
		}
	}
	out, errOut, code := cli("--json", "stat", "/a/g")
	if code != 0 {
		t.Fatalf("stat: exit %d: %s", code, errOut)
	}
	st := hasKeys(t, "stat", decodeJSON(t, out), "path", "type", "mode", "uid", "gid", "size", "mtime", "home", "level", "hops")
	if st["home"] != "t1" || st["mode"] != float64(0o600) || st["uid"] != float64(7) || st["gid"] != float64(8) || st["type"] != "file" {
		t.Errorf("stat --json = %v", st)
	}
	if _, _, code := cli("stat", "/a/b/f"); code != exitNotFound {
		t.Errorf("stat of renamed path: exit %d, want %d", code, exitNotFound)
	}
	if _, _, code := cli("create", "/a/g"); code != exitExists {
		t.Errorf("create of existing path: exit %d, want %d", code, exitExists)
	}
	out, _, code = cli("--json", "members", "--wait", "1") // (alive once its readiness check saw it serve)
	ms := array(t, "members", decodeJSON(t, out))
	if code != 0 || len(ms) != 1 {
		t.Fatalf("members: exit %d, %v", code, ms)
	}
	m := hasKeys(t, "member", ms[0], "id", "group", "status", "rpc_addr", "raft_role", "files", "replicas_held")
	if m["id"] != "t1" || m["status"] != "alive" || m["rpc_addr"] != rpcAddr || m["group"] != "g1" {
		t.Errorf("member = %v", m)
	}
	if _, errOut, code := cli("rm", "-r", "/a"); code != 0 {
		t.Fatalf("rm -r: exit %d: %s", code, errOut)
	}
	if out, _, _ := cli("--json", "ls", "/"); strings.TrimSpace(out) != "[]" {
		t.Errorf("ls / after rm -r: %s", out)
	}

	cancel() // SIGINT/SIGTERM
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("agent: %v\n%s", err, logs.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatal("agent did not stop within 60s of cancel")
	}
}
