package node_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/ghba/ghba/node"
	"github.com/ghba/ghba/node/nodetest"
	"github.com/ghba/ghba/node/store"
	"github.com/ghba/ghba/rpc"
	"github.com/ghba/ghba/rpc/client"
	"github.com/ghba/ghba/rpc/rpctest"
)

// runLoad creates and stats files through cl until halt is called (or the
// test ends); every failure is reported.
func runLoad(t *testing.T, cl *client.Client, done *atomic.Int64) (halt func()) {
	ctx := context.Background()
	return rpctest.Loop(t, 4, func(w, i int) {
		p := fmt.Sprintf("/load/w%d-%d", w, i)
		cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		_, err := cl.Create(cctx, &rpc.CreateRequest{Path: p, Mode: 0o644})
		if err == nil {
			_, err = cl.Stat(cctx, p)
		}
		cancel()
		if err != nil {
			t.Errorf("%s: %v", p, err)
			return
		}
		done.Add(1)
	})
}

// TestStopHandsLeadershipsOver stops a node gracefully (Node.Stop, what
// SIGTERM does) under load: it hands every shard it leads to another
// replica before it closes, and no request fails (docs/design.md, "Node
// lifecycle").
func TestStopHandsLeadershipsOver(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t, goleakOptions()...) })
	log := rpctest.Logger(t)
	_, nodes := startJoined(t, log, 3, func(c *node.Config) { c.Replication = 3 })
	ids := []string{"n1", "n2", "n3"}
	checkGroup(t, 30*time.Second, nodes, ids)
	shardsSettled(t, time.Minute, nodes, ids, 3)
	cl := client.New(client.Options{Addrs: nodeAddrs(nodes)})
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rpctest.Eventually(t, 20*time.Second, "mkdir /load", func() error {
		_, err := cl.Mkdir(ctx, &rpc.MkdirRequest{Path: "/load", Mode: 0o755})
		if errors.Is(err, fs.ErrExist) {
			return nil
		}
		return err
	})
	var done atomic.Int64
	halt := runLoad(t, cl, &done)
	waitDone := func(k int64) {
		want := done.Load() + k
		rpctest.Eventually(t, 30*time.Second, fmt.Sprintf("%d more requests", k), func() error {
			if n := done.Load(); n < want {
				return fmt.Errorf("%d of %d", n, want)
			}
			return nil
		})
	}
	waitDone(100)
	victim := nodes[1]
	if led := ledBy(t, nodes[0], victim.ID()); len(led) == 0 {
		t.Fatalf("%s leads no shard before the stop", victim.ID())
	}
	start := time.Now()
	if err := victim.Stop(ctx); err != nil {
		t.Fatalf("stop %s: %v", victim.ID(), err)
	}
	t.Logf("graceful stop of %s took %v", victim.ID(), time.Since(start).Round(time.Millisecond))
	rest := []*node.Node{nodes[0], nodes[2]}
	cl.SetAddrs(nodeAddrs(rest))
	waitDone(100)
	halt()
	t.Logf("%d requests succeeded", done.Load())
}

// ledBy returns the shards node id leads, as via sees them.
func ledBy(t *testing.T, via *node.Node, id string) []string {
	t.Helper()
	var out []string
	for _, m := range via.Members(context.Background()) {
		if m.ID == id {
			out = slices.Clone(m.ShardsLed)
		}
	}
	return out
}

// TestVersionGate upgrades a cluster whose nodes speak only shard log
// format 1 (WithLogFormatPin, standing in for an older build) one node at
// a time: the upgraded ones keep writing format 1, which the others apply
// (a pinned replica halts on format 2), until the last runs this build's
// formats; then its newest format is in use, gossiped and recorded, the files
// created before get their ids, and a node started again pinned to format
// 1 is refused (docs/design.md, "Upgrades and unknown commands").
func TestVersionGate(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t, goleakOptions()...) })
	log := rpctest.Logger(t)
	ids := []string{"n1", "n2", "n3"}
	var cfgs []node.Config
	var nodes []*node.Node
	for i, id := range ids {
		c := nodetest.Config(t, id)
		c.Replication = 3
		if i == 0 {
			c.Bootstrap = true
		} else {
			c.RetryJoin = []string{nodetest.SerfAddr(cfgs[0])}
		}
		cfgs = append(cfgs, c)
		nodes = append(nodes, nodetest.Start(t, c, log, node.WithLogFormatPin(store.BatchFormatV1)))
	}
	checkGroup(t, 30*time.Second, nodes, ids)
	shardsSettled(t, time.Minute, nodes, ids, 3)
	cl := client.New(client.Options{Addrs: nodeAddrs(nodes)})
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	inUse := func(n *node.Node) int {
		for _, m := range n.Members(ctx) {
			if m.ID == n.ID() {
				return m.LogFormatInUse
			}
		}
		return -1
	}
	// made retries op until it answers, an existing path counting as made
	// (an earlier try that timed out may have made it).
	made := func(what string, op func() error) {
		t.Helper()
		rpctest.Eventually(t, 20*time.Second, what, func() error {
			if err := op(); err != nil && !errors.Is(err, fs.ErrExist) {
				return err
			}
			return nil
		})
	}
	create := func(p string) {
		t.Helper()
		made("create "+p, func() error {
			_, err := cl.Create(ctx, &rpc.CreateRequest{Path: p, Mode: 0o644})
			return err
		})
	}
	upgrade := func(i int) {
		t.Helper()
		nodetest.Shutdown(t, nodes[i])
		nodes[i] = nodetest.Start(t, cfgs[i], log)
		checkGroup(t, 30*time.Second, nodes, ids)
	}
	mkdir := func(p string) {
		t.Helper()
		made("mkdir "+p, func() error {
			_, err := cl.Mkdir(ctx, &rpc.MkdirRequest{Path: p, Mode: 0o755})
			return err
		})
	}
	nlink := func(p string, want uint32) {
		t.Helper()
		rpctest.Eventually(t, 30*time.Second, fmt.Sprintf("%s with %d links", p, want), func() error {
			st, err := cl.Stat(ctx, p)
			if err != nil {
				return err
			}
			if st.Inode.Nlink != want {
				return fmt.Errorf("%s has %d links", p, st.Inode.Nlink)
			}
			return nil
		})
	}
	// Directories made before link counts are kept.
	for _, p := range []string{"/olddir", "/olddir/s1", "/olddir/s2"} {
		mkdir(p)
	}
	for i := range 2 {
		upgrade(i)
		for j := range 20 {
			create(fmt.Sprintf("/old%d-%d", i, j))
		}
		for _, n := range nodes {
			if got := inUse(n); got != 1 {
				t.Errorf("%s: shard log format in use %d with a member speaking 1, want 1", n.ID(), got)
			}
			if err := n.Err(); err != nil {
				t.Fatalf("%s stopped: %v", n.ID(), err)
			}
		}
	}
	// A special file needs format 3: refused while a member speaks 1.
	mkfifo := func() error {
		return untilAvailable(ctx, func() error {
			_, err := cl.Create(ctx, &rpc.CreateRequest{Path: "/fifo", Type: rpc.TypeFIFO, Mode: 0o644})
			return err
		})
	}
	if err := mkfifo(); !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("mkfifo with a member speaking format 1: %v, want errors.ErrUnsupported", err)
	}
	// A hard link needs format 7 (its stubs): refused too.
	link := func() error {
		return untilAvailable(ctx, func() error {
			_, err := cl.Link(ctx, "/old0-0", "/old0-0.link")
			return err
		})
	}
	if err := link(); !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("link with a member speaking format 1: %v, want errors.ErrUnsupported", err)
	}

	// The last node runs this build's formats: they come into use.
	upgrade(2)
	rpctest.Eventually(t, 30*time.Second, "this build's format in use everywhere", func() error {
		for _, n := range nodes {
			if got := inUse(n); got != int(store.MaxBatchFormat) {
				return fmt.Errorf("%s: in use %d", n.ID(), got)
			}
		}
		return nil
	})
	create("/new")
	if err := mkfifo(); err != nil {
		t.Fatalf("mkfifo with every member on this build: %v", err)
	}
	rpctest.Eventually(t, 30*time.Second, "a link with every member on this build", func() error {
		if err := link(); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
		st, err := cl.Stat(ctx, "/old0-0.link")
		if err != nil {
			return err
		}
		if st.Inode.Nlink != 2 {
			return fmt.Errorf("/old0-0.link has %d links", st.Inode.Nlink)
		}
		return nil
	})
	// The directories made before are counted; the new ones count.
	nlink("/olddir", 4)
	mkdir("/olddir/s3")
	nlink("/olddir", 5)
	rpctest.Eventually(t, 30*time.Second, "ids on the files created before", func() error {
		st, err := cl.Stat(ctx, "/old0-0")
		if err != nil {
			return err
		}
		if st.Inode.ID == 0 {
			return errors.New("/old0-0 has no id yet")
		}
		return nil
	})

	// A downgrade past the format change is refused at start.
	nodetest.Shutdown(t, nodes[2])
	n, err := node.New(cfgs[2], log, node.WithTuning(nodetest.Tuning()), node.WithLogFormatPin(store.BatchFormatV1))
	if err != nil {
		t.Fatal(err)
	}
	err = n.Start(ctx)
	if !errors.Is(err, node.ErrFormat) {
		_ = n.Shutdown(ctx)
		t.Fatalf("start pinned to format 1 with format %d in use: %v, want ErrFormat", store.MaxBatchFormat, err)
	}
	t.Logf("refused: %v", err)
	_ = n.Shutdown(ctx)
}

// untilAvailable calls op until it answers other than rpc.ErrUnavailable
// (a shard between leaders), for up to 20 s, and returns its answer.
func untilAvailable(ctx context.Context, op func() error) error {
	deadline := time.Now().Add(20 * time.Second)
	for {
		err := op()
		if !errors.Is(err, rpc.ErrUnavailable) || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}
