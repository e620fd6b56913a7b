package sim

import (
	"context"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/cespare/xxhash/v2"

	"github.com/ghba/ghba/routing"
)

// budgetTrace is a small generated trace (seed 21) for the budget tests.
func budgetTrace(files, ops int) Source { return GeneratedSource(smallTrace(files, ops, 21), 1) }

// replicaBytes is the size of one replica for src on n servers.
func replicaBytes(t *testing.T, src Source, n int, bits float64) int64 {
	t.Helper()
	init0, err := InitialFiles(context.Background(), src)
	if err != nil {
		t.Fatal(err)
	}
	rb, err := ReplicaBytes(init0, n, bits)
	if err != nil {
		t.Fatal(err)
	}
	return rb
}

// withBudgets returns cfg once per budget.
func withBudgets(cfg GHBAConfig, budgets ...int64) []GHBAConfig {
	out := make([]GHBAConfig, len(budgets))
	for i, b := range budgets {
		out[i] = cfg
		out[i].MemoryBudget = b
	}
	return out
}

// TestBudgetZeroIsGHBA: a budget of 0, or one too small for anything beyond
// the segments, is G-HBA exactly, whatever else runs on the same pass.
func TestBudgetZeroIsGHBA(t *testing.T) {
	tests := []struct {
		n, m      int
		bits, thr float64
	}{
		{12, 4, 8, 0},
		{30, 8, 8, 0.01},
		{50, 8, 16, 0.01},
		{10, 1, 8, 0.01}, // groups of one: HBA with its L3 empty
		{8, 8, 8, 0.01},  // one group: no segment at all
	}
	src := budgetTrace(5000, 15000)
	for _, tc := range tests {
		t.Run(fmt.Sprintf("N=%d M=%d bits=%v thr=%v", tc.n, tc.m, tc.bits, tc.thr), func(t *testing.T) {
			r := Replay{Source: src, Servers: tc.n, Seed: 3}
			cfg := GHBAConfig{MaxGroup: tc.m, LRUEntries: 50, BitsPerFile: tc.bits, Threshold: tc.thr}
			alone, err := GHBA(context.Background(), r, cfg)
			if err != nil {
				t.Fatal(err)
			}
			rb := replicaBytes(t, src, tc.n, tc.bits)
			lo, _ := SegmentReplicas(tc.n, tc.m)
			// 0; 1 byte; the smallest segment (room for nothing more on
			// any server); then budgets that do buy extras, to catch any
			// state they might share with the G-HBA models.
			rs, err := GHBA(context.Background(), r, withBudgets(cfg, 0, 1, int64(lo)*rb+rb-1, int64(tc.n)*rb, int64(lo+2)*rb)...)
			if err != nil {
				t.Fatal(err)
			}
			want := alone[0]
			for i, got := range rs[:3] {
				if got.ExtraReplicasMean != 0 {
					t.Errorf("budget %d: %v extra replicas per server", got.MemoryBudget, got.ExtraReplicasMean)
				}
				got.MemoryBudget = 0
				if !reflect.DeepEqual(got, want) {
					t.Errorf("budget #%d differs from G-HBA:\n got %+v\nwant %+v", i, got, want)
				}
			}
			if tc.m > 1 && tc.n > tc.m && rs[3].ExtraReplicasMean == 0 {
				t.Errorf("budget of N replicas bought no extra replica")
			}
		})
	}
}

// TestBudgetAllIsHBA: with room for every other server's filter, L2 is
// HBA's complete array. At threshold 0 its replicas are exact, so a unique
// hit there is always the home (no L2 false positive) and L2 fails only on
// a multiple hit, whose probability is 1 − (1−f)^(N−1) (HBA eq. 1): that,
// and nothing more, is left to L3 and L4. Hops fall well below G-HBA's.
func TestBudgetAllIsHBA(t *testing.T) {
	tests := []struct {
		n, m      int
		bits, thr float64
		// minGain is the least drop of mean hops expected against G-HBA.
		minGain float64
	}{
		{10, 8, 8, 0, 0.02},
		{20, 5, 16, 0, 0.02},
		{40, 8, 16, 0, 0.02},
		{40, 8, 16, 0.01, 0.02}, // stale replicas: a few wrong or zero hits
	}
	src := budgetTrace(6000, 24000)
	for _, tc := range tests {
		t.Run(fmt.Sprintf("N=%d M=%d bits=%v thr=%v", tc.n, tc.m, tc.bits, tc.thr), func(t *testing.T) {
			rb := replicaBytes(t, src, tc.n, tc.bits)
			cfg := GHBAConfig{MaxGroup: tc.m, LRUEntries: 50, BitsPerFile: tc.bits, Threshold: tc.thr}
			rs, err := GHBA(context.Background(), Replay{Source: src, Servers: tc.n, Seed: 5}, withBudgets(cfg, 0, int64(tc.n-1)*rb)...)
			if err != nil {
				t.Fatal(err)
			}
			ghba, hba := rs[0], rs[1]
			if hba.ReplicasMin != tc.n-1 || hba.ReplicasMax != tc.n-1 {
				t.Fatalf("replicas per server %d..%d, want %d", hba.ReplicasMin, hba.ReplicasMax, tc.n-1)
			}
			if want := float64(tc.n-1) * float64(rb); hba.ReplicaMemoryMean != want {
				t.Errorf("replica memory %v bytes, want %v", hba.ReplicaMemoryMean, want)
			}
			miss1 := 1 - hba.Levels["L1"]
			theory := routing.HitOldFile(tc.n, tc.bits) // unique hit among N exact filters
			beyond := (hba.Levels["L3"] + hba.Levels["L4"]) / miss1
			if tc.thr == 0 {
				if fp := hba.FalsePositives["L2"]; fp != 0 {
					t.Errorf("exact complete L2 gave false unique hits on %v of lookups", fp)
				}
				if math.Abs(hba.PL2Local-theory) > 0.04 {
					t.Errorf("L2 resolves %.4f of L1 failures, theory (1−f)^(N−1) = %.4f", hba.PL2Local, theory)
				}
			} else {
				// Staleness adds a little: new files not yet propagated.
				if hba.PL2Local < theory-0.08 || hba.FalsePositives["L2"] > 0.01 {
					t.Errorf("L2 resolves %.4f of L1 failures (theory %.4f), false positives %.4f", hba.PL2Local, theory, hba.FalsePositives["L2"])
				}
			}
			if math.Abs(beyond-(1-hba.PL2Local)) > 1e-9 {
				t.Errorf("L3+L4 take %.4f of L1 failures, L2 leaves %.4f", beyond, 1-hba.PL2Local)
			}
			if hba.Levels["L2"] <= ghba.Levels["L2"] || hba.Levels["L3"] >= ghba.Levels["L3"] {
				t.Errorf("L2 %.4f vs G-HBA %.4f, L3 %.4f vs G-HBA %.4f", hba.Levels["L2"], ghba.Levels["L2"], hba.Levels["L3"], ghba.Levels["L3"])
			}
			if hba.MeanHops > ghba.MeanHops-tc.minGain {
				t.Errorf("mean hops %.4f, G-HBA %.4f: want at least %.2f fewer", hba.MeanHops, ghba.MeanHops, tc.minGain)
			}
			if hba.SegmentUpdateMessages <= ghba.SegmentUpdateMessages {
				t.Errorf("update messages %d, G-HBA %d: extra replicas cost nothing", hba.SegmentUpdateMessages, ghba.SegmentUpdateMessages)
			}
			t.Logf("G-HBA hops %.4f L2 %.4f L3 %.4f; all replicas hops %.4f L2 %.4f L3 %.4f L4 %.4f (L2 of L1 failures %.4f, theory %.4f)",
				ghba.MeanHops, ghba.Levels["L2"], ghba.Levels["L3"], hba.MeanHops, hba.Levels["L2"], hba.Levels["L3"], hba.Levels["L4"], hba.PL2Local, theory)
		})
	}
}

// TestBudgetHopsNonIncreasing: mean hops never rise as the budget grows, at
// 16 bits/file, where a wrong unique hit at L2 is rare (f_g+ < 2% up to 40
// filters). At 8 bits/file they may rise a little in the middle of the
// sweep: f_g+ = θf(1−f)^(θ−1) grows with θ up to θ ≈ 1/f ≈ 46 (G-HBA
// §2.2), so a larger partial L2 wastes a hop more often; that case is held
// to the growth of f_g+ instead.
func TestBudgetHopsNonIncreasing(t *testing.T) {
	tests := []struct {
		n, m      int
		bits, thr float64
	}{
		{12, 4, 16, 0},
		{30, 8, 16, 0.01},
		{60, 8, 16, 0.01},
		{60, 8, 8, 0.01},
	}
	src := budgetTrace(6000, 24000)
	for _, tc := range tests {
		t.Run(fmt.Sprintf("N=%d M=%d bits=%v thr=%v", tc.n, tc.m, tc.bits, tc.thr), func(t *testing.T) {
			rb := replicaBytes(t, src, tc.n, tc.bits)
			_, hi := SegmentReplicas(tc.n, tc.m)
			var budgets []int64
			for r := hi; r < tc.n-1; r += max(1, (tc.n-hi)/8) {
				budgets = append(budgets, int64(r)*rb)
			}
			budgets = append([]int64{0}, append(budgets, int64(tc.n-1)*rb)...)
			cfg := GHBAConfig{MaxGroup: tc.m, LRUEntries: 50, BitsPerFile: tc.bits, Threshold: tc.thr}
			rs, err := GHBA(context.Background(), Replay{Source: src, Servers: tc.n, Seed: 7}, withBudgets(cfg, budgets...)...)
			if err != nil {
				t.Fatal(err)
			}
			for i := 1; i < len(rs); i++ {
				prev, cur := rs[i-1], rs[i]
				tol := 1e-12
				if tc.bits < 12 {
					// The rise of wasted L2 hops f_g+ can bring, per L1 failure.
					d := routing.SegmentFalsePositive(int(math.Round(cur.ReplicasMean))+1, tc.bits) -
						routing.SegmentFalsePositive(int(math.Round(prev.ReplicasMean))+1, tc.bits)
					tol = max(d, 0) * (1 - cur.Levels["L1"])
				}
				if cur.MeanHops > prev.MeanHops+tol {
					t.Errorf("%.1f → %.1f replicas: hops %.5f → %.5f (tolerance %.5f)", prev.ReplicasMean, cur.ReplicasMean, prev.MeanHops, cur.MeanHops, tol)
				}
				if cur.ReplicasMean < prev.ReplicasMean {
					t.Errorf("budget %d → %d: replicas %.2f → %.2f", prev.MemoryBudget, cur.MemoryBudget, prev.ReplicasMean, cur.ReplicasMean)
				}
			}
			var seq []string
			for _, r := range rs {
				seq = append(seq, fmt.Sprintf("%.1f:%.4f", r.ReplicasMean, r.MeanHops))
			}
			t.Logf("replicas:hops %v", seq)
			if first, last := rs[0], rs[len(rs)-1]; last.MeanHops >= first.MeanHops {
				t.Errorf("hops %.4f with every replica, %.4f with the segment alone", last.MeanHops, first.MeanHops)
			}
		})
	}
}

// budgetModel replays src through one budget model and returns it, to
// inspect what each server holds.
func budgetModel(t *testing.T, src Source, n, m int, thr float64, budget int64) *ghbaModel {
	t.Helper()
	gm, err := newGHBAModel(GHBAConfig{MaxGroup: m, LRUEntries: 20, Threshold: thr, MemoryBudget: budget})
	if err != nil {
		t.Fatal(err)
	}
	gm.l1 = &sharedL1{key: l1Key{20, gm.cfg.LRUBitsPerEntry, thr, L1AdmitLRU}}
	if _, err := run(context.Background(), Replay{Source: src, Servers: n, Seed: 2}, gm, gm.l1); err != nil {
		t.Fatal(err)
	}
	return gm
}

// TestBudgetPlacement checks the rule server by server: the segment is
// always held; the replicas' bytes stay within the budget unless the
// segment alone exceeds it; extras are the group-mates first, then the
// rendezvous order, as many as fit; each is one more update message per
// propagation of its origin.
func TestBudgetPlacement(t *testing.T) {
	const n, m = 40, 8
	src := budgetTrace(4000, 4000)
	rb := replicaBytes(t, src, n, 8)
	lo, hi := SegmentReplicas(n, m)
	base := budgetModel(t, src, n, m, 0.01, 0)
	for _, b := range []int64{0, 1, rb - 1, int64(lo) * rb, int64(hi)*rb - 1, int64(hi) * rb, int64(hi+3)*rb + rb/2,
		int64(hi+m-1) * rb, int64(hi+m+5) * rb, int64(2*hi) * rb, int64(n-2) * rb, int64(n-1) * rb, int64(10*n) * rb} {
		t.Run(strconv.FormatInt(b, 10), func(t *testing.T) {
			gm := budgetModel(t, src, n, m, 0.01, b)
			if gm.replicaBytes != rb {
				t.Fatalf("replica of %d bytes, ReplicaBytes says %d", gm.replicaBytes, rb)
			}
			allowed := int(b / rb)
			for s := range n {
				seg := base.held[s]
				if !slices.Equal(gm.seg[s], base.seg[s]) || gm.held[s] != seg+gm.extras[s] {
					t.Fatalf("server %d: segment changed with the budget", s)
				}
				if int64(gm.held[s])*rb > b && gm.extras[s] != 0 {
					t.Errorf("server %d: %d replicas (%d extra) exceed %d bytes", s, gm.held[s], gm.extras[s], b)
				}
				want := min(max(allowed-seg, 0), n-1-seg)
				if b == 0 {
					want = 0
				}
				if gm.extras[s] != want {
					t.Errorf("server %d: %d extras, want %d (segment %d, room for %d)", s, gm.extras[s], want, seg, allowed)
				}
				g := gm.groupOf[s]
				var mates, outside []string
				for o := range n {
					if gm.groupOf[o] == g {
						mates = append(mates, gm.ids[o])
					} else {
						outside = append(outside, gm.ids[o])
					}
				}
				order := ExtraOrder(gm.ids[s], mates, outside, func(id string) bool { return gm.seg[s].has(gm.index[id]) })
				for i, id := range order {
					if in := gm.l2[s].has(gm.index[id]); in != (i < gm.extras[s]) {
						t.Fatalf("server %d: extra #%d %s held = %v with %d extras", s, i, id, in, gm.extras[s])
					}
				}
				for i, id := range order[:min(len(mates)-1, len(order))] {
					if gm.groupOf[gm.index[id]] != g {
						t.Fatalf("server %d: extra #%d %s is not a group-mate", s, i, id)
					}
				}
				if gm.l2[s].has(s) {
					t.Fatalf("server %d holds a replica of itself", s)
				}
			}
			for o := range n {
				holders := 0
				for s := range n {
					if gm.l2[s].has(o) && !gm.seg[s].has(o) {
						holders++
					}
				}
				if got := gm.updMsgs[o] - base.updMsgs[o]; got != int64(holders) {
					t.Errorf("origin %d: %d extra update messages per propagation, %d extra holders", o, got, holders)
				}
			}
		})
	}
}

// TestBudgetSpread: the rendezvous order spreads the extra replicas of the
// origins evenly over the holders (each origin is held by about the same
// number of servers), where a shared order would give some origins to
// every server and others to none.
func TestBudgetSpread(t *testing.T) {
	const n, m = 200, 8
	src := budgetTrace(4000, 2000)
	rb := replicaBytes(t, src, n, 8)
	_, hi := SegmentReplicas(n, m)
	gm := budgetModel(t, src, n, m, 0.01, int64(2*hi)*rb) // about hi − m + 1 outside extras per server
	counts := make([]int, n)
	total := 0
	for s := range n {
		for o := range n {
			if gm.l2[s].has(o) && !gm.seg[s].has(o) && gm.groupOf[o] != gm.groupOf[s] {
				counts[o]++
				total++
			}
		}
	}
	mean := float64(total) / n
	if mean < 10 {
		t.Fatalf("%.1f outside extras per origin: budget too small for the test", mean)
	}
	// Binomial-like spread: within 5 standard deviations of the mean.
	lo, hiC := slices.Min(counts), slices.Max(counts)
	if sd := math.Sqrt(mean); float64(hiC) > mean+5*sd || float64(lo) < mean-5*sd {
		t.Errorf("extra holders per origin %d..%d, mean %.1f", lo, hiC, mean)
	}
}

// TestBudgetReplicasFresh: an extra replica gets the propagations of a
// segment replica. At threshold 0 every replica, extras included, equals
// its owner's live filter at the end of the trace.
func TestBudgetReplicasFresh(t *testing.T) {
	const n, m = 20, 5
	cfg := smallTrace(4000, 20000, 4)
	cfg.DirRenameFrac, cfg.RmdirFrac = 0.01, 0.01
	src := GeneratedSource(cfg, 1)
	rb := replicaBytes(t, src, n, 8)
	gm := budgetModel(t, src, n, m, 0, int64(n-1)*rb)
	for o := range n {
		col, err := gm.replicas.Column(gm.ids[o])
		if err != nil {
			t.Fatal(err)
		}
		if !col.Equal(gm.local[o].Filter()) {
			t.Errorf("replica of %s differs from its owner's filter at threshold 0", gm.ids[o])
		}
	}
}

func TestExtraOrder(t *testing.T) {
	ids := func(xs ...int) []string {
		out := make([]string, len(xs))
		for i, x := range xs {
			out[i] = serverID(x)
		}
		return out
	}
	mates := ids(7, 3, 5, 1)
	outside := ids(0, 2, 4, 6, 8, 9, 10, 11, 12)
	seg := map[string]bool{serverID(4): true, serverID(9): true}
	got := ExtraOrder(serverID(5), mates, outside, func(id string) bool { return seg[id] })
	if want := ids(1, 3, 7); !slices.Equal(got[:3], want) {
		t.Errorf("group-mates first by id: got %v, want %v", got[:3], want)
	}
	rest := got[3:]
	if len(rest) != len(outside)-len(seg) {
		t.Fatalf("%d outside extras, want %d: %v", len(rest), len(outside)-len(seg), rest)
	}
	for i, id := range rest {
		if seg[id] {
			t.Errorf("segment replica %s listed as an extra", id)
		}
		if i > 0 && RendezvousScore(serverID(5), rest[i-1]) < RendezvousScore(serverID(5), id) {
			t.Errorf("not by rendezvous score, highest first: %v", rest)
		}
	}
	// Each holder has its own order.
	other := ExtraOrder(serverID(6), nil, ids(0, 2, 4, 8, 9, 10, 11, 12, 13, 14, 15, 16), func(string) bool { return false })
	mine := ExtraOrder(serverID(5), nil, ids(0, 2, 4, 8, 9, 10, 11, 12, 13, 14, 15, 16), func(string) bool { return false })
	if slices.Equal(other, mine) {
		t.Errorf("two holders share one order %v", mine)
	}
	if RendezvousScore("a", "b") == RendezvousScore("b", "a") {
		t.Errorf("score symmetric in holder and origin")
	}
	// The contract with the server's policy: xxHash-64 of holder, 0, origin.
	if got, want := RendezvousScore("s001", "s042"), xxhash.Sum64String("s001\x00s042"); got != want {
		t.Errorf("RendezvousScore = %#x, want xxHash of holder NUL origin %#x", got, want)
	}
}

// TestReplicaBytesAndSegments: the helpers the command plans a sweep with
// agree with what a simulation measures.
func TestReplicaBytesAndSegments(t *testing.T) {
	tests := []struct {
		n, m int
		bits float64
	}{{10, 8, 8}, {30, 8, 8}, {31, 6, 16}, {100, 8, 8}, {7, 8, 8}}
	src := budgetTrace(3000, 1000)
	init0, err := InitialFiles(context.Background(), src)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range tests {
		rs, err := GHBA(context.Background(), Replay{Source: src, Servers: tc.n, Seed: 1}, GHBAConfig{MaxGroup: tc.m, LRUEntries: 10, BitsPerFile: tc.bits})
		if err != nil {
			t.Fatal(err)
		}
		r := rs[0]
		if init0 != r.InitialFiles {
			t.Errorf("InitialFiles %d, the pass saw %d", init0, r.InitialFiles)
		}
		rb, err := ReplicaBytes(init0, tc.n, tc.bits)
		if err != nil {
			t.Fatal(err)
		}
		if rb != r.ReplicaBytes {
			t.Errorf("N=%d: ReplicaBytes %d, model %d", tc.n, rb, r.ReplicaBytes)
		}
		if math.Abs(r.ReplicaMemoryMean-r.ReplicasMean*float64(rb)) > 1e-6 {
			t.Errorf("N=%d: replica memory %v, %v replicas of %d bytes", tc.n, r.ReplicaMemoryMean, r.ReplicasMean, rb)
		}
		lo, hi := SegmentReplicas(tc.n, tc.m)
		if lo != r.ReplicasMin || hi != r.ReplicasMax {
			t.Errorf("N=%d M=%d: SegmentReplicas %d..%d, simulated %d..%d", tc.n, tc.m, lo, hi, r.ReplicasMin, r.ReplicasMax)
		}
	}
	// A trace file's initial population stops at the first timed record.
	trace := "0 1 exists /a\n0 1 exists /a/b\n0 1 exists /a/b\n5 1 stat /a/b\n6 1 exists /c\n"
	got, err := InitialFiles(context.Background(), ReaderSource(strings.NewReader(trace)))
	if err != nil || got != 2 {
		t.Errorf("InitialFiles = %d, %v; want 2", got, err)
	}
	if BudgetReplicas(0, 100) != 0 || BudgetReplicas(99, 100) != 0 || BudgetReplicas(250, 100) != 2 {
		t.Errorf("BudgetReplicas")
	}
	if _, err := GHBA(context.Background(), Replay{Source: src, Servers: 3}, GHBAConfig{MaxGroup: 2, MemoryBudget: -1}); err == nil {
		t.Errorf("negative budget accepted")
	}
}
