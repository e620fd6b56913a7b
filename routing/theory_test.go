package routing

import (
	"math"
	"testing"
)

func near(t *testing.T, name string, got, want, tol float64) {
	t.Helper()
	if math.Abs(got-want) > tol {
		t.Errorf("%s = %.10g, want %.10g (±%g)", name, got, want, tol)
	}
}

func TestTheoryOptimalFalseRate(t *testing.T) {
	for _, tc := range []struct {
		bits, want float64
	}{
		{0, 1},
		{1, 0.6185},
		{2, 0.6185 * 0.6185},
		{8, 0.021414978},
		{16, 4.5860128e-4},
		{20, 6.7111057e-5},
	} {
		near(t, "OptimalFalseRate", OptimalFalseRate(tc.bits), tc.want, tc.want*1e-3)
	}
	// The optimal-k false rate (1 − e^(−k n/m))^k approaches 0.6185^(m/n)
	// when k = (m/n) ln 2 is an integer-ish value.
	for _, bits := range []float64{8, 10, 16, 20, 32} {
		k := OptimalHashes(bits)
		got, opt := FalseRate(bits, k), OptimalFalseRate(bits)
		if got < opt*0.98 || got > opt*1.15 {
			t.Errorf("FalseRate(%v, %d) = %g, optimal %g", bits, k, got, opt)
		}
		// k is optimal among integers.
		for _, kk := range []int{k - 1, k + 1} {
			if kk >= 1 && FalseRate(bits, kk) < got {
				t.Errorf("FalseRate(%v, %d) = %g < FalseRate(k=%d) = %g", bits, kk, FalseRate(bits, kk), k, got)
			}
		}
	}
	near(t, "FalseRate(8,0)", FalseRate(8, 0), FalseRate(8, OptimalHashes(8)), 0)
	near(t, "FalseRate(8,1)", FalseRate(8, 1), 1-math.Exp(-1.0/8), 1e-15)
}

func TestTheoryHitOldFile(t *testing.T) {
	for _, tc := range []struct {
		p    int
		bits float64
		want float64
		tol  float64
	}{
		{1, 8, 1, 0},
		// HBA §4.2.1: "if there are 200 MSs ..., 16 bits per file are
		// required ... to maintain a hit rate of approximately 90 percent
		// for old files".
		{200, 16, 0.9128, 5e-4},
		{100, 16, 0.9556, 5e-4},
		{10, 8, math.Pow(1-math.Pow(0.6185, 8), 9), 1e-12},
		{100, 8, math.Pow(1-math.Pow(0.6185, 8), 99), 1e-12},
	} {
		near(t, "HitOldFile", HitOldFile(tc.p, tc.bits), tc.want, tc.tol)
	}
	if h := HitOldFile(200, 16); h < 0.88 || h > 0.93 {
		t.Errorf("HitOldFile(200, 16) = %g, paper says ≈ 90%%", h)
	}
	// More filters, lower hit rate; more bits, higher hit rate.
	for p := 2; p < 500; p += 37 {
		if HitOldFile(p+1, 12) >= HitOldFile(p, 12) {
			t.Fatalf("HitOldFile not decreasing in p at %d", p)
		}
	}
	for b := 1.0; b < 40; b++ {
		if HitOldFile(100, b+1) <= HitOldFile(100, b) {
			t.Fatalf("HitOldFile not increasing in m/n at %v", b)
		}
	}
	near(t, "HitOldFileK", HitOldFileK(50, 10, 3), math.Pow(1-FalseRate(10, 3), 49), 1e-12)
}

func TestTheoryFalseNewFile(t *testing.T) {
	// HBA §4.2.1: with 200 MSs and 16 bits per file, the false-hit rate for
	// new files is about 10 percent.
	if f := FalseNewFile(200, 16); f < 0.07 || f > 0.11 {
		t.Errorf("FalseNewFile(200, 16) = %g, paper says ≈ 10%%", f)
	}
	for _, tc := range []struct {
		p    int
		bits float64
	}{{10, 4}, {100, 8}, {1000, 16}} {
		f := math.Pow(0.6185, tc.bits)
		near(t, "FalseNewFile", FalseNewFile(tc.p, tc.bits), float64(tc.p)*f*math.Pow(1-f, float64(tc.p-1)), 1e-12)
	}
	near(t, "FalseNewFileK", FalseNewFileK(20, 8, 4), 20*FalseRate(8, 4)*math.Pow(1-FalseRate(8, 4), 19), 1e-12)
	near(t, "FalseNewFile(0)", FalseNewFile(0, 8), 0, 0)
}

func TestTheoryFalseNewFileMax(t *testing.T) {
	prev := 1.0
	for _, p := range []int{2, 3, 5, 10, 30, 100, 200, 1000, 10000, 1000000} {
		bits, val := FalseNewFileMax(p)
		lnp := math.Log(float64(p))
		// The paper's constant 2.0792 and the exact 1/ln(1/0.6185) = 2.0813.
		near(t, "argmax/ln p", bits/lnp, 2.0792, 0.003)
		near(t, "max value", val, math.Pow(1-1/float64(p), float64(p-1)), 1e-9)
		near(t, "FalseNewFile at argmax", FalseNewFile(p, bits), val, 1e-9)
		if val > prev || val < 1/math.E {
			t.Errorf("p=%d: max %g not decreasing towards 1/e (prev %g)", p, val, prev)
		}
		prev = val
		// Numerically the peak: a fine scan finds nothing higher and the
		// scan's argmax sits at the returned ratio.
		best, bestBits := 0.0, 0.0
		for b := 0.0; b <= 3*bits+10; b += 0.001 {
			if v := FalseNewFile(p, b); v > best {
				best, bestBits = v, b
			}
		}
		if best > val+1e-12 {
			t.Errorf("p=%d: scan found %g at %g above max %g at %g", p, best, bestBits, val, bits)
		}
		near(t, "scan argmax", bestBits, bits, 0.002)
	}
	near(t, "limit", prev, 1/math.E, 1e-6)
	if b, v := FalseNewFileMax(1); b != 0 || v != 1 {
		t.Errorf("FalseNewFileMax(1) = %v, %v", b, v)
	}
}

func TestTheorySegmentFalsePositive(t *testing.T) {
	// f_g+ = θ f0 (1 − f0)^(θ−1), G-HBA §2.2.
	for _, tc := range []struct {
		theta int
		bits  float64
	}{{1, 8}, {3, 8}, {10, 16}, {33, 12}} {
		f0 := math.Pow(0.6185, tc.bits)
		want := float64(tc.theta) * f0 * math.Pow(1-f0, float64(tc.theta-1))
		near(t, "SegmentFalsePositive", SegmentFalsePositive(tc.theta, tc.bits), want, 1e-15)
	}
	// Storing θ = (N−M)/M replicas instead of N lets a server afford more
	// bits per file: 100 servers in groups of 10 → θ = 9; at 16 bits per file
	// f_g+ is far below the whole-array false-hit rate at 8 bits.
	if a, b := SegmentFalsePositive(9, 16), FalseNewFile(100, 8); a > b/50 {
		t.Errorf("f_g+(9,16) = %g not ≪ (1/50) false_newfile(100,8) = %g", a, b)
	}
}

func TestTheoryLatencyModel(t *testing.T) {
	base := LatencyModel{PLRU: 0.6, PL2: 0.9, DLRU: 1, DL2: 2, DGroup: 10, DNet: 100, M: 5}
	for _, tc := range []struct {
		name string
		l    LatencyModel
		want float64
	}{
		{"full group", base, 1 + 0.4*2 + 0.4*(1-0.9/5)*10 + 0.4*(1-0.9)*100},
		{"M'=M explicit", func() LatencyModel { l := base; l.MPrime = 5; return l }(), 1 + 0.4*2 + 0.4*(1-0.9/5)*10 + 0.4*(1-0.9)*100},
		{"M'<M", func() LatencyModel { l := base; l.MPrime = 3; return l }(), 1 + 0.4*2 + 0.4*(1-0.9/5)*10 + 0.4*(1-0.9*3/5)*100},
		{"all L1 hits", func() LatencyModel { l := base; l.PLRU = 1; return l }(), 1},
		{"no hits", func() LatencyModel { l := base; l.PLRU, l.PL2 = 0, 0; return l }(), 1 + 2 + 10 + 100},
		{"M=1 perfect L2", LatencyModel{PL2: 1, DLRU: 1, DL2: 2, DGroup: 10, DNet: 100, M: 1}, 1 + 2},
		{"clamped", LatencyModel{PLRU: -1, PL2: 2, DLRU: 1, DL2: 2, DGroup: 10, DNet: 100, M: 2}, 1 + 2 + 0.5*10},
	} {
		near(t, tc.name, tc.l.Latency(), tc.want, 1e-12)
	}
}

func TestTheorySpaceAndGamma(t *testing.T) {
	near(t, "SpaceOverhead(100,10)", SpaceOverhead(100, 10), 9, 0)
	near(t, "SpaceOverhead(30,4)", SpaceOverhead(30, 4), 6.5, 0)
	if !math.IsInf(SpaceOverhead(10, 0), 1) {
		t.Error("SpaceOverhead(10,0) not +Inf")
	}
	near(t, "Γ", NormalizedThroughput(2, 9), 1.0/18, 1e-15)
	if !math.IsInf(NormalizedThroughput(2, 0), 1) {
		t.Error("Γ with no space overhead not +Inf")
	}
}

// gammaModel stands in for the measured latencies of G-HBA §3.3: the
// group multicast gets steeply slower as the group grows (G-HBA §2.5: "a
// larger M typically leads to a larger penalty"). With eq. 2 as printed the
// space term (N−M)/M vanishes at M = N, so only a latency that grows faster
// than M/(N−M) gives an interior optimum like the paper's M = 5…9.
func gammaModel(m int) float64 {
	return LatencyModel{
		PLRU: 0.7, PL2: 0.95,
		DLRU: 0.2, DL2: 0.5,
		DGroup: 0.5 * math.Pow(1.4, float64(m)), DNet: 50,
		M: m,
	}.Latency()
}

func TestTheoryGammaArgmax(t *testing.T) {
	var ms []int
	for _, n := range []int{30, 100, 1000} {
		m, g := OptimalGroupSize(n, gammaModel)
		if m < 3 || m > 12 {
			t.Errorf("N=%d: optimal M=%d, want an interior optimum in 3..12", n, m)
		}
		// Γ rises up to M* and falls after it (until the vanishing space
		// term makes it rise again next to M = N, still far below Γ(M*)).
		for c := 1; c < n/2; c++ {
			a := NormalizedThroughput(gammaModel(c), SpaceOverhead(n, c))
			b := NormalizedThroughput(gammaModel(c+1), SpaceOverhead(n, c+1))
			if c < m && b <= a || c >= m && b >= a {
				t.Errorf("N=%d: Γ(%d)=%g Γ(%d)=%g around M*=%d", n, c, a, c+1, b, m)
			}
		}
		near(t, "Γ(M*)", g, NormalizedThroughput(gammaModel(m), SpaceOverhead(n, m)), 0)
		t.Logf("N=%d: M*=%d Γ=%.4g", n, m, g)
		ms = append(ms, m)
	}
	// G-HBA Fig. 3: the optimal M is not very sensitive to N.
	if d := ms[0] - ms[len(ms)-1]; d < -2 || d > 2 {
		t.Errorf("optimal M varies too much with N: %v", ms)
	}
	// With penalties that do not grow with M, only the space term matters
	// and the largest group wins.
	flat := func(m int) float64 {
		return LatencyModel{PLRU: 0.7, PL2: 0.95, DLRU: 0.2, DL2: 0.5, DGroup: 5, DNet: 50, M: m}.Latency()
	}
	if m, _ := OptimalGroupSize(30, flat); m != 29 {
		t.Errorf("flat penalties: M*=%d, want 29", m)
	}
	if m, g := OptimalGroupSize(1, flat); m != 0 || g != 0 {
		t.Errorf("OptimalGroupSize(1) = %d, %g", m, g)
	}
}
