package shard_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"path"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/ghba/ghba/node/nodetest"
	"github.com/ghba/ghba/node/raftmux"
	"github.com/ghba/ghba/node/shard"
	"github.com/ghba/ghba/node/store"
	"github.com/ghba/ghba/routing"
	"github.com/ghba/ghba/rpc"
	"github.com/ghba/ghba/rpc/rpctest"
	"go.uber.org/goleak"
)

// waitFor bounds every wait for a condition.
const waitFor = 20 * time.Second

// shardID is the shard every test replicates.
const shardID = "s1"

// geometry is the counting filter's geometry: large enough that no
// counter of a test's few thousand paths saturates, so a filter rebuilt
// from a store equals one maintained entry by entry.
var geometry = func() routing.Geometry {
	g, err := routing.NewGeometry(1<<14, 16, 0, routing.HashXX)
	if err != nil {
		panic(err)
	}
	return g
}()

// noLeaks makes t fail if it leaves a goroutine behind. Call it first: its
// check then runs after every other cleanup. A goroutine waiting for a
// raft future that raft dropped on shutdown is not a leak of the replica's
// (see Replica.wait).
func noLeaks(t testing.TB) {
	t.Helper()
	opts := []goleak.Option{goleak.IgnoreCurrent(), goleak.IgnoreTopFunction("github.com/hashicorp/raft.(*deferError).Error")}
	t.Cleanup(func() { goleak.VerifyNone(t, opts...) })
}

// testTuning returns the timers of the tests: those of node/nodetest,
// short but not so short that a leader steps down whenever the race
// detector stalls a goroutine on 2 cores.
func testTuning() shard.Tuning {
	tun := shard.DefaultTuning()
	tun.Heartbeat, tun.Election, tun.LeaderLease, tun.Commit = 500*time.Millisecond, 500*time.Millisecond, 300*time.Millisecond, 5*time.Millisecond
	tun.ApplyTimeout = 5 * time.Second
	return tun
}

// node is a test node: a raft multiplexer on a loopback port, serving the
// node's replica of the shard.
type node struct {
	id, addr string
	mux      *raftmux.Mux
	served   chan error
	stopOnce sync.Once
}

// startNode starts node id's multiplexer; it stops when t ends. Its port
// is outside the kernel's ephemeral range, so that it stays free for a
// restart (see nodetest.FreePorts).
func startNode(t testing.TB, id string) *node {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(nodetest.FreePorts(t, 1)[0])))
	if err != nil {
		t.Fatal(err)
	}
	n := &node{id: id, addr: ln.Addr().String(), served: make(chan error, 1)}
	n.mux = raftmux.New(ln, nil, raftmux.Options{Logger: rpctest.Logger(t, "mux", id)})
	go func(m *raftmux.Mux, served chan error) { served <- m.Serve(context.Background()) }(n.mux, n.served)
	t.Cleanup(n.stop)
	return n
}

// stop closes the node's multiplexer: every replica on it is cut off.
func (n *node) stop() {
	n.stopOnce.Do(func() {
		_ = n.mux.Close()
		<-n.served
	})
}

// restart stops the node's multiplexer and starts a new one on the same
// address (its replica must be reopened).
func (n *node) restart(t testing.TB) {
	t.Helper()
	n.stop()
	var ln net.Listener
	rpctest.Eventually(t, waitFor, "listen on "+n.addr, func() (err error) {
		ln, err = net.Listen("tcp", n.addr)
		return err
	})
	n.mux = raftmux.New(ln, nil, raftmux.Options{Logger: rpctest.Logger(t, "mux", n.id)})
	n.served, n.stopOnce = make(chan error, 1), sync.Once{}
	go func(m *raftmux.Mux, served chan error) { served <- m.Serve(context.Background()) }(n.mux, n.served)
}

// replica is a node's replica of the shard, and what the test saw of it.
type replica struct {
	c    *cluster
	node *node
	dir  string
	rep  *shard.Replica

	mu     sync.Mutex
	fatals []error // OnFatal calls
	leads  []bool  // LeaderCh notifications

	stopWatch chan struct{}
	watched   chan struct{}
	closed    bool
}

func (r *replica) id() string { return r.node.id }

// notes returns the leadership notifications r received.
func (r *replica) notes() []bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.leads)
}

// fatal returns the errors OnFatal was called with.
func (r *replica) fatal() []error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.fatals)
}

// cluster is a shard's replicas, one per node.
type cluster struct {
	// reps are the shard's members (open or not).
	t     testing.TB
	tune  shard.Tuning
	store store.Options
	logs  string // Options.LogStore of new replicas
	reps  []*replica
}

// options of newCluster.
type clusterOpt func(*cluster)

// withTuning adjusts the replicas' timers.
func withTuning(fn func(*shard.Tuning)) clusterOpt { return func(c *cluster) { fn(&c.tune) } }

// withStore adjusts the replicas' store options.
func withStore(fn func(*store.Options)) clusterOpt { return func(c *cluster) { fn(&c.store) } }

// withLogStore sets the log store of new replicas.
func withLogStore(kind string) clusterOpt { return func(c *cluster) { c.logs = kind } }

// newCluster starts n nodes, bootstraps the shard on the first and adds
// the others as voters, each first as a non-voter.
func newCluster(t testing.TB, n int, opts ...clusterOpt) *cluster {
	t.Helper()
	c := &cluster{t: t, tune: testTuning(), store: store.Options{MemTableSize: 8 << 20, BlockCacheSize: 1 << 20}}
	for _, o := range opts {
		o(c)
	}
	first := c.newReplica(startNode(t, "n1"))
	if err := first.rep.Bootstrap(); err != nil {
		t.Fatal(err)
	}
	c.reps = append(c.reps, first)
	for i := 2; i <= n; i++ {
		c.add(startNode(t, fmt.Sprintf("n%d", i)))
	}
	c.waitLeader()
	return c
}

// add opens an empty replica on nd and adds it to the shard, as a
// non-voter first, then as a voter.
func (c *cluster) add(nd *node) *replica {
	c.t.Helper()
	r := c.newReplica(nd)
	c.join(r, true)
	c.reps = append(c.reps, r)
	return r
}

// newReplica opens an empty replica of the shard on nd (not yet a member).
func (c *cluster) newReplica(nd *node) *replica {
	c.t.Helper()
	r := &replica{c: c, node: nd, dir: c.t.TempDir()}
	r.open()
	return r
}

// open opens r from its directory.
func (r *replica) open() {
	t := r.c.t
	t.Helper()
	layer, err := r.node.mux.Layer("shard/" + shardID)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	r.rep, err = shard.Open(ctx, shard.Options{
		Shard: shardID, NodeID: r.node.id, Dir: r.dir, LogStore: r.c.logs,
		Transport: raftmux.NewTransport(layer, rpctest.HCLogger(t, r.node.id+"/transport")),
		Geometry:  geometry, Logger: rpctest.Logger(t, "node", r.node.id),
		HCLogger: rpctest.HCLogger(t, r.node.id), Tuning: r.c.tune, Store: r.c.store,
		OnFatal: func(err error) {
			r.mu.Lock()
			defer r.mu.Unlock()
			r.fatals = append(r.fatals, err)
		},
	})
	if err != nil {
		t.Fatalf("open replica on %s: %v", r.node.id, err)
	}
	r.closed = false
	// Raft blocks when its leadership notifications are not read.
	r.stopWatch, r.watched = make(chan struct{}), make(chan struct{})
	r.mu.Lock()
	r.leads = nil
	r.mu.Unlock()
	go func(ch <-chan bool, stop, done chan struct{}) {
		defer close(done)
		for {
			select {
			case l := <-ch:
				r.mu.Lock()
				r.leads = append(r.leads, l)
				r.mu.Unlock()
			case <-stop:
				return
			}
		}
	}(r.rep.LeaderCh(), r.stopWatch, r.watched)
	t.Cleanup(r.close)
}

// close closes r (a crash as far as the other replicas can tell).
func (r *replica) close() {
	if r.closed {
		return
	}
	r.closed = true
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	if err := r.rep.Close(ctx); err != nil {
		r.c.t.Errorf("close replica on %s: %v", r.node.id, err)
	}
	close(r.stopWatch)
	<-r.watched
}

// reopen closes r and opens it again from its directory.
func (r *replica) reopen() {
	r.c.t.Helper()
	r.close()
	r.open()
}

// others returns the members but r.
func (c *cluster) others(r *replica) []*replica {
	var out []*replica
	for _, o := range c.reps {
		if o != r {
			out = append(out, o)
		}
	}
	return out
}

// open returns the replicas that are open.
func (c *cluster) open() []*replica {
	var out []*replica
	for _, r := range c.reps {
		if !r.closed {
			out = append(out, r)
		}
	}
	return out
}

// join adds r to the shard through the leader of c.reps: as a non-voter
// first when nonvoter, then as a voter.
func (c *cluster) join(r *replica, nonvoter bool) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	l := c.waitLeader()
	if nonvoter {
		if err := l.rep.AddNonvoter(ctx, r.id(), r.node.addr); err != nil {
			c.t.Fatalf("add %s as a non-voter: %v", r.id(), err)
		}
	}
	if err := l.rep.AddVoter(ctx, r.id(), r.node.addr); err != nil {
		c.t.Fatalf("add %s as a voter: %v", r.id(), err)
	}
}

// waitLeader waits until exactly one of rs (default: the open replicas)
// leads and every other one knows it, and returns it.
func (c *cluster) waitLeader(rs ...*replica) *replica {
	c.t.Helper()
	if len(rs) == 0 {
		rs = c.open()
	}
	var leader *replica
	rpctest.Eventually(c.t, waitFor, "a leader", func() error {
		leader = nil
		for _, r := range rs {
			if r.rep.IsLeader() {
				if leader != nil {
					return fmt.Errorf("two leaders: %s and %s", leader.id(), r.id())
				}
				leader = r
			}
		}
		if leader == nil {
			return errors.New("no leader")
		}
		for _, r := range rs {
			if id, addr := r.rep.Leader(); id != leader.id() || addr != leader.node.addr {
				return fmt.Errorf("%s sees leader %q at %q", r.id(), id, addr)
			}
		}
		return nil
	})
	return leader
}

// apply commits b through the shard's leader, following leadership
// changes, and returns the entry's result. An outcome it cannot know
// fails the test.
func (c *cluster) apply(b *store.Batch) error {
	c.t.Helper()
	var res error
	rpctest.Eventually(c.t, waitFor, "applying a batch", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), waitFor)
		defer cancel()
		res = c.waitLeader().rep.Apply(ctx, b)
		switch {
		case errors.Is(res, rpc.ErrNotLeader):
			return res
		case errors.Is(res, rpc.ErrOutcomeUnknown):
			c.t.Fatalf("apply: %v", res)
		}
		return nil
	})
	return res
}

// mustApply commits every batch, which must succeed.
func (c *cluster) mustApply(bs ...*store.Batch) {
	c.t.Helper()
	for _, b := range bs {
		if err := c.apply(b); err != nil {
			c.t.Fatalf("apply: %v", err)
		}
	}
}

// ---- batches ----

// create creates file p (which must not exist) and its entry.
func create(p string) *store.Batch {
	var b store.Batch
	b.RequireInodeAbsent(p)
	b.PutInode(p, store.Inode{Type: store.TypeFile, Mode: 0o644, Nlink: 1, Size: int64(len(p)), Mtime: 1e18, Version: 1})
	b.PutEntry(path.Dir(p), store.Entry{Name: path.Base(p), Type: store.TypeFile, Home: shardID})
	return &b
}

// mkdir creates directory p (which must not exist) and its entry.
func mkdir(p string) *store.Batch {
	var b store.Batch
	b.RequireInodeAbsent(p)
	b.PutInode(p, store.Inode{Type: store.TypeDir, Mode: 0o755, Nlink: 2, Mtime: 1e18, Version: 1})
	if p != "/" {
		b.PutEntry(path.Dir(p), store.Entry{Name: path.Base(p), Type: store.TypeDir, Home: shardID})
	}
	return &b
}

// remove removes file p (which must exist) and its entry.
func remove(p string) *store.Batch {
	var b store.Batch
	b.RequireInodeExists(p)
	b.DeleteInode(p)
	b.DeleteEntry(path.Dir(p), path.Base(p))
	return &b
}

// ---- state ----

// state is what a replica holds: its store's contents and its filter.
type state struct {
	Inodes  map[string]store.Inode
	Entries map[string][]store.Entry // by directory
	Counts  store.InodeCounts
	Rekeys  int
	Applied uint64
	Filter  []byte
}

// stateOf reads r's state, and checks that its filter is the one its
// inodes make.
func stateOf(r *replica) (state, error) {
	ctx := context.Background()
	st := r.rep.Store()
	s := state{Inodes: map[string]store.Inode{}, Entries: map[string][]store.Entry{}}
	dirs := map[string]bool{"/": true}
	err := st.ScanInodes(ctx, func(p string, ino store.Inode) error {
		s.Inodes[p] = ino
		dirs[path.Dir(p)] = true
		if ino.Type == store.TypeDir {
			dirs[p] = true
		}
		return nil
	})
	if err != nil {
		return s, err
	}
	for d := range dirs {
		es, _, err := st.ReadDir(ctx, d, "", 0)
		if err != nil {
			return s, err
		}
		if len(es) > 0 {
			s.Entries[d] = es
		}
	}
	if s.Counts, err = st.CountInodes(ctx); err != nil {
		return s, err
	}
	rks, err := st.PendingRekeys(ctx)
	if err != nil {
		return s, err
	}
	s.Rekeys = len(rks)
	if s.Applied, err = st.AppliedIndex(ctx); err != nil {
		return s, err
	}
	r.rep.Filter(func(f *routing.CountingFilter) { s.Filter, err = f.MarshalBinary() })
	if err != nil {
		return s, err
	}
	want := routing.NewCountingFilter(geometry)
	for p := range s.Inodes {
		want.Add(p)
	}
	if wb, _ := want.MarshalBinary(); !bytes.Equal(wb, s.Filter) {
		return s, fmt.Errorf("%s: the filter is not the one of its %d inodes", r.id(), len(s.Inodes))
	}
	for p := range s.Inodes {
		if !r.rep.TestKey(geometry.Key(p)) {
			return s, fmt.Errorf("%s: TestKey(%q) is false", r.id(), p)
		}
	}
	return s, nil
}

// diff describes how b differs from a ("" if it does not).
func (a state) diff(b state) string {
	switch {
	case !reflect.DeepEqual(a.Inodes, b.Inodes):
		return fmt.Sprintf("inodes differ (%d and %d): %s", len(a.Inodes), len(b.Inodes), keyDiff(a.Inodes, b.Inodes))
	case !reflect.DeepEqual(a.Entries, b.Entries):
		return "entries differ"
	case a.Counts != b.Counts:
		return fmt.Sprintf("counts %+v and %+v", a.Counts, b.Counts)
	case a.Rekeys != b.Rekeys:
		return fmt.Sprintf("%d and %d rekeys pending", a.Rekeys, b.Rekeys)
	case a.Applied != b.Applied:
		return fmt.Sprintf("applied index %d and %d", a.Applied, b.Applied)
	case !bytes.Equal(a.Filter, b.Filter):
		return "filters differ"
	}
	return ""
}

// keyDiff names a few keys of one map that the other lacks.
func keyDiff[V any](a, b map[string]V) string {
	var only []string
	for k := range a {
		if _, ok := b[k]; !ok {
			only = append(only, "-"+k)
		}
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			only = append(only, "+"+k)
		}
	}
	slices.Sort(only)
	return fmt.Sprint(only[:min(len(only), 10)])
}

// converged waits until every replica of rs (default: the open ones)
// holds the same state, and returns it.
func (c *cluster) converged(rs ...*replica) state {
	c.t.Helper()
	if len(rs) == 0 {
		rs = c.open()
	}
	var first state
	rpctest.Eventually(c.t, waitFor, "replicas converged", func() error {
		var err error
		if first, err = stateOf(rs[0]); err != nil {
			return err
		}
		for _, r := range rs[1:] {
			s, err := stateOf(r)
			if err != nil {
				return err
			}
			if d := first.diff(s); d != "" {
				return fmt.Errorf("%s and %s: %s", rs[0].id(), r.id(), d)
			}
		}
		return nil
	})
	return first
}

// unchanged waits until the replicas converge and checks that their state
// is before's but for the applied index, which moved on if advanced (the
// entry that should have changed nothing was applied).
func (c *cluster) unchanged(what string, before state, advanced bool) {
	c.t.Helper()
	after := c.converged()
	if advanced && after.Applied <= before.Applied {
		c.t.Errorf("%s: not applied as an entry (applied index %d, %d before)", what, after.Applied, before.Applied)
	}
	after.Applied = before.Applied
	if d := before.diff(after); d != "" {
		c.t.Errorf("%s changed the state: %s", what, d)
	}
}

// openStore opens the store of the closed replica in dir; the caller
// closes it.
func openStore(t testing.TB, dir string, opts store.Options) *store.Store {
	t.Helper()
	opts.Dir, opts.NoSyncWrites = filepath.Join(dir, "meta"), true
	st, err := store.Open(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// storeApplied returns the applied index of the store of the closed
// replica in dir.
func storeApplied(t testing.TB, dir string, opts store.Options) uint64 {
	t.Helper()
	st := openStore(t, dir, opts)
	defer st.Close()
	applied, err := st.AppliedIndex(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return applied
}

// ctxFor returns a context that ends after d (or when t ends).
func ctxFor(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
