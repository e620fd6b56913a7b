package main

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// budgetTiny keeps a budget sweep under a second: 100 files and 300 ops per
// server.
var budgetTiny = []string{"--files-per-server", "100", "--ops-per-server", "300", "--lru-entries", "30"}

// TestSimBudgetJSON: one row per N and distinct budget; budget 0 holds the
// segment alone, "all" every other server's filter at exactly HBA's
// memory; per-server trace scaling gives every N the same files per server.
func TestSimBudgetJSON(t *testing.T) {
	out, err := runSim(t, append([]string{"budget", "--servers", "10,20", "--budgets", "0,1x,all", "--json"}, budgetTiny...)...)
	if err != nil {
		t.Fatal(err)
	}
	runs := simDecodeRuns(t, out)
	// N=10, M=8: two groups of 5, segment 1 → 0, 1x (1), all (9).
	// N=20: groups of 7, 7, 6, largest segment 3 → 0, 1x (3), all (19).
	if len(runs) != 6 {
		t.Fatalf("%d rows, want 6", len(runs))
	}
	for i, r := range runs {
		n := simNumber(t, r, "servers")
		simCheckLevels(t, fmt.Sprintf("row %d", i), r)
		if f := simNumber(t, r, "initial_files") / n; f < 100 || f > 115 {
			t.Errorf("N=%v: %v initial paths per server, want 100 files plus directories", n, f)
		}
		rb := simNumber(t, r, "replica_bytes")
		reps := simNumber(t, r, "replicas_per_server")
		if mem := simNumber(t, r, "replica_memory_bytes"); math.Abs(mem-reps*rb) > 1e-6 {
			t.Errorf("row %d: replica memory %v, %v replicas of %v bytes", i, mem, reps, rb)
		}
		switch b := r["budget"].(string); {
		case b == "0":
			if simNumber(t, r, "memory_budget_bytes") != 0 || simNumber(t, r, "extra_replicas_per_server") != 0 {
				t.Errorf("N=%v budget 0: %v", n, r)
			}
		case strings.HasPrefix(b, "all"):
			if reps != n-1 || simNumber(t, r, "replica_memory_vs_hba") != 1 || simNumber(t, r, "budget_replicas") != n-1 {
				t.Errorf("N=%v all: %v replicas, %v of HBA's memory", n, reps, r["replica_memory_vs_hba"])
			}
			if simNumber(t, r, "memory_budget_bytes") != (n-1)*rb {
				t.Errorf("N=%v all: budget %v bytes, want %v", n, r["memory_budget_bytes"], (n-1)*rb)
			}
		}
	}
	if g, h := simNumber(t, runs[0], "mean_hops"), simNumber(t, runs[2], "mean_hops"); h >= g {
		t.Errorf("N=10: %v hops with every replica, %v with the segment", h, g)
	}
	// An explicit --files is the total for every N.
	out, err = runSim(t, "budget", "--servers", "10,20", "--budgets", "0", "--files", "3000", "--ops", "3000", "--json")
	if err != nil {
		t.Fatal(err)
	}
	runs = simDecodeRuns(t, out)
	if a, b := simNumber(t, runs[0], "initial_files"), simNumber(t, runs[1], "initial_files"); a != b || a < 3000 {
		t.Errorf("--files 3000: %v and %v initial paths", a, b)
	}
}

func TestSimBudgetTableAndOut(t *testing.T) {
	dir := t.TempDir()
	out, err := runSim(t, append([]string{"budget", "--servers", "10,30", "--budgets", "0,2x,64KiB,all", "--out", dir}, budgetTiny...)...)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"budget bytes", "replica MiB", "hops", "2x (8)", "all (29)", "64KiB (", "100 files per server, 300 ops per server"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	for _, f := range []string{"budget.csv", "budget_hops.png", "budget_l2.png"} {
		st, err := os.Stat(filepath.Join(dir, f))
		if err != nil || st.Size() == 0 {
			t.Errorf("%s not written: %v", f, err)
		}
	}
	csv, err := os.ReadFile(filepath.Join(dir, "budget.csv"))
	if err != nil {
		t.Fatal(err)
	}
	if lines := strings.Count(string(csv), "\n"); lines != 1+4+4 {
		t.Errorf("budget.csv has %d lines, want a header and 8 rows:\n%s", lines, csv)
	}
}

func TestSimParseBudget(t *testing.T) {
	const rb = 100
	tests := []struct {
		in       string
		n, seg   int
		bytes    int64
		replicas int
	}{
		{"0", 30, 4, 0, 0},
		{"3", 30, 4, 300, 3},
		{"500", 30, 4, 2900, 29}, // at most N−1
		{"2x", 30, 4, 800, 8},
		{"0.5x", 30, 5, 200, 2},
		{"8x", 30, 4, 2900, 29},
		{"all", 30, 4, 2900, 29},
		{"hba", 10, 1, 900, 9},
		{"1KiB", 30, 4, 1024, 10},
		{"250B", 30, 4, 250, 2},
		{"1MiB", 30, 4, 1 << 20, 29},
	}
	for _, tc := range tests {
		sp, err := parseBudget(tc.in)
		if err != nil {
			t.Errorf("%q: %v", tc.in, err)
			continue
		}
		b, r := sp.resolve(tc.n, tc.seg, rb)
		if b != tc.bytes || r != tc.replicas {
			t.Errorf("%q at N=%d, segment %d: %d bytes, %d replicas; want %d, %d", tc.in, tc.n, tc.seg, b, r, tc.bytes, tc.replicas)
		}
	}
	for _, bad := range []string{"", "-1", "x", "-2x", "1.5y", "MiB", "-3KiB", "all2"} {
		if _, err := parseBudget(bad); err == nil || exitCode(err) != exitUsage {
			t.Errorf("%q: %v, want a usage error", bad, err)
		}
	}
}

func TestSimBudgetUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"--budgets", "lots"},
		{"--budgets", "-1"},
		{"--max-group", "0"},
		{"--servers", "0"},
		{"--files-per-server", "-1"},
		{"--threshold", "200"},
		{"extra"},
	} {
		full := append(append([]string{"budget", "--servers", "10"}, budgetTiny...), args...)
		if _, err := runSim(t, full...); err == nil || exitCode(err) != exitUsage {
			t.Errorf("%v: error %v (exit %d), want a usage error", args, err, exitCode(err))
		}
	}
}

func TestSimBudgetHelp(t *testing.T) {
	out, err := runSim(t, "budget", "--help")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Examples:", "ghba sim budget", "--budgets", "--files-per-server", "(default 150)"} {
		if !strings.Contains(out, want) {
			t.Errorf("budget --help lacks %q:\n%s", want, out)
		}
	}
}
