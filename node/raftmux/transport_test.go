package raftmux

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// TestTransportCloseWaitsForHeartbeat: Close returns only after the
// heartbeat being handled has finished (a shard's stores are closed right
// after it), and a heartbeat after Close is refused without reaching the
// handler.
func TestTransportCloseWaitsForHeartbeat(t *testing.T) {
	quiet := hclog.NewNullLogger()
	ma, _ := startMux(t, Options{})
	mb, addrB := startMux(t, Options{})
	client := NewTransport(mustLayer(t, ma, "shard/s1"), quiet)
	defer client.Close()
	server := NewTransport(mustLayer(t, mb, "shard/s1"), quiet)

	entered, release := make(chan struct{}), make(chan struct{})
	var done, calls atomic.Int32
	server.SetHeartbeatHandler(func(rpc raft.RPC) {
		calls.Add(1)
		close(entered)
		<-release
		done.Store(1)
		rpc.Respond(&raft.AppendEntriesResponse{Success: true}, nil)
	})
	heartbeat := func() error {
		req := &raft.AppendEntriesRequest{RPCHeader: raft.RPCHeader{ID: []byte("n1"), Addr: []byte(addrB)}, Term: 1}
		return client.AppendEntries("n2", raft.ServerAddress(addrB), req, new(raft.AppendEntriesResponse))
	}
	sent := make(chan error, 1)
	go func() { sent <- heartbeat() }()
	select {
	case <-entered:
	case err := <-sent:
		t.Fatalf("heartbeat answered before its handler ran: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("the heartbeat handler never ran")
	}
	closed := make(chan int32, 1)
	go func() {
		server.Close()
		closed <- done.Load()
	}()
	// Give a Close that did not wait the time to return before the
	// handler is released; the check below does not depend on it.
	select {
	case d := <-closed:
		t.Fatalf("Close returned while the heartbeat was being handled (handler done: %d)", d)
	case <-time.After(100 * time.Millisecond):
	}
	close(release)
	if d := <-closed; d != 1 {
		t.Fatal("Close returned before the heartbeat's handler finished")
	}
	<-sent
	if err := heartbeat(); err == nil {
		t.Error("a heartbeat after Close was answered")
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("handler ran %d times, want 1", n)
	}
}
