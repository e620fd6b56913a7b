package raftmux

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ghba/ghba/rpc/rpctest"
	"github.com/hashicorp/raft"
)

// TestHeaderOverTCP sends headers to a mux over loopback TCP: a good one
// reaches its layer with the bytes after it intact; every bad one is
// closed and counted, and a silent or slow peer holds up no other
// connection.
func TestHeaderOverTCP(t *testing.T) {
	noLeaks(t)
	const headerTimeout = 300 * time.Millisecond
	long := strings.Repeat("x", MaxIDLen+1)
	tests := []struct {
		name string
		send []byte // then the connection stays open, or is half-closed
		end  bool   // half-close after send
		// count picks the counter that must grow by one.
		count func(Stats) uint64
	}{
		{"bad magic", []byte("GET / HTTP/1.1\r\n\r\n"), false, badHeader},
		{"raft without a header", []byte{0, 0x85, 0xa4, 'T', 'e', 'r', 'm'}, false, badHeader},
		{"bad version", hdr(magic, Version+1, 5, "group"), false, badHeader},
		{"too long id", hdr(magic, Version, MaxIDLen+1, long), false, badHeader},
		{"truncated", []byte("RMUX\x01\x05gr"), true, badHeader},
		{"unknown id", appendHeader(nil, "shard/zz"), false, func(s Stats) uint64 { return s.UnknownID }},
		{"silent", nil, false, timedOut},
		{"slowloris", []byte("RMUX\x01\x05gr"), false, timedOut},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, addr := startMux(t, Options{HeaderTimeout: headerTimeout})
			group := mustLayer(t, m, "group")
			before := tt.count(m.Stats())

			bad := dialRaw(t, addr)
			if _, err := bad.Write(tt.send); err != nil {
				t.Fatal(err)
			}
			if tt.end {
				if err := bad.(*net.TCPConn).CloseWrite(); err != nil {
					t.Fatal(err)
				}
			}
			// While the bad connection is open, a good one goes through.
			good := dialGood(t, addr, "group", "hello")
			assertReceives(t, acceptWithin(t, group), "hello")
			good.Close()

			waitClosed(t, bad)
			statsEventually(t, m, "the bad connection counted", func(s Stats) error {
				if got := tt.count(s); got != before+1 {
					return fmt.Errorf("counter %d, want %d (stats %+v)", got, before+1, s)
				}
				if s.Accepted["group"] != 1 || s.Pending != 0 {
					return fmt.Errorf("stats %+v, want 1 accepted for group and none pending", s)
				}
				return nil
			})
		})
	}
}

func badHeader(s Stats) uint64 { return s.BadHeader }
func timedOut(s Stats) uint64  { return s.TimedOut }

// dialGood connects to addr as a raftmux peer would, naming id, and sends
// payload after the header in the same write.
func dialGood(t *testing.T, addr, id, payload string) net.Conn {
	t.Helper()
	c := dialRaw(t, addr)
	if _, err := c.Write(append(appendHeader(nil, id), payload...)); err != nil {
		t.Fatal(err)
	}
	return c
}

// assertReceives reads len(want) bytes from c and compares them to want.
func assertReceives(t *testing.T, c net.Conn, want string) {
	t.Helper()
	if err := c.SetReadDeadline(time.Now().Add(waitFor)); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(want))
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatalf("read: %v", err)
	}
	if string(got) != want {
		t.Fatalf("read %q, want %q", got, want)
	}
}

// TestSilentPeersDoNotBlock: many connections that never send a header
// are pending at once, and a good connection is still handed over before
// any of them times out.
func TestSilentPeersDoNotBlock(t *testing.T) {
	noLeaks(t)
	const silent = 50
	m, addr := startMux(t, Options{HeaderTimeout: time.Minute})
	group := mustLayer(t, m, "group")
	conns := make([]net.Conn, silent)
	for i := range conns {
		conns[i] = dialRaw(t, addr)
	}
	statsEventually(t, m, "the silent connections pending", func(s Stats) error {
		if s.Pending != silent {
			return fmt.Errorf("%d pending, want %d", s.Pending, silent)
		}
		return nil
	})
	dialGood(t, addr, "group", "x")
	assertReceives(t, acceptWithin(t, group), "x")
	if s := m.Stats(); s.Pending < silent || s.TimedOut != 0 {
		t.Fatalf("stats %+v, want %d still pending", s, silent)
	}
	// Close closes the connections still waiting for their header.
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	for _, c := range conns {
		waitClosed(t, c)
	}
	if s := m.Stats(); s.Pending != 0 || s.TimedOut != 0 || s.Dropped != 0 {
		t.Fatalf("stats after Close %+v: want nothing pending, and nothing counted as rejected", s)
	}
}

func TestMaxPending(t *testing.T) {
	noLeaks(t)
	m, addr := startMux(t, Options{HeaderTimeout: time.Minute, MaxPending: 2})
	dialRaw(t, addr)
	dialRaw(t, addr)
	statsEventually(t, m, "two connections pending", func(s Stats) error {
		if s.Pending != 2 {
			return fmt.Errorf("%d pending", s.Pending)
		}
		return nil
	})
	waitClosed(t, dialRaw(t, addr))
	if s := m.Stats(); s.Dropped != 1 || s.Pending != 2 {
		t.Fatalf("stats %+v, want 1 dropped, 2 pending", s)
	}
}

func TestLayerRegistry(t *testing.T) {
	noLeaks(t)
	m, _ := startMux(t, Options{})
	for _, id := range []string{"", "a b", strings.Repeat("x", MaxIDLen+1)} {
		if _, err := m.Layer(id); !errors.Is(err, ErrInvalidID) {
			t.Errorf("Layer(%q) = %v, want ErrInvalidID", id, err)
		}
	}
	l := mustLayer(t, m, "group")
	if l.ID() != "group" || l.Addr().String() != m.ln.Addr().String() {
		t.Fatalf("ID %q Addr %v", l.ID(), l.Addr())
	}
	if _, err := m.Layer("group"); !errors.Is(err, ErrDuplicateID) {
		t.Fatalf("second Layer(group) = %v, want ErrDuplicateID", err)
	}
	// Closing the layer frees the id; closing it again does nothing, in
	// particular not to the new layer of the same id.
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l2 := mustLayer(t, m, "group")
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Layer("group"); !errors.Is(err, ErrDuplicateID) {
		t.Fatalf("Layer(group) after the old layer's second Close = %v, want ErrDuplicateID", err)
	}
	if _, err := l.Accept(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Accept on a closed layer = %v, want ErrClosed", err)
	}
	if _, err := l.Dial(addrOf(m), time.Second); !errors.Is(err, ErrClosed) {
		t.Fatalf("Dial on a closed layer = %v, want ErrClosed", err)
	}
	// Closing the mux closes its layers and refuses new ones.
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := l2.Accept(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Accept after the mux closed = %v, want ErrClosed", err)
	}
	if _, err := m.Layer("other"); !errors.Is(err, ErrClosed) {
		t.Fatalf("Layer after Close = %v, want ErrClosed", err)
	}
	if err := m.Serve(context.Background()); !errors.Is(err, ErrClosed) {
		t.Fatalf("Serve after Close = %v, want ErrClosed", err)
	}
}

// TestAcceptUnblocksOnClose: an Accept waiting for a connection returns
// ErrClosed when its layer closes.
func TestAcceptUnblocksOnClose(t *testing.T) {
	noLeaks(t)
	m, _ := startMux(t, Options{})
	l := mustLayer(t, m, "group")
	done := goErr(func() error { _, err := l.Accept(); return err })
	l.Close()
	if err := waitErr(t, done, "Accept after Close"); !errors.Is(err, ErrClosed) {
		t.Fatalf("Accept = %v, want ErrClosed", err)
	}
}

// TestDialAccept: a layer's Dial reaches the layer of the same id on the
// peer, both ways work, and connections of two ids do not mix.
func TestDialAccept(t *testing.T) {
	noLeaks(t)
	a, _ := startMux(t, Options{})
	b, baddr := startMux(t, Options{})
	for _, id := range []string{"group", "shard/n1", "shard/n2"} {
		la, lb := mustLayer(t, a, id), mustLayer(t, b, id)
		c, err := la.Dial(addrOf(b), time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		s := acceptWithin(t, lb)
		if _, err := c.Write([]byte("ping " + id)); err != nil {
			t.Fatal(err)
		}
		assertReceives(t, s, "ping "+id)
		if _, err := s.Write([]byte("pong")); err != nil {
			t.Fatal(err)
		}
		assertReceives(t, c, "pong")
	}
	st := b.Stats()
	for _, id := range []string{"group", "shard/n1", "shard/n2"} {
		if st.Accepted[id] != 1 {
			t.Errorf("%s accepted %d connections for %q, want 1 (%+v)", baddr, st.Accepted[id], id, st)
		}
	}
}

// addrOf returns m's address as raft names it.
func addrOf(m *Mux) raft.ServerAddress { return raft.ServerAddress(m.ln.Addr().String()) }

func TestDialErrors(t *testing.T) {
	noLeaks(t)
	m, _ := startMux(t, Options{})
	l := mustLayer(t, m, "group")
	if _, err := l.Dial(raft.ServerAddress(rpctest.DeadAddr(t)), time.Second); err == nil || errors.Is(err, ErrClosed) {
		t.Fatalf("Dial to a dead address = %v, want a dial error", err)
	}
	// A connection that breaks before the header is written.
	m.dial = func(context.Context, string, string) (net.Conn, error) {
		c, peer := net.Pipe()
		peer.Close()
		return c, nil
	}
	if _, err := l.Dial("192.0.2.1:9", time.Second); !errors.Is(err, io.ErrClosedPipe) {
		t.Fatalf("Dial over a broken connection = %v, want io.ErrClosedPipe", err)
	}
	// A dial that cannot complete ends when the layer closes.
	dialing := make(chan struct{})
	m.dial = func(ctx context.Context, _, _ string) (net.Conn, error) {
		close(dialing)
		<-ctx.Done()
		return nil, ctx.Err()
	}
	done := goErr(func() error { _, err := l.Dial("192.0.2.1:9", time.Minute); return err })
	<-dialing
	l.Close()
	if err := waitErr(t, done, "Dial after Close"); !errors.Is(err, ErrClosed) {
		t.Fatalf("Dial cut short by Close = %v, want ErrClosed", err)
	}
}

// TestLayerThatDoesNotAccept: a connection whose layer does not take it
// within HeaderTimeout is closed and counted as dropped.
func TestLayerThatDoesNotAccept(t *testing.T) {
	noLeaks(t)
	m, addr := startMux(t, Options{HeaderTimeout: 200 * time.Millisecond})
	mustLayer(t, m, "group") // nothing calls its Accept
	waitClosed(t, dialGood(t, addr, "group", ""))
	statsEventually(t, m, "the connection dropped", func(s Stats) error {
		if s.Dropped != 1 || s.Pending != 0 || s.Accepted["group"] != 0 {
			return fmt.Errorf("stats %+v, want 1 dropped", s)
		}
		return nil
	})
}

// TestLayerCloseClosesConnections: closing a layer closes the connections
// it accepted and dialed (raft's handlers then read io.EOF) and the ones
// waiting to be accepted, and other layers' connections stay up.
func TestLayerCloseClosesConnections(t *testing.T) {
	noLeaks(t)
	a, _ := startMux(t, Options{})
	b, baddr := startMux(t, Options{HeaderTimeout: time.Minute})
	la, lb := mustLayer(t, a, "shard/x"), mustLayer(t, b, "shard/x")
	oa, ob := mustLayer(t, a, "group"), mustLayer(t, b, "group")

	dialed, err := la.Dial(addrOf(b), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	accepted := acceptWithin(t, lb)
	other, err := oa.Dial(addrOf(b), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	otherAccepted := acceptWithin(t, ob)
	// A connection handed to nobody yet: nothing calls Accept on lb.
	waiting := dialGood(t, baddr, "shard/x", "")
	statsEventually(t, b, "one connection waiting for its layer", func(s Stats) error {
		if s.Pending != 1 {
			return fmt.Errorf("%d pending", s.Pending)
		}
		return nil
	})

	lb.Close()
	if _, err := accepted.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("read on a connection of the closed layer = %v, want io.EOF", err)
	}
	waitClosed(t, dialed) // the peer's end
	waitClosed(t, waiting)
	// Dropped if it was waiting for the layer, of an unknown id if its
	// header was read after the layer closed.
	statsEventually(t, b, "the waiting connection counted", func(s Stats) error {
		if s.Dropped+s.UnknownID != 1 || s.Pending != 0 {
			return fmt.Errorf("stats %+v, want 1 dropped or unknown, none pending", s)
		}
		return nil
	})

	if _, err := other.Write([]byte("still")); err != nil {
		t.Fatal(err)
	}
	assertReceives(t, otherAccepted, "still")

	// The id can be served again, by a new layer.
	lb2 := mustLayer(t, b, "shard/x")
	c, err := la.Dial(addrOf(b), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("again")); err != nil {
		t.Fatal(err)
	}
	assertReceives(t, acceptWithin(t, lb2), "again")
}

// TestServeStopsWithContext: Serve returns nil when its context ends, and
// the mux is closed then.
func TestServeStopsWithContext(t *testing.T) {
	noLeaks(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	m := New(ln, nil, Options{Logger: rpctest.Logger(t)})
	l := mustLayer(t, m, "group")
	ctx, cancel := context.WithCancel(context.Background())
	served := goErr(func() error { return m.Serve(ctx) })
	// Serving: a connection reaches the layer.
	dialGood(t, ln.Addr().String(), "group", "")
	acceptWithin(t, l)
	if err := m.Serve(ctx); err == nil || errors.Is(err, ErrClosed) {
		t.Fatalf("second Serve = %v, want an error", err)
	}
	cancel()
	if err := waitErr(t, served, "Serve after its context ended"); err != nil {
		t.Fatalf("Serve = %v", err)
	}
	if _, err := l.Accept(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Accept after Serve stopped = %v, want ErrClosed", err)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestConcurrentDials: many connections of several ids at once reach
// their layers, each with its own bytes.
func TestConcurrentDials(t *testing.T) {
	noLeaks(t)
	a, _ := startMux(t, Options{})
	b, _ := startMux(t, Options{})
	ids := []string{"group", "shard/n1", "shard/n2"}
	const perID = 20
	var wg sync.WaitGroup
	errs := make(chan error, 2*len(ids)*perID)
	for _, id := range ids {
		la, lb := mustLayer(t, a, id), mustLayer(t, b, id)
		wg.Go(func() {
			for range perID {
				c, err := lb.Accept()
				if err != nil {
					errs <- err
					return
				}
				got, err := io.ReadAll(c)
				c.Close()
				if err != nil || string(got) != id {
					errs <- fmt.Errorf("layer %q read %q, %v", id, got, err)
				}
			}
		})
		for range perID {
			wg.Go(func() {
				c, err := la.Dial(addrOf(b), waitFor)
				if err != nil {
					errs <- err
					return
				}
				defer c.Close()
				if _, err := c.Write([]byte(id)); err != nil {
					errs <- err
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for _, id := range ids {
		if got := b.Stats().Accepted[id]; got != perID {
			t.Errorf("accepted %d for %q, want %d", got, id, perID)
		}
	}
}

// flakyListener fails its first fails Accepts with a transient error.
type flakyListener struct {
	net.Listener
	mu    sync.Mutex
	fails int
}

func (l *flakyListener) Accept() (net.Conn, error) {
	l.mu.Lock()
	if l.fails > 0 {
		l.fails--
		l.mu.Unlock()
		return nil, errors.New("accept: too many open files")
	}
	l.mu.Unlock()
	return l.Listener.Accept()
}

// TestAcceptErrors: Serve retries transient accept errors, and returns
// an error when its listener is closed under it.
func TestAcceptErrors(t *testing.T) {
	noLeaks(t)
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	m := New(&flakyListener{Listener: inner, fails: 3}, nil, Options{Logger: rpctest.Logger(t)})
	l := mustLayer(t, m, "group")
	served := goErr(func() error { return m.Serve(context.Background()) })
	dialGood(t, inner.Addr().String(), "group", "x")
	assertReceives(t, acceptWithin(t, l), "x")

	inner.Close() // not by the mux
	err = waitErr(t, served, "Serve after its listener closed")
	if !errors.Is(err, net.ErrClosed) || errors.Is(err, ErrClosed) {
		t.Fatalf("Serve = %v, want the listener's net.ErrClosed", err)
	}
	// Serve's end closed the mux.
	if _, err := l.Accept(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Accept = %v, want ErrClosed", err)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestScopedLayer: a scoped layer takes connections naming a scope it
// accepts, or none; one naming another scope is closed and counted as
// refused; a scope on an unscoped layer's id, or an empty scope, names no
// layer. Its Dial names the scope current at the time of the dial.
func TestScopedLayer(t *testing.T) {
	noLeaks(t)
	// start runs a mux with the layer "group" scoped to "g2" and the
	// unscoped layer "shard/n1".
	start := func(t *testing.T) (*Mux, string, *Layer) {
		m, addr := startMux(t, Options{})
		scoped, err := m.ScopedLayer("group", Scope{
			Current: func() string { return "g2" },
			Accepts: func(s string) bool { return s == "g2" },
		})
		if err != nil {
			t.Fatal(err)
		}
		mustLayer(t, m, "shard/n1")
		return m, addr, scoped
	}
	tests := []struct {
		id     string
		handed bool
		count  func(Stats) uint64 // grows by one if not handed
	}{
		{"group@g2", true, nil},
		{"group", true, nil},
		{"group@g1", false, func(s Stats) uint64 { return s.Refused }},
		{"group@", false, func(s Stats) uint64 { return s.UnknownID }},
		{"shard/n1@g2", false, func(s Stats) uint64 { return s.UnknownID }},
	}
	for _, tt := range tests {
		t.Run(tt.id, func(t *testing.T) {
			m, addr, scoped := start(t)
			if tt.handed {
				dialGood(t, addr, tt.id, "hello")
				assertReceives(t, acceptWithin(t, scoped), "hello")
				return
			}
			before := tt.count(m.Stats())
			waitClosed(t, dialGood(t, addr, tt.id, "hello"))
			statsEventually(t, m, "the connection counted", func(s Stats) error {
				if got := tt.count(s); got != before+1 {
					return fmt.Errorf("counter %d, want %d (%+v)", got, before+1, s)
				}
				return nil
			})
		})
	}

	// A peer's scoped layer dials with its current scope.
	m, _, scoped := start(t)
	peer, _ := startMux(t, Options{})
	var peerScope atomic.Value
	peerScope.Store("g2")
	pl, err := peer.ScopedLayer("group", Scope{
		Current: func() string { return peerScope.Load().(string) },
		Accepts: func(string) bool { return true },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer pl.Close()
	c, err := pl.Dial(addrOf(m), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	acceptWithin(t, scoped)
	peerScope.Store("g1")
	refused := m.Stats().Refused
	c, err = pl.Dial(addrOf(m), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	waitClosed(t, c)
	if got := m.Stats().Refused; got != refused+1 {
		t.Fatalf("refused %d, want %d", got, refused+1)
	}

	for _, bad := range []string{"gr@up", ""} {
		if _, err := m.ScopedLayer(bad, Scope{Current: func() string { return "" }, Accepts: func(string) bool { return true }}); !errors.Is(err, ErrInvalidID) {
			t.Errorf("ScopedLayer(%q): %v, want ErrInvalidID", bad, err)
		}
	}
	if _, err := m.ScopedLayer("other", Scope{}); err == nil {
		t.Error("ScopedLayer without Current and Accepts succeeded")
	}
}
