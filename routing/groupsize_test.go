package routing

import (
	"math"
	"testing"
)

// groupSizeBase are inputs of a small cluster (4 nodes, R = 2).
func groupSizeBase() GroupSizeInputs {
	return GroupSizeInputs{Servers: 4, MinM: 2, MaxM: 64, PLRU: 0.5, PL2: 0.9, Mem: 0.001, RTT: 0.2, PerMsg: 0.1,
		ReplicaBytes: 1250, L1Bytes: 100, BFA8Bytes: 1000}
}

func TestChooseGroupSize(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   func(*GroupSizeInputs)
		want int
	}{
		// A multicast that costs much more per member than it saves in
		// memory: groups of two.
		{"steep multicast", func(in *GroupSizeInputs) { in.PerMsg = 50 }, 2},
		// A multicast whose cost does not grow: one group, the least memory.
		{"flat multicast", func(in *GroupSizeInputs) { in.PerMsg = 0 }, 4},
		// A budget that holds every filter: memory does not shrink with M
		// and a miss skips the group multicast; the smallest M ties and wins.
		{"budget holds all", func(in *GroupSizeInputs) { in.BudgetBytes = 1 << 20 }, 2},
		// The replication factor bounds M from below.
		{"R above the optimum", func(in *GroupSizeInputs) { in.PerMsg, in.MinM = 50, 3 }, 4},
		{"paper's scale, N = 100", func(in *GroupSizeInputs) {
			in.Servers, in.PLRU, in.PL2 = 100, 0.9, 0.2
			in.ReplicaBytes, in.BFA8Bytes, in.L1Bytes = 500, 500, 100*375 // the simulator's sizes
		}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := groupSizeBase()
			tc.in(&in)
			m, pts, err := ChooseGroupSize(in)
			if err != nil {
				t.Fatal(err)
			}
			if tc.want != 0 && m != tc.want {
				t.Errorf("M = %d, want %d; points %+v", m, tc.want, pts)
			}
			if len(pts) != min(in.MaxM, in.Servers)-in.MinM+1 {
				t.Errorf("%d points for %d..%d", len(pts), in.MinM, min(in.MaxM, in.Servers))
			}
			for _, p := range pts {
				if p.Gamma > pts[m-in.MinM].Gamma && p.GroupSize >= in.MinM {
					t.Errorf("M=%d has Γ %g above the chosen M=%d's %g", p.M, p.Gamma, m, pts[m-in.MinM].Gamma)
				}
				if want := NormalizedThroughput(p.Latency, p.Space); math.Abs(p.Gamma-want) > 1e-12 {
					t.Errorf("M=%d: Γ %g, want %g", p.M, p.Gamma, want)
				}
			}
			t.Logf("M = %d", m)
		})
	}
}

// TestGroupSizePoint checks the model's terms against G-HBA's: groups of
// M' = N/⌈N/M⌉, segments of (N − M')/M' replicas, eq. 3's latency, and no
// group multicast once the budget holds every other node's filter.
func TestGroupSizePoint(t *testing.T) {
	in := groupSizeBase()
	in.Servers = 10
	p := in.Point(4) // ⌈10/4⌉ = 3 groups of 3 (one of 4)
	if p.GroupSize != 3 || math.Abs(p.Replicas-7.0/3) > 1e-12 {
		t.Errorf("M=4 of 10: M' %d, replicas %g; want 3, 7/3", p.GroupSize, p.Replicas)
	}
	want := LatencyModel{PLRU: in.PLRU, PL2: in.PL2, DLRU: in.Mem, DL2: in.Mem, DGroup: 0.2 + 0.1*2, DNet: 0.2 + 0.1*9, M: 3, MPrime: 3}.Latency()
	if math.Abs(p.Latency-want) > 1e-12 {
		t.Errorf("latency %g, want eq. 3's %g", p.Latency, want)
	}
	if want := (7.0/3*1250 + 1250 + 100) / (10 * 1000); math.Abs(p.Space-want) > 1e-12 {
		t.Errorf("space %g, want %g", p.Space, want)
	}
	in.BudgetBytes = 9 * 1250
	p = in.Point(4)
	if p.Replicas != 9 {
		t.Errorf("a budget of 9 replicas: %g held", p.Replicas)
	}
	if want := in.Mem + 0.5*in.Mem + 0.5*(1-0.9)*(0.2+0.1*9); math.Abs(p.Latency-want) > 1e-12 {
		t.Errorf("every filter held: latency %g, want %g (no group multicast)", p.Latency, want)
	}
	if err := (GroupSizeInputs{Servers: 4, MinM: 3, MaxM: 2, ReplicaBytes: 1, BFA8Bytes: 1}).Validate(); err == nil {
		t.Error("bounds 3..2 accepted")
	}
}
