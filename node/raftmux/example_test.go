package raftmux_test

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/ghba/ghba/node/raftmux"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// Two Raft groups of a node, its group Raft and a shard replica, on the
// node's one raft port. (Each is a group of one voter here, so that the
// example needs one node; with more, their peers dial this port.)
func Example() {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Println(err)
		return
	}
	mux := raftmux.New(ln, nil, raftmux.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- mux.Serve(ctx) }()
	defer func() {
		cancel() // stops Serve, which closes the mux
		<-served
	}()

	for _, id := range []string{"group", "shard/n3"} {
		layer, err := mux.Layer(id)
		if err != nil {
			fmt.Println(err)
			return
		}
		trans := raftmux.NewTransport(layer, hclog.NewNullLogger())
		defer trans.Close() // after the Raft's shutdown; closes the layer too
		r, err := startRaft(trans)
		if err != nil {
			fmt.Println(err)
			return
		}
		defer func() { r.Shutdown().Error() }()
		select {
		case <-r.LeaderCh():
			onePort := trans.LocalAddr() == raft.ServerAddress(ln.Addr().String())
			fmt.Printf("%s: %s (on the mux's port: %t)\n", id, r.State(), onePort)
		case <-time.After(10 * time.Second):
			fmt.Println(id, "has no leader")
		}
	}
	// Output:
	// group: Leader (on the mux's port: true)
	// shard/n3: Leader (on the mux's port: true)
}

// startRaft bootstraps and starts a Raft of one voter, n1, over trans.
func startRaft(trans raft.Transport) (*raft.Raft, error) {
	conf := raft.DefaultConfig()
	conf.LocalID = "n1"
	conf.Logger = hclog.NewNullLogger()
	conf.HeartbeatTimeout = 100 * time.Millisecond // short, for the example
	conf.ElectionTimeout = 100 * time.Millisecond
	conf.LeaderLeaseTimeout = 50 * time.Millisecond
	store, snaps := raft.NewInmemStore(), raft.NewInmemSnapshotStore()
	boot := raft.Configuration{Servers: []raft.Server{{ID: "n1", Address: trans.LocalAddr()}}}
	if err := raft.BootstrapCluster(conf, store, store, snaps, trans, boot); err != nil {
		return nil, err
	}
	return raft.NewRaft(conf, &raft.MockFSM{}, store, store, snaps, trans)
}
