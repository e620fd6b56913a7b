package sim

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"

	"github.com/ghba/ghba/routing"
)

// Delays are the latency constants of the G-HBA latency model (G-HBA §2.5,
// eq. 3, Table 1), in milliseconds. They are assumptions, not measurements:
// the paper does not publish its values.
type Delays struct {
	// Mem is D_LRU and D_L2: probing an in-memory filter array.
	Mem float64 `json:"mem_ms"`
	// RTT is one request/reply round trip between two servers on the LAN.
	RTT float64 `json:"rtt_ms"`
	// PerMsg is the extra time a multicast takes per additional recipient:
	// the sender emits the messages and handles the replies one by one.
	PerMsg float64 `json:"per_msg_ms"`
}

// DefaultDelays are the assumed constants: a 1 µs array probe, a 0.2 ms
// LAN round trip and 0.1 ms per extra multicast recipient.
var DefaultDelays = Delays{Mem: 0.001, RTT: 0.2, PerMsg: 0.1}

// Group returns D_group for a group of m servers: RTT + PerMsg·(m−1).
func (d Delays) Group(m int) float64 { return d.RTT + d.PerMsg*float64(max(m-1, 0)) }

// Net returns D_net for n servers: RTT + PerMsg·(n−1).
func (d Delays) Net(n int) float64 { return d.Group(n) }

// OptimalMConfig describes a sweep of the maximum group size M (G-HBA
// §2.5, §3.2, Figs. 2 and 3).
type OptimalMConfig struct {
	// MinM and MaxM bound the sweep; 0 means min(2, N−1) and
	// min(N−1, 2⌈√N⌉+2); MaxM is at most N−1.
	// Values of M that give the same grouping as a smaller M are skipped.
	MinM, MaxM int
	// GHBA is the template of every run (MaxGroup is set by the sweep).
	GHBA GHBAConfig
	// Delays are the latency constants; the zero value means DefaultDelays.
	Delays Delays
	// Runs replays the trace Runs times (seeds Seed, Seed+1, …) and
	// averages the G-HBA results before evaluating Γ; 0 means 1.
	Runs int
}

// OptimalMResult is the normalized throughput Γ of every M swept. Maps are
// keyed by M in decimal.
type OptimalMResult struct {
	Servers int `json:"servers"`
	// OptimalM maximizes Gamma.
	OptimalM int `json:"optimal_m"`
	// Gamma is Γ = 1/(U_lat·U_space) (G-HBA eq. 1) with U_lat from
	// routing.LatencyModel (eq. 3) on the measured P_LRU and P_L2 and
	// U_space the measured memory per server relative to BFA8 (replicas,
	// own local filter and L1 array; GHBAResult.TotalMemoryVsBFA8All).
	Gamma map[string]float64 `json:"gamma"`
	// GammaEq2 uses the paper's eq. 2 literally, U_space = (N−M)/M (the
	// replicas only). It grows without bound as M approaches N, so its
	// maximum sits at the largest M swept; OptimalMEq2 reports it.
	GammaEq2    map[string]float64 `json:"gamma_eq2"`
	OptimalMEq2 int                `json:"optimal_m_eq2"`
	// Near lists the M whose Γ is within 2% of the maximum (the curve is
	// flat near its top).
	Near []int `json:"near_optimal_m"`
	// Per M: latency (ms), space, group size M', P_LRU and P_L2.
	Latency   map[string]float64 `json:"latency_ms"`
	Space     map[string]float64 `json:"space"`
	GroupSize map[string]int     `json:"group_size"`
	PLRU      map[string]float64 `json:"p_lru"`
	PL2       map[string]float64 `json:"p_l2"`
	Delays    Delays             `json:"delays"`
	// Runs holds the G-HBA results of the sweep, in order of M.
	Runs []GHBAResult `json:"-"`
}

// SweepM returns the values of M an OptimalM sweep simulates for n
// servers: minM..maxM (0 meaning the defaults), skipping any M whose
// grouping Groups(n, M) equals that of a smaller M.
func SweepM(n, minM, maxM int) []int {
	if minM <= 0 {
		minM = min(2, n-1)
	}
	if maxM <= 0 {
		maxM = min(n-1, 2*int(math.Ceil(math.Sqrt(float64(n))))+2)
	}
	minM = max(minM, 1)
	maxM = min(maxM, n-1) // M = N stores no replica: eq. 2 would divide by zero
	var out []int
	seen := make(map[int]bool)
	for m := minM; m <= maxM; m++ {
		g := (n + m - 1) / m // the number of groups determines Groups(n, m)
		if !seen[g] {
			seen[g] = true
			out = append(out, m)
		}
	}
	return out
}

// OptimalM simulates G-HBA for every M of SweepM on one pass and evaluates
// the normalized throughput model (G-HBA §2.5) on the measured hit rates.
func OptimalM(ctx context.Context, r Replay, cfg OptimalMConfig) (*OptimalMResult, error) {
	if r.Servers < 2 {
		return nil, fmt.Errorf("sim: optimal M needs at least 2 servers: %w", ErrConfig)
	}
	d := cfg.Delays
	if d == (Delays{}) {
		d = DefaultDelays
	}
	if d.Mem < 0 || d.RTT < 0 || d.PerMsg < 0 {
		return nil, fmt.Errorf("sim: negative delay %+v: %w", d, ErrConfig)
	}
	ms := SweepM(r.Servers, cfg.MinM, cfg.MaxM)
	if len(ms) == 0 {
		return nil, fmt.Errorf("sim: no group size to sweep for %d servers (--min-m %d, --max-m %d; M ≤ N−1): %w", r.Servers, cfg.MinM, cfg.MaxM, ErrConfig)
	}
	cfgs := make([]GHBAConfig, len(ms))
	for i, m := range ms {
		cfgs[i] = cfg.GHBA
		cfgs[i].MaxGroup = m
	}
	per := make([][]GHBAResult, len(ms))
	for i := 0; i < max(cfg.Runs, 1); i++ {
		ri := r
		ri.Seed = r.Seed + int64(i)
		out, err := GHBA(ctx, ri, cfgs...)
		if err != nil {
			return nil, err
		}
		for j := range out {
			per[j] = append(per[j], out[j])
		}
	}
	runs := make([]GHBAResult, len(ms))
	for j := range per {
		runs[j] = Mean(per[j])
	}
	res := &OptimalMResult{
		Servers:   r.Servers,
		Gamma:     make(map[string]float64),
		GammaEq2:  make(map[string]float64),
		Latency:   make(map[string]float64),
		Space:     make(map[string]float64),
		GroupSize: make(map[string]int),
		PLRU:      make(map[string]float64),
		PL2:       make(map[string]float64),
		Delays:    d,
		Runs:      runs,
	}
	best, bestEq2 := -1.0, -1.0
	for i, m := range ms {
		run := runs[i]
		mp := run.GroupSizeMax
		lat := routing.LatencyModel{
			PLRU: run.PLRU, PL2: run.PL2,
			DLRU: d.Mem, DL2: d.Mem, DGroup: d.Group(mp), DNet: d.Net(r.Servers),
			M: mp,
		}.Latency()
		k := strconv.Itoa(m)
		g := routing.NormalizedThroughput(lat, run.TotalMemoryVsBFA8All)
		g2 := routing.NormalizedThroughput(lat, routing.SpaceOverhead(r.Servers, mp))
		res.Gamma[k], res.GammaEq2[k] = g, g2
		res.Latency[k], res.Space[k], res.GroupSize[k] = lat, run.TotalMemoryVsBFA8All, mp
		res.PLRU[k], res.PL2[k] = run.PLRU, run.PL2
		if g > best {
			best, res.OptimalM = g, m
		}
		if g2 > bestEq2 {
			bestEq2, res.OptimalMEq2 = g2, m
		}
	}
	for _, m := range ms {
		if res.Gamma[strconv.Itoa(m)] >= 0.98*best {
			res.Near = append(res.Near, m)
		}
	}
	slices.Sort(res.Near)
	return res, nil
}
