package node_test

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ghba/ghba/node"
	"github.com/ghba/ghba/node/nodetest"
	"github.com/ghba/ghba/rpc/rpctest"
	"go.uber.org/goleak"
)

// TestStartFailsCleanly checks that a node whose port is taken fails to
// start with an error naming the port, and leaves nothing running.
func TestStartFailsCleanly(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t, goleakOptions()...) })
	cfg := nodetest.Config(t, "busy")
	ln, err := net.Listen("tcp", net.JoinHostPort(cfg.BindAddr, strconv.Itoa(cfg.Ports.HTTP)))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	n, err := node.New(cfg, rpctest.Logger(t), node.WithTuning(nodetest.Tuning()))
	if err != nil {
		t.Fatal(err)
	}
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
	n2, err := node.New(cfg, rpctest.Logger(t), node.WithTuning(nodetest.Tuning()))
	if err != nil {
		t.Fatal(err)
	}
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
	cfg := node.DefaultConfig()
	if _, err := node.New(cfg, nil); !errors.Is(err, node.ErrConfig) {
		t.Fatalf("New with empty node_id: %v", err)
	}
	cfg = nodetest.Config(t, "idle")
	n, err := node.New(cfg, nil)
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
