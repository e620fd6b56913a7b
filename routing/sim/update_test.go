package sim

import (
	"context"
	"errors"
	"fmt"
	"math"
	"testing"
)

// TestUpdateLatency: an HBA update reaches the N−1 other servers, a G-HBA
// update one holder in each other group (plus IDBFA multiple hits), so
// G-HBA's update is faster and its latency grows more slowly with N
// (G-HBA Fig. 6). Both schemes propagate the same local filters on the
// same pass.
func TestUpdateLatency(t *testing.T) {
	tests := []struct {
		n, m int
	}{{10, 4}, {20, 5}, {40, 8}, {80, 8}}
	d := DefaultDelays
	var prev *UpdateResult
	for _, tc := range tests {
		t.Run(fmt.Sprintf("N=%d M=%d", tc.n, tc.m), func(t *testing.T) {
			// 60 files and 240 ops per server.
			src := spillTrace(60*tc.n, 240*tc.n, 1)
			res, err := UpdateLatency(context.Background(), Replay{Source: src, Servers: tc.n, Seed: 2},
				UpdateConfig{GHBA: GHBAConfig{MaxGroup: tc.m, LRUEntries: 20, Threshold: 0.01}})
			if err != nil {
				t.Fatal(err)
			}
			groups := len(Groups(tc.n, tc.m))
			if res.Groups != groups || res.Servers != tc.n {
				t.Errorf("%d servers in %d groups, want %d in %d", res.Servers, res.Groups, tc.n, groups)
			}
			if res.HBAUpdates == 0 || res.HBAUpdates != res.GHBAUpdates {
				t.Errorf("propagations: HBA %v, G-HBA %v; want the same, not 0", res.HBAUpdates, res.GHBAUpdates)
			}
			if res.HBAMessagesPerUpdate != float64(tc.n-1) || res.HBALatency != d.Net(tc.n) {
				t.Errorf("HBA: %v messages, %v ms per update; want %d, %v", res.HBAMessagesPerUpdate, res.HBALatency, tc.n-1, d.Net(tc.n))
			}
			// At least one message per other group; IDBFA multiple hits
			// are rare (16 bits per id).
			if lo := float64(groups - 1); res.GHBAMessagesPerUpdate < lo || res.GHBAMessagesPerUpdate > 1.2*lo {
				t.Errorf("G-HBA: %v messages per update, want %v to %v", res.GHBAMessagesPerUpdate, lo, 1.2*lo)
			}
			if want := d.RTT + d.PerMsg*res.GHBAMessagesPerUpdate; math.Abs(res.GHBALatency-want) > 1e-12 {
				t.Errorf("G-HBA update %v ms, want %v", res.GHBALatency, want)
			}
			if !(res.GHBALatency < res.HBALatency) {
				t.Errorf("G-HBA update %v ms, HBA %v ms", res.GHBALatency, res.HBALatency)
			}
			if got, want := res.HBAMessagesPerSecond/res.GHBAMessagesPerSecond, res.HBAMessagesPerUpdate/res.GHBAMessagesPerUpdate; math.Abs(got-want) > 1e-9 {
				t.Errorf("message rates HBA/G-HBA %v, want the ratio of messages per update %v", got, want)
			}
			if prev != nil {
				dh, dg := res.HBALatency-prev.HBALatency, res.GHBALatency-prev.GHBALatency
				if !(dh > 0) || !(dg < dh/2) {
					t.Errorf("N %d → %d: HBA +%v ms, G-HBA +%v ms", prev.Servers, tc.n, dh, dg)
				}
			}
			t.Logf("HBA %.4f ms (%v msgs), G-HBA %.4f ms (%.2f msgs), %v updates", res.HBALatency, res.HBAMessagesPerUpdate, res.GHBALatency, res.GHBAMessagesPerUpdate, res.HBAUpdates)
			prev = res
		})
	}
}

// TestUpdateOneGroup: with a single group no server holds a replica of
// another's filter in G-HBA, so an update costs nothing.
func TestUpdateOneGroup(t *testing.T) {
	res, err := UpdateLatency(context.Background(), Replay{Source: spillTrace(600, 2400, 1), Servers: 6, Seed: 1},
		UpdateConfig{GHBA: GHBAConfig{MaxGroup: 8, LRUEntries: 20}})
	if err != nil {
		t.Fatal(err)
	}
	if res.GHBAMessagesPerUpdate != 0 || res.GHBALatency != 0 || res.HBALatency != DefaultDelays.Net(6) {
		t.Errorf("one group: %+v", res)
	}
}

func TestDelaysMulticast(t *testing.T) {
	d := Delays{Mem: 0.001, RTT: 0.25, PerMsg: 0.07}
	for _, m := range []int{2, 3, 9, 100} {
		if got, want := d.Multicast(float64(m-1)), d.Group(m); math.Abs(got-want) > 1e-12 {
			t.Errorf("Multicast(%d) = %v, Group(%d) = %v", m-1, got, m, want)
		}
		if got, want := d.Multicast(float64(m-1)), d.Net(m); math.Abs(got-want) > 1e-12 {
			t.Errorf("Multicast(%d) = %v, Net(%d) = %v", m-1, got, m, want)
		}
	}
	for _, r := range []float64{0, -1} {
		if got := d.Multicast(r); got != 0 {
			t.Errorf("Multicast(%v) = %v, want 0", r, got)
		}
	}
}

func TestUpdateBadConfig(t *testing.T) {
	r := Replay{Source: spillTrace(100, 10, 1), Servers: 6}
	for _, cfg := range []UpdateConfig{
		{GHBA: GHBAConfig{MaxGroup: 0}},
		{GHBA: GHBAConfig{MaxGroup: 3, MemoryBudget: 1}},
		{GHBA: GHBAConfig{MaxGroup: 3}, Delays: Delays{PerMsg: math.NaN()}},
	} {
		if _, err := UpdateLatency(context.Background(), r, cfg); !errors.Is(err, ErrConfig) {
			t.Errorf("%+v: %v, want ErrConfig", cfg, err)
		}
	}
}
