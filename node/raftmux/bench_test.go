package raftmux

import (
	"bytes"
	"net"
	"sync"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// benchTransports returns a client and a server raft transport on
// loopback, through two muxes ("mux") or raft's own TCP transports
// ("tcp"), with the same settings; the server answers every AppendEntries
// with success until b ends.
func benchTransports(b *testing.B, kind string) (client, server *raft.NetworkTransport) {
	b.Helper()
	quiet := hclog.NewNullLogger()
	switch kind {
	case "mux":
		ma, _ := startMux(b, Options{})
		mb, _ := startMux(b, Options{})
		client = NewTransport(mustLayer(b, ma, "shard/n1"), quiet).NetworkTransport
		server = NewTransport(mustLayer(b, mb, "shard/n1"), quiet).NetworkTransport
	case "tcp":
		var err error
		for _, tr := range []**raft.NetworkTransport{&client, &server} {
			conf := TransportConfig(nil, quiet)
			conf.Stream = nil
			if *tr, err = raft.NewTCPTransportWithConfig("127.0.0.1:0", nil, conf); err != nil {
				b.Fatal(err)
			}
		}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case rpc := <-server.Consumer():
				rpc.Respond(&raft.AppendEntriesResponse{Term: 1, Success: true}, nil)
			case <-done:
				return
			}
		}
	})
	b.Cleanup(func() {
		close(done)
		wg.Wait()
		client.CloseStreams()
		client.Close()
		server.Close()
	})
	return client, server
}

// BenchmarkRoundTrip measures one AppendEntries round trip over a pooled
// connection: through the mux and through raft's plain TCP transport.
func BenchmarkRoundTrip(b *testing.B) {
	sizes := []struct {
		name    string
		entries int
	}{{"heartbeat", 0}, {"16x256B", 16}}
	for _, kind := range []string{"mux", "tcp"} {
		for _, size := range sizes {
			b.Run(kind+"/"+size.name, func(b *testing.B) {
				client, server := benchTransports(b, kind)
				args := &raft.AppendEntriesRequest{
					RPCHeader: raft.RPCHeader{ID: []byte("n1"), Addr: []byte(client.LocalAddr())},
					Term:      1,
				}
				for i := range size.entries {
					args.Entries = append(args.Entries, &raft.Log{
						Index: uint64(i + 1), Term: 1, Type: raft.LogCommand, Data: bytes.Repeat([]byte{'x'}, 256),
					})
				}
				var resp raft.AppendEntriesResponse
				for b.Loop() {
					if err := client.AppendEntries("n2", server.LocalAddr(), args, &resp); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkConnect measures setting up a connection: a layer's Dial, the
// header and the handoff to the peer's layer, against a plain TCP dial and
// accept.
func BenchmarkConnect(b *testing.B) {
	b.Run("mux", func(b *testing.B) {
		ma, _ := startMux(b, Options{})
		mb, _ := startMux(b, Options{})
		la, lb := mustLayer(b, ma, "group"), mustLayer(b, mb, "group")
		connectLoop(b, func() (net.Conn, error) { return la.Dial(addrOf(mb), 0) }, lb.Accept)
	})
	b.Run("tcp", func(b *testing.B) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		defer ln.Close()
		connectLoop(b, func() (net.Conn, error) { return net.Dial("tcp", ln.Addr().String()) }, ln.Accept)
	})
}

// connectLoop dials and accepts a connection, and closes both ends, b.N
// times.
func connectLoop(b *testing.B, dial, accept func() (net.Conn, error)) {
	for b.Loop() {
		c, err := dial()
		if err != nil {
			b.Fatal(err)
		}
		s, err := accept()
		if err != nil {
			b.Fatal(err)
		}
		c.Close()
		s.Close()
	}
}
