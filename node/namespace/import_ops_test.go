package namespace_test

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"testing"
	"time"

	"github.com/ghba/ghba/node/namespace"
	"github.com/ghba/ghba/node/nodetest"
	"github.com/ghba/ghba/rpc"
)

// TestSymlinksAndImportedAttributes creates symbolic links and files and
// directories with given sizes and times (what an import does) through
// every node, then checks them through every node, across a rename, and
// the requests that must fail.
func TestSymlinksAndImportedAttributes(t *testing.T) { forEachR(t, testSymlinks) }

func testSymlinks(t *testing.T, r int) {
	c := nodetest.NewNamespaces(t, nodetest.NamespacesOptions{Nodes: 3, Replication: r})
	const mtime, atime = int64(1_600_000_000_123_456_789), int64(1_700_000_000_000_000_001)
	var mk rpc.MkdirResponse
	mustOK(t, via(c, "n1").call(rpc.MethodMkdir, &rpc.MkdirRequest{Path: "/src/lib", Mode: 0o750, Parents: true, Mtime: mtime, Atime: atime}, &mk), "mkdir -p")
	for _, id := range c.IDs {
		st, err := via(c, id).stat("/src/lib")
		mustOK(t, err, "stat dir")
		if st.Mtime != mtime || st.Atime != atime || st.Mode != 0o750 {
			t.Errorf("via %s: directory made with times %+v", id, st.Inode)
		}
	}
	before := time.Now().UnixNano()
	for i, id := range c.IDs {
		o := via(c, id)
		name := string(rune('a' + i))
		mustOK(t, o.call(rpc.MethodCreate, &rpc.CreateRequest{Path: "/src/lib/" + name + ".so", Mode: 0o755, UID: 7, GID: 8, Size: 123456, Mtime: mtime, Atime: atime}, &rpc.CreateResponse{}), "create")
		mustOK(t, o.call(rpc.MethodCreate, &rpc.CreateRequest{Path: "/src/lib/" + name + ".link", UID: 7, GID: 8, Symlink: name + ".so", Mtime: mtime}, &rpc.CreateResponse{}), "symlink")
	}
	for _, id := range c.IDs {
		o := via(c, id)
		for i := range c.IDs {
			name := string(rune('a' + i))
			st, err := o.stat("/src/lib/" + name + ".so")
			mustOK(t, err, "stat")
			if st.Type != rpc.TypeFile || st.Size != 123456 || st.Mtime != mtime || st.Atime != atime || st.UID != 7 || st.Mode != 0o755 || st.Target != "" {
				t.Errorf("via %s: file %+v", id, st.Inode)
			}
			st, err = o.stat("/src/lib/" + name + ".link")
			mustOK(t, err, "stat link")
			if st.Type != rpc.TypeSymlink || st.Target != name+".so" || st.Size != int64(len(name+".so")) || st.Mtime != mtime {
				t.Errorf("via %s: symlink %+v", id, st.Inode)
			}
		}
		// Its entries changed since: its mtime is the time of the last
		// change (docs/design.md, "Directory times"), its atime stays.
		st, err := o.stat("/src/lib")
		mustOK(t, err, "stat dir")
		if st.Mtime < before || st.Ctime != st.Mtime || st.Atime != atime || st.Mode != 0o750 {
			t.Errorf("via %s: directory after its creates %+v", id, st.Inode)
		}
		if st, err := o.stat("/src"); err != nil || st.Mtime == mtime {
			t.Errorf("via %s: a parent made by mkdir -p took the requested mtime: %+v %v", id, st, err)
		}
	}
	names, err := via(c, "n2").names("/src/lib")
	mustOK(t, err, "readdir")
	if len(names) != 6 {
		t.Errorf("readdir: %v", names)
	}

	o := via(c, "n3")
	mustOK(t, o.rename("/src/lib/a.link", "/src/b.link"), "rename a symlink")
	if st, err := o.stat("/src/b.link"); err != nil || st.Type != rpc.TypeSymlink || st.Target != "a.so" {
		t.Errorf("renamed symlink: %+v %v", st, err)
	}
	// A symlink is not a directory: nothing is created below it, rmdir
	// refuses it, unlink removes it.
	if err := o.create("/src/b.link/x"); !errors.Is(err, rpc.ErrNotDir) {
		t.Errorf("create below a symlink: %v", err)
	}
	if err := o.rename("/src/lib", "/src/b.link"); !errors.Is(err, rpc.ErrNotDir) {
		t.Errorf("rename a directory over a symlink: %v", err)
	}
	if _, err := o.setattr(&rpc.SetAttrRequest{Path: "/src/b.link", Size: i64(1)}); !errors.Is(err, fs.ErrInvalid) {
		t.Errorf("truncate a symlink: %v", err)
	}
	mustOK(t, o.unlink("/src/b.link"), "unlink a symlink")
	for _, bad := range []*rpc.CreateRequest{
		{Path: "/src/neg", Size: -1},
		{Path: "/src/long", Symlink: string(make([]byte, 4097))},
	} {
		if err := o.call(rpc.MethodCreate, bad, &rpc.CreateResponse{}); !errors.Is(err, fs.ErrInvalid) {
			t.Errorf("create %s: %v, want invalid", bad.Path, err)
		}
	}
}

// TestBatchCreate creates a directory's children in one call, placed on
// the directory's shard (colocate) and across shards (balanced), with
// 1 and 3 replicas, and checks each result, the inodes through every
// node, and the per-entry and whole-call errors.
func TestBatchCreate(t *testing.T) {
	for _, placement := range []string{namespace.PlacementColocate, namespace.PlacementBalanced} {
		t.Run(placement, func(t *testing.T) {
			forEachR(t, func(t *testing.T, r int) { testBatchCreate(t, r, placement) })
		})
	}
}

func testBatchCreate(t *testing.T, r int, placement string) {
	c := nodetest.NewNamespaces(t, nodetest.NamespacesOptions{Nodes: 3, Replication: r, Placement: placement})
	o := via(c, "n2")
	mustOK(t, o.mkdir("/b", false), "mkdir")
	mustOK(t, o.create("/b/taken"), "create")
	const mtime = int64(1_500_000_000_000_000_007)
	req := &rpc.BatchCreateRequest{Dir: "/b"}
	want := map[string]string{}
	for i := range 60 {
		e := rpc.BatchCreateEntry{Name: fmt.Sprintf("f%02d", i), Type: rpc.TypeFile, Mode: 0o640, UID: 5, GID: 6, Size: int64(i), Mtime: mtime}
		switch i % 10 {
		case 3:
			e.Type, e.Mode, e.Size = rpc.TypeDir, 0o750, 0
		case 7:
			e.Type, e.Symlink, e.Size = rpc.TypeSymlink, "f00", 0
		}
		req.Entries = append(req.Entries, e)
		want[e.Name] = e.Type
	}
	req.Entries = append(req.Entries, rpc.BatchCreateEntry{Name: "taken", Type: rpc.TypeFile, Mode: 0o644})
	var resp rpc.BatchCreateResponse
	mustOK(t, via(c, "n1").call(rpc.MethodBatchCreate, req, &resp), "batch create")
	if len(resp.Results) != len(req.Entries) {
		t.Fatalf("%d results for %d entries", len(resp.Results), len(req.Entries))
	}
	homes := map[string]bool{}
	for i, res := range resp.Results[:60] {
		if err := res.Err(); err != nil || res.Inode == nil || res.Inode.Path != "/b/"+req.Entries[i].Name {
			t.Fatalf("entry %d: %+v (%v)", i, res, err)
		}
		homes[res.Inode.Home] = true
	}
	if err := resp.Results[60].Err(); !errors.Is(err, fs.ErrExist) {
		t.Errorf("existing name: %v", err)
	}
	if placement == namespace.PlacementBalanced && len(homes) < 2 {
		t.Errorf("balanced placement put every child on %v", homes)
	}
	for _, id := range c.IDs {
		for i, e := range req.Entries[:60] {
			st, err := via(c, id).stat("/b/" + e.Name)
			mustOK(t, err, "stat")
			if st.Type != e.Type || st.Mode != e.Mode || st.UID != 5 || st.Mtime != mtime ||
				(e.Type == rpc.TypeFile && st.Size != int64(i)) || (e.Type == rpc.TypeSymlink && st.Target != "f00") {
				t.Errorf("via %s: %s: %+v", id, e.Name, st.Inode)
			}
		}
	}
	names, err := o.names("/b")
	mustOK(t, err, "readdir")
	if len(names) != 61 {
		t.Errorf("readdir: %d names", len(names))
	}
	// Whole-call errors: a missing directory, a bad name, a name twice.
	for _, bad := range []struct {
		req  *rpc.BatchCreateRequest
		want error
	}{
		{&rpc.BatchCreateRequest{Dir: "/nope", Entries: []rpc.BatchCreateEntry{{Name: "x", Type: rpc.TypeFile}}}, fs.ErrNotExist},
		{&rpc.BatchCreateRequest{Dir: "/b", Entries: []rpc.BatchCreateEntry{{Name: "a/b", Type: rpc.TypeFile}}}, rpc.ErrInvalidPath},
		{&rpc.BatchCreateRequest{Dir: "/b", Entries: []rpc.BatchCreateEntry{{Name: "y", Type: rpc.TypeFile}, {Name: "y", Type: rpc.TypeFile}}}, fs.ErrInvalid},
		{&rpc.BatchCreateRequest{Dir: "/b/f00", Entries: []rpc.BatchCreateEntry{{Name: "x", Type: rpc.TypeFile}}}, rpc.ErrNotDir},
	} {
		if err := o.call(rpc.MethodBatchCreate, bad.req, &rpc.BatchCreateResponse{}); !errors.Is(err, bad.want) {
			t.Errorf("batch create in %s: %v, want %v", bad.req.Dir, err, bad.want)
		}
	}
}

// TestBatchCreateDirs creates the entries of several directories in one
// call through a node that homes some of them: a directory in two parts,
// children of every type (subdirectories placed on other shards), an
// existing name, and directories that fail on their own (missing, not a
// directory) without failing the others.
func TestBatchCreateDirs(t *testing.T) { forEachR(t, testBatchCreateDirs) }

func testBatchCreateDirs(t *testing.T, r int) {
	c := nodetest.NewNamespaces(t, nodetest.NamespacesOptions{Nodes: 3, Replication: r, Placement: namespace.PlacementColocate})
	o := via(c, "n2")
	want := map[string]string{}
	var req rpc.BatchCreateDirsRequest
	for d := range 6 {
		dir := fmt.Sprintf("/d%d", d)
		mustOK(t, o.mkdir(dir, false), "mkdir")
		// Each directory in two parts, the second after another's.
		for part := range 2 {
			dr := rpc.BatchCreateRequest{Dir: dir}
			for i := range 5 {
				e := rpc.BatchCreateEntry{Name: fmt.Sprintf("p%d-%d", part, i), Type: rpc.TypeFile, Mode: 0o640, Size: int64(i)}
				switch i {
				case 1:
					e.Type, e.Mode, e.Size = rpc.TypeDir, 0o750, 0
				case 2:
					e.Type, e.Symlink, e.Size = rpc.TypeSymlink, "p0-0", 0
				}
				dr.Entries = append(dr.Entries, e)
				want[dir+"/"+e.Name] = e.Type
			}
			req.Dirs = append(req.Dirs, dr)
		}
	}
	mustOK(t, o.create("/d0/taken"), "create")
	mustOK(t, o.create("/file"), "create")
	req.Dirs[0].Entries = append(req.Dirs[0].Entries, rpc.BatchCreateEntry{Name: "taken", Type: rpc.TypeFile})
	req.Dirs = append(req.Dirs,
		rpc.BatchCreateRequest{Dir: "/nope", Entries: []rpc.BatchCreateEntry{{Name: "x", Type: rpc.TypeFile}}},
		rpc.BatchCreateRequest{Dir: "/file", Entries: []rpc.BatchCreateEntry{{Name: "x", Type: rpc.TypeFile}}},
		rpc.BatchCreateRequest{Dir: "/d1"},
		rpc.BatchCreateRequest{Dir: "/d3", Entries: []rpc.BatchCreateEntry{{Name: "ok", Type: rpc.TypeFile}, {Name: "a/b", Type: rpc.TypeFile}}})
	var resp rpc.BatchCreateDirsResponse
	mustOK(t, via(c, "n1").call(rpc.MethodBatchCreateDirs, &req, &resp), "batch create dirs")
	if len(resp.Dirs) != len(req.Dirs) {
		t.Fatalf("%d results for %d directories", len(resp.Dirs), len(req.Dirs))
	}
	homes := map[string]bool{}
	for i, dr := range req.Dirs[:12] {
		res := resp.Dirs[i]
		if err := res.Err(); err != nil || len(res.Results) != len(dr.Entries) {
			t.Fatalf("%s: %d results for %d entries (%v)", dr.Dir, len(res.Results), len(dr.Entries), err)
		}
		for j, er := range res.Results {
			p := dr.Dir + "/" + dr.Entries[j].Name
			if p == "/d0/taken" {
				if err := er.Err(); !errors.Is(err, fs.ErrExist) {
					t.Errorf("existing name: %v", err)
				}
				continue
			}
			if err := er.Err(); err != nil || er.Inode == nil || er.Inode.Path != p {
				t.Fatalf("%s: %+v (%v)", p, er, err)
			}
			homes[er.Inode.Home] = true
		}
	}
	for i, wantErr := range []error{fs.ErrNotExist, rpc.ErrNotDir} {
		if err := resp.Dirs[12+i].Err(); !errors.Is(err, wantErr) {
			t.Errorf("%s: %v, want %v", req.Dirs[12+i].Dir, err, wantErr)
		}
	}
	if res := resp.Dirs[14]; res.Err() != nil || len(res.Results) != 0 {
		t.Errorf("a directory without entries: %+v", res)
	}
	if err := resp.Dirs[15].Err(); !errors.Is(err, rpc.ErrInvalidPath) {
		t.Errorf("a bad name: %v, want invalid path", err)
	}
	if _, err := o.stat("/d3/ok"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a directory with a bad name had an entry created: %v", err)
	}
	if len(homes) < 2 {
		t.Errorf("every child on %v: subdirectories should be placed on other shards too", homes)
	}
	for _, id := range c.IDs {
		for p, typ := range want {
			st, err := via(c, id).stat(p)
			mustOK(t, err, "stat")
			if st.Type != typ {
				t.Errorf("via %s: %s is a %s, want %s", id, p, st.Type, typ)
			}
		}
	}
	names, err := o.names("/d0")
	mustOK(t, err, "readdir")
	if len(names) != 11 {
		t.Errorf("readdir /d0: %d names, want 11", len(names))
	}
	// Whole-call errors: a path named twice, too many entries.
	twice := rpc.BatchCreateDirsRequest{Dirs: []rpc.BatchCreateRequest{
		{Dir: "/d2", Entries: []rpc.BatchCreateEntry{{Name: "y", Type: rpc.TypeFile}}},
		{Dir: "/d2", Entries: []rpc.BatchCreateEntry{{Name: "y", Type: rpc.TypeFile}}},
	}}
	big := rpc.BatchCreateDirsRequest{}
	for d := range 3 {
		dr := rpc.BatchCreateRequest{Dir: fmt.Sprintf("/d%d", d)}
		for i := range rpc.MaxBatchCreate/2 + 1 {
			dr.Entries = append(dr.Entries, rpc.BatchCreateEntry{Name: fmt.Sprintf("z%d", i), Type: rpc.TypeFile})
		}
		big.Dirs = append(big.Dirs, dr)
	}
	for _, bad := range []*rpc.BatchCreateDirsRequest{&twice, &big} {
		if err := o.call(rpc.MethodBatchCreateDirs, bad, &rpc.BatchCreateDirsResponse{}); !errors.Is(err, fs.ErrInvalid) {
			t.Errorf("%d directories: %v, want invalid", len(bad.Dirs), err)
		}
	}
	if _, err := o.stat("/d2/y"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a refused batch created /d2/y: %v", err)
	}
}

// TestFind pages through each shard's matches with a small limit and
// checks that the union over the shards is exactly the matching paths,
// and that bad requests are refused. (Client.Find, which asks the
// cluster for its shards, runs against agent processes in
// TestProcessImport.)
func TestFind(t *testing.T) {
	c := nodetest.NewNamespaces(t, nodetest.NamespacesOptions{Nodes: 3, Replication: 1})
	o := via(c, "n1")
	mustOK(t, o.mkdir("/f/sub", true), "mkdir")
	want := map[string]bool{}
	for i := range 30 {
		p := fmt.Sprintf("/f/sub/x%02d.go", i)
		if i%3 == 0 {
			p = fmt.Sprintf("/f/y%02d.txt", i)
		} else {
			want[p] = true
		}
		mustOK(t, o.create(p), "create")
	}
	// A create placed on another shard is acknowledged at its commit
	// point and applied there a moment later: search until every file
	// is found (a bounded wait), then check nothing else was.
	var got map[string]string
	for try := 0; try < 100; try++ {
		got = findAll(t, c, &rpc.FindRequest{Root: "/f", Name: "*.go", Type: rpc.TypeFile, Limit: 2})
		if len(got) >= len(want) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if len(got) != len(want) {
		t.Errorf("found %d paths, want %d", len(got), len(want))
	}
	for p := range want {
		if got[p] == "" {
			t.Errorf("%s not found", p)
		}
	}
	// A plain query: the stage of each match.
	for _, p := range []string{"/f/report.pdf", "/f/sub/Report.docx", "/f/sub/annual_report_pdf", "/f/reports.pdf", "/f/summary.pdf"} {
		mustOK(t, o.create(p), "create")
	}
	wantStages := map[string]string{"/f/report.pdf": "exact", "/f/sub/Report.docx": "related", "/f/sub/annual_report_pdf": "related", "/f/reports.pdf": "related"}
	for try := 0; try < 100; try++ {
		got = findAll(t, c, &rpc.FindRequest{Root: "/", Query: "report.pdf"})
		if len(got) >= len(wantStages) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !maps.Equal(got, wantStages) {
		t.Errorf("query report.pdf: %v, want %v", got, wantStages)
	}
	for _, bad := range []rpc.FindRequest{
		{Shard: "n1", Root: "/", Regex: "("},
		{Shard: "n1", Root: "/", Name: "["},
		{Shard: "n1", Root: "/", Type: "door"},
		{Root: "/"},
	} {
		if err := o.call(rpc.MethodFind, &bad, &rpc.FindResponse{}); !errors.Is(err, fs.ErrInvalid) {
			t.Errorf("find %+v: %v, want invalid", bad, err)
		}
	}
}

// findAll pages through every shard's matches of req.
func findAll(t *testing.T, c *nodetest.Namespaces, req *rpc.FindRequest) map[string]string {
	t.Helper()
	got := map[string]string{}
	for _, s := range c.IDs {
		r := *req
		r.Shard = s
		for range 1000 {
			var resp rpc.FindResponse
			mustOK(t, via(c, "n2").call(rpc.MethodFind, &r, &resp), "find")
			if len(resp.Inodes) > max(r.Limit, 0) && r.Limit > 0 {
				t.Fatalf("a page of %d with limit %d", len(resp.Inodes), r.Limit)
			}
			if r.Query != "" && len(resp.Stages) != len(resp.Inodes) {
				t.Fatalf("%d stages for %d inodes", len(resp.Stages), len(resp.Inodes))
			}
			for i, in := range resp.Inodes {
				if _, dup := got[in.Path]; dup {
					t.Errorf("%s found twice", in.Path)
				}
				got[in.Path] = "match"
				if r.Query != "" {
					got[in.Path] = resp.Stages[i]
				}
			}
			if resp.Next == "" {
				break
			}
			r.After = resp.Next
		}
	}
	return got
}
