package raftmux

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ghba/ghba/node/internal/backoff"
	"github.com/ghba/ghba/node/internal/tasks"
)

// Errors a caller can check with errors.Is.
var (
	// ErrClosed reports a Mux or Layer that has been closed.
	ErrClosed = errors.New("closed")
	// ErrDuplicateID reports a Layer id that is already registered.
	ErrDuplicateID = errors.New("id already registered")
	// ErrInvalidID reports an id that cannot name a Raft group (see
	// MaxIDLen): asked of Mux.Layer, or read in a header.
	ErrInvalidID = errors.New("invalid raft group id")
)

// Defaults of Options.
const (
	DefaultHeaderTimeout = 5 * time.Second
	DefaultDialTimeout   = 10 * time.Second
	DefaultMaxPending    = 256
)

// Options configure a Mux. The zero value takes every default.
type Options struct {
	// Logger receives what the mux has to say: rejected connections at
	// debug level (a peer with another header version at warn), accept
	// errors at warn. Default: discarded.
	Logger *slog.Logger
	// HeaderTimeout bounds the time from accepting a connection to handing
	// it to its layer: the peer must send its header, and the layer take
	// the connection, within it, or the connection is closed. Default
	// DefaultHeaderTimeout.
	HeaderTimeout time.Duration
	// DialTimeout bounds a Layer's Dial (connecting and writing the
	// header) when raft passes no timeout. Default DefaultDialTimeout.
	DialTimeout time.Duration
	// MaxPending caps the connections accepted but not yet handed to a
	// layer (waiting for their header or for their layer); a connection
	// accepted beyond it is closed at once. Default DefaultMaxPending.
	MaxPending int
	// Dial connects a Layer to a peer's raft port (for example with TLS).
	// Default: a net.Dialer's DialContext.
	Dial func(ctx context.Context, network, address string) (net.Conn, error)
}

// withDefaults returns o with its zero fields set to their defaults.
func (o Options) withDefaults() Options {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.HeaderTimeout <= 0 {
		o.HeaderTimeout = DefaultHeaderTimeout
	}
	if o.DialTimeout <= 0 {
		o.DialTimeout = DefaultDialTimeout
	}
	if o.MaxPending <= 0 {
		o.MaxPending = DefaultMaxPending
	}
	if o.Dial == nil {
		o.Dial = new(net.Dialer).DialContext
	}
	return o
}

// Stats are the counters of a Mux since New. Every rejected connection is
// counted once, in BadHeader, TimedOut, UnknownID, Refused or Dropped; connections
// closed because the mux was closing are not counted.
type Stats struct {
	// Accepted counts, per id, the connections handed to that id's layer
	// (over every layer registered under the id).
	Accepted map[string]uint64
	// BadHeader counts connections whose header was malformed (magic,
	// version or id) or cut short.
	BadHeader uint64
	// TimedOut counts connections that sent no complete header within
	// HeaderTimeout.
	TimedOut uint64
	// UnknownID counts well-formed headers naming no registered layer.
	UnknownID uint64
	// Refused counts connections for a scoped layer whose scope the layer
	// did not accept (see Scope): traffic of another incarnation of the
	// Raft group, such as a group this node has left.
	Refused uint64
	// Dropped counts connections closed before any header was read
	// (MaxPending reached) or after it (their layer was closed, or did not
	// accept within HeaderTimeout).
	Dropped uint64
	// Pending is the number of connections accepted and not yet handed
	// to a layer or closed.
	Pending int
}

// Mux serves the Raft groups of a node on one listener: each Layer is the
// raft.StreamLayer of one group. Its methods are safe for concurrent use.
type Mux struct {
	ln   net.Listener
	adv  net.Addr
	opts Options
	log  *slog.Logger
	// dial connects the layers' Dial (a net.Dialer's; tests replace it).
	dial func(ctx context.Context, network, address string) (net.Conn, error)

	// ctx ends on close: it stops the accept loop's backoff, the routing
	// goroutines' handoffs and the layers' dials.
	ctx    context.Context
	cancel context.CancelFunc
	// routes runs one goroutine per connection waiting for its header.
	routes tasks.Group
	// serving counts the running Serve (0 or 1); Close waits for it.
	serving  sync.WaitGroup
	stopOnce sync.Once
	lnErr    error // the listener's Close error, set in stop

	mu      sync.Mutex
	closed  bool
	served  bool                  // Serve was called
	layers  map[string]*Layer     // registered layers by id
	pending map[net.Conn]struct{} // accepted, not handed to a layer yet
	byID    map[string]uint64     // Stats.Accepted

	badHdr  atomic.Uint64 // Stats.BadHeader
	timeout atomic.Uint64 // Stats.TimedOut
	unknown atomic.Uint64 // Stats.UnknownID
	refused atomic.Uint64 // Stats.Refused
	dropped atomic.Uint64 // Stats.Dropped
}

// New returns a Mux that will accept on ln (it takes ln over: Close closes
// it) and whose layers advertise advertise, the address peers dial for
// this node's raft port; it must be concrete (not 0.0.0.0), raft puts it
// in its configurations. A nil advertise stands for ln.Addr(). Nothing is
// accepted before Serve.
func New(ln net.Listener, advertise net.Addr, opts Options) *Mux {
	if advertise == nil {
		advertise = ln.Addr()
	}
	opts = opts.withDefaults()
	ctx, cancel := context.WithCancel(context.Background())
	return &Mux{
		ln:      ln,
		adv:     advertise,
		opts:    opts,
		log:     opts.Logger,
		dial:    opts.Dial,
		ctx:     ctx,
		cancel:  cancel,
		layers:  make(map[string]*Layer),
		pending: make(map[net.Conn]struct{}),
		byID:    make(map[string]uint64),
	}
}

// Serve accepts connections until ctx ends or Close is called, and then
// closes the mux (as Close does) and returns once every connection
// goroutine has ended. It returns nil after such a stop, the listener's
// error if the listener failed for good (it retries other accept errors
// with a backoff), and an error wrapping ErrClosed if the mux was closed
// before. Serve may be called once.
func (m *Mux) Serve(ctx context.Context) error {
	m.mu.Lock()
	switch {
	case m.closed:
		m.mu.Unlock()
		return fmt.Errorf("raftmux: serve: %w", ErrClosed)
	case m.served:
		m.mu.Unlock()
		return errors.New("raftmux: serve: already called")
	}
	m.served = true
	m.serving.Add(1)
	m.mu.Unlock()
	defer m.serving.Done()

	stopOnCtx := context.AfterFunc(ctx, m.stop)
	defer stopOnCtx()
	err := m.acceptLoop()
	m.stop() // returns once a concurrent stop (ctx, Close) has finished
	m.routes.Wait()
	return err
}

// acceptLoop accepts connections and starts routing each until the mux
// stops or its listener fails for good.
func (m *Mux) acceptLoop() error {
	b := backoff.New(5*time.Millisecond, time.Second)
	for {
		c, err := m.ln.Accept()
		if err != nil {
			if m.isClosed() {
				return nil
			}
			if errors.Is(err, net.ErrClosed) {
				return fmt.Errorf("raftmux: accept: %w", err)
			}
			m.log.Warn("raftmux: accept failed; retrying", "err", err, "retry_in", b.Current())
			if b.Wait(m.ctx) != nil {
				return nil
			}
			continue
		}
		b.Reset()
		m.admit(c)
	}
}

// admit registers c as pending and starts its routing goroutine, or closes
// it (the mux is closing, or MaxPending is reached).
func (m *Mux) admit(c net.Conn) {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		c.Close()
		return
	}
	if len(m.pending) >= m.opts.MaxPending {
		m.mu.Unlock()
		m.dropped.Add(1)
		m.log.Debug("raftmux: too many connections waiting for their header; closing a new one",
			"remote", c.RemoteAddr().String(), "max_pending", m.opts.MaxPending)
		c.Close()
		return
	}
	m.pending[c] = struct{}{}
	m.mu.Unlock()
	if !m.routes.Go(func() { m.route(c) }) { // the mux closed meanwhile
		m.release(c)
		c.Close()
	}
}

// release forgets c as pending.
func (m *Mux) release(c net.Conn) {
	m.mu.Lock()
	delete(m.pending, c)
	m.mu.Unlock()
}

// route reads c's header and hands c to the layer it names, within
// HeaderTimeout of now, or closes c. It runs in its own goroutine: a slow
// peer holds up nothing else.
func (m *Mux) route(c net.Conn) {
	deadline := time.Now().Add(m.opts.HeaderTimeout)
	handed := false
	defer func() {
		m.release(c)
		if !handed {
			c.Close()
		}
	}()
	remote := c.RemoteAddr().String()
	_ = c.SetReadDeadline(deadline) // an error shows in the read
	id, err := readHeader(c)
	if err != nil {
		m.rejected(remote, err)
		return
	}
	if err := c.SetReadDeadline(time.Time{}); err != nil {
		return // closed meanwhile: the mux is closing
	}
	l, scope := m.lookup(id)
	if l == nil {
		m.unknown.Add(1)
		m.log.Debug("raftmux: connection for a raft group this node does not serve; closed",
			"id", id, "remote", remote)
		return
	}
	if scope != "" && !l.scope.Accepts(scope) {
		m.refused.Add(1)
		m.log.Debug("raftmux: connection for another incarnation of a raft group; closed",
			"id", l.id, "scope", scope, "remote", remote)
		return
	}
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case l.incoming <- c: // Accept counts it
		handed = true
	case <-l.ctx.Done():
		if !m.isClosed() {
			m.dropped.Add(1)
			m.log.Debug("raftmux: the raft group's layer closed before taking a connection; closed",
				"id", id, "remote", remote)
		}
	case <-t.C:
		m.dropped.Add(1)
		m.log.Warn("raftmux: the raft group's layer did not accept a connection in time; closed",
			"id", id, "remote", remote, "header_timeout", m.opts.HeaderTimeout)
	}
}

// rejected counts and logs a connection whose header readHeader refused.
func (m *Mux) rejected(remote string, err error) {
	switch {
	case m.isClosed():
		// closed by Close, not the peer's doing
	case errors.Is(err, os.ErrDeadlineExceeded):
		m.timeout.Add(1)
		m.log.Debug("raftmux: no header in time; connection closed", "remote", remote,
			"header_timeout", m.opts.HeaderTimeout)
	case errors.Is(err, errBadVersion):
		m.badHdr.Add(1)
		m.log.Warn("raftmux: a peer speaks another raftmux version; connection closed",
			"remote", remote, "err", err)
	default:
		m.badHdr.Add(1)
		m.log.Debug("raftmux: bad header; connection closed", "remote", remote, "err", err)
	}
}

// lookup returns the layer a header's id names, nil if none: the layer
// registered under id, or for "base@scope" the scoped layer registered
// under base, with the scope.
func (m *Mux) lookup(id string) (*Layer, string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if l := m.layers[id]; l != nil {
		return l, ""
	}
	base, scope, ok := strings.Cut(id, ScopeSep)
	if l := m.layers[base]; ok && l != nil && l.scope != nil && scope != "" {
		return l, scope
	}
	return nil, ""
}

// isClosed reports whether the mux is closed or closing.
func (m *Mux) isClosed() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.closed
}

// Layer registers and returns the raft.StreamLayer of the Raft group id
// (1..MaxIDLen bytes of printable ASCII, such as "group" or "shard/n3").
// It fails with an error wrapping ErrInvalidID, ErrDuplicateID (a layer
// with this id is registered and not closed) or ErrClosed (the mux is
// closed). A closed layer's id may be registered again.
func (m *Mux) Layer(id string) (*Layer, error) {
	return m.register(id, nil)
}

// ScopedLayer registers and returns the raft.StreamLayer of the Raft group
// id whose connections name an incarnation of the group (see Scope). The
// id must not contain ScopeSep; errors are those of Layer.
func (m *Mux) ScopedLayer(id string, scope Scope) (*Layer, error) {
	if strings.Contains(id, ScopeSep) {
		return nil, fmt.Errorf("raftmux: layer %q: %w: a scoped layer's id holds no %q", id, ErrInvalidID, ScopeSep)
	}
	if scope.Current == nil || scope.Accepts == nil {
		return nil, fmt.Errorf("raftmux: layer %q: a scope needs Current and Accepts", id)
	}
	return m.register(id, &scope)
}

// register registers the layer of id, scoped if scope is not nil.
func (m *Mux) register(id string, scope *Scope) (*Layer, error) {
	if err := validID(id); err != nil {
		return nil, fmt.Errorf("raftmux: layer %q: %w", id, err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, fmt.Errorf("raftmux: layer %q: %w", id, ErrClosed)
	}
	if _, ok := m.layers[id]; ok {
		return nil, fmt.Errorf("raftmux: layer %q: %w", id, ErrDuplicateID)
	}
	l := newLayer(m, id, scope)
	m.layers[id] = l
	return l, nil
}

// countAccepted counts a connection a layer of id accepted.
func (m *Mux) countAccepted(id string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.byID[id]++
}

// unregister removes l from the registered layers if it still is the one
// registered under its id.
func (m *Mux) unregister(l *Layer) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.layers[l.id] == l {
		delete(m.layers, l.id)
	}
}

// Stats returns the mux's counters.
func (m *Mux) Stats() Stats {
	m.mu.Lock()
	defer m.mu.Unlock()
	return Stats{
		Accepted:  maps.Clone(m.byID),
		BadHeader: m.badHdr.Load(),
		TimedOut:  m.timeout.Load(),
		UnknownID: m.unknown.Load(),
		Refused:   m.refused.Load(),
		Dropped:   m.dropped.Load(),
		Pending:   len(m.pending),
	}
}

// Close stops the mux: it closes the listener, the connections waiting for
// their header and every layer (their Accept returns ErrClosed, their
// connections are closed), and waits for Serve and every goroutine of the
// mux to end. Close the raft transports over the layers first, so that
// raft does not log failing accepts. It returns the listener's Close error
// and is idempotent.
func (m *Mux) Close() error {
	m.stop()
	m.serving.Wait()
	m.routes.Wait()
	return m.lnErr
}

// stop closes everything without waiting for the goroutines. A second
// call returns once the first has finished.
func (m *Mux) stop() {
	m.stopOnce.Do(func() {
		m.mu.Lock()
		m.closed = true
		pending := make([]net.Conn, 0, len(m.pending))
		for c := range m.pending {
			pending = append(pending, c)
		}
		layers := make([]*Layer, 0, len(m.layers))
		for _, l := range m.layers {
			layers = append(layers, l)
		}
		clear(m.layers)
		m.mu.Unlock()

		m.cancel()
		m.routes.Close()
		if err := m.ln.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
			m.lnErr = fmt.Errorf("raftmux: closing the listener: %w", err)
		}
		for _, c := range pending {
			c.Close()
		}
		for _, l := range layers {
			l.shutdown()
		}
	})
}
