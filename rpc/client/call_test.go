package client_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"net"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/ghba/ghba/rpc"
	"github.com/ghba/ghba/rpc/client"
	"github.com/ghba/ghba/rpc/internal/wire"
	"github.com/ghba/ghba/rpc/rpctest"
)

// allSentinels are the errors a remote error may match.
var allSentinels = []error{
	fs.ErrNotExist, fs.ErrExist, fs.ErrPermission, fs.ErrInvalid,
	rpc.ErrNotDir, rpc.ErrIsDir, rpc.ErrNotEmpty, rpc.ErrUnavailable, rpc.ErrInvalidPath,
	rpc.ErrBadRequest, rpc.ErrUnknownMethod, rpc.ErrShuttingDown,
	context.DeadlineExceeded, context.Canceled,
}

func TestErrorCodesRoundTrip(t *testing.T) {
	ts := startServer(t, "s1", rpc.ServerOptions{})
	c := newClient(t, client.Options{Addrs: []string{ts.addr}})
	tests := []struct {
		kind  string
		code  rpc.Code
		match []error // errors.Is must hold for exactly these sentinels
	}{
		{"notexist", rpc.CodeNotExist, []error{fs.ErrNotExist}},
		{"syscall", rpc.CodeNotExist, []error{fs.ErrNotExist}},
		{"exist", rpc.CodeExist, []error{fs.ErrExist}},
		{"perm", rpc.CodePermission, []error{fs.ErrPermission}},
		{"invalid", rpc.CodeInvalid, []error{fs.ErrInvalid}},
		{"notdir", rpc.CodeNotDir, []error{rpc.ErrNotDir}},
		{"isdir", rpc.CodeIsDir, []error{rpc.ErrIsDir}},
		{"notempty", rpc.CodeNotEmpty, []error{rpc.ErrNotEmpty}},
		{"unavail", rpc.CodeUnavailable, []error{rpc.ErrUnavailable}},
		{"badpath", rpc.CodeInvalidPath, []error{rpc.ErrInvalidPath, fs.ErrInvalid}},
		{"deadline", rpc.CodeDeadlineExceeded, []error{context.DeadlineExceeded}},
		{"canceled", rpc.CodeCanceled, []error{context.Canceled}},
		{"plain", rpc.CodeInternal, nil},
		{"panic", rpc.CodeInternal, nil},
		{"remote", rpc.CodeNotEmpty, []error{rpc.ErrNotEmpty}},
		// A downstream node's "shutting down" must not promise the client
		// that this node did nothing: it becomes plain unavailable.
		{"remotedown", rpc.CodeUnavailable, []error{rpc.ErrUnavailable}},
	}
	for _, tt := range tests {
		t.Run(tt.kind, func(t *testing.T) {
			var resp echoResp
			err := c.Call(context.Background(), ts.addr, mFail, &failReq{Kind: tt.kind}, &resp)
			if err == nil {
				t.Fatal("no error")
			}
			re, ok := errors.AsType[*rpc.RemoteError](err)
			if !ok {
				t.Fatalf("error %v (%T) is not a *RemoteError", err, err)
			}
			if re.Code != tt.code {
				t.Errorf("code = %v, want %v", re.Code, tt.code)
			}
			if !errors.Is(err, rpc.ErrRemote) {
				t.Errorf("errors.Is(err, ErrRemote) = false")
			}
			for _, s := range allSentinels {
				want := false
				for _, m := range tt.match {
					want = want || m == s
				}
				if got := errors.Is(err, s); got != want {
					t.Errorf("errors.Is(err, %v) = %v, want %v", s, got, want)
				}
			}
			if e, ok := failErrors[tt.kind]; ok && err.Error() != e.Error() {
				t.Errorf("message = %q, want %q", err.Error(), e.Error())
			}
		})
	}
}

func TestUnknownMethodAndBadRequest(t *testing.T) {
	ts := startServer(t, "s1", rpc.ServerOptions{})
	c := newClient(t, client.Options{Addrs: []string{ts.addr}})
	ctx := context.Background()
	err := c.Call(ctx, ts.addr, "No.Such", &echoReq{}, nil)
	if !errors.Is(err, rpc.ErrUnknownMethod) {
		t.Errorf("unknown method: %v", err)
	}
	// A body of the wrong shape (a string where a struct is expected).
	err = c.Call(ctx, ts.addr, mEcho, "not a struct", nil)
	if !errors.Is(err, rpc.ErrBadRequest) {
		t.Errorf("bad body: %v", err)
	}
	// A nil response from a handler decodes as the zero value.
	resp := echoResp{N: 7}
	if err := c.Call(ctx, ts.addr, mFail, &failReq{Kind: "nil"}, &resp); err != nil {
		t.Errorf("nil response: %v", err)
	}
	// The connection is still fine.
	var er echoResp
	if err := c.Call(ctx, ts.addr, mEcho, &echoReq{N: 1, S: "ok"}, &er); err != nil || er.S != "ok" {
		t.Errorf("echo after errors: %v %+v", err, er)
	}
	// The calls answered, by method (an unknown method counts nowhere);
	// a call is counted just after its answer is sent.
	want := map[string]uint64{mEcho: 2, mFail: 1}
	rpctest.Eventually(t, 5*time.Second, "calls counted", func() error {
		if got := ts.ServedByMethod(); !maps.Equal(got, want) || ts.Served() != 3 {
			return fmt.Errorf("ServedByMethod() = %v, Served() = %d; want %v, 3", got, ts.Served(), want)
		}
		return nil
	})
}

func TestPipelinedConcurrentCalls(t *testing.T) {
	ts := startServer(t, "s1", rpc.ServerOptions{})
	var dials countingDialer
	c := newClient(t, client.Options{Addrs: []string{ts.addr}, MaxConnsPerAddr: 1, Dial: dials.Dial})
	const workers, per = 32, 100
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			for i := range per {
				n := w*per + i
				req := echoReq{N: n, S: fmt.Sprint("v", n), B: bytes.Repeat([]byte{byte(n)}, n%300)}
				if n%7 == 0 {
					req.Delay = int64(time.Duration(n%5) * time.Millisecond) // reorder responses
				}
				var resp echoResp
				if err := c.Call(context.Background(), ts.addr, mEcho, &req, &resp); err != nil {
					errs <- err
					return
				}
				if resp.N != req.N || resp.S != req.S || !bytes.Equal(resp.B, req.B) {
					errs <- fmt.Errorf("mismatched response %d/%q for request %d/%q", resp.N, resp.S, req.N, req.S)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if n := dials.n.Load(); n != 1 {
		t.Errorf("dials = %d, want 1 (one pipelined connection)", n)
	}
}

func TestPoolReuse(t *testing.T) {
	ts := startServer(t, "s1", rpc.ServerOptions{})
	var dials countingDialer
	c := newClient(t, client.Options{Addrs: []string{ts.addr}, MaxConnsPerAddr: 3, Dial: dials.Dial, IdleTimeout: 50 * time.Millisecond})
	ctx := context.Background()
	for i := range 200 {
		var resp echoResp
		if err := c.Call(ctx, ts.addr, mEcho, &echoReq{N: i}, &resp); err != nil {
			t.Fatal(err)
		}
	}
	if n := dials.n.Load(); n != 1 {
		t.Fatalf("sequential calls: dials = %d, want 1", n)
	}
	// Concurrent slow calls may open more connections, never more than the bound.
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			var resp echoResp
			if err := c.Call(ctx, ts.addr, mEcho, &echoReq{Delay: int64(20 * time.Millisecond)}, &resp); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if n := dials.n.Load(); n > 3 {
		t.Fatalf("concurrent calls: dials = %d, want <= 3", n)
	}
	// Idle connections are closed, and the next call dials again.
	rpctest.Eventually(t, waitTime, "idle connections to close", noPooledConns(c, ts.addr))
	before := dials.n.Load()
	var resp echoResp
	if err := c.Call(ctx, ts.addr, mEcho, &echoReq{N: 1}, &resp); err != nil {
		t.Fatal(err)
	}
	if n := dials.n.Load(); n != before+1 {
		t.Errorf("after idle close: dials = %d, want %d", n, before+1)
	}
}

func TestDeadlinePropagation(t *testing.T) {
	ts := startServer(t, "s1", rpc.ServerOptions{})
	c := newClient(t, client.Options{Addrs: []string{ts.addr}, Timeout: -1})

	// The handler sees the client's deadline.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	var resp sleepResp
	if err := c.Call(ctx, ts.addr, mSleep, &sleepReq{}, &resp); err != nil {
		t.Fatal(err)
	}
	cancel()
	<-ts.entered
	if !resp.HadDeadline || resp.Left <= 0 || resp.Left > int64(5*time.Second) {
		t.Errorf("handler deadline: had=%v left=%v", resp.HadDeadline, time.Duration(resp.Left))
	}

	// No deadline on the client (Timeout < 0): none on the server.
	if err := c.Call(context.Background(), ts.addr, mSleep, &sleepReq{}, &resp); err != nil {
		t.Fatal(err)
	}
	<-ts.entered
	if resp.HadDeadline {
		t.Error("handler has a deadline the client did not set")
	}

	// A blocked call: the client gets DeadlineExceeded, the handler's
	// context ends too.
	ctx, cancel = context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := c.Call(ctx, ts.addr, mSleep, &sleepReq{Block: true}, &resp)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("blocked call: %v", err)
	}
	// Either the client's timer fired first (ErrOutcomeUnknown: the call
	// was sent) or the server's answer "deadline exceeded" came first.
	if !errors.Is(err, rpc.ErrOutcomeUnknown) && !errors.Is(err, rpc.ErrRemote) {
		t.Errorf("deadline after sending: %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("call took %v", d)
	}
	<-ts.entered
	select {
	case e := <-ts.ctxErrs:
		if !errors.Is(e, context.DeadlineExceeded) && !errors.Is(e, context.Canceled) {
			t.Errorf("handler ctx error %v", e)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("handler context never ended")
	}

	// An expired context fails before sending.
	err = c.Call(ctx, ts.addr, mEcho, &echoReq{}, nil)
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, rpc.ErrOutcomeUnknown) {
		t.Errorf("expired ctx: %v", err)
	}
}

func TestCancelPropagation(t *testing.T) {
	ts := startServer(t, "s1", rpc.ServerOptions{})
	c := newClient(t, client.Options{Addrs: []string{ts.addr}, Timeout: -1})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Call(ctx, ts.addr, mSleep, &sleepReq{Block: true}, nil) }()
	<-ts.entered
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("client: %v", err)
	}
	select {
	case e := <-ts.ctxErrs: // the cancel frame reached the server
		if !errors.Is(e, context.Canceled) {
			t.Errorf("handler ctx error %v", e)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("handler context not canceled")
	}
}

func TestMaxConcurrentBound(t *testing.T) {
	ts := startServer(t, "s1", rpc.ServerOptions{MaxConcurrent: 2})
	c := newClient(t, client.Options{Addrs: []string{ts.addr}})
	var wg sync.WaitGroup
	for range 5 {
		wg.Go(func() {
			if err := c.Call(context.Background(), ts.addr, mSleep, &sleepReq{Block: true}, nil); err != nil {
				t.Error(err)
			}
		})
	}
	<-ts.entered
	<-ts.entered
	select {
	case <-ts.entered:
		t.Fatal("a third handler ran with MaxConcurrent 2")
	case <-time.After(100 * time.Millisecond):
	}
	close(ts.release)
	wg.Wait()
}

func TestShutdownWaitsForInflight(t *testing.T) {
	ts := startServer(t, "s1", rpc.ServerOptions{})
	c := newClient(t, client.Options{Addrs: []string{ts.addr}, MaxConnsPerAddr: 1})
	ctx := context.Background()
	const n = 5
	results := make(chan error, n)
	for range n {
		go func() {
			var resp sleepResp
			results <- c.Call(ctx, ts.addr, mSleep, &sleepReq{Block: true}, &resp)
		}()
	}
	for range n {
		<-ts.entered
	}
	shut := make(chan error, 1)
	go func() { shut <- ts.Shutdown(ctx) }()

	// Once the client has the goaway, new work is refused without being
	// executed (a redial finds no listener): unavailable, not "unknown".
	rpctest.Eventually(t, waitTime, "the goaway to reach the client", noPooledConns(c, ts.addr))
	err := c.Call(ctx, ts.addr, mWrite, &echoReq{}, nil)
	if !errors.Is(err, rpc.ErrUnavailable) || errors.Is(err, rpc.ErrOutcomeUnknown) {
		t.Errorf("call during shutdown: %v", err)
	}
	if ts.writes.Load() != 0 {
		t.Error("a write was executed during shutdown")
	}
	select {
	case err := <-shut:
		t.Fatalf("Shutdown returned %v with calls in flight", err)
	case <-time.After(50 * time.Millisecond):
	}
	close(ts.release)
	for range n {
		if err := <-results; err != nil {
			t.Errorf("in-flight call: %v", err)
		}
	}
	if err := <-shut; err != nil {
		t.Errorf("Shutdown: %v", err)
	}
	if err := <-ts.serveCh; !errors.Is(err, rpc.ErrServerClosed) {
		t.Errorf("Serve returned %v", err)
	}
	ts.serveCh <- nil // for the cleanup
}

func TestShutdownTimeout(t *testing.T) {
	ts := startServer(t, "s1", rpc.ServerOptions{})
	c := newClient(t, client.Options{Addrs: []string{ts.addr}})
	done := make(chan error, 1)
	go func() { done <- c.Call(context.Background(), ts.addr, mSleep, &sleepReq{Block: true}, nil) }()
	<-ts.entered
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := ts.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Shutdown = %v", err)
	}
	if e := <-ts.ctxErrs; !errors.Is(e, context.Canceled) {
		t.Errorf("handler ctx: %v", e)
	}
	err := <-done
	if !errors.Is(err, rpc.ErrUnavailable) || !errors.Is(err, rpc.ErrOutcomeUnknown) {
		t.Errorf("call cut by forced shutdown: %v", err)
	}
}

// TestGoAwayRefusesLaterRequests checks the goaway contract at frame level:
// requests after the last accepted seq get CodeShuttingDown.
func TestGoAwayRefusesLaterRequests(t *testing.T) {
	ts := startServer(t, "s1", rpc.ServerOptions{})
	nc, err := net.Dial("tcp", ts.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	body := rpctest.EncodeBody(&sleepReq{Block: true})
	frame := append([]byte(wire.Preface), wire.AppendRequestHeader(nil, len(body), 1, 0, mSleep)...)
	frame = append(frame, body...)
	if _, err := nc.Write(frame); err != nil {
		t.Fatal(err)
	}
	<-ts.entered
	shut := make(chan error, 1)
	go func() { shut <- ts.Shutdown(context.Background()) }()

	br := &rpctest.FrameReader{R: nc}
	kind, p := br.Next(t)
	if kind != wire.KindGoAway {
		t.Fatalf("first frame kind %d, want goaway", kind)
	}
	if last, _ := parseGoAway(p); last != 1 {
		t.Fatalf("goaway last = %d, want 1", last)
	}
	body2 := rpctest.EncodeBody(&echoReq{})
	f2 := wire.AppendRequestHeader(nil, len(body2), 2, 0, mWrite)
	if _, err := nc.Write(append(f2, body2...)); err != nil {
		t.Fatal(err)
	}
	kind, p = br.Next(t)
	seq, code, err := rpctest.ParseResponse(p)
	if kind != wire.KindResponse || err != nil || seq != 2 || code != rpc.CodeShuttingDown {
		t.Fatalf("after goaway: kind %d seq %d code %v %v", kind, seq, code, err)
	}
	close(ts.release)
	kind, p = br.Next(t)
	seq, code, err = rpctest.ParseResponse(p)
	if kind != wire.KindResponse || err != nil || seq != 1 || code != rpc.CodeOK {
		t.Fatalf("accepted call: kind %d seq %d code %v %v", kind, seq, code, err)
	}
	if err := <-shut; err != nil {
		t.Fatal(err)
	}
	if ts.writes.Load() != 0 {
		t.Error("refused write was executed")
	}
}

func TestRetryOnAnotherAddress(t *testing.T) {
	live := startServer(t, "live", rpc.ServerOptions{})
	dead := rpctest.DeadAddr(t)
	c := newClient(t, client.Options{Addrs: []string{dead, live.addr}})
	ctx := context.Background()

	// A write preferring the dead node lands on the live one exactly once:
	// a refused dial means it was never sent.
	var resp echoResp
	if err := c.CallAny(ctx, dead, mWrite, &echoReq{N: 1}, &resp); err != nil {
		t.Fatal(err)
	}
	if resp.Node != "live" || live.writes.Load() != 1 {
		t.Errorf("node %q, writes %d", resp.Node, live.writes.Load())
	}
	// Call never moves.
	if err := c.Call(ctx, dead, mEcho, &echoReq{}, &resp); !errors.Is(err, rpc.ErrUnavailable) || errors.Is(err, rpc.ErrOutcomeUnknown) {
		t.Errorf("Call to dead node: %v", err)
	}
	// Every address down.
	c2 := newClient(t, client.Options{Addrs: []string{dead, rpctest.DeadAddr(t)}})
	err := c2.CallAny(ctx, "", mEcho, &echoReq{}, &resp)
	if !errors.Is(err, rpc.ErrUnavailable) {
		t.Errorf("all down: %v", err)
	}
	// No address at all.
	c3 := newClient(t, client.Options{})
	if err := c3.CallAny(ctx, "", mEcho, &echoReq{}, &resp); !errors.Is(err, rpc.ErrUnavailable) {
		t.Errorf("no addresses: %v", err)
	}
}

// TestRetryAfterGracefulShutdown: a node that was in use shuts down;
// writes move to the other node at once and exactly once each (the goaway
// frame says what was not executed).
func TestRetryAfterGracefulShutdown(t *testing.T) {
	a := startServer(t, "a", rpc.ServerOptions{})
	b := startServer(t, "b", rpc.ServerOptions{})
	c := newClient(t, client.Options{Addrs: []string{a.addr, b.addr}})
	ctx := context.Background()
	var resp echoResp
	if err := c.Call(ctx, a.addr, mEcho, &echoReq{}, &resp); err != nil {
		t.Fatal(err)
	}
	if err := a.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		if err := c.CallAny(ctx, a.addr, mWrite, &echoReq{N: i}, &resp); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		if resp.Node != "b" {
			t.Fatalf("answered by %q", resp.Node)
		}
	}
	if a.writes.Load() != 0 || b.writes.Load() != 20 {
		t.Errorf("writes a=%d b=%d, want 0 and 20", a.writes.Load(), b.writes.Load())
	}
}

// TestRetryAfterListenerClosed: a node that was in use dies abruptly (its
// listener and connections close). Reads move to the other node at once;
// writes too, once the client has seen the connection close.
func TestRetryAfterListenerClosed(t *testing.T) {
	a := startServer(t, "a", rpc.ServerOptions{})
	b := startServer(t, "b", rpc.ServerOptions{})
	c := newClient(t, client.Options{Addrs: []string{a.addr, b.addr}})
	ctx := context.Background()
	var resp echoResp
	if err := c.Call(ctx, a.addr, mEcho, &echoReq{}, &resp); err != nil {
		t.Fatal(err)
	}
	a.Close()
	for i := range 20 {
		if err := c.CallAnyWith(ctx, a.addr, mEcho, true, &echoReq{N: i}, &resp); err != nil {
			t.Fatalf("read %d: %v", i, err)
		}
		if resp.Node != "b" || resp.N != i {
			t.Fatalf("read answered by %q", resp.Node)
		}
	}
	rpctest.Eventually(t, waitTime, "the client to drop a's connection", noPooledConns(c, a.addr))
	for i := range 20 {
		if err := c.CallAny(ctx, a.addr, mWrite, &echoReq{N: i}, &resp); err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
	}
	if a.writes.Load() != 0 || b.writes.Load() != 20 {
		t.Errorf("writes a=%d b=%d, want 0 and 20", a.writes.Load(), b.writes.Load())
	}
}

// dropProxy forwards connections to target but cuts each one as soon as
// the server starts answering: the request was executed, its answer lost.
type dropProxy struct {
	ln     net.Listener
	target string
	wg     sync.WaitGroup
}

func startDropProxy(t *testing.T, target string) *dropProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &dropProxy{ln: ln, target: target}
	p.wg.Go(func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", target)
			if err != nil {
				in.Close()
				continue
			}
			p.wg.Go(func() { io.Copy(out, in); out.Close() })
			p.wg.Go(func() {
				var b [1]byte
				out.Read(b[:]) // the first byte of the answer
				in.(*net.TCPConn).SetLinger(0)
				in.Close()
				out.Close()
			})
		}
	})
	t.Cleanup(func() { ln.Close(); p.wg.Wait() })
	return p
}

func TestNoBlindRetryOfWrites(t *testing.T) {
	first := startServer(t, "first", rpc.ServerOptions{})
	second := startServer(t, "second", rpc.ServerOptions{})
	proxy := startDropProxy(t, first.addr)
	c := newClient(t, client.Options{Addrs: []string{proxy.ln.Addr().String(), second.addr}})
	ctx := context.Background()

	// A write whose answer was lost is not sent elsewhere.
	var resp echoResp
	err := c.CallAnyWith(ctx, proxy.ln.Addr().String(), mWrite, false, &echoReq{}, &resp)
	if !errors.Is(err, rpc.ErrOutcomeUnknown) || !errors.Is(err, rpc.ErrUnavailable) {
		t.Fatalf("write through dropping proxy: %v", err)
	}
	if first.writes.Load() != 1 || second.writes.Load() != 0 {
		t.Errorf("writes first=%d second=%d, want 1 and 0", first.writes.Load(), second.writes.Load())
	}
	// A read is retried on the other node.
	if err := c.CallAnyWith(ctx, proxy.ln.Addr().String(), mEcho, true, &echoReq{N: 3}, &resp); err != nil {
		t.Fatalf("read through dropping proxy: %v", err)
	}
	if resp.Node != "second" {
		t.Errorf("read answered by %q", resp.Node)
	}
}

func TestFrameLimits(t *testing.T) {
	ts := startServer(t, "s1", rpc.ServerOptions{MaxFrameSize: 4 << 10})
	c := newClient(t, client.Options{Addrs: []string{ts.addr}, MaxFrameSize: 4 << 10})
	ctx := context.Background()
	var resp echoResp
	// Too large to send: refused locally, nothing sent.
	err := c.Call(ctx, ts.addr, mEcho, &echoReq{B: make([]byte, 8<<10)}, &resp)
	if !errors.Is(err, rpc.ErrFrameTooLarge) {
		t.Errorf("big request: %v", err)
	}
	// A response over the server's limit becomes an error, not a dead connection.
	c2 := newClient(t, client.Options{Addrs: []string{ts.addr}})
	ts2 := startServer(t, "s2", rpc.ServerOptions{MaxFrameSize: 4 << 10})
	rpc.Register(ts2.Server, "Test.Big", func(ctx context.Context, r *echoReq) (*echoResp, error) {
		return &echoResp{B: make([]byte, 8<<10)}, nil
	})
	if err := c2.Call(ctx, ts2.addr, "Test.Big", &echoReq{}, &resp); !errors.Is(err, rpc.ErrRemote) {
		t.Errorf("big response: %v", err)
	}
	if err := c2.Call(ctx, ts2.addr, mEcho, &echoReq{N: 5}, &resp); err != nil || resp.N != 5 {
		t.Errorf("after big response: %v", err)
	}
	if err := c.Call(ctx, ts.addr, mEcho, &echoReq{N: 6}, &resp); err != nil || resp.N != 6 {
		t.Errorf("after big request: %v", err)
	}
}

func TestClientClose(t *testing.T) {
	ts := startServer(t, "s1", rpc.ServerOptions{})
	c := client.New(client.Options{Addrs: []string{ts.addr}})
	done := make(chan error, 1)
	go func() { done <- c.Call(context.Background(), ts.addr, mSleep, &sleepReq{Block: true}, nil) }()
	<-ts.entered
	c.Close()
	if err := <-done; err == nil {
		t.Error("in-flight call survived Close")
	}
	if err := c.Call(context.Background(), ts.addr, mEcho, &echoReq{}, nil); !errors.Is(err, rpc.ErrClientClosed) {
		t.Errorf("after Close: %v", err)
	}
	c.Close() // idempotent
}

func TestDefaultTimeout(t *testing.T) {
	ts := startServer(t, "s1", rpc.ServerOptions{})
	c := newClient(t, client.Options{Addrs: []string{ts.addr}, Timeout: 100 * time.Millisecond})
	var resp sleepResp
	if err := c.Call(context.Background(), ts.addr, mSleep, &sleepReq{}, &resp); err != nil {
		t.Fatal(err)
	}
	<-ts.entered
	if !resp.HadDeadline || resp.Left > int64(100*time.Millisecond) {
		t.Errorf("handler deadline: had=%v left=%v", resp.HadDeadline, time.Duration(resp.Left))
	}
	err := c.CallAny(context.Background(), "", mSleep, &sleepReq{Block: true}, &resp)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("blocked call with default timeout: %v", err)
	}
	<-ts.entered
	<-ts.ctxErrs
	// The pooled call (and its timer) is reused safely.
	for i := range 50 {
		var er echoResp
		if err := c.Call(context.Background(), ts.addr, mEcho, &echoReq{N: i}, &er); err != nil || er.N != i {
			t.Fatalf("call %d after timeout: %v", i, err)
		}
	}
}

// TestNoGoroutineLeak: every goroutine of a client and a server ends when
// they are closed, including those of calls that were canceled, timed out
// or cut off.
func TestNoGoroutineLeak(t *testing.T) {
	before := runtime.NumGoroutine()
	func() {
		s := rpc.NewServer(rpc.ServerOptions{IdleTimeout: time.Second})
		release := make(chan struct{})
		rpc.Register(s, mSleep, func(ctx context.Context, r *sleepReq) (*sleepResp, error) {
			select {
			case <-ctx.Done():
			case <-release:
			}
			return &sleepResp{}, nil
		})
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		served := make(chan struct{})
		go func() { s.Serve(context.Background(), ln); close(served) }()
		c := client.New(client.Options{Addrs: []string{ln.Addr().String()}, IdleTimeout: time.Second})
		var wg sync.WaitGroup
		for i := range 20 {
			wg.Go(func() {
				ctx, cancel := context.WithTimeout(context.Background(), time.Duration(i+1)*5*time.Millisecond)
				defer cancel()
				c.CallAny(ctx, "", mSleep, &sleepReq{}, nil)
			})
		}
		wg.Wait()
		garbage, err := net.Dial("tcp", ln.Addr().String())
		if err == nil {
			garbage.Write([]byte("GHB\x01\xff\xff\xff\xff"))
			defer garbage.Close()
		}
		c.Close()
		close(release)
		if err := s.Shutdown(context.Background()); err != nil {
			t.Error(err)
		}
		<-served
	}()
	rpctest.Eventually(t, waitTime, "goroutines to end", func() error {
		if n := runtime.NumGoroutine(); n > before {
			return fmt.Errorf("%d goroutines, %d before", n, before)
		}
		return nil
	})
}
