package node

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/serf/serf"

	"github.com/ghba/ghba/fsm"
	"github.com/ghba/ghba/routing"
	"github.com/ghba/ghba/rpc"
)

// max_group_size: auto (G-HBA §2.5; docs/design.md, "Group size chosen at
// run time"). The leader of a group whose nodes set it evaluates the
// group size model (routing.ChooseGroupSize) every GroupSizeInterval with
// what this node measured: N from Serf, the hit rates of its lookups, the
// mean latency of its L3 multicasts (D_group at the group's size) and of
// its L4 steps (D_net at N), its filters' memory and its memory budget. It
// adopts the model's optimum once that has won two evaluations in a row
// by more than groupSizeGain over the M in use (hysteresis), gossips it
// (tag maxg), and applies it where a fixed max_group_size applies: a join
// to a group of M members splits it, two groups that total at most M
// merge, and a group above M splits without waiting for a joiner.

// GroupSize is max_group_size: a number of members, or GroupSizeAuto.
type GroupSize int

// GroupSizeAuto is max_group_size: auto.
const GroupSizeAuto GroupSize = 0

const (
	// maxGroupCap bounds a fixed max_group_size, and is the group FSM's
	// limit for groups of auto size (the leader keeps them below M).
	maxGroupCap = 64
	// groupSizeStart is M before the first evaluation.
	groupSizeStart = 7
	// groupSizeGain is the hysteresis: a new optimum must beat the M in
	// use by this factor, twice in a row.
	groupSizeGain = 1.05
	// groupSizeMinLookups and groupSizeMinSamples are how many lookups,
	// and L3 multicasts and L4 steps, make the hit rates and the
	// latencies count as measured.
	groupSizeMinLookups = 1000
	groupSizeMinSamples = 20
)

// Assumed model inputs until the cluster has measured its own (the
// simulator's defaults, routing/sim.DefaultDelays; hit rates of the
// simulator's generated trace).
const (
	assumedPLRU   = 0.85
	assumedPL2    = 0.6
	assumedMemMs  = 0.001
	assumedRTTMs  = 0.2
	assumedPerMsg = 0.1
)

// ParseGroupSize parses a max_group_size: "auto" or a number.
func ParseGroupSize(s string) (GroupSize, error) {
	if strings.TrimSpace(s) == "auto" {
		return GroupSizeAuto, nil
	}
	n, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil {
		return 0, fmt.Errorf("%q is not a number of members nor auto", s)
	}
	if n == 0 {
		return 0, fmt.Errorf("0 members: set auto to let the cluster choose")
	}
	return GroupSize(n), nil
}

// String returns "auto" or the number.
func (g GroupSize) String() string {
	if g == GroupSizeAuto {
		return "auto"
	}
	return strconv.Itoa(int(g))
}

// MarshalJSON writes "auto" or the number.
func (g GroupSize) MarshalJSON() ([]byte, error) {
	if g == GroupSizeAuto {
		return []byte(`"auto"`), nil
	}
	return []byte(strconv.Itoa(int(g))), nil
}

// groupSizeState is the leader's choice of M (under its mutex).
type groupSizeState struct {
	mu        sync.Mutex
	chosen    int // the M in use; 0 before the first evaluation
	candidate int // the optimum of the last evaluation, if it differs
	wins      int // evaluations in a row it has won
	last      time.Time
	choice    *rpc.GroupSizeChoice
}

// reset forgets the choice of an earlier leadership: the next one starts
// from the M its group gossips (seedGroupSize).
func (g *groupSizeState) reset() {
	g.mu.Lock()
	g.chosen, g.candidate, g.wins, g.last, g.choice = 0, 0, 0, time.Time{}, nil
	g.mu.Unlock()
}

// autoGroupSize reports whether the node's groups choose their size.
func (n *Node) autoGroupSize() bool { return n.cfg.MaxGroupSize == GroupSizeAuto }

// fsmMaxGroup is the group FSM's max_group_size for groups this node
// bootstraps: the configured one, or the cap for an auto size.
func (n *Node) fsmMaxGroup() int {
	if n.autoGroupSize() {
		return maxGroupCap
	}
	return int(n.cfg.MaxGroupSize)
}

// maxGroup returns M for a group with FSM configuration c as this node,
// its leader, applies it: the configured max_group_size, or the chosen
// one (at most the FSM's, which a group bootstrapped with a fixed size
// keeps).
func (n *Node) maxGroup(c fsm.Config) int {
	if !n.autoGroupSize() {
		return c.MaxGroupSize
	}
	n.gsize.mu.Lock()
	m := n.gsize.chosen
	n.gsize.mu.Unlock()
	if m == 0 {
		m = n.seedGroupSize()
	}
	return min(m, c.MaxGroupSize)
}

// joinMaxGroup is the size a joining node assumes of the groups it may
// join: the configured one, or with an auto size the largest M a group's
// leader gossips (the leader it asks splits or redirects a full group).
func (n *Node) joinMaxGroup() int {
	if !n.autoGroupSize() {
		return int(n.cfg.MaxGroupSize)
	}
	m := 0
	for _, v := range n.dir.groupMaxSizes() {
		m = max(m, v)
	}
	if m == 0 {
		return groupSizeStart
	}
	return m
}

// groupMaxSizes returns the M each group's leader gossips (auto sizes),
// also from a leader Serf suspects or counts failed for now (its last
// tags), not from one that left.
func (d *directory) groupMaxSizes() map[string]int {
	out := map[string]int{}
	s := d.n.serfAgent()
	if s == nil {
		return out
	}
	for _, m := range s.Members() {
		if m.Tags[tagRole] != roleGHBA || m.Status == serf.StatusLeft || m.Tags[tagMoving] == "1" {
			continue
		}
		if v, err := strconv.Atoi(m.Tags[tagMaxGroup]); err == nil && v > 0 && m.Tags[tagGroup] != "" {
			out[m.Tags[tagGroup]] = v
		}
	}
	return out
}

// groupSizeInputs gathers the model's inputs as this node measures them;
// measured names those measured (the others are assumed).
func (n *Node) groupSizeInputs(c fsm.Config, groupSize int) (in routing.GroupSizeInputs, measured []string) {
	servers := 1
	if s := n.serfAgent(); s != nil {
		for _, m := range s.Members() {
			if m.Tags[tagRole] == roleGHBA && m.Status == serf.StatusAlive && m.Name != n.cfg.NodeID {
				servers++
			}
		}
	}
	replica := float64(n.cfg.FilterCapacity) * n.cfg.BitsPerFile / 8
	in = routing.GroupSizeInputs{
		Servers: servers, MinM: c.ReplicationFactor(), MaxM: c.MaxGroupSize,
		PLRU: assumedPLRU, PL2: assumedPL2, Mem: assumedMemMs, RTT: assumedRTTMs, PerMsg: assumedPerMsg,
		ReplicaBytes: replica,
		L1Bytes:      float64(servers) * float64(n.cfg.LRUEntries) * n.cfg.LRUBitsPerFile / 8,
		BudgetBytes:  float64(n.cfg.FilterMemoryMB) * (1 << 20),
		BFA8Bytes:    float64(n.cfg.FilterCapacity),
	}
	if ns := n.ns; ns != nil {
		st := ns.Stats()
		lv := st.Levels
		if st.Lookups >= groupSizeMinLookups {
			in.PLRU = float64(lv.L1) / float64(st.Lookups)
			if rest := st.Lookups - lv.L1; rest > 0 {
				in.PL2 = float64(lv.L2+lv.L3) / float64(rest)
			}
			measured = append(measured, "p_lru", "p_l2")
		}
		if st.Multicasts >= groupSizeMinSamples && st.L4Steps >= groupSizeMinSamples && servers > groupSize {
			dGroup := float64(st.L3Nanos) / float64(st.Multicasts) / 1e6
			dNet := float64(st.L4Nanos) / float64(st.L4Steps) / 1e6
			in.PerMsg = math.Max(0, (dNet-dGroup)/float64(servers-groupSize))
			in.RTT = math.Max(0, dGroup-in.PerMsg*float64(max(groupSize-1, 0)))
			measured = append(measured, "rtt_ms", "per_msg_ms")
		}
	}
	if h := n.tune.GroupSizeInputs; h != nil {
		h(&in)
	}
	in.MaxM = max(in.MaxM, in.MinM)
	return in, measured
}

// chooseGroupSize evaluates the model (leader of a group of auto size,
// at most every GroupSizeInterval) and adopts a new M by the hysteresis
// rule. It reports whether M changed.
func (n *Node) chooseGroupSize(gr *groupRaft) bool {
	if !n.autoGroupSize() || !n.isLeader() {
		return false
	}
	c, ok := gr.fsm.Config()
	if !ok {
		return false
	}
	g := &n.gsize
	g.mu.Lock()
	defer g.mu.Unlock()
	if time.Since(g.last) < n.tune.GroupSizeInterval {
		return false
	}
	g.last = time.Now()
	in, measured := n.groupSizeInputs(c, gr.fsm.Size())
	best, pts, err := routing.ChooseGroupSize(in)
	if err != nil {
		n.log.Warn("group size model", "err", err)
		return false
	}
	cur := g.chosen
	if cur == 0 {
		cur = min(n.seedGroupSize(), c.MaxGroupSize)
	}
	gamma := func(m int) float64 {
		i := slices.IndexFunc(pts, func(p routing.GroupSizePoint) bool { return p.M == m })
		if i < 0 {
			return in.Point(m).Gamma
		}
		return pts[i].Gamma
	}
	changed := false
	switch {
	case best == cur:
		g.candidate, g.wins = 0, 0
	case gamma(best) < groupSizeGain*gamma(cur):
		g.candidate, g.wins = 0, 0 // not worth a re-shape
	case best != g.candidate:
		g.candidate, g.wins = best, 1
	default:
		g.wins++
	}
	if g.chosen == 0 {
		g.chosen = cur
		changed = true
	}
	if g.candidate != 0 && g.wins >= 2 {
		n.log.Info("group size chosen", "group", n.group(), "from", g.chosen, "to", g.candidate,
			"servers", in.Servers, "gamma_from", gamma(g.chosen), "gamma_to", gamma(g.candidate), "measured", measured)
		g.chosen, g.candidate, g.wins = g.candidate, 0, 0
		changed = true
	}
	ch := &rpc.GroupSizeChoice{M: g.chosen, Best: best, Servers: in.Servers, MinM: in.MinM, MaxM: in.MaxM,
		PLRU: in.PLRU, PL2: in.PL2, RTTMs: in.RTT, PerMsgMs: in.PerMsg, MemMs: in.Mem,
		ReplicaBytes: in.ReplicaBytes, L1Bytes: in.L1Bytes, BudgetBytes: in.BudgetBytes,
		Measured: append([]string{"servers"}, measured...), EvaluatedAt: g.last.UnixNano()}
	for _, p := range pts {
		ch.Gamma = append(ch.Gamma, rpc.GroupSizeGamma{M: p.M, Gamma: p.Gamma, LatencyMs: p.Latency, Space: p.Space})
	}
	g.choice = ch
	return changed
}

// groupSizeStatus returns M as this node applies it as its group's leader
// (0 when it does not lead), and with an auto size the last choice.
func (n *Node) groupSizeStatus() (int, *rpc.GroupSizeChoice) {
	f := n.groupFSM()
	if f == nil || !n.isLeader() {
		return 0, nil
	}
	c, ok := f.Config()
	if !ok {
		return 0, nil
	}
	m := n.maxGroup(c)
	if !n.autoGroupSize() {
		return m, nil
	}
	n.gsize.mu.Lock()
	defer n.gsize.mu.Unlock()
	return m, n.gsize.choice
}

// gossipedMaxGroup is the tag value of the M this node applies as the
// leader of a group of auto size, "" otherwise.
func (n *Node) gossipedMaxGroup() string {
	if !n.autoGroupSize() || !n.isLeader() {
		return ""
	}
	n.gsize.mu.Lock()
	defer n.gsize.mu.Unlock()
	if n.gsize.chosen == 0 {
		return ""
	}
	return strconv.Itoa(n.gsize.chosen)
}

// seedGroupSize returns the M a leader without a choice of its own starts
// from: the one its group's last leader gossiped, else the smallest one
// another group gossips (a group a split just founded shares the model's
// inputs with the group it came from), else groupSizeStart — so that a
// change of leader or a split does not undo the last choice.
func (n *Node) seedGroupSize() int {
	gossiped := n.dir.groupMaxSizes()
	if m := gossiped[n.group()]; m > 0 {
		return m
	}
	seed := 0
	for g, m := range gossiped {
		if g != n.group() && (seed == 0 || m < seed) {
			seed = m
		}
	}
	return cmp.Or(seed, groupSizeStart)
}

// maybeSplit splits this leader's group when it has more members than the
// M it applies (max_group_size auto chose a smaller one), without waiting
// for a joiner: the ⌊size/2⌋ members with the highest ids found a new
// group, as a split for a joiner does (reshape.go). The anti-flap rules of
// a merge hold: the members unchanged and no split or merge by this leader
// for MergeSettle, every member an alive auto node, no split in progress.
// Called from the leader routine after maybeMerge.
func (n *Node) maybeSplit(ctx context.Context, gr *groupRaft) {
	if n.cfg.Group != GroupAuto || !n.autoGroupSize() || !n.isLeader() || n.leaving.Load() || ctx.Err() != nil {
		return
	}
	c, ok := gr.fsm.Config()
	if !ok {
		return
	}
	m := n.maxGroup(c)
	n.memberMu.Lock()
	defer n.memberMu.Unlock()
	members := gr.fsm.Members()
	now := time.Now()
	if len(members) <= m || n.reshape.merging || now.Sub(n.reshape.last) < n.tune.MergeSettle ||
		now.Sub(n.reshape.stableSince) < n.tune.MergeSettle || n.splitInProgress(n.group()) {
		return
	}
	alive := n.serfAutoAlive()
	var cand []string
	for _, mem := range members {
		if mem.Status != fsm.StatusActive || (mem.ID != n.cfg.NodeID && !alive[mem.ID]) {
			return
		}
		if mem.ID != n.cfg.NodeID {
			cand = append(cand, mem.ID)
		}
	}
	k := len(members) / 2
	if k < 1 || len(cand) < k {
		return
	}
	slices.Sort(cand)
	movers := cand[len(cand)-k:]
	p := &splitPlan{group: n.group(), name: n.newGroupName(movers[0]), movers: movers, maxGroup: m}
	n.log.Info("the group is above the size its leader chose: splitting it", "group", p.group, "members", len(members), "max_group_size", m)
	if _, err := n.carryOutSplit(ctx, gr, p, nil); err != nil {
		n.log.Warn("splitting the group failed", "group", p.group, "err", err)
	}
}

// groupFullForAuto reports whether this leader's group of auto size has M
// members already, so that the auto node joining it (not a member yet)
// makes it split rather than grow past M.
func (n *Node) groupFullForAuto(id string) bool {
	f := n.groupFSM()
	if !n.autoGroupSize() || f == nil {
		return false
	}
	c, ok := f.Config()
	if !ok {
		return false
	}
	if _, member := f.Member(id); member {
		return false
	}
	return f.Size() >= n.maxGroup(c)
}
