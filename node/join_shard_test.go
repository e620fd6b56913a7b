package node_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"testing"
	"time"

	"github.com/ghba/ghba/node"
	"github.com/ghba/ghba/node/nodetest"
	"github.com/ghba/ghba/rpc"
	"github.com/ghba/ghba/rpc/rpctest"
)

// TestJoinCreatedAfterLostAnswer: a joiner whose first join attempt was
// committed by the group's FSM but whose answer it never got (as when the
// leader's apply reports "leadership lost while committing log" for an
// entry that was committed) is still told, when it retries, that it
// created the shard named after it, and bootstraps that shard's Raft
// group; a joiner with another data directory (wiped: a new incarnation)
// or one that does not send its incarnation is not told to create a shard
// that exists. Real Raft, Serf and Badger on loopback.
func TestJoinCreatedAfterLostAnswer(t *testing.T) {
	log := rpctest.Logger(t)
	c1 := nodetest.Config(t, "a1")
	c1.Group, c1.Bootstrap = "ga", true
	c2 := nodetest.Config(t, "a2")
	c2.Group = "ga" // no retry_join: it joins the pool when the test says
	a1 := nodetest.Start(t, c1, log)
	checkGroup(t, 30*time.Second, []*node.Node{a1}, []string{"a1"})
	a2 := nodetest.Start(t, c2, log)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// The first attempt: a2 records its intent to create its shard and
	// asks; the leader adds it (AddMember committed, a2 made a voter), and
	// the answer is lost.
	req, err := a2.PrepareJoin(ctx, "ga")
	if err != nil {
		t.Fatal(err)
	}
	if inc := a2.Incarnation(); !slices.Equal(req.Shards, []string{"a2"}) || inc == "" || req.Incarnation != inc {
		t.Fatalf("join request: shards %v incarnation %q (node's %q)", req.Shards, req.Incarnation, inc)
	}
	if _, err := a1.HandleGroupJoin(ctx, req); err != nil {
		t.Fatalf("first attempt: %v", err)
	}
	if sh, ok := a1.GroupFSM().Shard("a2"); !ok || sh.Creator != req.Incarnation || sh.Owner != "a2" {
		t.Fatalf("shard a2 in the FSM: %+v %v", sh, ok)
	}

	// The leader's decision on later attempts: the FSM knows the shard,
	// and only the data directory that created it is told to create it.
	for _, tc := range []struct {
		name, inc string
		want      []string
	}{
		{"a retry of the same data directory", req.Incarnation, []string{"a2"}},
		{"a wiped data directory", "0123456789ab", nil},
		{"a joiner that does not send its incarnation", "", nil},
	} {
		r := *req
		r.Incarnation = tc.inc
		created, err := a1.HandleGroupJoin(ctx, &r)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if !slices.Equal(created, tc.want) {
			t.Errorf("%s: created %v, want %v", tc.name, created, tc.want)
		}
	}
	if sh, _ := a1.GroupFSM().Shard("a2"); sh.Creator != req.Incarnation {
		t.Fatalf("a later join changed the creator: %+v", sh)
	}

	// a2's own join loop retries once it sees the group: it must keep its
	// intent and bootstrap the shard, which then gets a leader and both
	// replicas. (Told it did not create it, it would drop its intent and
	// the shard would have no leader for good.)
	if _, err := a2.Join(ctx, []string{nodetest.SerfAddr(c1)}); err != nil {
		t.Fatal(err)
	}
	nodes := []*node.Node{a1, a2}
	checkGroup(t, 30*time.Second, nodes, []string{"a1", "a2"})
	shardsSettled(t, 30*time.Second, nodes, []string{"a1", "a2"}, 3)
}

// TestJoinRedirectedToTheShardsGroup: a node whose data directory was
// wiped, and whose shard lives on in another group, asks a group with room
// to join and create that shard (gossip had not told it yet that the shard
// exists). The leader does not add it, which would found a second Raft
// group for the shard: an auto node is redirected to the shard's group, a
// node of a fixed group is refused.
func TestJoinRedirectedToTheShardsGroup(t *testing.T) {
	specs := []groupSpec{{"a1", "ga"}, {"a2", "ga"}, {"b1", "gb"}, {"b2", "gb"}}
	nodes := startGroups(t, rpctest.Logger(t), specs, nil)
	defer func() {
		for _, n := range slices.Backward(nodes) {
			nodetest.Shutdown(t, n)
		}
	}()
	checkGroup(t, 30*time.Second, nodes[:2], []string{"a1", "a2"})
	checkGroup(t, 30*time.Second, nodes[2:], []string{"b1", "b2"})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	a1 := nodes[0]
	// The Directory view the leader consults (refreshed from gossip and
	// the FSM), not the cluster's shard listing.
	rpctest.Eventually(t, 30*time.Second, "a1's Directory places shard b2 in gb", func() error {
		ss := a1.Directory().Shards()
		for _, s := range ss {
			if s.ID == "b2" && s.Group == "gb" {
				return nil
			}
		}
		return fmt.Errorf("shards %+v", ss)
	})
	b2 := nodes[3].GroupFSM()
	m, ok := b2.Member("b2")
	if !ok {
		t.Fatal("b2 is not in gb's FSM")
	}
	req := &node.JoinRequest{Auto: true, Member: m, Shards: []string{"b2"}, Creates: true, Incarnation: "0123456789ab"}
	req.Group = "ga"
	// A joiner retries while ga is between leaders (two voters on a
	// loaded machine), and so does the test.
	var g, via string
	rpctest.Eventually(t, 30*time.Second, "ga answers the auto joiner", func() error {
		var err error
		g, via, err = a1.HandleGroupJoinRedirect(ctx, req)
		if err != nil && !errors.Is(err, rpc.ErrUnavailable) {
			t.Fatalf("auto joiner with shard b2: %v", err)
		}
		return err
	})
	if g != "gb" || (via != "b1" && via != "b2") {
		t.Fatalf("auto joiner with shard b2: redirect %q via %q; want gb via b1 or b2", g, via)
	}
	req.Auto = false
	rpctest.Eventually(t, 30*time.Second, "ga answers the fixed-group joiner", func() error {
		_, _, err := a1.HandleGroupJoinRedirect(ctx, req)
		if errors.Is(err, rpc.ErrUnavailable) {
			return err
		}
		if !errors.Is(err, fs.ErrExist) {
			t.Errorf("fixed-group joiner with shard b2: %v, want fs.ErrExist", err)
		}
		return nil
	})
	if _, ok := a1.GroupFSM().Shard("b2"); ok {
		t.Error("ga's FSM has a shard b2")
	}
	if _, ok := a1.GroupFSM().Member("b2"); ok {
		t.Error("ga's FSM has a member b2")
	}
}
