package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// spillTiny keeps a spill or update run under a second: 60 files and 240
// ops per server.
var spillTiny = []string{"--files-per-server", "60", "--ops-per-server", "240", "--lru-entries", "20"}

// TestSimSpillJSON: one row per intensity; "100%" holds every HBA replica
// at the highest intensity, smaller memories make HBA spill as the
// intensity grows while G-HBA's segments stay in memory.
func TestSimSpillJSON(t *testing.T) {
	out, err := runSim(t, append([]string{"spill", "--servers", "20", "--max-group", "5", "--intensity", "1,2,4",
		"--memory", "100%,30%,1KiB", "--json"}, spillTiny...)...)
	if err != nil {
		t.Fatal(err)
	}
	runs := simDecodeRuns(t, out)
	if len(runs) != 3 {
		t.Fatalf("%d rows, want one per intensity", len(runs))
	}
	var prevBytes float64
	for i, r := range runs {
		k := simNumber(t, r, "intensity")
		if ops := simNumber(t, r, "ops"); ops != k*240*20 {
			t.Errorf("intensity %v: %v ops, want %v", k, ops, k*240*20)
		}
		rb := simNumber(t, r, "replica_bytes")
		if rb <= prevBytes {
			t.Errorf("intensity %v: replica %v bytes, not above %v", k, rb, prevBytes)
		}
		prevBytes = rb
		pts, ok := r["memory"].([]any)
		if !ok || len(pts) != 3 {
			t.Fatalf("intensity %v: memory points %v", k, r["memory"])
		}
		full, quarter, kib := pts[0].(map[string]any), pts[1].(map[string]any), pts[2].(map[string]any)
		if b := simNumber(t, kib, "memory_bytes"); b != 1024 {
			t.Errorf("1KiB resolved to %v bytes", b)
		}
		if s := simNumber(t, full, "hba_spilled"); s != 0 {
			t.Errorf("intensity %v, 100%%: HBA spilled %v", k, s)
		}
		if simNumber(t, full, "hba_latency_ms") > simNumber(t, full, "ghba_latency_ms") {
			t.Errorf("intensity %v, no spill: HBA slower than G-HBA: %v", k, full)
		}
		for _, p := range []map[string]any{full, quarter} {
			if s := simNumber(t, p, "ghba_spilled_max"); s != 0 {
				t.Errorf("intensity %v: G-HBA spilled %v at %v bytes", k, s, p["memory_bytes"])
			}
		}
		// 30% of HBA's memory at intensity 4 holds every replica of
		// intensity 1 (a quarter, and filter sizes round up a little),
		// not of intensity 2 (a half).
		if spilled := simNumber(t, quarter, "hba_spilled") > 0; spilled != (i > 0) {
			t.Errorf("intensity %v, 30%%: HBA spilled %v", k, quarter["hba_spilled"])
		}
		if i > 0 && simNumber(t, quarter, "hba_latency_ms") < 2*simNumber(t, quarter, "ghba_latency_ms") {
			t.Errorf("intensity %v, 30%%: HBA %v ms, G-HBA %v ms", k, quarter["hba_latency_ms"], quarter["ghba_latency_ms"])
		}
	}
}

func TestSimSpillTableAndOut(t *testing.T) {
	dir := t.TempDir()
	out, err := runSim(t, append([]string{"spill", "--servers", "12", "--max-group", "4", "--intensity", "1,2",
		"--memory", "100%,10%", "--d-disk", "8", "--out", dir}, spillTiny...)...)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"G-HBA §3.2, Fig. 4", "D_disk = 8 ms", "HBA spilled", "G-HBA ms", "100%", "10%", "60 files per server, 240 ops per server"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	for _, f := range []string{"spill.csv", "spill_latency.png"} {
		st, err := os.Stat(filepath.Join(dir, f))
		if err != nil || st.Size() == 0 {
			t.Errorf("%s not written: %v", f, err)
		}
	}
	csv, err := os.ReadFile(filepath.Join(dir, "spill.csv"))
	if err != nil {
		t.Fatal(err)
	}
	if lines := strings.Count(string(csv), "\n"); lines != 1+2*2 {
		t.Errorf("spill.csv has %d lines, want a header and 4 rows:\n%s", lines, csv)
	}
}

func TestSimParseSpillMemory(t *testing.T) {
	tests := []struct {
		in    string
		n     int
		rb    int64
		bytes int64
	}{
		{"100%", 11, 100, 1000},
		{"50%", 11, 100, 500},
		{"12.5%", 9, 80, 80},
		{"0%", 11, 100, 0},
		{"64KiB", 11, 100, 64 << 10},
		{"2MiB", 100, 1, 2 << 20},
		{"300B", 5, 7, 300},
	}
	for _, tc := range tests {
		m, err := parseSpillMemory(tc.in)
		if err != nil {
			t.Errorf("%q: %v", tc.in, err)
			continue
		}
		if got := m.resolve(tc.n, tc.rb); got != tc.bytes {
			t.Errorf("%q at N=%d, replica %d: %d bytes, want %d", tc.in, tc.n, tc.rb, got, tc.bytes)
		}
	}
	for _, bad := range []string{"", "-5%", "x%", "12", "2x", "all", "-1KiB", "%"} {
		if _, err := parseSpillMemory(bad); err == nil || exitCode(err) != exitUsage {
			t.Errorf("%q: %v, want a usage error", bad, err)
		}
	}
}

func TestSimSpillUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"--memory", "lots"},
		{"--intensity", "0"},
		{"--servers", "1"},
		{"--max-group", "0"},
		{"--d-disk", "-1"},
		{"--d-rtt", "-0.1"},
		{"--tif", "2"},
		{"--trace", "go.mod"},
		{"--files-per-server", "-1"},
		{"extra"},
	} {
		full := append(append([]string{"spill", "--servers", "10"}, spillTiny...), args...)
		if _, err := runSim(t, full...); err == nil || exitCode(err) != exitUsage {
			t.Errorf("%v: error %v (exit %d), want a usage error", args, err, exitCode(err))
		}
	}
}

func TestSimSpillUpdateHelp(t *testing.T) {
	tests := []struct {
		sub  string
		want []string
	}{
		{"spill", []string{"Examples:", "ghba sim spill", "--memory", "--intensity", "--d-disk", "(default 150)", "Fig. 4"}},
		{"update", []string{"Examples:", "ghba sim update", "--d-per-msg", "--files-per-server", "(default 150)", "Fig. 6"}},
	}
	for _, tc := range tests {
		out, err := runSim(t, tc.sub, "--help")
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range tc.want {
			if !strings.Contains(out, w) {
				t.Errorf("%s --help lacks %q:\n%s", tc.sub, w, out)
			}
		}
	}
}
