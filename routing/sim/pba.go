package sim

import (
	"context"
	"fmt"
	"math"

	"github.com/ghba/ghba/routing"
)

// PBAConfig is one pure Bloom filter array to simulate (HBA §4.2.1): every
// server has a local counting filter of all the files it homes, replicated
// to every server; a lookup probes the array of all N filters.
type PBAConfig struct {
	// BitsPerFile is m/n of every local filter, sized for the mean initial
	// number of files per server.
	BitsPerFile float64
	// Hashes is k; 0 picks the optimum for BitsPerFile (OptimalHashes), and
	// the theory then uses the optimal false rate 0.6185^(m/n).
	Hashes int
	// Threshold is the propagation threshold as a share of a filter's bits
	// (0.01 = 1%); 0 propagates every change (replicas always exact, as the
	// theory assumes).
	Threshold float64
}

// PBAResult is the outcome of one PBA configuration (HBA Figs. 2, 3, 6, 7
// and Table 4). Rates are shares of lookups.
type PBAResult struct {
	TraceStats
	Servers          int     `json:"servers"`
	BitsPerFile      float64 `json:"bits_per_file"`
	Hashes           int     `json:"hashes"`
	ThresholdPercent float64 `json:"threshold_percent"`
	// TheoryHitRate is HitOldFile (or HitOldFileK when Hashes was given):
	// (1−f)^(N−1), HBA eq. 1.
	TheoryHitRate float64 `json:"theory_hit_rate"`
	// SimHitRate is the share of lookups of existing files whose array
	// query gave a unique hit on the right home.
	SimHitRate float64 `json:"sim_hit_rate"`
	// TheoryFalseNew is FalseNewFile (or FalseNewFileK): N·f·(1−f)^(N−1).
	TheoryFalseNew float64 `json:"theory_false_new"`
	// SimFalseNew is the share of lookups of absent (new) files that found
	// exactly one positive filter.
	SimFalseNew float64 `json:"sim_false_new"`
	// Misses of existing-file lookups by kind.
	WrongHitRate float64 `json:"wrong_hit_rate"` // unique hit on a wrong server (stale replica + false positive)
	MultiHitRate float64 `json:"multi_hit_rate"` // more than one positive
	ZeroHitRate  float64 `json:"zero_hit_rate"`  // no positive (only with stale replicas)
	// ActualBitsPerFile is the filter size over the mean files per server
	// at the end of the trace (creates and deletes move it off the target).
	ActualBitsPerFile float64 `json:"actual_bits_per_file"`
	// TheoryHitRateActual is the theory at ActualBitsPerFile and the k used.
	TheoryHitRateActual float64 `json:"theory_hit_rate_actual"`
	// TheoryHitRateFill and TheoryFalseNewFill apply eq. 1 and the false-hit
	// formula to the false rates f_i = fill_i^k of the actual filters (their
	// measured fill ratios, sampled every 4,096 lookups), which accounts for
	// unequal file counts per server and the growth of the namespace.
	TheoryHitRateFill  float64 `json:"theory_hit_rate_fill"`
	TheoryFalseNewFill float64 `json:"theory_false_new_fill"`
	// UpdateMessages counts propagations (one multicast each).
	UpdateMessages    int64   `json:"update_messages"`
	MessagesPerSecond float64 `json:"messages_per_second"`
	// MemoryVsPBA8 is this array's memory relative to one at 8 bits/file.
	MemoryVsPBA8 float64 `json:"memory_vs_pba8"`
	// FilterBytes is the size of one local filter; ArrayBytes the size of
	// the bit-sliced replica array (with its slot padding).
	FilterBytes int `json:"filter_bytes"`
	ArrayBytes  int `json:"array_bytes"`
}

// pbaModel simulates one PBA configuration. The replicas of an owner's
// filter on all servers are updated by the same multicast, so one shared
// array stands for every server's copy (the entry server's own column is
// its live filter, see prober).
type pbaModel struct {
	cfg PBAConfig
	k   int
	geo routing.Geometry
	n   int
	ids []string
	localFilters
	arr *routing.FilterArray
	p   prober

	lookups, hits, wrong, multi, zero int64
	newLookups, falseNew              int64
	samples                           int
	sampleHit, sampleNew              float64
	res                               PBAResult
}

func newPBAModel(cfg PBAConfig) (*pbaModel, error) {
	if !(cfg.BitsPerFile > 0) || math.IsInf(cfg.BitsPerFile, 0) {
		return nil, fmt.Errorf("sim: %v bits per file: %w", cfg.BitsPerFile, ErrConfig)
	}
	if cfg.Hashes < 0 || cfg.Hashes > routing.MaxHashes {
		return nil, fmt.Errorf("sim: %d hashes: %w", cfg.Hashes, ErrConfig)
	}
	if cfg.Threshold < 0 {
		return nil, fmt.Errorf("sim: threshold %v: %w", cfg.Threshold, ErrConfig)
	}
	return &pbaModel{cfg: cfg}, nil
}

// localFilters are the servers' local counting filters and their
// replicated views: a create, remove or rename changes its home's filter,
// whose replicas are updated past the threshold (replicated.changed).
type localFilters struct {
	local []*routing.CountingFilter
	reps  []*replicated
}

func (l *localFilters) create(e *event) error {
	l.local[e.home].AddKey(e.key)
	return l.reps[e.home].changed()
}

func (l *localFilters) remove(e *event) error {
	l.local[e.home].RemoveKey(e.key)
	return l.reps[e.home].changed()
}

func (l *localFilters) rename(e *event) error {
	l.local[e.home].RemoveKey(e.key)
	l.local[e.home].AddKey(e.key2)
	return l.reps[e.home].changed()
}

// buildLocal makes one counting filter per server holding its initial files.
func buildLocal(c *cluster, geo routing.Geometry) []*routing.CountingFilter {
	local := make([]*routing.CountingFilter, c.n)
	for i := range local {
		local[i] = routing.NewCountingFilter(geo)
	}
	for i, k := range c.initKeys {
		local[c.initHomes[i]].AddKey(k)
	}
	return local
}

func (m *pbaModel) setup(c *cluster) error {
	geo, err := routing.NewGeometry(c.capacity(), m.cfg.BitsPerFile, m.cfg.Hashes, routing.HashXX)
	if err != nil {
		return fmt.Errorf("sim: pba geometry: %w", err)
	}
	m.geo, m.k, m.n, m.ids = geo, int(geo.K), c.n, c.ids
	m.local = buildLocal(c, geo)
	m.arr = routing.NewFilterArray(geo)
	m.reps = make([]*replicated, c.n)
	for i, cf := range m.local {
		m.reps[i] = newReplicated(c.ids[i], cf.Filter(), m.cfg.Threshold)
		if err := m.reps[i].addSink(m.arr); err != nil {
			return err
		}
	}
	return nil
}

func (m *pbaModel) query(e *event) routing.Result {
	return m.p.probe(m.arr, e.key, m.cfg.Threshold <= 0, m.ids[e.entry], m.local[e.entry].TestKey(e.key))
}

// sample evaluates the array formulas on the filters' current fill ratios:
// hit = mean over homes j of Π_{i≠j}(1−f_i) and new = Σ_j f_j Π_{i≠j}(1−f_i).
func (m *pbaModel) sample() {
	var logAll float64
	f := make([]float64, len(m.local))
	for i, cf := range m.local {
		f[i] = min(cf.Filter().EstimatedFalsePositiveRate(), 1-1e-12)
		logAll += math.Log1p(-f[i])
	}
	var hit, fresh float64
	for _, fi := range f {
		others := math.Exp(logAll - math.Log1p(-fi))
		hit += others
		fresh += fi * others
	}
	m.sampleHit += hit / float64(len(f))
	m.sampleNew += fresh
	m.samples++
}

func (m *pbaModel) lookup(e *event) error {
	if m.lookups&4095 == 0 {
		m.sample()
	}
	m.lookups++
	r := m.query(e)
	switch {
	case r.Positives == 1 && r.ID == m.ids[e.home]:
		m.hits++
	case r.Positives == 1:
		m.wrong++
	case r.Positives == 0:
		m.zero++
	default:
		m.multi++
	}
	return nil
}

func (m *pbaModel) lookupNew(e *event) error {
	m.newLookups++
	if m.query(e).Positives == 1 {
		m.falseNew++
	}
	return nil
}

func (m *pbaModel) finish(c *cluster) error {
	var msgs int64
	for _, r := range m.reps {
		msgs += r.pushes
	}
	meanFiles := float64(max(c.stats.FinalFiles, 1)) / float64(c.n)
	actual := float64(m.geo.M) / meanFiles
	r := PBAResult{
		TraceStats:          c.stats,
		Servers:             c.n,
		BitsPerFile:         m.cfg.BitsPerFile,
		Hashes:              m.k,
		ThresholdPercent:    m.cfg.Threshold * 100,
		SimHitRate:          rate(m.hits, m.lookups),
		SimFalseNew:         rate(m.falseNew, m.newLookups),
		WrongHitRate:        rate(m.wrong, m.lookups),
		MultiHitRate:        rate(m.multi, m.lookups),
		ZeroHitRate:         rate(m.zero, m.lookups),
		ActualBitsPerFile:   actual,
		TheoryHitRateActual: routing.HitOldFileK(c.n, actual, m.k),
		UpdateMessages:      msgs,
		MemoryVsPBA8:        m.cfg.BitsPerFile / 8,
		FilterBytes:         m.local[0].Filter().SizeBytes(),
		ArrayBytes:          m.arr.SizeBytes(),
	}
	if c.stats.TraceSeconds > 0 {
		r.MessagesPerSecond = float64(msgs) / c.stats.TraceSeconds
	}
	if m.samples == 0 {
		m.sample()
	}
	r.TheoryHitRateFill = m.sampleHit / float64(m.samples)
	r.TheoryFalseNewFill = m.sampleNew / float64(m.samples)
	if m.cfg.Hashes > 0 {
		r.TheoryHitRate = routing.HitOldFileK(c.n, m.cfg.BitsPerFile, m.cfg.Hashes)
		r.TheoryFalseNew = routing.FalseNewFileK(c.n, m.cfg.BitsPerFile, m.cfg.Hashes)
	} else {
		r.TheoryHitRate = routing.HitOldFile(c.n, m.cfg.BitsPerFile)
		r.TheoryFalseNew = routing.FalseNewFile(c.n, m.cfg.BitsPerFile)
	}
	m.res = r
	return nil
}

// PBA replays the trace once and simulates every configuration on the same
// placement and entry servers. Results are in the order of cfgs.
func PBA(ctx context.Context, r Replay, cfgs ...PBAConfig) ([]PBAResult, error) {
	models := make([]model, len(cfgs))
	pm := make([]*pbaModel, len(cfgs))
	for i, cfg := range cfgs {
		m, err := newPBAModel(cfg)
		if err != nil {
			return nil, err
		}
		models[i], pm[i] = m, m
	}
	if _, err := run(ctx, r, models...); err != nil {
		return nil, err
	}
	out := make([]PBAResult, len(pm))
	for i, m := range pm {
		out[i] = m.res
	}
	return out, nil
}
