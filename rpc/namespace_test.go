package rpc

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// fakeNS is a tiny shared in-memory namespace served by several test
// servers; every path's home is the node named "b".
type fakeNS struct {
	mu    sync.Mutex
	files map[string]string // path → type
	bAddr string
}

type nsNode struct {
	*testServer
	calls atomic.Int64
}

func registerNS(ns *fakeNS, ts *testServer) *nsNode {
	n := &nsNode{testServer: ts}
	s := ts.Server
	stat := func(p string) (*StatResponse, error) {
		ns.mu.Lock()
		defer ns.mu.Unlock()
		if !strings.HasPrefix(p, "/") {
			return nil, fmt.Errorf("stat %q: %w", p, ErrInvalidPath)
		}
		typ, ok := ns.files[p]
		if !ok {
			return nil, fmt.Errorf("stat %s: %w", p, fs.ErrNotExist)
		}
		return &StatResponse{Inode: Inode{Path: p, Type: typ, Home: "b"}, HomeAddr: ns.bAddr, Level: LevelL1}, nil
	}
	Register(s, MethodStat, func(ctx context.Context, r *StatRequest) (*StatResponse, error) {
		n.calls.Add(1)
		return stat(r.Path)
	})
	Register(s, MethodLookup, func(ctx context.Context, r *LookupRequest) (*LookupResponse, error) {
		n.calls.Add(1)
		st, err := stat(r.Path)
		if err != nil {
			return nil, err
		}
		return &LookupResponse{Path: st.Path, Home: st.Home, HomeAddr: st.HomeAddr, Level: st.Level}, nil
	})
	Register(s, MethodBatchStat, func(ctx context.Context, r *BatchStatRequest) (*BatchStatResponse, error) {
		n.calls.Add(1)
		out := &BatchStatResponse{}
		for _, p := range r.Paths {
			st, err := stat(p)
			if err != nil {
				out.Results = append(out.Results, BatchStatError(err))
			} else {
				out.Results = append(out.Results, BatchStatResult{Stat: st})
			}
		}
		return out, nil
	})
	create := func(p, typ string) (*Inode, error) {
		ns.mu.Lock()
		defer ns.mu.Unlock()
		if _, ok := ns.files[p]; ok {
			return nil, fmt.Errorf("create %s: %w", p, fs.ErrExist)
		}
		if ns.files[path.Dir(p)] != TypeDir {
			return nil, fmt.Errorf("create %s: parent: %w", p, fs.ErrNotExist)
		}
		ns.files[p] = typ
		return &Inode{Path: p, Type: typ, Home: "b"}, nil
	}
	Register(s, MethodCreate, func(ctx context.Context, r *CreateRequest) (*CreateResponse, error) {
		n.calls.Add(1)
		in, err := create(r.Path, TypeFile)
		if err != nil {
			return nil, err
		}
		return &CreateResponse{Inode: *in}, nil
	})
	Register(s, MethodMkdir, func(ctx context.Context, r *MkdirRequest) (*MkdirResponse, error) {
		n.calls.Add(1)
		in, err := create(r.Path, TypeDir)
		if err != nil {
			return nil, err
		}
		return &MkdirResponse{Inode: *in}, nil
	})
	Register(s, MethodUnlink, func(ctx context.Context, r *UnlinkRequest) (*UnlinkResponse, error) {
		n.calls.Add(1)
		ns.mu.Lock()
		defer ns.mu.Unlock()
		switch ns.files[r.Path] {
		case "":
			return nil, fmt.Errorf("unlink %s: %w", r.Path, fs.ErrNotExist)
		case TypeDir:
			return nil, fmt.Errorf("unlink %s: %w", r.Path, ErrIsDir)
		}
		delete(ns.files, r.Path)
		return &UnlinkResponse{}, nil
	})
	Register(s, MethodReadDir, func(ctx context.Context, r *ReadDirRequest) (*ReadDirResponse, error) {
		n.calls.Add(1)
		ns.mu.Lock()
		defer ns.mu.Unlock()
		var names []string
		for p := range ns.files {
			if p != "/" && path.Dir(p) == r.Path && path.Base(p) > r.After {
				names = append(names, path.Base(p))
			}
		}
		sort.Strings(names)
		out := &ReadDirResponse{}
		limit := r.Limit
		if limit <= 0 {
			limit = 100
		}
		for _, name := range names {
			if len(out.Entries) == limit {
				out.Next = out.Entries[limit-1].Name
				break
			}
			out.Entries = append(out.Entries, DirEntry{Name: name, Type: ns.files[path.Join(r.Path, name)], Home: "b"})
		}
		return out, nil
	})
	Register(s, MethodMembers, func(ctx context.Context, r *MembersRequest) (*MembersResponse, error) {
		return &MembersResponse{Members: []Member{{ID: "b", Status: "alive", RPCAddr: ns.bAddr}}}, nil
	})
	return n
}

func TestTypedClientAndHomeCache(t *testing.T) {
	ns := &fakeNS{files: map[string]string{"/": TypeDir, "/d": TypeDir}}
	a := registerNS(ns, startServer(t, "a", ServerOptions{}))
	b := registerNS(ns, startServer(t, "b", ServerOptions{}))
	ns.bAddr = b.addr
	c := newClient(t, Options{Addrs: []string{a.addr}}) // only a is known
	ctx := context.Background()

	st, err := c.Stat(ctx, "/d")
	if err != nil || st.Type != TypeDir || st.Level != LevelL1 {
		t.Fatalf("stat /d: %+v %v", st, err)
	}
	if a.calls.Load() != 1 || b.calls.Load() != 0 {
		t.Fatalf("first stat: a=%d b=%d", a.calls.Load(), b.calls.Load())
	}
	// The home is cached: the next stat and a create under /d go to b.
	if _, err := c.Stat(ctx, "/d"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Create(ctx, &CreateRequest{Path: "/d/f", Mode: 0o644}); err != nil {
		t.Fatal(err)
	}
	if a.calls.Load() != 1 || b.calls.Load() != 2 {
		t.Fatalf("cached home not used: a=%d b=%d", a.calls.Load(), b.calls.Load())
	}
	// Errors travel with errors.Is.
	if _, err := c.Create(ctx, &CreateRequest{Path: "/d/f"}); !errors.Is(err, fs.ErrExist) {
		t.Errorf("second create: %v", err)
	}
	if _, err := c.Stat(ctx, "/nope"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("stat missing: %v", err)
	}
	if _, err := c.Stat(ctx, "rel"); !errors.Is(err, ErrInvalidPath) {
		t.Errorf("stat relative: %v", err)
	}
	if err := c.Unlink(ctx, "/d"); !errors.Is(err, ErrIsDir) {
		t.Errorf("unlink dir: %v", err)
	}
	if _, err := c.Mkdir(ctx, &MkdirRequest{Path: "/x/y"}); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("mkdir without parent: %v", err)
	}
	lk, err := c.Lookup(ctx, "/d/f")
	if err != nil || lk.Home != "b" {
		t.Errorf("lookup: %+v %v", lk, err)
	}

	// ReadDirAll pages through a directory.
	var want []string
	for i := range 25 {
		name := fmt.Sprintf("g%02d", i)
		want = append(want, name)
		if _, err := c.Create(ctx, &CreateRequest{Path: "/d/" + name}); err != nil {
			t.Fatal(err)
		}
	}
	want = append(want, "f")
	sort.Strings(want)
	ents, err := c.ReadDirAll(ctx, "/d", 7)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range ents {
		got = append(got, e.Name)
	}
	if !slices.Equal(got, want) {
		t.Errorf("readdir = %v", got)
	}

	// BatchStat keeps order and reports per-path errors.
	c2 := newClient(t, Options{Addrs: []string{a.addr}})
	if _, err := c2.Stat(ctx, "/d/g01"); err != nil { // cache one home
		t.Fatal(err)
	}
	paths := []string{"/d/g00", "/missing", "/d/g01", "/d", "bad"}
	br, err := c2.BatchStat(ctx, paths)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range br.Results {
		switch paths[i] {
		case "/missing":
			if !errors.Is(r.Err(), fs.ErrNotExist) {
				t.Errorf("%s: %v", paths[i], r.Err())
			}
		case "bad":
			if !errors.Is(r.Err(), ErrInvalidPath) {
				t.Errorf("%s: %v", paths[i], r.Err())
			}
		default:
			if r.Err() != nil || r.Stat == nil || r.Stat.Path != paths[i] {
				t.Errorf("%s: %+v %v", paths[i], r.Stat, r.Err())
			}
		}
	}

	// Members teaches node addresses; Refresh adopts them.
	if err := c2.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if got := c2.Addrs(); !slices.Equal(got, []string{b.addr}) {
		t.Errorf("addrs after refresh = %v", got)
	}
}

// cacheLen returns the number of entries h holds (both generations).
func cacheLen(h *homeCache) int {
	if h == nil {
		return 0
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.cur) + len(h.old)
}

func TestHomeCacheBound(t *testing.T) {
	h := newHomeCache(100)
	for i := range 1000 {
		h.put(fmt.Sprint("/p", i), "addr")
	}
	if n := cacheLen(h); n > 100 {
		t.Errorf("cache holds %d entries, bound 100", n)
	}
	if h.get("/p999") != "addr" {
		t.Error("recent entry missing")
	}
	if h.get("/p0") != "" {
		t.Error("old entry kept")
	}
	h.forget("/p999")
	if h.get("/p999") != "" {
		t.Error("forgotten entry kept")
	}
	var off *homeCache = newHomeCache(-1)
	off.put("/a", "x")
	if off.get("/a") != "" || cacheLen(off) != 0 {
		t.Error("disabled cache stores")
	}
}
