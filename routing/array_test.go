package routing

import (
	"errors"
	"fmt"
	"math/bits"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"
)

// arrayGeometry returns a geometry or fails the test.
func arrayGeometry(tb testing.TB, capacity int, bitsPerFile float64, k int, h HashKind) Geometry {
	tb.Helper()
	g, err := NewGeometry(capacity, bitsPerFile, k, h)
	if err != nil {
		tb.Fatal(err)
	}
	return g
}

// arrayMemberPath is the j-th path homed on member i.
func arrayMemberPath(i, j int) string { return fmt.Sprintf("/m%d/d%d/f%d", i, j%7, j) }

// bruteQuery applies the unique-hit rule by probing every filter separately:
// the reference answer the array must reproduce.
func bruteQuery(filters map[string]*Filter, k Key) (Result, []string) {
	var pos []string
	for id, f := range filters {
		if f.TestKey(k) {
			pos = append(pos, id)
		}
	}
	slices.Sort(pos)
	if len(pos) == 1 {
		return Result{ID: pos[0], Positives: 1}, pos
	}
	return Result{Positives: len(pos)}, pos
}

// checkArray compares every query answer, every column and the membership
// of a with the owners' filters.
func checkArray(t *testing.T, a *FilterArray, owners map[string]*Filter, queries []string) {
	t.Helper()
	if a.Len() != len(owners) {
		t.Fatalf("Len = %d, want %d", a.Len(), len(owners))
	}
	ids := make([]string, 0, len(owners))
	for id := range owners {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	if got := a.IDs(); !slices.Equal(got, ids) {
		t.Fatalf("IDs = %v, want %v", got, ids)
	}
	for _, id := range ids {
		col, err := a.Column(id)
		if err != nil {
			t.Fatal(err)
		}
		if !col.Equal(owners[id]) {
			t.Fatalf("Column(%q) differs from the owner's filter", id)
		}
		if v, ok := a.Version(id); !ok || v != owners[id].Version() || col.Version() != v {
			t.Fatalf("Version(%q) = %d, %v; column %d; want %d", id, v, ok, col.Version(), owners[id].Version())
		}
		if col.Ones() != owners[id].Ones() {
			t.Fatalf("Column(%q).Ones() = %d, want %d", id, col.Ones(), owners[id].Ones())
		}
	}
	var dst []string
	for _, q := range queries {
		k := a.Geometry().Key(q)
		want, wantPos := bruteQuery(owners, k)
		if got := a.Query(q); got != want {
			t.Fatalf("Query(%q) = %+v, want %+v", q, got, want)
		}
		if got := a.QueryKey(k); got != want {
			t.Fatalf("QueryKey(%q) = %+v, want %+v", q, got, want)
		}
		dst = a.Positives(k, dst[:0])
		got := slices.Clone(dst)
		slices.Sort(got)
		if !slices.Equal(got, wantPos) {
			t.Fatalf("Positives(%q) = %v, want %v", q, got, wantPos)
		}
	}
}

func TestArrayResultHit(t *testing.T) {
	for _, c := range []struct {
		r    Result
		want bool
	}{
		{Result{}, false},
		{Result{ID: "a", Positives: 1}, true},
		{Result{Positives: 2}, false},
		{Result{Positives: 100}, false},
	} {
		if got := c.r.Hit(); got != c.want {
			t.Errorf("%+v.Hit() = %v, want %v", c.r, got, c.want)
		}
	}
}

func TestArrayUniqueHitRule(t *testing.T) {
	for _, h := range []HashKind{HashXX, HashMD5} {
		// Large filters holding few paths: no false positives for these
		// paths, so the expected answers are exact.
		g := arrayGeometry(t, 4096, 16, 0, h)
		a := NewFilterArray(g)
		owners := map[string]*Filter{}
		for _, id := range []string{"a", "b", "c"} {
			owners[id] = NewFilter(g)
		}
		owners["a"].Add("/only-a")
		owners["b"].Add("/only-b")
		owners["a"].Add("/a-and-b")
		owners["b"].Add("/a-and-b")
		for _, id := range []string{"a", "b", "c"} {
			owners[id].Add("/everywhere")
			if err := a.Add(id, owners[id]); err != nil {
				t.Fatal(err)
			}
		}
		for _, c := range []struct {
			path string
			want Result
		}{
			{"/nowhere", Result{}},
			{"/only-a", Result{ID: "a", Positives: 1}},
			{"/only-b", Result{ID: "b", Positives: 1}},
			{"/a-and-b", Result{Positives: 2}},
			{"/everywhere", Result{Positives: 3}},
		} {
			t.Run(h.String()+c.path, func(t *testing.T) {
				got := a.Query(c.path)
				if got != c.want {
					t.Fatalf("Query = %+v, want %+v", got, c.want)
				}
				if got.Hit() != (c.want.Positives == 1) {
					t.Fatalf("Hit = %v", got.Hit())
				}
			})
		}
		checkArray(t, a, owners, []string{"/nowhere", "/only-a", "/a-and-b", "/everywhere"})
	}
}

func TestArrayEmpty(t *testing.T) {
	g := arrayGeometry(t, 100, 8, 0, HashXX)
	a := NewFilterArray(g)
	if r := a.Query("/x"); r != (Result{}) {
		t.Fatalf("empty Query = %+v", r)
	}
	if p := a.Positives(g.Key("/x"), nil); len(p) != 0 {
		t.Fatalf("empty Positives = %v", p)
	}
	if a.Len() != 0 || len(a.IDs()) != 0 || a.Has("x") || a.Geometry() != g {
		t.Fatal("empty array reports members")
	}
	if _, ok := a.Version("x"); ok {
		t.Fatal("Version of a missing member")
	}
	// An array whose members all left answers like an empty one.
	f := NewFilter(g)
	f.Add("/x")
	if err := a.Add("m", f); err != nil {
		t.Fatal(err)
	}
	if err := a.Remove("m"); err != nil {
		t.Fatal(err)
	}
	if r := a.Query("/x"); r != (Result{}) {
		t.Fatalf("Query after removing every member = %+v", r)
	}
}

func TestNewFilterArrayInvalidGeometry(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("NewFilterArray accepted an invalid geometry")
		}
	}()
	NewFilterArray(Geometry{M: 100, K: 3, Hash: HashXX})
}

func TestArrayNoFalseNegatives(t *testing.T) {
	for _, c := range []struct {
		name    string
		members int
		files   int
		bits    float64
		hash    HashKind
	}{
		{"xx/p=10/8bits", 10, 500, 8, HashXX},
		{"xx/p=100/8bits", 100, 200, 8, HashXX},
		{"xx/p=150/4bits", 150, 100, 4, HashXX},
		{"xx/p=20/20bits-k14", 20, 300, 20, HashXX}, // k > 8: generic path
		{"md5/p=70/8bits", 70, 200, 8, HashMD5},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := arrayGeometry(t, c.files, c.bits, 0, c.hash)
			a := NewFilterArray(g)
			for i := 0; i < c.members; i++ {
				f := NewFilter(g)
				for j := 0; j < c.files; j++ {
					f.Add(arrayMemberPath(i, j))
				}
				if err := a.Add("m"+strconv.Itoa(i), f); err != nil {
					t.Fatal(err)
				}
			}
			var dst []string
			hits := 0
			for i := 0; i < c.members; i++ {
				id := "m" + strconv.Itoa(i)
				for j := 0; j < c.files; j++ {
					p := arrayMemberPath(i, j)
					r := a.Query(p)
					if r.Positives < 1 || (r.Hit() && r.ID != id) {
						t.Fatalf("Query(%q) = %+v: member %s holds it", p, r, id)
					}
					if r.Hit() {
						hits++
					}
					dst = a.Positives(g.Key(p), dst[:0])
					if !slices.Contains(dst, id) || len(dst) != r.Positives {
						t.Fatalf("Positives(%q) = %v, Query %+v, want %s among them", p, dst, r, id)
					}
				}
			}
			t.Logf("unique hits for member paths: %.1f%%", 100*float64(hits)/float64(c.members*c.files))
		})
	}
}

func TestArrayErrors(t *testing.T) {
	g := arrayGeometry(t, 1000, 8, 0, HashXX)
	other := arrayGeometry(t, 2000, 8, 0, HashXX)
	otherK := Geometry{M: g.M, K: g.K + 1, Hash: HashXX}
	otherHash := Geometry{M: g.M, K: g.K, Hash: HashMD5}

	owner := NewFilter(g)
	owner.Add("/a")
	owner.Mark()
	owner.Add("/b")
	stale := owner.AppendDelta(nil) // base 1 -> 2
	owner.Mark()
	owner.Add("/c")
	fresh := owner.AppendDelta(nil) // base 2 -> 3
	full := owner.AppendBinary(nil)

	foreign := NewFilter(other)
	foreign.Add("/a")
	foreignDelta := foreign.AppendDelta(nil)
	foreignFull := foreign.AppendBinary(nil)

	newArray := func(t *testing.T) *FilterArray {
		a := NewFilterArray(g)
		base := owner.Clone()
		base.version = 2
		if err := a.Add("m", NewFilter(g)); err != nil {
			t.Fatal(err)
		}
		if err := a.Add("n", base); err != nil {
			t.Fatal(err)
		}
		return a
	}
	corrupt := slices.Clone(full)
	corrupt[len(corrupt)/2] ^= 1

	for _, c := range []struct {
		name string
		op   func(a *FilterArray) error
		want error
	}{
		{"add duplicate", func(a *FilterArray) error { return a.Add("m", NewFilter(g)) }, ErrDuplicateMember},
		{"add other size", func(a *FilterArray) error { return a.Add("x", NewFilter(other)) }, ErrGeometryMismatch},
		{"add other k", func(a *FilterArray) error { return a.Add("x", NewFilter(otherK)) }, ErrGeometryMismatch},
		{"add other hash", func(a *FilterArray) error { return a.Add("x", NewFilter(otherHash)) }, ErrGeometryMismatch},
		{"replace unknown", func(a *FilterArray) error { return a.Replace("x", NewFilter(g)) }, ErrUnknownMember},
		{"replace other geometry", func(a *FilterArray) error { return a.Replace("m", NewFilter(other)) }, ErrGeometryMismatch},
		{"replace encoded unknown", func(a *FilterArray) error { return a.ReplaceEncoded("x", full) }, ErrUnknownMember},
		{"replace encoded corrupt", func(a *FilterArray) error { return a.ReplaceEncoded("m", corrupt) }, ErrCorrupt},
		{"replace encoded truncated", func(a *FilterArray) error { return a.ReplaceEncoded("m", full[:10]) }, ErrCorrupt},
		{"replace encoded delta", func(a *FilterArray) error { return a.ReplaceEncoded("m", fresh) }, ErrCorrupt},
		{"replace encoded other geometry", func(a *FilterArray) error { return a.ReplaceEncoded("m", foreignFull) }, ErrGeometryMismatch},
		{"delta unknown", func(a *FilterArray) error { return a.ApplyDelta("x", fresh) }, ErrUnknownMember},
		{"delta corrupt", func(a *FilterArray) error { return a.ApplyDelta("n", fresh[:len(fresh)-1]) }, ErrCorrupt},
		{"delta full encoding", func(a *FilterArray) error { return a.ApplyDelta("n", full) }, ErrCorrupt},
		{"delta stale", func(a *FilterArray) error { return a.ApplyDelta("n", stale) }, ErrVersionMismatch},
		{"delta onto version 0", func(a *FilterArray) error { return a.ApplyDelta("m", fresh) }, ErrVersionMismatch},
		{"delta other geometry", func(a *FilterArray) error { return a.ApplyDelta("m", foreignDelta) }, ErrGeometryMismatch},
		{"apply unknown", func(a *FilterArray) error { return a.Apply("x", &Delta{Geometry: g}) }, ErrUnknownMember},
		{"apply index out of range", func(a *FilterArray) error {
			return a.Apply("m", &Delta{Geometry: g, Next: 1, Index: []uint64{uint64(g.Words())}, Words: []uint64{1}})
		}, ErrCorrupt},
		{"apply ragged", func(a *FilterArray) error {
			return a.Apply("m", &Delta{Geometry: g, Next: 1, Index: []uint64{0}})
		}, ErrCorrupt},
		{"remove unknown", func(a *FilterArray) error { return a.Remove("x") }, ErrUnknownMember},
		{"column unknown", func(a *FilterArray) error { _, err := a.Column("x"); return err }, ErrUnknownMember},
	} {
		t.Run(c.name, func(t *testing.T) {
			a := newArray(t)
			before := map[string]*Filter{}
			for _, id := range a.IDs() {
				before[id], _ = a.Column(id)
			}
			err := c.op(a)
			if !errors.Is(err, c.want) {
				t.Fatalf("error %v, want %v", err, c.want)
			}
			// A failed operation changes nothing.
			checkArray(t, a, before, []string{"/a", "/b", "/c", "/d"})
		})
	}
}

func TestArrayReplication(t *testing.T) {
	for _, h := range []HashKind{HashXX, HashMD5} {
		t.Run(h.String(), func(t *testing.T) {
			g := arrayGeometry(t, 2000, 8, 0, h)
			rng := rand.New(rand.NewPCG(7, uint64(h)))
			owners := map[string]*Filter{}
			a := NewFilterArray(g)
			for i := 0; i < 5; i++ {
				id := "o" + strconv.Itoa(i)
				f := NewFilter(g)
				for j := 0; j < 300; j++ {
					f.Add(arrayMemberPath(i, j))
				}
				f.Mark()
				owners[id] = f
				if err := a.Add(id, f); err != nil {
					t.Fatal(err)
				}
			}
			queries := make([]string, 0, 400)
			for j := 0; j < 400; j++ {
				queries = append(queries, arrayMemberPath(rng.IntN(6), rng.IntN(800)))
			}
			checkArray(t, a, owners, queries)
			for round := 0; round < 6; round++ {
				for id, f := range owners {
					// The owner changes: adds, and (as a counting filter's
					// plain view would) clears some bits.
					for j := 0; j < 50; j++ {
						f.Add(fmt.Sprintf("/%s/new%d-%d", id, round, j))
					}
					for j := 0; j < 20; j++ {
						f.clearBit(rng.Uint64N(g.M))
					}
					var err error
					if round%3 == 2 {
						f.Mark()
						err = a.ReplaceEncoded(id, f.AppendBinary(nil))
					} else {
						err = a.ApplyDelta(id, f.MarkDelta(nil))
					}
					if err != nil {
						t.Fatal(err)
					}
				}
				checkArray(t, a, owners, queries)
			}
			// Replaying an old delta is refused.
			f := owners["o0"]
			f.Add("/late")
			d := f.MarkDelta(nil)
			if err := a.ApplyDelta("o0", d); err != nil {
				t.Fatal(err)
			}
			if err := a.ApplyDelta("o0", d); !errors.Is(err, ErrVersionMismatch) {
				t.Fatalf("replayed delta: %v, want ErrVersionMismatch", err)
			}
			checkArray(t, a, owners, queries)
		})
	}
}

func TestArraySlotReuse(t *testing.T) {
	g := arrayGeometry(t, 500, 10, 0, HashXX)
	a := NewFilterArray(g)
	owners := map[string]*Filter{}
	add := func(id string, seed int) {
		t.Helper()
		f := NewFilter(g)
		for j := 0; j < 200; j++ {
			f.Add(arrayMemberPath(seed, j))
		}
		owners[id] = f
		if err := a.Add(id, f); err != nil {
			t.Fatal(err)
		}
	}
	for i, id := range []string{"a", "b", "c"} {
		add(id, i)
	}
	size := a.SizeBytes()
	slotB := a.slot["b"]
	if err := a.Remove("b"); err != nil {
		t.Fatal(err)
	}
	delete(owners, "b")
	if a.Has("b") {
		t.Fatal("Has(b) after Remove")
	}
	if err := a.Remove("b"); !errors.Is(err, ErrUnknownMember) {
		t.Fatalf("second Remove: %v", err)
	}
	queries := []string{}
	for j := 0; j < 200; j++ {
		queries = append(queries, arrayMemberPath(1, j), arrayMemberPath(3, j))
	}
	// b's paths no longer hit b (its column is cleared).
	for _, q := range queries[:20] {
		if r := a.Query(q); r.ID == "b" {
			t.Fatalf("Query(%q) = %+v after removing b", q, r)
		}
	}
	checkArray(t, a, owners, queries)
	add("d", 3)
	if got := a.slot["d"]; got != slotB {
		t.Fatalf("d got slot %d, want b's freed slot %d", got, slotB)
	}
	if a.SizeBytes() != size {
		t.Fatalf("SizeBytes %d after reuse, want %d", a.SizeBytes(), size)
	}
	checkArray(t, a, owners, queries)
	// The same id can come back.
	add("b", 1)
	checkArray(t, a, owners, queries)
}

func TestArrayGrowth(t *testing.T) {
	g := arrayGeometry(t, 100, 8, 0, HashXX)
	a := NewFilterArray(g)
	owners := map[string]*Filter{}
	var queries []string
	for i := 0; i < 300; i++ {
		queries = append(queries, arrayMemberPath(i, i%40), arrayMemberPath(i+1000, 0))
	}
	wantWidth := map[int]uint64{1: 1, 2: 2, 3: 4, 5: 8, 9: 16, 17: 32, 33: 64, 64: 64, 65: 128, 128: 128, 129: 256, 256: 256, 257: 512}
	for i := 1; i <= 260; i++ {
		f := NewFilter(g)
		for j := 0; j < 40; j++ {
			f.Add(arrayMemberPath(i, j))
		}
		id := fmt.Sprintf("m%03d", i)
		owners[id] = f
		if err := a.Add(id, f); err != nil {
			t.Fatal(err)
		}
		if w, ok := wantWidth[i]; ok {
			if a.width != w {
				t.Fatalf("%d members: width %d, want %d", i, a.width, w)
			}
			checkArray(t, a, owners, queries)
		}
	}
	if got, want := a.SizeBytes(), int(g.M)*8*8; got < want {
		t.Fatalf("SizeBytes = %d, want at least %d", got, want)
	}
	// Remove across word boundaries and refill.
	for _, i := range []int{1, 64, 65, 128, 129, 200, 260} {
		id := fmt.Sprintf("m%03d", i)
		if err := a.Remove(id); err != nil {
			t.Fatal(err)
		}
		delete(owners, id)
	}
	checkArray(t, a, owners, queries)
}

// TestArrayRandomOps is a property test: after any sequence of adds,
// removes, replaces and deltas, every answer equals probing each member's
// filter separately, and every column equals its owner's filter.
func TestArrayRandomOps(t *testing.T) {
	for _, c := range []struct {
		name string
		g    Geometry
	}{
		{"xx/k3", Geometry{M: 512, K: 3, Hash: HashXX}},
		{"xx/k7", Geometry{M: 1024, K: 7, Hash: HashXX}},
		{"xx/k12", Geometry{M: 1024, K: 12, Hash: HashXX}},
		{"md5/k4", Geometry{M: 640, K: 4, Hash: HashMD5}},
	} {
		t.Run(c.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(42, uint64(c.g.K)))
			a := NewFilterArray(c.g)
			owners := map[string]*Filter{}
			queries := make([]string, 300)
			for i := range queries {
				queries[i] = "/q/" + strconv.Itoa(i)
			}
			randomFilter := func() *Filter {
				f := NewFilter(c.g)
				for j, n := 0, rng.IntN(120); j < n; j++ {
					f.Add(queries[rng.IntN(len(queries))])
				}
				f.version = rng.Uint64N(10)
				return f
			}
			pick := func() string {
				ids := a.IDs()
				return ids[rng.IntN(len(ids))]
			}
			for step := 0; step < 600; step++ {
				switch op := rng.IntN(10); {
				case op < 4 || a.Len() == 0:
					id := "n" + strconv.Itoa(rng.IntN(200))
					f := randomFilter()
					err := a.Add(id, f)
					if _, dup := owners[id]; dup {
						if !errors.Is(err, ErrDuplicateMember) {
							t.Fatalf("duplicate Add: %v", err)
						}
						continue
					}
					if err != nil {
						t.Fatal(err)
					}
					owners[id] = f
				case op < 6:
					id := pick()
					if err := a.Remove(id); err != nil {
						t.Fatal(err)
					}
					delete(owners, id)
				case op < 7:
					id := pick()
					f := randomFilter()
					if err := a.Replace(id, f); err != nil {
						t.Fatal(err)
					}
					owners[id] = f
				case op < 8:
					id := pick()
					f := randomFilter()
					if err := a.ReplaceEncoded(id, f.AppendBinary(nil)); err != nil {
						t.Fatal(err)
					}
					owners[id] = f
				default:
					id := pick()
					f := owners[id]
					for j, n := 0, rng.IntN(20); j < n; j++ {
						if rng.IntN(2) == 0 {
							f.Add(queries[rng.IntN(len(queries))])
						} else {
							f.clearBit(rng.Uint64N(c.g.M))
						}
					}
					if err := a.ApplyDelta(id, f.MarkDelta(nil)); err != nil {
						t.Fatal(err)
					}
				}
				if step%25 == 0 || a.Len() > 120 {
					checkArray(t, a, owners, queries)
				}
			}
			checkArray(t, a, owners, queries)
		})
	}
}

func TestArrayAddCopies(t *testing.T) {
	g := arrayGeometry(t, 100, 8, 0, HashXX)
	a := NewFilterArray(g)
	f := NewFilter(g)
	f.Add("/x")
	if err := a.Add("m", f); err != nil {
		t.Fatal(err)
	}
	f.Add("/y") // later changes to the owner's filter do not leak in
	if r := a.Query("/y"); r.Positives != 0 {
		t.Fatalf("Query(/y) = %+v before any update", r)
	}
}

func TestArrayQueryAllocs(t *testing.T) {
	for _, c := range []struct {
		name    string
		members int
		bits    float64
		hash    HashKind
	}{
		{"narrow", 10, 8, HashXX},
		{"stride1", 50, 8, HashXX},
		{"stride2", 100, 8, HashXX},
		{"stride4", 200, 8, HashXX},
		{"k14", 100, 20, HashXX},
		{"md5", 100, 8, HashMD5},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := arrayGeometry(t, 50, c.bits, 0, c.hash)
			a := NewFilterArray(g)
			for i := 0; i < c.members; i++ {
				f := NewFilter(g)
				f.Add(arrayMemberPath(i, 0))
				if err := a.Add("m"+strconv.Itoa(i), f); err != nil {
					t.Fatal(err)
				}
			}
			p := arrayMemberPath(c.members/2, 0)
			k := g.Key(p)
			var r Result
			if n := testing.AllocsPerRun(100, func() { r = a.Query(p) }); n != 0 {
				t.Errorf("Query: %v allocs", n)
			}
			if n := testing.AllocsPerRun(100, func() { r = a.QueryKey(k) }); n != 0 {
				t.Errorf("QueryKey: %v allocs", n)
			}
			dst := make([]string, 0, c.members)
			if n := testing.AllocsPerRun(100, func() { dst = a.Positives(k, dst[:0]) }); n != 0 {
				t.Errorf("Positives with capacity: %v allocs", n)
			}
			if r.Positives < 1 {
				t.Fatalf("member path: %+v", r)
			}
		})
	}
}

// ---- benchmarks ----

// arrayFixture is a benchmark fixture: p member filters of n files each (8
// bits per file), the array of them, and a query set alternating paths in
// no filter and paths in exactly one.
type arrayFixture struct {
	g       Geometry
	filters []*Filter
	array   *FilterArray
	queries []string
}

// arrayFixtures holds the fixtures built so far. They are built lazily, on
// the first benchmark that needs one, and kept for the whole process:
// building the 1M-file one (100 filters of 1M files) takes seconds, and
// plain `go test` never builds any.
var arrayFixtures struct {
	sync.Mutex
	m map[int]*arrayFixture
}

// benchFilePath appends the j-th path of member i to buf[:0].
func benchFilePath(buf []byte, i, j int) []byte {
	buf = append(buf[:0], "/srv"...)
	buf = strconv.AppendInt(buf, int64(i), 10)
	buf = append(buf, "/dir"...)
	buf = strconv.AppendInt(buf, int64(j/1000), 10)
	buf = append(buf, "/file"...)
	return strconv.AppendInt(buf, int64(j), 10)
}

// arrayBenchFixture returns the fixture of 100 filters of files files each.
// Queries repeat after nq (a power of two); nq is large for large arrays so
// that the cache does not hold the lines the queries touch.
func arrayBenchFixture(b *testing.B, files int) *arrayFixture {
	b.Helper()
	const p = 100
	arrayFixtures.Lock()
	defer arrayFixtures.Unlock()
	if fx := arrayFixtures.m[files]; fx != nil {
		return fx
	}
	g := arrayGeometry(b, files, 8, 0, HashXX)
	fx := &arrayFixture{g: g, array: NewFilterArray(g)}
	var buf []byte
	for i := 0; i < p; i++ {
		f := NewFilter(g)
		for j := 0; j < files; j++ {
			buf = benchFilePath(buf, i, j)
			f.AddKey(HashBytes(g.Hash, buf))
		}
		fx.filters = append(fx.filters, f)
		if err := fx.array.Add("srv"+strconv.Itoa(i), f); err != nil {
			b.Fatal(err)
		}
	}
	nq := 1 << 12
	if files > 100_000 {
		nq = 1 << 18
	}
	for q := 0; q < nq; q++ {
		if q%2 == 0 {
			buf = benchFilePath(buf, p+q, q) // in no filter
		} else {
			buf = benchFilePath(buf, q%p, (q*7919)%files) // in exactly one
		}
		fx.queries = append(fx.queries, string(buf))
	}
	if arrayFixtures.m == nil {
		arrayFixtures.m = map[int]*arrayFixture{}
	}
	arrayFixtures.m[files] = fx
	return fx
}

var arrayBenchSizes = []struct {
	name  string
	files int
}{{"files=10K", 10_000}, {"files=1M", 1_000_000}}

// BenchmarkArrayQuery measures Query (hashing included) against 100 filters
// at 8 bits per file, alternating paths in no filter and in exactly one.
// It also reports the share of queries with a unique hit (true or false)
// and the array's bytes per file.
func BenchmarkArrayQuery(b *testing.B) {
	for _, c := range arrayBenchSizes {
		b.Run("filters=100/"+c.name, func(b *testing.B) {
			fx := arrayBenchFixture(b, c.files)
			b.ReportAllocs()
			hits := 0
			for i := 0; b.Loop(); i++ {
				if fx.array.Query(fx.queries[i&(len(fx.queries)-1)]).Hit() {
					hits++
				}
			}
			b.ReportMetric(100*float64(hits)/float64(b.N), "%unique")
			b.ReportMetric(float64(fx.array.SizeBytes())/float64(100*c.files), "B/file")
		})
	}
}

// BenchmarkArrayQueryBaseline is the cost the array replaces: probing the
// 100 filters one by one (separate-filters: Filter.Test, hashing each time;
// separate-filters-hash-once: one hash, 100 TestKey calls).
func BenchmarkArrayQueryBaseline(b *testing.B) {
	for _, c := range arrayBenchSizes {
		b.Run("separate-filters/"+c.name, func(b *testing.B) {
			fx := arrayBenchFixture(b, c.files)
			b.ReportAllocs()
			hits := 0
			for i := 0; b.Loop(); i++ {
				q := fx.queries[i&(len(fx.queries)-1)]
				n := 0
				for _, f := range fx.filters {
					if f.Test(q) {
						n++
					}
				}
				if n == 1 {
					hits++
				}
			}
		})
		b.Run("separate-filters-hash-once/"+c.name, func(b *testing.B) {
			fx := arrayBenchFixture(b, c.files)
			b.ReportAllocs()
			hits := 0
			for i := 0; b.Loop(); i++ {
				k := fx.g.Key(fx.queries[i&(len(fx.queries)-1)])
				n := 0
				for _, f := range fx.filters {
					if f.TestKey(k) {
						n++
					}
				}
				if n == 1 {
					hits++
				}
			}
		})
	}
}

// queryBlockedCost has the memory access pattern of a blocked index (all k
// positions of a key inside one block of B consecutive positions, B·16 bytes
// of slices at 100 members) on the array's slices. Its answers are
// meaningless (the filters were not built with that index): it measures
// only what blocking would save (see FilterArray and
// BenchmarkArrayQueryPaired).
// B = 0 is the standard index, with the same code shape for a fair
// comparison.
func queryBlockedCost(a *FilterArray, k Key, B uint64) int {
	bs, m := a.bits, a.geo.M
	var off [8]uint64
	n := int(a.geo.K)
	if B == 0 {
		h := k.h1
		for i := range off[:n] {
			p, _ := bits.Mul64(h, m)
			off[i] = p * 2
			h += k.h2
		}
	} else {
		blk, _ := bits.Mul64(k.h1, m/B)
		base, h, step := blk*B, k.h2, k.h2>>32|1
		for i := range off[:n] {
			off[i] = (base + h&(B-1)) * 2
			h += step
		}
	}
	acc0, acc1 := ^uint64(0), ^uint64(0)
	for _, p := range off[:n] {
		w := (*[2]uint64)(bs[p:])
		acc0 &= w[0]
		acc1 &= w[1]
	}
	return bits.OnesCount64(acc0) + bits.OnesCount64(acc1)
}

// BenchmarkArrayQueryPaired measures alternatives side by side: each
// iteration runs a chunk of queries through every variant in turn and times
// each chunk, so load changes on a shared machine hit all variants alike
// and their ratios stay meaningful (ns/op is one round; read the per-variant
// ns/query metrics). Variants, all from the path string:
//
//   - array: Query (the layout in use);
//   - standard: the same memory accesses as array, in the code shape of the
//     blocked variants (count only), for a like-for-like comparison;
//   - blocked64, blocked256, blocked512: the memory access pattern of a
//     blocked index (k positions within 64, 256 or 512 positions: 1, 4 or 8
//     KiB of slices; see queryBlockedCost), rejected for the reasons in the
//     FilterArray comment;
//   - array-latency, standard-latency, blocked512-latency: each query chosen from the previous
//     answer, so queries cannot overlap;
//   - separate: Filter.Test on each of the 100 filters (the baseline the
//     array replaces); separate-hash-once: one hash, 100 TestKey calls.
func BenchmarkArrayQueryPaired(b *testing.B) {
	for _, c := range arrayBenchSizes {
		b.Run("filters=100/"+c.name, func(b *testing.B) {
			fx := arrayBenchFixture(b, c.files)
			a, qs := fx.array, fx.queries
			mask := len(qs) - 1
			blocked := func(B uint64) func(string) int {
				return func(q string) int { return queryBlockedCost(a, HashPath(a.geo.Hash, q), B) }
			}
			variants := []struct {
				name    string
				chunk   int
				latency bool
				q       func(string) int
			}{
				{"array", 512, false, func(q string) int { return a.Query(q).Positives }},
				{"standard", 512, false, blocked(0)},
				{"blocked64", 512, false, blocked(64)},
				{"blocked256", 512, false, blocked(256)},
				{"blocked512", 512, false, blocked(512)},
				{"array-latency", 512, true, func(q string) int { return a.Query(q).Positives }},
				{"standard-latency", 512, true, blocked(0)},
				{"blocked512-latency", 512, true, blocked(512)},
				{"separate", 8, false, func(q string) int {
					n := 0
					for _, f := range fx.filters {
						if f.Test(q) {
							n++
						}
					}
					return n
				}},
				{"separate-hash-once", 8, false, func(q string) int {
					k, n := fx.g.Key(q), 0
					for _, f := range fx.filters {
						if f.TestKey(k) {
							n++
						}
					}
					return n
				}},
			}
			elapsed := make([]time.Duration, len(variants))
			cursor := make([]int, len(variants))
			for v := range cursor {
				cursor[v] = v * len(qs) / len(variants) // disjoint cache footprints
			}
			sink := 0
			for b.Loop() {
				for v, vr := range variants {
					i, j := cursor[v], 0
					start := time.Now()
					for n := 0; n < vr.chunk; n++ {
						r := vr.q(qs[(i+j)&mask])
						if vr.latency {
							j += r & 1 // next query depends on this answer
						}
						sink += r
						i++
					}
					elapsed[v] += time.Since(start)
					cursor[v] = i + j
				}
			}
			for v, vr := range variants {
				b.ReportMetric(float64(elapsed[v].Nanoseconds())/float64(b.N*vr.chunk), vr.name+"-ns/query")
			}
			if sink == -1 {
				b.Log(sink)
			}
		})
	}
}

// TestArrayNarrowMemory: a few members cost a few bits per position (a
// G-HBA segment of 3 replicas takes 4 bits, not 64), and answers stay
// exact while the array widens past 64 members and shrinks back by
// removal.
func TestArrayNarrowMemory(t *testing.T) {
	g := arrayGeometry(t, 1000, 8, 0, HashXX)
	for _, c := range []struct {
		members int
		bits    uint64
	}{{1, 1}, {2, 2}, {3, 4}, {8, 8}, {12, 16}, {64, 64}, {65, 128}} {
		a := NewFilterArray(g)
		owners := map[string]*Filter{}
		var queries []string
		for i := range c.members {
			f := NewFilter(g)
			for j := range 50 {
				f.Add(arrayMemberPath(i, j))
				queries = append(queries, arrayMemberPath(i, j))
			}
			id := fmt.Sprintf("m%02d", i)
			owners[id] = f
			if err := a.Add(id, f); err != nil {
				t.Fatal(err)
			}
		}
		if got, want := len(a.bits)*64, int(g.M*c.bits); got != want {
			t.Errorf("%d members: %d bits of slices, want %d", c.members, got, want)
		}
		checkArray(t, a, owners, queries)
	}
}

// TestArrayBytes checks that ArrayBytes is the memory of the bits an array
// of n members really holds, and that ArrayMembers is the largest n within
// a budget.
func TestArrayBytes(t *testing.T) {
	g := arrayGeometry(t, 1000, 8, 0, HashXX)
	a := NewFilterArray(g)
	for n := 1; n <= 200; n++ {
		if err := a.Add(strconv.Itoa(n), NewFilter(g)); err != nil {
			t.Fatal(err)
		}
		if got, want := ArrayBytes(g, n), int64(len(a.bits)*8); got != want {
			t.Fatalf("ArrayBytes(%d) = %d, the array holds %d bytes of bits", n, got, want)
		}
	}
	one := ArrayBytes(g, 1)
	tests := []struct {
		budget int64
		limit  int
		want   int
	}{
		{0, 100, 0},
		{one - 1, 100, 0},
		{one, 100, 1},
		{2 * one, 100, 2},
		{3 * one, 100, 2}, // 3 members take 4 bits per position
		{4 * one, 100, 4},
		{64 * one, 100, 64},
		{65 * one, 100, 64}, // 65 members take 128 bits per position
		{1 << 40, 100, 100}, // the limit
		{1 << 40, 0, 0},
	}
	for _, tc := range tests {
		if got := ArrayMembers(g, tc.budget, tc.limit); got != tc.want {
			t.Errorf("ArrayMembers(budget %d, limit %d) = %d, want %d", tc.budget, tc.limit, got, tc.want)
		}
	}
}
