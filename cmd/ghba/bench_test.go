package main

import (
	"path"
	"slices"
	"strings"
	"testing"
)

func TestMakeBenchTree(t *testing.T) {
	for _, tt := range []struct{ n, perDir int }{{1, 20}, {2, 20}, {21, 20}, {3000, 20}, {100, 1}, {10_000, 50}} {
		tr := makeBenchTree("/b", tt.n, tt.perDir)
		all := tr.all()
		if len(all) != tt.n {
			t.Errorf("n=%d perDir=%d: %d paths", tt.n, tt.perDir, len(all))
		}
		seen := map[string]bool{"/b": true}
		for _, p := range all {
			if seen[p] {
				t.Errorf("n=%d: duplicate %s", tt.n, p)
			}
			// Parents come before children.
			if !seen[path.Dir(p)] {
				t.Errorf("n=%d: %s before its parent", tt.n, p)
			}
			seen[p] = true
		}
		if tt.n > tt.perDir && len(tr.files) == 0 {
			t.Errorf("n=%d: no files", tt.n)
		}
	}
}

func TestBenchAgainstFake(t *testing.T) {
	f := startFake(t)
	out, errOut, code := runCLI(t, "--addr", f.Addr(), "--json", "bench", "--paths", "120", "--files-per-dir", "9", "--prefix", "/bench")
	if code != 0 {
		t.Fatalf("bench: exit %d: %s", code, errOut)
	}
	rep := hasKeys(t, "bench", decodeJSON(t, out), "prefix", "paths", "dirs", "files", "phases")
	phases := array(t, "phases", rep["phases"])
	var names []string
	for _, p := range phases {
		m := hasKeys(t, "phase", p, "phase", "node", "ops", "errors", "ops_per_sec", "p50_ms", "p99_ms", "mean_hops")
		names = append(names, m["phase"].(string))
		if m["errors"] != float64(0) {
			t.Errorf("phase %v had errors", m)
		}
		if ph := m["phase"]; ph == "stat" || ph == "stat-uncached" || ph == "stat-routed" || ph == "lookup" {
			if m["ops"] != float64(120) {
				t.Errorf("%s ops = %v, want 120", ph, m["ops"])
			}
			lv := hasKeys(t, "levels", m["levels"])
			total := 0.0
			for _, v := range lv {
				total += v.(float64)
			}
			if total != 120 {
				t.Errorf("%s levels %v do not sum to 120", ph, lv)
			}
		}
	}
	// The fake's members list one alive node: one lookup phase.
	if want := []string{"mkdir", "create", "stat", "lookup"}; !slices.Equal(names, want) {
		t.Errorf("phases %v, want %v", names, want)
	}
	if got := len(f.Paths()); got != 122 { // "/", "/bench" and 120 paths
		t.Errorf("fake holds %d paths, want 122", got)
	}

	// Reads of the existing tree only, with and without the home cache;
	// the human table.
	out, errOut, code = runCLI(t, "--addr", f.Addr(), "bench", "--paths", "120", "--files-per-dir", "9", "--prefix", "/bench", "--phases", "stat,stat-uncached,stat-routed,lookup")
	if code != 0 {
		t.Fatalf("bench stat,stat-uncached,stat-routed,lookup: exit %d: %s", code, errOut)
	}
	for _, w := range []string{"PHASE", "HOPS/OP", "stat", "stat-uncached", "stat-routed", "lookup", "120 (100%)"} {
		if !strings.Contains(out, w) {
			t.Errorf("bench table lacks %q:\n%s", w, out)
		}
	}

	// Creating the same tree again fails (every path exists): exit 1.
	_, errOut, code = runCLI(t, "--addr", f.Addr(), "bench", "--paths", "120", "--files-per-dir", "9", "--prefix", "/bench", "--phases", "create")
	if code != exitError || !strings.Contains(errOut, "operations failed") {
		t.Errorf("bench of existing paths: exit %d, stderr %q", code, errOut)
	}
}
