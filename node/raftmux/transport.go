package raftmux

import (
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
func NewTransport(l *Layer, logger hclog.Logger) *raft.NetworkTransport {
	return raft.NewNetworkTransportWithConfig(TransportConfig(l, logger))
}
