package workload

import (
	"bytes"
	"errors"
	"reflect"
	"testing"
)

func scriptConfig() Config {
	c := smallConfig()
	c.Ops = 40000
	c.Scripts = ScriptConfig{Count: 32}
	return c
}

// lastSuccessorHits is the accuracy of the Last Successor predictor (Nexus
// §2) on the per-client access streams: among the accesses (stat, open,
// readdir) whose path was accessed before, the fraction whose successor in
// the client's stream equals the successor seen the previous time that path
// was accessed.
func lastSuccessorHits(recs []Record) float64 {
	prev := map[int]string{}
	succ := map[string]string{}
	hits, n := 0, 0
	for _, r := range recs {
		if r.Op != OpStat && r.Op != OpOpen && r.Op != OpReaddir {
			continue
		}
		if p, ok := prev[r.Client]; ok {
			if s, seen := succ[p]; seen {
				n++
				if s == r.Path {
					hits++
				}
			}
			succ[p] = r.Path
		}
		prev[r.Client] = r.Path
	}
	if n == 0 {
		return 0
	}
	return float64(hits) / float64(n)
}

func TestScriptsRepeat(t *testing.T) {
	for _, tc := range []struct {
		name     string
		mod      func(*Config)
		min, max float64
	}{
		{"off", func(c *Config) { c.Scripts = ScriptConfig{} }, 0, 0.1},
		{"defaults", func(*Config) {}, 0.45, 1},
		// A skipped or inserted step costs about two predictions.
		{"noise 0.2", func(c *Config) { c.Scripts.Noise = 0.2 }, 0.2, 0.45},
		// Long scripts that run most of the time, on a namespace large
		// enough that scripts rarely share paths.
		{"long, often", func(c *Config) {
			c.Files, c.Dirs = 20000, 2000
			c.Scripts.MinLen, c.Scripts.MaxLen, c.Scripts.Start = 50, 100, 0.3
		}, 0.8, 1},
		{"prefixed", func(c *Config) { c.Prefix = "/s001" }, 0.5, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := scriptConfig()
			tc.mod(&cfg)
			got := lastSuccessorHits(collect(t, cfg))
			t.Logf("last-successor hit rate %.3f", got)
			if got < tc.min || got > tc.max {
				t.Errorf("last-successor hit rate %.3f, want %.2f–%.2f", got, tc.min, tc.max)
			}
		})
	}
}

func TestScriptsNamespaceConsistent(t *testing.T) {
	busy := scriptConfig()
	busy.CreateFrac, busy.DeleteFrac, busy.RenameFrac = 0.1, 0.1, 0.05
	busy.DirRenameFrac, busy.MkdirFrac, busy.RmdirFrac = 0.01, 0.05, 0.05
	busy.Scripts.Noise = 0.3
	tiny := Config{Files: 3, Dirs: 2, Depth: 2, FanOut: 2, Ops: 5000, Clients: 2, Seed: 5,
		CreateFrac: 0.2, DeleteFrac: 0.3, RenameFrac: 0.1, DirRenameFrac: 0.05, MkdirFrac: 0.1, RmdirFrac: 0.1, ReaddirFrac: 0.1,
		Scripts: ScriptConfig{Count: 4, MinLen: 1, MaxLen: 5, Start: 0.5, Noise: 0.1}}
	prefixed := scriptConfig()
	prefixed.Prefix = "/s007"
	for name, cfg := range map[string]Config{"defaults": scriptConfig(), "busy": busy, "tiny": tiny, "prefixed": prefixed} {
		t.Run(name, func(t *testing.T) {
			recs := collect(t, cfg)
			ns := newNamespace()
			for i, r := range recs {
				if err := ns.apply(r); err != nil {
					t.Fatalf("record %d %+v: %v", i, r, err)
				}
			}
			// The text format accepts every record.
			back, err := ReadAll(bytes.NewReader(writeAll(t, recs)))
			if err != nil || !reflect.DeepEqual(back, recs) {
				t.Fatalf("text round trip: %v", err)
			}
		})
	}
}

func TestScriptsDeterministic(t *testing.T) {
	cfg := scriptConfig()
	cfg.Scripts.Noise = 0.1
	checkDeterministic(t, cfg)
	// With Count 0 the other script settings change nothing.
	off, tuned := smallConfig(), smallConfig()
	tuned.Scripts = ScriptConfig{MinLen: 3, MaxLen: 4, Start: 0.9, Noise: 0.5}
	if !reflect.DeepEqual(collect(t, off), collect(t, tuned)) {
		t.Fatal("script settings without scripts change the trace")
	}
	// Scripts change the trace, but not its namespace or size.
	with := collect(t, scriptConfig())
	without := scriptConfig()
	without.Scripts = ScriptConfig{}
	plain := collect(t, without)
	s1, s2 := Stats(with), Stats(plain)
	if s1.Ops[OpExists] != s2.Ops[OpExists] || s1.Accesses() != s2.Accesses() {
		t.Errorf("exists %d vs %d, accesses %d vs %d", s1.Ops[OpExists], s2.Ops[OpExists], s1.Accesses(), s2.Accesses())
	}
	if reflect.DeepEqual(with, plain) {
		t.Error("scripts do not change the trace")
	}
}

func TestScriptsShape(t *testing.T) {
	cfg := scriptConfig()
	g, err := NewGenerator(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(g.scripts) != cfg.Scripts.Count {
		t.Fatalf("%d scripts, want %d", len(g.scripts), cfg.Scripts.Count)
	}
	for i, s := range g.scripts {
		if len(s) < 1 || len(s) > DefaultScriptMaxLen {
			t.Errorf("script %d has %d steps", i, len(s))
		}
		if i%2 == 0 {
			if !s[0].dir || s[0].op != OpReaddir {
				t.Errorf("walk %d does not start with a readdir: %+v", i, s[0])
			}
			continue
		}
		seen := map[int32]bool{}
		for _, st := range s {
			if st.dir || (st.op != OpStat && st.op != OpOpen) || seen[st.id] {
				t.Errorf("read list %d: bad step %+v", i, st)
			}
			seen[st.id] = true
		}
		if len(s) < DefaultScriptMinLen {
			t.Errorf("read list %d has %d steps", i, len(s))
		}
	}
	// About Start·L/(Start·L + 1 − Start) of the operations are script steps;
	// with the defaults (mean length 20, Start 0.1) that is about 0.69.
	s := Stats(collect(t, cfg))
	share := float64(s.Ops[OpStat]+s.Ops[OpOpen]+s.Ops[OpReaddir]) / float64(s.Accesses())
	plain := cfg
	plain.Scripts = ScriptConfig{}
	p := Stats(collect(t, plain))
	base := float64(p.Ops[OpStat]+p.Ops[OpOpen]+p.Ops[OpReaddir]) / float64(p.Accesses())
	t.Logf("lookups are %.3f of the operations with scripts, %.3f without", share, base)
	if share <= base {
		t.Errorf("scripts do not add lookups: %.3f vs %.3f", share, base)
	}
}

func TestScriptsConfigErrors(t *testing.T) {
	for name, sc := range map[string]ScriptConfig{
		"negative count": {Count: -1},
		"min > max":      {Count: 2, MinLen: 9, MaxLen: 3},
		"negative min":   {Count: 2, MinLen: -1},
		"start":          {Count: 2, Start: 1.5},
		"noise":          {Count: 2, Noise: -0.1},
		"noise > 1":      {Count: 2, Noise: 2},
		"too long":       {Count: 2, MaxLen: 1 << 20},
	} {
		c := smallConfig()
		c.Scripts = sc
		if err := Generate(c, func(Record) error { return nil }); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: %v, want ErrConfig", name, err)
		}
	}
	// Zero settings take defaults; a MaxLen below the default MinLen lowers it.
	for _, tc := range []struct {
		in, want ScriptConfig
	}{
		{ScriptConfig{Count: 3}, ScriptConfig{Count: 3, MinLen: 8, MaxLen: 32, Start: 0.1}},
		{ScriptConfig{Count: 3, MaxLen: 4}, ScriptConfig{Count: 3, MinLen: 4, MaxLen: 4, Start: 0.1}},
		{ScriptConfig{Count: 3, MinLen: 40}, ScriptConfig{Count: 3, MinLen: 40, MaxLen: 40, Start: 0.1}},
	} {
		c := smallConfig()
		c.Scripts = tc.in
		got, err := c.withDefaults()
		if err != nil || got.Scripts != tc.want {
			t.Errorf("%+v: %+v, %v; want %+v", tc.in, got.Scripts, err, tc.want)
		}
	}
}
