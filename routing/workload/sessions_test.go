package workload

import (
	"errors"
	"math"
	"reflect"
	"testing"
)

// sessionConfig is a small trace with the sessions "ghba sim --scripts"
// generates: popular tasks of related files, replayed with noise.
func sessionConfig() Config {
	c := smallConfig()
	c.Ops = 40000
	c.Scripts = ScriptConfig{Count: 32, Noise: 0.1, Skew: 1, Related: true}
	return c
}

// topSuccessorShare measures how predictable the per-client access streams
// (stat, open, readdir; immediate repeats collapsed) are: the fraction of
// the accesses with a successor whose successor is the most frequent
// successor of that path over the whole trace, counting the paths with at
// least minSuccessors successors. In a stream of independent
// draws it is small; when clients replay the same sequences it is high.
func topSuccessorShare(recs []Record) float64 {
	const minSuccessors = 4
	prev := map[int]string{}
	succ := map[string]map[string]int{}
	for _, r := range recs {
		if r.Op != OpStat && r.Op != OpOpen && r.Op != OpReaddir {
			continue
		}
		p, ok := prev[r.Client]
		if ok && p == r.Path {
			continue
		}
		if ok {
			m := succ[p]
			if m == nil {
				m = map[string]int{}
				succ[p] = m
			}
			m[r.Path]++
		}
		prev[r.Client] = r.Path
	}
	top, n := 0, 0
	for _, m := range succ {
		best, seen := 0, 0
		for _, k := range m {
			seen += k
			best = max(best, k)
		}
		if seen < minSuccessors {
			continue // a path seen once is trivially followed by its top successor
		}
		top += best
		n += seen
	}
	if n == 0 {
		return 0
	}
	return float64(top) / float64(n)
}

func TestSessionsSuccessorStructure(t *testing.T) {
	for _, tc := range []struct {
		name     string
		mod      func(*Config)
		min, max float64
	}{
		// Without sessions a path is followed by a different path almost
		// every time; with them, by the next step of its task about half
		// of the time (the rest: task boundaries, the third of the
		// operations outside tasks, noise).
		{"off", func(c *Config) { c.Scripts = ScriptConfig{} }, 0, 0.2},
		{"sessions", func(*Config) {}, 0.4, 1},
		{"sessions, uniform tasks", func(c *Config) { c.Scripts.Skew = 0 }, 0.4, 1},
		{"sessions, noise 0.4", func(c *Config) { c.Scripts.Noise = 0.4 }, 0.2, 0.45},
		{"sessions under a prefix", func(c *Config) { c.Prefix = "/s003" }, 0.4, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := sessionConfig()
			tc.mod(&cfg)
			got := topSuccessorShare(collect(t, cfg))
			t.Logf("top-successor share %.3f", got)
			if got < tc.min || got > tc.max {
				t.Errorf("top-successor share %.3f, want %.2f–%.2f", got, tc.min, tc.max)
			}
		})
	}
}

func TestSessionsDeterministic(t *testing.T) {
	checkDeterministic(t, sessionConfig())
	// Without scripts the session settings change nothing.
	off, tuned := smallConfig(), smallConfig()
	tuned.Scripts = ScriptConfig{Skew: 2, Related: true, Noise: 0.3}
	if !reflect.DeepEqual(collect(t, off), collect(t, tuned)) {
		t.Fatal("session settings without scripts change the trace")
	}
	// Each setting changes a trace with scripts.
	base := sessionConfig()
	want := collect(t, base)
	for name, mod := range map[string]func(*Config){
		"skew":      func(c *Config) { c.Scripts.Skew = 0 },
		"related":   func(c *Config) { c.Scripts.Related = false },
		"next seed": func(c *Config) { c.Seed++ },
	} {
		c := base
		mod(&c)
		if reflect.DeepEqual(collect(t, c), want) {
			t.Errorf("%s does not change the trace", name)
		}
	}
}

// TestSessionsNamespaceConsistent replays session traces, busy with
// renames and deletes, against an in-memory namespace.
func TestSessionsNamespaceConsistent(t *testing.T) {
	busy := sessionConfig()
	busy.CreateFrac, busy.DeleteFrac, busy.RenameFrac = 0.1, 0.1, 0.05
	busy.DirRenameFrac, busy.MkdirFrac, busy.RmdirFrac = 0.01, 0.05, 0.05
	tiny := Config{Files: 3, Dirs: 2, Depth: 2, FanOut: 2, Ops: 3000, Clients: 2, Seed: 3,
		DeleteFrac: 0.2, CreateFrac: 0.2, RmdirFrac: 0.1,
		Scripts: ScriptConfig{Count: 5, MinLen: 1, MaxLen: 6, Start: 0.5, Skew: 3, Related: true}}
	for name, cfg := range map[string]Config{"sessions": sessionConfig(), "busy": busy, "tiny": tiny} {
		t.Run(name, func(t *testing.T) {
			ns := newNamespace()
			for i, r := range collect(t, cfg) {
				if err := ns.apply(r); err != nil {
					t.Fatalf("record %d %+v: %v", i, r, err)
				}
			}
		})
	}
}

// TestSessionsPopularity draws scripts the way an idle client starts one
// and compares the frequencies with the Zipf law (uniform for skew 0).
func TestSessionsPopularity(t *testing.T) {
	const count, draws = 8, 80000
	for _, skew := range []float64{0, 0.8, 2} {
		cfg := smallConfig()
		cfg.Scripts = ScriptConfig{Count: count, Skew: skew}
		g, err := NewGenerator(cfg)
		if err != nil {
			t.Fatal(err)
		}
		seen := make([]int, count)
		for range draws {
			seen[g.pickScript()]++
		}
		norm := 0.0
		for i := range count {
			norm += math.Pow(float64(i+1), -skew)
		}
		for i, n := range seen {
			want := math.Pow(float64(i+1), -skew) / norm
			if got := float64(n) / draws; math.Abs(got-want) > 0.01 {
				t.Errorf("skew %v: script %d started %.4f of the time, want %.4f", skew, i, got, want)
			}
		}
	}
}

// TestSessionsRelated checks that related read lists stay in a few
// directories of one subtree, where uniform ones spread over the tree.
func TestSessionsRelated(t *testing.T) {
	dirsPerList := func(related bool) float64 {
		cfg := smallConfig()
		cfg.Scripts = ScriptConfig{Count: 40, MinLen: 16, MaxLen: 16, Related: related}
		g, err := NewGenerator(cfg)
		if err != nil {
			t.Fatal(err)
		}
		total, lists := 0, 0
		for i := 1; i < len(g.scripts); i += 2 {
			s := g.scripts[i]
			dirs := map[int32]bool{}
			seen := map[int32]bool{}
			for _, st := range s {
				if st.dir || (st.op != OpStat && st.op != OpOpen) || seen[st.id] {
					t.Fatalf("read list %d: bad step %+v", i, st)
				}
				seen[st.id] = true
				dirs[g.files[st.id].dir] = true
			}
			if len(s) != 16 {
				t.Errorf("read list %d has %d steps, want 16", i, len(s))
			}
			total += len(dirs)
			lists++
		}
		return float64(total) / float64(lists)
	}
	related, uniform := dirsPerList(true), dirsPerList(false)
	t.Logf("directories per 16-file read list: %.2f related, %.2f uniform", related, uniform)
	if related > uniform/2 {
		t.Errorf("related read lists span %.2f directories, uniform ones %.2f", related, uniform)
	}
}

func TestSessionsConfigErrors(t *testing.T) {
	for name, skew := range map[string]float64{"negative": -1, "NaN": math.NaN(), "too large": 11} {
		c := sessionConfig()
		c.Scripts.Skew = skew
		if err := Generate(c, func(Record) error { return nil }); !errors.Is(err, ErrConfig) {
			t.Errorf("skew %s: %v, want ErrConfig", name, err)
		}
	}
}
