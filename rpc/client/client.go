package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/ghba/ghba/rpc"
	"github.com/ghba/ghba/rpc/internal/wire"
)

// Options configure a Client. The zero value is usable (with no addresses:
// only Call, which names its address, works until SetAddrs).
type Options struct {
	// Addrs are the RPC addresses (host:port) of the nodes the client may
	// enter the cluster through.
	Addrs []string
	// Logger receives connection problems; nil discards them.
	Logger *slog.Logger
	// Dial opens connections (default: a net.Dialer with TCP keep-alive).
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// DialTimeout bounds one connection attempt (default 2s), so that one
	// dead node does not use up a call's whole deadline.
	DialTimeout time.Duration
	// Timeout is the deadline given to calls whose context has none
	// (default 30s; negative: none).
	Timeout time.Duration
	// MaxConnsPerAddr bounds the pooled connections per address (default
	// 2). Calls are pipelined, so one connection carries many at once; a
	// second is dialed only while every connection is busy.
	MaxConnsPerAddr int
	// IdleTimeout closes pooled connections unused for between IdleTimeout
	// and twice that (default 60s; keep it below the server's).
	IdleTimeout time.Duration
	// WriteTimeout bounds each socket write (default 30s).
	WriteTimeout time.Duration
	// MaxFrameSize limits the frames the client sends and accepts (default
	// rpc.DefaultMaxFrameSize).
	MaxFrameSize int
	// MaxAttempts bounds the addresses CallAny tries for one call (default
	// 4).
	MaxAttempts int
	// DownBackoff is how long after a failed dial an address is tried only
	// after the others (default 1s).
	DownBackoff time.Duration
	// HomeCacheSize bounds the path → home address cache (default 8192;
	// negative: no cache).
	HomeCacheSize int
	// RouteRefresh, when positive, makes the client route a path it has no
	// cached home for by the shards' Bloom filters, which it fetches from
	// the nodes that lead them and refreshes this often (1s is a sensible
	// value; each refresh asks every address, and only changed filters
	// travel). It costs the client the shards' filters in memory (about
	// filter_capacity × bits_per_file bits each) and saves the entry
	// node's forward for paths outside the home cache. Default 0: off.
	RouteRefresh time.Duration
	// Token is a bearer token sent once on every new connection, right
	// after the preface, so that every call on it carries the identity
	// (checked by the server's rpc.ServerOptions.Authenticate). At most
	// rpc.MaxTokenLen bytes: a server closes a connection that presents a
	// longer one. Empty: none.
	Token string
	// OnInvalidate, if set, is called with every invalidation a server
	// sends (a revoked lease; notify.go) before the client acknowledges
	// it; it runs on the connection's reader and must not block. The
	// client's metadata cache handles them before it is called.
	OnInvalidate func(inv *rpc.Invalidation)
	// Cache, if set, makes Stat answer from a metadata cache of inodes
	// held under leases the homes grant (metacache.go). Nil: no cache
	// (the default for library users).
	Cache *CacheOptions
}

func (o *Options) withDefaults() Options {
	r := *o
	r.Addrs = slices.Clone(o.Addrs)
	if r.Logger == nil {
		r.Logger = slog.New(slog.DiscardHandler)
	}
	if r.DialTimeout <= 0 {
		r.DialTimeout = 2 * time.Second
	}
	if r.Dial == nil {
		d := &net.Dialer{KeepAlive: 15 * time.Second}
		r.Dial = d.DialContext
	}
	if r.Timeout == 0 {
		r.Timeout = 30 * time.Second
	}
	if r.MaxConnsPerAddr <= 0 {
		r.MaxConnsPerAddr = 2
	}
	if r.IdleTimeout <= 0 {
		r.IdleTimeout = 60 * time.Second
	}
	if r.WriteTimeout <= 0 {
		r.WriteTimeout = 30 * time.Second
	}
	if r.MaxFrameSize <= 0 {
		r.MaxFrameSize = rpc.DefaultMaxFrameSize
	}
	r.MaxFrameSize = max(r.MaxFrameSize, rpc.MinMaxFrameSize)
	if r.MaxAttempts <= 0 {
		r.MaxAttempts = 4
	}
	if r.DownBackoff <= 0 {
		r.DownBackoff = time.Second
	}
	if r.HomeCacheSize == 0 {
		r.HomeCacheSize = 8192
	}
	return r
}

// Client calls ghba servers. It keeps a pool of pipelined connections per
// address (dialed lazily, reused, closed when idle), retries on another
// node when one is unreachable, and caches the home of paths it has seen.
// It is safe for concurrent use. Close it when done.
type Client struct {
	opts  Options
	log   *slog.Logger
	codec *rpc.Codec
	bufs  wire.BufPool
	calls sync.Pool
	homes *homeCache
	// router routes by the shards' filters (nil: off).
	router *filterRouter
	// cache is the metadata cache (nil: off).
	cache *metaCache

	mu     sync.Mutex
	addrs  []string
	pools  map[string]*addrPool
	nodes  map[string]string // node id → RPC address, learned from replies
	closed bool

	stop    chan struct{} // closed by Close: stops the janitor
	janitor sync.WaitGroup
	readers sync.WaitGroup // connection reader goroutines
	// prefetches are the metadata cache's background prefetches
	// (Client.prefetch); Add under mu while not closed.
	prefetches sync.WaitGroup
}

// New returns a Client for the nodes in opts.Addrs.
func New(opts Options) *Client {
	o := opts.withDefaults()
	c := &Client{
		opts:  o,
		log:   o.Logger,
		codec: rpc.NewCodec(),
		homes: newHomeCache(o.HomeCacheSize),
		addrs: o.Addrs,
		pools: make(map[string]*addrPool),
		stop:  make(chan struct{}),
	}
	if o.Cache != nil {
		c.cache = newMetaCache(*o.Cache)
	}
	c.calls.New = func() any { return &call{done: make(chan struct{}, 1)} }
	c.janitor.Add(1)
	go c.sweepIdle()
	if c.router = newFilterRouter(c, o.RouteRefresh); c.router != nil {
		c.janitor.Add(1)
		go c.router.loop()
	}
	return c
}

// SetAddrs replaces the addresses CallAny and the typed methods choose from
// (for example from Members). Connections to removed addresses are closed
// when idle.
func (c *Client) SetAddrs(addrs []string) {
	c.mu.Lock()
	c.addrs = slices.Clone(addrs)
	c.mu.Unlock()
}

// Addrs returns the addresses the client chooses from.
func (c *Client) Addrs() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.addrs)
}

// Close closes every connection, failing calls in progress, and stops the
// client's goroutines. Calls after Close fail with rpc.ErrClientClosed.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	pools := make([]*addrPool, 0, len(c.pools))
	for _, p := range c.pools {
		pools = append(pools, p)
	}
	c.mu.Unlock()
	close(c.stop)
	c.janitor.Wait()
	for _, p := range pools {
		for _, cc := range p.closeAll() {
			cc.close(rpc.ErrClientClosed)
		}
	}
	c.readers.Wait()
	c.prefetches.Wait()
	return nil
}

func (c *Client) getCall() *call {
	cl := c.calls.Get().(*call)
	cl.code, cl.msg, cl.buf, cl.body, cl.err, cl.notSent = rpc.CodeOK, "", nil, nil, nil, false
	return cl
}

func (c *Client) putCall(cl *call) {
	if cl.timer != nil {
		cl.timer.Stop()
	}
	cl.buf, cl.body, cl.err = nil, nil, nil
	c.calls.Put(cl)
}

// Call calls method at addr exactly: it never sends the call to another
// node (server-to-server calls that must reach one node use it). If ctx
// has no deadline, Options.Timeout applies. Errors: the server's error (a
// *rpc.RemoteError matching errors.Is as described in package rpc);
// rpc.ErrUnavailable if addr could not be reached, with
// rpc.ErrOutcomeUnknown too if the request may have been executed; ctx's
// error (with rpc.ErrOutcomeUnknown if the request had been sent).
func (c *Client) Call(ctx context.Context, addr, method string, req, resp any) error {
	_, err := c.call(ctx, c.defaultDeadline(ctx), addr, method, req, resp)
	return err
}

// CallAny calls method on some node: prefer first if it is not empty, then
// the client's other addresses in random order (recently unreachable ones
// last), at most Options.MaxAttempts of them. It moves on to the next
// address only when the request certainly was not executed (dial failure,
// a connection already broken, a server shutting down), or, for methods
// that are rpc.Idempotent, also when the connection broke after sending. An
// answer from a server, even an error, is final.
func (c *Client) CallAny(ctx context.Context, prefer, method string, req, resp any) error {
	return c.callAny(ctx, prefer, method, rpc.Idempotent(method), req, resp)
}

func (c *Client) callAny(ctx context.Context, prefer, method string, idempotent bool, req, resp any) error {
	dl := c.defaultDeadline(ctx)
	var tried []string
	var errs []error
	for len(tried) < c.opts.MaxAttempts {
		addr := c.pick(prefer, tried)
		if addr == "" {
			break
		}
		prefer = ""
		tried = append(tried, addr)
		oc, err := c.call(ctx, dl, addr, method, req, resp)
		switch oc {
		case outcomeOK:
			return nil
		case outcomeNotSent:
		case outcomeUnknown:
			if !idempotent {
				return err
			}
		default:
			return err
		}
		if ctx.Err() != nil || expired(dl) {
			return err
		}
		c.log.Debug("rpc: trying another node", "method", method, "addr", addr, "err", err)
		errs = append(errs, err)
	}
	if len(errs) == 0 {
		return fmt.Errorf("rpc: %s: %w: no server address", method, rpc.ErrUnavailable)
	}
	return fmt.Errorf("rpc: %s: no node answered (%d tried): %w", method, len(tried), errors.Join(errs...))
}

// pick returns the next address to try: prefer if set and not recently
// unreachable, else a random one not yet tried, preferring addresses not
// recently unreachable.
func (c *Client) pick(prefer string, tried []string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	if prefer != "" {
		if p := c.pools[prefer]; p == nil || !p.isDown(now) || len(c.addrs) == 0 {
			return prefer
		}
	}
	n := len(c.addrs)
	if n == 0 {
		return ""
	}
	start := rand.IntN(n)
	fallback := ""
	for i := range n {
		a := c.addrs[(start+i)%n]
		if slices.Contains(tried, a) {
			continue
		}
		if p := c.pools[a]; p != nil && p.isDown(now) {
			if fallback == "" {
				fallback = a
			}
			continue
		}
		return a
	}
	return fallback
}

// defaultDeadline returns the deadline Options.Timeout gives a call whose
// context has none, or the zero time. It is enforced by the call itself
// rather than through a derived context, which would cost a context, a
// timer and a channel per call.
func (c *Client) defaultDeadline(ctx context.Context) time.Time {
	if _, ok := ctx.Deadline(); ok || c.opts.Timeout <= 0 {
		return time.Time{}
	}
	return time.Now().Add(c.opts.Timeout)
}

// expired reports whether a default deadline is set and has passed.
func expired(dl time.Time) bool { return !dl.IsZero() && !time.Now().Before(dl) }

// call performs one attempt at addr and wraps transport errors. dl is the
// default deadline (zero if ctx's own deadline applies or there is none).
func (c *Client) call(ctx context.Context, dl time.Time, addr, method string, req, resp any) (outcome, error) {
	if len(method) == 0 || len(method) > rpc.MaxMethodLen {
		return outcomeLocal, fmt.Errorf("rpc: invalid method name %q", method)
	}
	if err := ctx.Err(); err != nil {
		return outcomeCanceled, fmt.Errorf("rpc: %s to %s: %w", method, addr, err)
	}
	if expired(dl) {
		return outcomeCanceled, fmt.Errorf("rpc: %s to %s: %w", method, addr, context.DeadlineExceeded)
	}
	enc := c.codec.GetEncoder()
	defer c.codec.PutEncoder(enc)
	body, err := enc.Encode(req)
	if err != nil {
		return outcomeLocal, fmt.Errorf("rpc: %s: encoding request: %w", method, err)
	}
	if n := wire.RequestFixedLen + len(method) + len(body); n > c.opts.MaxFrameSize {
		return outcomeLocal, fmt.Errorf("rpc: %s: request of %d bytes: %w (limit %d)", method, n, rpc.ErrFrameTooLarge, c.opts.MaxFrameSize)
	}
	for redialed := false; ; redialed = true {
		cc, err := c.conn(ctx, addr)
		if err != nil {
			if ctx.Err() != nil {
				return outcomeCanceled, fmt.Errorf("rpc: %s to %s: %w", method, addr, ctx.Err())
			}
			if errors.Is(err, rpc.ErrClientClosed) {
				return outcomeLocal, err
			}
			return outcomeNotSent, fmt.Errorf("rpc: %s to %s: %w: %w", method, addr, rpc.ErrUnavailable, err)
		}
		oc, err := cc.roundTrip(ctx, dl, method, body, resp)
		cc.users.Add(-1)
		switch oc {
		case outcomeOK, outcomeRemote:
			return oc, err
		case outcomeNotSent:
			// A connection found broken (or draining) before the request
			// went out: redial this address once more before giving up on
			// it, since a stale pooled connection says little about the node.
			if !redialed && ctx.Err() == nil && !errors.Is(err, rpc.ErrShuttingDown) && cc.fresh() {
				continue
			}
			return oc, fmt.Errorf("rpc: %s to %s: %w: %w", method, addr, rpc.ErrUnavailable, err)
		case outcomeUnknown:
			return oc, fmt.Errorf("rpc: %s to %s: %w: %w: %w", method, addr, rpc.ErrUnavailable, rpc.ErrOutcomeUnknown, err)
		case outcomeCanceled:
			return oc, fmt.Errorf("rpc: %s to %s: %w: %w", method, addr, rpc.ErrOutcomeUnknown, err)
		case outcomeExpired:
			return outcomeCanceled, fmt.Errorf("rpc: %s to %s: %w", method, addr, err)
		default:
			return oc, err
		}
	}
}

// conn returns a pooled connection to addr, dialing if none is free.
func (c *Client) conn(ctx context.Context, addr string) (*clientConn, error) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, rpc.ErrClientClosed
	}
	p := c.pools[addr]
	if p == nil {
		p = &addrPool{cl: c, addr: addr, dialDone: make(chan struct{})}
		c.pools[addr] = p
	}
	c.mu.Unlock()
	return p.get(ctx)
}

// dial opens and starts a connection for p.
func (c *Client) dial(ctx context.Context, p *addrPool) (*clientConn, error) {
	dctx, cancel := context.WithTimeout(ctx, c.opts.DialTimeout)
	defer cancel()
	nc, err := c.opts.Dial(dctx, "tcp", p.addr)
	if err != nil {
		return nil, err
	}
	cc := newClientConn(c, p, p.addr, nc)
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		nc.Close()
		return nil, rpc.ErrClientClosed
	}
	c.readers.Add(1)
	c.mu.Unlock()
	go func() {
		defer c.readers.Done()
		cc.readLoop()
	}()
	return cc, nil
}

// sweepIdle closes connections that carried no call since the previous
// sweep, every IdleTimeout, until Close.
func (c *Client) sweepIdle() {
	defer c.janitor.Done()
	t := time.NewTicker(c.opts.IdleTimeout)
	defer t.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-t.C:
		}
		c.mu.Lock()
		pools := make([]*addrPool, 0, len(c.pools))
		for _, p := range c.pools {
			pools = append(pools, p)
		}
		c.mu.Unlock()
		for _, p := range pools {
			for _, cc := range p.takeIdle() {
				c.log.Debug("rpc: closing idle connection", "addr", cc.addr)
				cc.close(errIdle)
			}
		}
	}
}

var errIdle = errors.New("rpc: idle connection closed")

// addrPool holds the connections to one address.
type addrPool struct {
	cl   *Client
	addr string

	mu        sync.Mutex
	conns     []*clientConn
	dialing   int
	dialDone  chan struct{} // closed and replaced when a dial finishes
	downUntil time.Time     // after a failed dial: try others first
	closed    bool
}

// get returns a connection with its users count incremented: the least
// loaded one, unless all are busy and another may be dialed.
func (p *addrPool) get(ctx context.Context) (*clientConn, error) {
	max := p.cl.opts.MaxConnsPerAddr
	for {
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			return nil, rpc.ErrClientClosed
		}
		var best *clientConn
		for _, cc := range p.conns {
			if best == nil || cc.users.Load() < best.users.Load() {
				best = cc
			}
		}
		if best != nil && (best.users.Load() == 0 || len(p.conns)+p.dialing >= max) {
			best.users.Add(1)
			best.used.Store(true)
			p.mu.Unlock()
			return best, nil
		}
		if len(p.conns)+p.dialing < max {
			p.dialing++
			p.mu.Unlock()
			cc, err := p.cl.dial(ctx, p)
			p.mu.Lock()
			p.dialing--
			close(p.dialDone)
			p.dialDone = make(chan struct{})
			if err != nil {
				if ctx.Err() == nil {
					p.downUntil = time.Now().Add(p.cl.opts.DownBackoff)
				}
				p.mu.Unlock()
				return nil, err
			}
			p.downUntil = time.Time{}
			if p.closed {
				p.mu.Unlock()
				cc.close(rpc.ErrClientClosed)
				return nil, rpc.ErrClientClosed
			}
			p.conns = append(p.conns, cc)
			cc.users.Add(1)
			cc.used.Store(true)
			p.mu.Unlock()
			return cc, nil
		}
		ch := p.dialDone // every slot is being dialed: wait for one
		p.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// isDown reports whether a dial to the address failed recently.
func (p *addrPool) isDown(now time.Time) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return now.Before(p.downUntil)
}

// remove drops cc from the pool (it is broken or draining).
func (p *addrPool) remove(cc *clientConn) {
	p.mu.Lock()
	p.conns = slices.DeleteFunc(p.conns, func(x *clientConn) bool { return x == cc })
	p.mu.Unlock()
}

// takeIdle removes and returns the connections unused since the last call
// and marks the others unused.
func (p *addrPool) takeIdle() []*clientConn {
	p.mu.Lock()
	defer p.mu.Unlock()
	var idle []*clientConn
	p.conns = slices.DeleteFunc(p.conns, func(cc *clientConn) bool {
		if cc.users.Load() == 0 && !cc.used.Swap(false) {
			idle = append(idle, cc)
			return true
		}
		return false
	})
	return idle
}

// closeAll marks the pool closed and returns its connections.
func (p *addrPool) closeAll() []*clientConn {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	out := p.conns
	p.conns = nil
	return out
}

// fresh reports whether the pool has no connection left to reuse (so the
// next get dials) — used to retry once on a newly dialed connection after
// a stale pooled one failed before sending.
func (cc *clientConn) fresh() bool {
	p := cc.pool
	p.mu.Lock()
	defer p.mu.Unlock()
	return !p.closed && len(p.conns) == 0 && p.dialing == 0
}
