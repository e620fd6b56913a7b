package rpc

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/ghba/ghba/rpc/internal/wire"
)

// ServerOptions configure a Server. The zero value is usable.
type ServerOptions struct {
	// Logger receives connection and handler problems; nil discards them.
	Logger *slog.Logger
	// MaxFrameSize limits the size of a frame in either direction
	// (default DefaultMaxFrameSize). Larger frames close the connection.
	MaxFrameSize int
	// MaxConcurrent bounds the handlers running at once across all
	// connections (default 256). When it is reached, connections stop
	// reading new requests until a handler finishes (back-pressure).
	MaxConcurrent int
	// MaxConcurrentPerConn bounds the handlers running at once for one
	// connection (default 64, at most MaxConcurrent): a client that
	// floods requests, or does not read its answers, holds that many
	// slots and its own connection stops being read; the others are
	// still served.
	MaxConcurrentPerConn int
	// MaxConns bounds the open connections (default 4096), and
	// MaxConnsPerClient those from one IP address (default 100, as
	// Consul's rpc_max_conns_per_client): a connection accepted beyond
	// either is closed at once (the client sees it closed before any
	// answer and tries another node). With the handshake and idle
	// timeouts this keeps one client that opens connections and leaves
	// them idle from using up the node.
	MaxConns          int
	MaxConnsPerClient int
	// HandshakeTimeout bounds the wait for a new connection's preface
	// (default 10s).
	HandshakeTimeout time.Duration
	// IdleTimeout closes a connection that had no frame and no running call
	// for between IdleTimeout and twice that (default 5m; negative: never).
	IdleTimeout time.Duration
	// WriteTimeout bounds each socket write of responses (default 30s).
	WriteTimeout time.Duration
	// Authenticate, if set, runs before every handler, in the call's
	// goroutine (it may block), with the method name and the token the
	// connection last presented ("" if none; see client.Options.Token). It
	// returns the context the handler runs with, derived from ctx (it may
	// carry what the token proves, for the handler's permission checks; nil
	// keeps ctx), or an error that is sent back instead of running the
	// handler, mapped to a wire code like handler errors (wrap
	// ErrUnauthenticated or fs.ErrPermission). It decides which methods
	// need a token. A panic in it is reported like a handler panic. Nil: no
	// check.
	Authenticate func(ctx context.Context, method, token string) (context.Context, error)
}

// DefaultServerOptions returns the options a zero ServerOptions stands
// for: every limit at its default.
func DefaultServerOptions() ServerOptions {
	return (&ServerOptions{}).withDefaults()
}

func (o *ServerOptions) withDefaults() ServerOptions {
	r := *o
	if r.Logger == nil {
		r.Logger = slog.New(slog.DiscardHandler)
	}
	if r.MaxFrameSize <= 0 {
		r.MaxFrameSize = DefaultMaxFrameSize
	}
	r.MaxFrameSize = max(r.MaxFrameSize, MinMaxFrameSize)
	if r.MaxConcurrent <= 0 {
		r.MaxConcurrent = 256
	}
	if r.MaxConcurrentPerConn <= 0 {
		r.MaxConcurrentPerConn = 64
	}
	r.MaxConcurrentPerConn = min(r.MaxConcurrentPerConn, r.MaxConcurrent)
	if r.MaxConns <= 0 {
		r.MaxConns = 4096
	}
	if r.MaxConnsPerClient <= 0 {
		r.MaxConnsPerClient = 100
	}
	if r.HandshakeTimeout <= 0 {
		r.HandshakeTimeout = 10 * time.Second
	}
	if r.IdleTimeout == 0 {
		r.IdleTimeout = 5 * time.Minute
	}
	if r.WriteTimeout <= 0 {
		r.WriteTimeout = 30 * time.Second
	}
	return r
}

// handler is a registered method.
type handler struct {
	name string
	// call decodes body, runs the typed function and returns its response.
	call func(ctx context.Context, bc *Codec, body []byte) (any, error)
	// served counts the calls of the method answered (ServedByMethod).
	served atomic.Uint64
}

// Server serves registered methods over the ghba wire protocol (see the
// package documentation). Register every method, then call Serve for each
// listener; stop it with Shutdown (graceful) or Close.
type Server struct {
	opts  ServerOptions
	log   *slog.Logger
	codec *Codec
	bufs  wire.BufPool

	regMu    sync.Mutex
	handlers atomic.Pointer[map[string]*handler]

	sem        chan struct{}
	baseCtx    context.Context // parent of every call's context; canceled by Close
	baseCancel context.CancelFunc
	done       chan struct{} // closed when Shutdown or Close starts

	workers  *workers     // run the calls
	inflight atomic.Int64 // dispatched calls not yet answered
	stopping atomic.Bool  // set by Shutdown; finishing calls signal idle
	idle     chan struct{}

	refused atomic.Uint64 // connections closed at once: MaxConns reached
	served  atomic.Uint64 // calls answered (Served)

	mu        sync.Mutex
	state     serverState
	listeners map[net.Listener]struct{}
	conns     map[*serverConn]struct{}
	perIP     map[string]int // open connections by remote IP
	connWG    sync.WaitGroup // connection readers
}

type serverState int

const (
	stateRunning serverState = iota
	stateDraining
	stateClosed
)

// NewServer returns a Server with no methods.
func NewServer(opts ServerOptions) *Server {
	o := opts.withDefaults()
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{
		opts:       o,
		log:        o.Logger,
		codec:      NewCodec(),
		sem:        make(chan struct{}, o.MaxConcurrent),
		baseCtx:    ctx,
		baseCancel: cancel,
		done:       make(chan struct{}),
		idle:       make(chan struct{}, 1),
		listeners:  make(map[net.Listener]struct{}),
		conns:      make(map[*serverConn]struct{}),
		perIP:      make(map[string]int),
	}
	s.workers = newWorkers(s.done)
	empty := map[string]*handler{}
	s.handlers.Store(&empty)
	return s
}

// Register adds a method to s: requests named method are decoded into a new
// Req, passed to fn with a context that carries the client's deadline and
// is canceled if the client cancels the call, disconnects or the server
// closes, and fn's *Resp is sent back. An error from fn is mapped to a
// wire code with ErrorCode, its text sent as the message. A nil *Resp with
// a nil error sends an empty response.
//
// Register panics if method is empty, longer than MaxMethodLen, or already
// registered: those are programming errors. Methods may be registered while
// the server runs.
func Register[Req, Resp any](s *Server, method string, fn func(ctx context.Context, req *Req) (*Resp, error)) {
	s.register(&handler{
		name: method,
		call: func(ctx context.Context, bc *Codec, body []byte) (any, error) {
			req := new(Req)
			if err := bc.Unmarshal(body, req); err != nil {
				return nil, fmt.Errorf("%w: %s: %v", ErrBadRequest, method, err)
			}
			resp, err := fn(ctx, req)
			if err != nil {
				return nil, err
			}
			return resp, nil
		},
	})
}

func (s *Server) register(h *handler) {
	if h.name == "" || len(h.name) > MaxMethodLen {
		panic(fmt.Sprintf("rpc: invalid method name %q", h.name))
	}
	s.regMu.Lock()
	defer s.regMu.Unlock()
	old := *s.handlers.Load()
	if _, dup := old[h.name]; dup {
		panic(fmt.Sprintf("rpc: method %q registered twice", h.name))
	}
	m := maps.Clone(old)
	m[h.name] = h
	s.handlers.Store(&m)
}

// Serve accepts connections on ln and serves them until Shutdown or Close
// (then it returns ErrServerClosed), until ln fails (the error), or until
// ctx is canceled: then it closes the whole server abruptly, as Close does,
// and returns ctx.Err(). Use Shutdown for a graceful stop. Serve closes ln
// when it returns. It may be called for several listeners.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	s.mu.Lock()
	if s.state != stateRunning {
		s.mu.Unlock()
		ln.Close()
		return ErrServerClosed
	}
	s.listeners[ln] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.listeners, ln)
		s.mu.Unlock()
		ln.Close()
	}()
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()

	var backoff time.Duration
	for {
		nc, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				s.Close()
				return ctx.Err()
			}
			select {
			case <-s.done:
				return ErrServerClosed
			default:
			}
			if !temporaryAcceptError(err) {
				return fmt.Errorf("rpc: accept: %w", err)
			}
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			s.log.Warn("rpc: accept failed; retrying", "err", err, "delay", backoff)
			t := time.NewTimer(backoff)
			select {
			case <-t.C:
			case <-s.done:
				t.Stop()
			case <-ctx.Done():
				t.Stop()
			}
			continue
		}
		backoff = 0
		s.startConn(nc)
	}
}

// remoteIP returns the IP address of nc's peer (its whole address if it
// has no port).
func remoteIP(nc net.Conn) string {
	a := nc.RemoteAddr().String()
	if host, _, err := net.SplitHostPort(a); err == nil {
		return host
	}
	return a
}

func temporaryAcceptError(err error) bool {
	if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
		return true
	}
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) ||
		errors.Is(err, syscall.ECONNABORTED) || errors.Is(err, syscall.ENOBUFS) ||
		errors.Is(err, syscall.ENOMEM)
}

func (s *Server) startConn(nc net.Conn) {
	s.mu.Lock()
	if s.state != stateRunning {
		s.mu.Unlock()
		nc.Close()
		return
	}
	ip := remoteIP(nc)
	if len(s.conns) >= s.opts.MaxConns || s.perIP[ip] >= s.opts.MaxConnsPerClient {
		open, fromIP := len(s.conns), s.perIP[ip]
		s.mu.Unlock()
		nc.Close()
		if n := s.refused.Add(1); n&(n-1) == 0 { // the 1st, 2nd, 4th, 8th…: no log flood
			s.log.Warn("rpc: too many connections: closed a new one at once", "remote", ip, "from_remote", fromIP,
				"open", open, "max_conns", s.opts.MaxConns, "max_conns_per_client", s.opts.MaxConnsPerClient, "refused", n)
		}
		return
	}
	s.perIP[ip]++
	ctx, cancel := context.WithCancel(s.baseCtx)
	c := &serverConn{
		s:      s,
		nc:     nc,
		br:     bufio.NewReaderSize(nc, 16<<10),
		w:      wire.NewWriter(nc, 16<<10, s.opts.WriteTimeout),
		ctx:    ctx,
		cancel: cancel,
		calls:  make(map[uint64]context.CancelFunc),
		slots:  make(chan struct{}, s.opts.MaxConcurrentPerConn),
		remote: nc.RemoteAddr().String(),
		ip:     ip,
	}
	c.peer = &Peer{c: c}
	c.ctx = context.WithValue(ctx, peerKey{}, c.peer)
	s.conns[c] = struct{}{}
	s.connWG.Add(1)
	s.mu.Unlock()
	go c.serve()
}

// Served returns the number of calls the server has answered (with a
// result or an error) since it was created: its operations, for rates.
func (s *Server) Served() uint64 { return s.served.Load() }

// ServedByMethod returns, for each registered method that has answered a
// call, the number of calls it answered (their sum is Served, less the
// calls of unknown methods).
func (s *Server) ServedByMethod() map[string]uint64 {
	out := make(map[string]uint64)
	for name, hd := range *s.handlers.Load() {
		if n := hd.served.Load(); n > 0 {
			out[name] = n
		}
	}
	return out
}

// Shutdown stops the server gracefully: it stops accepting connections,
// tells every client (a goaway frame) which of its requests were accepted,
// answers later requests with CodeShuttingDown (not executed, so clients
// may send them elsewhere), waits for the accepted calls to finish and be
// answered, then closes every connection. If ctx ends first, it closes
// everything at once (canceling the running calls' contexts) and returns
// ctx.Err().
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	if s.state == stateClosed {
		s.mu.Unlock()
		return nil
	}
	if s.state == stateRunning {
		s.state = stateDraining
		close(s.done)
	}
	for ln := range s.listeners {
		ln.Close()
	}
	conns := make([]*serverConn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.stopping.Store(true)
	s.mu.Unlock()

	for _, c := range conns {
		c.drain()
	}
	for s.inflight.Load() > 0 {
		select {
		case <-s.idle:
		case <-ctx.Done():
			s.Close()
			return ctx.Err()
		}
	}
	return s.Close()
}

// Close stops the server at once: listeners and connections are closed and
// the contexts of running calls are canceled. It waits for the connection
// goroutines, not for handlers (which should return once their context is
// canceled; their answers are dropped).
func (s *Server) Close() error {
	s.mu.Lock()
	if s.state == stateRunning {
		close(s.done)
	}
	s.state = stateClosed
	for ln := range s.listeners {
		ln.Close()
	}
	conns := make([]*serverConn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	for _, c := range conns { // first, so that no answer of a canceled call goes out
		c.nc.Close()
	}
	s.baseCancel()
	s.connWG.Wait()
	return nil
}

// serverConn is one accepted connection. Its goroutine (serve) reads frames
// and dispatches requests to the server's workers, bounded by s.sem.
type serverConn struct {
	s      *Server
	nc     net.Conn
	br     *bufio.Reader
	w      *wire.Writer
	ctx    context.Context // canceled when the connection ends
	cancel context.CancelFunc
	remote string
	hdr    [wire.FrameLenSize]byte
	frames atomic.Uint64 // frames read, for idle detection
	slots  chan struct{} // this connection's running handlers (MaxConcurrentPerConn)
	ip     string        // the remote IP (MaxConnsPerClient)

	mu       sync.Mutex
	calls    map[uint64]context.CancelFunc // running calls by seq
	closed   bool
	draining bool
	lastSeq  uint64 // highest seq accepted for execution
	maxSeen  uint64 // highest seq read (seqs must increase)

	// token is the one the last auth frame carried ("": none). Only the
	// reader (serve, dispatch) uses it; calls get a copy.
	token string
	// peer notifies the client (notify.go); ctx carries it.
	peer *Peer
}

func (c *serverConn) serve() {
	var idle *time.Timer
	defer func() {
		c.mu.Lock()
		c.closed = true
		if idle != nil {
			idle.Stop()
		}
		c.mu.Unlock()
		c.cancel()
		c.nc.Close()
		c.s.mu.Lock()
		delete(c.s.conns, c)
		if c.s.perIP[c.ip]--; c.s.perIP[c.ip] <= 0 {
			delete(c.s.perIP, c.ip)
		}
		c.s.mu.Unlock()
		c.s.connWG.Done()
	}()

	if err := c.readPreface(); err != nil {
		c.logClose(err)
		return
	}
	if d := c.s.opts.IdleTimeout; d > 0 {
		var seen uint64
		c.mu.Lock() // the callback reads idle under c.mu: assign it first
		idle = time.AfterFunc(d, func() {
			n := c.frames.Load()
			c.mu.Lock()
			defer c.mu.Unlock()
			if c.closed {
				return
			}
			if n == seen && len(c.calls) == 0 {
				c.s.log.Debug("rpc: closing idle connection", "remote", c.remote)
				c.nc.Close()
				return
			}
			seen = n
			idle.Reset(d)
		})
		c.mu.Unlock()
	}
	for {
		b, err := wire.ReadFrame(c.br, &c.hdr, c.s.opts.MaxFrameSize, &c.s.bufs)
		if err != nil {
			c.logClose(err)
			return
		}
		c.frames.Add(1)
		switch (*b)[0] {
		case wire.KindRequest:
			err = c.dispatch(b)
		case wire.KindAuth:
			var tok []byte
			tok, err = wire.ParseAuth(*b)
			if err == nil && string(tok) != c.token { // no copy when unchanged
				c.token = string(tok)
			}
			c.s.bufs.Put(b)
		case wire.KindNotifyAck:
			var seq uint64
			seq, err = wire.ParseControl(*b, wire.KindNotifyAck)
			c.s.bufs.Put(b)
			if err == nil {
				c.peer.acked(seq)
			}
		case wire.KindCancel:
			var seq uint64
			seq, err = wire.ParseControl(*b, wire.KindCancel)
			c.s.bufs.Put(b)
			if err == nil {
				c.mu.Lock()
				cancel := c.calls[seq]
				c.mu.Unlock()
				if cancel != nil {
					cancel()
				}
			}
		default:
			kind := (*b)[0]
			c.s.bufs.Put(b)
			err = fmt.Errorf("%w: unknown frame kind %d", ErrProtocol, kind)
		}
		if err != nil {
			c.logClose(err)
			return
		}
	}
}

func (c *serverConn) readPreface() error {
	if err := c.nc.SetReadDeadline(time.Now().Add(c.s.opts.HandshakeTimeout)); err != nil {
		return err
	}
	if _, err := io.ReadFull(c.br, c.hdr[:]); err != nil {
		return fmt.Errorf("reading preface: %w", err)
	}
	if string(c.hdr[:]) != wire.Preface {
		return fmt.Errorf("%w: bad preface %q", ErrProtocol, c.hdr[:])
	}
	return c.nc.SetReadDeadline(time.Time{})
}

// logClose logs why a connection ended: protocol violations as warnings,
// ordinary disconnects at debug level.
func (c *serverConn) logClose(err error) {
	switch {
	case errors.Is(err, ErrProtocol), errors.Is(err, ErrFrameTooLarge), errors.Is(err, io.ErrUnexpectedEOF):
		c.s.log.Warn("rpc: closing connection", "remote", c.remote, "err", err)
	default:
		c.s.log.Debug("rpc: connection ended", "remote", c.remote, "err", err)
	}
}

// dispatch handles one request frame b (ownership passes to dispatch). A
// returned error is a protocol violation that ends the connection.
func (c *serverConn) dispatch(b *[]byte) error {
	s := c.s
	h, err := wire.ParseRequest(*b)
	if err != nil {
		s.bufs.Put(b)
		return err
	}
	if h.Seq <= c.maxSeen {
		s.bufs.Put(b)
		return fmt.Errorf("%w: sequence %d after %d", ErrProtocol, h.Seq, c.maxSeen)
	}
	c.maxSeen = h.Seq
	hd := (*s.handlers.Load())[string(h.Method)]
	if hd == nil {
		msg := fmt.Sprintf("%s: %q", ErrUnknownMethod, h.Method)
		s.bufs.Put(b)
		c.respond(h.Seq, CodeUnknownMethod, msg, nil)
		return nil
	}
	// Back-pressure: stop reading this connection until it has a slot of
	// its own and the server one.
	select {
	case c.slots <- struct{}{}:
	case <-c.ctx.Done():
		s.bufs.Put(b)
		return c.ctx.Err()
	}
	select {
	case s.sem <- struct{}{}:
	case <-c.ctx.Done():
		<-c.slots
		s.bufs.Put(b)
		return c.ctx.Err()
	}

	var ctx context.Context
	var cancel context.CancelFunc
	if h.Timeout > 0 {
		ctx, cancel = context.WithTimeout(c.ctx, time.Duration(h.Timeout))
	} else {
		ctx, cancel = context.WithCancel(c.ctx)
	}
	c.mu.Lock()
	if c.draining || c.closed {
		c.mu.Unlock()
		<-s.sem
		<-c.slots
		cancel()
		s.bufs.Put(b)
		c.respond(h.Seq, CodeShuttingDown, ErrShuttingDown.Error(), nil)
		return nil
	}
	c.lastSeq = h.Seq
	c.calls[h.Seq] = cancel
	s.inflight.Add(1)
	c.mu.Unlock()

	token, seq, body := c.token, h.Seq, h.Body
	s.workers.run(func() { c.run(ctx, cancel, hd, token, seq, b, body) })
	return nil
}

// run executes one call and answers it. token is the one the connection
// had presented when the request was read.
func (c *serverConn) run(ctx context.Context, cancel context.CancelFunc, hd *handler, token string, seq uint64, b *[]byte, body []byte) {
	s := c.s
	resp, err := c.invoke(ctx, hd, token, body, b)
	if err != nil {
		c.respond(seq, ErrorCode(err), err.Error(), nil)
	} else {
		c.respond(seq, CodeOK, "", resp)
	}
	s.served.Add(1)
	hd.served.Add(1)
	cancel()
	c.mu.Lock()
	delete(c.calls, seq)
	c.mu.Unlock()
	<-s.sem
	<-c.slots
	if s.inflight.Add(-1) == 0 && s.stopping.Load() {
		select {
		case s.idle <- struct{}{}:
		default:
		}
	}
}

// invoke runs ServerOptions.Authenticate, if set, then the handler unless
// it refused, turning a panic of either into an error. The frame buffer b
// is recycled as soon as they return.
func (c *serverConn) invoke(ctx context.Context, hd *handler, token string, body []byte, b *[]byte) (resp any, err error) {
	defer func() {
		c.s.bufs.Put(b)
		if r := recover(); r != nil {
			c.s.log.Error("rpc: handler panic", "method", hd.name, "panic", r, "stack", string(debug.Stack()))
			resp, err = nil, fmt.Errorf("rpc: %s: internal error (handler panic)", hd.name)
		}
	}()
	if auth := c.s.opts.Authenticate; auth != nil {
		actx, aerr := auth(ctx, hd.name, token)
		if aerr != nil {
			return nil, aerr
		}
		if actx != nil {
			ctx = actx
		}
	}
	return hd.call(ctx, c.s.codec, body)
}

// respond encodes resp (if code is CodeOK) and writes the response frame.
// Write errors end the connection through the reader; they are not
// reported here.
func (c *serverConn) respond(seq uint64, code Code, msg string, resp any) {
	var body []byte
	var enc *Encoder
	if code == CodeOK {
		enc = c.s.codec.GetEncoder()
		var err error
		body, err = enc.Encode(resp)
		switch {
		case err != nil:
			code, msg, body = CodeInternal, fmt.Sprintf("rpc: encoding response: %v", err), nil
		case wire.ResponseFixedLen+len(body) > c.s.opts.MaxFrameSize:
			code, msg, body = CodeInternal, fmt.Sprintf("rpc: response of %d bytes exceeds the frame limit", len(body)), nil
		}
	}
	buf, err := c.w.Begin()
	if err == nil {
		buf = wire.AppendResponseHeader(buf, len(body), seq, uint16(code), msg)
		err = c.w.Commit(append(buf, body...))
	} else {
		c.w.Abort()
	}
	if err != nil {
		c.s.log.Debug("rpc: writing response", "remote", c.remote, "err", err)
		c.nc.Close() // unblock the reader; the connection is unusable
	}
	if enc != nil {
		c.s.codec.PutEncoder(enc)
	}
}

// drain marks the connection as shutting down and sends the goaway frame
// naming the last accepted request.
func (c *serverConn) drain() {
	c.mu.Lock()
	if c.draining || c.closed {
		c.mu.Unlock()
		return
	}
	c.draining = true
	last := c.lastSeq
	c.mu.Unlock()
	// Do not wait behind a backlog for a client that stopped reading: it
	// then learns nothing from a goaway anyway (its pending calls end as
	// "outcome unknown" when the connection closes).
	buf, ok := c.w.BeginIfRoom(false)
	if !ok {
		return
	}
	if err := c.w.Commit(wire.AppendControl(buf, wire.KindGoAway, last)); err != nil {
		c.nc.Close()
	}
}
