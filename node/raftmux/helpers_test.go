package raftmux

import (
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/ghba/ghba/rpc/rpctest"
	"go.uber.org/goleak"
)

// waitFor is how long a test waits for a condition it polls.
const waitFor = 10 * time.Second

// noLeaks makes t fail if it leaves a goroutine behind. Call it first: its
// check then runs after every other cleanup.
func noLeaks(t *testing.T) {
	t.Helper()
	opts := []goleak.Option{goleak.IgnoreCurrent()}
	t.Cleanup(func() { goleak.VerifyNone(t, opts...) })
}

// startMux starts a Mux on 127.0.0.1:0 serving until t ends, and returns
// it with its address. The test fails if Serve returns an error other
// than ErrClosed (the test closed the mux before Serve began).
func startMux(t testing.TB, opts Options) (*Mux, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if opts.Logger == nil {
		opts.Logger = rpctest.Logger(t, "mux", ln.Addr().String())
	}
	m := New(ln, nil, opts)
	served := goErr(func() error { return m.Serve(context.Background()) })
	t.Cleanup(func() {
		if err := m.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		if err := <-served; err != nil && !errors.Is(err, ErrClosed) {
			t.Errorf("Serve: %v", err)
		}
	})
	return m, ln.Addr().String()
}

// mustLayer registers id on m.
func mustLayer(t testing.TB, m *Mux, id string) *Layer {
	t.Helper()
	l, err := m.Layer(id)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// dialRaw connects to addr without a header and closes the connection
// when t ends.
func dialRaw(t testing.TB, addr string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, waitFor)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// waitClosed waits for the peer to close c: a read that ends in EOF or a
// reset (not a timeout) within waitFor, with nothing read.
func waitClosed(t *testing.T, c net.Conn) {
	t.Helper()
	if err := c.SetReadDeadline(time.Now().Add(waitFor)); err != nil {
		t.Fatal(err)
	}
	var b [1]byte
	n, err := c.Read(b[:])
	var ne net.Error
	switch {
	case n > 0:
		t.Fatalf("read %q, want the connection closed", b[:n])
	case errors.Is(err, io.EOF):
	case errors.As(err, &ne) && ne.Timeout():
		t.Fatalf("connection still open after %v", waitFor)
	case err == nil:
		t.Fatal("read nothing and no error")
	}
}

// acceptWithin calls l.Accept and fails t if it does not return within
// waitFor.
func acceptWithin(t *testing.T, l *Layer) net.Conn {
	t.Helper()
	var c net.Conn
	done := goErr(func() (err error) { c, err = l.Accept(); return err })
	t.Cleanup(func() { l.Close() }) // ends an Accept that waitErr gave up on
	if err := waitErr(t, done, "Accept on "+l.ID()); err != nil {
		t.Fatalf("Accept: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// goErr runs fn in a goroutine; waitErr waits for its error.
func goErr(fn func() error) <-chan error {
	ch := make(chan error, 1)
	go func() { ch <- fn() }()
	return ch
}

// waitErr returns the error fn of goErr returned, failing t if fn does not
// return within waitFor.
func waitErr(t *testing.T, ch <-chan error, what string) error {
	t.Helper()
	select {
	case err := <-ch:
		return err
	case <-time.After(waitFor):
		t.Fatalf("%s: still running after %v", what, waitFor)
		return nil
	}
}

// statsEventually waits until cond accepts m's Stats.
func statsEventually(t *testing.T, m *Mux, what string, cond func(Stats) error) {
	t.Helper()
	rpctest.Eventually(t, waitFor, what, func() error { return cond(m.Stats()) })
}
