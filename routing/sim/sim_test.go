package sim

import (
	"bytes"
	"context"
	"errors"
	"math"
	"reflect"
	"testing"

	"github.com/ghba/ghba/routing"
	"github.com/ghba/ghba/routing/workload"
)

// smallTrace is a fast generated trace with the default operation mix.
func smallTrace(files, ops int, seed int64) workload.Config {
	cfg := workload.DefaultConfig()
	cfg.Files, cfg.Dirs, cfg.Ops, cfg.Seed = files, files/10, ops, seed
	return cfg
}

// uniformTrace draws every access uniformly (no hot set, no locality), so
// that the hit rate over lookups is an average over many files and can be
// held to the theory tightly.
func uniformTrace(files, ops int, seed int64) workload.Config {
	cfg := smallTrace(files, ops, seed)
	cfg.HotShare, cfg.Locality = 1e-9, 0 // a zero HotShare would mean the default
	return cfg
}

func TestPBAMatchesTheory(t *testing.T) {
	tests := []struct {
		name    string
		servers int
		bits    float64
		hashes  int
	}{
		{"10 servers 8 bits", 10, 8, 0},
		{"10 servers 12 bits", 10, 12, 0},
		{"30 servers 8 bits", 30, 8, 0},
		{"30 servers 6 bits k=3", 30, 6, 3},
		{"50 servers 16 bits", 50, 16, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := Replay{Source: GeneratedSource(uniformTrace(20000, 40000, 7), 1), Servers: tc.servers, Seed: 3}
			rs, err := PBA(context.Background(), r, PBAConfig{BitsPerFile: tc.bits, Hashes: tc.hashes})
			if err != nil {
				t.Fatal(err)
			}
			got := rs[0]
			// The theory with the filters' measured fill is the tight check
			// (the namespace grows a little during the trace); the paper's
			// formula at the nominal bits per file is the loose one.
			if d := math.Abs(got.SimHitRate - got.TheoryHitRateFill); d > 0.02 {
				t.Errorf("hit rate %.4f, fill theory %.4f", got.SimHitRate, got.TheoryHitRateFill)
			}
			if d := math.Abs(got.SimHitRate - got.TheoryHitRate); d > 0.04 {
				t.Errorf("hit rate %.4f, theory %.4f", got.SimHitRate, got.TheoryHitRate)
			}
			if d := math.Abs(got.SimFalseNew - got.TheoryFalseNewFill); d > 0.04 {
				t.Errorf("false-new rate %.4f, fill theory %.4f", got.SimFalseNew, got.TheoryFalseNewFill)
			}
			if got.ZeroHitRate != 0 || got.WrongHitRate != 0 {
				t.Errorf("exact replicas gave zero hits %.4f, wrong hits %.4f", got.ZeroHitRate, got.WrongHitRate)
			}
			t.Logf("sim %.4f fill %.4f theory %.4f; new sim %.4f fill %.4f theory %.4f", got.SimHitRate, got.TheoryHitRateFill, got.TheoryHitRate, got.SimFalseNew, got.TheoryFalseNewFill, got.TheoryFalseNew)
			if tc.hashes > 0 && got.Hashes != tc.hashes {
				t.Errorf("k = %d, want %d", got.Hashes, tc.hashes)
			}
			if got.Lookups == 0 || got.NewLookups == 0 {
				t.Errorf("no lookups: %+v", got.TraceStats)
			}
		})
	}
}

// TestFiltersMatchGroundTruth replays creates, deletes, renames and
// directory renames and checks that every server's local filter equals a
// filter rebuilt from the final namespace.
func TestFiltersMatchGroundTruth(t *testing.T) {
	cfg := smallTrace(5000, 30000, 11)
	cfg.DirRenameFrac, cfg.RmdirFrac = 0.01, 0.01
	m, err := newPBAModel(PBAConfig{BitsPerFile: 8})
	if err != nil {
		t.Fatal(err)
	}
	c, err := run(context.Background(), Replay{Source: GeneratedSource(cfg, 1), Servers: 7, Seed: 1}, m)
	if err != nil {
		t.Fatal(err)
	}
	if c.stats.Renames == 0 || c.stats.Deletes == 0 || c.stats.Creates == 0 {
		t.Fatalf("trace lacks renames, deletes or creates: %+v", c.stats)
	}
	want := make([]*routing.CountingFilter, c.n)
	for i := range want {
		want[i] = routing.NewCountingFilter(m.geo)
	}
	for p, h := range c.home {
		want[h].Add(p)
	}
	for i := range want {
		if !want[i].Filter().Equal(m.local[i].Filter()) {
			t.Errorf("server %d: local filter differs from its namespace", i)
		}
		col, err := m.arr.Column(c.ids[i])
		if err != nil {
			t.Fatal(err)
		}
		if !col.Equal(m.local[i].Filter()) {
			t.Errorf("server %d: replica differs from the owner's filter at threshold 0", i)
		}
	}
	if got := c.stats.FinalFiles; got != len(c.home) {
		t.Errorf("final files %d, namespace %d", got, len(c.home))
	}
}

func TestPBAThreshold(t *testing.T) {
	r := Replay{Source: GeneratedSource(smallTrace(10000, 40000, 5), 1), Servers: 10, Seed: 1}
	thresholds := []float64{0, 0.0001, 0.01, 1}
	cfgs := make([]PBAConfig, len(thresholds))
	for i, th := range thresholds {
		cfgs[i] = PBAConfig{BitsPerFile: 8, Threshold: th}
	}
	rs, err := PBA(context.Background(), r, cfgs...)
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i < len(rs); i++ {
		if rs[i].UpdateMessages > rs[i-1].UpdateMessages {
			t.Errorf("threshold %v%%: %d messages, more than %d at %v%%", rs[i].ThresholdPercent, rs[i].UpdateMessages, rs[i-1].UpdateMessages, rs[i-1].ThresholdPercent)
		}
	}
	if rs[0].ZeroHitRate != 0 {
		t.Errorf("threshold 0: zero-hit rate %v, want 0 (replicas exact)", rs[0].ZeroHitRate)
	}
	if last := rs[len(rs)-1]; last.UpdateMessages != 0 || last.ZeroHitRate == 0 {
		t.Errorf("threshold 100%%: %d messages, zero-hit rate %v; want no update and stale misses", last.UpdateMessages, last.ZeroHitRate)
	}
}

func TestHBA(t *testing.T) {
	r := Replay{Source: GeneratedSource(smallTrace(10000, 40000, 3), 1), Servers: 20, Seed: 2}
	rs, err := HBA(context.Background(), r, HBAConfig{LRUEntries: []int{0, 100}, Thresholds: []float64{0, 0.01}})
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 4 {
		t.Fatalf("%d results, want 4", len(rs))
	}
	for _, res := range rs {
		if res.LRUEntries == 0 {
			// An empty L1 never hits: HBA is its L2 alone, the PBA-8
			// baseline on the same pass.
			if res.LRUHitRate != 0 || res.HitRate != res.PBA8HitRate {
				t.Errorf("no LRU, threshold %v%%: HBA %v, LRU %v, PBA8 %v", res.ThresholdPercent, res.HitRate, res.LRUHitRate, res.PBA8HitRate)
			}
			continue
		}
		if res.HitRate <= res.PBA8HitRate || res.LRUHitRate <= 0.3 {
			t.Errorf("LRU %d, threshold %v%%: HBA %v, LRU %v, PBA8 %v", res.LRUEntries, res.ThresholdPercent, res.HitRate, res.LRUHitRate, res.PBA8HitRate)
		}
		if math.Abs(res.HitRate-res.LRUHitRate-res.L2HitRate) > 1e-9 {
			t.Errorf("HBA %v != L1 %v + L2 %v", res.HitRate, res.LRUHitRate, res.L2HitRate)
		}
		if res.HBAMemoryVsPBA8 <= 1 || res.PBA16MemoryVsPBA8 < 1.9 {
			t.Errorf("memory: HBA %v, PBA16 %v", res.HBAMemoryVsPBA8, res.PBA16MemoryVsPBA8)
		}
		if res.ThresholdPercent == 1 && res.L1Messages == 0 {
			t.Errorf("threshold 1%%: no LRU filter update")
		}
	}
}

func TestGHBALevels(t *testing.T) {
	tests := []struct {
		servers, m int
		threshold  float64
	}{
		{12, 4, 0},
		{20, 5, 0.01},
		{30, 6, 0.01},
		{31, 6, 0},
		{10, 1, 0.01}, // groups of one: HBA with its L3 empty
	}
	src := GeneratedSource(smallTrace(8000, 30000, 9), 1)
	for _, tc := range tests {
		r := Replay{Source: src, Servers: tc.servers, Seed: 4}
		rs, err := GHBA(context.Background(), r, GHBAConfig{MaxGroup: tc.m, LRUEntries: 50, Threshold: tc.threshold})
		if err != nil {
			t.Fatal(err)
		}
		res := rs[0]
		sum := 0.0
		for _, name := range levelNames {
			if res.Levels[name] < 0 {
				t.Errorf("N=%d M=%d: level %s share %v", tc.servers, tc.m, name, res.Levels[name])
			}
			sum += res.Levels[name]
		}
		if math.Abs(sum-1) > 1e-9 {
			t.Errorf("N=%d M=%d: levels sum to %v", tc.servers, tc.m, sum)
		}
		if res.GroupSizeMax > tc.m || res.GroupSizeMax-res.GroupSizeMin > 1 {
			t.Errorf("N=%d M=%d: group sizes %d..%d", tc.servers, tc.m, res.GroupSizeMin, res.GroupSizeMax)
		}
		// Every server holds the replicas its group assigned to it: the
		// group's members hold every outside server once.
		if want := float64(tc.servers*res.Groups-tc.servers) / float64(tc.servers); math.Abs(res.ReplicasMean-want) > 1e-9 {
			t.Errorf("N=%d M=%d: %v replicas per server, want %v", tc.servers, tc.m, res.ReplicasMean, want)
		}
		if res.ReplicasMax-res.ReplicasMin > 1+res.GroupSizeMax-res.GroupSizeMin {
			t.Errorf("N=%d M=%d: replicas %d..%d unbalanced", tc.servers, tc.m, res.ReplicasMin, res.ReplicasMax)
		}
		if tc.m == 1 && res.Levels["L3"] != 0 {
			t.Errorf("groups of one resolved %v at L3", res.Levels["L3"])
		}
		if res.Levels["L1"] < 0.3 {
			t.Errorf("N=%d M=%d: L1 share %v, want the LRU array to absorb the hot set", tc.servers, tc.m, res.Levels["L1"])
		}
	}
}

func TestGHBAMemory(t *testing.T) {
	tests := []struct {
		servers, m int
		paper      float64 // G-HBA Table 4
		paperLRU   float64 // HBA's extra over BFA8 in the same table
	}{
		{20, 5, 0.2002, 0.0002},
		{100, 9, 0.1121, 0.0010},
	}
	src := GeneratedSource(smallTrace(4000, 2000, 1), 1)
	for _, tc := range tests {
		rs, err := GHBA(context.Background(), Replay{Source: src, Servers: tc.servers, Seed: 1},
			GHBAConfig{MaxGroup: tc.m, LRUEntries: 20, Threshold: 0.01})
		if err != nil {
			t.Fatal(err)
		}
		res := rs[0]
		n, mp := float64(tc.servers), float64(tc.m)
		segment := ((n-mp)/mp + 1) / n
		if res.MemoryGroupSize != tc.m {
			t.Errorf("N=%d M=%d: memory measured on groups of %d", tc.servers, tc.m, res.MemoryGroupSize)
		}
		if math.Abs(res.MemoryVsBFA8-segment) > 1e-9 {
			t.Errorf("N=%d M=%d: segment memory %v, formula %v", tc.servers, tc.m, res.MemoryVsBFA8, segment)
		}
		if math.Abs(res.TotalMemoryVsBFA8-(segment+res.LRUMemoryVsBFA8)) > 1e-9 || math.Abs(res.TotalMemoryVsBFA8-res.TotalMemoryVsBFA8Formula) > 1e-9 {
			t.Errorf("N=%d M=%d: memory %v, formula %v + LRU %v", tc.servers, tc.m, res.TotalMemoryVsBFA8, segment, res.LRUMemoryVsBFA8)
		}
		// With the paper's LRU overhead the formula gives Table 4.
		if got := segment + tc.paperLRU; math.Abs(got-tc.paper) > 0.0005 {
			t.Errorf("N=%d M=%d: formula + paper LRU overhead = %.4f, paper %.4f", tc.servers, tc.m, got, tc.paper)
		}
	}
}

func TestMigration(t *testing.T) {
	tests := []struct{ servers, m int }{
		{20, 5}, {30, 6}, {50, 9}, {100, 9}, {200, 10}, {9, 9},
	}
	for _, tc := range tests {
		r, err := Migration(MigrationConfig{Servers: tc.servers, MaxGroup: tc.m})
		if err != nil {
			t.Fatal(err)
		}
		if r.HBA != tc.servers {
			t.Errorf("N=%d: HBA moved %d, want N", tc.servers, r.HBA)
		}
		mp := r.GroupSizeBefore
		if mp < 1 || mp >= tc.m+1 || r.Origins != tc.servers-mp {
			t.Errorf("N=%d M=%d: M'=%d, origins %d", tc.servers, tc.m, mp, r.Origins)
		}
		if math.Abs(float64(r.GHBA)-r.GHBAExpected) > 1 {
			t.Errorf("N=%d M=%d: G-HBA moved %d, want ≈ (N−M')/(M'+1) = %.2f", tc.servers, tc.m, r.GHBA, r.GHBAExpected)
		}
		if r.NewcomerReplicas != r.GHBA {
			t.Errorf("N=%d: newcomer holds %d after %d moves", tc.servers, r.NewcomerReplicas, r.GHBA)
		}
		if r.Hash < r.GHBA || math.Abs(float64(r.Hash)-r.HashExpected) > 4*math.Sqrt(r.HashExpected)+2 {
			t.Errorf("N=%d M=%d: hash placement moved %d, expected ≈ %.1f (G-HBA %d)", tc.servers, tc.m, r.Hash, r.HashExpected, r.GHBA)
		}
	}
	if _, err := Migration(MigrationConfig{Servers: 0, MaxGroup: 3}); !errors.Is(err, ErrConfig) {
		t.Errorf("0 servers: %v, want ErrConfig", err)
	}
}

func TestOptimalM(t *testing.T) {
	r := Replay{Source: GeneratedSource(smallTrace(20000, 60000, 1), 1), Servers: 30, Seed: 1}
	res, err := OptimalM(context.Background(), r, OptimalMConfig{GHBA: GHBAConfig{LRUEntries: 100, Threshold: 0.01}})
	if err != nil {
		t.Fatal(err)
	}
	if res.OptimalM < 3 || res.OptimalM > 12 {
		t.Errorf("optimal M for N=30 is %d, want within 3..12 (paper: 5–6)", res.OptimalM)
	}
	if len(res.Gamma) != len(SweepM(30, 0, 0)) || len(res.Runs) != len(res.Gamma) {
		t.Errorf("%d gamma values for sweep %v", len(res.Gamma), SweepM(30, 0, 0))
	}
	for k, g := range res.Gamma {
		if !(g > 0) || math.IsInf(g, 0) || !(res.GammaEq2[k] > 0) {
			t.Errorf("M=%s: gamma %v, eq2 %v", k, g, res.GammaEq2[k])
		}
	}
	if res.OptimalMEq2 != SweepM(30, 0, 0)[len(SweepM(30, 0, 0))-1] {
		t.Logf("eq. 2 optimum %d is not the largest M swept", res.OptimalMEq2)
	}
}

func TestSweepM(t *testing.T) {
	tests := []struct {
		n, lo, hi int
		want      []int
	}{
		{30, 0, 0, []int{2, 3, 4, 5, 6, 8, 10}},
		{10, 1, 9, []int{1, 2, 3, 4, 5}}, // M = 6..9 also make two groups of 5
		{100, 8, 10, []int{8, 9, 10}},
		{5, 2, 40, []int{2, 3}},
		{2, 0, 0, []int{1}},
	}
	for _, tc := range tests {
		got := SweepM(tc.n, tc.lo, tc.hi)
		if len(got) != len(tc.want) {
			t.Errorf("SweepM(%d, %d, %d) = %v, want %v", tc.n, tc.lo, tc.hi, got, tc.want)
			continue
		}
		for i := range got {
			if got[i] != tc.want[i] {
				t.Errorf("SweepM(%d, %d, %d) = %v, want %v", tc.n, tc.lo, tc.hi, got, tc.want)
				break
			}
		}
	}
}

func TestGroups(t *testing.T) {
	for n := 1; n <= 40; n++ {
		for m := 1; m <= 12; m++ {
			gs := Groups(n, m)
			seen := make(map[int]bool)
			lo, hi := n, 0
			for _, g := range gs {
				lo, hi = min(lo, len(g)), max(hi, len(g))
				for _, s := range g {
					if seen[s] {
						t.Fatalf("Groups(%d, %d): server %d twice", n, m, s)
					}
					seen[s] = true
				}
			}
			if len(seen) != n || hi > m || hi-lo > 1 || len(gs) != (n+m-1)/m {
				t.Fatalf("Groups(%d, %d) = %v", n, m, gs)
			}
		}
	}
}

// TestReaderSource replays a trace written in the text format and expects
// exactly the result of the generator it came from.
func TestReaderSource(t *testing.T) {
	cfg := smallTrace(3000, 8000, 2)
	var buf bytes.Buffer
	w := workload.NewWriter(&buf)
	if err := workload.Intensify(2, cfg, w.Write); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	want, err := PBA(context.Background(), Replay{Source: GeneratedSource(cfg, 2), Servers: 8, Seed: 1}, PBAConfig{BitsPerFile: 8})
	if err != nil {
		t.Fatal(err)
	}
	src := ReaderSource(bytes.NewReader(buf.Bytes()))
	got, err := PBA(context.Background(), Replay{Source: src, Servers: 8, Seed: 1}, PBAConfig{BitsPerFile: 8})
	if err != nil {
		t.Fatal(err)
	}
	if got[0].SimHitRate != want[0].SimHitRate || got[0].Records != want[0].Records || got[0].Lookups != want[0].Lookups {
		t.Errorf("replayed %+v, generated %+v", got[0].TraceStats, want[0].TraceStats)
	}
	if _, err := PBA(context.Background(), Replay{Source: src, Servers: 8}, PBAConfig{BitsPerFile: 8}); !errors.Is(err, ErrSourceUsed) {
		t.Errorf("second pass over a reader: %v, want ErrSourceUsed", err)
	}
	bad := ReaderSource(bytes.NewReader([]byte("0 1 exists /a\nnot a record\n")))
	if _, err := PBA(context.Background(), Replay{Source: bad, Servers: 2}, PBAConfig{BitsPerFile: 8}); err == nil {
		t.Error("malformed trace accepted")
	}
}

func TestCanceled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r := Replay{Source: GeneratedSource(smallTrace(50000, 200000, 1), 1), Servers: 10}
	if _, err := PBA(ctx, r, PBAConfig{BitsPerFile: 8}); !errors.Is(err, context.Canceled) {
		t.Errorf("canceled run: %v, want context.Canceled", err)
	}
}

func TestBadConfig(t *testing.T) {
	src := GeneratedSource(smallTrace(100, 10, 1), 1)
	ctx := context.Background()
	if _, err := PBA(ctx, Replay{Source: src, Servers: 0}, PBAConfig{BitsPerFile: 8}); !errors.Is(err, ErrConfig) {
		t.Errorf("0 servers: %v", err)
	}
	if _, err := PBA(ctx, Replay{Source: src, Servers: 3}, PBAConfig{BitsPerFile: -1}); !errors.Is(err, ErrConfig) {
		t.Errorf("negative bits: %v", err)
	}
	if _, err := GHBA(ctx, Replay{Source: src, Servers: 3}, GHBAConfig{MaxGroup: 0}); !errors.Is(err, ErrConfig) {
		t.Errorf("max group 0: %v", err)
	}
	if _, err := HBA(ctx, Replay{Source: src, Servers: 3}, HBAConfig{}); !errors.Is(err, ErrConfig) {
		t.Errorf("no LRU size: %v", err)
	}
}

func TestMean(t *testing.T) {
	type Inner struct{ X float64 }
	type res struct {
		Inner
		A float64
		N int
		M map[string]float64
	}
	got := Mean([]res{
		{Inner{1}, 2, 7, map[string]float64{"a": 1}},
		{Inner{3}, 4, 9, map[string]float64{"a": 3}},
	})
	if got.X != 2 || got.A != 3 || got.N != 7 || got.M["a"] != 2 {
		t.Errorf("Mean = %+v", got)
	}
	if z := Mean[res](nil); z.A != 0 || z.M != nil {
		t.Errorf("Mean(nil) = %+v", z)
	}
}

// TestDeterministic replays the same seed twice: every figure must repeat
// exactly (renames and deletes of directories touch whole subtrees, whose
// order must not depend on map iteration).
func TestDeterministic(t *testing.T) {
	cfg := smallTrace(8000, 30000, 11)
	cfg.DirRenameFrac = 0.01
	cfg.RmdirFrac = 0.01
	runOnce := func() []GHBAResult {
		rs, err := GHBA(context.Background(), Replay{Source: GeneratedSource(cfg, 2), Servers: 12, Seed: 5},
			GHBAConfig{MaxGroup: 4, LRUEntries: 100})
		if err != nil {
			t.Fatal(err)
		}
		return rs
	}
	a, b := runOnce(), runOnce()
	if !reflect.DeepEqual(a, b) {
		t.Errorf("two replays of one seed differ:\n%+v\n%+v", a[0].Levels, b[0].Levels)
	}
}
