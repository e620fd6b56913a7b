package raftmux

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ghba/ghba/rpc/rpctest"
	"github.com/hashicorp/raft"
)

// memFSM is a state machine that keeps the distinct entries it applied, in
// order: an entry applied again is ignored, since a test retries an Apply
// whose outcome it does not know (leadership lost), and the first attempt
// may have committed.
type memFSM struct {
	mu      sync.Mutex
	entries []string
}

func (f *memFSM) Apply(l *raft.Log) any {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !slices.Contains(f.entries, string(l.Data)) {
		f.entries = append(f.entries, string(l.Data))
	}
	return len(f.entries)
}

func (f *memFSM) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return memSnapshot(slices.Clone(f.entries)), nil
}

func (f *memFSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	var entries []string
	if err := json.NewDecoder(rc).Decode(&entries); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.entries = entries
	return nil
}

func (f *memFSM) applied() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.entries)
}

type memSnapshot []string

func (s memSnapshot) Persist(sink raft.SnapshotSink) error {
	if err := json.NewEncoder(sink).Encode([]string(s)); err != nil {
		sink.Cancel()
		return err
	}
	return sink.Close()
}

func (memSnapshot) Release() {}

// raftNode is one "node": a mux and the Raft groups it serves.
type raftNode struct {
	id  string
	mux *Mux
}

// replica is one node's member of one Raft group, over the node's mux.
type replica struct {
	node   *raftNode
	id     string // the group's id
	layer  *Layer
	trans  *Transport
	raft   *raft.Raft
	fsm    *memFSM
	logs   *raft.InmemStore // kept across a reopen
	snaps  *raft.InmemSnapshotStore
	closed bool
}

// openReplica starts the replica of group id on n over a new layer, with
// the stores of old (a reopened replica) or new ones bootstrapped with
// servers. It stops when t ends.
func openReplica(t *testing.T, n *raftNode, id string, servers []raft.Server, old *replica) *replica {
	t.Helper()
	return openReplicaOn(t, n, mustLayer(t, n.mux, id), servers, old)
}

// openReplicaOn is openReplica over the layer l, registered on n's mux.
func openReplicaOn(t *testing.T, n *raftNode, l *Layer, servers []raft.Server, old *replica) *replica {
	t.Helper()
	id := l.ID()
	r := &replica{node: n, id: id, fsm: new(memFSM), layer: l}
	if old != nil {
		r.logs, r.snaps = old.logs, old.snaps
	} else {
		r.logs, r.snaps = raft.NewInmemStore(), raft.NewInmemSnapshotStore()
	}
	name := n.id + "/" + id
	r.trans = NewTransport(r.layer, rpctest.HCLogger(t, name+"/transport"))
	conf := raft.DefaultConfig()
	conf.LocalID = raft.ServerID(n.id)
	conf.Logger = rpctest.HCLogger(t, name)
	conf.HeartbeatTimeout = 300 * time.Millisecond
	conf.ElectionTimeout = 300 * time.Millisecond
	conf.LeaderLeaseTimeout = 150 * time.Millisecond
	conf.CommitTimeout = 10 * time.Millisecond
	if old == nil {
		if err := raft.BootstrapCluster(conf, r.logs, r.logs, r.snaps, r.trans,
			raft.Configuration{Servers: servers}); err != nil {
			t.Fatal(err)
		}
	}
	rf, err := raft.NewRaft(conf, r.fsm, r.logs, r.logs, r.snaps, r.trans)
	if err != nil {
		r.trans.Close()
		t.Fatal(err)
	}
	r.raft = rf
	t.Cleanup(r.close)
	return r
}

// close shuts the replica's Raft down, then its transport (which closes
// its layer).
func (r *replica) close() {
	if r.closed {
		return
	}
	r.closed = true
	r.raft.Shutdown().Error()
	r.trans.Close()
}

// waitLeader waits until exactly one of rs leads and every other knows it,
// and returns it.
func waitLeader(t *testing.T, rs []*replica) *replica {
	t.Helper()
	var leader *replica
	rpctest.Eventually(t, waitFor, "a leader of "+rs[0].id, func() error {
		leader = nil
		for _, r := range rs {
			if r.raft.State() == raft.Leader {
				if leader != nil {
					return fmt.Errorf("two leaders: %s and %s", leader.node.id, r.node.id)
				}
				leader = r
			}
		}
		if leader == nil {
			return fmt.Errorf("no leader")
		}
		for _, r := range rs {
			if _, id := r.raft.LeaderWithID(); string(id) != leader.node.id {
				return fmt.Errorf("%s sees leader %q, not %s", r.node.id, id, leader.node.id)
			}
		}
		return nil
	})
	return leader
}

// commit applies n entries named after the group through its leader among
// rs, numbered from first.
func commit(t *testing.T, rs []*replica, first, n int) {
	t.Helper()
	for i := first; i < first+n; i++ {
		// A leader can lose its leadership under load: retry on a new one.
		rpctest.Eventually(t, waitFor, "committing an entry", func() error {
			l := waitLeader(t, rs)
			return l.raft.Apply(fmt.Appendf(nil, "%s-%d", l.id, i), waitFor).Error()
		})
	}
}

// waitApplied waits until every replica of rs has applied exactly the
// entries 0..n-1 of its group.
func waitApplied(t *testing.T, rs []*replica, n int) {
	t.Helper()
	want := make([]string, n)
	for i := range want {
		want[i] = fmt.Sprintf("%s-%d", rs[0].id, i)
	}
	rpctest.Eventually(t, waitFor, fmt.Sprintf("%d entries applied in %s", n, rs[0].id), func() error {
		for _, r := range rs {
			if got := r.fsm.applied(); !slices.Equal(got, want) {
				return fmt.Errorf("%s applied %q", r.node.id, got)
			}
		}
		return nil
	})
}

// TestRaftGroupsOnOnePort runs three Raft groups on three nodes, each node
// serving all its groups on one port: every group elects a leader and
// commits; closing one group on one node leaves the others undisturbed; the
// closed group reopens under the same id and catches up.
func TestRaftGroupsOnOnePort(t *testing.T) {
	noLeaks(t)
	groupIDs := []string{"group", "shard/n1", "shard/n2"}
	nodes := make([]*raftNode, 3)
	servers := make([]raft.Server, len(nodes))
	for i := range nodes {
		m, _ := startMux(t, Options{})
		nodes[i] = &raftNode{id: fmt.Sprintf("n%d", i+1), mux: m}
		servers[i] = raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(nodes[i].id), Address: addrOf(m)}
	}
	groups := make(map[string][]*replica)
	for _, id := range groupIDs {
		for _, n := range nodes {
			groups[id] = append(groups[id], openReplica(t, n, id, servers, nil))
		}
	}

	for _, id := range groupIDs {
		waitLeader(t, groups[id])
		commit(t, groups[id], 0, 10)
	}
	for _, id := range groupIDs {
		waitApplied(t, groups[id], 10)
	}
	// Every follower took its leader's connections on its one port.
	for _, id := range groupIDs {
		leader := waitLeader(t, groups[id])
		for _, r := range groups[id] {
			if st := r.node.mux.Stats(); r != leader && st.Accepted[id] == 0 {
				t.Errorf("%s, a follower of %s, accepted no connection for it: %+v", r.node.id, id, st)
			}
		}
	}
	for _, n := range nodes {
		if st := n.mux.Stats(); st.BadHeader+st.TimedOut+st.UnknownID+st.Dropped != 0 {
			t.Errorf("%s rejected connections: %+v", n.id, st)
		}
	}

	// Close shard/n1 on n2: the other groups go on with all three
	// replicas, shard/n1 with the two left.
	n2 := nodes[1]
	terms := make(map[string]string)
	for _, id := range []string{"group", "shard/n2"} {
		terms[id] = waitLeader(t, groups[id]).raft.Stats()["term"]
	}
	closed := groups["shard/n1"][1]
	closed.close()
	if _, err := closed.layer.Accept(); err == nil {
		t.Fatal("Accept on the closed group's layer succeeded")
	}
	for _, id := range []string{"group", "shard/n2"} {
		commit(t, groups[id], 10, 5)
		waitApplied(t, groups[id], 15)
		// No election either (a loaded machine could cause one: this only
		// reports it).
		if term := waitLeader(t, groups[id]).raft.Stats()["term"]; term != terms[id] {
			t.Logf("%s: term %s after closing shard/n1 on n2, was %s", id, term, terms[id])
		}
	}
	rest := []*replica{groups["shard/n1"][0], groups["shard/n1"][2]}
	commit(t, rest, 10, 5)
	waitApplied(t, rest, 15)
	// The peers' attempts to reach n2's closed replica are refused by id.
	statsEventually(t, n2.mux, "connections for the closed group refused", func(s Stats) error {
		if s.UnknownID == 0 {
			return fmt.Errorf("none yet: %+v", s)
		}
		return nil
	})

	// Reopen it under the same id, with its stores: it catches up.
	reopened := openReplica(t, n2, "shard/n1", servers, closed)
	groups["shard/n1"][1] = reopened
	commit(t, groups["shard/n1"], 15, 1)
	waitApplied(t, groups["shard/n1"], 16)

	// Everything stops: the replicas (cleanups), then the muxes; then
	// noLeaks checks that no goroutine is left.
}

// TestScopeRefusesAnotherIncarnation runs a group of three nodes whose
// layer is scoped by the group's incarnation. One follower leaves it the
// way a node switching groups does (its Raft closed, a fresh one
// bootstrapped as a new group under the same layer id), before the old
// group removed it from its configuration: the old leader's heartbeats,
// which would make the new Raft step down and follow the old group, are
// refused, and both groups go on committing.
func TestScopeRefusesAnotherIncarnation(t *testing.T) {
	noLeaks(t)
	type scoped struct {
		node  *raftNode
		scope atomic.Pointer[string] // the incarnation the node serves
	}
	nodes := make([]*scoped, 3)
	servers := make([]raft.Server, len(nodes))
	for i := range nodes {
		m, _ := startMux(t, Options{})
		s := &scoped{node: &raftNode{id: fmt.Sprintf("n%d", i+1), mux: m}}
		old := "old"
		s.scope.Store(&old)
		nodes[i] = s
		servers[i] = raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(s.node.id), Address: addrOf(m)}
	}
	open := func(s *scoped, servers []raft.Server) *replica {
		l, err := s.node.mux.ScopedLayer("group", Scope{
			Current: func() string { return *s.scope.Load() },
			Accepts: func(sc string) bool { return sc == *s.scope.Load() },
		})
		if err != nil {
			t.Fatal(err)
		}
		return openReplicaOn(t, s.node, l, servers, nil)
	}
	var group []*replica
	for _, s := range nodes {
		group = append(group, open(s, servers))
	}
	leader := waitLeader(t, group)
	commit(t, group, 0, 5)
	waitApplied(t, group, 5)

	// A follower switches: its Raft closes, its scope becomes the new
	// incarnation's, a fresh Raft bootstraps a group of itself.
	var mover *scoped
	var rest []*replica
	for i, r := range group {
		if r != leader && mover == nil {
			mover = nodes[i]
			r.close()
			continue
		}
		rest = append(rest, r)
	}
	next := "new"
	mover.scope.Store(&next)
	fresh := []*replica{open(mover, []raft.Server{{Suffrage: raft.Voter,
		ID: raft.ServerID(mover.node.id), Address: addrOf(mover.node.mux)}})}
	waitLeader(t, fresh)

	// The old leader still counts the mover in and keeps dialing it.
	statsEventually(t, mover.node.mux, "the old group's connections refused", func(s Stats) error {
		if s.Refused < 2 {
			return fmt.Errorf("refused %d, want 2 or more: %+v", s.Refused, s)
		}
		return nil
	})
	commit(t, fresh, 0, 5)
	waitApplied(t, fresh, 5)
	if l := waitLeader(t, fresh); l.raft.State() != raft.Leader {
		t.Fatalf("the new group's only member is %s", l.raft.State())
	}
	if cfg := fresh[0].raft.GetConfiguration(); cfg.Error() != nil || len(cfg.Configuration().Servers) != 1 {
		t.Fatalf("the new group's configuration: %+v, %v", cfg.Configuration(), cfg.Error())
	}
	commit(t, rest, 5, 5)
	waitApplied(t, rest, 10)
}
