package raftmux

import (
	"context"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
)

// Layer is the raft.StreamLayer of one Raft group of the node: Accept
// returns the connections whose header names its id, Dial connects to a
// peer's mux and names its id there. Give it to raft.NetworkTransport (see
// NewTransport); the transport's Close closes it. Its methods are safe for
// concurrent use.
type Layer struct {
	m      *Mux
	id     string
	header []byte
	scope  *Scope // nil: not scoped
	// incoming is unbuffered: a connection changes hands only when Accept
	// takes it, so none is left behind in a closed layer.
	incoming chan net.Conn
	// ctx ends when the layer (or its mux) closes: Accept returns, dials
	// and handoffs give up.
	ctx    context.Context
	cancel context.CancelFunc

	mu     sync.Mutex
	closed bool
	conns  map[*conn]struct{} // accepted and dialed, not closed yet
}

var _ raft.StreamLayer = (*Layer)(nil)

// ScopeSep separates a scoped layer's id from the scope in a header's id:
// "group@g2".
const ScopeSep = "@"

// Scope ties the connections of a layer to one incarnation of its Raft
// group, so that the traffic of another incarnation that reaches this
// node's raft port is refused instead of being handed to this node's Raft:
// a node that left a group and joined another keeps the layer's id, and
// the old group's leader, until it notices, keeps sending it heartbeats
// which would make the node's new Raft follow the old group (raft takes
// any leader with a newer term).
//
// Dial names the scope Current returns ("id@scope"; "id" alone when it
// is empty); the mux hands a connection naming a scope to the layer only
// if Accepts returns true for it. A connection naming no scope is always
// handed (a peer that has none yet).
type Scope struct {
	// Current returns the scope this node's connections name: the
	// incarnation it belongs to, or "" if it does not know it yet. Called
	// on every Dial.
	Current func() string
	// Accepts reports whether a connection naming scope s is for the
	// incarnation this node serves now. Called for every such connection.
	Accepts func(s string) bool
}

// newLayer returns the layer of id on m, scoped if scope is not nil.
func newLayer(m *Mux, id string, scope *Scope) *Layer {
	ctx, cancel := context.WithCancel(m.ctx)
	return &Layer{
		m:        m,
		id:       id,
		scope:    scope,
		header:   appendHeader(nil, id),
		incoming: make(chan net.Conn),
		ctx:      ctx,
		cancel:   cancel,
		conns:    make(map[*conn]struct{}),
	}
}

// ID returns the Raft group id the layer was registered under.
func (l *Layer) ID() string { return l.id }

// Addr returns the node's advertised raft address (the mux's), which raft
// uses as the transport's local address.
func (l *Layer) Addr() net.Addr { return l.m.adv }

// Accept waits for the next connection of the layer's Raft group. It
// returns an error wrapping ErrClosed once the layer or its mux is closed.
func (l *Layer) Accept() (net.Conn, error) {
	select {
	case c := <-l.incoming:
		tc, err := l.track(c, "accept")
		if err != nil {
			c.Close()
			return nil, err
		}
		l.m.countAccepted(l.id)
		return tc, nil
	case <-l.ctx.Done():
		return nil, l.closedErr("accept")
	}
}

// Dial connects to the mux at address and writes the header naming the
// layer's id (and the scope's current value, if the layer is scoped),
// within timeout (Options.DialTimeout if timeout is not
// positive); closing the layer cancels it.
func (l *Layer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	if timeout <= 0 {
		timeout = l.m.opts.DialTimeout
	}
	header := l.header
	if l.scope != nil {
		if s := l.scope.Current(); s != "" {
			id := l.id + ScopeSep + s
			if err := validID(id); err != nil {
				return nil, fmt.Errorf("raftmux: layer %q: scope %q: %w", l.id, s, err)
			}
			header = appendHeader(nil, id)
		}
	}
	ctx, cancel := context.WithTimeout(l.ctx, timeout)
	defer cancel()
	c, err := l.m.dial(ctx, "tcp", string(address))
	if err != nil {
		if l.ctx.Err() != nil {
			return nil, l.closedErr("dial " + string(address))
		}
		return nil, fmt.Errorf("raftmux: layer %q: dial %s: %w", l.id, address, err)
	}
	deadline, _ := ctx.Deadline()
	err = c.SetWriteDeadline(deadline)
	if err == nil {
		_, err = c.Write(header)
	}
	if err == nil {
		err = c.SetWriteDeadline(time.Time{})
	}
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("raftmux: layer %q: dial %s: writing the header: %w", l.id, address, err)
	}
	tc, err := l.track(c, "dial "+string(address))
	if err != nil {
		c.Close()
		return nil, err
	}
	return tc, nil
}

// Close unregisters the layer (its id may be registered again), makes
// Accept return ErrClosed, and closes the layer's connections: those
// waiting to be accepted, and those Accept and Dial returned (reading one
// then gives io.EOF, so that raft ends its handlers quietly). It always
// returns nil and is idempotent.
func (l *Layer) Close() error {
	l.m.unregister(l)
	l.shutdown()
	return nil
}

// shutdown closes the layer and its connections.
func (l *Layer) shutdown() {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return
	}
	l.closed = true
	conns := l.conns
	l.conns = nil
	l.mu.Unlock()
	l.cancel()
	for c := range conns {
		c.kill()
	}
}

// track wraps c so that Close closes it, or fails with ErrClosed (for op)
// if the layer is closed.
func (l *Layer) track(c net.Conn, op string) (*conn, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil, l.closedErr(op)
	}
	tc := &conn{Conn: c, l: l}
	l.conns[tc] = struct{}{}
	return tc, nil
}

// forget stops tracking c.
func (l *Layer) forget(c *conn) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.conns, c)
}

// closedErr is the error of op on a closed layer.
func (l *Layer) closedErr(op string) error {
	return fmt.Errorf("raftmux: layer %q: %s: %w", l.id, op, ErrClosed)
}

// conn is a connection of a layer.
type conn struct {
	net.Conn
	l *Layer
	// killed is set when the layer closed the connection.
	killed atomic.Bool
}

// Read reads from the connection; once the layer has closed it, its error
// is io.EOF.
func (c *conn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if err != nil && c.killed.Load() {
		err = io.EOF
	}
	return n, err
}

// Close closes the connection and forgets it in its layer.
func (c *conn) Close() error {
	c.l.forget(c)
	return c.Conn.Close()
}

// kill closes the connection on behalf of its closing layer.
func (c *conn) kill() {
	c.killed.Store(true)
	c.Conn.Close()
}
