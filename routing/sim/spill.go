package sim

import (
	"context"
	"fmt"
	"math"
	"slices"

	"github.com/ghba/ghba/routing"
)

// Average latency when replicas spill to disk (G-HBA §3, §3.2 "Average
// Latency", Fig. 4).
//
// G-HBA §3 argues that at exabyte scale "a centralized BF-based approach
// such as the HBA scheme will be forced to spill significant portions of
// replicas into the disk space as the fast increasing number of replicas
// overflow the main memory space", and Fig. 4 plots the average latency of
// metadata operations against the operation intensity at several memory
// sizes: with enough memory HBA is slightly faster (every lookup that L1
// misses is answered by a local array probe, while G-HBA may have to ask
// its group), and as memory shrinks HBA's latency "increases rapidly since
// more disk accesses are involved", while G-HBA's (N−M)/M replicas stay in
// memory.
//
// The model: a server's memory for filter replicas is B bytes, and a
// replica is its bit array (ReplicaBytes), so B holds BudgetReplicas(B,
// replica bytes) replicas; the replicas a server holds beyond that are on
// disk. HBA holds N−1 replicas on every server, G-HBA its segment (the
// real assignment of the simulation: ⌊(N−M')/M'⌋ or ⌈(N−M')/M'⌉). The
// server's own filters and the L1 array of LRU filters stay in memory. A
// probe of a server's replica array reads every replica on disk once: each
// spilled replica costs one disk access (SpillConfig.Disk, an assumption),
// on top of the in-memory probe. Spilling changes no routing decision, only
// its time, so one simulation pass measures the hit rates and every memory
// size is evaluated on them with the latency model of G-HBA eq. 3
// (routing.LatencyModel):
//
//   - HBA is eq. 3 with M = 1 and D_group = 0 (no group level: an L2
//     failure goes to the system-wide multicast): D_LRU + (1−P_LRU)·D_L2 +
//     (1−P_LRU)(1−P_L2)·D_net, where P_L2 is the share of L1 failures that
//     the array of all N filters resolves and D_L2 = D_mem + spilled·D_disk.
//   - G-HBA is eq. 3 with M = M' (the largest group), D_L2 = D_mem + the
//     mean spilled replicas of a server·D_disk (the entry server is chosen
//     uniformly) and D_group = Delays.Group(M') + the spilled replicas of
//     the slowest member of the entry server's group·D_disk (the L3
//     multicast waits for every member's segment probe).
//
// D_net is Delays.Net(N) for both: the L4 multicast probes local filters
// only, which stay in memory.

// DefaultDiskDelay is the assumed time of one disk access, in ms: a random
// read on a 2008-era disk (the paper publishes no value).
const DefaultDiskDelay = 5.0

// SchemeRates are the hit rates a scheme's latency model takes (G-HBA
// Table 1).
type SchemeRates struct {
	// PLRU is the share of lookups of existing files resolved by the L1
	// (LRU filter) array.
	PLRU float64 `json:"p_lru"`
	// PL2 is the share of L1 failures resolved without a system-wide
	// multicast: by the array of every replica for HBA, within the group
	// (L2 or L3) for G-HBA.
	PL2 float64 `json:"p_l2"`
}

// pairRates are the measurements of one pass of pairPass; Mean averages
// them over seeds.
type pairRates struct {
	TraceStats
	HBA  SchemeRates
	GHBA SchemeRates
	// HBAUpdates and GHBAUpdates count local-filter propagations;
	// GHBAUpdateMessages the messages G-HBA's took (one per holder the
	// IDBFAs name).
	HBAUpdates         float64
	GHBAUpdates        float64
	GHBAUpdateMessages float64
}

// pairShape is what a pass's structures give, the same for every seed.
type pairShape struct {
	n            int
	groups       [][]int
	held         []int // per server: G-HBA segment replicas
	groupSizeMax int
	replicaBytes int64
	// originMsgs is the mean over origins of the messages one propagation
	// of G-HBA takes (the update cost when no propagation was measured).
	originMsgs float64
}

// pairPass replays r once with an HBA and a G-HBA of the same parameters
// (cfg; HBA takes its LRU size, filter sizes, threshold and admission) on
// the same placement and entry servers, and returns their measurements.
// cfg.MemoryBudget must be 0: the figures compare G-HBA's segments with
// HBA.
func pairPass(ctx context.Context, r Replay, cfg GHBAConfig) (pairRates, pairShape, error) {
	if cfg.MemoryBudget != 0 {
		return pairRates{}, pairShape{}, fmt.Errorf("sim: memory budget %d: G-HBA keeps its segment only here: %w", cfg.MemoryBudget, ErrConfig)
	}
	gm, err := newGHBAModel(cfg)
	if err != nil {
		return pairRates{}, pairShape{}, err
	}
	c := gm.cfg // with defaults applied
	hm := &hbaModel{entries: c.LRUEntries, threshold: c.Threshold, lruBits: c.LRUBitsPerEntry, bits: c.BitsPerFile, admission: c.L1Admission}
	l1 := &sharedL1{key: l1Key{c.LRUEntries, c.LRUBitsPerEntry, c.Threshold, c.L1Admission}}
	gm.l1 = l1
	// The shared L1 comes last: G-HBA probes L1 before the home touches
	// its LRU list (HBA has its own L1 level).
	cl, err := run(ctx, r, hm, gm, l1)
	if err != nil {
		return pairRates{}, pairShape{}, err
	}
	g := gm.res
	_, hbaUpdates := hm.messages()
	rates := pairRates{
		TraceStats:         cl.stats,
		HBA:                SchemeRates{PLRU: rate(hm.l1Hits, hm.lookups), PL2: rate(hm.l2Hits, hm.lookups-hm.l1Hits)},
		GHBA:               SchemeRates{PLRU: g.PLRU, PL2: g.PL2},
		HBAUpdates:         float64(hbaUpdates),
		GHBAUpdates:        float64(g.SegmentUpdates),
		GHBAUpdateMessages: float64(g.SegmentUpdateMessages),
	}
	var msgs int64
	for _, m := range gm.updMsgs {
		msgs += m
	}
	shape := pairShape{
		n:            cl.n,
		groups:       gm.groups,
		held:         slices.Clone(gm.held),
		groupSizeMax: g.GroupSizeMax,
		replicaBytes: g.ReplicaBytes,
		originMsgs:   rate(msgs, int64(cl.n)),
	}
	return rates, shape, nil
}

// pairRuns runs pairPass runs times (seeds r.Seed, r.Seed+1, …) and
// averages the measurements.
func pairRuns(ctx context.Context, r Replay, cfg GHBAConfig, runs int) (pairRates, pairShape, error) {
	var per []pairRates
	var shape pairShape
	for i := range max(runs, 1) {
		ri := r
		ri.Seed = r.Seed + int64(i)
		rates, s, err := pairPass(ctx, ri, cfg)
		if err != nil {
			return pairRates{}, pairShape{}, err
		}
		per = append(per, rates)
		shape = s
	}
	return Mean(per), shape, nil
}

// checkDelays applies the defaults of a zero Delays and rejects negative
// or non-finite ones.
func checkDelays(d Delays) (Delays, error) {
	if d == (Delays{}) {
		d = DefaultDelays
	}
	for _, x := range []float64{d.Mem, d.RTT, d.PerMsg} {
		if !(x >= 0) || math.IsInf(x, 0) {
			return d, fmt.Errorf("sim: delays %+v: %w", d, ErrConfig)
		}
	}
	return d, nil
}

// SpillConfig describes G-HBA Fig. 4 at one operation intensity: the
// memory sizes to evaluate on one simulated trace.
type SpillConfig struct {
	// GHBA is the G-HBA configuration (MaxGroup, LRU, filter sizes,
	// threshold, admission; MemoryBudget must be 0). HBA is simulated on
	// the same pass with the same LRU size, filter sizes, threshold and
	// admission.
	GHBA GHBAConfig
	// Memory lists the memory per server for filter replicas, in bytes.
	Memory []int64
	// Delays are the latency constants; the zero value means DefaultDelays.
	Delays Delays
	// Disk is the time of one disk access in ms, paid once per spilled
	// replica a probe reads; 0 means DefaultDiskDelay.
	Disk float64
	// Runs replays the trace Runs times (seeds Seed, Seed+1, …) and
	// averages the hit rates before the latencies are evaluated; 0 means 1.
	Runs int
}

// SpillPoint is the latency of both schemes at one memory size.
type SpillPoint struct {
	// MemoryBytes is the memory per server for replicas; InMemory the
	// replicas it holds (BudgetReplicas).
	MemoryBytes int64 `json:"memory_bytes"`
	InMemory    int   `json:"replicas_in_memory"`
	// HBASpilled is the replicas on disk per HBA server (N−1 − InMemory,
	// at least 0).
	HBASpilled int `json:"hba_spilled"`
	// GHBASpilledMean and GHBASpilledMax are the replicas on disk of a
	// G-HBA server: the mean and the largest over servers.
	GHBASpilledMean float64 `json:"ghba_spilled_mean"`
	GHBASpilledMax  int     `json:"ghba_spilled_max"`
	// HBALatency and GHBALatency are the mean latency of a lookup, in ms.
	HBALatency  float64 `json:"hba_latency_ms"`
	GHBALatency float64 `json:"ghba_latency_ms"`
}

// SpillResult is G-HBA Fig. 4 at one operation intensity: the hit rates
// measured on the trace and the latency of HBA and G-HBA at every memory
// size.
type SpillResult struct {
	TraceStats
	Servers      int `json:"servers"`
	MaxGroup     int `json:"max_group"`
	GroupSizeMax int `json:"group_size_max"`
	// ReplicaBytes is one replica (a local filter's bit array).
	ReplicaBytes int64 `json:"replica_bytes"`
	// HBAReplicas is N−1; GHBAReplicasMean and GHBAReplicasMax the segment
	// replicas of a G-HBA server, mean and largest.
	HBAReplicas      int     `json:"hba_replicas_per_server"`
	GHBAReplicasMean float64 `json:"ghba_replicas_per_server"`
	GHBAReplicasMax  int     `json:"ghba_replicas_max"`
	// HBA and GHBA are the measured hit rates (averaged over the runs).
	HBA  SchemeRates `json:"hba"`
	GHBA SchemeRates `json:"ghba"`
	// Delays and DiskMs are the assumed latency constants.
	Delays Delays  `json:"delays"`
	DiskMs float64 `json:"disk_ms"`
	// Points holds one entry per memory size, in the order of
	// SpillConfig.Memory.
	Points []SpillPoint `json:"memory"`
}

// Spill simulates HBA and G-HBA on one pass per run and evaluates their
// mean lookup latency at every memory size of cfg (G-HBA Fig. 4; the model
// is described above).
func Spill(ctx context.Context, r Replay, cfg SpillConfig) (*SpillResult, error) {
	d, err := checkDelays(cfg.Delays)
	if err != nil {
		return nil, err
	}
	disk := cfg.Disk
	if disk == 0 {
		disk = DefaultDiskDelay
	}
	if !(disk >= 0) || math.IsInf(disk, 0) {
		return nil, fmt.Errorf("sim: disk delay %v ms: %w", cfg.Disk, ErrConfig)
	}
	if len(cfg.Memory) == 0 {
		return nil, fmt.Errorf("sim: no memory size: %w", ErrConfig)
	}
	for _, b := range cfg.Memory {
		if b < 0 {
			return nil, fmt.Errorf("sim: memory %d bytes: %w", b, ErrConfig)
		}
	}
	rates, shape, err := pairRuns(ctx, r, cfg.GHBA, cfg.Runs)
	if err != nil {
		return nil, err
	}
	res := &SpillResult{
		TraceStats:   rates.TraceStats,
		Servers:      shape.n,
		MaxGroup:     cfg.GHBA.MaxGroup,
		GroupSizeMax: shape.groupSizeMax,
		ReplicaBytes: shape.replicaBytes,
		HBAReplicas:  shape.n - 1,
		HBA:          rates.HBA,
		GHBA:         rates.GHBA,
		Delays:       d,
		DiskMs:       disk,
	}
	for _, h := range shape.held {
		res.GHBAReplicasMean += float64(h)
		res.GHBAReplicasMax = max(res.GHBAReplicasMax, h)
	}
	res.GHBAReplicasMean /= float64(shape.n)
	for _, b := range cfg.Memory {
		res.Points = append(res.Points, shape.spillPoint(b, rates, d, disk))
	}
	return res, nil
}

// spillPoint evaluates both schemes at memory bytes per server.
func (s pairShape) spillPoint(memory int64, rates pairRates, d Delays, disk float64) SpillPoint {
	fit := BudgetReplicas(memory, s.replicaBytes)
	if s.replicaBytes <= 0 {
		fit = s.n // no filter to hold: nothing spills
	}
	spilled := func(held int) int { return max(0, held-fit) }
	p := SpillPoint{MemoryBytes: memory, InMemory: fit, HBASpilled: spilled(s.n - 1)}
	// G-HBA: the entry server is uniform over the servers, its L2 pays its
	// own spilled replicas, its group's L3 those of the slowest member.
	var l2Disk, l3Disk float64
	for _, g := range s.groups {
		slowest := 0
		for _, m := range g {
			sp := spilled(s.held[m])
			l2Disk += float64(sp)
			slowest = max(slowest, sp)
			p.GHBASpilledMax = max(p.GHBASpilledMax, sp)
		}
		l3Disk += float64(len(g)) * float64(slowest)
	}
	p.GHBASpilledMean = l2Disk / float64(s.n)
	l3Disk /= float64(s.n)
	p.HBALatency = HBALatency(rates.HBA, s.n, d, float64(p.HBASpilled)*disk)
	p.GHBALatency = routing.LatencyModel{
		PLRU: rates.GHBA.PLRU, PL2: rates.GHBA.PL2,
		DLRU: d.Mem, DL2: d.Mem + p.GHBASpilledMean*disk,
		DGroup: d.Group(s.groupSizeMax) + l3Disk*disk, DNet: d.Net(s.n),
		M: s.groupSizeMax,
	}.Latency()
	return p
}

// HBALatency is the mean lookup latency of HBA on n servers, in ms: G-HBA
// eq. 3 (routing.LatencyModel) with M = 1 and no group level, D_LRU +
// (1−P_LRU)·D_L2 + (1−P_LRU)(1−P_L2)·D_net, where D_L2 = d.Mem + l2Extra
// (the disk time of the spilled replicas) and D_net = d.Net(n).
func HBALatency(rates SchemeRates, n int, d Delays, l2Extra float64) float64 {
	return routing.LatencyModel{
		PLRU: rates.PLRU, PL2: rates.PL2,
		DLRU: d.Mem, DL2: d.Mem + l2Extra, DGroup: 0, DNet: d.Net(n),
		M: 1,
	}.Latency()
}
