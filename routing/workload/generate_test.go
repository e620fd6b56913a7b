package workload

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite the repository's testdata/small.trace")

func collect(t testing.TB, cfg Config) []Record {
	t.Helper()
	var recs []Record
	if err := Generate(cfg, func(r Record) error { recs = append(recs, r); return nil }); err != nil {
		t.Fatalf("Generate: %v", err)
	}
	return recs
}

func smallConfig() Config {
	c := DefaultConfig()
	c.Files, c.Dirs, c.Ops, c.Clients = 2000, 200, 20000, 8
	return c
}

// namespace replays records against an in-memory file system and reports
// the first operation that would fail on a real one.
type namespace struct {
	isDir    map[string]bool
	children map[string]int
}

func newNamespace() *namespace {
	return &namespace{isDir: map[string]bool{"/": true}, children: map[string]int{}}
}

func parent(p string) string {
	i := strings.LastIndexByte(p, '/')
	if i == 0 {
		return "/"
	}
	return p[:i]
}

func (ns *namespace) add(p string, dir bool) error {
	if _, ok := ns.isDir[p]; ok {
		return fmt.Errorf("%s already exists", p)
	}
	if !ns.isDir[parent(p)] {
		return fmt.Errorf("parent of %s is not a directory", p)
	}
	ns.isDir[p] = dir
	ns.children[parent(p)]++
	return nil
}

func (ns *namespace) remove(p string) {
	delete(ns.isDir, p)
	delete(ns.children, p)
	ns.children[parent(p)]--
}

func (ns *namespace) apply(r Record) error {
	dir, ok := ns.isDir[r.Path]
	switch r.Op {
	case OpExists:
		return ns.add(r.Path, r.Dir)
	case OpStat, OpOpen:
		if !ok || dir != r.Dir {
			return fmt.Errorf("%s of missing %s (present %v dir %v)", r.Op, r.Path, ok, dir)
		}
	case OpReaddir:
		if !ok || !dir {
			return fmt.Errorf("readdir of non-directory %s", r.Path)
		}
	case OpCreate:
		return ns.add(r.Path, false)
	case OpMkdir:
		return ns.add(r.Path, true)
	case OpUnlink:
		if !ok || dir {
			return fmt.Errorf("unlink of non-file %s", r.Path)
		}
		ns.remove(r.Path)
	case OpRmdir:
		if !ok || !dir || ns.children[r.Path] != 0 || r.Path == "/" {
			return fmt.Errorf("rmdir of %s (present %v dir %v children %d)", r.Path, ok, dir, ns.children[r.Path])
		}
		ns.remove(r.Path)
	case OpRename:
		if !ok || dir != r.Dir {
			return fmt.Errorf("rename of %s (present %v dir %v)", r.Path, ok, dir)
		}
		if !ns.isDir[parent(r.Path2)] {
			return fmt.Errorf("rename target parent of %s missing", r.Path2)
		}
		if _, ok := ns.isDir[r.Path2]; ok {
			return fmt.Errorf("rename target %s exists", r.Path2)
		}
		moved := map[string]bool{r.Path: dir}
		if dir {
			for p, d := range ns.isDir {
				if strings.HasPrefix(p, r.Path+"/") {
					moved[p] = d
				}
			}
		}
		kids := ns.children[r.Path]
		ns.remove(r.Path)
		for p := range moved {
			delete(ns.isDir, p)
		}
		for p, d := range moved {
			np := r.Path2 + p[len(r.Path):]
			ns.isDir[np] = d
			if p != r.Path && d {
				ns.children[np] = ns.children[p]
				delete(ns.children, p)
			}
		}
		ns.children[parent(r.Path2)]++
		ns.children[r.Path2] = kids
	}
	return nil
}

func TestGenerateNamespaceConsistent(t *testing.T) {
	busy := smallConfig()
	busy.CreateFrac, busy.DeleteFrac, busy.RenameFrac = 0.1, 0.1, 0.05
	busy.DirRenameFrac, busy.MkdirFrac, busy.RmdirFrac = 0.01, 0.05, 0.05
	tiny := Config{Files: 3, Dirs: 2, Depth: 2, FanOut: 2, Ops: 5000, Clients: 2, Seed: 5,
		CreateFrac: 0.2, DeleteFrac: 0.3, RenameFrac: 0.1, DirRenameFrac: 0.05, MkdirFrac: 0.1, RmdirFrac: 0.1, ReaddirFrac: 0.1}
	prefixed := smallConfig()
	prefixed.Prefix = "/s007"
	for name, cfg := range map[string]Config{"default": smallConfig(), "busy": busy, "tiny": tiny, "prefixed": prefixed} {
		ns := newNamespace()
		var last time.Duration
		timed := false
		for i, r := range collect(t, cfg) {
			if err := r.Validate(); err != nil {
				t.Fatalf("%s: record %d %+v: %v", name, i, r, err)
			}
			if err := ns.apply(r); err != nil {
				t.Fatalf("%s: record %d %+v: %v", name, i, r, err)
			}
			if cfg.Prefix != "" && r.Path != cfg.Prefix && !strings.HasPrefix(r.Path, cfg.Prefix+"/") {
				t.Fatalf("%s: record %d %+v outside the prefix", name, i, r)
			}
			if r.Op == OpExists {
				if timed {
					t.Fatalf("%s: exists after timed records", name)
				}
				continue
			}
			timed = true
			if r.Time <= last {
				t.Fatalf("%s: record %d time %v not after %v", name, i, r.Time, last)
			}
			last = r.Time
		}
	}
}

func TestGenerateDeterministic(t *testing.T) { checkDeterministic(t, smallConfig()) }

// checkDeterministic checks that cfg generates the same trace twice, and
// another with the next seed.
func checkDeterministic(t *testing.T, cfg Config) {
	t.Helper()
	a, b := collect(t, cfg), collect(t, cfg)
	if !reflect.DeepEqual(a, b) {
		t.Fatal("same config, different traces")
	}
	cfg.Seed++
	if c := collect(t, cfg); reflect.DeepEqual(a, c) {
		t.Fatal("different seeds, same trace")
	}
}

func TestGenerateShape(t *testing.T) {
	cfg := smallConfig()
	cfg.Ops = 100000
	s := Stats(collect(t, cfg))
	if got := s.Ops[OpExists]; got != cfg.Files+cfg.Dirs {
		t.Errorf("%d exists records, want %d", got, cfg.Files+cfg.Dirs)
	}
	if s.Accesses() != cfg.Ops {
		t.Errorf("%d timed records, want %d", s.Accesses(), cfg.Ops)
	}
	if s.Clients() != cfg.Clients {
		t.Errorf("%d clients, want %d", s.Clients(), cfg.Clients)
	}
	// The op mix follows the fractions (rmdir falls back to stat when no
	// directory is empty, so compare stat+rmdir).
	for _, tc := range []struct {
		name string
		got  int
		frac float64
	}{
		{"create", s.Ops[OpCreate], cfg.CreateFrac},
		{"unlink", s.Ops[OpUnlink], cfg.DeleteFrac},
		{"rename", s.Ops[OpRename], cfg.RenameFrac + cfg.DirRenameFrac},
		{"mkdir", s.Ops[OpMkdir], cfg.MkdirFrac},
		{"readdir", s.Ops[OpReaddir], cfg.ReaddirFrac},
		{"stat+rmdir", s.Ops[OpStat] + s.Ops[OpRmdir], cfg.StatFrac + cfg.RmdirFrac},
		{"open", s.Ops[OpOpen], 1 - cfg.CreateFrac - cfg.DeleteFrac - cfg.RenameFrac - cfg.DirRenameFrac - cfg.MkdirFrac - cfg.RmdirFrac - cfg.ReaddirFrac - cfg.StatFrac},
	} {
		want := tc.frac * float64(cfg.Ops)
		if math.Abs(float64(tc.got)-want) > 5*math.Sqrt(want)+5 {
			t.Errorf("%s: %d ops, want ≈ %.0f", tc.name, tc.got, want)
		}
	}
	// Poisson arrivals at cfg.Rate.
	rate := float64(cfg.Ops) / s.Duration().Seconds()
	if math.Abs(rate-cfg.Rate)/cfg.Rate > 0.02 {
		t.Errorf("rate %.1f ops/s, want %v", rate, cfg.Rate)
	}
}

// TestGeneratePopularity checks HBA §5 / Fig. 5: "7 percent of metadata
// absorbs 78 percent to 92 percent of metadata traffic".
func TestGeneratePopularity(t *testing.T) {
	for _, tc := range []struct {
		name string
		tif  int
		cfg  Config
	}{
		{"default", 1, DefaultConfig()},
		{"small", 1, smallConfig()},
		{"seed 9", 1, func() Config { c := smallConfig(); c.Seed = 9; return c }()},
		{"TIF 4", 4, smallConfig()},
	} {
		s := NewSummary()
		add := func(r Record) error { s.Add(r); return nil }
		var err error
		if tc.tif == 1 {
			err = Generate(tc.cfg, add)
		} else {
			err = Intensify(tc.tif, tc.cfg, add)
		}
		if err != nil {
			t.Fatal(err)
		}
		share := s.Share(0.07)
		t.Logf("%s: top 7%% of %d paths take %.1f%% of %d accesses (top 1%%: %.1f%%, top 20%%: %.1f%%)",
			tc.name, s.Paths(), 100*share, s.Accesses(), 100*s.Share(0.01), 100*s.Share(0.2))
		if share < 0.78 || share > 0.92 {
			t.Errorf("%s: top 7%% take %.3f of accesses, want 0.78–0.92", tc.name, share)
		}
	}
}

// rereference returns the share of a client's accesses (stat, open) to a
// path it accessed among its previous window accesses.
func rereference(recs []Record, window int) float64 {
	hist := map[int][]string{}
	hits, n := 0, 0
	for _, r := range recs {
		if r.Op != OpStat && r.Op != OpOpen {
			continue
		}
		h := hist[r.Client]
		for _, p := range h {
			if p == r.Path {
				hits++
				break
			}
		}
		n++
		if len(h) == window {
			h = h[1:]
		}
		hist[r.Client] = append(h, r.Path)
	}
	return float64(hits) / float64(n)
}

func TestGenerateLocality(t *testing.T) {
	cfg := smallConfig()
	cfg.Ops = 40000
	with := rereference(collect(t, cfg), cfg.WorkingSet)
	cfg.Locality = 0
	without := rereference(collect(t, cfg), cfg.WorkingSet)
	t.Logf("re-reference within the last %d accesses: %.3f with locality, %.3f without", cfg.WorkingSet, with, without)
	if with < without+0.15 {
		t.Errorf("locality does not show: %.3f vs %.3f", with, without)
	}
}

func TestGenerateConfigErrors(t *testing.T) {
	for name, mod := range map[string]func(*Config){
		"negative files":  func(c *Config) { c.Files = -1 },
		"negative ops":    func(c *Config) { c.Ops = -1 },
		"fractions > 1":   func(c *Config) { c.StatFrac = 0.99 },
		"negative frac":   func(c *Config) { c.CreateFrac = -0.1 },
		"hot fraction":    func(c *Config) { c.HotFraction = 1.5 },
		"hot share":       func(c *Config) { c.HotShare = 2 },
		"locality":        func(c *Config) { c.Locality = -1 },
		"rate":            func(c *Config) { c.Rate = math.Inf(1) },
		"prefix":          func(c *Config) { c.Prefix = "s000" },
		"prefix slash":    func(c *Config) { c.Prefix = "/s000/" },
		"tree too small":  func(c *Config) { c.Dirs, c.Depth, c.FanOut = 100, 2, 3 },
		"client overflow": func(c *Config) { c.ClientBase = MaxClient },
		"scan fraction":   func(c *Config) { c.ScanFrac = 1.5 },
		"negative scan":   func(c *Config) { c.ScanFrac = -0.1 },
	} {
		c := smallConfig()
		mod(&c)
		if err := Generate(c, func(Record) error { return nil }); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: %v, want ErrConfig", name, err)
		}
	}
	if err := Intensify(0, smallConfig(), func(Record) error { return nil }); !errors.Is(err, ErrConfig) {
		t.Errorf("TIF 0: %v", err)
	}
	stop := errors.New("stop")
	if err := Generate(smallConfig(), func(Record) error { return stop }); err != stop {
		t.Errorf("emit error not returned: %v", err)
	}
	// Zero sizing fields take defaults.
	g, err := NewGenerator(Config{Files: 10, Ops: 10})
	if err != nil || g.cfg.Clients != DefaultConfig().Clients || g.cfg.Dirs != 1 {
		t.Errorf("defaults: %v %+v", err, g.cfg)
	}
}

func TestIntensify(t *testing.T) {
	cfg := smallConfig()
	cfg.Ops = 5000
	const tif = 5
	var all []Record
	if err := Intensify(tif, cfg, func(r Record) error { all = append(all, r); return nil }); err != nil {
		t.Fatal(err)
	}
	// Each subtrace is exactly Generate(SubtraceConfig(cfg, i)), and they
	// are disjoint in paths and clients.
	per := make([][]Record, tif)
	var last time.Duration
	timed := false
	for _, r := range all {
		var i int
		if _, err := fmt.Sscanf(r.Path, "/s%03d", &i); err != nil || i < 0 || i >= tif {
			t.Fatalf("record %+v has no subtrace prefix", r)
		}
		if r.Client/cfg.Clients != i {
			t.Fatalf("record %+v: client not in subtrace %d's range", r, i)
		}
		per[i] = append(per[i], r)
		if r.Op == OpExists {
			if timed {
				t.Fatal("exists after timed records")
			}
			continue
		}
		timed = true
		if r.Time < last {
			t.Fatalf("merged trace goes back in time at %+v", r)
		}
		last = r.Time
	}
	for i := range per {
		sc := SubtraceConfig(cfg, i)
		if want := collect(t, sc); !reflect.DeepEqual(per[i], want) {
			t.Fatalf("subtrace %d differs from Generate(SubtraceConfig)", i)
		}
	}
	// Temporal scale-up: the merged trace spans about the time of one
	// subtrace with tif times the operations.
	s := Stats(all)
	if s.Accesses() != tif*cfg.Ops || s.Clients() != tif*cfg.Clients {
		t.Errorf("%d ops from %d clients", s.Accesses(), s.Clients())
	}
	one := Stats(per[0])
	if r := s.Duration().Seconds() / one.Duration().Seconds(); r < 0.9 || r > 1.1 {
		t.Errorf("merged duration %v vs one subtrace %v", s.Duration(), one.Duration())
	}
	// The intensified trace round-trips through the text format.
	text := writeAll(t, all)
	back, err := ReadAll(bytes.NewReader(text))
	if err != nil || !reflect.DeepEqual(back, all) {
		t.Fatalf("text round trip: %v", err)
	}
}

func TestStatsSummary(t *testing.T) {
	recs := []Record{
		{Op: OpExists, Path: "/a", Dir: true},
		{Op: OpExists, Path: "/a/x"},
		{Op: OpExists, Path: "/a/y"},
		{Op: OpExists, Path: "/a/z"},
		{Time: 1 * time.Second, Client: 1, Op: OpStat, Path: "/a/x"},
		{Time: 2 * time.Second, Client: 1, Op: OpStat, Path: "/a/x"},
		{Time: 3 * time.Second, Client: 2, Op: OpOpen, Path: "/a/x"},
		{Time: 4 * time.Second, Client: 2, Op: OpReaddir, Path: "/a"},
		{Time: 5 * time.Second, Client: 3, Op: OpRename, Path: "/a/y", Path2: "/a/w"},
	}
	s := Stats(recs)
	if s.Records != 9 || s.Accesses() != 5 || s.Ops[OpStat] != 2 || s.Ops[OpExists] != 4 {
		t.Errorf("counts: %+v", s)
	}
	if s.Paths() != 5 || s.AccessedPaths() != 3 || s.Clients() != 3 {
		t.Errorf("paths %d accessed %d clients %d", s.Paths(), s.AccessedPaths(), s.Clients())
	}
	if s.First != time.Second || s.Last != 5*time.Second || s.Duration() != 4*time.Second {
		t.Errorf("span %v..%v", s.First, s.Last)
	}
	for _, tc := range []struct{ x, want float64 }{
		{0, 0}, {0.2, 0.6}, {0.21, 0.8}, {0.6, 1}, {1, 1}, {2, 1},
	} {
		if got := s.Share(tc.x); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("Share(%v) = %v, want %v", tc.x, got, tc.want)
		}
	}
	if NewSummary().Share(0.5) != 0 {
		t.Error("empty summary share")
	}
}

// fixtureConfig is the documented configuration of the repository's testdata/small.trace
// (see docs/trace-format.md).
func fixtureConfig() Config {
	c := DefaultConfig()
	c.Files, c.Dirs, c.Depth, c.FanOut = 300, 40, 4, 8
	c.Ops, c.Clients, c.Seed, c.Rate = 3000, 4, 42, 100
	return c
}

const fixturePath = "../../testdata/small.trace"

func fixtureText(t *testing.T) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := NewWriter(&buf)
	// The fixture predates ScriptConfig and ScanFrac: its comment leaves
	// out the (zero) script and scan settings, which do not change the trace.
	desc := strings.Replace(fmt.Sprintf("%+v", fixtureConfig()), fmt.Sprintf(" Scripts:%+v", ScriptConfig{}), "", 1)
	desc = strings.Replace(desc, " ScanFrac:0", "", 1)
	if err := w.Comment(fmt.Sprintf("ghba synthetic metadata trace: workload.Generate(fixtureConfig())\n%s\nregenerate: go test ./routing/workload -run TestGenerateFixture -update", desc)); err != nil {
		t.Fatal(err)
	}
	if err := Generate(fixtureConfig(), w.Write); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestGenerateFixture keeps the repository's testdata/small.trace equal to the generator's
// output for fixtureConfig; -update rewrites it.
func TestGenerateFixture(t *testing.T) {
	want := fixtureText(t)
	if *update {
		if err := os.MkdirAll(filepath.Dir(fixturePath), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(fixturePath, want, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(fixturePath)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s is stale; regenerate with -update", fixturePath)
	}
	recs, err := ReadAll(bytes.NewReader(got))
	if err != nil {
		t.Fatalf("parse %s: %v", fixturePath, err)
	}
	if !reflect.DeepEqual(recs, collect(t, fixtureConfig())) {
		t.Fatalf("%s parses to different records than the generator emits", fixturePath)
	}
	ns := newNamespace()
	for i, r := range recs {
		if err := ns.apply(r); err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
	}
}

func BenchmarkGenerate(b *testing.B) {
	cfg := DefaultConfig()
	cfg.Files, cfg.Dirs, cfg.Ops = 100000, 10000, 1000000
	b.ReportAllocs()
	n := 0
	for i := 0; i < b.N; i++ {
		if err := Generate(cfg, func(Record) error { n++; return nil }); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "records/s")
}

func BenchmarkIntensify(b *testing.B) {
	cfg := DefaultConfig()
	cfg.Files, cfg.Dirs, cfg.Ops = 10000, 1000, 50000
	b.ReportAllocs()
	n := 0
	for i := 0; i < b.N; i++ {
		if err := Intensify(40, cfg, func(Record) error { n++; return nil }); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "records/s")
}
