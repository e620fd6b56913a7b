package nexus

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

func mustGraph[K comparable](t testing.TB, cfg Config) *Graph[K] {
	t.Helper()
	g, err := New[K](cfg)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func accessAll(g *Graph[string], seq string) {
	for _, c := range seq {
		g.Access(string(c))
	}
}

// TestPaperExample is the worked example of §4.2–4.3: ABCADCBA with linear
// decremental weights (10 for the immediate successor, 9 for the next,
// §4.5.1). Table 2: after the final A, window 2 predicts {C} with group 1
// and {C, D} with group 2; window 3 predicts {B} and {B, C}. The edge
// weights are those of Fig. 7 worked out from §4.5.1 (the figure's numbers
// are not in the paper's text): with window 3, A→B and A→C both weigh 18
// and B wins as the more recently reinforced edge.
func TestPaperExample(t *testing.T) {
	tests := []struct {
		window int
		p1, p2 []string
		edges  map[string]uint32 // "AB" = weight of A→B; absent edges must not exist
	}{
		{2, []string{"C"}, []string{"C", "D"}, map[string]uint32{
			"AB": 10, "AC": 18, "AD": 10,
			"BC": 10, "BA": 19,
			"CA": 19, "CD": 9, "CB": 10,
			"DC": 10, "DB": 9,
		}},
		{3, []string{"B"}, []string{"B", "C"}, map[string]uint32{
			"AB": 18, "AC": 18, "AD": 10,
			"BC": 10, "BA": 19, "BD": 8,
			"CA": 19, "CD": 9, "CB": 10,
			"DC": 10, "DB": 9, "DA": 8,
		}},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("window%d", tc.window), func(t *testing.T) {
			g := mustGraph[string](t, Config{Window: tc.window})
			accessAll(g, "ABCADCBA")
			if got := g.Successors("A", 1); !slices.Equal(got, tc.p1) {
				t.Errorf("group 1 after A: %v, want %v (Table 2)", got, tc.p1)
			}
			if got := g.Successors("A", 2); !slices.Equal(got, tc.p2) {
				t.Errorf("group 2 after A: %v, want %v (Table 2)", got, tc.p2)
			}
			for _, from := range "ABCD" {
				for _, to := range "ABCD" {
					key := string(from) + string(to)
					want, exists := tc.edges[key]
					w, ok := g.Weight(string(from), string(to))
					if ok != exists || w != want {
						t.Errorf("edge %c→%c: weight %d (exists %v), want %d (exists %v)", from, to, w, ok, want, exists)
					}
				}
			}
			if s := g.Stats(); s.Vertices != 4 || s.Edges != len(tc.edges) || s.Accesses != 8 {
				t.Errorf("stats %+v", s)
			}
		})
	}
}

func TestAssignmentWeights(t *testing.T) {
	tests := []struct {
		a      Assignment
		window int
		want   []uint32 // distances 1, 2, …
	}{
		{Linear, 5, []uint32{10, 9, 8, 7, 6}},
		{Linear, 12, []uint32{12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1}},
		{Identical, 5, []uint32{10, 10, 10, 10, 10}},
		{Polynomial, 5, []uint32{1024, 256, 114, 64, 41}},
		{Exponential, 7, []uint32{1024, 256, 64, 16, 4, 1, 1}},
	}
	for _, tc := range tests {
		var got []uint32
		for d := 1; d <= tc.window; d++ {
			got = append(got, tc.a.Weight(d, tc.window))
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%v window %d: %v, want %v", tc.a, tc.window, got, tc.want)
		}
		// Decremental assignments never increase with distance.
		for i := 1; i < len(got); i++ {
			if got[i] > got[i-1] {
				t.Errorf("%v increases at distance %d", tc.a, i+1)
			}
		}
	}
	for _, a := range Assignments() {
		b, err := ParseAssignment(strings.ToUpper(a.String()))
		if err != nil || b != a {
			t.Errorf("ParseAssignment(%q) = %v, %v", a, b, err)
		}
	}
	if a, err := ParseAssignment("decremental"); err != nil || a != Linear {
		t.Errorf("decremental: %v, %v", a, err)
	}
	if _, err := ParseAssignment("cubic"); !errors.Is(err, ErrConfig) {
		t.Errorf("cubic: %v", err)
	}
}

func TestConfig(t *testing.T) {
	g := mustGraph[int](t, Config{})
	if c := g.Config(); c.Window != DefaultWindow || c.Assignment != Linear || c.MaxVertices != DefaultMaxVertices ||
		c.MaxOutEdges != DefaultMaxOutEdges || c.MaxWeight != 1<<32-1 {
		t.Errorf("defaults: %+v", c)
	}
	for name, cfg := range map[string]Config{
		"window":      {Window: -1},
		"huge window": {Window: MaxWindow + 1},
		"vertices":    {MaxVertices: -3},
		"edges":       {MaxOutEdges: -1},
		"weight":      {MaxWeight: 20, MaxOutEdges: 16}, // below 16 + 10
		"assignment":  {Assignment: Assignment(9)},
	} {
		if _, err := New[int](cfg); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: %v, want ErrConfig", name, err)
		}
	}
}

// TestTiesAndGroups: the group is the k strongest successors, strongest
// first; equal weights go to the most recently reinforced edge; self-edges
// never exist.
func TestTiesAndGroups(t *testing.T) {
	tests := []struct {
		name   string
		cfg    Config
		seq    string
		of     string
		n      int
		want   []string
		noEdge string
	}{
		{"immediate successor only", Config{Window: 1}, "ABACAB", "A", 3, []string{"B", "C"}, "AA"},
		{"tie to most recent", Config{Window: 1}, "ABAC", "A", 2, []string{"C", "B"}, ""},
		{"identical counts every distance", Config{Window: 3, Assignment: Identical}, "ABCDABCE", "A", 4, []string{"C", "B", "E", "D"}, ""},
		{"repeat in window adds twice", Config{Window: 3}, "AAAB", "A", 1, []string{"B"}, "AA"},
		{"group larger than out-degree", Config{}, "AB", "A", 5, []string{"B"}, ""},
		{"unknown key", Config{}, "AB", "Z", 2, nil, ""},
		{"zero group", Config{}, "AB", "A", 0, nil, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g := mustGraph[string](t, tc.cfg)
			accessAll(g, tc.seq)
			if got := g.Successors(tc.of, tc.n); !slices.Equal(got, tc.want) {
				t.Errorf("Successors(%s, %d) = %v, want %v (edges %v)", tc.of, tc.n, got, tc.want, g.Edges(tc.of))
			}
			if tc.noEdge != "" {
				if _, ok := g.Weight(tc.noEdge[:1], tc.noEdge[1:]); ok {
					t.Errorf("edge %s exists", tc.noEdge)
				}
			}
		})
	}
	// AAAB with window 3: A→B gains 10 + 9 + 8 (A at distances 1, 2, 3).
	g := mustGraph[string](t, Config{Window: 3})
	accessAll(g, "AAAB")
	if w, _ := g.Weight("A", "B"); w != 27 {
		t.Errorf("A→B after AAAB = %d, want 27", w)
	}
}

// TestRenormalizeFig11: when an addition would overflow, the vertex's
// out-edges are renumbered 0…N−1 in order (Fig. 11: E1 > E2 > E5 > E3 > E4
// keeps its order).
func TestRenormalizeFig11(t *testing.T) {
	g := mustGraph[string](t, Config{Window: 1, Assignment: Identical, MaxWeight: 100})
	// Out-edges of X with weights E1=90, E2=70, E5=50, E3=30, E4=20 (identical
	// weight 10 per X→Ei pair).
	for _, e := range []struct {
		to string
		n  int
	}{{"E1", 9}, {"E2", 7}, {"E3", 3}, {"E4", 2}, {"E5", 5}} {
		for i := 0; i < e.n; i++ {
			g.Access("X")
			g.Access(e.to)
		}
	}
	want := []string{"E1", "E2", "E5", "E3", "E4"}
	if got := g.Successors("X", 5); !slices.Equal(got, want) {
		t.Fatalf("before: %v, want %v", got, want)
	}
	// E1 reaches 100, then the next addition overflows: renormalize.
	g.Access("X")
	g.Access("E1")
	if s := g.Stats(); s.Renormalizations != 0 {
		t.Fatalf("renormalized at 100 = MaxWeight")
	}
	g.Access("X")
	g.Access("E1")
	if s := g.Stats(); s.Renormalizations != 1 {
		t.Fatalf("%d renormalizations, want 1", s.Renormalizations)
	}
	es := g.Edges("X")
	for i, e := range es {
		if e.To != want[i] || e.Weight != uint32(len(es)-1-i) {
			t.Errorf("after: edge %d = %+v, want %s with weight %d", i, e, want[i], len(es)-1-i)
		}
	}
	// As Fig. 11 warns, one addition now reorders: E5 (2) + 10 passes E1.
	g.Access("X")
	g.Access("E5")
	if got := g.Successors("X", 1); !slices.Equal(got, []string{"E5"}) {
		t.Errorf("after reinforcing E5: %v", got)
	}
}

// refEdge is an edge of the reference model: unbounded weight and the
// access that last reinforced it.
type refEdge struct{ w, seq uint64 }

func refOrder(m map[int]refEdge) []int {
	var ks []int
	for k := range m {
		ks = append(ks, k)
	}
	slices.SortFunc(ks, func(a, b int) int {
		x, y := m[a], m[b]
		switch {
		case x.w != y.w:
			if x.w > y.w {
				return -1
			}
			return 1
		case x.seq != y.seq:
			if x.seq > y.seq {
				return -1
			}
			return 1
		}
		return 0
	})
	return ks
}

// TestRenormalizationKeepsOrder is a property test: on random sequences with
// a small MaxWeight (frequent renormalization), after every access the
// order of every vertex's out-edges equals the order that applying the same
// access with unbounded weights to the graph's previous state gives; and no
// weight exceeds MaxWeight.
func TestRenormalizationKeepsOrder(t *testing.T) {
	const alphabet = 8
	var renorms uint64
	for trial := 0; trial < 36; trial++ {
		rng := rand.New(rand.NewPCG(uint64(trial), 7))
		cfg := Config{
			Window:      1 + trial%6,
			Assignment:  Assignments()[trial%4],
			MaxOutEdges: alphabet,
			MaxVertices: alphabet,
		}
		cfg.MaxWeight = uint32(alphabet) + cfg.Assignment.Weight(1, cfg.Window) + uint32(rng.IntN(40))
		g := mustGraph[int](t, cfg)
		for step := 0; step < 1000; step++ {
			// Skewed keys so that some edges grow fast.
			k := rng.IntN(alphabet)
			if rng.IntN(3) == 0 {
				k = rng.IntN(2)
			}
			// Reference: the graph's current state, then the access with
			// unbounded weights.
			ref := make(map[int]map[int]refEdge)
			for key, v := range g.vertices {
				ref[key] = make(map[int]refEdge)
				for _, e := range v.edges {
					ref[key][e.to] = refEdge{uint64(e.w), e.seq}
				}
			}
			L := len(g.window)
			for d := 1; d <= g.n; d++ {
				i := g.window[(g.head-d+L)%L].key
				if i == k {
					continue
				}
				e := ref[i][k]
				e.w += uint64(cfg.Assignment.Weight(d, cfg.Window))
				e.seq = g.seq + 1
				ref[i][k] = e
			}
			g.Access(k)
			for key, m := range ref {
				var got []int
				for _, e := range g.Edges(key) {
					got = append(got, e.To)
					if e.Weight > cfg.MaxWeight {
						t.Fatalf("trial %d step %d: weight %d > %d", trial, step, e.Weight, cfg.MaxWeight)
					}
				}
				if want := refOrder(m); !slices.Equal(got, want) {
					t.Fatalf("trial %d (%+v) step %d: out-edges of %d in order %v, unbounded order %v",
						trial, cfg, step, key, got, want)
				}
			}
		}
		renorms += g.Stats().Renormalizations
	}
	if renorms < 100 {
		t.Errorf("only %d renormalizations: the test does not exercise them", renorms)
	}
}

// TestMemoryCap: 200,000 accesses over 50,000 paths with a cap of 1,000
// vertices and 8 out-edges: the reported size never exceeds the cap, and
// the bookkeeping matches a recount.
func TestMemoryCap(t *testing.T) {
	const (
		paths    = 50_000
		accesses = 200_000
	)
	cfg := Config{MaxVertices: 1000, MaxOutEdges: 8}
	g := mustGraph[string](t, cfg)
	rng := rand.New(rand.NewPCG(1, 2))
	names := make([]string, paths)
	maxLen := 0
	for i := range names {
		names[i] = fmt.Sprintf("/d%d/f%d", i%97, i)
		maxLen = max(maxLen, len(names[i]))
	}
	bound := g.MaxBytes(maxLen)
	prev := 0
	for i := 0; i < accesses; i++ {
		// Sequential runs, hot paths and uniform noise.
		var k int
		switch r := rng.IntN(10); {
		case r < 4:
			k = (prev + 1) % paths
		case r < 7:
			k = rng.IntN(200)
		default:
			k = rng.IntN(paths)
		}
		prev = k
		g.Access(names[k])
		s := g.Stats()
		if s.Vertices > cfg.MaxVertices || s.Edges > cfg.MaxVertices*cfg.MaxOutEdges || s.Bytes > bound {
			t.Fatalf("access %d: %+v over the cap (%d vertices, %d edges, %d bytes)",
				i, s, cfg.MaxVertices, cfg.MaxVertices*cfg.MaxOutEdges, bound)
		}
		if i%20_000 == 0 || i == accesses-1 {
			edges, keyBytes := 0, int64(0)
			for key, v := range g.vertices {
				if len(v.edges) > cfg.MaxOutEdges || cap(v.edges) > cfg.MaxOutEdges {
					t.Fatalf("vertex %s: %d edges (cap %d)", key, len(v.edges), cap(v.edges))
				}
				edges += len(v.edges)
				keyBytes += int64(len(key))
				for _, e := range v.edges {
					keyBytes += int64(len(e.to))
				}
			}
			if edges != s.Edges || keyBytes != g.keyBytes {
				t.Fatalf("access %d: counted %d edges, %d key bytes; stats %d, %d", i, edges, keyBytes, s.Edges, g.keyBytes)
			}
		}
	}
	s := g.Stats()
	if s.Vertices != cfg.MaxVertices || s.EvictedVertices == 0 || s.EvictedEdges == 0 {
		t.Errorf("the cap was never reached: %+v", s)
	}
	t.Logf("stats %+v, bound %d bytes", s, bound)
	// The hot, sequential structure survives eviction: a hot path's
	// strongest successors are still known.
	if got := g.Successors(names[10], 2); len(got) == 0 {
		t.Errorf("hot path lost its successors")
	}
}

func TestRemoveAndReset(t *testing.T) {
	g := mustGraph[string](t, Config{Window: 2})
	accessAll(g, "ABCAB")
	g.Remove("A")
	if got := g.Successors("A", 2); got != nil {
		t.Errorf("removed A still has successors %v", got)
	}
	if g.Len() != 2 {
		t.Errorf("%d vertices after Remove, want 2", g.Len())
	}
	// The window still holds A (distance 2): no edge from the dead vertex.
	g.Access("C")
	if _, ok := g.Weight("A", "C"); ok {
		t.Errorf("edge from removed A")
	}
	if w, ok := g.Weight("B", "C"); !ok || w != 20 {
		t.Errorf("B→C = %d, %v; want 20", w, ok)
	}
	g.Remove("nope") // no-op
	g.Reset()
	if s := g.Stats(); s.Vertices != 0 || s.Edges != 0 || s.Accesses != 0 || g.Successors("B", 1) != nil {
		t.Errorf("after Reset: %+v", s)
	}
	accessAll(g, "XY")
	if got := g.Successors("X", 1); !slices.Equal(got, []string{"Y"}) {
		t.Errorf("after Reset and XY: %v", got)
	}
}

// TestEvictionPolicies: a full vertex replaces its weakest edge; the
// least recently accessed vertex goes first.
func TestEvictionPolicies(t *testing.T) {
	g := mustGraph[string](t, Config{Window: 1, MaxOutEdges: 2, MaxVertices: 3})
	accessAll(g, "ABABAC") // A→B 20, A→C 10: full
	accessAll(g, "AD")     // D replaces C (weakest); vertices A, B, C, D: C… evicted
	if got := g.Successors("A", 3); !slices.Equal(got, []string{"B", "D"}) {
		t.Errorf("A's successors %v, want [B D]", got)
	}
	s := g.Stats()
	if s.Vertices != 3 || s.EvictedVertices != 1 {
		t.Errorf("stats %+v", s)
	}
	if _, ok := g.vertices["B"]; ok {
		t.Errorf("B (least recently accessed) kept; vertices %v", g.Len())
	}
}

func TestAppendSuccessorsDoesNotAllocate(t *testing.T) {
	g := mustGraph[int32](t, Config{})
	for i := 0; i < 1000; i++ {
		g.Access(int32(i % 37))
	}
	buf := make([]int32, 0, 4)
	if n := testing.AllocsPerRun(100, func() { buf = g.AppendSuccessors(buf[:0], 5, 4) }); n != 0 {
		t.Errorf("%v allocations", n)
	}
	if len(buf) != 4 {
		t.Errorf("%d successors", len(buf))
	}
}

func BenchmarkAccess(b *testing.B) {
	g := mustGraph[int32](b, Config{})
	rng := rand.New(rand.NewPCG(1, 1))
	keys := make([]int32, 1<<16)
	for i := range keys {
		keys[i] = int32(rng.IntN(20000))
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		g.Access(keys[i&(len(keys)-1)])
	}
}

// TestSuccessorsMatchEdges: both selection paths of AppendSuccessors (small
// and large groups) return the first n of Edges' order.
func TestSuccessorsMatchEdges(t *testing.T) {
	g := mustGraph[int](t, Config{MaxOutEdges: 24, Window: 4})
	rng := rand.New(rand.NewPCG(9, 9))
	for i := 0; i < 20000; i++ {
		g.Access(rng.IntN(30))
	}
	for k := 0; k < 30; k++ {
		var all []int
		for _, e := range g.Edges(k) {
			all = append(all, e.To)
		}
		for n := 1; n <= 26; n++ {
			want := all[:min(n, len(all))]
			if got := g.Successors(k, n); !slices.Equal(got, want) {
				t.Fatalf("Successors(%d, %d) = %v, want %v", k, n, got, want)
			}
		}
	}
}
