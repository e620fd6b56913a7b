package namespace_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/ghba/ghba/node/namespace"
	"github.com/ghba/ghba/node/nodetest"
	"github.com/ghba/ghba/rpc"
)

// codeAttrs is what the test made a path: its type, mode and owner.
type codeAttrs struct {
	dir           bool
	mode, uid, gd uint32
}

// codeModel is the namespace as the test made it.
type codeModel map[string]codeAttrs

// want returns the ancestor codes of p by walking its ancestors: every
// ancestor directory without search for user, group and other, by depth
// (HBA §4.2.2).
func (m codeModel) want(p string) []rpc.AncestorCode {
	var out []rpc.AncestorCode
	for d, a := range ancestorsOf(p) {
		at := m[a]
		if x := at.mode & 0o111; x != 0o111 {
			out = append(out, rpc.AncestorCode{Depth: uint32(d), Mode: x, UID: at.uid, GID: at.gd})
		}
	}
	return out
}

// ancestorsOf returns the ancestors of p from "/" down to its parent.
func ancestorsOf(p string) []string {
	if p == "/" {
		return nil
	}
	out := []string{"/"}
	for i := 1; i < len(p); i++ {
		if p[i] == '/' {
			out = append(out, p[:i])
		}
	}
	return out
}

// move moves the subtree at s to d.
func (m codeModel) move(s, d string) {
	for q, a := range m {
		if q == s || strings.HasPrefix(q, s+"/") {
			delete(m, q)
			m[d+q[len(s):]] = a
		}
	}
}

func (m codeModel) sorted(kind int) []string {
	var out []string
	for q, a := range m {
		if kind == 0 || (kind == 1) == a.dir {
			out = append(out, q)
		}
	}
	sort.Strings(out)
	return out
}

// check compares the codes of every path under root (all: "/") through
// node with the model's walk.
func (m codeModel) check(t *testing.T, c *nodetest.Namespaces, node, root, after string) {
	t.Helper()
	o := via(c, node)
	for _, q := range m.sorted(0) {
		if q != root && root != "/" && !strings.HasPrefix(q, root+"/") {
			continue
		}
		st, err := o.stat(q)
		if err != nil {
			t.Fatalf("after %s: stat %s via %s: %v", after, q, node, err)
		}
		want := m.want(q)
		if !reflect.DeepEqual(st.Inode.Ancestors, want) {
			t.Fatalf("after %s: %s has codes %v, the walk of its ancestors gives %v", after, q, st.Inode.Ancestors, want)
		}
		if a := m[q]; st.Inode.Mode != a.mode || st.Inode.UID != a.uid || st.Inode.GID != a.gd {
			t.Fatalf("after %s: %s is %#o %d:%d, want %#o %d:%d", after, q, st.Inode.Mode, st.Inode.UID, st.Inode.GID, a.mode, a.uid, a.gd)
		}
	}
}

// TestAncestorCodesModel runs random mkdirs, creates, chmods, chowns and
// renames of files and directories (into directories with other
// permissions) through random nodes, and after each checks the ancestor
// codes of every path the operation could change against a model that
// walks the ancestors; every 40 operations and at the end, every path
// through every node.
func TestAncestorCodesModel(t *testing.T) { forEachR(t, testAncestorCodesModel) }

func testAncestorCodesModel(t *testing.T, r int) {
	ops := 400
	if testing.Short() {
		ops = 150
	}
	seed := uint64(*nsModelSeed)
	rng := rand.New(rand.NewPCG(seed, seed^0x51))
	c := nodetest.NewNamespaces(t, nodetest.NamespacesOptions{Nodes: 3, Replication: r})
	st, err := via(c, c.IDs[0]).stat("/")
	mustOK(t, err, "stat /")
	m := codeModel{"/": {dir: true, mode: st.Inode.Mode, uid: st.Inode.UID, gd: st.Inode.GID}}
	modes := []uint32{0o755, 0o700, 0o711, 0o750, 0o705, 0o1777, 0o555, 0o310}
	owners := []uint32{0, 1000, 1001}
	names := []string{"a", "b", "c", "d"}
	pickOf := func(kind int) string {
		all := m.sorted(kind)
		return all[rng.IntN(len(all))]
	}
	counts := map[string]int{}
	for i := range ops {
		node := c.IDs[rng.IntN(len(c.IDs))]
		o := via(c, node)
		var desc, root string
		switch k := rng.IntN(100); {
		case k < 25: // mkdir, with a random mode
			p := namespace.JoinPath(pickOf(1), names[rng.IntN(len(names))])
			mode := modes[rng.IntN(len(modes))]
			desc, root = fmt.Sprintf("mkdir %s %#o", p, mode), p
			err := o.call(rpc.MethodMkdir, &rpc.MkdirRequest{Path: p, Mode: mode}, &rpc.MkdirResponse{})
			if _, exists := m[p]; exists {
				if err == nil {
					t.Fatalf("%s: succeeded over an existing path", desc)
				}
				continue
			}
			mustOK(t, err, "%s", desc)
			m[p] = codeAttrs{dir: true, mode: mode}
		case k < 45: // create a file
			p := namespace.JoinPath(pickOf(1), "f"+names[rng.IntN(len(names))])
			desc, root = "create "+p, p
			err := o.create(p)
			if _, exists := m[p]; exists {
				continue
			}
			mustOK(t, err, "%s", desc)
			m[p] = codeAttrs{mode: 0o644}
		case k < 65: // chmod
			p := pickOf(0)
			mode := modes[rng.IntN(len(modes))]
			desc, root = fmt.Sprintf("chmod %#o %s", mode, p), p
			_, err := o.setattr(&rpc.SetAttrRequest{Path: p, Mode: u32(mode)})
			mustOK(t, err, "%s", desc)
			a := m[p]
			a.mode = mode
			m[p] = a
		case k < 75: // chown
			p := pickOf(1)
			uid, gid := owners[rng.IntN(len(owners))], owners[rng.IntN(len(owners))]
			desc, root = fmt.Sprintf("chown %d:%d %s", uid, gid, p), p
			_, err := o.setattr(&rpc.SetAttrRequest{Path: p, UID: u32(uid), GID: u32(gid)})
			mustOK(t, err, "%s", desc)
			a := m[p]
			a.uid, a.gd = uid, gid
			m[p] = a
		default: // rename a file or directory into another directory
			s := pickOf(0)
			dir := pickOf(1)
			if s == "/" {
				continue
			}
			d := namespace.JoinPath(dir, names[rng.IntN(len(names))]+fmt.Sprint(i))
			desc, root = "rename "+s+" "+d, d
			err := o.rename(s, d)
			if strings.HasPrefix(d, s+"/") {
				if err == nil {
					t.Fatalf("%s: moved into its own subtree", desc)
				}
				continue
			}
			mustOK(t, err, "%s", desc)
			m.move(s, d)
		}
		counts[strings.Fields(desc)[0]]++
		m.check(t, c, c.IDs[rng.IntN(len(c.IDs))], root, desc)
		if i%40 == 39 {
			m.check(t, c, c.IDs[rng.IntN(len(c.IDs))], "/", desc)
		}
	}
	for _, id := range c.IDs {
		m.check(t, c, id, "/", "the last operation")
	}
	restricted := 0
	for _, q := range m.sorted(0) {
		if len(m.want(q)) > 0 {
			restricted++
		}
	}
	t.Logf("seed %d: %d paths, %d with ancestor codes; operations %v", seed, len(m), restricted, counts)
	if restricted == 0 {
		t.Error("no path had ancestor codes: the test checked nothing")
	}
}

// TestAncestorCodesCrash: the coordinator of a chmod of a directory, and
// of a rename of a directory into a directory with other permissions,
// dies after its commit point, before any shard recoded its part; after a
// restart the codes are complete everywhere. One that dies before the
// commit point changes nothing.
func TestAncestorCodesCrash(t *testing.T) {
	c := nodetest.NewNamespaces(t, nodetest.NamespacesOptions{Nodes: 3})
	tree := nsTree(t, c, "/src", 3, 8)
	m := codeModel{"/": {dir: true, mode: 0o755}}
	for q, dir := range tree {
		m[q] = codeAttrs{dir: dir, mode: map[bool]uint32{true: 0o755, false: 0o644}[dir]}
	}
	mustOK(t, via(c, "n2").call(rpc.MethodMkdir, &rpc.MkdirRequest{Path: "/dst", Mode: 0o750}, &rpc.MkdirResponse{}), "mkdir /dst")
	m["/dst"] = codeAttrs{dir: true, mode: 0o750}
	m.check(t, c, "n1", "/", "setup")

	for _, step := range []struct {
		point, what string
		run         func(o nsOps) error
		apply       func()
	}{
		{namespace.HookPrepared, "chmod 0700 /src (crash before the commit point)",
			func(o nsOps) error {
				_, err := o.setattr(&rpc.SetAttrRequest{Path: "/src", Mode: u32(0o700)})
				return err
			}, func() {}},
		{namespace.HookCommitted, "chmod 0700 /src (crash after the commit point)",
			func(o nsOps) error {
				_, err := o.setattr(&rpc.SetAttrRequest{Path: "/src", Mode: u32(0o700)})
				return err
			}, func() { a := m["/src"]; a.mode = 0o700; m["/src"] = a }},
		{namespace.HookCommitted, "rename /src/d1 /dst/moved (crash after the commit point)",
			func(o nsOps) error { return o.rename("/src/d1", "/dst/moved") },
			func() { m.move("/src/d1", "/dst/moved") }},
	} {
		p := homeOf(c, t, "/src")
		armed := crashHook(c.NS(p), step.point, nil)
		armed.Store(true)
		if err := step.run(via(c, p)); !errors.Is(err, rpc.ErrUnavailable) {
			t.Fatalf("%s: %v, want the simulated crash", step.what, err)
		}
		step.apply()
		c.Restart(p)
		c.SettleAll()
		c.WaitFilters()
		for _, id := range c.IDs {
			m.check(t, c, id, "/", step.what)
		}
		if pend := c.NS(p).Marks(); len(pend) != 0 {
			t.Errorf("%s: marks left at %s: %v", step.what, p, pend)
		}
	}
}
