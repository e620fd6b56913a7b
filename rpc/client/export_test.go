package client

import "context"

// Internals for the external tests (package client_test), which are there
// so that they can use rpc/rpctest. Compiled into the test binary only.

// CallAnyWith is CallAny with the idempotency of the call stated by the
// caller instead of looked up with rpc.Idempotent.
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
