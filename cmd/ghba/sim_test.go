package main

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/ghba/ghba/routing/workload"
)

// runSim runs "ghba sim ..." in process and returns stdout and the error.
func runSim(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	root := newRootCmd()
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetArgs(append([]string{"sim"}, args...))
	err := root.ExecuteContext(context.Background())
	return out.String(), err
}

// simTiny keeps every test run well under a second.
var simTiny = []string{"--quick", "--files", "4000", "--ops", "8000"}

func simDecodeObject(t *testing.T, out string) map[string]any {
	t.Helper()
	var v map[string]any
	dec := json.NewDecoder(strings.NewReader(out))
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("output is not one JSON object: %v\n%s", err, out)
	}
	if dec.More() {
		t.Fatalf("more than one JSON value:\n%s", out)
	}
	return v
}

// simDecodeRuns decodes the {"runs": [...]} object of a sweep.
func simDecodeRuns(t *testing.T, out string) []map[string]any {
	t.Helper()
	var v struct {
		Runs []map[string]any `json:"runs"`
	}
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("not a {\"runs\": [...]} object: %v\n%s", err, out)
	}
	return v.Runs
}

// simCheckLevels checks that the shares of lookups resolved at L1..L4 of
// the result v (what) sum to 1.
func simCheckLevels(t *testing.T, what string, v map[string]any) {
	t.Helper()
	levels, ok := v["levels"].(map[string]any)
	if !ok {
		t.Fatalf("%s: no levels: %v", what, v)
	}
	sum := 0.0
	for _, k := range []string{"L1", "L2", "L3", "L4"} {
		sum += simNumber(t, levels, k)
	}
	if math.Abs(sum-1) > 1e-9 {
		t.Errorf("%s: levels sum to %v", what, sum)
	}
}

func simNumber(t *testing.T, v map[string]any, key string) float64 {
	t.Helper()
	x, ok := v[key].(float64)
	if !ok {
		t.Fatalf("field %q missing or not a number in %v", key, v)
	}
	return x
}

func TestSimJSONContract(t *testing.T) {
	tests := []struct {
		name  string
		args  []string
		check func(t *testing.T, v map[string]any)
	}{
		{"pba", []string{"pba", "--servers", "10", "--bits-per-file", "8", "--json"}, func(t *testing.T, v map[string]any) {
			for _, k := range []string{"theory_hit_rate", "sim_hit_rate", "theory_false_new", "sim_false_new"} {
				if x := simNumber(t, v, k); x < 0 || x > 1 {
					t.Errorf("%s = %v", k, x)
				}
			}
			if th := simNumber(t, v, "theory_hit_rate"); math.Abs(th-0.8230) > 0.001 {
				t.Errorf("theory hit rate at N=10, 8 bits/file = %v, want 0.823 (HBA eq. 1)", th)
			}
		}},
		{"pba hashes", []string{"pba", "--servers", "20", "--bits-per-file", "10", "--hashes", "3", "--json"}, func(t *testing.T, v map[string]any) {
			if k := simNumber(t, v, "hashes"); k != 3 {
				t.Errorf("hashes = %v", k)
			}
		}},
		{"hba", []string{"hba", "--servers", "10", "--lru-entries", "100", "--json"}, func(t *testing.T, v map[string]any) {
			for _, k := range []string{"hba_hit_rate", "lru_hit_rate", "pba8_hit_rate", "pba12_hit_rate", "pba16_hit_rate"} {
				if x := simNumber(t, v, k); x < 0 || x > 1 {
					t.Errorf("%s = %v", k, x)
				}
			}
			if m := simNumber(t, v, "pba16_memory_vs_pba8"); math.Abs(m-2) > 0.02 {
				t.Errorf("PBA16 memory = %v", m)
			}
			simNumber(t, v, "hba_memory_vs_pba8")
			simNumber(t, v, "update_messages")
		}},
		{"ghba", []string{"ghba", "--servers", "20", "--max-group", "5", "--json"}, func(t *testing.T, v map[string]any) {
			simCheckLevels(t, "ghba", v)
			if r := simNumber(t, v, "memory_vs_bfa8"); math.Abs(r-0.2) > 1e-9 {
				t.Errorf("memory vs BFA8 = %v, want 0.2", r)
			}
			if r := simNumber(t, v, "memory_vs_bfa8_total"); r <= 0.2 {
				t.Errorf("total memory vs BFA8 = %v, want above the segment part 0.2", r)
			}
		}},
		{"optimal-m", []string{"optimal-m", "--servers", "12", "--json"}, func(t *testing.T, v map[string]any) {
			m := simNumber(t, v, "optimal_m")
			gamma, ok := v["gamma"].(map[string]any)
			if !ok || len(gamma) == 0 {
				t.Fatalf("gamma missing: %v", v)
			}
			if _, ok := gamma[strconv.Itoa(int(m))]; !ok {
				t.Errorf("optimal M %v not a key of gamma %v", m, gamma)
			}
		}},
		{"migration", []string{"migration", "--servers", "100", "--max-group", "9", "--json"}, func(t *testing.T, v map[string]any) {
			if h := simNumber(t, v, "hba"); h != 100 {
				t.Errorf("hba = %v", h)
			}
			if g, h := simNumber(t, v, "ghba"), simNumber(t, v, "hash"); g > 12 || h < 50 {
				t.Errorf("ghba = %v, hash = %v", g, h)
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, err := runSim(t, append(tc.args, simTiny...)...)
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, simDecodeObject(t, out))
		})
	}
}

func TestSimJSONRuns(t *testing.T) {
	out, err := runSim(t, append([]string{"pba", "--servers", "5,10", "--bits-per-file", "8,16", "--json"}, simTiny...)...)
	if err != nil {
		t.Fatal(err)
	}
	if runs := simDecodeRuns(t, out); len(runs) != 4 {
		t.Fatalf("%d runs, want 4", len(runs))
	}
}

func TestSimTablesAndOut(t *testing.T) {
	dir := t.TempDir()
	cases := []struct {
		args  []string
		files []string
	}{
		{[]string{"pba", "--servers", "10", "--bits-per-file", "4,8,12"}, []string{"pba.csv", "pba_hit.png", "pba_false_new.png"}},
		{[]string{"hba", "--servers", "10", "--lru-entries", "50", "--threshold", "10,1,0.1"}, []string{"hba.csv", "hba_threshold.png"}},
		{[]string{"ghba", "--servers", "10,20", "--max-group", "5"}, []string{"ghba.csv", "ghba_levels.png", "ghba_memory.png"}},
		{[]string{"optimal-m", "--servers", "12"}, []string{"optimal_m.csv", "optimal_m_gamma.png"}},
		{[]string{"migration", "--servers", "10,20,30"}, []string{"migration.csv", "migration.png"}},
	}
	for _, tc := range cases {
		out, err := runSim(t, append(append(tc.args, simTiny...), "--out", dir)...)
		if err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		if lines := strings.Count(out, "\n"); lines < 3 {
			t.Errorf("%v: table too short:\n%s", tc.args, out)
		}
		for _, f := range tc.files {
			st, err := os.Stat(filepath.Join(dir, f))
			if err != nil || st.Size() == 0 {
				t.Errorf("%v: %s not written: %v", tc.args, f, err)
			}
		}
	}
}

// generatedTrace writes a generated trace of files, dirs and ops to a file
// in a temporary directory and returns its path.
func generatedTrace(t *testing.T, files, dirs, ops int) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "small.trace")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	cfg := workload.DefaultConfig()
	cfg.Files, cfg.Dirs, cfg.Ops = files, dirs, ops
	w := workload.NewWriter(f)
	if err := workload.Generate(cfg, w.Write); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestSimTraceFile(t *testing.T) {
	path := generatedTrace(t, 2000, 200, 5000)
	out, err := runSim(t, "pba", "--trace", path, "--servers", "10", "--runs", "2", "--json")
	if err != nil {
		t.Fatal(err)
	}
	v := simDecodeObject(t, out)
	if n := simNumber(t, v, "records"); n < 7000 {
		t.Errorf("replayed %v records", n)
	}
	if _, err := runSim(t, "pba", "--trace", filepath.Join(t.TempDir(), "missing")); exitCode(err) != exitUsage {
		t.Errorf("missing trace: %v, want a usage error", err)
	}
}

func TestSimUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"pba", "--servers", "0"},
		{"pba", "--bits-per-file", "-1"},
		{"pba", "--threshold", "200"},
		{"pba", "--tif", "0"},
		{"pba", "--ops", "0"},
		{"pba", "--no-such-flag"},
		{"pba", "extra"},
		{"hba", "--lru-entries", "-5"},
		{"ghba", "--max-group", "0"},
		{"optimal-m", "--servers", "1"},
		{"optimal-m", "--min-m", "5", "--max-m", "3"},
		{"migration", "--max-group", "0"},
	} {
		// The flags under test come last so that they override simTiny.
		full := append(append([]string{args[0]}, simTiny...), args[1:]...)
		_, err := runSim(t, full...)
		if err == nil || exitCode(err) != exitUsage {
			t.Errorf("%v: error %v (exit %d), want a usage error", args, err, exitCode(err))
		}
	}
}

func TestSimHelpHasExamples(t *testing.T) {
	for _, sub := range []string{"pba", "hba", "ghba", "optimal-m", "migration"} {
		out, err := runSim(t, sub, "--help")
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(out, "Examples:") || !strings.Contains(out, "ghba sim "+sub) {
			t.Errorf("%s --help lacks an example:\n%s", sub, out)
		}
	}
}
