package sim

import (
	"context"
	"errors"
	"fmt"
	"math"
	"testing"
)

// spillTrace is a small generated trace (seed 33), tif disjoint copies of
// files and ops replayed together.
func spillTrace(files, ops, tif int) Source {
	return GeneratedSource(smallTrace(files, ops, 33), tif)
}

// TestSpillLatency: with every replica in memory HBA is slightly faster
// than G-HBA (G-HBA §3.2: "HBA outperforms G-HBA slightly"); as memory
// drops below HBA's N−1 replicas HBA's latency rises with every spilled
// replica while G-HBA's stays put until memory drops below its segment.
func TestSpillLatency(t *testing.T) {
	tests := []struct {
		n, m int
		bits float64
	}{
		{10, 4, 8},
		{20, 5, 8},
		{40, 8, 8},
		{40, 8, 16},
	}
	src := spillTrace(4000, 16000, 1)
	for _, tc := range tests {
		t.Run(fmt.Sprintf("N=%d M=%d bits=%v", tc.n, tc.m, tc.bits), func(t *testing.T) {
			rb := replicaBytes(t, src, tc.n, tc.bits)
			_, seg := SegmentReplicas(tc.n, tc.m)
			all := int64(tc.n-1) * rb
			segBytes := int64(seg) * rb
			memory := []int64{
				2 * all,         // 0: everything fits, room to spare
				all,             // 1: exactly HBA's replicas
				all - 1,         // 2: one HBA replica on disk
				all / 2,         // 3: about half of HBA's on disk
				segBytes,        // 4: exactly the largest segment
				segBytes - rb,   // 5: one segment replica on disk
				segBytes - 2*rb, // 6: two
				0,               // 7: everything on disk
			}
			d := DefaultDelays
			res, err := Spill(context.Background(), Replay{Source: src, Servers: tc.n, Seed: 3},
				SpillConfig{GHBA: GHBAConfig{MaxGroup: tc.m, LRUEntries: 60, BitsPerFile: tc.bits, Threshold: 0.01}, Memory: memory, Delays: d})
			if err != nil {
				t.Fatal(err)
			}
			if res.ReplicaBytes != rb || res.HBAReplicas != tc.n-1 || res.GHBAReplicasMax != seg || res.DiskMs != DefaultDiskDelay {
				t.Fatalf("replica %d bytes (want %d), HBA %d replicas, G-HBA at most %d (want %d), disk %v ms",
					res.ReplicaBytes, rb, res.HBAReplicas, res.GHBAReplicasMax, seg, res.DiskMs)
			}
			p := res.Points
			for i, pt := range p {
				if want := max(0, tc.n-1-int(memory[i]/rb)); pt.HBASpilled != want {
					t.Errorf("memory %d: HBA spilled %d, want %d", memory[i], pt.HBASpilled, want)
				}
			}
			if p[0].HBALatency != p[1].HBALatency || p[0].GHBALatency != p[1].GHBALatency {
				t.Errorf("spare memory changed the latency: %+v vs %+v", p[0], p[1])
			}
			if want := HBALatency(res.HBA, tc.n, d, 0); p[1].HBALatency != want {
				t.Errorf("HBA latency %v without spill, want %v", p[1].HBALatency, want)
			}
			if p[1].HBALatency > p[1].GHBALatency {
				t.Errorf("no spill: HBA %.4f ms above G-HBA %.4f ms (rates HBA %+v, G-HBA %+v)", p[1].HBALatency, p[1].GHBALatency, res.HBA, res.GHBA)
			}
			// One spilled replica costs one disk access per L2 probe.
			if got, want := p[2].HBALatency-p[1].HBALatency, (1-res.HBA.PLRU)*DefaultDiskDelay; math.Abs(got-want) > 1e-9 {
				t.Errorf("one spilled replica adds %v ms, want (1−P_LRU)·D_disk = %v", got, want)
			}
			for i := 2; i < len(p); i++ {
				if p[i].HBALatency < p[i-1].HBALatency {
					t.Errorf("HBA latency fell from %v to %v as memory shrank to %d", p[i-1].HBALatency, p[i].HBALatency, memory[i])
				}
			}
			if p[3].HBALatency < p[1].HBALatency+float64(p[3].HBASpilled)*(1-res.HBA.PLRU)*DefaultDiskDelay-1e-9 || p[3].HBASpilled < (tc.n-1)/2 {
				t.Errorf("half the memory: HBA %v ms with %d spilled, %v ms without", p[3].HBALatency, p[3].HBASpilled, p[1].HBALatency)
			}
			for i := 0; i <= 4; i++ {
				if p[i].GHBASpilledMax != 0 || p[i].GHBALatency != p[0].GHBALatency {
					t.Errorf("memory %d holds every segment: G-HBA spilled %d, %v ms (want %v)", memory[i], p[i].GHBASpilledMax, p[i].GHBALatency, p[0].GHBALatency)
				}
			}
			if p[5].GHBASpilledMax != 1 || !(p[5].GHBALatency > p[4].GHBALatency) || !(p[6].GHBALatency > p[5].GHBALatency) {
				t.Errorf("segments spill: %+v, %+v, %+v", p[4], p[5], p[6])
			}
			if p[7].GHBASpilledMean != res.GHBAReplicasMean || p[7].HBALatency <= p[7].GHBALatency {
				t.Errorf("no memory: G-HBA spilled %v of %v, HBA %v ms, G-HBA %v ms", p[7].GHBASpilledMean, res.GHBAReplicasMean, p[7].HBALatency, p[7].GHBALatency)
			}
			t.Logf("rates HBA %+v G-HBA %+v; latency ms: all %.4f/%.4f, half %.4f/%.4f, none %.4f/%.4f",
				res.HBA, res.GHBA, p[1].HBALatency, p[1].GHBALatency, p[3].HBALatency, p[3].GHBALatency, p[7].HBALatency, p[7].GHBALatency)
		})
	}
}

// TestSpillIntensity: the shape of G-HBA Fig. 4. Intensifying the trace
// (disjoint copies replayed together) grows the filters, so a fixed memory
// that holds every HBA replica at low intensity spills at high intensity;
// G-HBA's segments still fit and HBA loses its lead.
func TestSpillIntensity(t *testing.T) {
	const n, m = 20, 5
	ctx := context.Background()
	// The memory of HBA's replicas at intensity 2.
	memory := int64(n-1) * replicaBytes(t, spillTrace(1500, 4500, 2), n, 8)
	tests := []struct {
		tif int
		// spill says whether HBA spills at this intensity.
		spill bool
	}{{1, false}, {2, false}, {4, true}, {6, true}}
	var prev *SpillResult
	for _, tc := range tests {
		res, err := Spill(ctx, Replay{Source: spillTrace(1500, 4500, tc.tif), Servers: n, Seed: 4},
			SpillConfig{GHBA: GHBAConfig{MaxGroup: m, LRUEntries: 40, Threshold: 0.01}, Memory: []int64{memory}})
		if err != nil {
			t.Fatal(err)
		}
		pt := res.Points[0]
		if got := pt.HBASpilled > 0; got != tc.spill {
			t.Errorf("TIF %d: HBA spilled %d replicas of %d bytes into %d bytes", tc.tif, pt.HBASpilled, res.ReplicaBytes, memory)
		}
		if pt.GHBASpilledMax != 0 {
			t.Errorf("TIF %d: G-HBA spilled %d", tc.tif, pt.GHBASpilledMax)
		}
		if tc.spill != (pt.HBALatency > pt.GHBALatency) {
			t.Errorf("TIF %d: HBA %.4f ms, G-HBA %.4f ms (spill %v)", tc.tif, pt.HBALatency, pt.GHBALatency, tc.spill)
		}
		if prev != nil {
			pp := prev.Points[0]
			if res.ReplicaBytes <= prev.ReplicaBytes || pt.HBASpilled < pp.HBASpilled {
				t.Errorf("TIF %d: replica %d bytes, %d spilled; before %d bytes, %d spilled", tc.tif, res.ReplicaBytes, pt.HBASpilled, prev.ReplicaBytes, pp.HBASpilled)
			}
			if pt.HBALatency/pt.GHBALatency < pp.HBALatency/pp.GHBALatency-0.02 {
				t.Errorf("TIF %d: HBA/G-HBA %.4f, before %.4f", tc.tif, pt.HBALatency/pt.GHBALatency, pp.HBALatency/pp.GHBALatency)
			}
		}
		t.Logf("TIF %d: %d ops, replica %d B, HBA spilled %d: HBA %.4f ms, G-HBA %.4f ms", tc.tif, res.Lookups, res.ReplicaBytes, pt.HBASpilled, pt.HBALatency, pt.GHBALatency)
		prev = res
	}
}

// TestSpillSameRates: the pass that runs HBA and G-HBA together measures
// what HBA and GHBA measure on their own passes.
func TestSpillSameRates(t *testing.T) {
	ctx := context.Background()
	r := Replay{Source: spillTrace(3000, 9000, 1), Servers: 24, Seed: 7}
	cfg := GHBAConfig{MaxGroup: 6, LRUEntries: 50, BitsPerFile: 10, Threshold: 0.02}
	res, err := Spill(ctx, r, SpillConfig{GHBA: cfg, Memory: []int64{0}})
	if err != nil {
		t.Fatal(err)
	}
	hs, err := HBA(ctx, r, HBAConfig{LRUEntries: []int{50}, Thresholds: []float64{0.02}, BitsPerFile: 10})
	if err != nil {
		t.Fatal(err)
	}
	gs, err := GHBA(ctx, r, cfg)
	if err != nil {
		t.Fatal(err)
	}
	h, g := hs[0], gs[0]
	want := []struct {
		name      string
		got, want float64
	}{
		{"HBA P_LRU", res.HBA.PLRU, h.LRUHitRate},
		{"HBA P_L2", res.HBA.PL2, h.L2HitRate / (1 - h.LRUHitRate)},
		{"G-HBA P_LRU", res.GHBA.PLRU, g.PLRU},
		{"G-HBA P_L2", res.GHBA.PL2, g.PL2},
		{"G-HBA replicas", res.GHBAReplicasMean, g.ReplicasMean},
		{"replica bytes", float64(res.ReplicaBytes), float64(g.ReplicaBytes)},
		{"lookups", float64(res.Lookups), float64(g.Lookups)},
	}
	for _, w := range want {
		if math.Abs(w.got-w.want) > 1e-12 {
			t.Errorf("%s = %v, alone %v", w.name, w.got, w.want)
		}
	}
}

func TestHBALatency(t *testing.T) {
	d := Delays{Mem: 0.01, RTT: 0.3, PerMsg: 0.05}
	tests := []struct {
		rates SchemeRates
		n     int
		extra float64
		want  float64
	}{
		// D_LRU + (1−P_LRU)·D_L2 + (1−P_LRU)(1−P_L2)·D_net, D_net = 0.3 + 0.05·(N−1).
		{SchemeRates{PLRU: 1, PL2: 0}, 10, 5, 0.01},
		{SchemeRates{PLRU: 0, PL2: 1}, 10, 0, 0.02},
		{SchemeRates{PLRU: 0, PL2: 0}, 10, 0, 0.02 + 0.75},
		{SchemeRates{PLRU: 0.5, PL2: 0.5}, 21, 2, 0.01 + 0.5*2.01 + 0.25*1.3},
		{SchemeRates{PLRU: 0.9, PL2: 0.1}, 100, 0, 0.01 + 0.1*0.01 + 0.09*5.25},
	}
	for _, tc := range tests {
		if got := HBALatency(tc.rates, tc.n, d, tc.extra); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("%+v N=%d extra %v: %v, want %v", tc.rates, tc.n, tc.extra, got, tc.want)
		}
	}
}

func TestSpillBadConfig(t *testing.T) {
	src := spillTrace(100, 10, 1)
	r := Replay{Source: src, Servers: 6}
	good := GHBAConfig{MaxGroup: 3, LRUEntries: 10}
	tests := []struct {
		name string
		cfg  SpillConfig
	}{
		{"no memory", SpillConfig{GHBA: good}},
		{"negative memory", SpillConfig{GHBA: good, Memory: []int64{-1}}},
		{"negative disk", SpillConfig{GHBA: good, Memory: []int64{0}, Disk: -1}},
		{"infinite disk", SpillConfig{GHBA: good, Memory: []int64{0}, Disk: math.Inf(1)}},
		{"negative delay", SpillConfig{GHBA: good, Memory: []int64{0}, Delays: Delays{RTT: -1}}},
		{"budget", SpillConfig{GHBA: GHBAConfig{MaxGroup: 3, MemoryBudget: 100}, Memory: []int64{0}}},
		{"max group 0", SpillConfig{GHBA: GHBAConfig{}, Memory: []int64{0}}},
	}
	for _, tc := range tests {
		if _, err := Spill(context.Background(), r, tc.cfg); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: %v, want ErrConfig", tc.name, err)
		}
	}
}
