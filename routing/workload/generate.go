package workload

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"math"
	"math/bits"
	"math/rand/v2"
	"sort"
	"strconv"
	"time"
)

// Config describes a synthetic metadata trace.
//
// A zero sizing field (Files, Dirs, Depth, FanOut, Ops, Clients, Rate,
// HotFraction, HotShare, HotSkew, WorkingSet) takes its DefaultConfig value.
// Locality and the op fractions are used as given, so a zero means "none":
// start from DefaultConfig to get the default mix.
type Config struct {
	Files   int     // regular files in the initial namespace
	Dirs    int     // directories in the initial namespace, not counting the root
	Depth   int     // maximum directory depth below the root (the root's children have depth 1)
	FanOut  int     // maximum subdirectories per directory in the initial tree
	Ops     int     // timed operations after the exists records
	Clients int     // number of clients issuing operations
	Seed    int64   // the trace is a deterministic function of the Config
	Rate    float64 // mean operations per second (exponential inter-arrival times)

	// Popularity (HBA §5, Fig. 5): a file draw picks the hot set (the
	// first HotFraction of the files) with probability HotShare, ranked
	// Zipf-like with exponent HotSkew, and otherwise any file uniformly.
	// Creates, readdirs and renames spread the rest of the accesses over
	// new paths and directories, so with the default mix the most accessed
	// 7% of all paths take about HotShare − 0.07 of the accesses
	// (Summary.Share(0.07) ≈ 0.85 for the defaults, within the 78–92% the
	// HBA traces show).
	HotFraction float64
	HotShare    float64
	HotSkew     float64

	// Temporal locality: with probability Locality a client re-references
	// a file from its last WorkingSet accesses instead of drawing a new
	// one from the popularity distribution.
	Locality   float64
	WorkingSet int

	// Operation mix; what the fractions leave goes to open.
	CreateFrac    float64 // create a file in an active directory
	DeleteFrac    float64 // unlink a file (often one the client just created)
	RenameFrac    float64 // rename or move a file
	DirRenameFrac float64 // rename a directory (its whole subtree changes path)
	MkdirFrac     float64 // create a directory
	RmdirFrac     float64 // remove an empty directory (a stat when there is none)
	ReaddirFrac   float64 // list the directory of a popular file
	StatFrac      float64 // stat a file

	// ScanFrac is the share of operations that are steps of a sequential
	// sweep (like a backup, an indexer or "find -ls"): a stat of the next
	// live file in creation order, wrapping around, so a sweep visits each
	// file once. It is drawn before the mix above, which shares the other
	// operations; scan accesses do not join the working set. Zero (the
	// default) leaves the trace unchanged.
	ScanFrac float64

	// Prefix is prepended to every path ("" or a canonical absolute path
	// such as "/s000"); ClientBase is the first client id. Intensify sets
	// both to keep subtraces disjoint.
	Prefix     string
	ClientBase int

	// Scripts adds repeated access sequences (off when Scripts.Count is
	// 0, which leaves the trace unchanged).
	Scripts ScriptConfig
}

// ScriptConfig describes repeated access sequences ("scripts"): fixed,
// ordered lists of stat, open and readdir operations that clients replay
// again and again, the way builds, shells and scripts walk the same
// directories and read the same files in the same order. They give a trace
// the stable successor relationships that metadata prefetchers such as
// Nexus learn (a file is usually followed by the same few files).
//
// Scripts are built once from the initial namespace, with the
// generator's random stream, and alternate between two kinds:
//
//   - even-numbered scripts are directory walks (like "find -ls" or a build
//     tool scanning a source tree): readdir a directory, stat each of its
//     files, then walk each subdirectory the same way, depth first. A walk
//     starts in a uniformly chosen directory and moves up until its subtree
//     is large enough for the script's length;
//   - odd-numbered scripts are read lists (like the headers or packages a
//     compiler reads): distinct files, uniformly chosen over the namespace
//     or, with Related, from one subtree, each with a fixed op, stat or
//     open with equal odds.
//
// Script paths are chosen uniformly, not by popularity, so scripts change
// the skew of HBA Fig. 5: a few scripts make their paths the hot set, many
// spread the accesses (the popularity tests run with scripts off).
//
// An idle client starts a script (chosen uniformly, or by popularity with
// Skew) with probability Start each time it issues an operation; from then
// on each of its operations is the script's next step until the script
// ends. Scripts follow renames and
// skip steps whose file or directory no longer exists. Script file accesses
// join the client's working set. A zero MinLen, MaxLen or Start takes its
// default when Count > 0; Noise, Skew and Related are used as given.
//
// Count > 0 with Skew about 1, Related and a little Noise gives sessions
// that revisit related files ("ghba sim --scripts"): the successor
// relationships of recorded traces that the Nexus paper's prefetcher
// exploits (§4.4.1: a build reads the same headers in the same order).
type ScriptConfig struct {
	// Count is the number of distinct scripts; 0 disables scripts.
	Count int
	// MinLen and MaxLen bound the number of operations of a script
	// (uniform in [MinLen, MaxLen]; a walk of a small tree may be
	// shorter). Defaults 8 and 32.
	MinLen, MaxLen int
	// Start is the probability that an idle client starts a script
	// instead of drawing an operation from the mix. Default 0.1: with the
	// default lengths about two thirds of the operations then come from
	// scripts.
	Start float64
	// Noise is the probability, at each step of a script, that the
	// replay deviates: half of the time the step is skipped, half of the
	// time an operation from the regular mix is inserted before it.
	Noise float64
	// Skew makes some scripts more popular than others, as tasks are: an
	// idle client starts script i (in build order) with probability
	// ∝ 1/(i+1)^Skew, like the ranks of the hot set. Zero (the default)
	// chooses uniformly.
	Skew float64
	// Related makes read lists groups of related files, like a program's
	// headers or a project's files: the files of one directory's subtree
	// (the subtree of a uniformly chosen directory, moved up until it
	// holds enough files; the files nearest to it in depth-first order)
	// in a fixed shuffled order, instead of files chosen uniformly over
	// the namespace. False (the default) keeps uniform read lists.
	Related bool
}

// Script defaults (see ScriptConfig).
const (
	DefaultScriptMinLen = 8
	DefaultScriptMaxLen = 32
	DefaultScriptStart  = 0.1
)

// DefaultConfig returns a mid-sized trace configuration with the default
// operation mix: mostly stat and open, a few percent of creates and deletes
// and rare renames, like the HP traces HBA and G-HBA replay.
func DefaultConfig() Config {
	return Config{
		Files:         20000,
		Dirs:          2000,
		Depth:         6,
		FanOut:        16,
		Ops:           200000,
		Clients:       32,
		Seed:          1,
		Rate:          1000,
		HotFraction:   0.07,
		HotShare:      0.92,
		HotSkew:       0.8,
		Locality:      0.3,
		WorkingSet:    32,
		CreateFrac:    0.03,
		DeleteFrac:    0.02,
		RenameFrac:    0.005,
		DirRenameFrac: 0.0002,
		MkdirFrac:     0.002,
		RmdirFrac:     0.001,
		ReaddirFrac:   0.05,
		StatFrac:      0.5,
	}
}

// withDefaults fills zero sizing fields and validates the result.
func (c Config) withDefaults() (Config, error) {
	d := DefaultConfig()
	c.Files = cmp.Or(c.Files, d.Files)
	if c.Dirs == 0 {
		c.Dirs = max(1, c.Files/10)
	}
	c.Depth = cmp.Or(c.Depth, d.Depth)
	c.FanOut = cmp.Or(c.FanOut, d.FanOut)
	c.Ops = cmp.Or(c.Ops, d.Ops)
	c.Clients = cmp.Or(c.Clients, d.Clients)
	c.Rate = cmp.Or(c.Rate, d.Rate)
	c.HotFraction = cmp.Or(c.HotFraction, d.HotFraction)
	c.HotShare = cmp.Or(c.HotShare, d.HotShare)
	c.HotSkew = cmp.Or(c.HotSkew, d.HotSkew)
	c.WorkingSet = cmp.Or(c.WorkingSet, d.WorkingSet)
	if sc := &c.Scripts; sc.Count > 0 {
		if sc.MinLen == 0 {
			sc.MinLen = DefaultScriptMinLen
			if sc.MaxLen > 0 {
				sc.MinLen = min(sc.MinLen, sc.MaxLen)
			}
		}
		if sc.MaxLen == 0 {
			sc.MaxLen = max(DefaultScriptMaxLen, sc.MinLen)
		}
		if sc.Start == 0 {
			sc.Start = DefaultScriptStart
		}
	}
	bad := func(format string, args ...any) (Config, error) {
		return c, fmt.Errorf("workload config: "+format+": %w", append(args, ErrConfig)...)
	}
	switch {
	case c.Files < 1 || c.Dirs < 0 || c.Ops < 0 || c.Clients < 1 || c.Depth < 1 || c.FanOut < 1 || c.WorkingSet < 1:
		return bad("sizes must be positive: files=%d dirs=%d ops=%d clients=%d depth=%d fanout=%d workingset=%d",
			c.Files, c.Dirs, c.Ops, c.Clients, c.Depth, c.FanOut, c.WorkingSet)
	case c.Files > 1<<30 || c.Dirs > 1<<30:
		return bad("too many files or directories")
	case c.ClientBase < 0 || c.ClientBase+c.Clients-1 > MaxClient || c.Clients > MaxClient:
		return bad("client ids %d..%d out of range", c.ClientBase, c.ClientBase+c.Clients-1)
	case !(c.Rate > 0) || math.IsInf(c.Rate, 0):
		return bad("rate %v", c.Rate)
	case !(c.HotFraction > 0 && c.HotFraction <= 1):
		return bad("hot fraction %v not in (0, 1]", c.HotFraction)
	case !(c.HotShare >= 0 && c.HotShare <= 1):
		return bad("hot share %v not in [0, 1]", c.HotShare)
	case !(c.HotSkew >= 0) || c.HotSkew > 10:
		return bad("hot skew %v not in [0, 10]", c.HotSkew)
	case !(c.Locality >= 0 && c.Locality <= 1):
		return bad("locality %v not in [0, 1]", c.Locality)
	case !(c.ScanFrac >= 0 && c.ScanFrac <= 1):
		return bad("scan fraction %v not in [0, 1]", c.ScanFrac)
	case c.Scripts.Count < 0 || c.Scripts.Count > 1<<20:
		return bad("script count %d not in [0, %d]", c.Scripts.Count, 1<<20)
	case c.Scripts.Count > 0 && (c.Scripts.MinLen < 1 || c.Scripts.MaxLen < c.Scripts.MinLen || c.Scripts.MaxLen > 1<<16):
		return bad("script lengths %d..%d (want 1 ≤ min ≤ max ≤ %d)", c.Scripts.MinLen, c.Scripts.MaxLen, 1<<16)
	case !(c.Scripts.Start >= 0 && c.Scripts.Start <= 1):
		return bad("script start probability %v not in [0, 1]", c.Scripts.Start)
	case !(c.Scripts.Noise >= 0 && c.Scripts.Noise <= 1):
		return bad("script noise %v not in [0, 1]", c.Scripts.Noise)
	case !(c.Scripts.Skew >= 0) || c.Scripts.Skew > 10:
		return bad("script skew %v not in [0, 10]", c.Scripts.Skew)
	}
	sum := 0.0
	for _, f := range c.fractions() {
		if !(f >= 0 && f <= 1) {
			return bad("op fraction %v not in [0, 1]", f)
		}
		sum += f
	}
	if sum > 1+1e-9 {
		return bad("op fractions sum to %v > 1", sum)
	}
	if c.Prefix != "" {
		if err := checkPath(c.Prefix); err != nil || c.Prefix == "/" {
			return bad("prefix %q is not a canonical absolute path", c.Prefix)
		}
	}
	// Capacity of the initial tree: FanOut + FanOut² + … + FanOut^Depth.
	capacity, level := 0, 1
	for i := 0; i < c.Depth && capacity < c.Dirs; i++ {
		level *= c.FanOut
		capacity += level
		if level > 1<<30 {
			capacity = 1 << 31
		}
	}
	if c.Dirs > capacity {
		return bad("%d directories do not fit depth %d and fan-out %d", c.Dirs, c.Depth, c.FanOut)
	}
	return c, nil
}

func (c *Config) fractions() [8]float64 {
	return [8]float64{c.CreateFrac, c.DeleteFrac, c.RenameFrac, c.DirRenameFrac, c.MkdirFrac, c.RmdirFrac, c.ReaddirFrac, c.StatFrac}
}

// ErrConfig is wrapped by errors about an invalid Config.
var ErrConfig = errors.New("workload: invalid config")

// ---- generator state ----

type dirEnt struct {
	parent int32
	depth  int32
	name   uint32 // the directory is called "d<name>"
	nsub   int32  // live subdirectories
	nfile  int32  // live files
	live   int32  // index in Generator.live, -1 when removed
	empty  int32  // index in Generator.empties, -1 when not empty (or the root)
	gen    uint32 // Generator.gen when path was last checked
	ver    uint32 // bumped whenever path changes
	pver   uint32 // parent's ver when path was built
	path   string
}

type fileEnt struct {
	dir  int32
	name uint32 // the file is called "f<name>"
	slot int32  // index in Generator.hot or Generator.cold, -1 when removed
	hot  bool
	gen  uint32 // Generator.gen when path was last checked
	dver uint32 // directory's ver when path was built
	path string
}

type client struct {
	ws      []int32 // ring of recently accessed files
	wsNext  int
	created [8]int32 // ring of recently created files
	crNext  int
	crLen   int
	script  int // 1 + the script being replayed; 0 when idle
	pos     int // next step of the script
}

// scriptStep is one operation of a script: a readdir or stat of directory
// id, or a stat or open of file id.
type scriptStep struct {
	id  int32
	op  Op
	dir bool
}

// Generator produces a trace record by record; Generate and Intensify drive
// it. It is deterministic: the same Config yields the same records.
type Generator struct {
	cfg  Config
	rng  *rand.PCG
	root string // path of the root directory ("" for "/" when there is no prefix)

	dirs    []dirEnt
	files   []fileEnt
	live    []int32 // live directories (root included)
	empties []int32 // empty directories other than the root
	hot     []int32 // files of the hot set; index = popularity rank
	cold    []int32 // the other live files
	zipf    []float64
	clients []client
	scripts [][]scriptStep
	// scriptZipf is the cumulative popularity of the scripts (nil when
	// Scripts.Skew is 0: uniform).
	scriptZipf []float64
	gen        uint32 // bumped by directory renames: cached paths must be checked
	names      uint32 // next name number

	thresholds [8]float64
	phase      int // 0 exists: root prefix, 1 exists: dirs, 2 exists: files, 3 timed, 4 done
	cursor     int
	scan       int32 // next file of the sequential sweep (ScanFrac)
	emitted    int
	now        time.Duration
	buf        []byte
}

// NewGenerator validates cfg, builds the initial namespace and returns a
// generator positioned before the first record.
func NewGenerator(cfg Config) (*Generator, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	g := &Generator{
		cfg:     cfg,
		rng:     rand.NewPCG(uint64(cfg.Seed), 0x6768626120776b6c), // "ghba wkl"
		root:    cfg.Prefix,
		dirs:    make([]dirEnt, 0, cfg.Dirs+1+cfg.Ops/100),
		files:   make([]fileEnt, 0, cfg.Files+cfg.Ops/20),
		clients: make([]client, cfg.Clients),
		buf:     make([]byte, 0, 256),
	}
	if g.root == "" {
		g.phase = 1
	}
	acc := 0.0
	for i, f := range cfg.fractions() {
		acc += f
		g.thresholds[i] = acc
	}
	g.buildTree()
	g.buildFiles()
	g.buildZipf()
	for i := range g.clients {
		g.clients[i].ws = make([]int32, 0, cfg.WorkingSet)
	}
	g.buildScripts()
	return g, nil
}

// ---- random numbers (own helpers on PCG, whose output is specified, so
// traces stay identical across Go releases) ----

func (g *Generator) u64() uint64 { return g.rng.Uint64() }

// intn returns a uniform integer in [0, n), n > 0 (Lemire's method without
// the rejection step; the bias is below 2^-32 for the sizes used here).
func (g *Generator) intn(n int) int {
	hi, _ := bits.Mul64(g.rng.Uint64(), uint64(n))
	return int(hi)
}

// float returns a uniform float64 in [0, 1).
func (g *Generator) float() float64 { return float64(g.rng.Uint64()>>11) * 0x1p-53 }

// ---- namespace ----

func (g *Generator) newName() uint32 {
	g.names++
	return g.names
}

func (g *Generator) markEmpty(d int32) {
	e := &g.dirs[d]
	if d == 0 || e.live < 0 {
		return
	}
	isEmpty := e.nsub == 0 && e.nfile == 0
	switch {
	case isEmpty && e.empty < 0:
		e.empty = int32(len(g.empties))
		g.empties = append(g.empties, d)
	case !isEmpty && e.empty >= 0:
		g.removeEmpty(d)
	}
}

func (g *Generator) removeEmpty(d int32) {
	i := g.dirs[d].empty
	last := g.empties[len(g.empties)-1]
	g.empties[i] = last
	g.dirs[last].empty = i
	g.empties = g.empties[:len(g.empties)-1]
	g.dirs[d].empty = -1
}

func (g *Generator) addDir(parent int32) int32 {
	d := int32(len(g.dirs))
	g.dirs = append(g.dirs, dirEnt{
		parent: parent, depth: g.dirs[parent].depth + 1, name: g.newName(),
		live: int32(len(g.live)), empty: -1,
	})
	g.live = append(g.live, d)
	g.dirs[parent].nsub++
	g.markEmpty(parent)
	g.markEmpty(d)
	return d
}

// buildTree makes a random tree of cfg.Dirs directories: each new
// directory goes under a uniformly chosen directory that is above the depth
// limit and below the fan-out limit.
func (g *Generator) buildTree() {
	g.dirs = append(g.dirs, dirEnt{parent: -1, live: 0, empty: -1, path: g.root})
	g.live = append(g.live, 0)
	eligible := []int32{0}
	for i := 0; i < g.cfg.Dirs; i++ {
		j := g.intn(len(eligible))
		p := eligible[j]
		d := g.addDir(p)
		if int(g.dirs[p].nsub) >= g.cfg.FanOut {
			eligible[j] = eligible[len(eligible)-1]
			eligible = eligible[:len(eligible)-1]
		}
		if int(g.dirs[d].depth) < g.cfg.Depth {
			eligible = append(eligible, d)
		}
	}
}

func (g *Generator) addFile(dir int32, hot bool) int32 {
	f := int32(len(g.files))
	fe := fileEnt{dir: dir, name: g.newName(), hot: hot}
	if hot {
		fe.slot = int32(len(g.hot))
		g.hot = append(g.hot, f)
	} else {
		fe.slot = int32(len(g.cold))
		g.cold = append(g.cold, f)
	}
	g.files = append(g.files, fe)
	g.dirs[dir].nfile++
	g.markEmpty(dir)
	return f
}

// buildFiles places the initial files in uniformly chosen directories; the
// first HotFraction of them form the hot set, in rank order.
func (g *Generator) buildFiles() {
	nhot := int(math.Round(g.cfg.HotFraction * float64(g.cfg.Files)))
	nhot = min(max(nhot, 1), g.cfg.Files)
	g.hot = make([]int32, 0, nhot)
	g.cold = make([]int32, 0, g.cfg.Files-nhot+g.cfg.Ops/20)
	for i := 0; i < g.cfg.Files; i++ {
		g.addFile(g.live[g.intn(len(g.live))], i < nhot)
	}
}

// buildZipf tabulates the cumulative Zipf distribution over the hot ranks:
// P(rank i) ∝ 1/(i+1)^HotSkew.
func (g *Generator) buildZipf() { g.zipf = zipfCDF(len(g.hot), g.cfg.HotSkew) }

// zipfCDF tabulates the cumulative Zipf distribution over n ranks with
// exponent s: P(rank i) ∝ 1/(i+1)^s.
func zipfCDF(n int, s float64) []float64 {
	cdf := make([]float64, n)
	sum := 0.0
	for i := range cdf {
		sum += math.Pow(float64(i+1), -s)
		cdf[i] = sum
	}
	for i := range cdf {
		cdf[i] /= sum
	}
	return cdf
}

// buildScripts makes cfg.Scripts.Count scripts from the initial namespace
// (see ScriptConfig). It draws nothing from the random stream when scripts
// are off.
func (g *Generator) buildScripts() {
	sc := g.cfg.Scripts
	if sc.Count == 0 {
		return
	}
	// Children of each directory, in creation order.
	subdirs := make([][]int32, len(g.dirs))
	files := make([][]int32, len(g.dirs))
	for d := 1; d < len(g.dirs); d++ {
		p := g.dirs[d].parent
		subdirs[p] = append(subdirs[p], int32(d))
	}
	for f := range g.files {
		d := g.files[f].dir
		files[d] = append(files[d], int32(f))
	}
	// size[d] is the number of steps of a complete walk of d's subtree,
	// nfiles[d] the number of files in it.
	size := make([]int, len(g.dirs))
	nfiles := make([]int, len(g.dirs))
	for d := len(g.dirs) - 1; d >= 0; d-- { // children come after parents
		size[d] += 1 + len(files[d])
		nfiles[d] += len(files[d])
		if d > 0 {
			size[g.dirs[d].parent] += size[d]
			nfiles[g.dirs[d].parent] += nfiles[d]
		}
	}
	g.scripts = make([][]scriptStep, sc.Count)
	for i := range g.scripts {
		n := sc.MinLen + g.intn(sc.MaxLen-sc.MinLen+1)
		s := make([]scriptStep, 0, n)
		if i%2 == 0 {
			d := g.live[g.intn(len(g.live))]
			for d != 0 && size[d] < n {
				d = g.dirs[d].parent
			}
			s = appendWalk(s, n, d, subdirs, files)
		} else if sc.Related {
			d := g.live[g.intn(len(g.live))]
			for d != 0 && nfiles[d] < n {
				d = g.dirs[d].parent
			}
			// The 2n files nearest to d (fewer in a small namespace),
			// n of them in a shuffled order.
			near := appendFiles(make([]int32, 0, 2*n), 2*n, d, subdirs, files)
			for j := 0; j < n && j < len(near); j++ {
				k := j + g.intn(len(near)-j)
				near[j], near[k] = near[k], near[j]
				op := OpStat
				if g.u64()&1 == 0 {
					op = OpOpen
				}
				s = append(s, scriptStep{id: near[j], op: op})
			}
		} else {
			seen := make(map[int32]bool, n)
			for tries := 0; len(s) < n && tries < 4*n; tries++ {
				f := g.uniformFile()
				if f < 0 || seen[f] {
					continue
				}
				seen[f] = true
				op := OpStat
				if g.u64()&1 == 0 {
					op = OpOpen
				}
				s = append(s, scriptStep{id: f, op: op})
			}
		}
		g.scripts[i] = s
	}
	if sc.Skew > 0 {
		g.scriptZipf = zipfCDF(len(g.scripts), sc.Skew)
	}
}

// appendFiles appends to fs the files of directory d's subtree in
// depth-first order (d's own files first) until fs holds n files.
func appendFiles(fs []int32, n int, d int32, subdirs, files [][]int32) []int32 {
	for _, f := range files[d] {
		if len(fs) >= n {
			return fs
		}
		fs = append(fs, f)
	}
	for _, sd := range subdirs[d] {
		if len(fs) >= n {
			return fs
		}
		fs = appendFiles(fs, n, sd, subdirs, files)
	}
	return fs
}

// appendWalk appends to s the depth-first walk of directory d (readdir,
// stat of each file, then the walk of each subdirectory) until s holds n
// steps.
func appendWalk(s []scriptStep, n int, d int32, subdirs, files [][]int32) []scriptStep {
	if len(s) >= n {
		return s
	}
	s = append(s, scriptStep{id: d, op: OpReaddir, dir: true})
	for _, f := range files[d] {
		if len(s) >= n {
			return s
		}
		s = append(s, scriptStep{id: f, op: OpStat})
	}
	for _, sd := range subdirs[d] {
		s = appendWalk(s, n, sd, subdirs, files)
	}
	return s
}

// dirPath returns the path of directory d, rebuilding the cached string
// only when the directory or an ancestor was renamed since.
func (g *Generator) dirPath(d int32) string {
	e := &g.dirs[d]
	if e.gen == g.gen && (e.path != "" || d == 0) {
		return e.path
	}
	if d == 0 {
		e.path, e.gen = g.root, g.gen
		return e.path
	}
	pp := g.dirPath(e.parent)
	e = &g.dirs[d] // g.dirs is not resized here, but keep the pattern safe
	pver := g.dirs[e.parent].ver
	if e.path == "" || e.pver != pver {
		b := append(g.buf[:0], pp...)
		b = append(b, "/d"...)
		b = strconv.AppendUint(b, uint64(e.name), 10)
		g.buf = b
		e.path = string(b)
		e.pver = pver
		e.ver++
	}
	e.gen = g.gen
	return e.path
}

// displayDir is dirPath with the root shown as "/".
func (g *Generator) displayDir(d int32) string {
	if p := g.dirPath(d); p != "" {
		return p
	}
	return "/"
}

func (g *Generator) filePath(f int32) string {
	e := &g.files[f]
	if e.gen == g.gen && e.path != "" {
		return e.path
	}
	dp := g.dirPath(e.dir)
	dver := g.dirs[e.dir].ver
	if e.path == "" || e.dver != dver {
		b := append(g.buf[:0], dp...)
		b = append(b, "/f"...)
		b = strconv.AppendUint(b, uint64(e.name), 10)
		g.buf = b
		e.path = string(b)
		e.dver = dver
	}
	e.gen = g.gen
	return e.path
}

// ---- choosing files and directories ----

func (g *Generator) liveFiles() int { return len(g.hot) + len(g.cold) }

// uniformFile returns a uniformly chosen live file, or -1.
func (g *Generator) uniformFile() int32 {
	n := g.liveFiles()
	if n == 0 {
		return -1
	}
	i := g.intn(n)
	if i < len(g.hot) {
		return g.hot[i]
	}
	return g.cold[i-len(g.hot)]
}

// scanFile returns the next live file of the sequential sweep, in creation
// order and wrapping around, or -1 when no file is live.
func (g *Generator) scanFile() int32 {
	for range len(g.files) {
		f := g.scan
		g.scan = (g.scan + 1) % int32(len(g.files))
		if g.files[f].slot >= 0 {
			return f
		}
	}
	return -1
}

// popularFile draws from the popularity distribution, or returns -1.
func (g *Generator) popularFile() int32 {
	if len(g.hot) > 0 && g.float() < g.cfg.HotShare {
		u := g.float()
		r := sort.SearchFloat64s(g.zipf, u)
		if r < len(g.hot) {
			return g.hot[r]
		}
		return g.hot[g.intn(len(g.hot))]
	}
	return g.uniformFile()
}

// access picks the file a client touches next: with probability Locality a
// re-reference from its working set, otherwise a popularity draw. The file
// joins the working set. It returns -1 when no file exists.
func (g *Generator) access(c *client) int32 {
	f := int32(-1)
	if len(c.ws) > 0 && g.cfg.Locality > 0 && g.float() < g.cfg.Locality {
		if cand := c.ws[g.intn(len(c.ws))]; g.files[cand].slot >= 0 {
			f = cand
		}
	}
	if f < 0 {
		if f = g.popularFile(); f < 0 {
			return -1
		}
	}
	c.touch(f)
	return f
}

// touch adds file f to the client's working set, replacing the oldest.
func (c *client) touch(f int32) {
	if len(c.ws) < cap(c.ws) {
		c.ws = append(c.ws, f)
		return
	}
	c.ws[c.wsNext] = f
	c.wsNext = (c.wsNext + 1) % len(c.ws)
}

// victim picks a file to delete or rename: half of the time one the client
// created recently (temporary files), otherwise a uniformly chosen file.
func (g *Generator) victim(c *client) int32 {
	if c.crLen > 0 && g.u64()&1 == 0 {
		if f := c.created[g.intn(c.crLen)]; g.files[f].slot >= 0 {
			return f
		}
	}
	return g.uniformFile()
}

// activeDir is the directory of a file the client accesses, or a random
// live directory.
func (g *Generator) activeDir(c *client) int32 {
	if g.u64()&3 != 0 {
		if f := g.access(c); f >= 0 {
			return g.files[f].dir
		}
	}
	return g.live[g.intn(len(g.live))]
}

func (g *Generator) removeFile(f int32) {
	e := &g.files[f]
	if e.hot {
		if len(g.cold) > 0 {
			// Keep the hot set's size: a uniformly chosen cold file takes
			// the rank.
			j := g.intn(len(g.cold))
			promoted := g.cold[j]
			g.dropCold(int32(j))
			g.hot[e.slot] = promoted
			g.files[promoted].slot, g.files[promoted].hot = e.slot, true
		} else {
			last := g.hot[len(g.hot)-1]
			g.hot[e.slot] = last
			g.files[last].slot = e.slot
			g.hot = g.hot[:len(g.hot)-1]
		}
	} else {
		g.dropCold(e.slot)
	}
	e.slot = -1
	g.dirs[e.dir].nfile--
	g.markEmpty(e.dir)
}

func (g *Generator) dropCold(slot int32) {
	last := g.cold[len(g.cold)-1]
	g.cold[slot] = last
	g.files[last].slot = slot
	g.cold = g.cold[:len(g.cold)-1]
}

func (g *Generator) removeDir(d int32) {
	e := &g.dirs[d]
	i := e.live
	last := g.live[len(g.live)-1]
	g.live[i] = last
	g.dirs[last].live = i
	g.live = g.live[:len(g.live)-1]
	if e.empty >= 0 {
		g.removeEmpty(d)
	}
	e.live = -1
	p := e.parent
	g.dirs[p].nsub--
	g.markEmpty(p)
}

// ---- records ----

// Next returns the next record, or io.EOF after the last one.
func (g *Generator) Next() (Record, error) {
	for {
		switch g.phase {
		case 0:
			g.phase = 1
			return Record{Client: g.cfg.ClientBase, Op: OpExists, Path: g.root, Dir: true}, nil
		case 1:
			g.cursor++ // skip the root
			if g.cursor < len(g.dirs) {
				return Record{Client: g.cfg.ClientBase, Op: OpExists, Path: g.dirPath(int32(g.cursor)), Dir: true}, nil
			}
			g.phase, g.cursor = 2, 0
		case 2:
			if g.cursor < len(g.files) {
				g.cursor++
				return Record{Client: g.cfg.ClientBase, Op: OpExists, Path: g.filePath(int32(g.cursor - 1))}, nil
			}
			g.phase = 3
		case 3:
			if g.emitted >= g.cfg.Ops {
				g.phase = 4
				continue
			}
			g.emitted++
			return g.timed(), nil
		default:
			return Record{}, io.EOF
		}
	}
}

// timed generates the next timed operation.
func (g *Generator) timed() Record {
	step := time.Duration(-math.Log(1-g.float()) / g.cfg.Rate * float64(time.Second))
	g.now += max(step, 1)
	ci := g.intn(g.cfg.Clients)
	c := &g.clients[ci]
	rec := Record{Time: g.now, Client: g.cfg.ClientBase + ci}
	if g.scripts != nil {
		if r, ok := g.scriptNext(c, rec); ok {
			return r
		}
	}
	if g.cfg.ScanFrac > 0 && g.float() < g.cfg.ScanFrac {
		if f := g.scanFile(); f >= 0 {
			rec.Op, rec.Path = OpStat, g.filePath(f)
			return rec
		}
	}
	u := g.float()
	kind := len(g.thresholds) // open
	for i, t := range g.thresholds {
		if u < t {
			kind = i
			break
		}
	}
	for {
		switch kind {
		case 0: // create
			d := g.activeDir(c)
			f := g.addFile(d, false)
			c.created[c.crNext] = f
			c.crNext = (c.crNext + 1) % len(c.created)
			c.crLen = min(c.crLen+1, len(c.created))
			c.touch(f)
			rec.Op, rec.Path = OpCreate, g.filePath(f)
			return rec
		case 1: // unlink
			f := g.victim(c)
			if f < 0 || g.liveFiles() <= 1 {
				kind = 0
				continue
			}
			rec.Op, rec.Path = OpUnlink, g.filePath(f)
			g.removeFile(f)
			return rec
		case 2: // rename a file
			f := g.victim(c)
			if f < 0 {
				kind = 0
				continue
			}
			rec.Op, rec.Path = OpRename, g.filePath(f)
			e := &g.files[f]
			if g.u64()&1 == 0 {
				nd := g.live[g.intn(len(g.live))]
				g.dirs[e.dir].nfile--
				g.markEmpty(e.dir)
				e.dir = nd
				g.dirs[nd].nfile++
				g.markEmpty(nd)
			}
			e.name, e.path = g.newName(), ""
			rec.Path2 = g.filePath(f)
			return rec
		case 3: // rename a directory
			if len(g.live) <= 1 {
				kind = 7
				continue
			}
			d := g.live[g.intn(len(g.live))]
			if d == 0 {
				kind = 7
				continue
			}
			rec.Op, rec.Dir, rec.Path = OpRename, true, g.dirPath(d)
			e := &g.dirs[d]
			e.name, e.path = g.newName(), ""
			g.gen++ // every cached path below d is now stale
			rec.Path2 = g.dirPath(d)
			return rec
		case 4: // mkdir
			p := g.activeDir(c)
			for int(g.dirs[p].depth) >= g.cfg.Depth {
				p = g.dirs[p].parent
			}
			d := g.addDir(p)
			rec.Op, rec.Path = OpMkdir, g.dirPath(d)
			return rec
		case 5: // rmdir
			if len(g.empties) == 0 {
				kind = 7
				continue
			}
			d := g.empties[g.intn(len(g.empties))]
			rec.Op, rec.Path = OpRmdir, g.dirPath(d)
			g.removeDir(d)
			return rec
		case 6: // readdir
			rec.Op, rec.Path = OpReaddir, g.displayDir(g.activeDir(c))
			return rec
		default: // 7 stat, 8 open
			f := g.access(c)
			if f < 0 {
				kind = 0
				continue
			}
			rec.Op, rec.Path = OpOpen, g.filePath(f)
			if kind == 7 {
				rec.Op = OpStat
			}
			return rec
		}
	}
}

// scriptNext fills rec with the client's next script step, starting a
// script with probability Start when the client is idle. It returns false
// when the operation should come from the regular mix instead: the client
// stays idle, the script ended, or noise inserts an operation.
func (g *Generator) scriptNext(c *client, rec Record) (Record, bool) {
	sc := &g.cfg.Scripts
	if c.script == 0 {
		if g.float() >= sc.Start {
			return rec, false
		}
		c.script, c.pos = 1+g.pickScript(), 0
	}
	s := g.scripts[c.script-1]
	for c.pos < len(s) {
		if sc.Noise > 0 {
			if u := g.float(); u < sc.Noise {
				if u < sc.Noise/2 {
					c.pos++ // skip the step
					continue
				}
				return rec, false // insert an operation before it
			}
		}
		st := s[c.pos]
		c.pos++
		if st.dir {
			if g.dirs[st.id].live < 0 {
				continue
			}
			rec.Op, rec.Path, rec.Dir = st.op, g.displayDir(st.id), st.op != OpReaddir
		} else {
			if g.files[st.id].slot < 0 {
				continue
			}
			c.touch(st.id)
			rec.Op, rec.Path = st.op, g.filePath(st.id)
		}
		if c.pos == len(s) {
			c.script = 0
		}
		return rec, true
	}
	c.script = 0
	return rec, false
}

// pickScript chooses the script an idle client starts: by popularity
// (Scripts.Skew) or uniformly.
func (g *Generator) pickScript() int {
	if g.scriptZipf != nil {
		return min(sort.SearchFloat64s(g.scriptZipf, g.float()), len(g.scripts)-1)
	}
	return g.intn(len(g.scripts))
}

// Generate writes the trace described by cfg to emit: first the exists
// records of the initial namespace (the prefix directory, the directories
// parents first, the files), then cfg.Ops timed operations in strictly
// increasing time order. It stops at the first error emit returns.
func Generate(cfg Config, emit func(Record) error) error {
	g, err := NewGenerator(cfg)
	if err != nil {
		return err
	}
	for {
		r, err := g.Next()
		if err == io.EOF {
			return nil
		}
		if err := emit(r); err != nil {
			return err
		}
	}
}

// SubtraceConfig returns the configuration of subtrace i of an intensified
// trace: path prefix cfg.Prefix + "/s%03d", clients
// cfg.ClientBase + i·cfg.Clients onwards, and seed cfg.Seed + i.
func SubtraceConfig(cfg Config, i int) Config {
	c := cfg
	c.Prefix = fmt.Sprintf("%s/s%03d", cfg.Prefix, i)
	if c.Clients == 0 {
		c.Clients = DefaultConfig().Clients
	}
	c.ClientBase = cfg.ClientBase + i*c.Clients
	c.Seed = cfg.Seed + int64(i)
	return c
}

// Intensify writes a trace scaled up by the Trace Intensifying Factor
// (HBA §5, G-HBA §3): tif disjoint subtraces (SubtraceConfig: distinct path
// prefixes /s000, /s001, …, distinct client ids, different seeds) replayed
// together with the same start time. It emits the exists records of every
// subtrace in subtrace order, then all timed records merged by time (ties in
// subtrace order), so both the namespace and the operation rate grow tif
// times while each subtrace keeps its own timing and locality.
func Intensify(tif int, cfg Config, emit func(Record) error) error {
	if tif < 1 {
		return fmt.Errorf("workload: TIF %d < 1: %w", tif, ErrConfig)
	}
	gens := make([]*Generator, tif)
	for i := range gens {
		g, err := NewGenerator(SubtraceConfig(cfg, i))
		if err != nil {
			return fmt.Errorf("subtrace %d: %w", i, err)
		}
		gens[i] = g
	}
	// Exists records, then the first timed record of each subtrace.
	pending := make([]Record, tif)
	h := make(mergeHeap, 0, tif)
	for i, g := range gens {
		for {
			r, err := g.Next()
			if err == io.EOF {
				break
			}
			if r.Op != OpExists {
				pending[i] = r
				h.push(mergeItem{r.Time, i})
				break
			}
			if err := emit(r); err != nil {
				return err
			}
		}
	}
	for len(h) > 0 {
		src := h[0].src
		if err := emit(pending[src]); err != nil {
			return err
		}
		r, err := gens[src].Next()
		if err == io.EOF {
			h.pop()
			continue
		}
		pending[src] = r
		h[0].t = r.Time
		h.fix0()
	}
	return nil
}

type mergeItem struct {
	t   time.Duration
	src int
}

// mergeHeap is a binary min-heap on (time, subtrace).
type mergeHeap []mergeItem

func (h mergeHeap) less(i, j int) bool {
	if h[i].t != h[j].t {
		return h[i].t < h[j].t
	}
	return h[i].src < h[j].src
}

func (h *mergeHeap) push(it mergeItem) {
	*h = append(*h, it)
	s := *h
	for i := len(s) - 1; i > 0; {
		p := (i - 1) / 2
		if !s.less(i, p) {
			break
		}
		s[i], s[p] = s[p], s[i]
		i = p
	}
}

func (h *mergeHeap) pop() {
	s := *h
	n := len(s) - 1
	s[0] = s[n]
	*h = s[:n]
	if n > 0 {
		h.fix0()
	}
}

func (h mergeHeap) fix0() {
	for i := 0; ; {
		l, r, m := 2*i+1, 2*i+2, i
		if l < len(h) && h.less(l, m) {
			m = l
		}
		if r < len(h) && h.less(r, m) {
			m = r
		}
		if m == i {
			return
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
}
