package rpc_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ghba/ghba/rpc"
	"github.com/ghba/ghba/rpc/client"
	"github.com/ghba/ghba/rpc/internal/wire"
	"github.com/ghba/ghba/rpc/rpctest"
)

// The server's handling of connections: what it does with bytes that are
// not the protocol, with bodies that do not decode, with idle connections,
// and how Serve ends. The tests of calls through a client against servers
// (deadlines, cancels, shutdown, retries, limits, authentication) are in
// package rpc/client.

// mEcho is the one method of the test server: it answers its request's N.
const mEcho = "Test.Echo"

type echoReq struct {
	N int `json:"n"`
}

type echoResp struct {
	N int `json:"n"`
}

// waitTime bounds every wait for a condition in these tests.
const waitTime = 10 * time.Second

// testServer is a Server on a loopback port serving mEcho.
type testServer struct {
	*rpc.Server
	addr string
}

func startServer(t testing.TB, name string, opts rpc.ServerOptions) *testServer {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = rpctest.Logger(t, "server", name)
	}
	ts := &testServer{Server: rpc.NewServer(opts)}
	rpc.Register(ts.Server, mEcho, func(ctx context.Context, r *echoReq) (*echoResp, error) {
		return &echoResp{N: r.N}, nil
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ts.addr = ln.Addr().String()
	served := make(chan error, 1)
	go func() { served <- ts.Serve(context.Background(), ln) }()
	t.Cleanup(func() {
		ts.Close()
		select {
		case err := <-served:
			if err != nil && !errors.Is(err, rpc.ErrServerClosed) {
				t.Errorf("Serve: %v", err)
			}
		case <-time.After(waitTime):
			t.Errorf("Serve did not return after Close")
		}
	})
	return ts
}

func newClient(t testing.TB, opts client.Options) *client.Client {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = rpctest.Logger(t)
	}
	c := client.New(opts)
	t.Cleanup(func() { c.Close() })
	return c
}

func TestGarbageFromRawClient(t *testing.T) {
	ts := startServer(t, "s1", rpc.ServerOptions{MaxFrameSize: 64 << 10, HandshakeTimeout: 2 * time.Second})
	good := newClient(t, client.Options{Addrs: []string{ts.addr}})

	// A good client keeps calling throughout.
	stop := make(chan struct{})
	var goodCalls atomic.Int64
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			var resp echoResp
			if err := good.Call(context.Background(), ts.addr, mEcho, &echoReq{N: i}, &resp); err != nil || resp.N != i {
				t.Errorf("good client: %v (n=%d want %d)", err, resp.N, i)
				return
			}
			goodCalls.Add(1)
		}
	})

	u32 := func(n uint32) []byte { return binary.BigEndian.AppendUint32(nil, n) }
	req := func(seq uint64, method string, body []byte) []byte {
		return append(wire.AppendRequestHeader(nil, len(body), seq, 0, method), body...)
	}
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	pre := []byte(wire.Preface)
	tests := []struct {
		name  string
		bytes []byte
		close bool // the client closes its side after writing (truncation)
	}{
		{"http request", []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"), false},
		{"random bytes", bytes.Repeat([]byte{0xde, 0xad, 0xbe, 0xef}, 1000), false},
		{"wrong version", []byte("GHB\x09"), false},
		{"oversized frame", cat(pre, u32(1<<30), []byte("xxxx")), false},
		{"just over the limit", cat(pre, u32(64<<10+1)), false},
		{"zero-length frame", cat(pre, u32(0)), false},
		{"unknown kind", cat(pre, u32(9), []byte{99, 0, 0, 0, 0, 0, 0, 0, 1}), false},
		{"short request", cat(pre, u32(3), []byte{wire.KindRequest, 0, 0}), false},
		{"zero method length", cat(pre, u32(wire.RequestFixedLen), []byte{wire.KindRequest}, make([]byte, 17)), false},
		{"method past end", cat(pre, u32(wire.RequestFixedLen+1), []byte{wire.KindRequest}, make([]byte, 16), []byte{200, 'x'}), false},
		{"bad cancel", cat(pre, u32(3), []byte{wire.KindCancel, 1, 2}), false},
		{"response from client", cat(pre, u32(wire.ResponseFixedLen), []byte{wire.KindResponse}, make([]byte, 12)), false},
		{"sequence going back", cat(pre, req(5, mEcho, []byte{0x80}), req(5, mEcho, []byte{0x80})), false},
		{"truncated frame", cat(pre, u32(1000), []byte("only a little")), true},
		{"truncated wire.Preface", []byte("GH"), true},
		{"timeout out of range", cat(pre, u32(wire.RequestFixedLen+1), []byte{wire.KindRequest}, make([]byte, 8), []byte{0xff, 0, 0, 0, 0, 0, 0, 0}, []byte{1, 'x'}), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			nc, err := net.Dial("tcp", ts.addr)
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			if _, err := nc.Write(tt.bytes); err != nil {
				t.Fatal(err)
			}
			if tt.close {
				nc.(*net.TCPConn).CloseWrite()
			}
			// The server must close the connection; it may first answer
			// requests it could parse (e.g. the first of two same-seq ones).
			nc.SetReadDeadline(time.Now().Add(10 * time.Second))
			_, err = io.Copy(io.Discard, nc)
			if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
				t.Fatal("server did not close the connection")
			}
		})
	}
	n := goodCalls.Load()
	rpctest.Eventually(t, waitTime, "good client progress", func() error {
		if k := goodCalls.Load() - n; k <= 10 {
			return fmt.Errorf("%d calls since", k)
		}
		return nil
	})
	close(stop)
	wg.Wait()
	// Only the good client's connection remains (once the server is done
	// with the ones it closed: their reader may still be on its way out).
	rpctest.Eventually(t, waitTime, "the garbage connections gone", func() error {
		if conns := ts.OpenConns(); conns > 1 {
			return fmt.Errorf("%d server connections left", conns)
		}
		return nil
	})
}

func TestBadBodyKeepsConnection(t *testing.T) {
	ts := startServer(t, "s1", rpc.ServerOptions{})
	nc, err := net.Dial("tcp", ts.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	garbage := []byte{0xc1, 0xff, 0x00} // not msgpack
	f := append([]byte(wire.Preface), wire.AppendRequestHeader(nil, len(garbage), 1, 0, mEcho)...)
	body := rpctest.EncodeBody(&echoReq{N: 42})
	f = append(f, garbage...)
	f = append(f, wire.AppendRequestHeader(nil, len(body), 2, 0, mEcho)...)
	f = append(f, body...)
	if _, err := nc.Write(f); err != nil {
		t.Fatal(err)
	}
	fr := &rpctest.FrameReader{R: nc}
	got := map[uint64]rpc.Code{}
	for range 2 {
		_, p := fr.Next(t)
		seq, code, err := rpctest.ParseResponse(p)
		if err != nil {
			t.Fatal(err)
		}
		got[seq] = code
	}
	if got[1] != rpc.CodeBadRequest || got[2] != rpc.CodeOK {
		t.Errorf("codes = %v, want 1:bad_request 2:ok", got)
	}
}

func TestServeAfterClose(t *testing.T) {
	s := rpc.NewServer(rpc.ServerOptions{})
	s.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Serve(context.Background(), ln); !errors.Is(err, rpc.ErrServerClosed) {
		t.Errorf("Serve after Close = %v", err)
	}
	if err := s.Shutdown(context.Background()); err != nil {
		t.Errorf("Shutdown after Close = %v", err)
	}
}

func TestServeContextCancel(t *testing.T) {
	s := rpc.NewServer(rpc.ServerOptions{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln) }()
	c := newClient(t, client.Options{})
	if err := c.Call(context.Background(), ln.Addr().String(), "X.Y", &echoReq{}, nil); !errors.Is(err, rpc.ErrUnknownMethod) {
		t.Fatal(err)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("Serve = %v", err)
	}
}

func TestServerIdleTimeout(t *testing.T) {
	ts := startServer(t, "s1", rpc.ServerOptions{IdleTimeout: 30 * time.Millisecond})
	nc, err := net.Dial("tcp", ts.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nc.Write([]byte(wire.Preface))
	nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.Copy(io.Discard, nc); err != nil {
		t.Errorf("idle connection not closed by the server: %v", err)
	}
}
