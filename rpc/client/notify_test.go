package client_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ghba/ghba/rpc"
	"github.com/ghba/ghba/rpc/client"
)

const mSubscribe = "Test.Subscribe" // keeps the caller's Peer

// TestNotify: a server notifies the client a request came from, through
// that request's connection, and Notify returns only once the client's
// OnInvalidate has run; concurrent notifications are each acknowledged;
// after the client is gone Notify fails.
func TestNotify(t *testing.T) {
	ts := startServer(t, "s1", rpc.ServerOptions{})
	peers := make(chan *rpc.Peer, 1)
	rpc.Register(ts.Server, mSubscribe, func(ctx context.Context, r *echoReq) (*echoResp, error) {
		p := rpc.PeerFrom(ctx)
		if p == nil {
			return nil, errors.New("no peer in the request's context")
		}
		peers <- p
		return &echoResp{N: r.N}, nil
	})
	var mu sync.Mutex
	var got []string
	cl := newClient(t, client.Options{Addrs: []string{ts.addr}, OnInvalidate: func(inv *rpc.Invalidation) {
		mu.Lock()
		got = append(got, inv.Paths...)
		got = append(got, inv.Prefixes...)
		mu.Unlock()
	}})
	ctx := context.Background()
	if err := cl.Call(ctx, ts.addr, mSubscribe, &echoReq{N: 1}, &echoResp{}); err != nil {
		t.Fatal(err)
	}
	p := <-peers
	if err := p.Notify(ctx, &rpc.Invalidation{Paths: []string{"/a"}, Prefixes: []string{"/d"}}); err != nil {
		t.Fatalf("Notify: %v", err)
	}
	mu.Lock()
	if !slices.Equal(got, []string{"/a", "/d"}) {
		t.Errorf("the client saw %v when Notify returned", got)
	}
	got = nil
	mu.Unlock()

	var wg sync.WaitGroup
	for i := range 50 {
		wg.Go(func() {
			if err := p.Notify(ctx, &rpc.Invalidation{Paths: []string{fmt.Sprintf("/f%d", i)}}); err != nil {
				t.Errorf("Notify %d: %v", i, err)
			}
		})
	}
	wg.Wait()
	mu.Lock()
	if len(got) != 50 {
		t.Errorf("%d of 50 concurrent notifications handled", len(got))
	}
	mu.Unlock()
	// Calls still work on the connection.
	if err := cl.Call(ctx, ts.addr, mEcho, &echoReq{N: 7}, &echoResp{}); err != nil {
		t.Fatal(err)
	}

	cl.Close()
	select {
	case <-p.Done():
	case <-time.After(waitTime):
		t.Fatal("the server did not see the connection end")
	}
	if err := p.Notify(ctx, &rpc.Invalidation{Paths: []string{"/late"}}); !errors.Is(err, rpc.ErrUnavailable) {
		t.Errorf("Notify after the client closed: %v, want ErrUnavailable", err)
	}
}
