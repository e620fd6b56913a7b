package rpc

import (
	"context"
	"fmt"
	"sync"

	"github.com/ghba/ghba/rpc/internal/wire"
)

// Notifications: a server may tell a client something on a connection the
// client opened (the only message a server sends unasked), and wait until
// the client has handled it. The metadata cache uses them to revoke the
// leases under which clients cache inodes (docs/design.md, "Client
// cache"): before a write is applied, the home notifies every client
// holding a lease on a path it changes, and waits for each to drop its
// entry (or for the lease to expire).
//
//	notify = kind=6 seq:uint64 body      (server → client; body: Invalidation)
//	ack    = kind=7 seq:uint64           (client → server, after handling it)
//
// seq numbers a connection's notifications (from 1, increasing). A server
// sends notifications only to a client that asked for what they concern
// (a stat with Lease); a client that receives one it has no use for still
// acknowledges it. The client side is in package rpc/client (notify.go).

// Invalidation tells a client to drop cached entries: Paths exactly, and
// every path at or under one of Prefixes.
type Invalidation struct {
	Paths    []string `json:"paths,omitempty"`
	Prefixes []string `json:"prefixes,omitempty"`
}

// Peer is the client connection a request arrived on, through which the
// server may notify the client (PeerFrom).
type Peer struct {
	c *serverConn

	mu   sync.Mutex
	seq  uint64
	acks map[uint64]chan struct{}
}

type peerKey struct{}

// PeerFrom returns the connection of the request whose context ctx is (or
// derives from), or nil outside a request.
func PeerFrom(ctx context.Context) *Peer {
	p, _ := ctx.Value(peerKey{}).(*Peer)
	return p
}

// Done is closed when the connection ends: no notification reaches the
// client any more.
func (p *Peer) Done() <-chan struct{} { return p.c.ctx.Done() }

// String names the peer by its remote address.
func (p *Peer) String() string { return p.c.remote }

// Notify sends inv to the client and waits until it acknowledges having
// handled it. It fails with the connection's end (an error matching
// ErrUnavailable) or ctx's.
func (p *Peer) Notify(ctx context.Context, inv *Invalidation) error {
	enc := p.c.s.codec.GetEncoder()
	defer p.c.s.codec.PutEncoder(enc)
	body, err := enc.Encode(inv)
	if err != nil {
		return fmt.Errorf("rpc: encoding a notification: %w", err)
	}
	if wire.ControlFrameLen+len(body) > p.c.s.opts.MaxFrameSize {
		return fmt.Errorf("rpc: notification of %d bytes exceeds the frame limit", len(body))
	}
	ack := make(chan struct{})
	p.mu.Lock()
	p.seq++
	seq := p.seq
	if p.acks == nil {
		p.acks = make(map[uint64]chan struct{})
	}
	p.acks[seq] = ack
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.acks, seq)
		p.mu.Unlock()
	}()
	buf, err := p.c.w.Begin()
	if err != nil {
		p.c.w.Abort()
		return fmt.Errorf("rpc: notifying %s: %w: %w", p.c.remote, ErrUnavailable, err)
	}
	buf = wire.AppendNotifyHeader(buf, len(body), seq)
	if err := p.c.w.Commit(append(buf, body...)); err != nil {
		return fmt.Errorf("rpc: notifying %s: %w: %w", p.c.remote, ErrUnavailable, err)
	}
	select {
	case <-ack:
		return nil
	case <-p.c.ctx.Done():
		return fmt.Errorf("rpc: notifying %s: %w", p.c.remote, ErrUnavailable)
	case <-ctx.Done():
		return fmt.Errorf("rpc: notifying %s: %w", p.c.remote, ctx.Err())
	}
}

// acked handles an ack frame.
func (p *Peer) acked(seq uint64) {
	p.mu.Lock()
	ack := p.acks[seq]
	delete(p.acks, seq)
	p.mu.Unlock()
	if ack != nil {
		close(ack)
	}
}
