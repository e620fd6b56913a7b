package sim

import (
	"context"
	"fmt"
	"math"

	"github.com/ghba/ghba/routing"
)

// HBAConfig describes a family of HBA simulations run on one pass (HBA
// §4.2.2, §6): one HBA per (LRU size, threshold) pair, plus the PBA
// baselines at 8, 12 and 16 bits per file for every threshold.
type HBAConfig struct {
	// LRUEntries lists LRU list sizes per server (HBA Figs. 8, 9, 11).
	LRUEntries []int
	// Thresholds lists propagation thresholds as shares of bits (0.01 =
	// 1%, HBA's choice); each applies to the LRU filters and to the local
	// filters of the HBA and to the baselines' local filters. Empty means
	// {0.01}.
	Thresholds []float64
	// LRUBitsPerEntry sizes the LRU filters (0 means 20, as in HBA §6.1.2).
	LRUBitsPerEntry float64
	// BitsPerFile sizes the L2 local filters (0 means 8, as in HBA).
	BitsPerFile float64
	// L1Admission is how paths enter the LRU lists (zero: every access,
	// as in HBA).
	L1Admission L1Admission
}

// L1Admission selects how a path enters a server's LRU list, and so its
// LRU filter (the L1 of HBA §4.2.2 and G-HBA).
type L1Admission int

const (
	// L1AdmitLRU lists every accessed path (HBA §4.2.2): routing.LRU.
	L1AdmitLRU L1Admission = iota
	// L1AdmitFrequency lists a path on its second access within a window
	// of 10× the LRU size, counted by an adaptive Bloom filter
	// (g-hba-survey §V): routing.FrequencyLRU.
	L1AdmitFrequency
)

// String returns "lru" or "frequency".
func (a L1Admission) String() string {
	switch a {
	case L1AdmitLRU:
		return "lru"
	case L1AdmitFrequency:
		return "frequency"
	}
	return fmt.Sprintf("L1Admission(%d)", int(a))
}

func (a L1Admission) valid() bool { return a == L1AdmitLRU || a == L1AdmitFrequency }

// ParseL1Admission parses "lru" or "frequency"; other values give an
// error wrapping ErrConfig.
func ParseL1Admission(s string) (L1Admission, error) {
	switch s {
	case "lru":
		return L1AdmitLRU, nil
	case "frequency":
		return L1AdmitFrequency, nil
	}
	return 0, fmt.Errorf("sim: L1 admission %q (want lru or frequency): %w", s, ErrConfig)
}

// HBAResult is one HBA configuration next to the PBA baselines simulated on
// the same pass at the same threshold (HBA Figs. 8–13, Tables 4–6). Hit
// rates are shares of lookups of existing files resolved by a unique hit on
// the right home.
type HBAResult struct {
	TraceStats
	Servers          int     `json:"servers"`
	LRUEntries       int     `json:"lru_entries"`
	ThresholdPercent float64 `json:"threshold_percent"`
	LRUBitsPerEntry  float64 `json:"lru_bits_per_entry"`
	BitsPerFile      float64 `json:"bits_per_file"`
	// L1Admission is "lru" or "frequency" (HBAConfig.L1Admission).
	L1Admission string `json:"l1_admission"`
	// HitRate is the HBA hit rate: resolved at L1 or at L2.
	HitRate float64 `json:"hba_hit_rate"`
	// LRUHitRate is the share resolved by the L1 (LRU filter) array alone,
	// the "LRU BFs" curve of HBA Fig. 10.
	LRUHitRate float64 `json:"lru_hit_rate"`
	// L2HitRate is the share resolved at L2 after an L1 failure.
	L2HitRate float64 `json:"l2_hit_rate"`
	// L1FalseHits and L2FalseHits are shares of lookups whose unique hit
	// pointed to a wrong server at that level.
	L1FalseHits float64 `json:"l1_false_hit_rate"`
	L2FalseHits float64 `json:"l2_false_hit_rate"`
	// PBA baselines on the same pass and threshold.
	PBA8HitRate  float64 `json:"pba8_hit_rate"`
	PBA12HitRate float64 `json:"pba12_hit_rate"`
	PBA16HitRate float64 `json:"pba16_hit_rate"`
	// Memory per server relative to PBA at 8 bits/file (HBA Tables 5, 6):
	// HBA counts its L2 array and its L1 array of LRU filters.
	HBAMemoryVsPBA8   float64 `json:"hba_memory_vs_pba8"`
	PBA12MemoryVsPBA8 float64 `json:"pba12_memory_vs_pba8"`
	PBA16MemoryVsPBA8 float64 `json:"pba16_memory_vs_pba8"`
	// LRUListBytes is one server's LRU list bookkeeping (LRU.SizeBytes
	// minus its filter, plus the admission sketch with frequency
	// admission), not included in the ratios above.
	LRUListBytes int `json:"lru_list_bytes"`
	// Update messages: one multicast per propagation of an LRU filter (L1)
	// or of a local filter (L2) (HBA Figs. 12, 13).
	L1Messages        int64   `json:"l1_update_messages"`
	L2Messages        int64   `json:"l2_update_messages"`
	UpdateMessages    int64   `json:"update_messages"`
	MessagesPerSecond float64 `json:"messages_per_second"`
}

// hbaModel is one HBA: per server an LRU list with its filter and a local
// counting filter; L1 holds every LRU filter, L2 every local filter. As in
// pbaModel, one shared array stands for every server's replica array.
type hbaModel struct {
	entries   int
	threshold float64
	lruBits   float64
	bits      float64
	admission L1Admission

	ids []string
	l1  *l1Level
	localFilters
	l2 *routing.FilterArray
	p  prober

	lookups, l1Hits, l2Hits, l1False, l2False int64
	memRatio                                  float64
	listBytes                                 int
}

// lruGeometry sizes an LRU filter of entries paths at bitsPerEntry.
func lruGeometry(entries int, bitsPerEntry float64) (routing.Geometry, error) {
	g, err := routing.NewGeometry(max(entries, 1), bitsPerEntry, 0, routing.HashXX)
	if err != nil {
		return g, fmt.Errorf("sim: LRU filter geometry: %w", err)
	}
	return g, nil
}

// l1Level is the LRU-filter level shared by HBA and G-HBA.
type l1Level struct {
	lru  []*routing.LRU
	freq []*routing.FrequencyLRU // with L1AdmitFrequency: lru[i] is freq[i].LRU()
	rep  []*replicated
	arr  *routing.FilterArray
}

func newL1(c *cluster, entries int, bitsPerEntry, threshold float64, adm L1Admission) (*l1Level, error) {
	g, err := lruGeometry(entries, bitsPerEntry)
	if err != nil {
		return nil, err
	}
	l := &l1Level{lru: make([]*routing.LRU, c.n), rep: make([]*replicated, c.n), arr: routing.NewFilterArray(g)}
	if adm == L1AdmitFrequency {
		l.freq = make([]*routing.FrequencyLRU, c.n)
	}
	for i := range l.lru {
		if l.freq != nil {
			l.freq[i] = routing.NewFrequencyLRU(entries, g)
			l.lru[i] = l.freq[i].LRU()
		} else {
			l.lru[i] = routing.NewLRU(entries, g)
		}
		l.rep[i] = newReplicated(c.ids[i], l.lru[i].Filter(), threshold)
		if err := l.rep[i].addSink(l.arr); err != nil {
			return nil, err
		}
	}
	return l, nil
}

// touch records an access at the home and propagates its LRU filter when
// due. With frequency admission the path is listed on its second access.
func (l *l1Level) touch(home int, path string) error {
	if l.freq != nil {
		l.freq[home].Touch(path)
	} else {
		l.lru[home].Touch(path)
	}
	return l.rep[home].changed()
}

// sketchBytes is one server's admission sketch (0 without one).
func (l *l1Level) sketchBytes() int {
	if l.freq == nil {
		return 0
	}
	return l.freq[0].SketchBytes()
}

func (l *l1Level) remove(home int, path string) error {
	if l.lru[home].Remove(path) {
		return l.rep[home].changed()
	}
	return nil
}

// rename carries a listed path over to its new name (the underlying list's
// Touch: a listed path was admitted already).
func (l *l1Level) rename(home int, from, to string) error {
	if l.lru[home].Remove(from) {
		l.lru[home].Touch(to)
		return l.rep[home].changed()
	}
	return nil
}

func (l *l1Level) messages() int64 {
	var n int64
	for _, r := range l.rep {
		n += r.pushes
	}
	return n
}

// filterBits is the memory of every LRU filter of the level, in bits.
func (l *l1Level) filterBits() float64 {
	return float64(len(l.lru)) * float64(l.arr.Geometry().M)
}

func (m *hbaModel) setup(c *cluster) error {
	m.ids = c.ids
	l1, err := newL1(c, m.entries, m.lruBits, m.threshold, m.admission)
	if err != nil {
		return err
	}
	m.l1 = l1
	geo, err := routing.NewGeometry(c.capacity(), m.bits, 0, routing.HashXX)
	if err != nil {
		return fmt.Errorf("sim: hba L2 geometry: %w", err)
	}
	m.local = buildLocal(c, geo)
	m.l2 = routing.NewFilterArray(geo)
	m.reps = make([]*replicated, c.n)
	for i, cf := range m.local {
		m.reps[i] = newReplicated(c.ids[i], cf.Filter(), m.threshold)
		if err := m.reps[i].addSink(m.l2); err != nil {
			return err
		}
	}
	pba8, err := routing.NewGeometry(c.capacity(), 8, 0, routing.HashXX)
	if err != nil {
		return fmt.Errorf("sim: pba8 geometry: %w", err)
	}
	// Per server: N local filters (L2) + N LRU filters (L1), over N PBA-8 filters.
	lg := l1.arr.Geometry()
	m.memRatio = (float64(geo.M) + float64(lg.M)) / float64(pba8.M)
	m.listBytes = l1.lru[0].SizeBytes() - routing.NewCountingFilter(lg).SizeBytes() + l1.sketchBytes()
	return nil
}

func (m *hbaModel) lookup(e *event) error {
	m.lookups++
	exact := m.threshold <= 0
	self := m.ids[e.entry]
	r1 := m.p.probe(m.l1.arr, e.key, exact, self, m.l1.lru[e.entry].Filter().TestKey(e.key))
	switch {
	case r1.Positives == 1 && r1.ID == m.ids[e.home]:
		m.l1Hits++
	default:
		if r1.Positives == 1 {
			m.l1False++
		}
		r2 := m.p.probe(m.l2, e.key, exact, self, m.local[e.entry].TestKey(e.key))
		if r2.Positives == 1 && r2.ID == m.ids[e.home] {
			m.l2Hits++
		} else if r2.Positives == 1 {
			m.l2False++
		}
	}
	return m.l1.touch(e.home, e.path)
}

func (m *hbaModel) lookupNew(*event) error { return nil }

func (m *hbaModel) create(e *event) error {
	if err := m.localFilters.create(e); err != nil {
		return err
	}
	return m.l1.touch(e.home, e.path)
}

func (m *hbaModel) remove(e *event) error {
	if err := m.localFilters.remove(e); err != nil {
		return err
	}
	return m.l1.remove(e.home, e.path)
}

func (m *hbaModel) rename(e *event) error {
	if err := m.localFilters.rename(e); err != nil {
		return err
	}
	return m.l1.rename(e.home, e.path, e.path2)
}

func (m *hbaModel) finish(*cluster) error { return nil }

func (m *hbaModel) messages() (l1, l2 int64) {
	l1 = m.l1.messages()
	for _, r := range m.reps {
		l2 += r.pushes
	}
	return l1, l2
}

// HBA replays the trace once and simulates every (LRU size, threshold) pair
// of cfg and the PBA-8/12/16 baselines at each threshold. Results are
// ordered by LRU size, then threshold.
func HBA(ctx context.Context, r Replay, cfg HBAConfig) ([]HBAResult, error) {
	if len(cfg.LRUEntries) == 0 {
		return nil, fmt.Errorf("sim: no LRU size: %w", ErrConfig)
	}
	if len(cfg.Thresholds) == 0 {
		cfg.Thresholds = []float64{0.01}
	}
	if cfg.LRUBitsPerEntry == 0 {
		cfg.LRUBitsPerEntry = 20
	}
	if cfg.BitsPerFile == 0 {
		cfg.BitsPerFile = 8
	}
	if !(cfg.LRUBitsPerEntry > 0) || !(cfg.BitsPerFile > 0) || math.IsInf(cfg.LRUBitsPerEntry+cfg.BitsPerFile, 0) {
		return nil, fmt.Errorf("sim: bits per entry %v / per file %v: %w", cfg.LRUBitsPerEntry, cfg.BitsPerFile, ErrConfig)
	}
	if !cfg.L1Admission.valid() {
		return nil, fmt.Errorf("sim: %v: %w", cfg.L1Admission, ErrConfig)
	}
	var models []model
	baselines := make(map[float64][3]*pbaModel)
	for _, t := range cfg.Thresholds {
		if t < 0 {
			return nil, fmt.Errorf("sim: threshold %v: %w", t, ErrConfig)
		}
		if _, ok := baselines[t]; ok {
			continue
		}
		var b [3]*pbaModel
		for i, bits := range []float64{8, 12, 16} {
			pm, err := newPBAModel(PBAConfig{BitsPerFile: bits, Threshold: t})
			if err != nil {
				return nil, err
			}
			b[i] = pm
			models = append(models, pm)
		}
		baselines[t] = b
	}
	var hm []*hbaModel
	for _, e := range cfg.LRUEntries {
		if e < 0 {
			return nil, fmt.Errorf("sim: %d LRU entries: %w", e, ErrConfig)
		}
		for _, t := range cfg.Thresholds {
			m := &hbaModel{entries: e, threshold: t, lruBits: cfg.LRUBitsPerEntry, bits: cfg.BitsPerFile, admission: cfg.L1Admission}
			hm = append(hm, m)
			models = append(models, m)
		}
	}
	c, err := run(ctx, r, models...)
	if err != nil {
		return nil, err
	}
	out := make([]HBAResult, len(hm))
	for i, m := range hm {
		b := baselines[m.threshold]
		l1, l2 := m.messages()
		res := HBAResult{
			TraceStats:        c.stats,
			Servers:           c.n,
			LRUEntries:        m.entries,
			ThresholdPercent:  m.threshold * 100,
			LRUBitsPerEntry:   m.lruBits,
			BitsPerFile:       m.bits,
			L1Admission:       m.admission.String(),
			HitRate:           rate(m.l1Hits+m.l2Hits, m.lookups),
			LRUHitRate:        rate(m.l1Hits, m.lookups),
			L2HitRate:         rate(m.l2Hits, m.lookups),
			L1FalseHits:       rate(m.l1False, m.lookups),
			L2FalseHits:       rate(m.l2False, m.lookups),
			PBA8HitRate:       b[0].res.SimHitRate,
			PBA12HitRate:      b[1].res.SimHitRate,
			PBA16HitRate:      b[2].res.SimHitRate,
			HBAMemoryVsPBA8:   m.memRatio,
			PBA12MemoryVsPBA8: float64(b[1].geo.M) / float64(b[0].geo.M),
			PBA16MemoryVsPBA8: float64(b[2].geo.M) / float64(b[0].geo.M),
			LRUListBytes:      m.listBytes,
			L1Messages:        l1,
			L2Messages:        l2,
			UpdateMessages:    l1 + l2,
		}
		if c.stats.TraceSeconds > 0 {
			res.MessagesPerSecond = float64(l1+l2) / c.stats.TraceSeconds
		}
		out[i] = res
	}
	return out, nil
}
