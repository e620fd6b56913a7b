package sim

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ghba/ghba/routing"
	"github.com/ghba/ghba/routing/workload"
)

// Replay describes one pass over a trace: the records, the number of
// simulated servers and the seed of the placement and entry-server choices.
type Replay struct {
	// Source streams the trace (GeneratedSource or ReaderSource).
	Source Source
	// Servers is the number of metadata servers N (at least 1).
	Servers int
	// Seed seeds the random placement of files and the random choice of the
	// server each request enters.
	Seed int64
	// Progress, when set, is called every 65,536 records with the number of
	// records replayed so far (for a progress line; it must not block).
	Progress func(records int64)
}

// TraceStats describes what a pass replayed; every result embeds it.
type TraceStats struct {
	Records       int64   `json:"records"`       // trace records read
	InitialFiles  int     `json:"initial_files"` // paths present before the first timed record
	FinalFiles    int     `json:"final_files"`   // paths present at the end
	Lookups       int64   `json:"lookups"`       // lookups of existing paths
	NewLookups    int64   `json:"new_lookups"`   // lookups of absent paths (creates included)
	Creates       int64   `json:"creates"`       // paths created by the trace
	Deletes       int64   `json:"deletes"`       // paths deleted (descendants included)
	Renames       int64   `json:"renames"`       // paths renamed (descendants included)
	Ignored       int64   `json:"ignored"`       // deletes and renames of absent paths
	TraceSeconds  float64 `json:"trace_seconds"` // time from the first to the last timed record
	FilesPerSrvLo int     `json:"files_per_server_min"`
	FilesPerSrvHi int     `json:"files_per_server_max"`
}

// event is one request as the models see it.
type event struct {
	seq   uint64 // request number, distinct for every dispatched record
	path  string
	key   routing.Key
	home  int // home server of path (for lookups, deletes, renames, creates)
	entry int // server the request entered
	path2 string
	key2  routing.Key
}

// model is one simulated scheme fed by the engine. All models of a pass see
// the same placement and the same entry servers (common random numbers), so
// their differences come from the schemes alone.
type model interface {
	// setup builds the filters from the initial population.
	setup(c *cluster) error
	// lookup is a request for an existing path.
	lookup(e *event) error
	// lookupNew is a request for an absent path (e.home is -1).
	lookupNew(e *event) error
	// create adds a new path on e.home.
	create(e *event) error
	// remove deletes e.path from e.home.
	remove(e *event) error
	// rename moves e.path to e.path2 on e.home.
	rename(e *event) error
	// finish flushes nothing but lets a model compute its results.
	finish(c *cluster) error
}

// cluster is the ground truth of a pass: which paths exist and where they
// live, plus the random source.
type cluster struct {
	n     int
	ids   []string
	rng   *rand.Rand
	home  map[string]int32
	kids  map[string]int32 // directory path -> number of present children
	files []int            // files per server

	// initial population, in trace order
	initPaths []string
	initKeys  []routing.Key
	initHomes []int32

	seq              uint64
	stats            TraceStats
	firstT, lastT    time.Duration
	sawTimed, inited bool
}

// serverID names server i: "s000", "s001", ...
func serverID(i int) string {
	if i < 1000 {
		s := strconv.Itoa(i)
		return "s" + strings.Repeat("0", 3-len(s)) + s
	}
	return "s" + strconv.Itoa(i)
}

func newCluster(n int, seed int64) *cluster {
	c := &cluster{
		n:     n,
		ids:   make([]string, n),
		rng:   rand.New(rand.NewPCG(uint64(seed), 0x6768626173696d)), // "ghbasim"
		home:  make(map[string]int32),
		kids:  make(map[string]int32),
		files: make([]int, n),
	}
	for i := range c.ids {
		c.ids[i] = serverID(i)
	}
	return c
}

// key hashes a path once for every filter of every model (all use HashXX).
func key(path string) routing.Key { return routing.HashPath(routing.HashXX, path) }

// parent returns the parent directory of a normalized absolute path ("" for
// the root).
func parent(p string) string {
	i := strings.LastIndexByte(p, '/')
	switch {
	case i < 0 || p == "/":
		return ""
	case i == 0:
		return "/"
	}
	return p[:i]
}

func (c *cluster) place(path string) int {
	h := c.rng.IntN(c.n)
	c.home[path] = int32(h)
	c.files[h]++
	c.kids[parent(path)]++
	return h
}

func (c *cluster) unplace(path string, h int) {
	delete(c.home, path)
	c.files[h]--
	p := parent(path)
	if c.kids[p]--; c.kids[p] <= 0 {
		delete(c.kids, p)
	}
}

// run replays the trace through the models.
func run(ctx context.Context, r Replay, models ...model) (*cluster, error) {
	if r.Servers < 1 {
		return nil, fmt.Errorf("sim: %d servers: %w", r.Servers, ErrConfig)
	}
	if r.Source == nil {
		return nil, fmt.Errorf("sim: no trace source: %w", ErrConfig)
	}
	c := newCluster(r.Servers, r.Seed)
	var ev event
	emit := func(rec workload.Record) error {
		c.stats.Records++
		if c.stats.Records&65535 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
			if r.Progress != nil {
				r.Progress(c.stats.Records)
			}
		}
		if rec.Op == workload.OpExists && !c.inited {
			if _, dup := c.home[rec.Path]; dup {
				return nil
			}
			h := c.place(rec.Path)
			c.initPaths = append(c.initPaths, rec.Path)
			c.initKeys = append(c.initKeys, key(rec.Path))
			c.initHomes = append(c.initHomes, int32(h))
			return nil
		}
		if !c.inited {
			if err := c.setup(models); err != nil {
				return err
			}
		}
		if rec.Op != workload.OpExists {
			if !c.sawTimed {
				c.firstT, c.sawTimed = rec.Time, true
			}
			c.lastT = rec.Time
		}
		return c.dispatch(&ev, rec, models)
	}
	if err := r.Source(ctx, emit); err != nil {
		return nil, err
	}
	if !c.inited {
		if err := c.setup(models); err != nil {
			return nil, err
		}
	}
	if r.Progress != nil {
		r.Progress(c.stats.Records)
	}
	c.stats.FinalFiles = len(c.home)
	c.stats.TraceSeconds = (c.lastT - c.firstT).Seconds()
	c.stats.FilesPerSrvLo, c.stats.FilesPerSrvHi = c.files[0], c.files[0]
	for _, f := range c.files {
		c.stats.FilesPerSrvLo = min(c.stats.FilesPerSrvLo, f)
		c.stats.FilesPerSrvHi = max(c.stats.FilesPerSrvHi, f)
	}
	for _, m := range models {
		if err := m.finish(c); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// ErrConfig reports an unusable simulation configuration.
var ErrConfig = errors.New("sim: invalid configuration")

func (c *cluster) setup(models []model) error {
	c.inited = true
	c.stats.InitialFiles = len(c.initPaths)
	for _, m := range models {
		if err := m.setup(c); err != nil {
			return err
		}
	}
	return nil
}

// capacity is the number of files each local filter is sized for: the mean
// initial population of a server (at least 1).
func (c *cluster) capacity() int { return max(1, (len(c.initPaths)+c.n-1)/c.n) }

func each(models []model, fn func(model) error) error {
	for _, m := range models {
		if err := fn(m); err != nil {
			return err
		}
	}
	return nil
}

func (c *cluster) dispatch(ev *event, rec workload.Record, models []model) error {
	c.seq++
	*ev = event{seq: c.seq, path: rec.Path, key: key(rec.Path), entry: c.rng.IntN(c.n), home: -1}
	h, exists := c.home[rec.Path]
	switch rec.Op {
	case workload.OpExists: // a late "exists": an untimed creation
		if exists {
			return nil
		}
		ev.home = c.place(rec.Path)
		return each(models, func(m model) error { return m.create(ev) })
	case workload.OpStat, workload.OpOpen, workload.OpReaddir:
		if exists {
			ev.home = int(h)
			c.stats.Lookups++
			return each(models, func(m model) error { return m.lookup(ev) })
		}
		c.stats.NewLookups++
		return each(models, func(m model) error { return m.lookupNew(ev) })
	case workload.OpCreate, workload.OpMkdir:
		if exists {
			ev.home = int(h)
			c.stats.Lookups++
			return each(models, func(m model) error { return m.lookup(ev) })
		}
		c.stats.NewLookups++
		if err := each(models, func(m model) error { return m.lookupNew(ev) }); err != nil {
			return err
		}
		ev.home = c.place(rec.Path)
		c.stats.Creates++
		return each(models, func(m model) error { return m.create(ev) })
	case workload.OpUnlink, workload.OpRmdir:
		if !exists {
			c.stats.Ignored++
			return nil
		}
		return c.remove(ev, rec.Path, int(h), models)
	case workload.OpRename:
		if !exists || rec.Path2 == "" || rec.Path2 == rec.Path {
			c.stats.Ignored++
			return nil
		}
		return c.rename(ev, rec.Path, rec.Path2, models)
	}
	return nil
}

// descendants lists the present paths under dir (dir excluded), sorted so
// that a replay is deterministic for a given seed. It scans the namespace,
// so it runs only for directories that have children.
func (c *cluster) descendants(dir string) []string {
	if c.kids[dir] == 0 {
		return nil
	}
	prefix := dir + "/"
	if dir == "/" {
		prefix = "/"
	}
	var out []string
	for p := range c.home {
		if strings.HasPrefix(p, prefix) && p != dir {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out
}

func (c *cluster) remove(ev *event, path string, h int, models []model) error {
	// A directory delete removes its subtree (rmdir -r as one trace event).
	for _, d := range c.descendants(path) {
		if err := c.removeOne(ev, d, int(c.home[d]), models); err != nil {
			return err
		}
	}
	return c.removeOne(ev, path, h, models)
}

func (c *cluster) removeOne(ev *event, path string, h int, models []model) error {
	ev.path, ev.key, ev.home = path, key(path), h
	c.unplace(path, h)
	c.stats.Deletes++
	return each(models, func(m model) error { return m.remove(ev) })
}

func (c *cluster) rename(ev *event, from, to string, models []model) error {
	// Renaming over an existing target replaces it (POSIX rename).
	if th, ok := c.home[to]; ok {
		if err := c.remove(ev, to, int(th), models); err != nil {
			return err
		}
	}
	subtree := c.descendants(from)
	if err := c.renameOne(ev, from, to, models); err != nil {
		return err
	}
	for _, d := range subtree {
		if err := c.renameOne(ev, d, to+strings.TrimPrefix(d, from), models); err != nil {
			return err
		}
	}
	return nil
}

// renameOne moves one path; its home does not change (HBA §4.2.2: a rename
// updates filters, it migrates no metadata).
func (c *cluster) renameOne(ev *event, from, to string, models []model) error {
	h := int(c.home[from])
	c.unplace(from, h)
	c.home[to] = int32(h)
	c.files[h]++
	c.kids[parent(to)]++
	ev.path, ev.key, ev.home = from, key(from), h
	ev.path2, ev.key2 = to, key(to)
	c.stats.Renames++
	return each(models, func(m model) error { return m.rename(ev) })
}
