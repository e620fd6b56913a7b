package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// nexusTiny keeps a nexus run well under a second.
var nexusTiny = []string{"--quick", "--files", "3000", "--ops", "6000"}

var nexusAlgorithms = []string{"lru", "lfu", "mru", "first_successor", "last_successor", "noah",
	"recent_popularity", "pg1", "pg2", "nexus", "opt"}

// TestSimNexusJSONContract: "ghba sim nexus --cache-fraction 0.1 --json"
// prints one object with cache_fraction and the client local hit rate of
// every algorithm in [0, 1]; OPT hits at least as often as every policy
// without prefetching.
func TestSimNexusJSONContract(t *testing.T) {
	out, err := runSim(t, append([]string{"nexus", "--cache-fraction", "0.1", "--json"}, nexusTiny...)...)
	if err != nil {
		t.Fatal(err)
	}
	v := simDecodeObject(t, out)
	if f := simNumber(t, v, "cache_fraction"); f != 0.1 {
		t.Errorf("cache_fraction = %v", f)
	}
	hit, ok := v["hit_rate"].(map[string]any)
	if !ok {
		t.Fatalf("hit_rate missing: %v", v)
	}
	for _, k := range nexusAlgorithms {
		if x := simNumber(t, hit, k); x < 0 || x > 1 {
			t.Errorf("hit_rate.%s = %v", k, x)
		}
	}
	opt := simNumber(t, hit, "opt")
	for _, k := range []string{"lru", "lfu", "mru"} {
		if x := simNumber(t, hit, k); x > opt {
			t.Errorf("%s %v beats OPT %v", k, x, opt)
		}
	}
	for _, k := range []string{"mean_response_ms", "prefetch_used", "prefetch_wasted", "consistency_messages_per_access"} {
		m, ok := v[k].(map[string]any)
		if !ok || len(m) != len(nexusAlgorithms) {
			t.Errorf("%s: %v", k, v[k])
		}
	}
	for k, n := range map[string]int{"weights_hit_rate": 20, "window_group_hit_rate": 25, "grouping_hit_rate": 2,
		"mean_response_ms_no_consistency": 5} {
		if m, ok := v[k].(map[string]any); !ok || len(m) != n {
			t.Errorf("%s has %d entries, want %d: %v", k, len(m), n, v[k])
		}
	}
	if g := v["grouping_hit_rate"].(map[string]any); g["client"] != hit["nexus"] {
		t.Errorf("client-oriented %v ≠ nexus %v", g["client"], hit["nexus"])
	}
	if w := v["window_group_hit_rate"].(map[string]any); w["w5_g2"] != hit["nexus"] {
		t.Errorf("w5_g2 %v ≠ nexus %v", w["w5_g2"], hit["nexus"])
	}
	if a := simNumber(t, v, "accesses"); a != 6000 {
		t.Errorf("accesses = %v", a)
	}
	if ms := simNumber(t, v, "network_delay_ms"); ms != 0.3 {
		t.Errorf("network delay %v ms, want the paper's 0.3", ms)
	}
}

// TestSimNexusFractions: without --cache-fraction the run covers 10, 30
// and 50%, printed as {"runs": [...]}; hit rates grow with the cache.
func TestSimNexusFractions(t *testing.T) {
	out, err := runSim(t, append([]string{"nexus", "--json", "--studies", "compare"}, nexusTiny...)...)
	if err != nil {
		t.Fatal(err)
	}
	runs := simDecodeRuns(t, out)
	if len(runs) != 3 {
		t.Fatalf("%d runs, want 3", len(runs))
	}
	prev := -1.0
	for i, want := range []float64{0.1, 0.3, 0.5} {
		r := runs[i]
		if f := simNumber(t, r, "cache_fraction"); f != want {
			t.Errorf("run %d: cache_fraction %v, want %v", i, f, want)
		}
		lru := simNumber(t, r["hit_rate"].(map[string]any), "lru")
		if lru < prev {
			t.Errorf("LRU hit rate %v at %v below %v", lru, want, prev)
		}
		prev = lru
		if _, ok := r["weights_hit_rate"]; ok {
			t.Errorf("weights study ran with --studies compare")
		}
	}
}

func TestSimNexusStudiesAndRuns(t *testing.T) {
	out, err := runSim(t, append([]string{"nexus", "--cache-fraction", "0.3", "--studies", "weights", "--full-grid",
		"--runs", "2", "--json"}, nexusTiny...)...)
	if err != nil {
		t.Fatal(err)
	}
	v := simDecodeObject(t, out)
	hit := v["hit_rate"].(map[string]any)
	if len(hit) != 1 || hit["nexus"] == nil {
		t.Errorf("hit_rate %v: want nexus alone", hit)
	}
	if w := v["weights_hit_rate"].(map[string]any); len(w) != 4*5*5 || w["polynomial_w3_g4"] == nil {
		t.Errorf("full grid: %d entries", len(w))
	}
	// Consistency alone reports the five algorithms of Fig. 16.
	out, err = runSim(t, append([]string{"nexus", "--cache-fraction", "0.1", "--studies", "consistency",
		"--async-prefetch", "--grouping", "server"}, nexusTiny...)...)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Consistency control", "ms w/o consistency", "pg2", "opt"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}

func TestSimNexusTableAndOut(t *testing.T) {
	dir := t.TempDir()
	out, err := runSim(t, append([]string{"nexus", "--out", dir}, nexusTiny...)...)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Client local hit rate", "Figs. 12–16", "first_successor", "recent_popularity",
		"Fig. 8", "exponential", "Fig. 9", "Fig. 10", "server-oriented hit%", "network 300µs"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	for _, f := range []string{"nexus.csv", "nexus_weights.csv", "nexus_window.csv", "nexus_grouping.csv",
		"nexus_hit.png", "nexus_response.png", "nexus_window.png"} {
		st, err := os.Stat(filepath.Join(dir, f))
		if err != nil || st.Size() == 0 {
			t.Errorf("%s not written: %v", f, err)
		}
	}
	csv, err := os.ReadFile(filepath.Join(dir, "nexus.csv"))
	if err != nil {
		t.Fatal(err)
	}
	if lines := strings.Count(string(csv), "\n"); lines != 1+3*len(nexusAlgorithms) {
		t.Errorf("nexus.csv has %d lines, want a header and %d rows", lines, 3*len(nexusAlgorithms))
	}
}

// TestSimNexusSessions: on the default generated trace no prefetcher beats
// LRU (accesses are independent draws, so prefetches are pollution); with
// --scripts, sessions that revisit related files, Nexus and PG2 turn most
// of the tasks' misses into hits and beat LRU by a clear margin at the
// same cache size, with most of their prefetches used.
func TestSimNexusSessions(t *testing.T) {
	for _, tc := range []struct {
		name     string
		args     []string
		min, max float64 // Nexus's hit rate minus LRU's
		used     float64 // minimum share of Nexus's prefetches used
	}{
		{"off", nil, -0.06, 0.01, 0},
		{"sessions", []string{"--scripts", "30"}, 0.08, 1, 0.35},
		{"uniform tasks, more noise", []string{"--scripts", "30", "--script-skew", "0", "--script-noise", "0.2"}, 0.05, 1, 0.25},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"nexus", "--cache-fraction", "0.1", "--studies", "compare", "--json",
				"--quick", "--files", "3000", "--ops", "20000"}, tc.args...)
			out, err := runSim(t, args...)
			if err != nil {
				t.Fatal(err)
			}
			v := simDecodeObject(t, out)
			hit := v["hit_rate"].(map[string]any)
			lru, nexus, pg2 := simNumber(t, hit, "lru"), simNumber(t, hit, "nexus"), simNumber(t, hit, "pg2")
			used := simNumber(t, v["prefetch_used"].(map[string]any), "nexus") /
				max(1, simNumber(t, v["prefetched"].(map[string]any), "nexus"))
			t.Logf("LRU %.4f, PG2 %.4f, Nexus %.4f; %.2f of Nexus's prefetches used", lru, pg2, nexus, used)
			if d := nexus - lru; d < tc.min || d > tc.max {
				t.Errorf("Nexus %.4f − LRU %.4f = %.4f, want %.2f to %.2f", nexus, lru, d, tc.min, tc.max)
			}
			if used < tc.used {
				t.Errorf("%.2f of Nexus's prefetches used, want at least %.2f", used, tc.used)
			}
			if len(tc.args) > 0 && pg2 <= lru {
				t.Errorf("PG2 %.4f does not beat LRU %.4f with sessions", pg2, lru)
			}
		})
	}
	// The table's title names the sessions.
	out, err := runSim(t, append([]string{"nexus", "--cache-fraction", "0.1", "--studies", "compare", "--scripts", "7"}, nexusTiny...)...)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "7 scripts (noise 0.1, skew 1)") {
		t.Errorf("title does not describe the sessions:\n%s", out)
	}
}

func TestSimNexusTraceFile(t *testing.T) {
	path := generatedTrace(t, 1000, 100, 3000)
	out, err := runSim(t, "nexus", "--trace", path, "--cache-fraction", "0.5", "--studies", "compare", "--json")
	if err != nil {
		t.Fatal(err)
	}
	v := simDecodeObject(t, out)
	if n := simNumber(t, v, "accesses"); n != 3000 {
		t.Errorf("replayed %v accesses, want 3000", n)
	}
	// Generator options do not apply to a trace file.
	for _, flag := range []string{"--scripts", "--scan-frac"} {
		if _, err := runSim(t, "nexus", "--trace", path, flag, "1"); exitCode(err) != exitUsage {
			t.Errorf("%s with --trace: error %v, want a usage error", flag, err)
		}
	}
}

func TestSimNexusUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"--cache-fraction", "0"},
		{"--cache-fraction", "1.5"},
		{"--window", "0"},
		{"--group", "0"},
		{"--assignment", "cubic"},
		{"--grouping", "cluster"},
		{"--studies", "everything"},
		{"--noah-s", "0"},
		{"--rp-j", "3", "--rp-k", "2"},
		{"--server-cache-fraction", "0"},
		{"--max-out-edges", "0"},
		{"--bandwidth-gbps", "0"},
		{"--disk-latency", "-1ms"},
		{"--scripts", "-1"},
		{"--scripts", "5", "--script-noise", "1.5"},
		{"--scripts", "5", "--script-skew", "-1"},
		{"extra"},
	} {
		full := append(append([]string{"nexus"}, nexusTiny...), args...)
		if _, err := runSim(t, full...); err == nil || exitCode(err) != exitUsage {
			t.Errorf("%v: error %v (exit %d), want a usage error", args, err, exitCode(err))
		}
	}
}

func TestSimNexusHelp(t *testing.T) {
	out, err := runSim(t, "nexus", "--help")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Examples:", "ghba sim nexus", "--cache-fraction", "--window", "--group",
		"--assignment", "--grouping", "--network-delay", "(default 300µs)", "--disk-latency", "--studies", "PG1",
		"--scripts", "related files", "--script-noise", "--script-skew"} {
		if !strings.Contains(out, want) {
			t.Errorf("nexus --help lacks %q:\n%s", want, out)
		}
	}
}
