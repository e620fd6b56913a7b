package node

import (
	"context"
	"net"
	"strconv"
	"time"
)

// TLS (config tls): the RPC, Raft and HTTP ports of a node speak TLS when
// it is configured, and the node dials other nodes' RPC and Raft ports
// with it, presenting its own certificate (docs/design.md, "Security").

// listen binds bind_addr:port, with TLS when configured.
func (n *Node) listen(port int) (net.Listener, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort(n.cfg.BindAddr, strconv.Itoa(port)))
	if err != nil || n.tls == nil {
		return ln, err
	}
	return n.tls.Listener(ln), nil
}

// dialer returns how the node connects to another node's RPC or Raft
// port: TCP with keep-alive, then TLS when configured (nil: the default
// plain dialer of the caller).
func (n *Node) dialer() func(ctx context.Context, network, addr string) (net.Conn, error) {
	if n.tls == nil {
		return nil
	}
	d := &net.Dialer{KeepAlive: 15 * time.Second}
	return n.tls.Dialer(d.DialContext)
}

// ReloadTLS reads the TLS files again (the agent does on SIGHUP):
// connections made from now on use them, open ones keep theirs. Without
// TLS it does nothing. On an error the files loaded before stay in use.
func (n *Node) ReloadTLS() error {
	if n.tls == nil {
		return nil
	}
	if err := n.tls.Reload(); err != nil {
		return err
	}
	n.log.Info("TLS certificates reloaded")
	return nil
}
