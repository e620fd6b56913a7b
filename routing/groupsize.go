package routing

import (
	"fmt"
	"math"
)

// GroupSizeInputs are what a running cluster knows when it chooses its
// maximum group size M (G-HBA §2.5, "max_group_size: auto"): its size, the
// hit rates and latencies it measured, and the memory its filters take.
// Latencies are in milliseconds, memory in bytes.
type GroupSizeInputs struct {
	// Servers is N, the nodes of the cluster.
	Servers int `json:"servers"`
	// MinM and MaxM bound the choice: at least the replication factor
	// (a shard's replicas live in its group), at most the groups' cap.
	MinM int `json:"min_m"`
	MaxM int `json:"max_m"`
	// PLRU is the share of lookups the L1 array resolves; PL2 the share
	// of the others that a full group's segment arrays resolve (L2 or
	// L3), as G-HBA eq. 3 has them.
	PLRU float64 `json:"p_lru"`
	PL2  float64 `json:"p_l2"`
	// Mem is D_LRU = D_L2, probing an in-memory filter array.
	Mem float64 `json:"mem_ms"`
	// RTT and PerMsg give a multicast to m nodes: RTT + PerMsg·(m−1),
	// D_group for a group of m and D_net for the N nodes.
	RTT    float64 `json:"rtt_ms"`
	PerMsg float64 `json:"per_msg_ms"`
	// ReplicaBytes is one shard's filter (a replica); L1Bytes the LRU
	// filter array of a node; BudgetBytes the memory for L2 replicas
	// (filter_memory_mb, 0: the G-HBA segment only); BFA8Bytes one
	// server's filter at 8 bits per file, the unit of U(space).
	ReplicaBytes float64 `json:"replica_bytes"`
	L1Bytes      float64 `json:"l1_bytes"`
	BudgetBytes  float64 `json:"budget_bytes"`
	BFA8Bytes    float64 `json:"bfa8_bytes"`
}

// GroupSizePoint is the model's value for one M.
type GroupSizePoint struct {
	M int `json:"m"`
	// GroupSize is M', the size of the groups N nodes form with at most M
	// each (balanced: N spread over ⌈N/M⌉ groups).
	GroupSize int `json:"group_size"`
	// Replicas is the L2 replicas each node holds: its segment,
	// (N − M')/M', or more when the budget holds more.
	Replicas float64 `json:"replicas"`
	// Latency is U(laten.) in ms, Space U(space) relative to BFA8, Gamma
	// their normalized throughput 1/(Latency·Space).
	Latency float64 `json:"latency_ms"`
	Space   float64 `json:"space"`
	Gamma   float64 `json:"gamma"`
}

// Validate reports inputs the model cannot use.
func (in GroupSizeInputs) Validate() error {
	switch {
	case in.Servers < 1:
		return fmt.Errorf("group size: %d servers", in.Servers)
	case in.MinM < 1 || in.MaxM < in.MinM:
		return fmt.Errorf("group size: bounds %d..%d", in.MinM, in.MaxM)
	case in.ReplicaBytes <= 0 || in.BFA8Bytes <= 0:
		return fmt.Errorf("group size: replica of %g bytes, BFA8 unit of %g bytes", in.ReplicaBytes, in.BFA8Bytes)
	case in.Mem < 0 || in.RTT < 0 || in.PerMsg < 0 || in.L1Bytes < 0 || in.BudgetBytes < 0:
		return fmt.Errorf("group size: negative input %+v", in)
	}
	return nil
}

// multicast is the latency of a multicast to m nodes.
func (in GroupSizeInputs) multicast(m int) float64 {
	return in.RTT + in.PerMsg*float64(max(m-1, 0))
}

// Point evaluates the model for maximum group size m:
//
//   - M' = N/⌈N/m⌉ (rounded down), the size of the groups;
//   - each node holds its segment, (N − M')/M' replicas, or as many as the
//     budget holds, at most the N − 1 other nodes' filters;
//   - U(laten.) is G-HBA eq. 3 (LatencyModel, as the simulator evaluates
//     it) with D_group = D(M') and D_net = D(N); when the replicas a node
//     holds cover every other node, a miss skips the group multicast
//     (scheme auto routes as HBA then): D_LRU + (1 − P_LRU)·D_L2 +
//     (1 − P_LRU)(1 − P_L2)·D_net;
//   - U(space) is the node's filter memory, replicas + its own filter +
//     its L1 array, over N·BFA8 (the memory term the simulator measures,
//     docs/simulation.md "Optimal group size": eq. 2 alone has no
//     interior optimum).
func (in GroupSizeInputs) Point(m int) GroupSizePoint {
	n := max(in.Servers, 1)
	m = min(max(m, 1), n)
	groups := (n + m - 1) / m
	mp := n / groups
	held := float64(n-mp) / float64(mp)
	if b := math.Floor(in.BudgetBytes / in.ReplicaBytes); b > held {
		held = math.Min(b, float64(n-1))
	}
	var lat float64
	if held >= float64(n-1) {
		miss := 1 - clamp01(in.PLRU)
		lat = in.Mem + miss*in.Mem + miss*(1-clamp01(in.PL2))*in.multicast(n)
	} else {
		lat = LatencyModel{PLRU: in.PLRU, PL2: in.PL2, DLRU: in.Mem, DL2: in.Mem,
			DGroup: in.multicast(mp), DNet: in.multicast(n), M: mp, MPrime: mp}.Latency()
	}
	space := (held*in.ReplicaBytes + in.ReplicaBytes + in.L1Bytes) / (float64(n) * in.BFA8Bytes)
	return GroupSizePoint{M: m, GroupSize: mp, Replicas: held, Latency: lat, Space: space,
		Gamma: NormalizedThroughput(lat, space)}
}

// ChooseGroupSize evaluates the model for every M in [MinM, MaxM] and
// returns the M with the largest Γ (ties: the smaller M) and the points.
// M above N gives the same groups as N, so the choice never exceeds N
// unless MinM does. An M whose groups would have fewer than MinM members
// (M = 3 spreads 4 nodes over two groups of 2) is evaluated but never
// chosen, unless no M qualifies; then the largest M is.
func ChooseGroupSize(in GroupSizeInputs) (best int, pts []GroupSizePoint, err error) {
	if err := in.Validate(); err != nil {
		return 0, nil, err
	}
	hi := min(in.MaxM, max(in.Servers, in.MinM))
	bestGamma := -1.0
	for m := in.MinM; m <= hi; m++ {
		p := in.Point(m)
		p.M = m
		pts = append(pts, p)
		if p.GroupSize < in.MinM && p.GroupSize < in.Servers {
			continue
		}
		if p.Gamma > bestGamma {
			best, bestGamma = m, p.Gamma
		}
	}
	if best == 0 {
		best = hi
	}
	return best, pts, nil
}
