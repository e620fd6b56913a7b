package client_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ghba/ghba/rpc"
	"github.com/ghba/ghba/rpc/client"
	"github.com/ghba/ghba/rpc/internal/wire"
	"github.com/ghba/ghba/rpc/rpctest"
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
	*rpc.Server
	addr    string
	name    string
	writes  atomic.Int64 // executions of mWrite
	echoes  atomic.Int64
	release chan struct{} // closed to release blocked Sleep handlers
	entered chan struct{} // one send per Sleep handler entry
	ctxErrs chan error    // ctx.Err() seen by blocked Sleep handlers
	serveCh chan error
}

func startServer(t testing.TB, name string, opts rpc.ServerOptions) *testServer {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = rpctest.Logger(t, "server", name)
	}
	ts := &testServer{
		Server:  rpc.NewServer(opts),
		name:    name,
		release: make(chan struct{}),
		entered: make(chan struct{}, 1024),
		ctxErrs: make(chan error, 1024),
		serveCh: make(chan error, 1),
	}
	rpc.Register(ts.Server, mEcho, func(ctx context.Context, r *echoReq) (*echoResp, error) {
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
	rpc.Register(ts.Server, mWrite, func(ctx context.Context, r *echoReq) (*echoResp, error) {
		ts.writes.Add(1)
		return &echoResp{N: r.N, Node: ts.name}, nil
	})
	rpc.Register(ts.Server, mFail, func(ctx context.Context, r *failReq) (*echoResp, error) {
		if r.Kind == "panic" {
			panic("boom")
		}
		if r.Kind == "nil" {
			return nil, nil
		}
		return nil, failErrors[r.Kind]
	})
	rpc.Register(ts.Server, mSleep, func(ctx context.Context, r *sleepReq) (*sleepResp, error) {
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
			if err != nil && !errors.Is(err, rpc.ErrServerClosed) {
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
	"notdir":     fmt.Errorf("mkdir /f/x: %w", rpc.ErrNotDir),
	"isdir":      fmt.Errorf("unlink /d: %w", rpc.ErrIsDir),
	"notempty":   fmt.Errorf("rmdir /d: %w", rpc.ErrNotEmpty),
	"unavail":    fmt.Errorf("stat /a: home n3: %w", rpc.ErrUnavailable),
	"badpath":    fmt.Errorf("stat a/../..: %w", rpc.ErrInvalidPath),
	"deadline":   fmt.Errorf("waiting for n2: %w", context.DeadlineExceeded),
	"canceled":   fmt.Errorf("waiting for n2: %w", context.Canceled),
	"plain":      errors.New("disk on fire"),
	"remote":     fmt.Errorf("forwarded: %w", &rpc.RemoteError{Code: rpc.CodeNotEmpty, Message: "rmdir /x: directory not empty"}),
	"remotedown": fmt.Errorf("forwarded: %w", &rpc.RemoteError{Code: rpc.CodeShuttingDown, Message: "server shutting down"}),
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

func newClient(t testing.TB, opts client.Options) *client.Client {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = rpctest.Logger(t)
	}
	c := client.New(opts)
	t.Cleanup(func() { c.Close() })
	return c
}

// waitTime bounds every wait for a condition in these tests.
const waitTime = 10 * time.Second

// noPooledConns is a condition for rpctest.Eventually: c has no pooled
// connection to addr.
func noPooledConns(c *client.Client, addr string) func() error {
	return func() error {
		if n := c.PooledConns(addr); n != 0 {
			return fmt.Errorf("%d pooled connections to %s", n, addr)
		}
		return nil
	}
}

// parseGoAway returns the last accepted sequence number of a goaway frame.
func parseGoAway(p []byte) (uint64, error) { return wire.ParseControl(p, wire.KindGoAway) }
