package client_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"sort"
	"testing"

	"github.com/ghba/ghba/rpc"
	"github.com/ghba/ghba/rpc/client"
	"github.com/ghba/ghba/rpc/rpctest"
)

func TestTypedClientAndHomeCache(t *testing.T) {
	// Two servers of one fake namespace; every path's home is b.
	a := rpctest.StartFakeServer(t, rpctest.FakeOptions{ID: "a"})
	b := rpctest.StartFakeServer(t, rpctest.FakeOptions{ID: "b", Share: a})
	a.SetHome("b")
	a.Put("/d", rpc.TypeDir)
	a.SetAnswers(rpctest.FakeAnswers{Members: []rpc.Member{{ID: "b", Status: "alive", RPCAddr: b.Addr()}}})
	c := newClient(t, client.Options{Addrs: []string{a.Addr()}}) // only a is known
	ctx := context.Background()

	st, err := c.Stat(ctx, "/d")
	if err != nil || st.Type != rpc.TypeDir || st.Level != rpc.LevelL2 {
		t.Fatalf("stat /d: %+v %v", st, err)
	}
	if a.TotalCalls() != 1 || b.TotalCalls() != 0 {
		t.Fatalf("first stat: a=%v b=%v", a.Calls(), b.Calls())
	}
	// The home is cached: the next stat and a create under /d go to b.
	if _, err := c.Stat(ctx, "/d"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Create(ctx, &rpc.CreateRequest{Path: "/d/f", Mode: 0o644}); err != nil {
		t.Fatal(err)
	}
	if a.TotalCalls() != 1 || b.TotalCalls() != 2 {
		t.Fatalf("cached home not used: a=%v b=%v", a.Calls(), b.Calls())
	}
	// Errors travel with errors.Is.
	if _, err := c.Create(ctx, &rpc.CreateRequest{Path: "/d/f"}); !errors.Is(err, fs.ErrExist) {
		t.Errorf("second create: %v", err)
	}
	if _, err := c.Stat(ctx, "/nope"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("stat missing: %v", err)
	}
	if _, err := c.Stat(ctx, "rel"); !errors.Is(err, rpc.ErrInvalidPath) {
		t.Errorf("stat relative: %v", err)
	}
	if err := c.Unlink(ctx, "/d"); !errors.Is(err, rpc.ErrIsDir) {
		t.Errorf("unlink dir: %v", err)
	}
	if _, err := c.Mkdir(ctx, &rpc.MkdirRequest{Path: "/x/y"}); !errors.Is(err, fs.ErrNotExist) {
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
		if _, err := c.Create(ctx, &rpc.CreateRequest{Path: "/d/" + name}); err != nil {
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
	c2 := newClient(t, client.Options{Addrs: []string{a.Addr()}})
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
			if !errors.Is(r.Err(), rpc.ErrInvalidPath) {
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
	if got := c2.Addrs(); !slices.Equal(got, []string{b.Addr()}) {
		t.Errorf("addrs after refresh = %v", got)
	}
}
