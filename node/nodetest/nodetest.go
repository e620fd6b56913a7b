// Package nodetest starts real ghba nodes for tests: in-process nodes with
// real Raft, Serf and Badger on loopback (free ports, temporary data dirs,
// short timers), and in-process namespace clusters (real Badger and RPC over
// a Directory the test controls). Every helper waits on conditions, never on
// fixed sleeps, and registers its own cleanup.
//
//	log := rpctest.Logger(t)
//	c1 := nodetest.Config(t, "n1")
//	c1.Bootstrap = true
//	n1 := nodetest.Start(t, c1, log)
//	c2 := nodetest.Config(t, "n2")
//	c2.RetryJoin = []string{nodetest.SerfAddr(c1)}
//	n2 := nodetest.Start(t, c2, log)
//	nodetest.WaitMembers(t, 30*time.Second, n1, 2)
//	leader := nodetest.WaitLeader(t, 30*time.Second, n1, n2)
package nodetest

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ghba/ghba/node"
	"github.com/ghba/ghba/rpc/rpctest"
)

// Tuning returns node timers for in-process clusters on loopback: short,
// but not so short that a leader steps down ("failed to contact quorum")
// whenever the race detector and parallel test packages stall a goroutine
// for a few hundred milliseconds on 2 cores.
func Tuning() node.Tuning {
	t := node.DefaultTuning()
	// The group's Raft keeps the production timers (heartbeat and
	// election 1 s) with a lease of a second: with 300 ms, the leaders of
	// 3-voter groups on a starved 2-core machine under the race detector
	// stepped down every few hundred milliseconds ("failed to contact
	// quorum") and no group kept a leader for 30 s.
	t.Raft.Heartbeat = time.Second
	t.Raft.Election = time.Second
	t.Raft.LeaderLease = time.Second
	t.Raft.Commit = 10 * time.Millisecond
	t.Raft.ApplyTimeout = 5 * time.Second
	// A shard's leader keeps its leadership while a follower answers
	// within a second, not half of one: with the race detector and a
	// parallel test package on 2 cores, a follower that must be sent
	// older entries can take more than 500 ms to answer, and a shard of
	// two voters then lost every leadership it won. Followers still start
	// an election after the production heartbeat timeout (1 s), and a
	// shard's read lease stays half of that.
	t.Shard.LeaderLease = time.Second
	t.FastGossip = true
	t.SerfReconnectTimeout = 10 * time.Minute // failed members stay failed (restart tests)
	t.SerfTombstoneTimeout = time.Minute
	t.SerfReapInterval = time.Second
	t.SerfReconnectInterval = 300 * time.Millisecond
	t.SerfBroadcastTimeout = 2 * time.Second
	t.SerfLeavePropagateDelay = 200 * time.Millisecond
	t.ReconcileInterval = 300 * time.Millisecond
	t.SwitchHintTimeout = 5 * time.Second
	t.MovedAwayGrace = 5 * time.Second
	t.MergeSettle = 500 * time.Millisecond
	t.MergeQuiet = 1500 * time.Millisecond
	t.OrphanTimeout = 2 * time.Second
	t.RefreshInterval = 200 * time.Millisecond
	t.ReadyInterval = 50 * time.Millisecond
	t.RetryJoinAttempts = 50
	t.RetryJoinMin = 100 * time.Millisecond
	t.RetryJoinMax = 500 * time.Millisecond
	t.GroupJoinMin = 100 * time.Millisecond
	t.GroupJoinMax = 500 * time.Millisecond
	t.RPCTimeout = 5 * time.Second
	t.StatusTimeout = time.Second
	t.BootstrapJoinTimeout = 2 * time.Second
	return t
}

// Port ranges. Both stay below the kernel's ephemeral range (which starts
// at 32768 by default): a port the kernel hands out for ":0" is free only
// until an outgoing connection takes it, and a node that binds it later (a
// restart, a group switch re-opening the Raft transport) then fails with
// "address already in use". In-process nodes and agent processes use
// different ranges so that packages tested in parallel never pick the same
// port; both stay clear of the demo's 7410–7433, groups-bench's 7500+ and
// the bad-config test's 17410+.
const (
	inProcessLo, inProcessHi = 27000, 32767
	processLo, processHi     = 20000, 26999
)

// FreePorts returns k distinct ports free for TCP and UDP on 127.0.0.1
// (Serf uses both) for in-process nodes, from 27000–32767.
func FreePorts(t testing.TB, k int) []int {
	t.Helper()
	return freePortsIn(t, k, inProcessLo, inProcessHi, nil)
}

// ProcessPorts returns k distinct ports free for TCP and UDP on 127.0.0.1
// for agent processes, from 20000 up to 26999 or just below the start of
// the ephemeral range (/proc/sys/net/ipv4/ip_local_port_range) if that
// starts lower. Ports in used are skipped, and the new ones added to it
// (nil: none), so that a test never hands one port to two nodes.
func ProcessPorts(t testing.TB, k int, used map[int]bool) []int {
	t.Helper()
	lo, hi := processLo, processHi
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if e, err := strconv.Atoi(f[0]); err == nil && e > lo+1000 && e <= hi {
				hi = e - 1
			}
		}
	}
	return freePortsIn(t, k, lo, hi, used)
}

func freePortsIn(t testing.TB, k, lo, hi int, used map[int]bool) []int {
	t.Helper()
	var out []int
	var hold []func()
	defer func() {
		for _, f := range hold {
			f()
		}
	}()
	for tries := 0; len(out) < k; tries++ {
		if tries > 2000 {
			t.Fatalf("free port: none found in %d-%d", lo, hi)
		}
		port := lo + rand.IntN(hi-lo+1)
		if slices.Contains(out, port) || used[port] || !reservePort(t, port) {
			continue
		}
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			continue
		}
		pc, err := net.ListenPacket("udp", addr)
		if err != nil {
			ln.Close()
			continue // UDP side taken: try another
		}
		hold = append(hold, func() { ln.Close(); pc.Close() })
		out = append(out, port)
	}
	for _, p := range out {
		if used != nil {
			used[p] = true
		}
	}
	return out
}

// reservePort takes an exclusive lock on a file named after port in a
// directory shared by every test binary on the machine, held until the test
// ends. A port is free when picked but released for the node to bind it
// later (and again between a node's stop and its restart); without the lock
// another test, in this binary or in a package tested in parallel, could
// pick it in between and the node's bind would fail with "address already
// in use". flock(2) locks belong to the open file, so they exclude other
// tests of this process too, and the kernel drops them when a test binary
// dies. false: another test holds port.
func reservePort(t testing.TB, port int) bool {
	t.Helper()
	dir := filepath.Join(os.TempDir(), "ghba-test-ports")
	if err := os.MkdirAll(dir, 0o777); err != nil {
		t.Fatalf("port reservations: %v", err)
	}
	f, err := os.OpenFile(filepath.Join(dir, strconv.Itoa(port)), os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		t.Fatalf("port reservations: %v", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return false
	}
	t.Cleanup(func() { f.Close() })
	return true
}

// Config returns a valid configuration for node id on loopback with free
// ports and a data dir in the test's temporary directory, with small
// filters (10,000 files, 100 LRU entries).
func Config(t testing.TB, id string) node.Config {
	t.Helper()
	p := FreePorts(t, 4)
	cfg := node.DefaultConfig()
	cfg.NodeID = id
	cfg.DataDir = filepath.Join(t.TempDir(), id)
	cfg.BindAddr = "127.0.0.1"
	cfg.Ports = node.Ports{RPC: p[0], Raft: p[1], Serf: p[2], HTTP: p[3]}
	cfg.FilterCapacity = 10_000
	cfg.LRUEntries = 100
	// The G-HBA segment alone, as the papers have it; tests of the memory
	// budget's extra replicas set their own.
	cfg.FilterMemoryMB = 0
	return cfg
}

// SerfAddr returns the Serf address of cfg (for RetryJoin and Join).
func SerfAddr(cfg node.Config) string {
	return net.JoinHostPort(cfg.BindAddr, strconv.Itoa(cfg.Ports.Serf))
}

// RPCAddr returns the RPC address of cfg.
func RPCAddr(cfg node.Config) string {
	return net.JoinHostPort(cfg.BindAddr, strconv.Itoa(cfg.Ports.RPC))
}

// HTTPAddr returns the HTTP address of cfg.
func HTTPAddr(cfg node.Config) string {
	return net.JoinHostPort(cfg.BindAddr, strconv.Itoa(cfg.Ports.HTTP))
}

// Start creates and starts a node with Tuning's timers (opts, applied
// after, may replace them) and shuts it down at the end of the test if it
// still runs.
func Start(t testing.TB, cfg node.Config, log *slog.Logger, opts ...node.Option) *node.Node {
	t.Helper()
	n, err := node.New(cfg, log, append([]node.Option{node.WithTuning(Tuning())}, opts...)...)
	if err != nil {
		t.Fatalf("New(%s): %v", cfg.NodeID, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := n.Start(ctx); err != nil {
		t.Fatalf("Start(%s): %v", cfg.NodeID, err)
	}
	t.Cleanup(func() { Shutdown(t, n) })
	return n
}

// Shutdown shuts n down with a deadline, failing the test on error.
func Shutdown(t testing.TB, n *node.Node) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := n.Shutdown(ctx); err != nil {
		t.Errorf("Shutdown(%s): %v", n.ID(), err)
	}
}

// WaitLeader waits until exactly one of nodes reports itself its group's
// Raft leader and every other one names it, and returns it.
func WaitLeader(t testing.TB, d time.Duration, nodes ...*node.Node) *node.Node {
	t.Helper()
	var leader *node.Node
	rpctest.Eventually(t, d, "one leader", func() error {
		leader = nil
		for _, n := range nodes {
			if n.Status().RaftRole == "leader" {
				if leader != nil {
					return fmt.Errorf("two leaders: %s and %s", leader.ID(), n.ID())
				}
				leader = n
			}
		}
		if leader == nil {
			return fmt.Errorf("no leader among %d nodes", len(nodes))
		}
		for _, n := range nodes {
			if l := n.Status().Leader; l != leader.ID() {
				return fmt.Errorf("%s names leader %q, not %s", n.ID(), l, leader.ID())
			}
		}
		return nil
	})
	return leader
}

// WaitMembers waits until n's members list shows k alive nodes.
func WaitMembers(t testing.TB, d time.Duration, n *node.Node, k int) {
	t.Helper()
	rpctest.Eventually(t, d, fmt.Sprintf("%d alive members", k), func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		alive := 0
		for _, m := range n.Members(ctx) {
			if m.Status == "alive" {
				alive++
			}
		}
		if alive != k {
			return fmt.Errorf("%s sees %d alive members", n.ID(), alive)
		}
		return nil
	})
}
