package node

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// TestStartFailsCleanly checks that a node whose port is taken fails to
// start with an error naming the port, and leaves nothing running.
func TestStartFailsCleanly(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t, goleakOptions()...) })
	cfg := testConfig(t, t.TempDir(), "busy")
	ln, err := net.Listen("tcp", net.JoinHostPort(cfg.BindAddr, strconv.Itoa(cfg.Ports.HTTP)))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	n, err := New(cfg, newTestLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	n.tune = testTuning()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = n.Start(ctx)
	if err == nil {
		t.Fatal("Start succeeded with ports.http taken")
	}
	if !strings.Contains(err.Error(), "ports.http") {
		t.Errorf("error %q does not name ports.http", err)
	}
	if err := n.Shutdown(ctx); err != nil {
		t.Errorf("Shutdown after failed Start: %v", err)
	}
	// The data dir is usable again (the store was closed).
	ln.Close()
	n2, err := New(cfg, newTestLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	n2.tune = testTuning()
	if err := n2.Start(ctx); err != nil {
		t.Fatalf("second Start: %v", err)
	}
	if err := n2.Shutdown(ctx); err != nil {
		t.Errorf("Shutdown: %v", err)
	}
}

// TestNewValidates checks that New refuses a bad config and that Shutdown
// of a node never started is a no-op.
func TestNewValidates(t *testing.T) {
	cfg := DefaultConfig()
	if _, err := New(cfg, nil); !errors.Is(err, ErrConfig) {
		t.Fatalf("New with empty node_id: %v", err)
	}
	cfg = testConfig(t, t.TempDir(), "idle")
	n, err := New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := n.Leave(context.Background()); err == nil {
		t.Fatal("Leave on a node never started succeeded")
	}
}

// TestPickGroup checks the auto group choice: fewest members below the
// maximum, ties by name, the smallest full group when all are full.
func TestPickGroup(t *testing.T) {
	cfg := testConfig(t, t.TempDir(), "x")
	n, err := New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	set := func(groups ...string) {
		var peers []Peer
		for i, g := range groups {
			peers = append(peers, Peer{ID: "p" + strconv.Itoa(i), Group: g, Up: true})
		}
		n.cluster.peers.Store(&peers)
	}
	for _, tc := range []struct {
		groups []string
		max    int
		want   string
	}{
		{nil, 3, ""},
		{[]string{"a", "a", "b"}, 3, "b"},
		{[]string{"a", "b"}, 3, "a"},
		{[]string{"a", "a", "a", "b", "b", "b", "c", "c"}, 3, "c"},
		{[]string{"a", "a", "b", "b", "b"}, 2, "a"},
	} {
		set(tc.groups...)
		if got := n.cluster.pickGroup(tc.max); got != tc.want {
			t.Errorf("pickGroup(%v, %d) = %q, want %q", tc.groups, tc.max, got, tc.want)
		}
	}
}
