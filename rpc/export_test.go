package rpc

import "context"

// Internals for the external tests (package rpc_test), which are there so
// that they can use rpc/rpctest. Compiled into the test binary only.

// Frame layout, for the tests that speak the wire protocol directly.
const (
	Preface          = preface
	KindRequest      = kindRequest
	KindResponse     = kindResponse
	KindCancel       = kindCancel
	KindGoAway       = kindGoAway
	RequestFixedLen  = requestFixedLen
	ResponseFixedLen = responseFixedLen
)

// AppendRequestHeader appends the header of a request frame.
var AppendRequestHeader = appendRequestHeader

// EncodeBody returns the msgpack body encoding v.
func EncodeBody(v any) []byte {
	b, err := newBodyCodec().getEncoder().encode(v)
	if err != nil {
		panic(err)
	}
	return b
}

// ParseResponse returns the sequence number and code of a response frame.
func ParseResponse(p []byte) (seq uint64, code Code, err error) {
	h, err := parseResponse(p)
	return h.seq, h.code, err
}

// ParseGoAway returns the last accepted sequence number of a goaway frame.
func ParseGoAway(p []byte) (uint64, error) { return parseControl(p, kindGoAway) }

// CallAnyWith is CallAny with the idempotency of the call stated by the
// caller instead of looked up with Idempotent.
func (c *Client) CallAnyWith(ctx context.Context, prefer, method string, idempotent bool, req, resp any) error {
	return c.callAny(ctx, prefer, method, idempotent, req, resp)
}

// PooledConns returns the number of pooled connections to addr.
func (c *Client) PooledConns(addr string) int {
	c.mu.Lock()
	p := c.pools[addr]
	c.mu.Unlock()
	if p == nil {
		return 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns)
}

// OpenConns returns the number of connections the server holds.
func (s *Server) OpenConns() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}

// RouteOf returns the address the client's filter routing names for p ("":
// none).
func RouteOf(c *Client, p string) string { return c.router.route(p) }

// PrefetchesInFlight returns how many paths background prefetches are
// fetching now (0 without a cache).
func (c *Client) PrefetchesInFlight() int {
	if c.cache == nil {
		return 0
	}
	c.cache.mu.Lock()
	defer c.cache.mu.Unlock()
	return len(c.cache.inflight)
}
