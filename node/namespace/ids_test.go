package namespace_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ghba/ghba/node/namespace"
	"github.com/ghba/ghba/node/nodetest"
	"github.com/ghba/ghba/node/store"
	"github.com/ghba/ghba/rpc"
	"github.com/ghba/ghba/rpc/rpctest"
)

// Inode ids (docs/design.md, "Inode ids").

// idOf stats p through o and returns its id.
func idOf(t testing.TB, o nsOps, p string) uint64 {
	t.Helper()
	st, err := o.stat(p)
	mustOK(t, err, "stat %s", p)
	return st.ID
}

// entryIDs lists directory dir and returns its entries' ids by name.
func entryIDs(t testing.TB, o nsOps, dir string) map[string]uint64 {
	t.Helper()
	out := map[string]uint64{}
	after := ""
	for {
		r, err := o.readdir(dir, after, 5)
		mustOK(t, err, "readdir %s", dir)
		for _, e := range r.Entries {
			out[e.Name] = e.ID
		}
		if r.Next == "" {
			return out
		}
		after = r.Next
	}
}

// checkIDs checks that every path of want has its id, through every
// running node, and that its directory's listing gives the same id.
func checkIDs(t testing.TB, c *nodetest.Namespaces, want map[string]uint64) {
	t.Helper()
	listed := map[string]map[string]uint64{}
	for _, id := range c.IDs {
		if !c.Nodes[id].Running {
			continue
		}
		for p, ino := range want {
			if got := idOf(t, via(c, id), p); got != ino {
				t.Errorf("stat %s via %s: id %d, want %d", p, id, got, ino)
			}
		}
	}
	o := via(c, c.IDs[0])
	for p, ino := range want {
		if p == "/" {
			continue
		}
		dir, name := namespace.SplitPath(p)
		if listed[dir] == nil {
			listed[dir] = entryIDs(t, o, dir)
		}
		if got := listed[dir][name]; got != ino {
			t.Errorf("readdir %s: entry %s has id %d, want %d", dir, name, got, ino)
		}
	}
}

// TestInodeIDs creates inodes of every kind through every way to create
// one, on several shards, and renames them: every inode has an id no
// other has, "/" has 1, listings carry the ids, and renames keep them (a
// file within and across directories and shards, over an existing file,
// and a directory with its subtree).
func TestInodeIDs(t *testing.T) {
	c := nodetest.NewNamespaces(t, nodetest.NamespacesOptions{Nodes: 3, Replication: 3})
	want := map[string]uint64{}
	seen := map[uint64]string{}
	add := func(p string, id uint64) {
		t.Helper()
		switch {
		case id == 0:
			t.Errorf("%s created without an id", p)
		case seen[id] != "":
			t.Errorf("%s got id %d, which %s has", p, id, seen[id])
		}
		seen[id], want[p] = p, id
	}
	if id := idOf(t, via(c, "n2"), "/"); id != namespace.RootID {
		t.Fatalf("/ has id %d, want %d", id, namespace.RootID)
	}
	want["/"] = namespace.RootID
	creates := []struct {
		name string
		run  func(o nsOps) (map[string]uint64, error)
	}{
		{"mkdir", func(o nsOps) (map[string]uint64, error) {
			var r rpc.MkdirResponse
			err := o.call(rpc.MethodMkdir, &rpc.MkdirRequest{Path: "/a", Mode: 0o755}, &r)
			return map[string]uint64{r.Inode.Path: r.Inode.ID}, err
		}},
		{"mkdir -p", func(o nsOps) (map[string]uint64, error) {
			var r rpc.MkdirResponse
			err := o.call(rpc.MethodMkdir, &rpc.MkdirRequest{Path: "/a/b/c/d", Mode: 0o755, Parents: true}, &r)
			out := map[string]uint64{r.Inode.Path: r.Inode.ID}
			for _, p := range r.Created[:len(r.Created)-1] {
				out[p] = idOf(t, o, p)
			}
			return out, err
		}},
		{"create", func(o nsOps) (map[string]uint64, error) {
			var r rpc.CreateResponse
			err := o.call(rpc.MethodCreate, &rpc.CreateRequest{Path: "/a/f", Mode: 0o644}, &r)
			return map[string]uint64{r.Inode.Path: r.Inode.ID}, err
		}},
		{"symlink", func(o nsOps) (map[string]uint64, error) {
			var r rpc.CreateResponse
			err := o.call(rpc.MethodCreate, &rpc.CreateRequest{Path: "/a/l", Mode: 0o777, Symlink: "f"}, &r)
			return map[string]uint64{r.Inode.Path: r.Inode.ID}, err
		}},
		{"batch create", func(o nsOps) (map[string]uint64, error) {
			req := &rpc.BatchCreateRequest{Dir: "/a/b"}
			for i := range 40 {
				e := rpc.BatchCreateEntry{Name: fmt.Sprintf("e%02d", i), Type: rpc.TypeFile, Mode: 0o644}
				if i%4 == 1 {
					e.Type, e.Mode = rpc.TypeDir, 0o755
				}
				req.Entries = append(req.Entries, e)
			}
			var r rpc.BatchCreateResponse
			err := o.call(rpc.MethodBatchCreate, req, &r)
			out := map[string]uint64{}
			for _, res := range r.Results {
				if res.Inode != nil {
					out[res.Inode.Path] = res.Inode.ID
				}
			}
			return out, err
		}},
		{"batch create dirs", func(o nsOps) (map[string]uint64, error) {
			req := &rpc.BatchCreateDirsRequest{}
			for _, d := range []string{"/a/b/e01", "/a/b/e05", "/a/b/c"} {
				br := rpc.BatchCreateRequest{Dir: d}
				for i := range 5 {
					br.Entries = append(br.Entries, rpc.BatchCreateEntry{Name: fmt.Sprintf("g%d", i), Type: rpc.TypeFile, Mode: 0o644})
				}
				req.Dirs = append(req.Dirs, br)
			}
			var r rpc.BatchCreateDirsResponse
			err := o.call(rpc.MethodBatchCreateDirs, req, &r)
			out := map[string]uint64{}
			for _, d := range r.Dirs {
				for _, res := range d.Results {
					if res.Inode != nil {
						out[res.Inode.Path] = res.Inode.ID
					}
				}
			}
			return out, err
		}},
		{"mkdir elsewhere", func(o nsOps) (map[string]uint64, error) {
			out := map[string]uint64{}
			for i := range 6 {
				var r rpc.MkdirResponse
				if err := o.call(rpc.MethodMkdir, &rpc.MkdirRequest{Path: fmt.Sprintf("/x%d", i), Mode: 0o755}, &r); err != nil {
					return out, err
				}
				out[r.Inode.Path] = r.Inode.ID
			}
			return out, nil
		}},
	}
	for i, cr := range creates {
		got, err := cr.run(via(c, c.IDs[i%len(c.IDs)]))
		mustOK(t, err, "%s", cr.name)
		for _, p := range slices.Sorted(maps.Keys(got)) {
			add(p, got[p])
		}
	}
	checkIDs(t, c, want)

	// Two top directories on different shards, for renames across shards.
	homeOf := func(p string) string {
		st, err := via(c, "n1").stat(p)
		mustOK(t, err, "stat %s", p)
		return st.Home
	}
	far := ""
	for i := range 6 {
		if d := fmt.Sprintf("/x%d", i); homeOf(d) != homeOf("/a") {
			far = d
			break
		}
	}
	if far == "" {
		t.Fatal("every directory on the shard of /a")
	}
	renames := []struct{ src, dst string }{
		{"/a/f", "/a/f2"},              // a file within its directory
		{"/a/f2", far + "/f3"},         // a file to a directory on another shard
		{"/a/l", "/a/b/e00"},           // over an existing file: the replaced id goes
		{"/a/b", far + "/b2"},          // a directory with its subtree, to another shard
		{far + "/b2/c/d", "/a/d"},      // a directory back
		{far + "/b2/e04", "/x0/moved"}, // a file homed wherever it was placed
	}
	for i, r := range renames {
		o := via(c, c.IDs[i%len(c.IDs)])
		moved := map[string]uint64{}
		for p, id := range want {
			if namespace.IsUnder(p, r.src) {
				moved[r.dst+p[len(r.src):]] = id
				delete(want, p)
			}
		}
		delete(want, r.dst) // a replaced file
		mustOK(t, o.rename(r.src, r.dst), "rename %s %s", r.src, r.dst)
		maps.Copy(want, moved)
		if len(moved) == 0 {
			t.Fatalf("rename %s: nothing moved in the test's map", r.src)
		}
	}
	checkIDs(t, c, want)
	c.SettleAll()
}

// TestInodeIDsUniqueAcrossLeaderChanges creates files through every node
// at once while the root shard's leader (the keeper of the id counter)
// and then another shard's leader stop and come back: every leadership
// takes its own blocks, so no id is ever given twice.
func TestInodeIDsUniqueAcrossLeaderChanges(t *testing.T) {
	c := nodetest.NewNamespaces(t, nodetest.NamespacesOptions{Nodes: 3, Replication: 3})
	for i := range 3 {
		mustOK(t, via(c, "n1").mkdir(fmt.Sprintf("/w%d", i), false), "mkdir")
	}
	var (
		mu      sync.Mutex
		ids     = map[uint64]string{}
		dups    []string
		running atomic.Pointer[[]string]
	)
	all := slices.Clone(c.IDs)
	running.Store(&all)
	halt := rpctest.Loop(t, 6, func(w, i int) {
		nodes := *running.Load()
		p := fmt.Sprintf("/w%d/f%d-%d", i%3, w, i)
		var r rpc.CreateResponse
		err := via(c, nodes[i%len(nodes)]).call(rpc.MethodCreate, &rpc.CreateRequest{Path: p, Mode: 0o644}, &r)
		switch {
		case err == nil:
			mu.Lock()
			if other, dup := ids[r.Inode.ID]; dup || r.Inode.ID == 0 {
				dups = append(dups, fmt.Sprintf("%s and %s: id %d", p, other, r.Inode.ID))
			}
			ids[r.Inode.ID] = p
			mu.Unlock()
		case !errors.Is(err, rpc.ErrUnavailable) && !errors.Is(err, fs.ErrExist):
			t.Errorf("create %s: %v", p, err)
		}
	})
	count := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(ids)
	}
	waitMore := func(what string, n int) {
		t.Helper()
		from := count()
		rpctest.Eventually(t, 60*time.Second, what, func() error {
			if got := count() - from; got < n {
				return fmt.Errorf("%d created", got)
			}
			return nil
		})
	}
	waitMore("creates before any stop", 150)
	for _, id := range []string{"n1", "n2"} { // n1 leads the root shard
		others := slices.DeleteFunc(slices.Clone(c.IDs), func(s string) bool { return s == id })
		running.Store(&others)
		c.Stop(id)
		waitMore("creates while "+id+" is down", 150)
		c.Start(id)
		running.Store(&all)
		waitMore("creates after "+id+" is back", 150)
	}
	halt()
	if len(dups) > 0 {
		t.Fatalf("ids given twice or missing: %q", dups)
	}
	t.Logf("%d files created, all with distinct ids", count())
	c.SettleAll()
	// The ids the creates answered are the ones the inodes keep.
	o := via(c, "n3")
	k := 0
	for id, p := range ids {
		if k++; k > 60 {
			break
		}
		if got := idOf(t, o, p); got != id {
			t.Errorf("stat %s: id %d, created with %d", p, got, id)
		}
	}
}

// TestLegacyInodesNumbered: inodes written before ids existed (ID 0, in
// the store through the shard's log) get ids when a leadership of their
// shard starts, once: the ids are distinct and stay the same across later
// leaderships; an entry in the same shard gets its child's id, one in
// another shard keeps 0 (a listing then says "unknown").
func TestLegacyInodesNumbered(t *testing.T) {
	c := nodetest.NewNamespaces(t, nodetest.NamespacesOptions{Nodes: 3, Replication: 3})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// Shard n2 homes /old and its children (entries and inodes alike),
	// and /far's inode lives in shard n3 while its entry is in "/"'s.
	var b store.Batch
	now := time.Now().UnixNano()
	dir := store.Inode{Type: store.TypeDir, Mode: 0o755, Nlink: 2, Version: 1, Ctime: now}
	file := store.Inode{Type: store.TypeFile, Mode: 0o644, Nlink: 1, Version: 1, Ctime: now}
	b.PutInode("/old", dir)
	for i := range 300 { // more than one batch of the pass
		name := fmt.Sprintf("f%03d", i)
		b.PutInode("/old/"+name, file)
		b.PutEntry("/old", store.Entry{Name: name, Type: store.TypeFile, Home: "n2"})
	}
	b.DeleteMeta(namespace.LegacyIDsKey)
	// leader returns the node whose replica of shard s leads it now.
	leader := func(s string) string {
		t.Helper()
		var id string
		rpctest.Eventually(t, 30*time.Second, "a leader of shard "+s, func() error {
			for _, n := range c.IDs {
				if nd := c.Nodes[n]; nd.Running && nd.Replicas[s] != nil && nd.Replicas[s].IsLeader() && slices.Contains(nd.NS.Leads(), s) {
					id = n
					return nil
				}
			}
			return errors.New("none")
		})
		return id
	}
	apply := func(s string, b *store.Batch) {
		t.Helper()
		rpctest.Eventually(t, 30*time.Second, "write to shard "+s, func() error {
			return c.Nodes[leader(s)].Replicas[s].Apply(ctx, b)
		})
	}
	apply("n2", &b)
	l2 := leader("n2")
	term := c.Nodes[l2].Replicas["n2"].Term()
	var far store.Batch
	far.PutInode("/far", file)
	far.DeleteMeta(namespace.LegacyIDsKey)
	apply("n3", &far)
	var entries store.Batch
	entries.PutEntry("/", store.Entry{Name: "old", Type: store.TypeDir, Home: "n2"})
	entries.PutEntry("/", store.Entry{Name: "far", Type: store.TypeFile, Home: "n3"})
	apply("n1", &entries)
	c.WaitFilters()
	id := idOf(t, via(c, "n1"), "/old/f007")
	if same := leader("n2") == l2 && c.Nodes[l2].Replicas["n2"].Term() == term; same && id != 0 {
		t.Fatalf("legacy inode has id %d before a new leadership", id)
	}
	// relead makes the leader of shard s lead it again (a new home, as
	// after an election), and waits for the legacy pass of whichever
	// node leads it then.
	relead := func(s string) {
		t.Helper()
		l := leader(s)
		ns := c.NS(l)
		ns.Unlead(s)
		if err := ns.Lead(ctx, c.Nodes[l].Replicas[s]); err != nil {
			t.Logf("lead %s again on %s: %v (an election took it)", s, l, err)
		}
		rpctest.Eventually(t, 30*time.Second, "legacy pass of shard "+s, func() error {
			if !c.NS(leader(s)).LegacyNumbered(s) {
				return errors.New("not done")
			}
			return nil
		})
	}
	relead("n2")
	relead("n3")
	o := via(c, "n1")
	first := map[string]uint64{}
	seen := map[uint64]string{}
	for i := range 300 {
		p := fmt.Sprintf("/old/f%03d", i)
		first[p] = idOf(t, o, p)
	}
	first["/old"], first["/far"] = idOf(t, o, "/old"), idOf(t, o, "/far")
	for p, id := range first {
		if id == 0 || seen[id] != "" {
			t.Fatalf("%s: id %d (also %q)", p, id, seen[id])
		}
		seen[id] = p
	}
	// /old's entries are in its own shard: numbered with their inodes.
	listed := entryIDs(t, o, "/old")
	for name, id := range listed {
		if id != first["/old/"+name] {
			t.Errorf("entry /old/%s: id %d, inode %d", name, id, first["/old/"+name])
		}
	}
	// The entries of / are in shard n1, not the inodes': they stay 0.
	root := entryIDs(t, o, "/")
	if root["old"] != 0 || root["far"] != 0 {
		t.Errorf("entries in another shard than their inodes got ids: %v", root)
	}
	// Later leaderships keep the ids (the pass is recorded as done) and a
	// rename writes the id into the new entry.
	relead("n2")
	c.Restart("n3")
	for _, p := range []string{"/old/f000", "/old/f299", "/far"} {
		if got := idOf(t, o, p); got != first[p] {
			t.Errorf("%s: id %d after new leaderships, was %d", p, got, first[p])
		}
	}
	mustOK(t, o.rename("/old/f001", "/old/g001"), "rename")
	if got := entryIDs(t, o, "/old")["g001"]; got != first["/old/f001"] {
		t.Errorf("renamed entry: id %d, want %d", got, first["/old/f001"])
	}
}

// TestSetAttrIfVersion: a setattr with IfVersion applies only at that
// version, and with IfID only to that inode, and fails with
// rpc.ErrVersionMismatch otherwise, changing nothing; concurrent read-merge-write cycles lose no update.
func TestSetAttrIfVersion(t *testing.T) {
	c := nodetest.NewNamespaces(t, nodetest.NamespacesOptions{Nodes: 3, Replication: 3})
	o := via(c, "n2")
	mustOK(t, o.mkdir("/v", false), "mkdir")
	mustOK(t, o.create("/v/f"), "create")
	st0 := mustStat(t, o, "/v/f")
	v0, id := st0.Version, st0.ID
	ver := func(v uint64) *uint64 { return &v }
	for _, tc := range []struct {
		name  string
		req   rpc.SetAttrRequest
		want  error
		after uint64 // the version after the call
	}{
		{"at the version", rpc.SetAttrRequest{Mode: u32(0o600), IfVersion: ver(v0)}, nil, v0 + 1},
		{"stale version", rpc.SetAttrRequest{Mode: u32(0o666), IfVersion: ver(v0)}, rpc.ErrVersionMismatch, v0 + 1},
		{"future version", rpc.SetAttrRequest{Size: i64(9), IfVersion: ver(v0 + 7)}, rpc.ErrVersionMismatch, v0 + 1},
		{"no condition", rpc.SetAttrRequest{Mtime: i64(5)}, nil, v0 + 2},
		{"layout at the version", rpc.SetAttrRequest{Layout: []byte("L1"), IfVersion: ver(v0 + 2)}, nil, v0 + 3},
		{"the inode's id", rpc.SetAttrRequest{Mtime: i64(6), IfID: id, IfVersion: ver(v0 + 3)}, nil, v0 + 4},
		{"another inode's id", rpc.SetAttrRequest{Size: i64(9), IfID: id + 1, IfVersion: ver(v0 + 4)}, rpc.ErrVersionMismatch, v0 + 4},
	} {
		tc.req.Path = "/v/f"
		var r rpc.SetAttrResponse
		err := via(c, c.IDs[len(tc.name)%3]).call(rpc.MethodSetAttr, &tc.req, &r)
		if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
		if st := mustStat(t, o, "/v/f"); st.Version != tc.after || (tc.want != nil && (st.Mode == 0o666 || st.Size == 9)) {
			t.Errorf("%s: inode %+v, want version %d and no change", tc.name, st.Inode, tc.after)
		}
	}
	// Read, merge, write-if-unchanged from every node at once: a counter
	// in the layout counts every increment.
	const writers, each = 6, 15
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			wo := via(c, c.IDs[w%3])
			for range each {
				for {
					st, err := wo.stat("/v/f")
					if err != nil {
						t.Errorf("stat: %v", err)
						return
					}
					n := 0
					fmt.Sscanf(string(st.Layout), "n=%d", &n)
					err = wo.call(rpc.MethodSetAttr, &rpc.SetAttrRequest{Path: "/v/f", Layout: fmt.Appendf(nil, "n=%d", n+1), IfVersion: ver(st.Version)}, &rpc.SetAttrResponse{})
					if err == nil {
						break
					}
					if !errors.Is(err, rpc.ErrVersionMismatch) {
						t.Errorf("setattr: %v", err)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	if got := string(mustStat(t, o, "/v/f").Layout); got != fmt.Sprintf("n=%d", writers*each) {
		t.Errorf("counter %q after %d increments", got, writers*each)
	}
}

func mustStat(t testing.TB, o nsOps, p string) *rpc.StatResponse {
	t.Helper()
	st, err := o.stat(p)
	mustOK(t, err, "stat %s", p)
	return st
}

// TestRenameNoReplace: a rename with NoReplace fails with fs.ErrExist
// when the destination exists, whatever its type and shard, and changes
// nothing; of concurrent renames onto one free name exactly one wins.
func TestRenameNoReplace(t *testing.T) {
	c := nodetest.NewNamespaces(t, nodetest.NamespacesOptions{Nodes: 3, Replication: 3})
	o := via(c, "n1")
	for _, d := range []string{"/s", "/s/sub", "/s/empty"} {
		mustOK(t, o.mkdir(d, false), "mkdir %s", d)
	}
	for _, f := range []string{"/s/a", "/s/b"} {
		mustOK(t, o.create(f), "create %s", f)
	}
	// A directory on another shard than /s.
	other := ""
	for i := 0; i < 10 && other == ""; i++ {
		d := fmt.Sprintf("/o%d", i)
		mustOK(t, o.mkdir(d, false), "mkdir %s", d)
		if mustStat(t, o, d).Home != mustStat(t, o, "/s").Home {
			other = d
		}
	}
	if other == "" {
		t.Fatal("no directory on another shard")
	}
	mustOK(t, o.create(other+"/taken"), "create")
	noReplace := func(src, dst string) error {
		return via(c, "n2").call(rpc.MethodRename, &rpc.RenameRequest{Src: src, Dst: dst, NoReplace: true}, &rpc.RenameResponse{})
	}
	for _, tc := range []struct {
		src, dst string
		want     error
	}{
		{"/s/a", "/s/b", fs.ErrExist},           // a file over a file
		{"/s/sub", "/s/empty", fs.ErrExist},     // a directory over an empty one
		{"/s/a", "/s/sub", fs.ErrExist},         // a file over a directory
		{"/s/a", "/s/a", fs.ErrExist},           // itself
		{"/s/a", other + "/taken", fs.ErrExist}, // the destination's entry on another shard
		{"/s/a", other + "/free", nil},          // a free name on another shard
		{other + "/free", "/s/a", nil},          // and back
		{"/s/missing", "/s/c", fs.ErrNotExist},  // a missing source
	} {
		err := noReplace(tc.src, tc.dst)
		if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
			t.Errorf("rename -n %s %s: %v, want %v", tc.src, tc.dst, err, tc.want)
		}
	}
	// Nothing was replaced: every name is there with its own id.
	for _, p := range []string{"/s/a", "/s/b", "/s/sub", "/s/empty", other + "/taken"} {
		mustStat(t, o, p)
	}
	// Concurrent renames of different files onto one free name, through
	// every node: one wins, the others get fs.ErrExist, no file is lost.
	for round := range 5 {
		dst := fmt.Sprintf("/s/won%d", round)
		var srcs []string
		for i := range 6 {
			p := fmt.Sprintf("/s/r%d-%d", round, i)
			if i%2 == 1 {
				p = fmt.Sprintf("%s/r%d-%d", other, round, i)
			}
			mustOK(t, o.create(p), "create %s", p)
			srcs = append(srcs, p)
		}
		var won, lost atomic.Int32
		var wg sync.WaitGroup
		for i, src := range srcs {
			wg.Go(func() {
				err := via(c, c.IDs[i%3]).call(rpc.MethodRename, &rpc.RenameRequest{Src: src, Dst: dst, NoReplace: true}, &rpc.RenameResponse{})
				switch {
				case err == nil:
					won.Add(1)
				case errors.Is(err, fs.ErrExist):
					lost.Add(1)
				default:
					t.Errorf("rename %s %s: %v", src, dst, err)
				}
			})
		}
		wg.Wait()
		if won.Load() != 1 || lost.Load() != int32(len(srcs)-1) {
			t.Fatalf("round %d: %d won, %d refused", round, won.Load(), lost.Load())
		}
		left := 0
		for _, src := range srcs {
			if _, err := o.stat(src); err == nil {
				left++
			}
		}
		if left != len(srcs)-1 {
			t.Errorf("round %d: %d sources left, want %d", round, left, len(srcs)-1)
		}
	}
	c.SettleAll()
}
