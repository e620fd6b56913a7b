package client_test

// Regression test: a connection that fails before addrPool.get has
// appended it to the pool (readLoop's fail → remove runs first, a no-op) is
// appended anyway, and then handed out forever: roundTrip sees c.closed and
// returns outcomeNotSent with the old error without removing it, and
// fresh() is false, so the client never redials. Fixed by removing the
// connection in roundTrip when it is found closed.
// Run: go test -race -run TestDeadConnLeavesPool -cpu 2,4 ./rpc/client/

import (
	"context"
	"net"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ghba/ghba/rpc"
	"github.com/ghba/ghba/rpc/client"
)

type resetConn struct{ net.Conn }

func (resetConn) Read([]byte) (int, error) { return 0, syscall.ECONNRESET }

func TestDeadConnLeavesPool(t *testing.T) {
	const rounds = 3000 // the race window is hit in ~1% of rounds
	ts := startServer(t, "s1", rpc.ServerOptions{})
	stuck := 0
	for round := range rounds {
		var dials atomic.Int64
		c := client.New(client.Options{Addrs: []string{ts.addr}, Dial: func(ctx context.Context, network, addr string) (net.Conn, error) {
			nc, err := (&net.Dialer{}).DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			if dials.Add(1) == 1 {
				return resetConn{nc}, nil // the first connection dies at once
			}
			return nc, nil
		}})
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		var resp echoResp
		_ = c.Call(ctx, ts.addr, mEcho, &echoReq{N: 1}, &resp)
		var err error
		for range 5 {
			if err = c.Call(ctx, ts.addr, mEcho, &echoReq{N: 1}, &resp); err == nil {
				break
			}
		}
		cancel()
		c.Close()
		if err != nil {
			stuck++
			if stuck == 1 {
				t.Logf("round %d: 5 more calls to a healthy server failed, the last with: %v (dials: %d)", round, err, dials.Load())
			}
		}
	}
	if stuck > 0 {
		t.Fatalf("%d of %d clients kept a dead connection in the pool", stuck, rounds)
	}
}
