package sim

import (
	"context"
	"fmt"
	"math"
	"slices"

	"github.com/ghba/ghba/routing"
)

// GHBAConfig is one G-HBA configuration (G-HBA §2, §3).
type GHBAConfig struct {
	// MaxGroup is M, the maximum number of servers in a group. The N
	// servers form ⌈N/M⌉ groups whose sizes differ by at most one.
	MaxGroup int
	// LRUEntries is the LRU list size per server (L1).
	LRUEntries int
	// LRUBitsPerEntry sizes the LRU filters (0 means 20).
	LRUBitsPerEntry float64
	// BitsPerFile sizes the local filters and their segment replicas (0
	// means 8: G-HBA Table 4's memory ratios imply 8 bits per file).
	BitsPerFile float64
	// Threshold is the propagation threshold (share of bits) of the LRU
	// filters and of the local filters; 0 propagates every change.
	Threshold float64
	// MemoryBudget is the memory per server, in bytes, for L2 replicas
	// (segment included). The segment is always held; a budget buys extra
	// replicas of group-mates, then of other servers, while the replicas'
	// bytes stay within it (budget.go). 0 holds the segment alone: G-HBA.
	MemoryBudget int64
	// L1Admission is how paths enter the LRU lists (zero: every access).
	L1Admission L1Admission
}

// Levels of the G-HBA query path.
var levelNames = [4]string{"L1", "L2", "L3", "L4"}

// GHBAResult is one G-HBA configuration's outcome (G-HBA Figs. 5, 7,
// Table 4). Level shares are shares of lookups of existing files.
type GHBAResult struct {
	TraceStats
	Servers          int     `json:"servers"`
	MaxGroup         int     `json:"max_group"`
	Groups           int     `json:"groups"`
	GroupSizeMin     int     `json:"group_size_min"`
	GroupSizeMax     int     `json:"group_size_max"`
	LRUEntries       int     `json:"lru_entries"`
	LRUBitsPerEntry  float64 `json:"lru_bits_per_entry"`
	BitsPerFile      float64 `json:"bits_per_file"`
	ThresholdPercent float64 `json:"threshold_percent"`
	// L1Admission is "lru" or "frequency" (GHBAConfig.L1Admission).
	L1Admission string `json:"l1_admission"`
	// Levels is the share of lookups resolved at L1 (LRU array), L2 (the
	// entry server's segment array and its budget's extra replicas), L3 (group multicast) and L4
	// (system-wide multicast); they sum to 1.
	Levels map[string]float64 `json:"levels"`
	// L1L2 is Levels L1+L2; WithinGroup is L1+L2+L3 (G-HBA §3.3: >80% and
	// >90% in the paper at 100 servers).
	L1L2        float64 `json:"l1_l2"`
	WithinGroup float64 `json:"within_group"`
	// FalsePositives is, per level, the share of lookups that met a unique
	// hit on a wrong server there (one wasted hop each).
	FalsePositives map[string]float64 `json:"false_positives"`
	// Hops is, per level, the mean number of sequential network hops of
	// the lookups resolved there: one per forward to a candidate (right or
	// wrong), one per multicast round.
	Hops map[string]float64 `json:"hops"`
	// MeanHops and MeanMessages are per lookup (messages count every
	// unicast of a multicast: M'−1 at L3, N−1 at L4).
	MeanHops     float64 `json:"mean_hops"`
	MeanMessages float64 `json:"mean_messages"`
	// PLRU and PL2 are the inputs of the latency model (G-HBA eq. 3 as
	// read in routing.LatencyModel): P_LRU = share resolved at L1; P_L2 =
	// share of L1 failures resolved within the group (L2 or L3).
	PLRU float64 `json:"p_lru"`
	PL2  float64 `json:"p_l2"`
	// PL2Local is the share of L1 failures resolved by the entry server's
	// own segment array (L2 alone).
	PL2Local float64 `json:"p_l2_local"`
	// L2FalsePositiveRate is the share of L2 probes (L1 failures) that met
	// a unique hit on a wrong server; TheoryL2FalsePositive is f_g+ of
	// G-HBA §2.2 for θ = replicas + own filter (routing.SegmentFalsePositive).
	L2FalsePositiveRate   float64 `json:"l2_false_positive_rate"`
	TheoryL2FalsePositive float64 `json:"theory_l2_false_positive"`
	// Replicas of other servers' local filters held per server: the
	// segment, plus the extras of a MemoryBudget.
	ReplicasMean float64 `json:"replicas_per_server"`
	ReplicasMin  int     `json:"replicas_min"`
	ReplicasMax  int     `json:"replicas_max"`
	// TotalMemoryVsBFA8 is the memory per server (segment array: replicas + own
	// local filter; L1: N LRU filters) relative to a pure array of N filters
	// at 8 bits/file (G-HBA Table 4), averaged over the members of the
	// largest groups (size MemoryGroupSize = M' in the paper's formula).
	TotalMemoryVsBFA8 float64 `json:"memory_vs_bfa8_total"`
	// TotalMemoryVsBFA8All averages over every server (smaller groups hold more
	// replicas per member).
	TotalMemoryVsBFA8All float64 `json:"memory_vs_bfa8_total_all"`
	// TotalMemoryVsBFA8Formula is ((N−M')/M' + 1)/N · bits/8 + LRU overhead,
	// the paper's formula with M' = MemoryGroupSize.
	TotalMemoryVsBFA8Formula float64 `json:"memory_vs_bfa8_total_formula"`
	// MemoryVsBFA8 is the memory per server of the segment array (its
	// replicas plus its own local filter), measured from the real
	// assignment, relative to a pure array of N filters at 8 bits/file:
	// ((N−M')/M' + 1)/N · bits/8, the quantity of G-HBA Table 4 (0.2002 at
	// N=20 … 0.1121 at N=100, which add HBA's LRU overhead of 0.0002–0.0010
	// at the paper's millions of files per server). LRUMemoryVsBFA8 is the L1
	// part (N LRU filters over N·8 bits per file) at the simulated scale; it
	// shrinks as files per server grow, and TotalMemoryVsBFA8 is the sum.
	MemoryVsBFA8    float64 `json:"memory_vs_bfa8"`
	LRUMemoryVsBFA8 float64 `json:"lru_memory_vs_bfa8"`
	MemoryGroupSize int     `json:"memory_group_size"`
	// Update traffic: LRU filter propagations (one multicast each), local
	// filter propagations, and the messages they took (one per holder
	// that the other groups' IDBFAs name).
	LRUUpdateMessages     int64   `json:"lru_update_messages"`
	SegmentUpdates        int64   `json:"segment_updates"`
	SegmentUpdateMessages int64   `json:"segment_update_messages"`
	MessagesPerSecond     float64 `json:"update_messages_per_second"`
	// Memory budget (budget.go): the configured budget, one replica's bit
	// array in bytes, the mean bytes of replicas per server (segment and
	// extras; the own local filter and L1 are not counted) and the mean
	// extra replicas per server (included in ReplicasMean).
	MemoryBudget      int64   `json:"memory_budget_bytes"`
	ReplicaBytes      int64   `json:"replica_bytes"`
	ReplicaMemoryMean float64 `json:"replica_memory_bytes"`
	ExtraReplicasMean float64 `json:"extra_replicas_per_server"`
}

type ghbaModel struct {
	cfg GHBAConfig

	n       int
	ids     []string
	groups  [][]int // group -> member servers
	groupOf []int
	l1      *sharedL1
	localFilters
	// Every holder of origin o's replica receives the same deltas at the
	// same moments (replicated.changed), so all copies of o are bit for
	// bit identical: one column per held origin in replicas stands for all
	// of them (as one shared array does in hbaModel), and per-server sets
	// record who holds what. Propagation costs one Apply, not one per holder.
	replicas *routing.FilterArray
	index    map[string]int // server id -> server
	seg      []serverSet    // per server: the origins of its segment (L2 and L3)
	l2       []serverSet    // per server: seg plus its extra replicas (L2)
	extras   []int          // per server: extra replicas (MemoryBudget)
	held     []int          // per server: replicas held (segment and extras)
	updMsgs  []int64        // per origin: messages per propagation (IDBFA positives over other groups, extra holders)
	pos      serverSet      // scratch: the origins whose replica is positive for the key probed
	posBuf   []string
	p        prober
	segGeo   routing.Geometry

	replicaBytes int64

	lookups  int64
	resolved [4]int64
	fp       [3]int64
	hops     [4]int64
	msgs     int64
	res      GHBAResult
}

func newGHBAModel(cfg GHBAConfig) (*ghbaModel, error) {
	if cfg.MaxGroup < 1 {
		return nil, fmt.Errorf("sim: max group %d: %w", cfg.MaxGroup, ErrConfig)
	}
	if cfg.LRUEntries < 0 {
		return nil, fmt.Errorf("sim: %d LRU entries: %w", cfg.LRUEntries, ErrConfig)
	}
	if cfg.LRUBitsPerEntry == 0 {
		cfg.LRUBitsPerEntry = 20
	}
	if cfg.BitsPerFile == 0 {
		cfg.BitsPerFile = 8
	}
	if cfg.Threshold < 0 {
		return nil, fmt.Errorf("sim: threshold %v: %w", cfg.Threshold, ErrConfig)
	}
	if !cfg.L1Admission.valid() {
		return nil, fmt.Errorf("sim: %v: %w", cfg.L1Admission, ErrConfig)
	}
	if cfg.MemoryBudget < 0 {
		return nil, fmt.Errorf("sim: memory budget %d bytes: %w", cfg.MemoryBudget, ErrConfig)
	}
	if !(cfg.LRUBitsPerEntry > 0) || !(cfg.BitsPerFile > 0) || math.IsInf(cfg.LRUBitsPerEntry+cfg.BitsPerFile, 0) {
		return nil, fmt.Errorf("sim: bits per entry %v / per file %v: %w", cfg.LRUBitsPerEntry, cfg.BitsPerFile, ErrConfig)
	}
	return &ghbaModel{cfg: cfg}, nil
}

// Groups partitions servers 0..n-1 into ⌈n/m⌉ groups of sizes differing by
// at most one (server i joins group i mod G). It is how every G-HBA
// simulation groups servers.
func Groups(n, m int) [][]int {
	if n < 1 || m < 1 {
		return nil
	}
	g := (n + m - 1) / m
	out := make([][]int, g)
	for i := 0; i < n; i++ {
		out[i%g] = append(out[i%g], i)
	}
	return out
}

func (m *ghbaModel) setup(c *cluster) error {
	m.n, m.ids = c.n, c.ids
	m.groups = Groups(c.n, m.cfg.MaxGroup)
	m.groupOf = make([]int, c.n)
	for g, mem := range m.groups {
		for _, s := range mem {
			m.groupOf[s] = g
		}
	}
	var err error
	m.segGeo, err = routing.NewGeometry(c.capacity(), m.cfg.BitsPerFile, 0, routing.HashXX)
	if err != nil {
		return fmt.Errorf("sim: segment geometry: %w", err)
	}
	m.local = buildLocal(c, m.segGeo)
	m.reps = make([]*replicated, c.n)
	m.seg = make([]serverSet, c.n)
	m.held = make([]int, c.n)
	m.updMsgs = make([]int64, c.n)
	m.pos = newServerSet(c.n)
	m.index = make(map[string]int, c.n)
	for i, id := range c.ids {
		m.index[id] = i
		m.reps[i] = newReplicated(id, m.local[i].Filter(), m.cfg.Threshold)
		m.seg[i] = newServerSet(c.n)
	}
	// Each group assigns every outside server's filter to one member
	// (routing.Assignment, G-HBA §2.3) and records it in its IDBFA.
	for g, mem := range m.groups {
		a := routing.NewAssignment()
		for _, s := range mem {
			a.AddMember(c.ids[s])
		}
		for o := 0; o < c.n; o++ {
			if m.groupOf[o] != g {
				a.AddOrigin(c.ids[o])
			}
		}
		_, hi := a.Balance()
		idGeo, err := routing.NewGeometry(max(hi, 1), 16, 0, routing.HashXX)
		if err != nil {
			return fmt.Errorf("sim: IDBFA geometry: %w", err)
		}
		x := routing.NewIDBFA(idGeo)
		for _, s := range mem {
			if err := x.AddMember(c.ids[s]); err != nil {
				return fmt.Errorf("sim: IDBFA: %w", err)
			}
			for _, o := range a.Held(c.ids[s]) {
				if err := x.Assign(c.ids[s], o); err != nil {
					return fmt.Errorf("sim: IDBFA: %w", err)
				}
				m.seg[s].add(m.index[o])
				m.held[s]++
			}
		}
		// An update of origin o goes to every member the IDBFA names: the
		// holder, plus the members of a multiple hit.
		for o := 0; o < c.n; o++ {
			if m.groupOf[o] != g {
				m.updMsgs[o] += int64(max(1, x.Lookup(c.ids[o]).Positives))
			}
		}
	}
	if err := m.setupExtras(c); err != nil {
		return err
	}
	// One replica of every origin someone holds, taken now: the state the
	// holders start from.
	m.replicas = routing.NewFilterArray(m.segGeo)
	heldBy := newServerSet(c.n)
	for s := range c.n {
		heldBy.union(m.l2[s])
	}
	for o := range c.n {
		if heldBy.has(o) {
			if err := m.reps[o].addSink(m.replicas); err != nil {
				return err
			}
		}
	}
	return nil
}

// probePositives records in m.pos the origins whose replica is positive
// for k; segProbe and l2Probe then read it.
func (m *ghbaModel) probePositives(k routing.Key) {
	clear(m.pos)
	m.posBuf = m.replicas.Positives(k, m.posBuf[:0])
	for _, id := range m.posBuf {
		m.pos.add(m.index[id])
	}
}

// arrayProbe applies the unique-hit rule to server s's replicas in set
// (as probePositives left them) plus its own live local filter.
func (m *ghbaModel) arrayProbe(s int, set serverSet, k routing.Key) routing.Result {
	n, o := m.pos.intersect(set)
	r := routing.Result{Positives: n}
	if n == 1 {
		r.ID = m.ids[o]
	}
	if m.local[s].TestKey(k) {
		r.Positives++
		r.ID = m.ids[s]
	}
	if r.Positives != 1 {
		r.ID = ""
	}
	return r
}

// segProbe is server s's segment array query (G-HBA §2.2): the replicas of
// its segment plus its own live local filter. It answers the group's L3.
func (m *ghbaModel) segProbe(s int, k routing.Key) routing.Result {
	return m.arrayProbe(s, m.seg[s], k)
}

func (m *ghbaModel) lookup(e *event) error {
	m.lookups++
	home := m.ids[e.home]
	x := e.entry
	hops := int64(0)
	level := 3
	// L1: the LRU filter array (replicated everywhere; own filter live).
	r1 := m.l1.probe(e)
	if r1.Hit() {
		hops++
		m.msgs++
	}
	switch {
	case r1.Hit() && r1.ID == home:
		level = 0
	default:
		if r1.Hit() {
			m.fp[0]++
		}
		// L2: the entry server's segment array, with the extra replicas
		// of its memory budget.
		m.probePositives(e.key)
		r2 := m.l2Probe(x, e.key)
		if r2.Hit() {
			hops++
			m.msgs++
		}
		if r2.Hit() && r2.ID == home {
			level = 1
			break
		}
		if r2.Hit() {
			m.fp[1]++
		}
		// L3: multicast to the group; every member answers from its
		// segment array and its local filter.
		mem := m.groups[m.groupOf[x]]
		hops++
		m.msgs += int64(len(mem) - 1)
		total, id := 0, ""
		for _, s := range mem {
			r := m.segProbe(s, e.key)
			total += r.Positives
			if r.Positives == 1 {
				id = r.ID
			}
		}
		if total == 1 {
			hops++
			m.msgs++
			if id == home {
				level = 2
				break
			}
			m.fp[2]++
		}
		// L4: multicast to every server; the home answers from its local
		// filter and its store.
		hops++
		m.msgs += int64(m.n - 1)
	}
	m.resolved[level]++
	m.hops[level] += hops
	return nil
}

func (m *ghbaModel) lookupNew(*event) error { return nil }

func (m *ghbaModel) finish(c *cluster) error {
	cfg := m.cfg
	r := GHBAResult{
		TraceStats:       c.stats,
		Servers:          c.n,
		MaxGroup:         cfg.MaxGroup,
		Groups:           len(m.groups),
		LRUEntries:       cfg.LRUEntries,
		LRUBitsPerEntry:  cfg.LRUBitsPerEntry,
		BitsPerFile:      cfg.BitsPerFile,
		ThresholdPercent: cfg.Threshold * 100,
		L1Admission:      cfg.L1Admission.String(),
		Levels:           make(map[string]float64, 4),
		FalsePositives:   make(map[string]float64, 3),
		Hops:             make(map[string]float64, 4),
	}
	r.GroupSizeMin, r.GroupSizeMax = c.n, 0
	for _, g := range m.groups {
		r.GroupSizeMin = min(r.GroupSizeMin, len(g))
		r.GroupSizeMax = max(r.GroupSizeMax, len(g))
	}
	var hops int64
	for i, name := range levelNames {
		r.Levels[name] = rate(m.resolved[i], m.lookups)
		r.Hops[name] = rate(m.hops[i], m.resolved[i])
		hops += m.hops[i]
		if i < 3 {
			r.FalsePositives[name] = rate(m.fp[i], m.lookups)
		}
	}
	r.L1L2 = rate(m.resolved[0]+m.resolved[1], m.lookups)
	r.WithinGroup = rate(m.resolved[0]+m.resolved[1]+m.resolved[2], m.lookups)
	r.MeanHops = rate(hops, m.lookups)
	r.MeanMessages = rate(m.msgs, m.lookups)
	r.PLRU = r.Levels["L1"]
	miss1 := m.lookups - m.resolved[0]
	r.PL2 = rate(m.resolved[1]+m.resolved[2], miss1)
	r.PL2Local = rate(m.resolved[1], miss1)
	r.L2FalsePositiveRate = rate(m.fp[1], miss1)

	// Memory per server, in bits, relative to BFA8 = N filters at 8 bits/file.
	pba8, err := routing.NewGeometry(c.capacity(), 8, 0, routing.HashXX)
	if err != nil {
		return fmt.Errorf("sim: pba8 geometry: %w", err)
	}
	bfa8 := float64(c.n) * float64(pba8.M)
	lruBits := m.l1.l.filterBits()
	segBits := float64(m.segGeo.M)
	r.LRUMemoryVsBFA8 = lruBits / bfa8
	r.ReplicasMin, r.ReplicasMax = slices.Min(m.held), slices.Max(m.held)
	var all, full float64
	var nfull int
	for s, h := range m.held {
		r.ReplicasMean += float64(h)
		v := (float64(h+1)*segBits + lruBits) / bfa8
		all += v
		if len(m.groups[m.groupOf[s]]) == r.GroupSizeMax {
			full += v
			nfull++
		}
	}
	r.ReplicasMean /= float64(c.n)
	r.TheoryL2FalsePositive = routing.SegmentFalsePositive(int(math.Round(r.ReplicasMean))+1, cfg.BitsPerFile)
	r.TotalMemoryVsBFA8All = all / float64(c.n)
	r.TotalMemoryVsBFA8 = full / float64(nfull)
	r.MemoryGroupSize = r.GroupSizeMax
	r.MemoryVsBFA8 = r.TotalMemoryVsBFA8 - r.LRUMemoryVsBFA8
	mp := float64(r.GroupSizeMax)
	r.TotalMemoryVsBFA8Formula = ((float64(c.n)-mp)/mp+1)/float64(c.n)*segBits/float64(pba8.M) + r.LRUMemoryVsBFA8

	r.LRUUpdateMessages = m.l1.l.messages()
	for o, rep := range m.reps {
		r.SegmentUpdates += rep.pushes
		r.SegmentUpdateMessages += rep.pushes * m.updMsgs[o]
	}
	if c.stats.TraceSeconds > 0 {
		r.MessagesPerSecond = float64(r.LRUUpdateMessages+r.SegmentUpdateMessages) / c.stats.TraceSeconds
	}
	m.extraStats(&r)
	m.res = r
	return nil
}

// GHBA replays the trace once and simulates every configuration on the
// same placement and entry servers. Results are in the order of cfgs.
//
// Configurations with the same LRU size, LRU filter size and threshold
// share one L1 level: it does not depend on the grouping.
func GHBA(ctx context.Context, r Replay, cfgs ...GHBAConfig) ([]GHBAResult, error) {
	models := make([]model, 0, len(cfgs)+1)
	gm := make([]*ghbaModel, len(cfgs))
	shared := make(map[l1Key]*sharedL1)
	var l1s []model
	for i, cfg := range cfgs {
		m, err := newGHBAModel(cfg)
		if err != nil {
			return nil, err
		}
		k := l1Key{m.cfg.LRUEntries, m.cfg.LRUBitsPerEntry, m.cfg.Threshold, m.cfg.L1Admission}
		if shared[k] == nil {
			shared[k] = &sharedL1{key: k}
			l1s = append(l1s, shared[k])
		}
		m.l1 = shared[k]
		models = append(models, m)
		gm[i] = m
	}
	// The L1 levels come last: the G-HBA models probe L1 before the home
	// touches its LRU list.
	models = append(models, l1s...)
	if _, err := run(ctx, r, models...); err != nil {
		return nil, err
	}
	out := make([]GHBAResult, len(gm))
	for i, m := range gm {
		out[i] = m.res
	}
	return out, nil
}

// l1Key identifies an L1 level configuration.
type l1Key struct {
	entries   int
	bits      float64
	threshold float64
	admission L1Admission
}

// sharedL1 is an L1 level (LRU lists and their replicated filters) shared
// by several G-HBA models, fed as a model of its own after them. Its probe
// is computed once per event.
type sharedL1 struct {
	key  l1Key
	l    *l1Level
	ids  []string
	p    prober
	seq  uint64
	last routing.Result
}

func (s *sharedL1) setup(c *cluster) error {
	l, err := newL1(c, s.key.entries, s.key.bits, s.key.threshold, s.key.admission)
	if err != nil {
		return err
	}
	s.l, s.ids = l, c.ids
	return nil
}

// probe queries the LRU filter array as seen by the entry server.
func (s *sharedL1) probe(e *event) routing.Result {
	if s.seq != e.seq {
		x := e.entry
		s.last = s.p.probe(s.l.arr, e.key, s.key.threshold <= 0, s.ids[x], s.l.lru[x].Filter().TestKey(e.key))
		s.seq = e.seq
	}
	return s.last
}

func (s *sharedL1) lookup(e *event) error  { return s.l.touch(e.home, e.path) }
func (s *sharedL1) lookupNew(*event) error { return nil }
func (s *sharedL1) create(e *event) error  { return s.l.touch(e.home, e.path) }
func (s *sharedL1) remove(e *event) error  { return s.l.remove(e.home, e.path) }
func (s *sharedL1) rename(e *event) error  { return s.l.rename(e.home, e.path, e.path2) }
func (s *sharedL1) finish(*cluster) error  { return nil }
