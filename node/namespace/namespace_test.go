package namespace_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ghba/ghba/node/namespace"
	"github.com/ghba/ghba/node/nodetest"
	"github.com/ghba/ghba/rpc"
	"github.com/ghba/ghba/rpc/client"
)

// nsOps calls the namespace of one node over the wire.
type nsOps struct {
	t    testing.TB
	cl   *client.Client
	addr string
}

func via(c *nodetest.Namespaces, id string) nsOps {
	return nsOps{cl: c.Client, addr: c.Nodes[id].Addr}
}

func (o nsOps) call(method string, req, resp any) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return o.cl.Call(ctx, o.addr, method, req, resp)
}

func (o nsOps) stat(p string) (*rpc.StatResponse, error) {
	var r rpc.StatResponse
	if err := o.call(rpc.MethodStat, &rpc.StatRequest{Path: p}, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

func (o nsOps) create(p string) error {
	return o.call(rpc.MethodCreate, &rpc.CreateRequest{Path: p, Mode: 0o644}, &rpc.CreateResponse{})
}

func (o nsOps) mkdir(p string, parents bool) error {
	return o.call(rpc.MethodMkdir, &rpc.MkdirRequest{Path: p, Mode: 0o755, Parents: parents}, &rpc.MkdirResponse{})
}

func (o nsOps) unlink(p string) error {
	return o.call(rpc.MethodUnlink, &rpc.UnlinkRequest{Path: p}, &rpc.UnlinkResponse{})
}

func (o nsOps) rmdir(p string) error {
	return o.call(rpc.MethodRmdir, &rpc.RmdirRequest{Path: p}, &rpc.RmdirResponse{})
}

func (o nsOps) rename(a, b string) error {
	return o.call(rpc.MethodRename, &rpc.RenameRequest{Src: a, Dst: b}, &rpc.RenameResponse{})
}

func (o nsOps) readdir(p string, after string, limit int) (*rpc.ReadDirResponse, error) {
	var r rpc.ReadDirResponse
	if err := o.call(rpc.MethodReadDir, &rpc.ReadDirRequest{Path: p, After: after, Limit: limit}, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// names lists a whole directory.
func (o nsOps) names(p string) ([]string, error) {
	var out []string
	after := ""
	for {
		r, err := o.readdir(p, after, 7)
		if err != nil {
			return nil, err
		}
		for _, e := range r.Entries {
			out = append(out, e.Name+map[string]string{rpc.TypeDir: "/", rpc.TypeFile: ""}[e.Type])
		}
		if r.Next == "" {
			return out, nil
		}
		after = r.Next
	}
}

func (o nsOps) setattr(r *rpc.SetAttrRequest) (*rpc.SetAttrResponse, error) {
	var resp rpc.SetAttrResponse
	if err := o.call(rpc.MethodSetAttr, r, &resp); err != nil {
		return nil, err
	}
	return &resp, nil
}

func u32(v uint32) *uint32 { return &v }
func i64(v int64) *int64   { return &v }

// TestOpSemantics runs the table of operations and their expected outcomes
// through 1 node and through 3 nodes (each step entering at another node).
func TestOpSemantics(t *testing.T) {
	for _, size := range []int{1, 3} {
		t.Run(fmt.Sprintf("nodes=%d", size), func(t *testing.T) {
			t.Parallel()
			c := nodetest.NewNamespaces(t, nodetest.NamespacesOptions{Nodes: size})
			step := 0
			via := func() nsOps {
				step++
				return via(c, c.IDs[step%len(c.IDs)])
			}
			expect := func(what, want string, err error) {
				t.Helper()
				if got := errKind(err); got != want {
					t.Errorf("step %d: %s: got %s (%v), want %s", step, what, got, err, want)
				}
			}
			type op struct {
				name string
				run  func(o nsOps) error
				want string
			}
			mk := func(p string) op { return op{"mkdir " + p, func(o nsOps) error { return o.mkdir(p, false) }, "ok"} }
			mkp := func(p string) op { return op{"mkdir -p " + p, func(o nsOps) error { return o.mkdir(p, true) }, "ok"} }
			cr := func(p string) op { return op{"create " + p, func(o nsOps) error { return o.create(p) }, "ok"} }
			st := func(p string) op {
				return op{"stat " + p, func(o nsOps) error { _, err := o.stat(p); return err }, "ok"}
			}
			ul := func(p string) op { return op{"unlink " + p, func(o nsOps) error { return o.unlink(p) }, "ok"} }
			rd := func(p string) op { return op{"rmdir " + p, func(o nsOps) error { return o.rmdir(p) }, "ok"} }
			mv := func(a, b string) op {
				return op{"rename " + a + " " + b, func(o nsOps) error { return o.rename(a, b) }, "ok"}
			}
			ls := func(p string) op {
				return op{"readdir " + p, func(o nsOps) error { _, err := o.readdir(p, "", 0); return err }, "ok"}
			}
			want := func(o op, w string) op { o.want = w; return o }
			table := []op{
				st("/"),
				mk("/a"),
				want(mk("/a"), "exist"),
				want(mk("/"), "exist"),
				cr("/a/f"),
				want(cr("/a/f"), "exist"),
				want(cr("/a"), "exist"),
				want(cr("/nope/f"), "notexist"),
				want(cr("/a/f/x"), "notdir"),
				want(mk("/a/f/x"), "notdir"),
				st("/a/f"),
				st("/a/"),
				st("//a//f"),
				want(st("/a/g"), "notexist"),
				want(st("/nope/g"), "notexist"),
				want(st("/a/f/x"), "notdir"),
				want(st("a/f"), "invalid"),
				want(st("/a/../a/f"), "invalid"),
				want(st("/a/\x00"), "invalid"),
				want(cr("relative"), "invalid"),
				want(ls("/a/f"), "notdir"),
				want(ls("/nope"), "notexist"),
				ls("/a"),
				want(ul("/a"), "isdir"),
				want(ul("/"), "isdir"),
				want(rd("/"), "invalid"),
				want(rd("/a/f"), "notdir"),
				want(rd("/a"), "notempty"),
				want(ul("/a/nope"), "notexist"),
				want(rd("/a/nope"), "notexist"),
				{"chmod /a/f", func(o nsOps) error {
					r, err := o.setattr(&rpc.SetAttrRequest{Path: "/a/f", Mode: u32(0o600), UID: u32(7), GID: u32(8), Size: i64(42)})
					if err != nil {
						return err
					}
					s, err := via().stat("/a/f")
					if err != nil {
						return err
					}
					if s.Mode != 0o600 || s.UID != 7 || s.GID != 8 || s.Size != 42 || s.Version != r.Inode.Version || s.Version < 2 {
						return fmt.Errorf("after setattr: %+v", s.Inode)
					}
					return nil
				}, "ok"},
				{"truncate a dir", func(o nsOps) error { _, err := o.setattr(&rpc.SetAttrRequest{Path: "/a", Size: i64(1)}); return err }, "isdir"},
				{"negative size", func(o nsOps) error { _, err := o.setattr(&rpc.SetAttrRequest{Path: "/a/f", Size: i64(-1)}); return err }, "einval"},
				{"bad mode", func(o nsOps) error {
					_, err := o.setattr(&rpc.SetAttrRequest{Path: "/a/f", Mode: u32(0o170000)})
					return err
				}, "einval"},
				{"create bad mode", func(o nsOps) error {
					return o.call(rpc.MethodCreate, &rpc.CreateRequest{Path: "/a/m", Mode: 0o10000}, &rpc.CreateResponse{})
				}, "einval"},
				{"setattr missing", func(o nsOps) error { _, err := o.setattr(&rpc.SetAttrRequest{Path: "/a/zz", Mode: u32(1)}); return err }, "notexist"},
				mkp("/p/q/r"),
				mkp("/p/q/r"),
				mkp("/p"),
				want(mkp("/a/f/z"), "notdir"),
				want(mkp("/a/f"), "exist"),
				st("/p/q/r"),
				// rename of files
				mv("/a/f", "/a/g"),
				want(st("/a/f"), "notexist"),
				st("/a/g"),
				want(mv("/a/nope", "/a/h"), "notexist"),
				want(mv("/a/g", "/nope/h"), "notexist"),
				want(mv("/a/g", "/a/g/x"), "invalid"),
				cr("/a/h"),
				mv("/a/g", "/a/h"), // replaces /a/h
				want(st("/a/g"), "notexist"),
				st("/a/h"),
				mv("/a/h", "/p/q/h"), // across directories
				want(st("/a/h"), "notexist"),
				st("/p/q/h"),
				mv("/p/q/h", "/p/q/h"),
				// rename of directories
				mk("/d1"),
				cr("/x"),
				want(mv("/x", "/d1"), "isdir"),
				want(mv("/d1", "/x"), "notdir"),
				mk("/d2"),
				cr("/d2/x"),
				want(mv("/d1", "/d2"), "notempty"),
				ul("/d2/x"),
				mv("/d1", "/d2"), // replaces the empty /d2
				want(st("/d1"), "notexist"),
				st("/d2"),
				want(mv("/a", "/a/sub"), "invalid"),
				want(mv("/", "/y"), "invalid"),
				want(mv("/a", "/"), "invalid"),
				mkp("/m/n/o"),
				cr("/m/n/f"),
				cr("/m/g"),
				mk("/z"),
				mv("/m", "/z/m2"),
				st("/z/m2/n/o"),
				st("/z/m2/n/f"),
				st("/z/m2/g"),
				want(st("/m"), "notexist"),
				want(st("/m/n/f"), "notexist"),
				want(mv("/z/m2/n", "/z"), "notempty"),
				want(mv("/z/m2/g", "/z"), "isdir"),
				mv("/z/m2/n", "/n2"),
				st("/n2/o"),
				ul("/n2/f"),
				rd("/n2/o"),
				rd("/n2"),
				want(st("/n2"), "notexist"),
			}
			for _, o := range table {
				t0 := time.Now()
				expect(o.name, o.want, o.run(via()))
				if d := time.Since(t0); d > 300*time.Millisecond {
					t.Logf("step %d: %s took %v", step, o.name, d)
				}
			}
			o := via()
			got, err := o.names("/z/m2")
			mustOK(t, err, "readdir /z/m2")
			if !slices.Equal(got, []string{"g"}) {
				t.Errorf("readdir /z/m2 = %v", got)
			}
			got, err = o.names("/")
			mustOK(t, err, "readdir /")
			if want := []string{"a/", "d2/", "p/", "x", "z/"}; !slices.Equal(got, want) {
				t.Errorf("readdir / = %v, want %v", got, want)
			}
			// Pagination: 25 names in pages of 10.
			mustOK(t, via().mkdir("/pg", false), "mkdir /pg")
			var want25 []string
			for i := range 25 {
				p := fmt.Sprintf("/pg/f%02d", i)
				want25 = append(want25, fmt.Sprintf("f%02d", i))
				mustOK(t, via().create(p), "create %s", p)
			}
			var pages [][]string
			after := ""
			for {
				r, err := via().readdir("/pg", after, 10)
				mustOK(t, err, "readdir /pg")
				var names []string
				for _, e := range r.Entries {
					names = append(names, e.Name)
				}
				pages = append(pages, names)
				if r.Next == "" {
					break
				}
				after = r.Next
			}
			if len(pages) != 3 || len(pages[0]) != 10 || len(pages[2]) != 5 || !slices.Equal(slices.Concat(pages...), want25) {
				t.Errorf("pages = %v", pages)
			}
			r, err := via().readdir("/pg", "", -1)
			expect("negative limit", "einval", err)
			_ = r
			c.SettleAll()
		})
	}
}

// replications are the shard replication factors the namespace's
// guarantees are tested with: the papers' single home and three replicas.
var replications = []int{1, 3}

// forEachR runs fn as a subtest for each of replications.
func forEachR(t *testing.T, fn func(t *testing.T, r int)) {
	for _, r := range replications {
		t.Run(fmt.Sprintf("R=%d", r), func(t *testing.T) { fn(t, r) })
	}
}

// TestConcurrentCreateOnePath: creates of one path through every node at
// once: exactly one succeeds, the others get fs.ErrExist.
func TestConcurrentCreateOnePath(t *testing.T) { forEachR(t, testConcurrentCreateOnePath) }

func testConcurrentCreateOnePath(t *testing.T, r int) {
	c := nodetest.NewNamespaces(t, nodetest.NamespacesOptions{Nodes: 3, Replication: r})
	mustOK(t, via(c, "n2").mkdir("/race", false), "mkdir")
	for round := range 20 {
		p := fmt.Sprintf("/race/f%d", round)
		const perNode = 4
		var ok, exist atomic.Int32
		var wg sync.WaitGroup
		start := make(chan struct{})
		for _, id := range c.IDs {
			for range perNode {
				wg.Go(func() {
					<-start
					var err error
					if round%2 == 0 {
						err = via(c, id).create(p)
					} else {
						err = via(c, id).mkdir(p, false)
					}
					switch {
					case err == nil:
						ok.Add(1)
					case errors.Is(err, fs.ErrExist):
						exist.Add(1)
					default:
						t.Errorf("create %s through %s: %v", p, id, err)
					}
				})
			}
		}
		close(start)
		wg.Wait()
		if ok.Load() != 1 || exist.Load() != int32(len(c.IDs)*perNode-1) {
			t.Fatalf("%s: %d succeeded, %d exist", p, ok.Load(), exist.Load())
		}
		for _, id := range c.IDs {
			if _, err := via(c, id).stat(p); err != nil {
				t.Errorf("stat %s through %s: %v", p, id, err)
			}
		}
	}
	names, err := via(c, "n1").names("/race")
	mustOK(t, err, "readdir")
	if len(names) != 20 {
		t.Errorf("readdir /race: %d names", len(names))
	}
	c.SettleAll()
}

// TestBadRequests sends malformed and hostile requests to a node's
// namespace methods; the node answers errors and keeps serving.
func TestBadRequests(t *testing.T) { forEachR(t, testBadRequests) }

func testBadRequests(t *testing.T, r int) {
	c := nodetest.NewNamespaces(t, nodetest.NamespacesOptions{Nodes: 3, Replication: r})
	o := via(c, "n1")
	mustOK(t, o.mkdir("/ok", false), "mkdir")
	type raw struct {
		Path []int `json:"path"`
	}
	cases := []struct {
		method string
		req    any
	}{
		{rpc.MethodStat, &raw{Path: []int{1, 2}}},
		{rpc.MethodCreate, &raw{}},
		{rpc.MethodStat, &rpc.StatRequest{Path: "/ok/\x00"}},
		{namespace.MethodLocalCheck, &namespace.LocalCheckReq{Path: "../x"}},
		{namespace.MethodHomeEntry, &namespace.HomeEntryReq{Dir: "/", Name: "a/b"}},
		{namespace.MethodFilterPush, &namespace.FilterPushReq{Origin: "n2", Kind: namespace.FilterLocal, Data: []byte("garbage")}},
		{namespace.MethodFilterPush, &namespace.FilterPushReq{Origin: "n2", Kind: "bogus"}},
		{namespace.MethodFilterPull, &namespace.FilterPullReq{Kind: "bogus"}},
		{namespace.MethodTxnPrepare, &namespace.TxnPrepareReq{}},
		{namespace.MethodTxnPrepare, &namespace.TxnPrepareReq{TxnID: "x", Coordinator: "n2", Ops: []namespace.TxnOp{{Kind: "explode", Path: "/ok"}}}},
		{namespace.MethodTxnPrepare, &namespace.TxnPrepareReq{TxnID: "y", Coordinator: "n2", Ops: []namespace.TxnOp{{Kind: namespace.OpPutInode, Path: "/ok/x"}}}},
		{namespace.MethodTxnPrepare, &namespace.TxnPrepareReq{TxnID: "z", Coordinator: "n2", Marks: []string{"rel"}}},
		{namespace.MethodHomeCreate, &namespace.HomeCreateReq{Path: "/ok/y", Type: "door"}},
		{namespace.MethodHomeRename, &namespace.HomeRenameReq{Src: "/ok", Dst: "/ok/in"}},
		{namespace.MethodHomeReadDir, &namespace.HomeReadDirReq{Path: "nope"}},
		{rpc.MethodBatchStat, &rpc.BatchStatRequest{Paths: make([]string, namespace.MaxBatchStat+1)}},
	}
	for _, tc := range cases {
		err := o.call(tc.method, tc.req, &struct{}{})
		if err == nil {
			t.Errorf("%s %+v: no error", tc.method, tc.req)
			continue
		}
		if !errors.Is(err, rpc.ErrRemote) {
			t.Errorf("%s: %v is not an answer from the server", tc.method, err)
		}
	}
	// Garbage bytes on the RPC port: the namespace keeps answering.
	conn, err := net.Dial("tcp", c.Nodes["n1"].Addr)
	mustOK(t, err, "dial")
	_, _ = conn.Write([]byte("GHB\x01\x00\x00\x00\x10garbagegarbage!!"))
	conn.Close()
	if _, err := o.stat("/ok"); err != nil {
		t.Fatalf("stat after bad requests: %v", err)
	}
	if p, co, r := c.NS("n1").Pending(); p+co+r != 0 {
		t.Errorf("bad prepares left state: parts %d coords %d redo %d", p, co, r)
	}
	if len(c.NS("n1").Marks()) != 0 {
		t.Errorf("bad prepares left marks: %v", c.NS("n1").Marks())
	}
}

func TestSchemesAgree(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want bool
	}{
		{namespace.SchemeAuto, namespace.SchemeGHBA, true}, // both take their group's segments
		{namespace.SchemeAuto, namespace.SchemeAuto, true},
		{namespace.SchemeHBA, namespace.SchemeHBA, true},
		{"", namespace.SchemeAuto, true}, // a build from before the setting: G-HBA
		{namespace.SchemeHBA, namespace.SchemeAuto, false},
		{namespace.SchemeGHBA, namespace.SchemeHBA, false},
		{"", namespace.SchemeHBA, false},
	} {
		if got := namespace.SchemesAgree(tc.a, tc.b); got != tc.want {
			t.Errorf("SchemesAgree(%q, %q) = %v, want %v", tc.a, tc.b, got, tc.want)
		}
		if got := namespace.SchemesAgree(tc.b, tc.a); got != tc.want {
			t.Errorf("SchemesAgree(%q, %q) = %v, want %v", tc.b, tc.a, got, tc.want)
		}
	}
	// A joiner announces auto as ghba, which a build from before auto
	// compares as a string.
	for in, want := range map[string]string{namespace.SchemeAuto: namespace.SchemeGHBA, namespace.SchemeGHBA: namespace.SchemeGHBA, namespace.SchemeHBA: namespace.SchemeHBA} {
		if got := namespace.WireScheme(in); got != want {
			t.Errorf("WireScheme(%q) = %q, want %q", in, got, want)
		}
	}
}
