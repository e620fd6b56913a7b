package client_test

import (
	"context"
	"net"
	"runtime"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ghba/ghba/rpc"
	"github.com/ghba/ghba/rpc/client"
)

// countConn counts socket writes and reads.
type countConn struct {
	net.Conn
	writes, reads *atomic.Int64
}

func (c countConn) Write(p []byte) (int, error) { c.writes.Add(1); return c.Conn.Write(p) }
func (c countConn) Read(p []byte) (int, error)  { c.reads.Add(1); return c.Conn.Read(p) }

// cpuTime is the process's user+system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkCallParallel measures a small call (StatRequest → StatResponse)
// over loopback from 16 goroutines sharing one Client.
func BenchmarkCallParallel(b *testing.B) {
	s := rpc.NewServer(rpc.ServerOptions{})
	rpc.Register(s, rpc.MethodStat, func(ctx context.Context, r *rpc.StatRequest) (*rpc.StatResponse, error) {
		return &rpc.StatResponse{Inode: rpc.Inode{Path: r.Path, Type: rpc.TypeFile, Mode: 0o644, Home: "n1"}, Level: rpc.LevelL1, Hops: 1}, nil
	})
	addr := serveOnLoopback(b, s)
	var writes, reads atomic.Int64
	var d net.Dialer
	c := client.New(client.Options{Addrs: []string{addr}, Dial: func(ctx context.Context, network, addr string) (net.Conn, error) {
		nc, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return countConn{nc, &writes, &reads}, nil
	}})
	defer c.Close()
	ctx := context.Background()
	var warm rpc.StatResponse
	if err := c.Call(ctx, addr, rpc.MethodStat, &rpc.StatRequest{Path: "/warm"}, &warm); err != nil {
		b.Fatal(err)
	}
	b.SetParallelism(max(1, 16/runtime.GOMAXPROCS(0)))
	b.ReportAllocs()
	writes.Store(0)
	reads.Store(0)
	cpu0 := cpuTime()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		req := &rpc.StatRequest{Path: "/bench/dir/file.txt"}
		var resp rpc.StatResponse
		for pb.Next() {
			if err := c.Call(ctx, addr, rpc.MethodStat, req, &resp); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	// CPU time (client and server, both in this process) and client socket
	// calls per call: steadier than ns/op on a shared machine.
	b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
	b.ReportMetric(float64(writes.Load())/float64(b.N), "cwrites/op")
	b.ReportMetric(float64(reads.Load())/float64(b.N), "creads/op")
}

// BenchmarkCallSerial is one goroutine doing round trips (latency).
func BenchmarkCallSerial(b *testing.B) {
	s := rpc.NewServer(rpc.ServerOptions{})
	rpc.Register(s, rpc.MethodStat, func(ctx context.Context, r *rpc.StatRequest) (*rpc.StatResponse, error) {
		return &rpc.StatResponse{Inode: rpc.Inode{Path: r.Path}}, nil
	})
	addr := serveOnLoopback(b, s)
	c := client.New(client.Options{Addrs: []string{addr}})
	defer c.Close()
	ctx := context.Background()
	req := &rpc.StatRequest{Path: "/bench/dir/file.txt"}
	var resp rpc.StatResponse
	b.ReportAllocs()
	for b.Loop() {
		if err := c.Call(ctx, addr, rpc.MethodStat, req, &resp); err != nil {
			b.Fatal(err)
		}
	}
}

func serveOnLoopback(b *testing.B, s *rpc.Server) string {
	b.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	done := make(chan struct{})
	go func() { s.Serve(context.Background(), ln); close(done) }()
	b.Cleanup(func() { s.Close(); <-done })
	return ln.Addr().String()
}
