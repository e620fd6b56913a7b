package cachesim

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/ghba/ghba/routing/nexus"
	"github.com/ghba/ghba/routing/workload"
)

// Algorithm is a caching or caching-and-prefetching algorithm of the
// paper's evaluation (§5.3).
type Algorithm uint8

// The algorithms. Every prefetching algorithm manages its cache by LRU and
// prefetches only on a miss (§5.2: "prefetching happens when a client sees
// a local cache miss").
const (
	LRU              Algorithm = iota // least recently used
	LFU                               // least frequently used (counts of the cached entries; ties to LRU)
	MRU                               // most recently used
	FirstSuccessor                    // §2 item 1: prefetch the first successor seen
	LastSuccessor                     // §2 item 2: prefetch the last successor seen
	Noah                              // §2 item 3: stable successor, parameter S
	RecentPopularity                  // §2 item 4: best j-out-of-k
	PG                                // §2 item 5: probability-based successor group (PG1, PG2)
	Nexus                             // §4: the weighted relationship graph
	OPT                               // Belady's MIN, offline, no prefetching
	numAlgorithms
)

var algorithmNames = [numAlgorithms]string{"lru", "lfu", "mru", "first_successor", "last_successor", "noah",
	"recent_popularity", "pg", "nexus", "opt"}

// String returns the algorithm's name (PG without its group size).
func (a Algorithm) String() string {
	if a < numAlgorithms {
		return algorithmNames[a]
	}
	return fmt.Sprintf("algorithm(%d)", a)
}

// Prefetches reports whether the algorithm prefetches on a miss.
func (a Algorithm) Prefetches() bool { return a >= FirstSuccessor && a <= Nexus }

// Grouping is where the prefetching algorithms' state is built (§4.5.3).
type Grouping uint8

const (
	// ClientOriented builds one graph (or successor table) per client
	// from its own accesses: the paper's choice "whenever possible".
	ClientOriented Grouping = iota
	// ServerOriented builds one for the interleaved accesses of all
	// clients, as a metadata server sees them.
	ServerOriented
)

// String returns "client" or "server".
func (g Grouping) String() string {
	if g == ServerOriented {
		return "server"
	}
	return "client"
}

// Spec is one simulated configuration: every client gets its own cache of
// Fraction × its working set (at least one entry) under Algorithm.
type Spec struct {
	Algorithm Algorithm
	Fraction  float64
	// Group is the prefetch group size: the successors prefetched on a
	// miss (Nexus §4.5.2; PG1 and PG2 are PG with 1 and 2). The successor
	// predictors always prefetch their single prediction. Default 2 for
	// Nexus, 1 for PG.
	Group int
	// Window and Assignment configure Nexus's graph (defaults 5, linear).
	Window     int
	Assignment nexus.Assignment
	Grouping   Grouping
	// NoConsistency turns write-invalidate off: other clients' copies of a
	// written path stay (stale) in their caches, and writes wait for no
	// invalidation.
	NoConsistency bool
}

// Name is the spec's label: the algorithm, with PG's group size (pg1,
// pg2).
func (s Spec) Name() string {
	if s.Algorithm == PG {
		return fmt.Sprintf("pg%d", s.group())
	}
	return s.Algorithm.String()
}

func (s Spec) group() int {
	switch {
	case !s.Algorithm.Prefetches():
		return 0
	case s.Algorithm == Nexus && s.Group == 0:
		return nexus.DefaultGroup
	case s.Algorithm == Nexus || s.Algorithm == PG:
		return max(1, s.Group)
	}
	return 1
}

// Latency is the response-time model (§5.2). A local hit costs Memory. A
// miss — and every write, which the metadata server must apply — costs a
// request and a reply (2·Network), the transfer of the path's metadata and
// its prefetch group at Bandwidth, and the server's work per item: Memory
// when in the server cache, Disk otherwise (a create needs no disk read;
// see Options.AsyncPrefetch for the prefetched items).
// With write-invalidate a write whose path other clients cache waits for
// their invalidations and acknowledgements: another 2·Network (sent in
// parallel).
type Latency struct {
	Memory        time.Duration // client or server memory hit
	Network       time.Duration // one message (the paper: 0.3 ms average network delay)
	Disk          time.Duration // a server cache miss (the paper uses DiskSim)
	Bandwidth     float64       // bits per second (the paper: 1 Gbit/s)
	MetadataBytes int           // bytes per metadata item transferred
}

// DefaultLatency is the paper's network (§5.2: 0.3 ms delay, 1 Gbit/s)
// with 4,224-byte metadata items (Table 1: the largest common metadata
// size; 99% are smaller, §3.4), 100 ns memory hits ("in the range of
// nanoseconds", §5.4) and 5 ms per disk read (an assumption: the paper
// measures disks with DiskSim 3.0 and gives no figure).
func DefaultLatency() Latency {
	return Latency{Memory: 100 * time.Nanosecond, Network: 300 * time.Microsecond, Disk: 5 * time.Millisecond,
		Bandwidth: 1e9, MetadataBytes: 4224}
}

// Options are the parameters shared by every spec of a run.
type Options struct {
	NoahS    int // Noah's stability S (default 2)
	RPJ, RPK int // Recent Popularity's j and k (defaults 2 and 4)
	// MaxVertices and MaxOutEdges cap each Nexus graph (nexus.Config
	// defaults when 0).
	MaxVertices, MaxOutEdges int
	// ServerFraction sizes the metadata server's LRU cache, shared by all
	// clients, as a fraction of the trace's working set (default 0.5).
	ServerFraction float64
	Latency        Latency // zero: DefaultLatency
	// AsyncPrefetch takes the server's work for prefetched items off the
	// critical path: the reply waits for the demanded item only (the
	// group's transfer still counts). By default the server retrieves "the
	// requested metadata along with the entire prefetching group" (§5.2)
	// before replying, so prefetches that miss the server cache delay the
	// demand access: the cost of extra disk accesses the paper warns about,
	// without a queueing model.
	AsyncPrefetch bool
	// Progress, when set, is called every 65,536 accesses replayed with
	// the accesses replayed so far and the total of the run (the trace
	// once per predictor configuration and once per spec).
	Progress func(done, total int64)
}

func (o Options) withDefaults() (Options, error) {
	if o.NoahS == 0 {
		o.NoahS = 2
	}
	if o.RPJ == 0 {
		o.RPJ = 2
	}
	if o.RPK == 0 {
		o.RPK = 4
	}
	if o.ServerFraction == 0 {
		o.ServerFraction = 0.5
	}
	if o.Latency == (Latency{}) {
		o.Latency = DefaultLatency()
	}
	l := o.Latency
	switch {
	case o.NoahS < 1:
		return o, fmt.Errorf("cachesim: Noah S %d: want at least 1: %w", o.NoahS, ErrConfig)
	case o.RPJ < 1 || o.RPK < o.RPJ:
		return o, fmt.Errorf("cachesim: Recent Popularity %d-out-of-%d: want 1 ≤ j ≤ k: %w", o.RPJ, o.RPK, ErrConfig)
	case !(o.ServerFraction > 0 && o.ServerFraction <= 1):
		return o, fmt.Errorf("cachesim: server cache fraction %v not in (0, 1]: %w", o.ServerFraction, ErrConfig)
	case l.Memory < 0 || l.Network < 0 || l.Disk < 0 || l.MetadataBytes < 0 || !(l.Bandwidth > 0) || math.IsInf(l.Bandwidth, 0):
		return o, fmt.Errorf("cachesim: latency model %+v: %w", l, ErrConfig)
	}
	return o, nil
}

// ErrConfig is wrapped by errors about an invalid configuration.
var ErrConfig = errors.New("cachesim: invalid configuration")

// Result is what one Spec measured over a trace.
type Result struct {
	Spec     Spec
	Accesses int64 // every access of the trace
	Hits     int64 // accesses found in the client's cache
	// CacheEntries is the total client cache capacity (entries).
	CacheEntries int64
	// Prefetched counts entries inserted by prefetching; PrefetchUsed
	// those a demand access then hit; PrefetchWasted those evicted or
	// invalidated unused. The rest were still cached, unused, at the end.
	Prefetched, PrefetchUsed, PrefetchWasted int64
	// ServerRequests counts requests to the metadata server (misses and
	// writes); ServerLookups the items they looked up (with prefetched
	// ones); ServerHits those in the server cache; DiskReads the others.
	ServerRequests, ServerLookups, ServerHits, DiskReads int64
	// Invalidations counts the copies write-invalidate removed from other
	// clients' caches (one invalidation and one acknowledgement each).
	Invalidations int64
	// ResponseNanos is the summed response time of every access.
	ResponseNanos float64
}

// HitRate is the local hit rate: hits / accesses at the client caches.
func (r Result) HitRate() float64 { return ratio(r.Hits, r.Accesses) }

// MeanResponse is the mean response time per access.
func (r Result) MeanResponse() time.Duration {
	if r.Accesses == 0 {
		return 0
	}
	return time.Duration(r.ResponseNanos / float64(r.Accesses))
}

// ServerHitRate is the share of server lookups found in the server cache.
func (r Result) ServerHitRate() float64 { return ratio(r.ServerHits, r.ServerLookups) }

// ConsistencyMessages is the consistency traffic per access: an
// invalidation and its acknowledgement per removed copy.
func (r Result) ConsistencyMessages() float64 { return ratio(2*r.Invalidations, r.Accesses) }

func ratio(a, b int64) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// predKey identifies the predictor state a spec needs; specs with equal
// keys share it (its predictions do not depend on the cache).
type predKey struct {
	alg        Algorithm
	window     int
	assignment nexus.Assignment
	grouping   Grouping
}

// predGroup is one predictor configuration and the specs that use it.
type predGroup struct {
	key   predKey
	maxK  int
	units []*unit
}

// prefetchPlan holds a predictor group's prefetch candidates for every
// access, in CSR form: access i's candidates, likeliest first, are
// paths[off[i]:off[i+1]] with their ids at the accessing client in ids (−1
// for a path deleted at that time: it holds a place in the group but is not
// fetched).
type prefetchPlan struct {
	off   []int32
	paths []int32
	ids   []int32
}

type unit struct {
	spec   Spec
	k      int
	res    Result
	counts prefetchCounts
}

// Run replays tr for every spec and returns one Result per spec, in order.
// The predictors are replayed once per distinct configuration (their
// predictions do not depend on the caches), then each spec's caches alone
// over the whole trace, which keeps the working memory small.
func Run(ctx context.Context, tr *Trace, opt Options, specs []Spec) ([]Result, error) {
	opt, err := opt.withDefaults()
	if err != nil {
		return nil, err
	}
	if len(tr.Accesses) == 0 {
		return nil, fmt.Errorf("cachesim: empty trace: %w", ErrConfig)
	}
	groups := make(map[predKey]*predGroup)
	none := &predGroup{}
	order := []*predGroup{none}
	units := make([]*unit, len(specs))
	for i, s := range specs {
		if s.Algorithm >= numAlgorithms {
			return nil, fmt.Errorf("cachesim: %v: %w", s.Algorithm, ErrConfig)
		}
		if !(s.Fraction > 0 && s.Fraction <= 1) {
			return nil, fmt.Errorf("cachesim: cache fraction %v not in (0, 1]: %w", s.Fraction, ErrConfig)
		}
		if s.Algorithm == PG && s.group() > 2 {
			return nil, fmt.Errorf("cachesim: PG group %d: PG3 and beyond need 4-tuple statistics (§4.4.2); want 1 or 2: %w",
				s.group(), ErrConfig)
		}
		if s.Algorithm == Nexus && s.Group < 0 {
			return nil, fmt.Errorf("cachesim: Nexus group %d: %w", s.Group, ErrConfig)
		}
		u := &unit{spec: s, k: s.group()}
		u.res.Spec = s
		g := none
		if s.Algorithm.Prefetches() {
			key := predKey{alg: s.Algorithm, grouping: s.Grouping}
			if s.Algorithm == Nexus {
				key.window, key.assignment = s.Window, s.Assignment
				if key.window == 0 {
					key.window = nexus.DefaultWindow
				}
			}
			if g = groups[key]; g == nil {
				g = &predGroup{key: key}
				if _, err := makePredictor(key, opt)(); err != nil { // validate before replaying
					return nil, err
				}
				groups[key] = g
				order = append(order, g)
			}
		}
		g.maxK = max(g.maxK, u.k)
		g.units = append(g.units, u)
		units[i] = u
	}
	rp := &replayer{tr: tr, opt: opt, loc: newLocalizer(tr), progress: opt.Progress,
		serverCap: max(1, int(math.Round(opt.ServerFraction*float64(tr.WorkingSet)))),
		total:     int64(len(order)-1+len(units)) * int64(len(tr.Accesses))}
	for _, g := range order {
		var plan *prefetchPlan
		if g != none {
			if plan, err = rp.plan(ctx, g); err != nil {
				return nil, err
			}
		}
		for _, u := range g.units {
			if err := rp.replay(ctx, u, plan); err != nil {
				return nil, err
			}
		}
	}
	out := make([]Result, len(units))
	for i, u := range units {
		u.res.PrefetchUsed, u.res.PrefetchWasted = u.counts.used, u.counts.wasted
		out[i] = u.res
	}
	return out, nil
}

type replayer struct {
	tr        *Trace
	opt       Options
	loc       *localizer
	serverCap int
	progress  func(done, total int64)
	done      int64 // accesses replayed, for progress
	total     int64
}

// tick checks for cancellation and reports progress every 65,536
// accesses.
func (rp *replayer) tick(ctx context.Context, i int) error {
	if i&65535 != 0 || i == 0 {
		return nil
	}
	rp.done += 65536
	if err := ctx.Err(); err != nil {
		return err
	}
	if rp.progress != nil {
		rp.progress(rp.done, rp.total)
	}
	return nil
}

// plan replays the predictors of g over the trace and records every
// access's prefetch candidates.
func (rp *replayer) plan(ctx context.Context, g *predGroup) (*prefetchPlan, error) {
	tr := rp.tr
	mk := makePredictor(g.key, rp.opt)
	inst := make([]predictor, max(1, tr.Clients))
	p := &prefetchPlan{off: make([]int32, 1, len(tr.Accesses)+1)}
	deleted := make([]bool, tr.Paths)
	for i, a := range tr.Accesses {
		if err := rp.tick(ctx, i); err != nil {
			return nil, err
		}
		c := a.Client
		if g.key.grouping == ServerOriented {
			c = 0
		}
		if inst[c] == nil {
			var err error
			if inst[c], err = mk(); err != nil {
				return nil, err
			}
		}
		from := len(p.paths)
		p.paths = inst[c].predict(p.paths, a.Path, g.maxK)
		for _, q := range p.paths[from:] {
			id := int32(-1)
			if !deleted[q] && q != a.Path {
				id = rp.loc.get(a.Client, q)
			}
			p.ids = append(p.ids, id)
		}
		p.off = append(p.off, int32(len(p.paths)))
		inst[c].observe(a.Path)
		switch a.Op {
		case workload.OpCreate, workload.OpMkdir:
			deleted[a.Path] = false
		case workload.OpUnlink, workload.OpRmdir:
			deleted[a.Path] = true
		case workload.OpRename:
			deleted[a.Path] = true
			deleted[a.Path2] = false
		}
	}
	return p, nil
}

// replay runs one spec over the trace: its client caches, the server
// cache and the response-time model.
func (rp *replayer) replay(ctx context.Context, u *unit, plan *prefetchPlan) error {
	tr := rp.tr
	lat := rp.opt.Latency
	memNs := float64(lat.Memory)
	rtt := 2 * float64(lat.Network)
	xfer := float64(lat.MetadataBytes) * 8 / lat.Bandwidth * 1e9
	diskNs := float64(lat.Disk)
	held := make([]int32, tr.Paths) // copies of each path in the client caches
	caches := make([]cache, max(1, tr.Clients))
	for c, ws := range tr.ClientWorkingSet {
		n := clientCap(u.spec.Fraction, ws)
		u.res.CacheEntries += int64(n)
		switch u.spec.Algorithm {
		case LFU:
			caches[c] = newLFU(n, held)
		case MRU:
			caches[c] = newLRU(n, true, &u.counts, held)
		case OPT:
			caches[c] = newOPT(n, held)
		default:
			caches[c] = newLRU(n, false, &u.counts, held)
		}
	}
	server := newLRU(rp.serverCap, false, &prefetchCounts{}, nil)
	var next []int64
	if u.spec.Algorithm == OPT {
		next = tr.NextUse(!u.spec.NoConsistency)
	}
	r := &u.res
	serverItem := func(p int32, created bool) float64 {
		r.ServerLookups++
		if server.demand(p, p, 0) || created {
			r.ServerHits++
			return memNs
		}
		r.DiskReads++
		return diskNs
	}
	for i, a := range tr.Accesses {
		if err := rp.tick(ctx, i); err != nil {
			return err
		}
		c := caches[a.Client]
		nu := int64(0)
		if next != nil {
			nu = next[i]
		}
		r.Accesses++
		hit := c.demand(a.Local, a.Path, nu)
		write := a.IsWrite()
		if hit {
			r.Hits++
			if !write {
				r.ResponseNanos += memNs
				continue
			}
		}
		r.ServerRequests++
		items := 1
		cost := serverItem(a.Path, a.Op == workload.OpCreate || a.Op == workload.OpMkdir)
		if !hit && plan != nil {
			lo, hi := plan.off[i], plan.off[i+1]
			for j := lo; j < hi && int(j-lo) < u.k; j++ {
				if id := plan.ids[j]; id < 0 || !c.prefetch(id, plan.paths[j]) {
					continue
				}
				r.Prefetched++
				items++
				if t := serverItem(plan.paths[j], false); !rp.opt.AsyncPrefetch {
					cost += t
				}
			}
		}
		cost += rtt + float64(items)*xfer
		if write && !u.spec.NoConsistency {
			others := held[a.Path]
			if c.has(a.Local) {
				others--
			}
			if others > 0 {
				n := int64(0)
				for oc := int32(0); oc < int32(tr.Clients); oc++ {
					if oc == a.Client {
						continue
					}
					if id, ok := rp.loc.lookup(oc, a.Path); ok && caches[oc].remove(id) {
						n++
					}
				}
				r.Invalidations += n
				cost += rtt
			}
		}
		r.ResponseNanos += cost
		if a.Removes() {
			c.remove(a.Local)
			server.remove(a.Path)
		}
	}
	return nil
}

// clientCap is a client's cache size: fraction × its working set, at least
// one entry.
func clientCap(fraction float64, ws int) int {
	return max(1, int(math.Round(fraction*float64(ws))))
}

// localizer gives every (client, path) pair a dense id at the client: the
// trace's ids for the paths the client accesses, further ids for paths it
// only receives by prefetching. Lookups go through a dense table per client
// (id + 1, 0: none) when clients × paths is small enough, else maps.
type localizer struct {
	tr    *Trace
	dense [][]int32
	extra map[uint64]int32
	next  []int32 // next unused id per client
}

// maxDenseLocal bounds the dense tables (4 bytes per client and path).
const maxDenseLocal = 1 << 24

func newLocalizer(tr *Trace) *localizer {
	l := &localizer{tr: tr, extra: make(map[uint64]int32), next: make([]int32, tr.Clients)}
	for c, ws := range tr.ClientWorkingSet {
		l.next[c] = int32(ws)
	}
	if int64(tr.Clients)*int64(tr.Paths) <= maxDenseLocal {
		l.dense = make([][]int32, tr.Clients)
		for c := range l.dense {
			l.dense[c] = make([]int32, tr.Paths)
		}
		for _, a := range tr.Accesses {
			l.dense[a.Client][a.Path] = a.Local + 1
		}
	}
	return l
}

func (l *localizer) lookup(c, p int32) (int32, bool) {
	if l.dense != nil {
		id := l.dense[c][p]
		return id - 1, id != 0
	}
	k := clientPath(c, p)
	if id, ok := l.tr.local[k]; ok {
		return id, true
	}
	id, ok := l.extra[k]
	return id, ok
}

func (l *localizer) get(c, p int32) int32 {
	if id, ok := l.lookup(c, p); ok {
		return id
	}
	id := l.next[c]
	l.next[c]++
	if l.dense != nil {
		l.dense[c][p] = id + 1
	} else {
		l.extra[clientPath(c, p)] = id
	}
	return id
}

func makePredictor(k predKey, o Options) func() (predictor, error) {
	return func() (predictor, error) {
		switch k.alg {
		case FirstSuccessor:
			return newSuccessor(false), nil
		case LastSuccessor:
			return newSuccessor(true), nil
		case Noah:
			return newNoah(o.NoahS), nil
		case RecentPopularity:
			return newRecentPopularity(o.RPJ, o.RPK), nil
		case PG:
			return newPG(), nil
		}
		g, err := nexus.New[int32](nexus.Config{Window: k.window, Assignment: k.assignment,
			MaxVertices: o.MaxVertices, MaxOutEdges: o.MaxOutEdges})
		if err != nil {
			return nil, fmt.Errorf("cachesim: %w: %w", ErrConfig, err)
		}
		return nexusPredictor{g}, nil
	}
}
