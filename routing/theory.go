package routing

import "math"

// This file holds the analytical models of the papers: the hit and false-hit
// rates of a pure Bloom filter array (HBA §4.2.1), the false-positive rate of
// a G-HBA segment array (G-HBA §2.2) and the normalized-throughput model used
// to choose the group size M (G-HBA §2.5, equations 1–3). The simulator
// plots its measurements against these curves.

// BloomBase is the false-positive rate of a standard Bloom filter with the
// optimal number of hash functions at one bit per element: (1/2)^(ln 2),
// which the papers round to 0.6185. The false rate at m/n bits per element is
// BloomBase^(m/n) (HBA §4.2.1, after Fan et al.).
const BloomBase = 0.6185

// OptimalFalseRate is the false-positive rate of a standard Bloom filter of
// bitsPerFile = m/n bits per element using the optimal k = (m/n)·ln 2:
// f0 = 0.6185^(m/n) (HBA §4.2.1).
func OptimalFalseRate(bitsPerFile float64) float64 {
	if bitsPerFile <= 0 {
		return 1
	}
	return math.Pow(BloomBase, bitsPerFile)
}

// FalseRate is the false-positive rate of a standard Bloom filter of
// bitsPerFile = m/n bits per element and k hash functions:
// (1 − e^(−k·n/m))^k. k < 1 is treated as the optimal k (OptimalHashes).
func FalseRate(bitsPerFile float64, k int) float64 {
	if bitsPerFile <= 0 {
		return 1
	}
	if k < 1 {
		k = OptimalHashes(bitsPerFile)
	}
	return math.Pow(-math.Expm1(-float64(k)/bitsPerFile), float64(k))
}

// hitOld is (1 − f)^(p−1) computed stably for tiny f.
func hitOld(p int, f float64) float64 {
	if p <= 1 {
		return 1
	}
	return math.Exp(float64(p-1) * math.Log1p(-f))
}

// falseNew is p·f·(1 − f)^(p−1).
func falseNew(p int, f float64) float64 {
	if p < 1 {
		return 0
	}
	return float64(p) * f * hitOld(p, f)
}

// HitOldFile is the expected unique-hit rate of an existing file in a pure
// Bloom filter array of p filters, all perfectly up to date, each with
// bitsPerFile bits per file and the optimal number of hash functions: the
// probability that none of the other p − 1 filters answers falsely,
// (1 − f)^(p−1) with f = 0.6185^(m/n) (HBA §4.2.1, eq. 1).
func HitOldFile(p int, bitsPerFile float64) float64 {
	return hitOld(p, OptimalFalseRate(bitsPerFile))
}

// HitOldFileK is HitOldFile with k hash functions: f = FalseRate(m/n, k).
func HitOldFileK(p int, bitsPerFile float64, k int) float64 {
	return hitOld(p, FalseRate(bitsPerFile, k))
}

// FalseNewFile is the expected false-hit rate of a file that exists nowhere
// (a new file) in a pure Bloom filter array of p filters: exactly one filter
// answers falsely, p·f·(1 − f)^(p−1) with f = 0.6185^(m/n) (HBA §4.2.1).
// Unlike a single filter's false rate it first grows with m/n and
// only falls after its maximum (see FalseNewFileMax).
func FalseNewFile(p int, bitsPerFile float64) float64 {
	return falseNew(p, OptimalFalseRate(bitsPerFile))
}

// FalseNewFileK is FalseNewFile with k hash functions: f = FalseRate(m/n, k).
func FalseNewFileK(p int, bitsPerFile float64, k int) float64 {
	return falseNew(p, FalseRate(bitsPerFile, k))
}

// FalseNewFileMax returns where FalseNewFile peaks for p filters and the
// peak value. The maximum is at f = 1/p, that is at
// m/n = ln p / ln(1/0.6185) ≈ 2.0814·ln p, and its value is (1 − 1/p)^(p−1),
// which decreases towards e^−1 ≈ 0.3679 as p grows (HBA §4.2.1).
//
// The paper prints the constant as 2.0792; solving 0.6185^(m/n) = 1/p gives
// 1/ln(1/0.6185) = 2.0814 (0.1% apart). This function returns the exact
// argmax of FalseNewFile, so FalseNewFile(p, bitsPerFile) == value.
// For p ≤ 1 there is no interior maximum: it returns (0, 1) for p = 1
// (f = 1 at m/n = 0) and (0, 0) for p < 1.
func FalseNewFileMax(p int) (bitsPerFile, value float64) {
	switch {
	case p < 1:
		return 0, 0
	case p == 1:
		return 0, 1
	}
	bitsPerFile = math.Log(float64(p)) / -math.Log(BloomBase)
	return bitsPerFile, hitOld(p, 1/float64(p))
}

// SegmentFalsePositive is f_g+, the probability that the segment Bloom
// filter array of one G-HBA server, holding theta replicas of bitsPerFile
// bits per file, returns a unique but false hit:
// f_g+ = C(θ,1)·f0·(1 − f0)^(θ−1) = θ·0.6185^(m/n)·(1 − 0.6185^(m/n))^(θ−1)
// (G-HBA §2.2). It is FalseNewFile with p = θ.
func SegmentFalsePositive(theta int, bitsPerFile float64) float64 {
	return FalseNewFile(theta, bitsPerFile)
}

// LatencyModel holds the inputs of G-HBA's latency model (G-HBA §2.5,
// eq. 3 and Table 1).
//
// The published equation is garbled in our text extraction; our reading is
//
//	U(laten.) = D_LRU
//	          + (1 − P_LRU)·D_L2
//	          + (1 − P_LRU)·(1 − P_L2/M)·D_group
//	          + (1 − P_LRU)·(1 − P_L2·M'/M)·D_net
//
// Every query probes the L1 (LRU) array; an L1 failure (probability
// 1 − P_LRU) probes the local L2 segment array; the local segment array
// holds about 1/M of the replicas, so it resolves the query with probability
// P_L2/M and otherwise the query is multicast within the group (D_group);
// the group's M' members together hold the fraction M'/M of what a full
// group holds, so the group resolves it with probability P_L2·M'/M and
// otherwise the query goes to the whole system (D_net). The extraction shows
// the last numerator as "P_L2 M" over "M"; elsewhere in the same extraction
// M' (the actual group size) loses its prime, so we read it as P_L2·M'/M,
// which reduces to P_L2 for a full group (M' = M): a query leaves the
// group exactly when the group's segment arrays together fail (§2.1).
type LatencyModel struct {
	PLRU   float64 // P_LRU: unique-hit rate of the L1 (LRU) Bloom filter array
	PL2    float64 // P_L2: unique-hit rate of the L2 (segment) Bloom filter arrays of a full group
	DLRU   float64 // D_LRU: latency of an L1 lookup
	DL2    float64 // D_L2: latency of an L2 lookup
	DGroup float64 // D_group: latency of a multicast within one group (L3)
	DNet   float64 // D_net: latency of a multicast to the entire system (L4)
	M      int     // maximum group size
	MPrime int     // actual group size M'; 0 means M (a full group)
}

// Latency evaluates U(laten.), G-HBA eq. 3 as read above. M < 1 is treated
// as 1 and M' is clamped to [1, M]; probabilities are clamped to [0, 1].
func (l LatencyModel) Latency() float64 {
	m := l.M
	if m < 1 {
		m = 1
	}
	mp := l.MPrime
	if mp <= 0 || mp > m {
		mp = m
	}
	pLRU, pL2 := clamp01(l.PLRU), clamp01(l.PL2)
	miss1 := 1 - pLRU
	local := pL2 / float64(m)               // resolved by this server's segment array
	group := pL2 * float64(mp) / float64(m) // resolved somewhere in the group
	return l.DLRU + miss1*l.DL2 + miss1*(1-local)*l.DGroup + miss1*(1-group)*l.DNet
}

func clamp01(x float64) float64 {
	switch {
	case x < 0 || math.IsNaN(x):
		return 0
	case x > 1:
		return 1
	}
	return x
}

// SpaceOverhead is U(space), G-HBA eq. 2: the number of replicas each of the
// M servers of a group stores, (N − M)/M, for n servers in all. It returns
// +Inf for m < 1.
func SpaceOverhead(n, m int) float64 {
	if m < 1 {
		return math.Inf(1)
	}
	return float64(n-m) / float64(m)
}

// NormalizedThroughput is Γ, G-HBA eq. 1: throughput per unit of memory,
// Γ = U(throu.)/U(space) = 1/(U(laten.)·U(space)). A zero product (no
// replicas to store, M = N) gives +Inf; a negative one gives 0.
func NormalizedThroughput(lat, space float64) float64 {
	d := lat * space
	if d <= 0 {
		if d == 0 {
			return math.Inf(1)
		}
		return 0
	}
	return 1 / d
}

// OptimalGroupSize returns the M in [1, n−1] that maximizes Γ for n servers
// (G-HBA §2.5: "the optimal value for M is the one that maximizes the Gamma
// function"), and that Γ. latency(M) supplies U(laten.) for a group size,
// typically a LatencyModel whose D_group and P_L2 depend on M. Ties go to
// the smaller M. It returns (0, 0) for n < 2.
//
// Because U(space) = (N − M)/M falls to 1/(N − 1) at M = N − 1, Γ has an
// interior maximum (the paper finds M = 5…9 for N = 30 and 100) only when
// the measured latency grows with M faster than M/(N − M); with latencies
// that hardly depend on M the largest group wins.
func OptimalGroupSize(n int, latency func(m int) float64) (m int, gamma float64) {
	for c := 1; c < n; c++ {
		g := NormalizedThroughput(latency(c), SpaceOverhead(n, c))
		if g > gamma {
			m, gamma = c, g
		}
	}
	return m, gamma
}
