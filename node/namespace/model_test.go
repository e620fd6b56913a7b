package namespace_test

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/ghba/ghba/node/namespace"
	"github.com/ghba/ghba/node/nodetest"
)

var (
	nsModelOps  = flag.Int("ns.ops", 10000, "operations of TestModel (1000 with -short unless set)")
	nsModelSeed = flag.Uint64("ns.seed", 1, "seed of TestModel")
)

// nsModel is the in-memory reference namespace: path → is a directory.
type nsModel map[string]bool

// check returns the error kind for reaching p's parent (every ancestor
// must be a directory), or "".
func (m nsModel) ancestors(p string) string {
	for i := 1; i < len(p); i++ {
		if p[i] != '/' {
			continue
		}
		isDir, ok := m[p[:i]]
		if !ok {
			return "notexist"
		}
		if !isDir {
			return "notdir"
		}
	}
	return ""
}

func (m nsModel) children(p string) []string {
	var out []string
	for q, isDir := range m {
		if q != "/" && parentOf(q) == p {
			name := q[strings.LastIndexByte(q, '/')+1:]
			if isDir {
				name += "/"
			}
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

func parentOf(p string) string {
	d, _ := namespace.SplitPath(p)
	return d
}

func (m nsModel) create(p string, dir bool) string {
	if p == "/" {
		return "exist"
	}
	if e := m.ancestors(p); e != "" {
		return e
	}
	if _, ok := m[p]; ok {
		return "exist"
	}
	m[p] = dir
	return "ok"
}

func (m nsModel) stat(p string) (string, bool) {
	if p == "/" {
		return "ok", true
	}
	if e := m.ancestors(p); e != "" {
		return e, false
	}
	isDir, ok := m[p]
	if !ok {
		return "notexist", false
	}
	return "ok", isDir
}

func (m nsModel) remove(p string, dir bool) string {
	if p == "/" {
		if dir {
			return "invalid"
		}
		return "isdir"
	}
	if e := m.ancestors(p); e != "" {
		return e
	}
	isDir, ok := m[p]
	switch {
	case !ok:
		return "notexist"
	case dir && !isDir:
		return "notdir"
	case !dir && isDir:
		return "isdir"
	case dir && len(m.children(p)) > 0:
		return "notempty"
	}
	delete(m, p)
	return "ok"
}

func (m nsModel) readdir(p string) (string, []string) {
	e, isDir := m.stat(p)
	if e != "ok" {
		return e, nil
	}
	if !isDir {
		return "notdir", nil
	}
	return "ok", m.children(p)
}

func (m nsModel) rename(s, d string) string {
	if s == "/" || d == "/" || namespace.StrictlyUnder(d, s) {
		return "invalid"
	}
	if s == d {
		e, _ := m.stat(s)
		return e
	}
	if e := m.ancestors(s); e != "" {
		return e
	}
	sDir, ok := m[s]
	if !ok {
		return "notexist"
	}
	if e := m.ancestors(d); e != "" {
		return e
	}
	if dDir, ok := m[d]; ok {
		switch {
		case namespace.IsUnder(s, d):
			if !sDir {
				return "isdir"
			}
			return "notempty"
		case sDir && !dDir:
			return "notdir"
		case !sDir && dDir:
			return "isdir"
		case dDir && len(m.children(d)) > 0:
			return "notempty"
		}
		delete(m, d)
	}
	for q, isDir := range m {
		if namespace.IsUnder(q, s) {
			delete(m, q)
			m[namespace.Rebase(q, s, d)] = isDir
		}
	}
	return "ok"
}

// TestModel runs random operations (create, mkdir, stat, rename of files
// and directories, unlink, rmdir, readdir) through random nodes of a
// 3-node cluster and checks every answer against nsModel.
func TestModel(t *testing.T) { forEachR(t, testModel) }

func testModel(t *testing.T, r int) {
	ops := *nsModelOps
	explicit := false
	flag.Visit(func(f *flag.Flag) {
		if f.Name == "ns.ops" {
			explicit = true
		}
	})
	if testing.Short() && !explicit {
		ops = 1000
	}
	seed := *nsModelSeed
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	c := nodetest.NewNamespaces(t, nodetest.NamespacesOptions{Nodes: 3, Replication: r})
	m := nsModel{"/": true}
	names := []string{"a", "b", "c", "d", "e", "f"}
	randPath := func() string {
		depth := 1 + rng.IntN(3)
		var sb strings.Builder
		for range depth {
			sb.WriteByte('/')
			sb.WriteString(names[rng.IntN(len(names))])
		}
		return sb.String()
	}
	// existing returns a random path of the model: any, only
	// directories, or only files (falling back to any).
	existingOf := func(kind int) string {
		keys := make([]string, 0, len(m))
		for k, isDir := range m {
			if kind == 0 || (kind == 1) == isDir {
				keys = append(keys, k)
			}
		}
		if len(keys) == 0 {
			return "/"
		}
		sort.Strings(keys)
		return keys[rng.IntN(len(keys))]
	}
	existing := func() string { return existingOf(0) }
	child := func() string { // a new or existing name in an existing directory
		return namespace.JoinPath(existingOf(1), names[rng.IntN(len(names))])
	}
	pick := func() string {
		switch rng.IntN(10) {
		case 0, 1:
			return randPath()
		case 2, 3, 4, 5:
			return child()
		default:
			return existing()
		}
	}
	counts := map[string]int{}
	start := time.Now()
	fails := 0
	for i := range ops {
		node := c.IDs[rng.IntN(len(c.IDs))]
		o := via(c, node)
		var desc, want, got string
		switch r := rng.IntN(100); {
		case r < 20:
			p := pick()
			if rng.IntN(3) > 0 {
				p = child()
			}
			desc, want, got = "create "+p, m.create(p, false), errKind(o.create(p))
		case r < 33:
			p := pick()
			if rng.IntN(3) > 0 {
				p = child()
			}
			desc, want, got = "mkdir "+p, m.create(p, true), errKind(o.mkdir(p, false))
		case r < 53:
			p := pick()
			desc = "stat " + p
			var wantDir bool
			want, wantDir = m.stat(p)
			st, err := o.stat(p)
			got = errKind(err)
			if err == nil && st.IsDir() != wantDir {
				got = fmt.Sprintf("ok but dir=%v", st.IsDir())
			}
		case r < 66:
			s := existing()
			if rng.IntN(5) == 0 {
				s = pick()
			}
			var d string
			switch rng.IntN(5) {
			case 0:
				d = existing()
			case 1:
				d = pick()
			default:
				d = child()
			}
			desc, want, got = "rename "+s+" "+d, m.rename(s, d), errKind(o.rename(s, d))
		case r < 77:
			p := existingOf(2)
			if rng.IntN(3) == 0 {
				p = pick()
			}
			desc, want, got = "unlink "+p, m.remove(p, false), errKind(o.unlink(p))
		case r < 86:
			p := existingOf(1)
			if rng.IntN(3) == 0 {
				p = pick()
			}
			desc, want, got = "rmdir "+p, m.remove(p, true), errKind(o.rmdir(p))
		default:
			p := existing()
			if rng.IntN(4) == 0 {
				p = pick()
			}
			desc = "readdir " + p
			var wantNames []string
			want, wantNames = m.readdir(p)
			gotNames, err := o.names(p)
			got = errKind(err)
			if err == nil && !slices.Equal(gotNames, wantNames) {
				got = fmt.Sprintf("ok %v", gotNames)
				want = fmt.Sprintf("ok %v", wantNames)
			}
		}
		counts[strings.Fields(desc)[0]+" "+want]++
		if got != want {
			fails++
			t.Errorf("op %d via %s: %s: got %s, want %s", i, node, desc, got, want)
			if fails > 10 {
				t.FailNow()
			}
		}
	}
	elapsed := time.Since(start)
	// Every path of the model is found through every node, and every
	// directory lists exactly the model's names.
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, id := range c.IDs {
		o := via(c, id)
		for _, p := range keys {
			st, err := o.stat(p)
			if err != nil || st.IsDir() != m[p] {
				t.Errorf("final stat %s via %s: %v", p, id, err)
			}
			if m[p] {
				got, err := o.names(p)
				if err != nil || !slices.Equal(got, m.children(p)) {
					t.Errorf("final readdir %s via %s: %v, %v; want %v", p, id, got, err, m.children(p))
				}
			}
		}
	}
	c.SettleAll()
	var files int64
	for _, id := range c.IDs {
		s := c.NS(id).Stats()
		files += s.Files + s.Dirs
		t.Logf("%s: files %d dirs %d levels %+v hops %d txns %d aborted %d busy %d rekeyed %d", id, s.Files, s.Dirs, s.Levels, s.Hops, s.TxnsCommitted, s.TxnsAborted, s.TxnsBusy, s.Rekeyed)
	}
	if files != int64(len(m)) {
		t.Errorf("nodes home %d paths, the model has %d", files, len(m))
	}
	t.Logf("%d ops in %v (%.0f ops/s), seed %d, %d paths at the end", ops, elapsed, float64(ops)/elapsed.Seconds(), seed, len(m))
	var kinds []string
	for k, v := range counts {
		kinds = append(kinds, fmt.Sprintf("%s=%d", k, v))
	}
	sort.Strings(kinds)
	t.Logf("outcomes: %s", strings.Join(kinds, " "))
}
