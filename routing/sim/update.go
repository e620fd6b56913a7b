package sim

import (
	"context"
)

// Latency of updating stale replicas (G-HBA §2.3 "Updating Replica", §3.3,
// Fig. 6).
//
// When a server's local filter has changed past the propagation threshold,
// its replicas must be updated. "In HBA, a replica update, initiated from
// any MDS, triggers a system-wide multicast to update all MDSs in the
// system. In G-HBA, however, we only need to update the stale replica in
// each group (i.e., one MDS in each group)", found through the group's
// IDBFA (a multiple hit there sends one more message, which the wrong
// member drops). The simulation counts every propagation and the messages
// it takes (one per holder the IDBFAs name, GHBAResult.SegmentUpdateMessages),
// and an update to r recipients takes Delays.Multicast(r) = RTT +
// PerMsg·r, the convention of Delays.Group and Delays.Net (a multicast from
// one of m servers to the other m−1 takes RTT + PerMsg·(m−1)): D_net for
// HBA's N−1 recipients, about RTT + PerMsg·(G−1) for G-HBA's G groups.
// LRU filter updates are not counted: both schemes multicast them to every
// server (the L1 array is global in both).

// Multicast returns the time in ms of a multicast from one server to
// recipients others: RTT + PerMsg·recipients, so that Multicast(m−1) =
// Group(m) and Multicast(n−1) = Net(n). It is 0 when there is no recipient.
func (d Delays) Multicast(recipients float64) float64 {
	if recipients <= 0 {
		return 0
	}
	return d.RTT + d.PerMsg*recipients
}

// UpdateConfig describes G-HBA Fig. 6 at one number of servers.
type UpdateConfig struct {
	// GHBA is the G-HBA configuration (MemoryBudget must be 0). HBA is
	// simulated on the same pass with the same LRU size, filter sizes,
	// threshold and admission.
	GHBA GHBAConfig
	// Delays are the latency constants; the zero value means DefaultDelays.
	Delays Delays
	// Runs replays the trace Runs times (seeds Seed, Seed+1, …) and
	// averages the counts; 0 means 1.
	Runs int
}

// UpdateResult is the cost of updating stale local-filter replicas in HBA
// and G-HBA on the same trace (G-HBA Fig. 6).
type UpdateResult struct {
	TraceStats
	Servers  int `json:"servers"`
	MaxGroup int `json:"max_group"`
	Groups   int `json:"groups"`
	// HBAUpdates and GHBAUpdates are the local-filter propagations (one
	// update of every replica of the filter each), averaged over the runs.
	HBAUpdates  float64 `json:"hba_updates"`
	GHBAUpdates float64 `json:"ghba_updates"`
	// HBAMessagesPerUpdate is N−1; GHBAMessagesPerUpdate is the mean over
	// G-HBA's propagations of the holders reached (one per other group,
	// plus IDBFA multiple hits), or over origins when nothing propagated.
	HBAMessagesPerUpdate  float64 `json:"hba_messages_per_update"`
	GHBAMessagesPerUpdate float64 `json:"ghba_messages_per_update"`
	// HBALatency and GHBALatency are the mean latency of one update, in ms
	// (Delays.Multicast of the messages per update).
	HBALatency  float64 `json:"hba_update_latency_ms"`
	GHBALatency float64 `json:"ghba_update_latency_ms"`
	// HBAMessagesPerSecond and GHBAMessagesPerSecond are the update
	// messages per second of trace time.
	HBAMessagesPerSecond  float64 `json:"hba_update_messages_per_second"`
	GHBAMessagesPerSecond float64 `json:"ghba_update_messages_per_second"`
	// Delays are the assumed latency constants.
	Delays Delays `json:"delays"`
}

// UpdateLatency simulates HBA and G-HBA on one pass per run and returns
// the mean latency of a replica update in each (G-HBA Fig. 6).
func UpdateLatency(ctx context.Context, r Replay, cfg UpdateConfig) (*UpdateResult, error) {
	d, err := checkDelays(cfg.Delays)
	if err != nil {
		return nil, err
	}
	rates, shape, err := pairRuns(ctx, r, cfg.GHBA, cfg.Runs)
	if err != nil {
		return nil, err
	}
	res := &UpdateResult{
		TraceStats:           rates.TraceStats,
		Servers:              shape.n,
		MaxGroup:             cfg.GHBA.MaxGroup,
		Groups:               len(shape.groups),
		HBAUpdates:           rates.HBAUpdates,
		GHBAUpdates:          rates.GHBAUpdates,
		HBAMessagesPerUpdate: float64(shape.n - 1),
		Delays:               d,
	}
	res.GHBAMessagesPerUpdate = shape.originMsgs
	if rates.GHBAUpdates > 0 {
		res.GHBAMessagesPerUpdate = rates.GHBAUpdateMessages / rates.GHBAUpdates
	}
	res.HBALatency = d.Multicast(res.HBAMessagesPerUpdate)
	res.GHBALatency = d.Multicast(res.GHBAMessagesPerUpdate)
	if s := rates.TraceSeconds; s > 0 {
		res.HBAMessagesPerSecond = rates.HBAUpdates * res.HBAMessagesPerUpdate / s
		res.GHBAMessagesPerSecond = rates.GHBAUpdateMessages / s
	}
	return res, nil
}
