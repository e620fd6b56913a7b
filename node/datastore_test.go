package node_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ghba/ghba/node"
	"github.com/ghba/ghba/node/contents"
	"github.com/ghba/ghba/node/nodetest"
	"github.com/ghba/ghba/rpc"
	"github.com/ghba/ghba/rpc/client"
	"github.com/ghba/ghba/rpc/rpctest"
)

// TestCheckDataStoreURL: the schemes node/contents serves, nothing else.
func TestCheckDataStoreURL(t *testing.T) {
	for _, tc := range []struct {
		url string
		ok  bool
	}{
		{"file:///var/lib/ghba/data", true},
		{"file://localhost/data", true},
		{"s3://bucket?endpoint=http://127.0.0.1:9000&use_path_style=true", true},
		{"s3://bucket/prefix", true},
		{"file://relative/dir", false},
		{"file:", false},
		{"s3:///no-bucket", false},
		{"http://example.com/x", false},
		{"/plain/path", false},
		{"gs://bucket", false},
		{"", false},
		{"file:///a\x00b", false},
	} {
		err := node.CheckDataStoreURL(tc.url)
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, fs.ErrInvalid)) {
			t.Errorf("CheckDataStoreURL(%q) = %v, want ok %v", tc.url, err, tc.ok)
		}
	}
}

// TestDataStoreRecordAndGC: the cluster's data store record (get, set,
// the same URL again, another URL refused without force, a check that
// fails, --no-check), and the garbage collection deleting through the
// store the record names: a file's objects go once it is unlinked and
// data_gc_grace has passed, and /metrics counts them.
func TestDataStoreRecordAndGC(t *testing.T) {
	cfg := nodetest.Config(t, "n1")
	cfg.Bootstrap = true
	cfg.DataGCGrace = time.Second
	tune := nodetest.Tuning()
	tune.Namespace.TrashInterval = 50 * time.Millisecond
	n := nodetest.Start(t, cfg, rpctest.Logger(t, "node", "n1"), node.WithTuning(tune))
	nodetest.WaitLeader(t, 30*time.Second, n)
	c := client.New(client.Options{Addrs: []string{nodetest.RPCAddr(cfg)}})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rpctest.Eventually(t, 30*time.Second, "serving", func() error { _, err := c.Stat(ctx, "/"); return err })

	r, err := c.DataStore(ctx)
	if err != nil || r.URL != "" {
		t.Fatalf("data store before any set: %+v, %v", r, err)
	}
	dir := t.TempDir()
	url1, url2 := "file://"+filepath.Join(dir, "one"), "file://"+filepath.Join(dir, "two")
	for _, tc := range []struct {
		name    string
		req     rpc.DataStoreSetRequest
		want    error
		changed bool
		after   string // the URL recorded after the call
	}{
		{"bad scheme", rpc.DataStoreSetRequest{URL: "http://example.com/b"}, fs.ErrInvalid, false, ""},
		{"first set", rpc.DataStoreSetRequest{URL: url1}, nil, true, url1},
		{"the same again", rpc.DataStoreSetRequest{URL: url1}, nil, false, url1},
		{"another without force", rpc.DataStoreSetRequest{URL: url2}, fs.ErrExist, false, url1},
		{"a store that fails its check", rpc.DataStoreSetRequest{URL: "file:///proc/ghba-no-such-dir", Force: true}, errors.New("any"), false, url1},
		{"unchecked", rpc.DataStoreSetRequest{URL: "file:///proc/ghba-no-such-dir", Force: true, NoCheck: true}, nil, true, "file:///proc/ghba-no-such-dir"},
		{"back with force", rpc.DataStoreSetRequest{URL: url1, Force: true}, nil, true, url1},
	} {
		got, err := c.SetDataStore(ctx, &tc.req)
		switch {
		case tc.want == nil && err != nil, tc.want != nil && err == nil:
			t.Fatalf("%s: %v, want %v", tc.name, err, tc.want)
		case err != nil && tc.want.Error() != "any" && !errors.Is(err, tc.want):
			t.Fatalf("%s: %v, want %v", tc.name, err, tc.want)
		case err == nil && (got.Changed != tc.changed || got.URL != tc.after):
			t.Errorf("%s: %+v, want changed %v, url %s", tc.name, got, tc.changed, tc.after)
		}
		if tc.name == "another without force" && !strings.Contains(err.Error(), "--force") {
			t.Errorf("refusal does not say how to go on: %v", err)
		}
		if r, err := c.DataStore(ctx); err != nil || r.URL != tc.after {
			t.Errorf("%s: then the record is %+v, %v; want %s", tc.name, r, err, tc.after)
		}
	}

	// A file with objects in the store, as a mount writes it, then
	// unlinked: its objects are deleted after the grace period.
	ds, err := contents.Open(ctx, url1)
	if err != nil {
		t.Fatal(err)
	}
	defer ds.Close()
	cr, err := c.Create(ctx, &rpc.CreateRequest{Path: "/f", Mode: 0o644})
	if err != nil {
		t.Fatal(err)
	}
	if cr.Inode.ID == 0 {
		t.Fatal("created without an id")
	}
	st, err := c.Stat(ctx, "/f")
	if err != nil || st.ID != cr.Inode.ID {
		t.Fatalf("stat /f: %+v, %v; want id %d", st, err, cr.Inode.ID)
	}
	l := contents.Layout{BlockSize: 1024}
	for b := range uint64(3) {
		ref := contents.BlockRef{Block: b, Gen: 100 + b}
		if err := ds.Put(ctx, st.ID, ref, bytes.Repeat([]byte{'x'}, 1024)); err != nil {
			t.Fatal(err)
		}
		l.Set(b, ref.Gen)
	}
	size := int64(3 * 1024)
	v := st.Version
	if _, err := c.SetAttr(ctx, &rpc.SetAttrRequest{Path: "/f", Layout: l.Encode(), Size: &size, IfVersion: &v}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.SetAttr(ctx, &rpc.SetAttrRequest{Path: "/f", Mode: ptr(uint32(0o600)), IfVersion: &v}); !errors.Is(err, rpc.ErrVersionMismatch) {
		t.Errorf("setattr at a stale version: %v, want ErrVersionMismatch", err)
	}
	if err := c.Unlink(ctx, "/f"); err != nil {
		t.Fatal(err)
	}
	if objs, err := ds.Objects(ctx, st.ID); err != nil || len(objs) != 3 {
		t.Fatalf("objects right after the unlink: %v, %v; want the 3 (grace period)", objs, err)
	}
	rpctest.Eventually(t, 30*time.Second, "objects of the unlinked file deleted", func() error {
		objs, err := ds.Objects(ctx, st.ID)
		if err != nil || len(objs) > 0 {
			return fmt.Errorf("%d objects left (%v)", len(objs), err)
		}
		return nil
	})
	rpctest.Eventually(t, 10*time.Second, "metrics", func() error {
		_, body := httpGet(t, "http://"+nodetest.HTTPAddr(cfg)+"/metrics")
		if !strings.Contains(body, "ghba_data_objects_deleted_total 3") || !strings.Contains(body, "ghba_data_trash_pending 0") {
			return errors.New("ghba_data_objects_deleted_total 3 and ghba_data_trash_pending 0 not in /metrics")
		}
		return nil
	})
}

func ptr[T any](v T) *T { return &v }
