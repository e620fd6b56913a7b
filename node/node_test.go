package node_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ghba/ghba/fsm"
	"github.com/ghba/ghba/node"
	"github.com/ghba/ghba/node/nodetest"
	"github.com/ghba/ghba/node/store"
	"github.com/ghba/ghba/rpc/rpctest"
	"go.uber.org/goleak"
)

// TestStartFailsCleanly checks that a node whose port is taken fails to
// start with an error naming the port, and leaves nothing running.
func TestStartFailsCleanly(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t, goleakOptions()...) })
	cfg := nodetest.Config(t, "busy")
	ln, err := net.Listen("tcp", net.JoinHostPort(cfg.BindAddr, strconv.Itoa(cfg.Ports.HTTP)))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	n, err := node.New(cfg, rpctest.Logger(t), node.WithTuning(nodetest.Tuning()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = n.Start(ctx)
	if err == nil {
		t.Fatal("Start succeeded with ports.http taken")
	}
	if !strings.Contains(err.Error(), "ports.http") {
		t.Errorf("error %q does not name ports.http", err)
	}
	if err := n.Shutdown(ctx); err != nil {
		t.Errorf("Shutdown after failed Start: %v", err)
	}
	// The data dir is usable again (the store was closed).
	ln.Close()
	n2, err := node.New(cfg, rpctest.Logger(t), node.WithTuning(nodetest.Tuning()))
	if err != nil {
		t.Fatal(err)
	}
	if err := n2.Start(ctx); err != nil {
		t.Fatalf("second Start: %v", err)
	}
	if err := n2.Shutdown(ctx); err != nil {
		t.Errorf("Shutdown: %v", err)
	}
}

// TestStartRefusesSingleCopyData: a data directory whose store holds paths
// (the single-copy format of builds before replicated shards) is refused
// with a config error that says what to do, and nothing is changed.
func TestStartRefusesSingleCopyData(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t, goleakOptions()...) })
	cfg := nodetest.Config(t, "old")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := store.Open(ctx, store.Options{Dir: filepath.Join(cfg.DataDir, "meta")})
	if err != nil {
		t.Fatal(err)
	}
	var b store.Batch
	b.PutInode("/", store.Inode{Type: store.TypeDir, Mode: 0o755})
	if err := st.Commit(ctx, &b); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	n, err := node.New(cfg, rpctest.Logger(t), node.WithTuning(nodetest.Tuning()))
	if err != nil {
		t.Fatal(err)
	}
	err = n.Start(ctx)
	if !errors.Is(err, node.ErrConfig) || !strings.Contains(err.Error(), "single-copy") {
		t.Errorf("Start on a single-copy data dir: %v, want a config error about the format", err)
	}
	if err := n.Shutdown(ctx); err != nil {
		t.Errorf("Shutdown after failed Start: %v", err)
	}
}

// TestNewValidates checks that New refuses a bad config and that Shutdown
// of a node never started is a no-op.
func TestNewValidates(t *testing.T) {
	cfg := node.DefaultConfig()
	if _, err := node.New(cfg, nil); !errors.Is(err, node.ErrConfig) {
		t.Fatalf("New with empty node_id: %v", err)
	}
	cfg = nodetest.Config(t, "idle")
	n, err := node.New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := n.Leave(context.Background()); err == nil {
		t.Fatal("Leave on a node never started succeeded")
	}
}

// TestUnknownCommandStopsNode commits to a group of two, as a newer build
// would, first a log entry of an unknown command marked ignorable (both
// members skip it and keep serving), then one of an unknown command that is
// not: the leader's FSM halts and the node stops on its own with Err
// matching fsm.ErrHalted instead of going on in a group that may have
// diverged. The follower either learns that the entry committed and stops
// too, or (its leader gone before telling it) never applies anything past
// it.
func TestUnknownCommandStopsNode(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t, goleakOptions()...) })
	log := rpctest.Logger(t)
	c1 := nodetest.Config(t, "n1")
	c1.Bootstrap, c1.Group = true, "g1"
	c2 := nodetest.Config(t, "n2")
	c2.Group, c2.RetryJoin = "g1", []string{nodetest.SerfAddr(c1)}
	nodes := []*node.Node{nodetest.Start(t, c1, log), nodetest.Start(t, c2, log)}
	leader := checkGroup(t, 30*time.Second, nodes, []string{"n1", "n2"})
	commit := func(entry []byte) uint64 {
		t.Helper()
		f := leader.Raft().Apply(entry, 5*time.Second)
		if err := f.Error(); err != nil {
			t.Fatalf("raft apply: %v", err)
		}
		return f.Index()
	}

	commit([]byte{byte(fsm.IgnorableFlag | 100), fsm.FormatV1, 0x80})
	rpctest.Eventually(t, 10*time.Second, "ignorable entry skipped everywhere", func() error {
		for _, n := range nodes {
			if k, _ := n.GroupFSM().Skipped(); k != 1 {
				return fmt.Errorf("%s skipped %d entries", n.ID(), k)
			}
			if err := n.Err(); err != nil {
				return fmt.Errorf("%s stopped: %w", n.ID(), err)
			}
		}
		return nil
	})

	unknown := commit([]byte{100, fsm.FormatV1, 0x80})
	select {
	case <-leader.Done():
	case <-time.After(20 * time.Second):
		t.Fatalf("the leader %s still runs after an unknown command", leader.ID())
	}
	for _, n := range nodes {
		select {
		case <-n.Done():
			if err := n.Err(); !errors.Is(err, fsm.ErrHalted) {
				t.Errorf("%s: Err() = %v, want fsm.ErrHalted", n.ID(), err)
			}
		default:
			if got := n.GroupFSM().AppliedIndex(); got >= unknown {
				t.Errorf("%s runs with its FSM at index %d, past the unknown entry %d", n.ID(), got, unknown)
			}
		}
	}
}

// TestNotServingUntilJoined: a node that runs but is not a member of a
// group does not say it serves: members shows it "starting", /v1/health
// answers 503 with the reason, /v1/health/live 200, ghba_serving 0.
func TestNotServingUntilJoined(t *testing.T) {
	cfg := nodetest.Config(t, "n1") // neither bootstrap nor retry_join: it waits to be joined
	n := nodetest.Start(t, cfg, rpctest.Logger(t, "node", "n1"))
	ctx := context.Background()
	// Long enough for several readiness checks.
	rpctest.Eventually(t, 10*time.Second, "status starting with a reason", func() error {
		if st := n.Status(); st.Status != "starting" || !strings.Contains(st.NotServing, "group") {
			return fmt.Errorf("status %q (%q)", st.Status, st.NotServing)
		}
		return nil
	})
	for _, m := range n.Members(ctx) {
		if m.ID == "n1" && m.Status != "starting" {
			t.Errorf("members shows n1 %q, want starting", m.Status)
		}
	}
	get := func(path string) (int, string) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+nodetest.HTTPAddr(cfg)+path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get("/v1/health"); code != http.StatusServiceUnavailable || !strings.Contains(body, `"status":"starting"`) || !strings.Contains(body, "group") {
		t.Errorf("/v1/health: %d %s; want 503, starting, a reason", code, body)
	}
	if code, _ := get("/v1/health/live"); code != http.StatusOK {
		t.Errorf("/v1/health/live: %d, want 200", code)
	}
	if _, body := get("/metrics"); !strings.Contains(body, "ghba_serving 0") {
		t.Error("/metrics lacks ghba_serving 0")
	}
}

// TestDebugEndpoint: /debug/pprof/ is served only with enable_debug, and
// with ACLs on only to a management token (here the server token).
func TestDebugEndpoint(t *testing.T) {
	const server = "server-token-0123456789"
	for _, tc := range []struct {
		name         string
		debug, acls  bool
		token        string
		want         int
		wantProfiles bool
	}{
		{"off", false, false, "", http.StatusNotFound, false},
		{"on", true, false, "", http.StatusOK, true},
		{"acl without token", true, true, "", http.StatusUnauthorized, false},
		{"acl server token", true, true, server, http.StatusOK, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := nodetest.Config(t, "n1")
			cfg.EnableDebug = tc.debug
			if tc.acls {
				cfg.ACL.Enabled = true
				cfg.ACL.ServerToken = server
			}
			nodetest.Start(t, cfg, rpctest.Logger(t, "node", "n1"))
			req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, "http://"+nodetest.HTTPAddr(cfg)+"/debug/pprof/", nil)
			if tc.token != "" {
				req.Header.Set("Authorization", "Bearer "+tc.token)
			}
			var code int
			var body string
			rpctest.Eventually(t, 10*time.Second, "the HTTP port answers", func() error {
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					return err
				}
				defer resp.Body.Close()
				b, _ := io.ReadAll(resp.Body)
				code, body = resp.StatusCode, string(b)
				return nil
			})
			if code != tc.want || strings.Contains(body, "goroutine") != tc.wantProfiles {
				t.Errorf("GET /debug/pprof/: %d, profiles listed %v; want %d, %v\n%s", code, strings.Contains(body, "goroutine"), tc.want, tc.wantProfiles, body)
			}
		})
	}
}
