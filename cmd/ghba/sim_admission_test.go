package main

import (
	"testing"
)

// TestSimL1Admission checks --l1-admission on sim hba and sim ghba: the
// value is reported and changes the L1 results (on a scan-heavy trace,
// --scan-frac, frequency admission wins at L1).
func TestSimL1Admission(t *testing.T) {
	for _, tc := range []struct {
		cmd   []string
		field string // the L1 share in the JSON result
	}{
		{[]string{"hba", "--servers", "10", "--lru-entries", "50"}, "lru_hit_rate"},
		{[]string{"ghba", "--servers", "10", "--max-group", "4", "--lru-entries", "50"}, "p_lru"},
	} {
		var got [2]float64
		for i, adm := range []string{"lru", "frequency"} {
			args := append(append(append([]string{}, tc.cmd...), simTiny...), "--scan-frac", "0.3", "--json", "--l1-admission", adm)
			out, err := runSim(t, args...)
			if err != nil {
				t.Fatalf("%v: %v", args, err)
			}
			v := simDecodeObject(t, out)
			if v["l1_admission"] != adm {
				t.Errorf("%v: l1_admission %v, want %s", args, v["l1_admission"], adm)
			}
			x, ok := v[tc.field].(float64)
			if !ok {
				t.Fatalf("%v: no %s in %s", args, tc.field, out)
			}
			got[i] = x
		}
		if got[1] <= got[0] {
			t.Errorf("%s scan-heavy: %s %v with frequency admission, %v with lru: want higher", tc.cmd[0], tc.field, got[1], got[0])
		}
	}
}

func TestSimL1AdmissionUsage(t *testing.T) {
	for _, args := range [][]string{
		{"hba", "--l1-admission", "lfu"},
		{"hba", "--l1-admission", ""},
		{"ghba", "--l1-admission", "LRU"},
		{"hba", "--scan-frac", "1.5"},
		{"ghba", "--scan-frac", "-0.1"},
		{"hba", "--scan-frac", "0.2", "--trace", "../../testdata/small.trace"},
	} {
		full := append(append([]string{args[0]}, simTiny...), args[1:]...)
		_, err := runSim(t, full...)
		if err == nil || exitCode(err) != exitUsage {
			t.Errorf("%v: error %v (exit %d), want a usage error", args, err, exitCode(err))
		}
	}
}
