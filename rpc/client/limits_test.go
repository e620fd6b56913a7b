package client_test

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/ghba/ghba/rpc"
	"github.com/ghba/ghba/rpc/client"
	"github.com/ghba/ghba/rpc/internal/wire"
	"github.com/ghba/ghba/rpc/rpctest"
)

// TestFloodingConnectionLeavesOthersServed: a client whose connection
// holds more blocked calls than its share (MaxConcurrentPerConn) stops
// being read, and another client is still answered although the flood
// alone would fill every server slot (MaxConcurrent).
func TestFloodingConnectionLeavesOthersServed(t *testing.T) {
	ts := startServer(t, "s", rpc.ServerOptions{MaxConcurrent: 8, MaxConcurrentPerConn: 4})
	flooder := client.New(client.Options{Addrs: []string{ts.addr}, MaxConnsPerAddr: 1, Timeout: -1})
	defer flooder.Close()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			_ = flooder.Call(ctx, ts.addr, mSleep, &sleepReq{Block: true}, &sleepResp{})
		})
	}
	defer func() {
		close(ts.release)
		cancel()
		wg.Wait()
	}()
	for range 4 {
		select {
		case <-ts.entered:
		case <-time.After(10 * time.Second):
			t.Fatal("the flooding calls did not start")
		}
	}

	other := client.New(client.Options{Addrs: []string{ts.addr}, MaxAttempts: 1})
	defer other.Close()
	cctx, ccancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer ccancel()
	var resp echoResp
	if err := other.Call(cctx, ts.addr, mEcho, &echoReq{N: 7}, &resp); err != nil || resp.N != 7 {
		t.Fatalf("another client during the flood: %+v, %v", resp, err)
	}
	select {
	case <-ts.entered:
		t.Error("a fifth call of the flooding connection ran")
	default:
	}
}

// TestIdleConnectionsFromOneClient: connections from one address beyond
// MaxConnsPerClient are closed at once; a client from another address is
// served; once the idle ones go, the first address is served again.
func TestIdleConnectionsFromOneClient(t *testing.T) {
	ts := startServer(t, "s", rpc.ServerOptions{MaxConnsPerClient: 5})
	var idle []net.Conn
	defer func() {
		for _, c := range idle {
			c.Close()
		}
	}()
	for range 50 {
		c, err := net.Dial("tcp", ts.addr)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Write([]byte(wire.Preface)); err != nil {
			t.Fatal(err)
		}
		idle = append(idle, c)
	}
	// The server closed all but 5: they read EOF.
	open := 0
	for _, c := range idle {
		_ = c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
		var b [1]byte
		if _, err := c.Read(b[:]); err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				open++
			}
		}
	}
	if open != 5 {
		t.Errorf("%d idle connections from one address stay open, want 5", open)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	same := client.New(client.Options{Addrs: []string{ts.addr}, MaxAttempts: 1})
	defer same.Close()
	if err := same.Call(ctx, ts.addr, mEcho, &echoReq{N: 1}, &echoResp{}); err == nil {
		t.Error("a sixth connection from the same address was served")
	}
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}}
	elsewhere := client.New(client.Options{Addrs: []string{ts.addr}, MaxAttempts: 1, Dial: d.DialContext})
	defer elsewhere.Close()
	if err := elsewhere.Call(ctx, ts.addr, mEcho, &echoReq{N: 2}, &echoResp{}); err != nil {
		t.Errorf("a client from another address: %v", err)
	}

	for _, c := range idle {
		c.Close()
	}
	idle = nil
	rpctest.Eventually(t, 10*time.Second, "the first address served again", func() error {
		return same.Call(ctx, ts.addr, mEcho, &echoReq{N: 3}, &echoResp{})
	})
}
