package console

import (
	"strings"
	"testing"
	"time"
)

func TestHistoryRing(t *testing.T) {
	h := NewHistory(3)
	t0 := time.Unix(1000, 0)
	for i := range 5 {
		h.Add(Sample{At: t0.Add(time.Duration(i) * time.Second), Counters: Counters{Ops: uint64(i)}})
	}
	got := h.Samples()
	if len(got) != 3 || got[0].Ops != 2 || got[1].Ops != 3 || got[2].Ops != 4 {
		t.Errorf("after 5 samples in a ring of 3: %+v, want the last 3 oldest first", got)
	}
}

func TestChartsRates(t *testing.T) {
	t0 := time.Unix(1000, 0)
	samples := []Sample{
		{At: t0, Counters: Counters{Ops: 100, Levels: [4]uint64{10, 0, 0, 0}}},
		{At: t0.Add(2 * time.Second), Counters: Counters{Ops: 300, Levels: [4]uint64{30, 4, 0, 2}}},
		{At: t0.Add(4 * time.Second), Counters: Counters{Ops: 50}}, // a restart: counters went back
	}
	cs := Charts(samples)
	if len(cs) != 2 {
		t.Fatalf("%d charts", len(cs))
	}
	for _, tc := range []struct {
		name string
		got  []float64
		want []float64
	}{
		{"ops", cs[0].Series[0].Values, []float64{100, 0}},
		{"L1", cs[1].Series[0].Values, []float64{10, 0}},
		{"L2", cs[1].Series[1].Values, []float64{2, 0}},
		{"L4", cs[1].Series[3].Values, []float64{1, 0}},
	} {
		if len(tc.got) != len(tc.want) || tc.got[0] != tc.want[0] || tc.got[1] != tc.want[1] {
			t.Errorf("%s rates %v, want %v", tc.name, tc.got, tc.want)
		}
	}
	svg := string(cs[1].SVG())
	if n := strings.Count(svg, `<polyline class="series"`); n != 4 {
		t.Errorf("levels chart has %d polylines, want 4", n)
	}
	if n := strings.Count(svg, `<circle class="pt"`); n != 8 {
		t.Errorf("levels chart has %d points, want 8", n)
	}
	empty := string((&Charts(samples[:1])[0]).SVG())
	if !strings.Contains(empty, "collecting samples") || strings.Contains(empty, "polyline") {
		t.Errorf("a chart without points: %s", empty)
	}
}

func TestNiceCeil(t *testing.T) {
	for in, want := range map[float64]float64{0: 1, 0.3: 0.5, 1: 1, 1.2: 2, 3: 5, 7: 10, 120: 200, 999: 1000} {
		if got := niceCeil(in); got != want {
			t.Errorf("niceCeil(%v) = %v, want %v", in, got, want)
		}
	}
}
