package client_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ghba/ghba/rpc"
	"github.com/ghba/ghba/rpc/client"
	"github.com/ghba/ghba/rpc/internal/wire"
	"github.com/ghba/ghba/rpc/rpctest"
)

// Methods of the authenticating test server.
const (
	mWhoAmI = "Auth.WhoAmI" // needs a token; answers the identity it proved
	mPublic = "Public.Ping" // exempted by the Authenticate func
)

// Tokens the authenticating test server knows.
const (
	tokGood  = "good"  // identity "alice", allowed everything
	tokGuest = "guest" // identity "guest", refused mWhoAmI (permission)
)

// tokLongGood is a token of exactly MaxTokenLen bytes that the server
// accepts as "alice".
var tokLongGood = tokGood + strings.Repeat("x", rpc.MaxTokenLen-len(tokGood))

type identityKey struct{}

type whoResp struct {
	N   int    `json:"n"`
	Who string `json:"who"`
}

// authServer is a testServer whose Authenticate accepts tokGood, exempts
// mPublic, and counts the executions of the two methods.
type authServer struct {
	*testServer
	whoRuns    atomic.Int64
	publicRuns atomic.Int64
}

func authenticate(ctx context.Context, method, token string) (context.Context, error) {
	if method == mPublic {
		return ctx, nil // whatever the token
	}
	switch token {
	case tokGood, tokLongGood:
		return context.WithValue(ctx, identityKey{}, "alice"), nil
	case tokGuest:
		return nil, fmt.Errorf("%s: guest may not: %w", method, fs.ErrPermission)
	case "":
		return nil, fmt.Errorf("%s: no token: %w", method, rpc.ErrUnauthenticated)
	}
	return nil, fmt.Errorf("%s: unknown token: %w", method, rpc.ErrUnauthenticated)
}

func startAuthServer(t *testing.T) *authServer {
	t.Helper()
	as := &authServer{testServer: startServer(t, "auth", rpc.ServerOptions{Authenticate: authenticate})}
	who := func(ctx context.Context) string {
		s, _ := ctx.Value(identityKey{}).(string)
		return s
	}
	rpc.Register(as.Server, mWhoAmI, func(ctx context.Context, r *echoReq) (*whoResp, error) {
		as.whoRuns.Add(1)
		return &whoResp{N: r.N, Who: who(ctx)}, nil
	})
	rpc.Register(as.Server, mPublic, func(ctx context.Context, r *echoReq) (*whoResp, error) {
		as.publicRuns.Add(1)
		return &whoResp{N: r.N, Who: who(ctx)}, nil
	})
	return as
}

func TestAuthenticate(t *testing.T) {
	as := startAuthServer(t)
	tooLong := strings.Repeat("x", rpc.MaxTokenLen+1)
	tests := []struct {
		name    string
		token   string
		method  string
		wantWho string
		wantErr error  // nil: the call succeeds
		wantMsg string // in the error text (the server's message)
		closed  bool   // the server closes the connection: no answer
	}{
		{name: "no token", method: mWhoAmI, wantErr: rpc.ErrUnauthenticated, wantMsg: "no token"},
		{name: "unknown token", token: "bad", method: mWhoAmI, wantErr: rpc.ErrUnauthenticated, wantMsg: "unknown token"},
		{name: "good token", token: tokGood, method: mWhoAmI, wantWho: "alice"},
		{name: "token of MaxTokenLen", token: tokLongGood, method: mWhoAmI, wantWho: "alice"},
		{name: "known token, not allowed", token: tokGuest, method: mWhoAmI, wantErr: fs.ErrPermission, wantMsg: "guest may not"},
		{name: "exempt method without token", method: mPublic},
		{name: "exempt method with unknown token", token: "bad", method: mPublic},
		{name: "exempt method with good token", token: tokGood, method: mPublic}, // not looked at
		{name: "token over MaxTokenLen", token: tooLong, method: mPublic, wantErr: rpc.ErrUnavailable, closed: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			whoBefore, publicBefore := as.whoRuns.Load(), as.publicRuns.Load()
			c := newClient(t, client.Options{Token: tt.token})
			var resp whoResp
			err := c.Call(context.Background(), as.addr, tt.method, &echoReq{N: 7}, &resp)
			ran := as.whoRuns.Load() - whoBefore + as.publicRuns.Load() - publicBefore
			if tt.wantErr == nil {
				if err != nil {
					t.Fatalf("Call: %v", err)
				}
				if resp.N != 7 || resp.Who != tt.wantWho {
					t.Fatalf("response %+v, want n=7 who=%q", resp, tt.wantWho)
				}
				if ran != 1 {
					t.Fatalf("handler ran %d times, want 1", ran)
				}
				return
			}
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("Call: %v, want %v", err, tt.wantErr)
			}
			if ran != 0 {
				t.Fatalf("handler ran %d times after a refusal", ran)
			}
			if tt.wantErr != rpc.ErrUnauthenticated && errors.Is(err, rpc.ErrUnauthenticated) {
				t.Fatalf("Call: %v also matches ErrUnauthenticated", err)
			}
			if !strings.Contains(err.Error(), tt.wantMsg) {
				t.Fatalf("Call: %q does not carry the server's message %q", err, tt.wantMsg)
			}
			if !tt.closed {
				// Refused by Authenticate: an answer, so no retry elsewhere,
				// and the connection stays usable.
				if !errors.Is(err, rpc.ErrRemote) {
					t.Fatalf("Call: %v is not a remote error", err)
				}
				if n := c.PooledConns(as.addr); n != 1 {
					t.Fatalf("%d pooled connections after a refusal, want 1", n)
				}
				if err := c.Call(context.Background(), as.addr, mPublic, &echoReq{}, nil); err != nil {
					t.Fatalf("exempt call on the same connection: %v", err)
				}
				return
			}
			// The server closed the connection on reading the auth frame,
			// before the request behind it: the client cannot know that, so
			// the call is "unavailable, outcome unknown" (which CallAny
			// retries elsewhere only for idempotent methods).
			t.Logf("client error: %v", err)
			if errors.Is(err, rpc.ErrRemote) || !errors.Is(err, rpc.ErrOutcomeUnknown) {
				t.Fatalf("Call: %v, want a transport error with ErrOutcomeUnknown", err)
			}
		})
	}
}

// TestAuthenticateConcurrentFirstCalls starts many calls at once on a new
// client limited to one connection: the auth frame precedes the first
// request on the wire, so every call carries the identity. A client
// without a token on the same server is refused meanwhile: tokens are per
// connection.
func TestAuthenticateConcurrentFirstCalls(t *testing.T) {
	as := startAuthServer(t)
	good := newClient(t, client.Options{Token: tokGood, MaxConnsPerAddr: 1})
	anon := newClient(t, client.Options{MaxConnsPerAddr: 1})
	const n = 200
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			var resp whoResp
			if err := good.Call(context.Background(), as.addr, mWhoAmI, &echoReq{N: i}, &resp); err != nil {
				t.Errorf("call %d: %v", i, err)
			} else if resp.N != i || resp.Who != "alice" {
				t.Errorf("call %d: %+v, want who=alice", i, resp)
			}
		})
		wg.Go(func() {
			<-start
			err := anon.Call(context.Background(), as.addr, mWhoAmI, &echoReq{N: i}, nil)
			if !errors.Is(err, rpc.ErrUnauthenticated) {
				t.Errorf("anonymous call %d: %v, want ErrUnauthenticated", i, err)
			}
		})
	}
	close(start)
	wg.Wait()
	if k := good.PooledConns(as.addr); k != 1 {
		t.Errorf("%d pooled connections, want 1", k)
	}
	if k := as.whoRuns.Load(); k != n {
		t.Errorf("handler ran %d times, want %d", k, n)
	}
}

// TestAuthFrameOnTheWire speaks the protocol directly: an auth frame
// applies to the requests read after it, a later one replaces it, and an
// empty or over-long token closes the connection.
func TestAuthFrameOnTheWire(t *testing.T) {
	as := startAuthServer(t)
	auth := func(token string) []byte { // kind 5, as wire/frame.go specifies
		f := binary.BigEndian.AppendUint32(nil, uint32(1+len(token)))
		return append(append(f, 5), token...)
	}
	body := rpctest.EncodeBody(&echoReq{})
	req := func(seq uint64) []byte {
		return append(wire.AppendRequestHeader(nil, len(body), seq, 0, mWhoAmI), body...)
	}
	dial := func(t *testing.T) net.Conn {
		nc, err := net.Dial("tcp", as.addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { nc.Close() })
		nc.SetDeadline(time.Now().Add(waitTime))
		return nc
	}

	t.Run("applies to later requests", func(t *testing.T) {
		nc := dial(t)
		frames := bytes.Join([][]byte{[]byte(wire.Preface),
			req(1), auth(tokGood), req(2), auth("bad"), req(3), auth(tokGood), req(4), auth(tokGood), req(5)}, nil)
		if _, err := nc.Write(frames); err != nil {
			t.Fatal(err)
		}
		want := map[uint64]rpc.Code{1: rpc.CodeUnauthenticated, 2: rpc.CodeOK, 3: rpc.CodeUnauthenticated, 4: rpc.CodeOK, 5: rpc.CodeOK}
		fr := &rpctest.FrameReader{R: nc}
		got := map[uint64]rpc.Code{}
		for range want {
			kind, p := fr.Next(t)
			seq, code, err := rpctest.ParseResponse(p)
			if kind != wire.KindResponse || err != nil {
				t.Fatalf("frame kind %d: %v", kind, err)
			}
			got[seq] = code
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("codes by seq %v, want %v", got, want)
		}
	})

	for _, tc := range []struct {
		name  string
		token string
	}{
		{"empty token", ""},
		{"token over MaxTokenLen", strings.Repeat("x", rpc.MaxTokenLen+1)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nc := dial(t)
			frames := bytes.Join([][]byte{[]byte(wire.Preface), auth(tc.token), req(1)}, nil)
			if _, err := nc.Write(frames); err != nil {
				t.Fatal(err)
			}
			// The server closes the connection without answering.
			n, err := io.Copy(io.Discard, nc)
			if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
				t.Fatal("server did not close the connection")
			}
			if n != 0 {
				t.Fatalf("server sent %d bytes before closing", n)
			}
		})
	}
}

// TestTokenWithoutAuthenticate: a server without Authenticate accepts auth
// frames and ignores them.
func TestTokenWithoutAuthenticate(t *testing.T) {
	ts := startServer(t, "s1", rpc.ServerOptions{})
	c := newClient(t, client.Options{Token: "anything"})
	var resp echoResp
	if err := c.Call(context.Background(), ts.addr, mEcho, &echoReq{N: 3}, &resp); err != nil || resp.N != 3 {
		t.Fatalf("Call: %v (%+v)", err, resp)
	}
}
