package fsm

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ghba/ghba/rpc/rpctest"
	"github.com/hashicorp/raft"
)

// raftNode is one server of an in-process Raft group over loopback TCP.
type raftNode struct {
	id       string
	addr     raft.ServerAddress
	fsm      *FSM
	restores *atomic.Int64 // Restored events seen by fsm
	r        *raft.Raft
	trans    *raft.NetworkTransport
	store    *raft.InmemStore // log and stable store, kept across restarts
	snaps    raft.SnapshotStore
}

// fastConfig is a raft config with test timeouts.
func fastConfig(id string) *raft.Config {
	c := raft.DefaultConfig()
	c.LocalID = raft.ServerID(id)
	c.HeartbeatTimeout = 100 * time.Millisecond
	c.ElectionTimeout = 100 * time.Millisecond
	c.LeaderLeaseTimeout = 50 * time.Millisecond
	c.CommitTimeout = 5 * time.Millisecond
	c.SnapshotThreshold = 1 << 20 // snapshots are taken explicitly
	c.SnapshotInterval = time.Hour
	c.TrailingLogs = 4
	c.LogOutput = io.Discard
	c.LogLevel = "ERROR"
	return c
}

// start (re)starts n's raft with a fresh FSM on addr ("127.0.0.1:0" for a
// new port), keeping its stores.
func (n *raftNode) start(t *testing.T, addr string) {
	t.Helper()
	var err error
	for try := 0; ; try++ { // rebinding a just-closed port may need a moment
		n.trans, err = raft.NewTCPTransport(addr, nil, 3, 2*time.Second, io.Discard)
		if err == nil || try == 50 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("%s: transport: %v", n.id, err)
	}
	n.addr = n.trans.LocalAddr()
	n.restores = new(atomic.Int64)
	restores := n.restores
	n.fsm = New(Options{OnChange: func(ev Event) {
		if ev.Restored {
			restores.Add(1)
		}
	}})
	n.r, err = raft.NewRaft(fastConfig(n.id), n.fsm, n.store, n.store, n.snaps, n.trans)
	if err != nil {
		t.Fatalf("%s: raft: %v", n.id, err)
	}
}

// stop shuts n's raft and transport down.
func (n *raftNode) stop(t *testing.T) {
	t.Helper()
	if n.r == nil {
		return
	}
	if err := n.r.Shutdown().Error(); err != nil {
		t.Errorf("%s: shutdown: %v", n.id, err)
	}
	n.trans.CloseStreams()
	if err := n.trans.Close(); err != nil {
		t.Errorf("%s: transport close: %v", n.id, err)
	}
	n.r = nil
}

func newRaftNode(t *testing.T, id string) *raftNode {
	t.Helper()
	snaps, err := raft.NewFileSnapshotStore(t.TempDir(), 2, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	n := &raftNode{id: id, store: raft.NewInmemStore(), snaps: snaps}
	n.start(t, "127.0.0.1:0")
	return n
}

// waitTime bounds every wait for the raft group.
const waitTime = 15 * time.Second

// leaderOf waits for one of nodes to be leader and returns it.
func leaderOf(t *testing.T, nodes []*raftNode) *raftNode {
	t.Helper()
	var leader *raftNode
	rpctest.Eventually(t, waitTime, "a leader", func() error {
		for _, n := range nodes {
			if n.r != nil && n.r.State() == raft.Leader {
				leader = n
				return nil
			}
		}
		return errors.New("no server is leader")
	})
	return leader
}

// applyOn applies data through the current leader, retrying on leadership
// changes, and returns the result.
func applyOn(t *testing.T, nodes []*raftNode, data []byte) (*ApplyResult, uint64) {
	t.Helper()
	for try := 0; try < 20; try++ {
		fut := leaderOf(t, nodes).r.Apply(data, 5*time.Second)
		if err := fut.Error(); err != nil {
			if errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipLost) {
				continue
			}
			t.Fatalf("apply: %v", err)
		}
		r, _ := Result(fut.Response())
		if r == nil {
			t.Fatalf("response %T", fut.Response())
		}
		return r, fut.Index()
	}
	t.Fatal("no stable leader")
	return nil, 0
}

// converge waits until every node applied index and all states are equal.
func converge(t *testing.T, nodes []*raftNode, index uint64) {
	t.Helper()
	rpctest.Eventually(t, waitTime, fmt.Sprintf("all FSMs at index %d", index), func() error {
		for _, n := range nodes {
			if i := n.fsm.AppliedIndex(); i < index {
				return fmt.Errorf("%s at index %d", n.id, i)
			}
		}
		return nil
	})
	ref := stateBytes(t, nodes[0].fsm)
	for _, n := range nodes[1:] {
		if !bytes.Equal(ref, stateBytes(t, n.fsm)) {
			t.Fatalf("%s differs from %s:\n%s\nvs\n%s", n.id, nodes[0].id, textDump(n.fsm), textDump(nodes[0].fsm))
		}
	}
	for _, n := range nodes {
		checkInvariants(t, n.fsm)
	}
}

func TestRaftGroup(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a raft cluster")
	}
	baseGoroutines := runtime.NumGoroutine()
	var nodes []*raftNode
	defer func() {
		for _, n := range nodes {
			n.stop(t)
		}
	}()
	for i := range 3 {
		nodes = append(nodes, newRaftNode(t, fmt.Sprintf("s%d", i)))
	}
	var servers []raft.Server
	for _, n := range nodes {
		servers = append(servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(n.id), Address: n.addr})
	}
	for _, n := range nodes {
		if err := n.r.BootstrapCluster(raft.Configuration{Servers: servers}).Error(); err != nil {
			t.Fatalf("bootstrap %s: %v", n.id, err)
		}
	}

	applyOn(t, nodes, EncodeBootstrap(testConfig("g1", 4)))
	for _, n := range nodes {
		m := mem(n.id)
		m.RaftAddr = string(n.addr)
		applyOn(t, nodes, EncodeAddMember(m))
	}
	r, idx := applyOn(t, nodes, EncodeSetOrigins(ids("x", 40)))
	if r.Err != nil || len(r.Moves) != 40 {
		t.Fatalf("set origins: %v, %d moves", r.Err, len(r.Moves))
	}
	// A refused command is replicated too and leaves every FSM unchanged.
	if r, _ := applyOn(t, nodes, EncodeAddOrigins("s1")); !errors.Is(r.Err, ErrOriginIsMember) {
		t.Fatalf("origin that is a member: %v", r.Err)
	}
	converge(t, nodes, idx)

	// Snapshot on the leader, then enough entries to compact the log past
	// the snapshot: a new server can only catch up from the snapshot.
	leader := leaderOf(t, nodes)
	if err := leader.r.Snapshot().Error(); err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	for i := range 10 {
		applyOn(t, nodes, EncodeAddOrigins(fmt.Sprintf("y%d", i)))
	}
	if err := leader.r.Snapshot().Error(); err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	if first, _ := leader.store.FirstIndex(); first <= 1 {
		t.Fatalf("log not compacted (first index %d)", first)
	}

	n4 := newRaftNode(t, "s3")
	nodes = append(nodes, n4)
	if err := leader.r.AddVoter(raft.ServerID(n4.id), n4.addr, 0, 5*time.Second).Error(); err != nil {
		t.Fatalf("add voter: %v", err)
	}
	r, idx = applyOn(t, nodes, EncodeAddMember(mem(n4.id)))
	if r.Err != nil || len(r.Moves) != 50/4 {
		t.Fatalf("add s3: %v, moves %v", r.Err, r.Moves)
	}
	converge(t, nodes, idx)
	if n4.restores.Load() == 0 {
		t.Fatal("the new server did not restore a snapshot")
	}

	// Restart a follower from its own snapshot and log.
	var f *raftNode
	for _, n := range nodes {
		if n.r.State() == raft.Follower {
			f = n
			break
		}
	}
	if err := f.r.Snapshot().Error(); err != nil {
		t.Fatalf("follower snapshot: %v", err)
	}
	applyOn(t, nodes, EncodeSetStatus("s0", StatusFailed))
	f.stop(t)
	applyOn(t, nodes, EncodeRemoveOrigins("y1", "y2"))
	f.start(t, string(f.addr))
	r, idx = applyOn(t, nodes, EncodeSplit([]string{"s3"}, "g2"))
	if r.Err != nil {
		t.Fatalf("split: %v", r.Err)
	}
	converge(t, nodes, idx)
	if f.restores.Load() == 0 {
		t.Fatal("the restarted follower did not restore its snapshot")
	}
	if got := nodes[0].fsm.ReplicasMigrated(); got == 0 {
		t.Fatal("no replicas migrated")
	}

	for _, n := range nodes {
		n.stop(t)
	}
	rpctest.Eventually(t, waitTime, "raft goroutines to exit", func() error {
		if n := runtime.NumGoroutine(); n > baseGoroutines {
			return fmt.Errorf("%d goroutines, %d before", n, baseGoroutines)
		}
		return nil
	})
}
