package main

import (
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ghba/ghba/routing/workload"
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

// TestBenchTraceAgainstFake replays a small trace with each cache mode:
// the trace's existing paths are created under each mode's prefix, every
// record is replayed, and the report has the contract's fields. (The fake
// grants no leases, so the caches never hit; TestCacheNeverStale and
// TestProcessCacheNeverStale exercise them against real nodes.)
func TestBenchTraceAgainstFake(t *testing.T) {
	f := startFake(t)
	trace := filepath.Join(t.TempDir(), "t.trace")
	text := `0 0 exists /src/
0 0 exists /src/a.go
0 0 exists /src/b.go
0.1 0 stat /src/a.go
0.2 0 open /src/b.go
0.3 1 readdir /src
0.4 1 stat /src/missing.go
0.5 1 create /src/c.go
0.6 0 stat /src/c.go
`
	if err := os.WriteFile(trace, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := runCLI(t, "--addr", f.Addr(), "--json", "bench", "--trace", trace, "--cache", "off,lru,nexus,off", "--prefix", "/tb")
	if code != 0 {
		t.Fatalf("bench --trace: exit %d: %s", code, errOut)
	}
	rep := hasKeys(t, "bench --trace", decodeJSON(t, out), "trace", "cache_entries", "results")
	var modes []string
	for _, r := range array(t, "results", rep["results"]) {
		m := hasKeys(t, "result", r, "cache", "clients", "ops", "errors", "ops_per_sec", "stats", "stat_mean_ms", "stat_p99_ms", "hit_rate")
		modes = append(modes, m["cache"].(string))
		if m["ops"] != float64(6) || m["stats"] != float64(4) || m["errors"] != float64(0) || m["clients"] != float64(2) {
			t.Errorf("result %v: want 6 ops, 4 stats, no errors, 2 clients", m)
		}
	}
	if want := []string{"off", "lru", "nexus", "off"}; !slices.Equal(modes, want) {
		t.Errorf("modes %v, want %v", modes, want)
	}
	for _, mode := range []string{"off", "lru", "nexus", "off-2"} { // a repeated mode: a prefix of its own
		for _, p := range []string{"/tb-" + mode + "/src/a.go", "/tb-" + mode + "/src/c.go"} {
			if !slices.Contains(f.Paths(), p) {
				t.Errorf("the replay did not create %s", p)
			}
		}
	}
	if _, errOut, code := runCLI(t, "--addr", f.Addr(), "bench", "--trace", trace, "--cache", "arc"); code != exitUsage || !strings.Contains(errOut, "arc") {
		t.Errorf("--cache arc: exit %d: %s", code, errOut)
	}
}

// TestStreamOrder checks the replay's order between client streams: a
// stream waits for those that ended before its first record, and streams
// that overlapped in the recording do not wait for each other.
func TestStreamOrder(t *testing.T) {
	stream := func(from, to float64) []workload.Record {
		return []workload.Record{{Time: time.Duration(from * float64(time.Second))}, {Time: time.Duration(to * float64(time.Second))}}
	}
	tests := []struct {
		name    string
		streams [][]workload.Record
		want    [][]int
	}{
		{"one", [][]workload.Record{stream(0, 1)}, [][]int{nil}},
		{"overlapping", [][]workload.Record{stream(0, 2), stream(1, 3)}, [][]int{nil, nil}},
		{"two builds under a shell", [][]workload.Record{stream(0, 10), stream(1, 4), stream(2, 3), stream(5, 9)},
			[][]int{nil, nil, nil, {1, 2}}},
		{"touching is not before", [][]workload.Record{stream(0, 1), stream(1, 2)}, [][]int{nil, nil}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := streamOrder(tt.streams)
			for i := range tt.want {
				if !slices.Equal(got[i], tt.want[i]) {
					t.Errorf("stream %d waits for %v, want %v", i, got[i], tt.want[i])
				}
			}
		})
	}
}
