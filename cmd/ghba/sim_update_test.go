package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSimUpdateJSON: one result per N; HBA's update reaches N−1 servers,
// G-HBA's one per other group, so G-HBA's is faster and grows more slowly.
func TestSimUpdateJSON(t *testing.T) {
	out, err := runSim(t, append([]string{"update", "--servers", "10,30,60", "--max-group", "6", "--json"}, spillTiny...)...)
	if err != nil {
		t.Fatal(err)
	}
	runs := simDecodeRuns(t, out)
	if len(runs) != 3 {
		t.Fatalf("%d results, want 3", len(runs))
	}
	var prevH, prevG float64
	for i, r := range runs {
		n := simNumber(t, r, "servers")
		groups := simNumber(t, r, "groups")
		if m := simNumber(t, r, "hba_messages_per_update"); m != n-1 {
			t.Errorf("N=%v: HBA %v messages per update", n, m)
		}
		if m := simNumber(t, r, "ghba_messages_per_update"); m < groups-1 || m > 1.2*(groups-1) {
			t.Errorf("N=%v: G-HBA %v messages per update, %v groups", n, m, groups)
		}
		h, g := simNumber(t, r, "hba_update_latency_ms"), simNumber(t, r, "ghba_update_latency_ms")
		if !(g < h) {
			t.Errorf("N=%v: G-HBA %v ms, HBA %v ms", n, g, h)
		}
		if i > 0 && !(g-prevG < h-prevH) {
			t.Errorf("N=%v: G-HBA grew %v ms, HBA %v ms", n, g-prevG, h-prevH)
		}
		if u := simNumber(t, r, "hba_updates"); u == 0 || u != simNumber(t, r, "ghba_updates") {
			t.Errorf("N=%v: %v HBA updates, %v G-HBA", n, u, r["ghba_updates"])
		}
		prevH, prevG = h, g
	}
}

func TestSimUpdateTableAndOut(t *testing.T) {
	dir := t.TempDir()
	out, err := runSim(t, append([]string{"update", "--servers", "10,20", "--d-per-msg", "0.05", "--out", dir}, spillTiny...)...)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"G-HBA §2.3, Fig. 6", "0.2 + 0.05·r ms", "G-HBA msgs/update", "HBA ms"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	for _, f := range []string{"update.csv", "update_latency.png"} {
		st, err := os.Stat(filepath.Join(dir, f))
		if err != nil || st.Size() == 0 {
			t.Errorf("%s not written: %v", f, err)
		}
	}
}

func TestSimUpdateUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"--servers", "1"},
		{"--max-group", "0"},
		{"--d-per-msg", "-1"},
		{"--ops-per-server", "-3"},
		{"--threshold", "200"},
		{"extra"},
	} {
		full := append(append([]string{"update", "--servers", "10"}, spillTiny...), args...)
		if _, err := runSim(t, full...); err == nil || exitCode(err) != exitUsage {
			t.Errorf("%v: error %v (exit %d), want a usage error", args, err, exitCode(err))
		}
	}
}
