package main

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/ghba/ghba/rpc"
	"github.com/ghba/ghba/rpc/rpctest"
)

// startFake starts a rpctest.FakeServer ("node1") answering as the CLI
// tests expect: every path homed on node2, two members (node1 alive and
// Raft leader with 10 files, node2 failed holding 2 replicas), groups g1
// (node1 and node2, settled) and g2 (empty, not settled), and a leave that moved 12 shard replicas and
// handed over 3 replicas.
func startFake(t *testing.T) *rpctest.FakeServer {
	t.Helper()
	f := rpctest.StartFakeServer(t, rpctest.FakeOptions{ID: "node1"})
	f.SetHome("node2")
	f.SetAnswers(rpctest.FakeAnswers{
		Members: []rpc.Member{
			{ID: "node1", Group: "g1", Status: "alive", RPCAddr: f.Addr(), RaftRole: "leader", Files: 10, ReplicasHeld: 0},
			{ID: "node2", Group: "g1", Status: "failed", RPCAddr: "127.0.0.1:1", RaftRole: "follower", Files: 7, ReplicasHeld: 2},
		},
		Groups: []rpc.GroupInfo{
			{Group: "g1", Members: []string{"node1", "node2"}, Leader: "node1", Replicas: map[string]int{"node1": 1, "node2": 2}, Settled: true,
				MaxGroupSize: 4, Auto: true, SizeChoice: &rpc.GroupSizeChoice{M: 4, Best: 5, Servers: 9, MinM: 3, MaxM: 64, PLRU: 0.9, PL2: 0.5,
					RTTMs: 0.2, PerMsgMs: 0.1, Measured: []string{"servers", "p_lru"}, Gamma: []rpc.GroupSizeGamma{{M: 4, Gamma: 1.5}, {M: 5, Gamma: 1.6}}}},
			{Group: "g2", Unsettled: "node3: 0 of 2 filter replicas loaded"},
		},
		Leave: &rpc.LeaveResponse{MovedShardReplicas: 12, HandedShards: []string{"node1"}, HandedReplicas: 3},
	})
	return f
}

// runCLI runs "ghba args..." in process and returns stdout, stderr and the
// exit code main would use.
func runCLI(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	return runCLIIn(t, "", args...)
}

// runCLIIn is runCLI with stdin.
func runCLIIn(t *testing.T, stdin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	stdout, stderr, err := execCLI(stdin, args...)
	if err != nil {
		stderr += fmt.Sprintln("ghba:", err)
	}
	return stdout, stderr, exitCode(err)
}

// execCLI runs "ghba args..." in process with stdin and returns stdout,
// stderr and the command's error (which main would print).
func execCLI(stdin string, args ...string) (stdout, stderr string, err error) {
	var out, errOut bytes.Buffer
	root := newRootCmd()
	root.SetIn(strings.NewReader(stdin))
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetArgs(args)
	err = root.ExecuteContext(context.Background())
	return out.String(), errOut.String(), err
}
