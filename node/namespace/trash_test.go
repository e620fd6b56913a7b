package namespace_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ghba/ghba/node/contents"
	"github.com/ghba/ghba/node/namespace"
	"github.com/ghba/ghba/node/nodetest"
	"github.com/ghba/ghba/rpc"
	"github.com/ghba/ghba/rpc/rpctest"
)

// gcBlock is the block size of the test files: small objects.
const gcBlock = 4096

// gcFiles writes files through node/contents as the mount does (blocks
// uploaded to the data store, the layout committed with SetAttr under
// IfVersion) and keeps track of every object ever committed.
type gcFiles struct {
	t         *testing.T
	c         *nodetest.Namespaces
	ds        *contents.Store
	committed map[uint64][]contents.BlockRef // by inode id: every object ever committed
	ids       map[string]uint64
}

func (g *gcFiles) o() nsOps { return via(g.c, g.c.IDs[len(g.ids)%len(g.c.IDs)]) }

// retry runs op until it does not fail as unavailable (a leader lost
// its leadership on a loaded machine); done reports an error that means
// an earlier attempt whose outcome was unknown took effect.
func (g *gcFiles) retry(what string, op func() error, done func(error) bool) {
	g.t.Helper()
	unknown := false
	rpctest.Eventually(g.t, 60*time.Second, what, func() error {
		err := op()
		switch {
		case err == nil, unknown && done != nil && done(err):
			return nil
		case errors.Is(err, rpc.ErrUnavailable):
			unknown = true
			return err
		}
		g.t.Fatalf("%s: %v", what, err)
		return nil
	})
}

// create creates p and writes blocks [0, n) of it.
func (g *gcFiles) create(p string, n int) {
	g.t.Helper()
	g.retry("create "+p, func() error {
		return g.o().call(rpc.MethodCreate, &rpc.CreateRequest{Path: p, Mode: 0o644}, &rpc.CreateResponse{})
	}, func(err error) bool { return errors.Is(err, fs.ErrExist) })
	g.ids[p] = mustStat(g.t, g.o(), p).ID
	g.write(p, 0, n)
}

// unlink removes p.
func (g *gcFiles) unlink(p string) {
	g.t.Helper()
	g.retry("unlink "+p, func() error { return g.o().unlink(p) }, func(err error) bool { return errors.Is(err, fs.ErrNotExist) })
}

// rename renames src to dst.
func (g *gcFiles) rename(src, dst string) {
	g.t.Helper()
	g.retry("rename "+src, func() error { return g.o().rename(src, dst) }, func(err error) bool { return errors.Is(err, fs.ErrNotExist) })
}

// setattr changes p's attributes (not conditionally).
func (g *gcFiles) setattr(r *rpc.SetAttrRequest) {
	g.t.Helper()
	g.retry("setattr "+r.Path, func() error { return g.o().call(rpc.MethodSetAttr, r, &rpc.SetAttrResponse{}) }, nil)
}

// write rewrites blocks [from, to) of p with new data and commits.
func (g *gcFiles) write(p string, from, to int) {
	g.t.Helper()
	ctx := context.Background()
	st := mustStat(g.t, g.o(), p)
	f := g.ds.OpenFile(st.ID, st.Size, g.layout(st.Layout), contents.FileOptions{})
	defer f.Close()
	data := bytes.Repeat([]byte{byte(len(p) + from)}, (to-from)*gcBlock)
	if _, err := f.WriteAt(ctx, data, int64(from)*gcBlock); err != nil {
		g.t.Fatalf("write %s: %v", p, err)
	}
	g.commit(p, f)
}

// truncate shrinks p to size the mount's way (File.Truncate, a commit).
func (g *gcFiles) truncate(p string, size int64) {
	g.t.Helper()
	ctx := context.Background()
	st := mustStat(g.t, g.o(), p)
	f := g.ds.OpenFile(st.ID, st.Size, g.layout(st.Layout), contents.FileOptions{})
	defer f.Close()
	if err := f.Truncate(ctx, size); err != nil {
		g.t.Fatalf("truncate %s: %v", p, err)
	}
	g.commit(p, f)
}

func (g *gcFiles) layout(b []byte) contents.Layout {
	if len(b) == 0 {
		return contents.Layout{BlockSize: gcBlock}
	}
	l, err := contents.DecodeLayout(b)
	if err != nil {
		g.t.Fatalf("layout: %v", err)
	}
	return l
}

// commit flushes f and commits its layout to p: read, merge, write if
// unchanged.
func (g *gcFiles) commit(p string, f *contents.File) {
	g.t.Helper()
	ctx := context.Background()
	c, err := f.Flush(ctx)
	if err != nil || c == nil {
		g.t.Fatalf("flush %s: %v (commit %v)", p, err, c)
	}
	for {
		st := mustStat(g.t, g.o(), p)
		l, size := contents.Merge(g.layout(st.Layout), st.Size, c)
		v := st.Version
		err := g.o().call(rpc.MethodSetAttr, &rpc.SetAttrRequest{Path: p, Layout: l.Encode(), Size: &size, IfVersion: &v}, &rpc.SetAttrResponse{})
		if errors.Is(err, rpc.ErrVersionMismatch) || errors.Is(err, rpc.ErrUnavailable) {
			continue // read and merge again (merging a commit twice changes nothing)
		}
		mustOK(g.t, err, "commit %s", p)
		f.Committed(c, l, size)
		g.committed[st.ID] = append(g.committed[st.ID], l.Refs()...)
		return
	}
}

// live returns the objects the layouts of the live files reference.
func (g *gcFiles) live() map[uint64][]contents.BlockRef {
	out := map[uint64][]contents.BlockRef{}
	for p, id := range g.ids {
		st, err := g.o().stat(p)
		if err != nil {
			continue // removed
		}
		if st.ID != id {
			g.t.Fatalf("%s: id %d, created with %d", p, st.ID, id)
		}
		out[id] = append(out[id], g.layout(st.Layout).Refs()...)
	}
	return out
}

// objects returns the objects the data store holds for every inode the
// test wrote.
func (g *gcFiles) objects() map[uint64][]contents.BlockRef {
	out := map[uint64][]contents.BlockRef{}
	for id := range g.committed {
		refs, err := g.ds.Objects(context.Background(), id)
		mustOK(g.t, err, "list objects of %d", id)
		if len(refs) > 0 {
			out[id] = refs
		}
	}
	return out
}

// diff describes how got differs from want ("" when equal).
func diff(got, want map[uint64][]contents.BlockRef) string {
	type object struct {
		ino uint64
		ref contents.BlockRef
	}
	norm := func(m map[uint64][]contents.BlockRef) map[object]bool {
		out := map[object]bool{}
		for id, refs := range m {
			for _, r := range refs {
				out[object{id, r}] = true
			}
		}
		return out
	}
	g, w := norm(got), norm(want)
	var extra, missing int
	for r := range g {
		if _, ok := w[r]; !ok {
			extra++
		}
	}
	for r := range w {
		if _, ok := g[r]; !ok {
			missing++
		}
	}
	if extra+missing == 0 {
		return ""
	}
	return fmt.Sprintf("%d objects too many, %d missing (of %d wanted)", extra, missing, len(w))
}

// gcStats sums the garbage collection counters of the running nodes.
func gcStats(c *nodetest.Namespaces) (deleted uint64, pending int64) {
	for _, id := range c.IDs {
		if nd := c.Nodes[id]; nd.Running {
			s := nd.NS.Stats()
			deleted, pending = deleted+s.DataObjectsDeleted, pending+s.TrashPending
		}
	}
	return deleted, pending
}

// TestContentsGC: files written with real objects in a file:// data store
// are overwritten, truncated (by size alone and the mount's way),
// unlinked and renamed over, placed with their directory and on other
// shards (a transaction part removes those). While no data store is set,
// and before the grace period, nothing is deleted; the leader of a shard
// holding trash is stopped; once the store is set, exactly the dropped
// objects disappear and every object a live layout references stays.
func TestContentsGC(t *testing.T) {
	for _, placement := range []string{namespace.PlacementColocate, namespace.PlacementBalanced} {
		t.Run(placement, func(t *testing.T) { testContentsGC(t, placement) })
	}
}

func testContentsGC(t *testing.T, placement string) {
	ctx := context.Background()
	ds, err := contents.Open(ctx, "file://"+t.TempDir())
	mustOK(t, err, "open data store")
	t.Cleanup(func() { _ = ds.Close() })
	var storeSet atomic.Bool
	const grace = 1500 * time.Millisecond
	c := nodetest.NewNamespaces(t, nodetest.NamespacesOptions{
		Nodes: 3, Replication: 3, Placement: placement,
		Tuning: namespace.Tuning{TrashInterval: 50 * time.Millisecond},
		Configure: func(o *namespace.Options) {
			o.DataGCGrace = grace
			o.DataStore = func(context.Context) (*contents.Store, error) {
				if !storeSet.Load() {
					return nil, nil // no data store set: trash waits
				}
				return ds, nil
			}
		},
	})
	g := &gcFiles{t: t, c: c, ds: ds, committed: map[uint64][]contents.BlockRef{}, ids: map[string]uint64{}}
	g.retry("mkdir /d", func() error { return via(c, "n1").mkdir("/d", false) }, func(err error) bool { return errors.Is(err, fs.ErrExist) })
	for _, f := range []string{"keep", "over", "trunc", "mtrunc", "gone", "src", "dst", "grow"} {
		g.create("/d/"+f, 4)
	}
	// The changes that drop objects.
	g.write("/d/over", 1, 3) // blocks 1 and 2 replaced
	size := int64(2 * gcBlock)
	g.setattr(&rpc.SetAttrRequest{Path: "/d/trunc", Size: &size})
	if got := g.layout(mustStat(t, g.o(), "/d/trunc").Layout).Blocks(); got != 2 {
		t.Errorf("size truncated to 2 blocks: the layout keeps %d blocks, want 2", got)
	}
	// A size alone may not cut into a block that has an object: its old
	// tail would show again if the file grew (node/contents).
	into := int64(gcBlock + gcBlock/2)
	if err := g.o().call(rpc.MethodSetAttr, &rpc.SetAttrRequest{Path: "/d/keep", Size: &into}, &rpc.SetAttrResponse{}); !errors.Is(err, fs.ErrInvalid) {
		t.Errorf("a size alone cutting into a block with an object: %v, want fs.ErrInvalid", err)
	}
	g.truncate("/d/mtrunc", gcBlock/2)
	g.unlink("/d/gone")
	g.rename("/d/src", "/d/dst")
	grow := int64(10 * gcBlock)
	g.setattr(&rpc.SetAttrRequest{Path: "/d/grow", Size: &grow})
	changed := time.Now()
	g.ids["/d/dst"] = g.ids["/d/src"]
	delete(g.ids, "/d/src")
	delete(g.ids, "/d/gone")

	live := g.live()
	all := g.committed
	if d := diff(g.objects(), all); d != "" {
		t.Fatalf("before the grace period: %s", d)
	}
	dropped := 0
	for id, refs := range all {
		for _, r := range refs {
			if !slices.Contains(live[id], r) {
				dropped++
			}
		}
	}
	// over: 2, trunc: 2, mtrunc: 4 (the half block is rewritten), gone: 4,
	// dst's old contents: 4.
	if dropped != 16 {
		t.Fatalf("%d objects dropped, want 16", dropped)
	}
	rpctest.Eventually(t, 30*time.Second, "trash counted", func() error {
		if _, pending := gcStats(c); pending != int64(dropped) {
			return fmt.Errorf("%d objects pending", pending)
		}
		return nil
	})
	// The leader of the shard homing /d (and its files, or some) stops;
	// past the grace period the trash still waits for a data store.
	leader := mustStat(t, via(c, "n1"), "/d").Home
	c.Stop(leader)
	rpctest.Eventually(t, 30*time.Second, "grace period passed without a data store", func() error {
		if time.Since(changed) < 2*grace {
			return errors.New("within the grace period")
		}
		if _, pending := gcStats(c); pending != int64(dropped) {
			return fmt.Errorf("%d objects pending", pending)
		}
		return nil
	})
	if d := diff(g.objects(), all); d != "" {
		t.Fatalf("without a data store: %s", d)
	}
	storeSet.Store(true)
	rpctest.Eventually(t, 30*time.Second, "the dropped objects deleted", func() error {
		if d := diff(g.objects(), live); d != "" {
			return errors.New(d)
		}
		if _, pending := gcStats(c); pending != 0 {
			return fmt.Errorf("%d objects pending", pending)
		}
		return nil
	})
	if deleted, _ := gcStats(c); deleted < uint64(dropped) {
		t.Errorf("%d objects counted deleted, want at least %d", deleted, dropped)
	}
	c.Start(leader)
	// Every live file still reads back what was written.
	for p := range g.ids {
		st := mustStat(t, g.o(), p)
		f := ds.OpenFile(st.ID, st.Size, g.layout(st.Layout), contents.FileOptions{})
		buf := make([]byte, st.Size)
		if _, err := f.ReadAt(ctx, buf, 0); err != nil && !errors.Is(err, io.EOF) {
			t.Errorf("read %s: %v", p, err)
		}
		f.Close()
	}
	if d := diff(g.objects(), g.live()); d != "" {
		t.Errorf("after the restart: %s", d)
	}
	c.SettleAll()
}
