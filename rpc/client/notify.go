package client

import (
	"fmt"

	"github.com/ghba/ghba/rpc"
	"github.com/ghba/ghba/rpc/internal/wire"
)

// The client side of notifications (package rpc, notify.go): a server
// notifies a client on a connection the client opened, and waits for its
// acknowledgment; the metadata cache (metacache.go) drops what an
// invalidation names before the client acknowledges it.

// onNotify handles a notification on a client connection: it decodes it,
// hands it to Options.OnInvalidate and acknowledges it. A body that does
// not decode is a protocol error.
func (c *clientConn) onNotify(p []byte) error {
	seq, body, err := wire.ParseNotify(p)
	if err != nil {
		return err
	}
	var inv rpc.Invalidation
	if err := c.cl.codec.Unmarshal(body, &inv); err != nil {
		return fmt.Errorf("%w: notify body: %w", rpc.ErrProtocol, err)
	}
	if m := c.cl.cache; m != nil {
		m.invalidate(&inv)
	}
	if fn := c.cl.opts.OnInvalidate; fn != nil {
		fn(&inv)
	}
	buf, err := c.w.Begin()
	if err != nil {
		c.w.Abort()
		return err
	}
	return c.w.Commit(wire.AppendControl(buf, wire.KindNotifyAck, seq))
}
