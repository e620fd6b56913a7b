package client

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ghba/ghba/rpc"
	"github.com/ghba/ghba/rpc/internal/wire"
)

// outcome classifies how a call ended, which decides whether it may be
// retried on another node.
type outcome int

const (
	outcomeOK       outcome = iota
	outcomeRemote           // the server answered with an error; final
	outcomeNotSent          // certainly not executed: safe to send elsewhere
	outcomeUnknown          // may have been executed: only idempotent calls are retried
	outcomeLocal            // failed before sending for a reason another node would not fix
	outcomeCanceled         // the caller's context ended after the request was sent
	outcomeExpired          // the caller's deadline passed before the request was sent
)

// call is one request waiting for its response. Calls are pooled; the
// reader touches a call only between taking it out of pending and
// signaling done.
type call struct {
	seq     uint64
	done    chan struct{} // capacity 1; one signal per use
	code    rpc.Code
	msg     string
	buf     *[]byte // frame buffer holding body (recycled by the caller)
	body    []byte
	err     error       // transport error
	notSent bool        // with err: the server never executed the request
	timer   *time.Timer // reused for the client's default deadline
}

// clientConn is one pooled connection to a server. A reader goroutine
// matches responses to pending calls by seq.
type clientConn struct {
	cl   *Client
	pool *addrPool
	addr string
	nc   net.Conn
	br   *bufio.Reader
	w    *wire.Writer
	hdr  [wire.FrameLenSize]byte

	users atomic.Int32 // calls using this connection now (load for picking)
	used  atomic.Bool  // used since the janitor last looked

	mu      sync.Mutex
	seq     uint64 // last seq written; guarded by w's lock
	pending map[uint64]*call
	closed  bool
	err     error
	goaway  bool
	lastSeq uint64 // from goaway: requests above it were not executed
	done    chan struct{}
}

func newClientConn(cl *Client, p *addrPool, addr string, nc net.Conn) *clientConn {
	c := &clientConn{
		cl:      cl,
		pool:    p,
		addr:    addr,
		nc:      nc,
		br:      bufio.NewReaderSize(nc, 16<<10),
		w:       wire.NewWriter(nc, 16<<10, cl.opts.WriteTimeout),
		pending: make(map[uint64]*call),
		done:    make(chan struct{}),
	}
	// Sent with the first request, ahead of it.
	first := []byte(wire.Preface)
	if cl.opts.Token != "" {
		first = wire.AppendAuth(first, cl.opts.Token)
	}
	c.w.Queue(first)
	return c
}

// readLoop reads responses until the connection fails.
func (c *clientConn) readLoop() {
	defer close(c.done)
	for {
		b, err := wire.ReadFrame(c.br, &c.hdr, c.cl.opts.MaxFrameSize, &c.cl.bufs)
		if err != nil {
			c.fail(err)
			return
		}
		switch (*b)[0] {
		case wire.KindResponse:
			h, err := wire.ParseResponse(*b)
			if err != nil {
				c.cl.bufs.Put(b)
				c.fail(err)
				return
			}
			c.mu.Lock()
			cl := c.pending[h.Seq]
			delete(c.pending, h.Seq)
			c.mu.Unlock()
			if cl == nil { // the caller gave up
				c.cl.bufs.Put(b)
				continue
			}
			cl.code = rpc.Code(h.Code)
			if cl.code == rpc.CodeOK {
				cl.buf, cl.body = b, h.Body
			} else {
				cl.msg = string(h.Msg)
				c.cl.bufs.Put(b)
			}
			cl.done <- struct{}{}
		case wire.KindNotify:
			err := c.onNotify(*b)
			c.cl.bufs.Put(b)
			if err != nil {
				c.fail(err)
				return
			}
		case wire.KindGoAway:
			last, err := wire.ParseControl(*b, wire.KindGoAway)
			c.cl.bufs.Put(b)
			if err != nil {
				c.fail(err)
				return
			}
			c.onGoAway(last)
		default:
			kind := (*b)[0]
			c.cl.bufs.Put(b)
			c.fail(fmt.Errorf("%w: unexpected frame kind %d", rpc.ErrProtocol, kind))
			return
		}
	}
}

// onGoAway stops new calls on the connection and fails the pending calls
// the server did not accept, as not executed.
func (c *clientConn) onGoAway(last uint64) {
	c.pool.remove(c)
	c.mu.Lock()
	c.goaway, c.lastSeq = true, last
	var refused []*call
	for seq, cl := range c.pending {
		if seq > last {
			refused = append(refused, cl)
			delete(c.pending, seq)
		}
	}
	empty := len(c.pending) == 0
	c.mu.Unlock()
	for _, cl := range refused {
		cl.err, cl.notSent = rpc.ErrShuttingDown, true
		cl.done <- struct{}{}
	}
	if empty {
		c.close(rpc.ErrShuttingDown)
	}
}

// fail closes the connection after err and fails every pending call.
// Calls above a goaway's last seq are reported as not executed.
func (c *clientConn) fail(err error) {
	c.pool.remove(c)
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed, c.err = true, err
	pending := c.pending
	c.pending = nil
	goaway, last := c.goaway, c.lastSeq
	c.mu.Unlock()
	c.nc.Close()
	for seq, cl := range pending {
		cl.err = err
		cl.notSent = goaway && seq > last
		cl.done <- struct{}{}
	}
}

// close closes the connection; the reader then fails pending calls.
func (c *clientConn) close(err error) {
	c.fail(err)
}

// roundTrip sends one request and waits for its response. It returns the
// outcome class and, unless outcomeOK, the error. resp is decoded from the
// response body.
func (c *clientConn) roundTrip(ctx context.Context, defDeadline time.Time, method string, body []byte, resp any) (outcome, error) {
	var timeout int64
	dl, ok := ctx.Deadline()
	if !ok {
		dl = defDeadline
	}
	if !dl.IsZero() {
		t := time.Until(dl)
		if t <= 0 {
			return outcomeExpired, context.DeadlineExceeded
		}
		timeout = int64(t)
	}
	cl := c.cl.getCall()
	var timerC <-chan time.Time
	if !ok && timeout > 0 { // enforce the default deadline with the call's own timer
		if cl.timer == nil {
			cl.timer = time.NewTimer(time.Duration(timeout))
		} else {
			cl.timer.Reset(time.Duration(timeout))
		}
		timerC = cl.timer.C // stopped by putCall
	}

	w := c.w
	buf, err := w.Begin()
	if err != nil {
		w.Abort()
		c.cl.putCall(cl)
		return outcomeNotSent, err
	}
	c.mu.Lock()
	if c.closed || c.goaway {
		err := c.err
		if err == nil {
			err = rpc.ErrShuttingDown
		}
		c.mu.Unlock()
		c.pool.remove(c) // it may have failed before get pooled it
		w.Abort()
		c.cl.putCall(cl)
		return outcomeNotSent, err
	}
	c.seq++ // under w's lock: seqs go out in increasing order
	cl.seq = c.seq
	c.pending[cl.seq] = cl
	c.mu.Unlock()
	buf = wire.AppendRequestHeader(buf, len(body), cl.seq, timeout, method)
	if err := w.Commit(append(buf, body...)); err != nil {
		// The request may have gone out in part or whole (a batched write
		// can fail after some of it reached the server).
		c.fail(err)
	}

	var gaveUp error
	select {
	case <-cl.done:
	case <-ctx.Done():
		gaveUp = ctx.Err()
	case <-timerC:
		gaveUp = context.DeadlineExceeded
	}
	if gaveUp != nil {
		c.mu.Lock()
		_, mine := c.pending[cl.seq]
		if mine {
			delete(c.pending, cl.seq)
		}
		c.mu.Unlock()
		if mine {
			c.sendCancel(cl.seq)
			c.cl.putCall(cl)
			return outcomeCanceled, gaveUp
		}
		<-cl.done // the reader is delivering the answer; take it
	}

	defer c.cl.putCall(cl)
	if cl.err != nil {
		if cl.notSent {
			return outcomeNotSent, cl.err
		}
		return outcomeUnknown, cl.err
	}
	if cl.code != rpc.CodeOK {
		if cl.code == rpc.CodeShuttingDown {
			return outcomeNotSent, cl.code.Err(cl.msg)
		}
		return outcomeRemote, cl.code.Err(cl.msg)
	}
	err = nil
	if resp != nil {
		err = c.cl.codec.Unmarshal(cl.body, resp)
	}
	c.cl.bufs.Put(cl.buf)
	if err != nil {
		return outcomeRemote, fmt.Errorf("%w: decoding %s response: %v", rpc.ErrProtocol, method, err)
	}
	return outcomeOK, nil
}

// sendCancel tells the server the caller gave up on seq. It is best effort
// and never waits behind other writers.
func (c *clientConn) sendCancel(seq uint64) {
	buf, ok := c.w.BeginIfRoom(true)
	if !ok {
		return
	}
	c.w.CommitNoWait(wire.AppendControl(buf, wire.KindCancel, seq))
}
