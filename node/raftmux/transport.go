package raftmux

import (
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// The raft transport settings of the node (TransportConfig).
const (
	// TransportMaxPool is how many idle connections a transport keeps per
	// peer.
	TransportMaxPool = 3
	// TransportTimeout bounds a transport's dials and I/O (raft scales it
	// up for snapshots).
	TransportTimeout = 10 * time.Second
	// TransportMaxRPCsInFlight is 1: raft's pipelined replication is off.
	// With pipelining (raft v1.7.3, also v1.8.0), a pipeline whose decoder
	// stopped (a follower refused an AppendEntries, or answered with a
	// newer term) can block the replication goroutine forever on its
	// unbuffered channels, and raft.Shutdown then never returns.
	TransportMaxRPCsInFlight = 1
)

// TransportConfig returns the node's raft transport settings over l
// (TransportMaxPool, TransportTimeout, TransportMaxRPCsInFlight), logging
// to logger (nil: raft's default logger on stderr).
func TransportConfig(l *Layer, logger hclog.Logger) *raft.NetworkTransportConfig {
	return &raft.NetworkTransportConfig{
		Stream:          l,
		Logger:          logger,
		MaxPool:         TransportMaxPool,
		Timeout:         TransportTimeout,
		MaxRPCsInFlight: TransportMaxRPCsInFlight,
	}
}

// NewTransport returns a raft transport over l with TransportConfig's
// settings. Its Close closes l, and with it every connection of the
// group; CloseStreams is not needed before it.
func NewTransport(l *Layer, logger hclog.Logger) *Transport {
	return &Transport{NetworkTransport: raft.NewNetworkTransportWithConfig(TransportConfig(l, logger))}
}

// Transport is a raft.NetworkTransport whose Close waits for the heartbeat
// being handled. Raft handles heartbeats on the transport's connection
// goroutines (its fast path), which raft.Shutdown does not wait for: a
// heartbeat that passed Raft's shutdown check and then saves a newer term
// into a stable store closed in the meantime panics ("failed to save
// current term: database not open"). Close the transport after
// raft.Shutdown and before the stores.
type Transport struct {
	*raft.NetworkTransport

	mu      sync.RWMutex // held for reading while a heartbeat is handled
	stopped bool
}

// SetHeartbeatHandler installs fn as the heartbeat fast path, refused once
// Close has started.
func (t *Transport) SetHeartbeatHandler(fn func(rpc raft.RPC)) {
	if fn == nil {
		t.NetworkTransport.SetHeartbeatHandler(nil)
		return
	}
	t.NetworkTransport.SetHeartbeatHandler(func(rpc raft.RPC) {
		t.mu.RLock()
		defer t.mu.RUnlock()
		if t.stopped {
			rpc.Respond(nil, raft.ErrTransportShutdown)
			return
		}
		fn(rpc)
	})
}

// Close refuses heartbeats from now on, waits for the one being handled,
// then closes the transport.
func (t *Transport) Close() error {
	t.mu.Lock()
	t.stopped = true
	t.mu.Unlock()
	return t.NetworkTransport.Close()
}
