package node

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"
)

// testTuning shortens every timer for in-process clusters on loopback.
func testTuning() tuning {
	t := defaultTuning()
	// Short, but not so short that a leader steps down ("failed to contact
	// quorum") whenever the race detector and parallel test packages
	// stall a goroutine for a few hundred milliseconds on 2 cores.
	t.raftHeartbeat = 500 * time.Millisecond
	t.raftElection = 500 * time.Millisecond
	t.raftLeaderLease = 300 * time.Millisecond
	t.raftCommit = 10 * time.Millisecond
	t.raftApplyTimeout = 5 * time.Second
	t.fastGossip = true
	t.serfReconnectTimeout = 10 * time.Minute // failed members stay failed (restart test)
	t.serfTombstoneTimeout = time.Minute
	t.serfReapInterval = time.Second
	t.serfReconnectInterval = 300 * time.Millisecond
	t.serfBroadcastTimeout = 2 * time.Second
	t.serfLeavePropagateDelay = 200 * time.Millisecond
	t.reconcileInterval = 300 * time.Millisecond
	t.switchHintTimeout = 5 * time.Second
	t.movedAwayGrace = 5 * time.Second
	t.mergeSettle = 500 * time.Millisecond
	t.mergeQuiet = 1500 * time.Millisecond
	t.orphanTimeout = 2 * time.Second
	t.refreshInterval = 200 * time.Millisecond
	t.retryJoinAttempts = 50
	t.retryJoinMin = 100 * time.Millisecond
	t.retryJoinMax = 500 * time.Millisecond
	t.groupJoinMin = 100 * time.Millisecond
	t.groupJoinMax = 500 * time.Millisecond
	t.rpcTimeout = 5 * time.Second
	t.statusTimeout = time.Second
	t.bootstrapJoinTimeout = 2 * time.Second
	return t
}

// syncBuffer is a goroutine-safe log sink shown when a test fails.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// newTestLogger returns a logger whose output is printed if the test
// fails (or always with GHBA_TEST_LOG=1, at debug level, to stderr).
func newTestLogger(t testing.TB) *slog.Logger {
	if os.Getenv("GHBA_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	buf := new(syncBuffer)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("node logs:\n%s", buf.String())
		}
	})
	return slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

// freePorts returns k distinct ports free for TCP and UDP on 127.0.0.1.
func freePorts(t testing.TB, k int) []int {
	t.Helper()
	var out []int
	var hold []func()
	defer func() {
		for _, f := range hold {
			f()
		}
	}()
	// Ports come from 27000–32767, below the kernel's ephemeral range (which
	// starts at 32768 by default): a port the kernel hands out for ":0" is
	// free only until an outgoing connection takes it, and a node that
	// binds it later (a restart, or a group switch re-opening the Raft
	// transport) then fails with "address already in use". The
	// multi-process tests in cmd/ghba use 20000–26999.
	for tries := 0; len(out) < k; tries++ {
		if tries > 2000 {
			t.Fatalf("free port: none found in 27000-32767")
		}
		port := 27000 + rand.IntN(32768-27000)
		if slices.Contains(out, port) {
			continue
		}
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			continue
		}
		pc, err := net.ListenPacket("udp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			ln.Close()
			continue // UDP side taken: try another
		}
		hold = append(hold, func() { ln.Close(); pc.Close() })
		out = append(out, port)
	}
	return out
}

// testConfig returns a valid config for node id on loopback with free
// ports and a data dir under base.
func testConfig(t testing.TB, base, id string) Config {
	t.Helper()
	p := freePorts(t, 4)
	cfg := DefaultConfig()
	cfg.NodeID = id
	cfg.DataDir = filepath.Join(base, id)
	cfg.BindAddr = "127.0.0.1"
	cfg.Ports = Ports{RPC: p[0], Raft: p[1], Serf: p[2], HTTP: p[3]}
	cfg.FilterCapacity = 10_000
	cfg.LRUEntries = 100
	return cfg
}

// serfAddr returns the Serf address of cfg.
func serfAddr(cfg Config) string {
	return net.JoinHostPort(cfg.BindAddr, strconv.Itoa(cfg.Ports.Serf))
}

// startTestNode creates and starts a node with test timers; it is shut
// down at the end of the test if still running.
// Each tweak, if any, adjusts the node (its tuning) before Start.
func startTestNode(t testing.TB, cfg Config, log *slog.Logger, tweaks ...func(*Node)) *Node {
	t.Helper()
	n, err := New(cfg, log)
	if err != nil {
		t.Fatalf("New(%s): %v", cfg.NodeID, err)
	}
	n.tune = testTuning()
	for _, tw := range tweaks {
		tw(n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := n.Start(ctx); err != nil {
		t.Fatalf("Start(%s): %v", cfg.NodeID, err)
	}
	t.Cleanup(func() { shutdownNode(t, n) })
	return n
}

// shutdownNode shuts n down with a deadline, failing the test on error.
func shutdownNode(t testing.TB, n *Node) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := n.Shutdown(ctx); err != nil {
		t.Errorf("Shutdown(%s): %v", n.ID(), err)
	}
}

// eventually polls cond every 50ms until it returns nil or d passes.
func eventually(t testing.TB, d time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not true after %v: %v", what, d, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// peerOf returns node id as n's Directory sees it.
func peerOf(n *Node, id string) (Peer, bool) {
	for _, p := range n.Directory().Peers() {
		if p.ID == id {
			return p, true
		}
	}
	return Peer{}, false
}

// fsmMemberIDs returns the ids of the members in n's group FSM.
func fsmMemberIDs(n *Node) []string {
	var ids []string
	for _, m := range n.groupFSM().Members() {
		ids = append(ids, m.ID)
	}
	return ids
}

// voterIDs returns the voters of n's Raft configuration.
func voterIDs(n *Node) ([]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	servers, err := n.raftServers(ctx)
	if err != nil {
		return nil, err
	}
	var ids []string
	for id := range servers {
		ids = append(ids, id)
	}
	return ids, nil
}

// leaderOf returns the one leader among nodes, or an error.
func leaderOf(nodes ...*Node) (*Node, error) {
	var leaders []*Node
	for _, n := range nodes {
		if n.isLeader() {
			leaders = append(leaders, n)
		}
	}
	if len(leaders) != 1 {
		return nil, fmt.Errorf("%d established leaders", len(leaders))
	}
	return leaders[0], nil
}
