package rpc

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// Test-only methods.
const (
	mEcho  = "Test.Echo"
	mFail  = "Test.Fail"
	mSleep = "Test.Sleep"
	mWrite = "Test.Write" // a non-idempotent method that counts executions
)

type echoReq struct {
	N     int    `json:"n"`
	S     string `json:"s"`
	B     []byte `json:"b,omitempty"`
	Delay int64  `json:"delay,omitempty"` // nanoseconds to sleep first
}

type echoResp struct {
	N    int    `json:"n"`
	S    string `json:"s"`
	B    []byte `json:"b,omitempty"`
	Node string `json:"node"`
}

type failReq struct {
	Kind string `json:"kind"`
}

type sleepReq struct {
	Block bool `json:"block"` // wait for ctx or release
}

type sleepResp struct {
	HadDeadline bool  `json:"had_deadline"`
	Left        int64 `json:"left"` // time left at entry, ns
}

// testServer is a Server on a loopback port with the test methods.
type testServer struct {
	*Server
	addr    string
	name    string
	writes  atomic.Int64 // executions of mWrite
	echoes  atomic.Int64
	release chan struct{} // closed to release blocked Sleep handlers
	entered chan struct{} // one send per Sleep handler entry
	ctxErrs chan error    // ctx.Err() seen by blocked Sleep handlers
	serveCh chan error
}

func testLogger(t testing.TB) *slog.Logger {
	if os.Getenv("RPC_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return nil
}

func startServer(t testing.TB, name string, opts ServerOptions) *testServer {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = testLogger(t)
	}
	ts := &testServer{
		Server:  NewServer(opts),
		name:    name,
		release: make(chan struct{}),
		entered: make(chan struct{}, 1024),
		ctxErrs: make(chan error, 1024),
		serveCh: make(chan error, 1),
	}
	Register(ts.Server, mEcho, func(ctx context.Context, r *echoReq) (*echoResp, error) {
		ts.echoes.Add(1)
		if r.Delay > 0 {
			select {
			case <-time.After(time.Duration(r.Delay)):
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		return &echoResp{N: r.N, S: r.S, B: r.B, Node: ts.name}, nil
	})
	Register(ts.Server, mWrite, func(ctx context.Context, r *echoReq) (*echoResp, error) {
		ts.writes.Add(1)
		return &echoResp{N: r.N, Node: ts.name}, nil
	})
	Register(ts.Server, mFail, func(ctx context.Context, r *failReq) (*echoResp, error) {
		if r.Kind == "panic" {
			panic("boom")
		}
		if r.Kind == "nil" {
			return nil, nil
		}
		return nil, failErrors[r.Kind]
	})
	Register(ts.Server, mSleep, func(ctx context.Context, r *sleepReq) (*sleepResp, error) {
		dl, ok := ctx.Deadline()
		resp := &sleepResp{HadDeadline: ok}
		if ok {
			resp.Left = int64(time.Until(dl))
		}
		ts.entered <- struct{}{}
		if r.Block {
			select {
			case <-ctx.Done():
				ts.ctxErrs <- ctx.Err()
				return nil, ctx.Err()
			case <-ts.release:
			}
		}
		return resp, nil
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ts.addr = ln.Addr().String()
	go func() { ts.serveCh <- ts.Serve(context.Background(), ln) }()
	t.Cleanup(func() {
		ts.Close()
		select {
		case err := <-ts.serveCh:
			if err != nil && !errors.Is(err, ErrServerClosed) {
				t.Errorf("Serve: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Errorf("Serve did not return after Close")
		}
	})
	return ts
}

// failErrors are the handler errors of mFail by kind (read-only).
var failErrors = map[string]error{
	"notexist":   fmt.Errorf("stat /a/b: %w", fs.ErrNotExist),
	"exist":      fmt.Errorf("create /a: %w", fs.ErrExist),
	"perm":       fmt.Errorf("chmod /a: %w", fs.ErrPermission),
	"invalid":    fmt.Errorf("limit -1: %w", fs.ErrInvalid),
	"notdir":     fmt.Errorf("mkdir /f/x: %w", ErrNotDir),
	"isdir":      fmt.Errorf("unlink /d: %w", ErrIsDir),
	"notempty":   fmt.Errorf("rmdir /d: %w", ErrNotEmpty),
	"unavail":    fmt.Errorf("stat /a: home n3: %w", ErrUnavailable),
	"badpath":    fmt.Errorf("stat a/../..: %w", ErrInvalidPath),
	"deadline":   fmt.Errorf("waiting for n2: %w", context.DeadlineExceeded),
	"canceled":   fmt.Errorf("waiting for n2: %w", context.Canceled),
	"plain":      errors.New("disk on fire"),
	"remote":     fmt.Errorf("forwarded: %w", &RemoteError{Code: CodeNotEmpty, Message: "rmdir /x: directory not empty"}),
	"remotedown": fmt.Errorf("forwarded: %w", &RemoteError{Code: CodeShuttingDown, Message: "server shutting down"}),
	"syscall":    fmt.Errorf("open: %w", syscall.ENOENT),
}

// countingDialer counts dials per address.
type countingDialer struct {
	n atomic.Int64
	d net.Dialer
}

func (c *countingDialer) Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	c.n.Add(1)
	return c.d.DialContext(ctx, network, addr)
}

func newClient(t testing.TB, opts Options) *Client {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = testLogger(t)
	}
	c := NewClient(opts)
	t.Cleanup(func() { c.Close() })
	return c
}

// deadAddr returns a loopback address nobody listens on.
func deadAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	a := ln.Addr().String()
	ln.Close()
	return a
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func netListen() (net.Listener, error) { return net.Listen("tcp", "127.0.0.1:0") }
