package rpctest_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ghba/ghba/rpc"
	"github.com/ghba/ghba/rpc/client"
	"github.com/ghba/ghba/rpc/rpctest"
)

// fakeTB records what a helper does with its testing.TB. Methods it does
// not override panic (the embedded TB is nil).
type fakeTB struct {
	testing.TB
	failed   bool
	logs     []string
	fatal    string
	cleanups []func()
}

func (f *fakeTB) Helper()           {}
func (f *fakeTB) Name() string      { return "TestFake" }
func (f *fakeTB) Failed() bool      { return f.failed }
func (f *fakeTB) Cleanup(fn func()) { f.cleanups = append(f.cleanups, fn) }
func (f *fakeTB) Logf(format string, args ...any) {
	f.logs = append(f.logs, fmt.Sprintf(format, args...))
}

// Fatalf records the failure and ends the goroutine, as t.Fatalf does.
func (f *fakeTB) Fatalf(format string, args ...any) {
	f.fatal, f.failed = fmt.Sprintf(format, args...), true
	runtime.Goexit()
}

// run calls fn(f) on a goroutine of its own (Fatalf ends it) and then the
// cleanups, as the testing package does at the end of a test.
func (f *fakeTB) run(fn func(testing.TB)) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(f)
	}()
	<-done
	for i := len(f.cleanups) - 1; i >= 0; i-- {
		f.cleanups[i]()
	}
}

func TestEventually(t *testing.T) {
	tries := 0
	rpctest.Eventually(t, 5*time.Second, "the third try", func() error {
		if tries++; tries < 3 {
			return fmt.Errorf("try %d", tries)
		}
		return nil
	})
	if tries != 3 {
		t.Fatalf("%d tries", tries)
	}

	var f fakeTB
	start := time.Now()
	f.run(func(tb testing.TB) {
		rpctest.Eventually(tb, 30*time.Millisecond, "never", func() error { return errors.New("still wrong") })
	})
	if d := time.Since(start); d < 30*time.Millisecond || d > 5*time.Second {
		t.Errorf("gave up after %v", d)
	}
	if want := "never: not true after 30ms: still wrong"; f.fatal != want {
		t.Errorf("failure %q, want %q", f.fatal, want)
	}
}

func TestDeadAddr(t *testing.T) {
	addr := rpctest.DeadAddr(t)
	if c, err := net.DialTimeout("tcp", addr, 5*time.Second); err == nil {
		c.Close()
		t.Fatalf("dialing %s succeeded", addr)
	}
}

func TestLoggerShowsLogsOnlyOnFailure(t *testing.T) {
	t.Setenv(rpctest.LogEnv, "")
	for _, failed := range []bool{false, true} {
		f := fakeTB{failed: failed}
		f.run(func(tb testing.TB) {
			log := rpctest.Logger(tb, "node", "n1")
			log.Debug("hidden below info")
			log.Info("hello", "k", 1)
		})
		if !failed {
			if len(f.logs) != 0 {
				t.Errorf("passing test printed %q", f.logs)
			}
			continue
		}
		if len(f.logs) != 1 || !strings.Contains(f.logs[0], "msg=hello node=n1 k=1") || strings.Contains(f.logs[0], "hidden") {
			t.Errorf("failed test printed %q", f.logs)
		}
	}
}

// newClient returns a client of addrs, closed when t ends.
func newClient(t *testing.T, addrs ...string) *client.Client {
	c := client.New(client.Options{Addrs: addrs, Logger: rpctest.Logger(t)})
	t.Cleanup(func() { c.Close() })
	return c
}

// TestFakeNamespace runs a sequence of namespace operations against one
// fake server; each step sees the namespace the steps before left.
func TestFakeNamespace(t *testing.T) {
	f := rpctest.StartFakeServer(t, rpctest.FakeOptions{})
	f.Put("/a", rpc.TypeDir)
	f.Put("/a/down", rpc.TypeFile)
	f.SetHomeDown("/a/down", true)
	c := newClient(t, f.Addr())
	ctx := context.Background()
	mode := uint32(0o600)
	steps := []struct {
		name    string
		op      func() error
		wantErr error
	}{
		{"stat root", func() error { _, err := c.Stat(ctx, "/"); return err }, nil},
		{"stat relative", func() error { _, err := c.Stat(ctx, "a"); return err }, rpc.ErrInvalidPath},
		{"stat unclean", func() error { _, err := c.Stat(ctx, "/a/../a"); return err }, rpc.ErrInvalidPath},
		{"stat missing", func() error { _, err := c.Stat(ctx, "/nope"); return err }, fs.ErrNotExist},
		{"stat home down", func() error { _, err := c.Stat(ctx, "/a/down"); return err }, rpc.ErrUnavailable},
		{"create", func() error { _, err := c.Create(ctx, &rpc.CreateRequest{Path: "/a/f", Mode: 0o644}); return err }, nil},
		{"create again", func() error { _, err := c.Create(ctx, &rpc.CreateRequest{Path: "/a/f"}); return err }, fs.ErrExist},
		{"create without parent", func() error { _, err := c.Create(ctx, &rpc.CreateRequest{Path: "/x/f"}); return err }, fs.ErrNotExist},
		{"create under a file", func() error { _, err := c.Create(ctx, &rpc.CreateRequest{Path: "/a/f/g"}); return err }, rpc.ErrNotDir},
		{"create home down", func() error { _, err := c.Create(ctx, &rpc.CreateRequest{Path: "/a/down"}); return err }, rpc.ErrUnavailable},
		{"mkdir", func() error { _, err := c.Mkdir(ctx, &rpc.MkdirRequest{Path: "/a/d"}); return err }, nil},
		{"mkdir -p", func() error { _, err := c.Mkdir(ctx, &rpc.MkdirRequest{Path: "/a/d/e/f", Parents: true}); return err }, nil},
		{"mkdir -p existing", func() error { _, err := c.Mkdir(ctx, &rpc.MkdirRequest{Path: "/a/d", Parents: true}); return err }, nil},
		{"mkdir -p through a file", func() error { _, err := c.Mkdir(ctx, &rpc.MkdirRequest{Path: "/a/f/x", Parents: true}); return err }, rpc.ErrNotDir},
		{"setattr", func() error { _, err := c.SetAttr(ctx, &rpc.SetAttrRequest{Path: "/a/f", Mode: &mode}); return err }, nil},
		{"unlink a directory", func() error { return c.Unlink(ctx, "/a/d") }, rpc.ErrIsDir},
		{"rmdir a file", func() error { return c.Rmdir(ctx, "/a/f") }, rpc.ErrNotDir},
		{"rmdir not empty", func() error { return c.Rmdir(ctx, "/a/d") }, rpc.ErrNotEmpty},
		{"rename onto existing", func() error { _, err := c.Rename(ctx, "/a/f", "/a/d"); return err }, fs.ErrExist},
		{"rename missing", func() error { _, err := c.Rename(ctx, "/nope", "/a/x"); return err }, fs.ErrNotExist},
		{"rename a tree", func() error { _, err := c.Rename(ctx, "/a/d", "/a/moved"); return err }, nil},
		{"unlink", func() error { return c.Unlink(ctx, "/a/f") }, nil},
		{"rmdir", func() error { return c.Rmdir(ctx, "/a/moved/e/f") }, nil},
	}
	for _, s := range steps {
		err := s.op()
		if (s.wantErr == nil && err != nil) || !errors.Is(err, s.wantErr) {
			t.Errorf("%s: err %v, want %v", s.name, err, s.wantErr)
		}
	}
	want := []string{"/", "/a", "/a/down", "/a/moved", "/a/moved/e"}
	if got := f.Paths(); !slices.Equal(got, want) {
		t.Errorf("paths %v, want %v", got, want)
	}
	if sa, ok := f.LastSetAttr(); !ok || sa.Path != "/a/f" || sa.Mode == nil || *sa.Mode != mode {
		t.Errorf("last setattr %+v %v", sa, ok)
	}
	if n := f.Calls()[rpc.MethodStat]; n != 5 {
		t.Errorf("%d stat calls, want 5", n)
	}
}

func TestFakeAnswers(t *testing.T) {
	f := rpctest.StartFakeServer(t, rpctest.FakeOptions{})
	f.Put("/f", rpc.TypeFile)
	c := newClient(t, f.Addr())
	ctx := context.Background()

	st, err := c.Stat(ctx, "/f")
	if err != nil || st.Home != "node1" || st.HomeAddr != f.Addr() || st.Level != rpc.LevelL2 || st.Hops != 1 ||
		st.Mode != 0o644 || st.Mtime != rpctest.FakeMtime {
		t.Errorf("stat: %+v %v", st, err)
	}
	lk, err := c.Lookup(ctx, "/f")
	if err != nil || lk.Home != "node1" || lk.Level != rpc.LevelL1 || lk.Hops != 0 || lk.Type != rpc.TypeFile {
		t.Errorf("lookup: %+v %v", lk, err)
	}
	// A home that is no server: the answering server's address.
	f.SetHome("elsewhere")
	if st, err := c.Stat(ctx, "/f"); err != nil || st.Home != "elsewhere" || st.HomeAddr != f.Addr() {
		t.Errorf("stat with home elsewhere: %+v %v", st, err)
	}
	for i := range 5 {
		if _, err := c.Create(ctx, &rpc.CreateRequest{Path: fmt.Sprintf("/d%d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	before := f.Calls()[rpc.MethodReadDir]
	ents, err := c.ReadDirAll(ctx, "/", 100)
	if err != nil || len(ents) != 6 || ents[0].Home != "elsewhere" {
		t.Errorf("readdir: %+v %v", ents, err)
	}
	if pages := f.Calls()[rpc.MethodReadDir] - before; pages != 3 {
		t.Errorf("%d pages for 6 entries, want 3 of %d", pages, rpctest.FakePageSize)
	}

	// Default cluster answers.
	ms, err := c.Members(ctx)
	if err != nil || len(ms.Members) != 1 || ms.Members[0].ID != "node1" || ms.Members[0].RPCAddr != f.Addr() || ms.Members[0].RaftRole != "leader" {
		t.Errorf("members: %+v %v", ms, err)
	}
	gs, err := c.Groups(ctx)
	if err != nil || len(gs.Groups) != 1 || gs.Groups[0].Leader != "node1" {
		t.Errorf("groups: %+v %v", gs, err)
	}
	status, err := c.Status(ctx, f.Addr())
	if err != nil || status.NodeID != "node1" || status.RaftRole != "leader" || status.Files != 6 {
		t.Errorf("status: %+v %v", status, err)
	}
	if id, err := c.Ping(ctx, f.Addr()); err != nil || id != "node1" {
		t.Errorf("ping: %q %v", id, err)
	}
	if r, err := c.Join(ctx, f.Addr(), []string{"x:1", "y:2"}); err != nil || r.Joined != 2 || !slices.Equal(f.LastJoin(), []string{"x:1", "y:2"}) {
		t.Errorf("join: %+v %v, recorded %v", r, err, f.LastJoin())
	}
	if _, ok := f.LastLeave(); ok {
		t.Error("a leave recorded before any")
	}
	if r, err := c.Leave(ctx, f.Addr(), "node1"); err != nil || r.MovedShardReplicas != 0 || len(r.HandedShards) != 0 || r.HandedReplicas != 0 {
		t.Errorf("leave: %+v %v", r, err)
	}
	if req, ok := f.LastLeave(); !ok || req.NodeID != "node1" {
		t.Errorf("leave recorded %+v %v", req, ok)
	}

	// Canned answers replace the defaults.
	f.SetAnswers(rpctest.FakeAnswers{
		Members: []rpc.Member{{ID: "m"}},
		Groups:  []rpc.GroupInfo{{Group: "g9"}},
		Status:  &rpc.StatusResponse{NodeID: "s"},
		Leave:   &rpc.LeaveResponse{MovedShardReplicas: 4},
	})
	if ms, err := c.Members(ctx); err != nil || len(ms.Members) != 1 || ms.Members[0].ID != "m" {
		t.Errorf("canned members: %+v %v", ms, err)
	}
	if gs, err := c.Groups(ctx); err != nil || gs.Groups[0].Group != "g9" {
		t.Errorf("canned groups: %+v %v", gs, err)
	}
	if st, err := c.Status(ctx, f.Addr()); err != nil || st.NodeID != "s" {
		t.Errorf("canned status: %+v %v", st, err)
	}
	if r, err := c.Leave(ctx, f.Addr(), ""); err != nil || r.MovedShardReplicas != 4 {
		t.Errorf("canned leave: %+v %v", r, err)
	}
}

// TestFakeCluster: servers sharing a namespace see each other's changes,
// count their own calls, and answer with the home's address.
func TestFakeCluster(t *testing.T) {
	a := rpctest.StartFakeServer(t, rpctest.FakeOptions{ID: "a"})
	b := rpctest.StartFakeServer(t, rpctest.FakeOptions{ID: "b", Share: a})
	ctx := context.Background()
	if err := newClient(t).Call(ctx, a.Addr(), rpc.MethodCreate, &rpc.CreateRequest{Path: "/x"}, &rpc.CreateResponse{}); err != nil {
		t.Fatal(err)
	}
	var st rpc.StatResponse
	if err := newClient(t).Call(ctx, b.Addr(), rpc.MethodStat, &rpc.StatRequest{Path: "/x"}, &st); err != nil {
		t.Fatal(err)
	}
	if st.Home != "a" || st.HomeAddr != a.Addr() {
		t.Errorf("home %s at %s, want a at %s", st.Home, st.HomeAddr, a.Addr())
	}
	b.SetHome("b")
	if err := newClient(t).Call(ctx, a.Addr(), rpc.MethodStat, &rpc.StatRequest{Path: "/x"}, &st); err != nil || st.HomeAddr != b.Addr() {
		t.Errorf("home address %s, want %s (%v)", st.HomeAddr, b.Addr(), err)
	}
	if a.TotalCalls() != 2 || b.TotalCalls() != 1 || a.ID() != "a" {
		t.Errorf("calls a %v, b %v", a.Calls(), b.Calls())
	}
	var ms rpc.MembersResponse
	if err := newClient(t).Call(ctx, b.Addr(), rpc.MethodMembers, &rpc.MembersRequest{}, &ms); err != nil ||
		len(ms.Members) != 2 || ms.Members[1].ID != "b" || ms.Members[1].RaftRole != "follower" {
		t.Errorf("members %+v %v", ms, err)
	}
}

func TestSyncBuffer(t *testing.T) {
	var b rpctest.SyncBuffer
	done := make(chan struct{})
	for range 4 {
		go func() {
			defer func() { done <- struct{}{} }()
			for range 100 {
				fmt.Fprint(&b, "x")
				_ = b.String()
			}
		}()
	}
	for range 4 {
		<-done
	}
	if b.Len() != 400 || b.String() != strings.Repeat("x", 400) {
		t.Fatalf("%d bytes", b.Len())
	}
}

// TestStat is the example of the package documentation, kept compiling.
func TestStat(t *testing.T) {
	a := rpctest.StartFakeServer(t, rpctest.FakeOptions{ID: "a"})
	b := rpctest.StartFakeServer(t, rpctest.FakeOptions{ID: "b", Share: a})
	a.SetHome("b")
	a.Put("/d", rpc.TypeDir)
	c := client.New(client.Options{Addrs: []string{a.Addr()}, Logger: rpctest.Logger(t)})
	defer c.Close()
	if _, err := c.Stat(context.Background(), "/d"); err != nil {
		t.Fatal(err)
	}
	// The answer named b as the home: the next call goes there.
	if _, err := c.Create(context.Background(), &rpc.CreateRequest{Path: "/d/f"}); err != nil {
		t.Fatal(err)
	}
	if a.TotalCalls() != 1 || b.TotalCalls() != 1 {
		t.Fatalf("calls: a %v, b %v", a.Calls(), b.Calls())
	}
	rpctest.Eventually(t, 5*time.Second, "the file to be listed", func() error {
		if !slices.Contains(a.Paths(), "/d/f") {
			return errors.New("not yet")
		}
		return nil
	})
}
