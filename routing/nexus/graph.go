package nexus

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"
	"unsafe"
)

// Assignment is how much weight an access adds to the edge from a window
// entry at distance d (d = 1 for the immediately preceding access) to the
// new access: the successor relationship strength of Nexus §4.5.1.
type Assignment uint8

// The weight assignments of §4.5.1. The zero value is the paper's default,
// linear decremental.
const (
	// Linear is linear decremental assignment: 10 for the immediate
	// successor, 9 for the next, 8, … (§4.5.1, the weights of Fig. 7). For
	// windows longer than 10 it starts at the window size instead, so that
	// every weight stays positive.
	Linear Assignment = iota
	// Identical gives every successor in the window the same weight, 10
	// (§4.5.1; close to the probability graph of Griffioen and Appleton).
	Identical
	// Polynomial is polynomial decremental assignment, ⌊1024/d² + ½⌋
	// (inverse square, after the attenuation of radiation §4.5.1 cites),
	// at least 1.
	Polynomial
	// Exponential is exponential decremental assignment, 1024·4^−(d−1)
	// (faster than polynomial from d = 3 on, as §4.5.1 describes), at
	// least 1.
	Exponential
)

var assignmentNames = [...]string{"linear", "identical", "polynomial", "exponential"}

// Assignments lists every Assignment, the default first.
func Assignments() []Assignment { return []Assignment{Linear, Identical, Polynomial, Exponential} }

// String returns the name ParseAssignment accepts.
func (a Assignment) String() string {
	if int(a) < len(assignmentNames) {
		return assignmentNames[a]
	}
	return fmt.Sprintf("assignment(%d)", a)
}

// ParseAssignment returns the Assignment called s ("linear", "identical",
// "polynomial" or "exponential"; "decremental" is linear).
func ParseAssignment(s string) (Assignment, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	if t == "decremental" {
		return Linear, nil
	}
	for i, n := range assignmentNames {
		if t == n {
			return Assignment(i), nil
		}
	}
	return 0, fmt.Errorf("nexus: unknown weight assignment %q (want %s): %w",
		s, strings.Join(assignmentNames[:], ", "), ErrConfig)
}

// Weight returns the weight added to the edge from the window entry at
// distance d ≥ 1 (1 = the immediately preceding access) with a window of
// the given size (§4.5.1).
func (a Assignment) Weight(d, window int) uint32 {
	d = max(d, 1)
	switch a {
	case Identical:
		return 10
	case Polynomial:
		return uint32(max(1, math.Round(1024/float64(d*d))))
	case Exponential:
		if s := 2 * (d - 1); s < 10 {
			return 1024 >> s
		}
		return 1
	default:
		return uint32(max(1, max(10, window)-(d-1)))
	}
}

// Config configures a Graph. Zero fields take the defaults below.
type Config struct {
	// Window is the look-ahead history window: how many preceding
	// accesses gain an edge to each new one (§4.2). Default 5, the best
	// size the paper found (§4.5.2).
	Window int
	// Assignment weighs the edges by distance (§4.5.1). Default Linear.
	Assignment Assignment
	// MaxVertices caps the vertices; the least recently accessed vertex
	// is evicted with its out-edges. Default 65,536.
	MaxVertices int
	// MaxOutEdges caps the out-edges of a vertex; a new successor of a
	// full vertex replaces its weakest edge. Default 16.
	MaxOutEdges int
	// MaxWeight is the largest edge weight. An addition that would exceed
	// it renormalizes the vertex's out-edges to 0…N−1 in their order
	// (§4.5.4, Fig. 11). Default math.MaxUint32 (the paper's "normal
	// integers"); it must be at least MaxOutEdges plus the largest single
	// weight.
	MaxWeight uint32
}

// Defaults of Config.
const (
	DefaultWindow      = 5
	DefaultGroup       = 2 // prefetch group size, §4.5.2
	DefaultMaxVertices = 1 << 16
	DefaultMaxOutEdges = 16
	// MaxWindow bounds Config.Window (the paper tries up to 100, §4.5.2).
	MaxWindow = 1024
)

// ErrConfig is wrapped by errors about an invalid Config.
var ErrConfig = errors.New("nexus: invalid config")

// withDefaults fills zero fields and validates c.
func (c Config) withDefaults() (Config, error) {
	if c.Window == 0 {
		c.Window = DefaultWindow
	}
	if c.MaxVertices == 0 {
		c.MaxVertices = DefaultMaxVertices
	}
	if c.MaxOutEdges == 0 {
		c.MaxOutEdges = DefaultMaxOutEdges
	}
	if c.MaxWeight == 0 {
		c.MaxWeight = math.MaxUint32
	}
	switch {
	case c.Window < 1 || c.Window > MaxWindow:
		return c, fmt.Errorf("nexus: window %d not in [1, %d]: %w", c.Window, MaxWindow, ErrConfig)
	case int(c.Assignment) >= len(assignmentNames):
		return c, fmt.Errorf("nexus: %v: %w", c.Assignment, ErrConfig)
	case c.MaxVertices < 1 || c.MaxOutEdges < 1:
		return c, fmt.Errorf("nexus: caps %d vertices, %d out-edges: want at least 1: %w", c.MaxVertices, c.MaxOutEdges, ErrConfig)
	case uint64(c.MaxWeight) < uint64(c.MaxOutEdges)+uint64(c.Assignment.Weight(1, c.Window)):
		return c, fmt.Errorf("nexus: max weight %d below %d out-edges plus one weight %d: %w",
			c.MaxWeight, c.MaxOutEdges, c.Assignment.Weight(1, c.Window), ErrConfig)
	}
	return c, nil
}

// Edge is an out-edge of a vertex: the successor To and the edge's weight.
type Edge[K comparable] struct {
	To     K
	Weight uint32
}

// Stats describes a Graph's size and history.
type Stats struct {
	Vertices int // vertices held, ≤ MaxVertices
	Edges    int // out-edges held, ≤ Vertices·MaxOutEdges
	// Bytes estimates the memory held: vertices, their map entries, edge
	// slots (allocated capacity, ≤ MaxOutEdges per vertex), the window,
	// and the bytes of string keys (counted once per vertex and per edge,
	// an upper bound when the strings share memory).
	Bytes            int64
	Accesses         uint64 // Access calls
	Renormalizations uint64 // out-edge renumberings (§4.5.4)
	EvictedVertices  uint64 // vertices dropped by the MaxVertices cap
	EvictedEdges     uint64 // edges dropped by the MaxOutEdges cap or with their vertex
}

// edge is an out-edge; seq is the access that last added weight to it
// (unique among a vertex's out-edges: one access reinforces at most one
// out-edge per vertex). Ties of weight go to the most recent edge.
type edge[K comparable] struct {
	to  K
	w   uint32
	seq uint64
}

// stronger reports whether a ranks before b: heavier, or as heavy and
// reinforced more recently.
func stronger[K comparable](a, b *edge[K]) bool {
	return a.w > b.w || (a.w == b.w && a.seq > b.seq)
}

type vertex[K comparable] struct {
	key        K
	edges      []edge[K]
	prev, next *vertex[K] // LRU list of vertices, most recent after the sentinel
	dead       bool       // evicted or removed
}

type slot[K comparable] struct {
	key K
	v   *vertex[K] // the vertex when the access was recorded; re-looked up when dead
}

// Graph is the Nexus relationship graph (§4.1–4.2) over keys of type K
// (paths in a client cache, interned ids in a simulator). Create one with
// New. A Graph is not safe for concurrent use; see the package doc.
type Graph[K comparable] struct {
	cfg      Config
	weights  []uint32 // weights[d-1]: weight at distance d
	vertices map[K]*vertex[K]
	lru      vertex[K] // sentinel
	window   []slot[K] // ring of the last Window accesses
	head     int       // next write position in window
	n        int       // entries in window
	seq      uint64
	stats    Stats
	keyBytes int64 // string bytes of vertex keys and edge targets
	edgeCap  int64 // allocated edge slots
	scratch  []rank
	// stringKeys: K's kind is string, whose bytes Stats counts.
	stringKeys bool
}

type rank struct {
	i   int
	w   uint64
	seq uint64
}

// New returns an empty Graph configured by cfg (zero fields take their
// defaults).
func New[K comparable](cfg Config) (*Graph[K], error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	g := &Graph[K]{cfg: cfg, weights: make([]uint32, cfg.Window), window: make([]slot[K], cfg.Window),
		stringKeys: reflect.TypeFor[K]().Kind() == reflect.String}
	for d := range g.weights {
		g.weights[d] = cfg.Assignment.Weight(d+1, cfg.Window)
	}
	g.Reset()
	return g, nil
}

// Config returns the configuration with defaults filled in.
func (g *Graph[K]) Config() Config { return g.cfg }

// Reset forgets every vertex, edge and the window; the counters of Stats
// restart too.
func (g *Graph[K]) Reset() {
	g.vertices = make(map[K]*vertex[K])
	g.lru.prev, g.lru.next = &g.lru, &g.lru
	clear(g.window)
	g.head, g.n, g.seq = 0, 0, 0
	g.stats = Stats{}
	g.keyBytes, g.edgeCap = 0, 0
}

// Access records an access to k (Fig. 6): every window entry i ≠ k gains
// weight on the edge (i, k) by its distance to k, then k becomes the most
// recent window entry and the most recently used vertex. A key that occurs
// several times in the window adds weight once per occurrence, as the
// pseudocode's "for each metadata request i in history window" does.
func (g *Graph[K]) Access(k K) {
	g.seq++
	g.stats.Accesses++
	L := len(g.window)
	for d := 1; d <= g.n; d++ {
		s := &g.window[(g.head-d+L)%L]
		if s.key == k {
			continue
		}
		v := s.v
		if v == nil || v.dead {
			if v = g.vertices[s.key]; v == nil {
				continue // evicted: its history is gone
			}
			s.v = v
		}
		g.add(v, k, g.weights[d-1])
	}
	v := g.touch(k)
	g.window[g.head] = slot[K]{key: k, v: v}
	g.head = (g.head + 1) % L
	g.n = min(g.n+1, L)
}

// touch returns k's vertex, created if needed (evicting the least recently
// accessed vertex at the cap), as the most recently used vertex.
func (g *Graph[K]) touch(k K) *vertex[K] {
	if v := g.vertices[k]; v != nil {
		g.unlink(v)
		g.pushFront(v)
		return v
	}
	if len(g.vertices) >= g.cfg.MaxVertices {
		g.stats.EvictedVertices++
		g.drop(g.lru.prev)
	}
	v := &vertex[K]{key: k}
	g.vertices[k] = v
	g.keyBytes += g.keyExtra(k)
	g.pushFront(v)
	return v
}

func (g *Graph[K]) pushFront(v *vertex[K]) {
	v.prev, v.next = &g.lru, g.lru.next
	g.lru.next.prev = v
	g.lru.next = v
}

func (g *Graph[K]) unlink(v *vertex[K]) {
	v.prev.next = v.next
	v.next.prev = v.prev
	v.prev, v.next = nil, nil
}

// drop deletes vertex v and its out-edges.
func (g *Graph[K]) drop(v *vertex[K]) {
	g.unlink(v)
	delete(g.vertices, v.key)
	g.keyBytes -= g.keyExtra(v.key)
	for i := range v.edges {
		g.keyBytes -= g.keyExtra(v.edges[i].to)
	}
	g.stats.Edges -= len(v.edges)
	g.stats.EvictedEdges += uint64(len(v.edges))
	g.edgeCap -= int64(cap(v.edges))
	v.edges = nil
	v.dead = true
}

// add adds w to the edge (v, to), creating it (in place of the weakest
// edge when v is full) or renormalizing v's out-edges when the sum would
// exceed MaxWeight.
func (g *Graph[K]) add(v *vertex[K], to K, w uint32) {
	for i := range v.edges {
		e := &v.edges[i]
		if e.to != to {
			continue
		}
		if e.w > g.cfg.MaxWeight-w {
			g.renormalize(v, i, w)
		} else {
			e.w += w
		}
		e.seq = g.seq
		return
	}
	ne := edge[K]{to: to, w: w, seq: g.seq}
	g.keyBytes += g.keyExtra(to)
	if len(v.edges) >= g.cfg.MaxOutEdges {
		weakest := 0
		for i := 1; i < len(v.edges); i++ {
			if stronger(&v.edges[weakest], &v.edges[i]) {
				weakest = i
			}
		}
		g.keyBytes -= g.keyExtra(v.edges[weakest].to)
		v.edges[weakest] = ne
		g.stats.EvictedEdges++
		return
	}
	if len(v.edges) == cap(v.edges) {
		// Grow by doubling up to the cap, so that capacity never exceeds
		// MaxOutEdges.
		nc := min(max(2, 2*cap(v.edges)), g.cfg.MaxOutEdges)
		ns := make([]edge[K], len(v.edges), nc)
		copy(ns, v.edges)
		g.edgeCap += int64(nc - cap(v.edges))
		v.edges = ns
	}
	v.edges = append(v.edges, ne)
	g.stats.Edges++
}

// renormalize is Fig. 11: edge i of v is about to gain w beyond MaxWeight;
// its new weight is computed exactly (64 bits), and the out-edges of v are
// renumbered N−1 (strongest) … 0 (weakest) in the order of their weights
// (ties to the most recent edge, as everywhere), so the order of v's
// successors after the addition is the one unbounded weights would give.
// O(N log N).
func (g *Graph[K]) renormalize(v *vertex[K], i int, w uint32) {
	g.stats.Renormalizations++
	rs := g.scratch[:0]
	for j := range v.edges {
		r := rank{i: j, w: uint64(v.edges[j].w), seq: v.edges[j].seq}
		if j == i {
			r.w += uint64(w)
			r.seq = g.seq
		}
		rs = append(rs, r)
	}
	slices.SortFunc(rs, func(a, b rank) int {
		switch {
		case a.w != b.w:
			if a.w > b.w {
				return -1
			}
			return 1
		case a.seq > b.seq:
			return -1
		case a.seq < b.seq:
			return 1
		}
		return 0
	})
	n := len(rs)
	for r, x := range rs {
		v.edges[x.i].w = uint32(n - 1 - r)
	}
	g.scratch = rs[:0]
}

// Remove forgets k: its vertex and out-edges (a deleted path). Edges from
// other vertices to k stay until they are evicted or renormalized away, so
// k may still be predicted; window entries of k add no more edges.
func (g *Graph[K]) Remove(k K) {
	if v := g.vertices[k]; v != nil {
		g.drop(v)
	}
}

// Successors returns the prefetch group of k (§4.3, §4.5.2): its n
// strongest successors, strongest first; ties go to the edge reinforced
// most recently. It returns fewer when k has fewer out-edges, and nil for
// an unknown k or n ≤ 0.
func (g *Graph[K]) Successors(k K, n int) []K { return g.AppendSuccessors(nil, k, n) }

// AppendSuccessors is Successors appending to dst; it allocates nothing
// when dst has room.
func (g *Graph[K]) AppendSuccessors(dst []K, k K, n int) []K {
	v := g.vertices[k]
	if v == nil || n <= 0 {
		return dst
	}
	if n <= len(topBuf[K]{}) {
		// One pass keeping the n strongest in order: O(E·n) at worst.
		var top topBuf[K]
		m := 0
		for i := range v.edges {
			e := &v.edges[i]
			if m == n && !stronger(e, top[m-1]) {
				continue
			}
			j := min(m, n-1)
			for j > 0 && stronger(e, top[j-1]) {
				top[j] = top[j-1]
				j--
			}
			top[j] = e
			m = min(m+1, n)
		}
		for _, e := range top[:m] {
			dst = append(dst, e.to)
		}
		return dst
	}
	// Selection by rounds: each round takes the strongest edge weaker than
	// the previous pick (the order is strict: seq is unique per vertex).
	// O(n·E) without allocating; E ≤ MaxOutEdges.
	var last *edge[K]
	for r := 0; r < n && r < len(v.edges); r++ {
		var best *edge[K]
		for i := range v.edges {
			e := &v.edges[i]
			if last != nil && !stronger(last, e) {
				continue
			}
			if best == nil || stronger(e, best) {
				best = e
			}
		}
		if best == nil {
			break
		}
		dst = append(dst, best.to)
		last = best
	}
	return dst
}

// topBuf holds the strongest edges of a small prefetch group.
type topBuf[K comparable] [8]*edge[K]

// Edges returns every out-edge of k, strongest first.
func (g *Graph[K]) Edges(k K) []Edge[K] {
	v := g.vertices[k]
	if v == nil {
		return nil
	}
	es := slices.Clone(v.edges)
	slices.SortFunc(es, func(a, b edge[K]) int {
		if stronger(&a, &b) {
			return -1
		}
		if stronger(&b, &a) {
			return 1
		}
		return 0
	})
	out := make([]Edge[K], len(es))
	for i, e := range es {
		out[i] = Edge[K]{To: e.to, Weight: e.w}
	}
	return out
}

// Weight returns the weight of the edge (from, to) and whether it exists.
func (g *Graph[K]) Weight(from, to K) (uint32, bool) {
	if v := g.vertices[from]; v != nil {
		for i := range v.edges {
			if v.edges[i].to == to {
				return v.edges[i].w, true
			}
		}
	}
	return 0, false
}

// Len returns the number of vertices.
func (g *Graph[K]) Len() int { return len(g.vertices) }

// sizes estimates, in bytes, what one vertex, one edge slot and one window
// slot take beyond their string keys' bytes (Stats.Bytes adds those).
// mapEntry approximates a Go map entry (key, pointer, control byte and
// load-factor slack).
func (g *Graph[K]) sizes() (vertexBytes, edgeBytes, slotBytes int64) {
	var k K
	var v vertex[K]
	var e edge[K]
	var s slot[K]
	mapEntry := int64(unsafe.Sizeof(k)) + 8 + 8
	return int64(unsafe.Sizeof(v)) + mapEntry, int64(unsafe.Sizeof(e)), int64(unsafe.Sizeof(s))
}

// Stats returns the graph's size and counters. O(1).
func (g *Graph[K]) Stats() Stats {
	s := g.stats
	s.Vertices = len(g.vertices)
	vb, eb, sb := g.sizes()
	s.Bytes = int64(s.Vertices)*vb + g.edgeCap*eb + int64(len(g.window))*sb + g.keyBytes
	return s
}

// MaxBytes bounds Stats.Bytes for keys of at most maxKeyLen string bytes
// (0 for non-string keys), window keys excluded: the memory cap that
// MaxVertices and MaxOutEdges imply.
func (g *Graph[K]) MaxBytes(maxKeyLen int) int64 {
	vb, eb, sb := g.sizes()
	c := g.cfg
	kl := int64(maxKeyLen)
	return int64(c.MaxVertices)*(vb+kl) + int64(c.MaxVertices)*int64(c.MaxOutEdges)*(eb+kl) + int64(c.Window)*sb
}

// keyExtra is the heap bytes behind a key: a string's bytes, else 0.
func (g *Graph[K]) keyExtra(k K) int64 {
	if !g.stringKeys {
		return 0
	}
	return int64(len(*(*string)(unsafe.Pointer(&k)))) // K's kind is string
}
