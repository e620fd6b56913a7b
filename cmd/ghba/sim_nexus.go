package main

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/ghba/ghba/routing/nexus"
	"github.com/ghba/ghba/routing/nexus/cachesim"
	"github.com/ghba/ghba/routing/sim"
)

// nexusStudies are the parts of "ghba sim nexus", after the Nexus paper's
// figures.
var nexusStudies = []string{"compare", "weights", "window", "grouping", "consistency"}

// nexusCompared lists the algorithms of the hit-rate comparison in output
// order (Nexus §5.3; PG1 and PG2 are PG with prefetch groups of 1 and 2).
var nexusCompared = []cachesim.Spec{
	{Algorithm: cachesim.LRU}, {Algorithm: cachesim.LFU}, {Algorithm: cachesim.MRU},
	{Algorithm: cachesim.FirstSuccessor}, {Algorithm: cachesim.LastSuccessor}, {Algorithm: cachesim.Noah},
	{Algorithm: cachesim.RecentPopularity}, {Algorithm: cachesim.PG, Group: 1}, {Algorithm: cachesim.PG, Group: 2},
	{Algorithm: cachesim.Nexus}, {Algorithm: cachesim.OPT},
}

// nexusConsistency are the algorithms replayed without consistency control
// too (the five the paper presents, §5.3).
var nexusConsistency = []string{"lru", "pg1", "pg2", "nexus", "opt"}

// nexusSweep is the window and group sizes of Figs. 8 and 9.
var nexusSweep = []int{1, 2, 3, 4, 5}

type nexusFlags struct {
	fractions      []float64
	window, group  int
	assignment     string
	grouping       string
	noahS          int
	rpJ, rpK       int
	maxVertices    int
	maxOutEdges    int
	serverFraction float64
	memory         time.Duration
	network        time.Duration
	disk           time.Duration
	gbps           float64
	metadataBytes  int
	studies        []string
	fullGrid       bool
	asyncPrefetch  bool
}

// nexusConfig is the validated configuration of a run.
type nexusConfig struct {
	fractions  []float64
	window     int
	group      int
	assignment nexus.Assignment
	grouping   cachesim.Grouping
	opts       cachesim.Options
	studies    map[string]bool
	fullGrid   bool
}

// nexusResult is one cache fraction's results. Maps are keyed by algorithm
// (hit_rate: lru, lfu, mru, first_successor, last_successor, noah,
// recent_popularity, pg1, pg2, nexus, opt) or by configuration.
type nexusResult struct {
	CacheFraction float64 `json:"cache_fraction"`
	// HitRate is the client local hit rate, hits / accesses (Figs. 12, 13).
	HitRate map[string]float64 `json:"hit_rate"`
	// Prefetched, PrefetchUsed and PrefetchWasted count prefetched entries,
	// those a demand access hit, and those evicted or invalidated unused.
	Prefetched     map[string]float64 `json:"prefetched,omitempty"`
	PrefetchUsed   map[string]float64 `json:"prefetch_used,omitempty"`
	PrefetchWasted map[string]float64 `json:"prefetch_wasted,omitempty"`
	ServerHitRate  map[string]float64 `json:"server_hit_rate,omitempty"`
	DiskReads      map[string]float64 `json:"disk_reads_per_access,omitempty"`
	// MeanResponseMs is the response-time model's mean per access (Figs.
	// 14, 15).
	MeanResponseMs map[string]float64 `json:"mean_response_ms,omitempty"`
	// Consistency control (Fig. 16): invalidation messages per access, and
	// the same replay without write-invalidate.
	ConsistencyMessages    map[string]float64 `json:"consistency_messages_per_access,omitempty"`
	MeanResponseMsNoConsis map[string]float64 `json:"mean_response_ms_no_consistency,omitempty"`
	HitRateNoConsistency   map[string]float64 `json:"hit_rate_no_consistency,omitempty"`
	// Weights is Nexus's hit rate by weight assignment, window and group
	// ("linear_w5_g2", Fig. 8).
	Weights map[string]float64 `json:"weights_hit_rate,omitempty"`
	// WindowGroup is Nexus's hit rate and mean response time by window and
	// group size ("w5_g2", Fig. 9).
	WindowGroup         map[string]float64 `json:"window_group_hit_rate,omitempty"`
	WindowGroupResponse map[string]float64 `json:"window_group_response_ms,omitempty"`
	// Grouping is Nexus's hit rate with client- and server-oriented
	// grouping (Fig. 10).
	Grouping         map[string]float64 `json:"grouping_hit_rate,omitempty"`
	GroupingResponse map[string]float64 `json:"grouping_response_ms,omitempty"`

	Accesses         int     `json:"accesses"`
	Reads            int     `json:"reads"`
	Writes           int     `json:"writes"`
	Clients          int     `json:"clients"`
	WorkingSet       int     `json:"working_set"`
	ClientWorkingSet float64 `json:"client_working_set_mean"`
	CacheEntries     int64   `json:"cache_entries"`
	Window           int     `json:"window"`
	Group            int     `json:"group"`
	Assignment       string  `json:"assignment"`
	GroupingMode     string  `json:"grouping"`
	ServerFraction   float64 `json:"server_cache_fraction"`
	NetworkDelayMs   float64 `json:"network_delay_ms"`
	DiskMs           float64 `json:"disk_ms"`
	MemoryNs         float64 `json:"memory_ns"`
	BandwidthGbps    float64 `json:"bandwidth_gbps"`
	MetadataBytes    int     `json:"metadata_bytes"`
	AsyncPrefetch    bool    `json:"async_prefetch"`
}

func newSimNexusCmd(o *simOptions) *cobra.Command {
	var (
		nf  nexusFlags
		cfg nexusConfig // from the flags (check)
	)
	cmd := &cobra.Command{
		Use:   "nexus",
		Short: "Nexus metadata prefetching vs LRU, LFU, MRU, successor predictors, PG and OPT (Nexus Figs. 8–16)",
		Long: `Replay a trace against client metadata caches (package routing/nexus/cachesim) and
compare the algorithms of the Nexus paper (Gu et al., IEEE TC 2010, §5.3):
LRU, LFU, MRU; First Successor, Last Successor, Noah (stable successor,
--noah-s) and Recent Popularity (best j-out-of-k, --rp-j/--rp-k), which
prefetch their one predicted successor on a miss; PG1 and PG2,
probability-based successor group prediction prefetching 1 or 2 paths
(P(Y|X), then P(Z|X,Y), §2 item 5); Nexus, the weighted relationship graph
(package nexus: --window, --assignment, --group, §4); OPT, Belady's MIN
(offline, no prefetching). Prefetching algorithms manage their cache by LRU.

Every client has its own cache of --cache-fraction of the distinct paths it
accesses (default 0.1, 0.3 and 0.5, the paper's 10/30/50%). Every timed trace
record is an access of its path: stat, open and readdir are reads; create,
mkdir, unlink, rmdir and rename are writes, which always reach the server and
with write-invalidate remove other clients' copies; unlink, rmdir and rename
remove the path from the issuing client's cache too. Local hit rate = hits /
accesses at the client caches (Figs. 12, 13).

Response time (Figs. 14, 15; no queueing, cooperative caching not modelled):
a local hit costs --memory-latency; a miss or a write costs a request and a
reply (2 × --network-delay, 0.3 ms in the paper), the transfer of the item
and its prefetch group (--metadata-bytes each at --bandwidth-gbps, 1 Gbit/s
in the paper) and per item a server-cache hit (--memory-latency) or a disk
read (--disk-latency; the server cache is one LRU of --server-cache-fraction
of the working set); the reply waits for the whole prefetch group, as the
server retrieves "the requested metadata along with the entire prefetching
group" (§5.2), unless --async-prefetch. Consistency (Fig. 16): a write that invalidates other
clients' copies waits another round trip; each copy costs an invalidation and
an acknowledgement; the consistency study replays LRU, PG1, PG2, Nexus and
OPT without write-invalidate as well.

--studies picks the parts: compare (Figs. 12–15), weights (Fig. 8: the four
weight assignments, groups 1–5 at --window; --full-grid: windows 1–5 too),
window (Fig. 9: windows 1–5 × groups 1–5), grouping (Fig. 10: client- vs
server-oriented Nexus), consistency (Fig. 16). All run in one pass over the
trace. --out also writes nexus*.csv and nexus_hit.png, nexus_response.png,
nexus_window.png.`,
		Example: `  ghba sim nexus
  ghba sim nexus --cache-fraction 0.1 --json
  ghba sim nexus --trace build.trace --cache-fraction 0.1,0.3,0.5 --out sim-out/
  ghba sim nexus --studies compare,grouping --grouping server --window 3 --group 1
  ghba sim nexus --studies weights --full-grid --quick`,
		Args: noArgs,
		RunE: o.runE(func(*cobra.Command) (err error) {
			cfg, err = nf.config()
			return err
		}, func(cmd *cobra.Command) error {
			rs, err := runNexus(cmd, o, cfg)
			if err != nil {
				return err
			}
			return printNexus(cmd, o, cfg, rs)
		}),
	}
	f := cmd.Flags()
	d := cachesim.DefaultLatency()
	f.Float64SliceVar(&nf.fractions, "cache-fraction", []float64{0.1, 0.3, 0.5}, "client cache size as a fraction of the distinct paths each client accesses (list)")
	f.IntVar(&nf.window, "window", nexus.DefaultWindow, "Nexus look-ahead history window (§4.5.2: 5 is best)")
	f.IntVar(&nf.group, "group", nexus.DefaultGroup, "Nexus prefetch group size: successors prefetched on a miss (§4.5.2: 2 is best)")
	f.StringVar(&nf.assignment, "assignment", nexus.Linear.String(), "Nexus weight assignment: linear (decremental), identical, polynomial or exponential (§4.5.1)")
	f.StringVar(&nf.grouping, "grouping", "client", "where predictors learn: client (one graph per client, §4.5.3) or server (one for all clients)")
	f.IntVar(&nf.noahS, "noah-s", 2, "Noah's stability S: the prediction changes after S identical successors in a row")
	f.IntVar(&nf.rpJ, "rp-j", 2, "Recent Popularity: predict a successor seen at least j times …")
	f.IntVar(&nf.rpK, "rp-k", 4, "… among the last k successors")
	f.IntVar(&nf.maxVertices, "max-vertices", nexus.DefaultMaxVertices, "cap on the vertices of each Nexus graph (least recently accessed evicted)")
	f.IntVar(&nf.maxOutEdges, "max-out-edges", nexus.DefaultMaxOutEdges, "cap on the out-edges of each Nexus vertex (weakest replaced)")
	f.Float64Var(&nf.serverFraction, "server-cache-fraction", 0.5, "metadata server cache (one LRU for all clients) as a fraction of the working set")
	f.DurationVar(&nf.memory, "memory-latency", d.Memory, "client or server memory hit (the paper: nanoseconds)")
	f.DurationVar(&nf.network, "network-delay", d.Network, "one network message (the paper: 0.3 ms average delay, §5.2)")
	f.DurationVar(&nf.disk, "disk-latency", d.Disk, "a metadata read from disk at the server (assumption; the paper uses DiskSim)")
	f.Float64Var(&nf.gbps, "bandwidth-gbps", d.Bandwidth/1e9, "network bandwidth in Gbit/s (the paper: 1, §5.2)")
	f.IntVar(&nf.metadataBytes, "metadata-bytes", d.MetadataBytes, "bytes per metadata item (Table 1: 4,224 B; 99% are smaller, §3.4)")
	f.BoolVar(&nf.asyncPrefetch, "async-prefetch", false, "the server replies before fetching the prefetch group (default: the reply waits for the whole group, §5.2)")
	f.StringSliceVar(&nf.studies, "studies", nexusStudies, "parts to run: "+strings.Join(nexusStudies, ", ")+" (list)")
	f.BoolVar(&nf.fullGrid, "full-grid", false, "weights study over windows 1–5 as well as groups 1–5 (Fig. 8's full grid; slower)")
	return cmd
}

func (nf *nexusFlags) config() (nexusConfig, error) {
	c := nexusConfig{window: nf.window, group: nf.group, fullGrid: nf.fullGrid, studies: make(map[string]bool)}
	if len(nf.fractions) == 0 {
		return c, usageErrorf("--cache-fraction: want at least one value")
	}
	for _, x := range nf.fractions {
		if !(x > 0 && x <= 1) {
			return c, usageErrorf("--cache-fraction %v: want a fraction in (0, 1]", x)
		}
		if !slices.Contains(c.fractions, x) {
			c.fractions = append(c.fractions, x)
		}
	}
	if nf.window < 1 || nf.window > nexus.MaxWindow {
		return c, usageErrorf("--window %d: want 1 to %d", nf.window, nexus.MaxWindow)
	}
	if nf.group < 1 || nf.group > 64 {
		return c, usageErrorf("--group %d: want 1 to 64", nf.group)
	}
	a, err := nexus.ParseAssignment(nf.assignment)
	if err != nil {
		return c, usageError{err}
	}
	c.assignment = a
	switch nf.grouping {
	case "client":
		c.grouping = cachesim.ClientOriented
	case "server":
		c.grouping = cachesim.ServerOriented
	default:
		return c, usageErrorf("--grouping %q: want client or server", nf.grouping)
	}
	if len(nf.studies) == 0 {
		return c, usageErrorf("--studies: want at least one of %s", strings.Join(nexusStudies, ", "))
	}
	for _, s := range nf.studies {
		s = strings.TrimSpace(s)
		if !slices.Contains(nexusStudies, s) {
			return c, usageErrorf("--studies %q: want %s", s, strings.Join(nexusStudies, ", "))
		}
		c.studies[s] = true
	}
	if nf.maxVertices < 1 || nf.maxOutEdges < 1 {
		return c, usageErrorf("--max-vertices %d / --max-out-edges %d: want at least 1", nf.maxVertices, nf.maxOutEdges)
	}
	if nf.memory < 0 || nf.network < 0 || nf.disk < 0 || nf.metadataBytes < 0 || !(nf.gbps > 0) {
		return c, usageErrorf("latencies, --metadata-bytes and --bandwidth-gbps: want non-negative values and a positive bandwidth")
	}
	c.opts = cachesim.Options{
		NoahS: nf.noahS, RPJ: nf.rpJ, RPK: nf.rpK,
		MaxVertices: nf.maxVertices, MaxOutEdges: nf.maxOutEdges,
		ServerFraction: nf.serverFraction, AsyncPrefetch: nf.asyncPrefetch,
		Latency: cachesim.Latency{Memory: nf.memory, Network: nf.network, Disk: nf.disk,
			Bandwidth: nf.gbps * 1e9, MetadataBytes: nf.metadataBytes},
	}
	switch {
	case nf.noahS < 1:
		return c, usageErrorf("--noah-s %d: want at least 1", nf.noahS)
	case nf.rpJ < 1 || nf.rpK < nf.rpJ:
		return c, usageErrorf("--rp-j %d / --rp-k %d: want 1 ≤ j ≤ k", nf.rpJ, nf.rpK)
	case !(nf.serverFraction > 0 && nf.serverFraction <= 1):
		return c, usageErrorf("--server-cache-fraction %v: want a fraction in (0, 1]", nf.serverFraction)
	}
	return c, nil
}

// nexusPlan collects the specs of a run without duplicates.
type nexusPlan struct {
	specs []cachesim.Spec
	index map[cachesim.Spec]int
}

func (p *nexusPlan) add(s cachesim.Spec) int {
	if i, ok := p.index[s]; ok {
		return i
	}
	p.index[s] = len(p.specs)
	p.specs = append(p.specs, s)
	return len(p.specs) - 1
}

// nexusSpec completes a spec with the run's Nexus and grouping settings.
func (c nexusConfig) spec(s cachesim.Spec, fraction float64) cachesim.Spec {
	s.Fraction = fraction
	if s.Algorithm.Prefetches() {
		s.Grouping = c.grouping
	}
	if s.Algorithm == cachesim.Nexus {
		s.Window, s.Group, s.Assignment = c.window, c.group, c.assignment
	}
	return s
}

func nexusKey(parts ...any) string {
	var b strings.Builder
	for i, p := range parts {
		if i > 0 {
			b.WriteByte('_')
		}
		fmt.Fprint(&b, p)
	}
	return b.String()
}

// nexusRefs maps each result field and key to a spec of the plan.
type nexusRefs struct {
	compare     map[string]int // algorithm → spec
	noConsis    map[string]int
	weights     map[string]int
	windowGroup map[string]int
	grouping    map[string]int
}

// plan lists the specs of every study for one cache fraction.
func (c nexusConfig) plan(p *nexusPlan, fraction float64) nexusRefs {
	r := nexusRefs{compare: map[string]int{}, noConsis: map[string]int{}, weights: map[string]int{},
		windowGroup: map[string]int{}, grouping: map[string]int{}}
	nexusSpec := c.spec(cachesim.Spec{Algorithm: cachesim.Nexus}, fraction)
	if c.studies["compare"] || c.studies["consistency"] {
		for _, s := range nexusCompared {
			s = c.spec(s, fraction)
			r.compare[s.Name()] = p.add(s)
			if c.studies["consistency"] && slices.Contains(nexusConsistency, s.Name()) {
				s.NoConsistency = true
				r.noConsis[s.Name()] = p.add(s)
			}
		}
	}
	if c.studies["weights"] {
		windows := []int{c.window}
		if c.fullGrid {
			windows = nexusSweep
		}
		for _, a := range nexus.Assignments() {
			for _, w := range windows {
				for _, g := range nexusSweep {
					s := nexusSpec
					s.Assignment, s.Window, s.Group = a, w, g
					r.weights[nexusKey(a, "w"+strconv.Itoa(w), "g"+strconv.Itoa(g))] = p.add(s)
				}
			}
		}
	}
	if c.studies["window"] {
		for _, w := range nexusSweep {
			for _, g := range nexusSweep {
				s := nexusSpec
				s.Window, s.Group = w, g
				r.windowGroup[nexusKey("w"+strconv.Itoa(w), "g"+strconv.Itoa(g))] = p.add(s)
			}
		}
	}
	if c.studies["grouping"] {
		for _, g := range []cachesim.Grouping{cachesim.ClientOriented, cachesim.ServerOriented} {
			s := nexusSpec
			s.Grouping = g
			r.grouping[g.String()] = p.add(s)
		}
	}
	return r
}

// runNexus replays the trace once per seed (--runs) with every spec of
// every fraction and study in one pass, and averages over the seeds.
func runNexus(cmd *cobra.Command, o *simOptions, c nexusConfig) ([]nexusResult, error) {
	p := newSimProgress(cmd, o, "nexus", o.runs)
	per := make([][]nexusResult, len(c.fractions))
	for i := 0; i < o.runs; i++ {
		on := *o
		on.seed = o.seed + int64(i)
		p.next(fmt.Sprintf("nexus seed=%d", on.seed))
		tr, err := cachesim.Load(cmd.Context(), on.source())
		if err != nil {
			return nil, nexusError(err)
		}
		plan := &nexusPlan{index: make(map[cachesim.Spec]int)}
		refs := make([]nexusRefs, len(c.fractions))
		for j, f := range c.fractions {
			refs[j] = c.plan(plan, f)
		}
		opts := c.opts
		opts.Progress = func(done, total int64) {
			p.total = total
			p.update(done)
		}
		results, err := cachesim.Run(cmd.Context(), tr, opts, plan.specs)
		p.done()
		if err != nil {
			return nil, nexusError(err)
		}
		for j, f := range c.fractions {
			per[j] = append(per[j], c.collect(tr, f, refs[j], results))
		}
	}
	out := make([]nexusResult, len(per))
	for j := range per {
		out[j] = sim.Mean(per[j])
	}
	return out, nil
}

func nexusError(err error) error {
	if errors.Is(err, cachesim.ErrConfig) || errors.Is(err, nexus.ErrConfig) {
		return usageError{err}
	}
	return simError(err)
}

// collect turns the results of one fraction into a nexusResult.
func (c nexusConfig) collect(tr *cachesim.Trace, f float64, refs nexusRefs, rs []cachesim.Result) nexusResult {
	l := c.opts.Latency
	r := nexusResult{
		CacheFraction: f, HitRate: map[string]float64{},
		Accesses: len(tr.Accesses), Reads: tr.Reads, Writes: tr.Writes, Clients: tr.Clients, WorkingSet: tr.WorkingSet,
		Window: c.window, Group: c.group, Assignment: c.assignment.String(), GroupingMode: c.grouping.String(),
		ServerFraction: c.opts.ServerFraction, NetworkDelayMs: nexusMs(l.Network), DiskMs: nexusMs(l.Disk),
		MemoryNs: float64(l.Memory), BandwidthGbps: l.Bandwidth / 1e9, MetadataBytes: l.MetadataBytes,
		AsyncPrefetch: c.opts.AsyncPrefetch,
	}
	sum := 0
	for _, w := range tr.ClientWorkingSet {
		sum += w
	}
	r.ClientWorkingSet = float64(sum) / float64(max(1, tr.Clients))
	put := func(m *map[string]float64, k string, v float64) {
		if *m == nil {
			*m = map[string]float64{}
		}
		(*m)[k] = v
	}
	for name, i := range refs.compare {
		x := rs[i]
		r.HitRate[name] = x.HitRate()
		r.CacheEntries = x.CacheEntries
		if !c.studies["compare"] {
			continue
		}
		n := float64(x.Accesses)
		put(&r.Prefetched, name, float64(x.Prefetched))
		put(&r.PrefetchUsed, name, float64(x.PrefetchUsed))
		put(&r.PrefetchWasted, name, float64(x.PrefetchWasted))
		put(&r.ServerHitRate, name, x.ServerHitRate())
		put(&r.DiskReads, name, float64(x.DiskReads)/n)
		put(&r.MeanResponseMs, name, nexusMs(x.MeanResponse()))
		put(&r.ConsistencyMessages, name, x.ConsistencyMessages())
	}
	for name, i := range refs.noConsis {
		put(&r.MeanResponseMsNoConsis, name, nexusMs(rs[i].MeanResponse()))
		put(&r.HitRateNoConsistency, name, rs[i].HitRate())
		if !c.studies["compare"] {
			put(&r.MeanResponseMs, name, nexusMs(rs[refs.compare[name]].MeanResponse()))
			put(&r.ConsistencyMessages, name, rs[refs.compare[name]].ConsistencyMessages())
		}
	}
	for k, i := range refs.weights {
		put(&r.Weights, k, rs[i].HitRate())
	}
	for k, i := range refs.windowGroup {
		put(&r.WindowGroup, k, rs[i].HitRate())
		put(&r.WindowGroupResponse, k, nexusMs(rs[i].MeanResponse()))
	}
	for k, i := range refs.grouping {
		put(&r.Grouping, k, rs[i].HitRate())
		put(&r.GroupingResponse, k, nexusMs(rs[i].MeanResponse()))
		if _, ok := r.HitRate["nexus"]; !ok && k == c.grouping.String() {
			r.HitRate["nexus"] = rs[i].HitRate()
		}
	}
	if len(r.HitRate) == 0 {
		// Only Fig. 8/9 studies: report the configured Nexus.
		if v, ok := r.WindowGroup[nexusKey("w"+strconv.Itoa(c.window), "g"+strconv.Itoa(c.group))]; ok {
			r.HitRate["nexus"] = v
		} else if v, ok := r.Weights[nexusKey(c.assignment, "w"+strconv.Itoa(c.window), "g"+strconv.Itoa(c.group))]; ok {
			r.HitRate["nexus"] = v
		}
	}
	return r
}

func nexusMs(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// nexusNames is the output order of the compared algorithms.
func nexusNames() []string {
	var ns []string
	for _, s := range nexusCompared {
		ns = append(ns, s.Name())
	}
	return ns
}

func printNexus(cmd *cobra.Command, o *simOptions, c nexusConfig, rs []nexusResult) error {
	if err := simPrintJSON(cmd, o, rs); err != nil {
		return err
	}
	r0 := rs[0]
	trace := fmt.Sprintf("%s; %d accesses (%d writes) by %d clients, working set %d paths (%.0f per client)",
		o.describe(), r0.Accesses, r0.Writes, r0.Clients, r0.WorkingSet, r0.ClientWorkingSet)
	model := fmt.Sprintf("network %v/message at %v Gbit/s, %d B/item, disk %v, memory %v, server cache %v of the working set",
		c.opts.Latency.Network, r0.BandwidthGbps, r0.MetadataBytes, c.opts.Latency.Disk, c.opts.Latency.Memory, c.opts.ServerFraction)
	var charts []func() error
	if c.studies["compare"] {
		title := fmt.Sprintf("Client local hit rate and response time (Nexus Figs. 12–16), %s; Nexus window %d, group %d, %s weights, %s-oriented; %s",
			trace, c.window, c.group, c.assignment, c.grouping, model)
		more, err := nexusCompareTable(c, rs).emit(cmd, o, title, "nexus.csv")
		if err != nil {
			return err
		}
		if !o.json {
			fmt.Fprintln(cmd.OutOrStdout())
		}
		if more && len(rs) > 1 {
			charts = append(charts, func() error { return nexusFractionChart(o, rs) })
		}
	} else if c.studies["consistency"] {
		if err := nexusEmit(cmd, o, nexusConsistencyTable(rs), "Consistency control: write-invalidate vs none (Nexus Fig. 16), "+trace, "nexus_consistency.csv"); err != nil {
			return err
		}
	}
	if c.studies["weights"] {
		if err := nexusEmit(cmd, o, nexusWeightsTable(c, rs), "Nexus weight assignments (Fig. 8), "+c.grouping.String()+"-oriented", "nexus_weights.csv"); err != nil {
			return err
		}
	}
	if c.studies["window"] {
		if err := nexusEmit(cmd, o, nexusWindowTable(rs), fmt.Sprintf("Nexus look-ahead window × prefetch group (Fig. 9), %s weights, %s-oriented",
			c.assignment, c.grouping), "nexus_window.csv"); err != nil {
			return err
		}
		if o.out != "" {
			charts = append(charts, func() error { return nexusWindowChart(o, rs[0]) })
		}
	}
	if c.studies["grouping"] {
		t := &simTable{header: []string{"cache", "client-oriented hit%", "server-oriented hit%", "client ms", "server ms"}}
		for _, r := range rs {
			t.add(simPct(r.CacheFraction)+"%", simPct(r.Grouping["client"]), simPct(r.Grouping["server"]),
				simF4(r.GroupingResponse["client"]), simF4(r.GroupingResponse["server"]))
		}
		if err := nexusEmit(cmd, o, t, fmt.Sprintf("Nexus server- vs client-oriented grouping (Fig. 10), window %d, group %d",
			c.window, c.group), "nexus_grouping.csv"); err != nil {
			return err
		}
	}
	for _, ch := range charts {
		if err := ch(); err != nil {
			return err
		}
	}
	return nil
}

// nexusCompareTable is the comparison of every algorithm per cache
// fraction (with the consistency study, also the response time without
// write-invalidate).
func nexusCompareTable(c nexusConfig, rs []nexusResult) *simTable {
	t := &simTable{header: []string{"cache", "algorithm", "hit%", "prefetched", "used", "wasted", "server hit%",
		"disk/access", "response ms", "consis msgs/access"}}
	if c.studies["consistency"] {
		t.header = append(t.header, "ms w/o consistency")
	}
	for _, r := range rs {
		for _, n := range nexusNames() {
			row := []string{simPct(r.CacheFraction) + "%", n, simPct(r.HitRate[n]), simG(r.Prefetched[n]),
				simG(r.PrefetchUsed[n]), simG(r.PrefetchWasted[n]), simPct(r.ServerHitRate[n]),
				simF4(r.DiskReads[n]), simF4(r.MeanResponseMs[n]), simF4(r.ConsistencyMessages[n])}
			if c.studies["consistency"] {
				v := "-"
				if x, ok := r.MeanResponseMsNoConsis[n]; ok {
					v = simF4(x)
				}
				row = append(row, v)
			}
			t.add(row...)
		}
	}
	return t
}

// nexusConsistencyTable is the consistency study alone: with and without
// write-invalidate.
func nexusConsistencyTable(rs []nexusResult) *simTable {
	t := &simTable{header: []string{"cache", "algorithm", "hit%", "hit% w/o", "response ms", "ms w/o consistency", "consis msgs/access"}}
	for _, r := range rs {
		for _, n := range nexusConsistency {
			t.add(simPct(r.CacheFraction)+"%", n, simPct(r.HitRate[n]), simPct(r.HitRateNoConsistency[n]),
				simF4(r.MeanResponseMs[n]), simF4(r.MeanResponseMsNoConsis[n]), simF4(r.ConsistencyMessages[n]))
		}
	}
	return t
}

// nexusWeightsTable is Nexus's hit rate by weight assignment, window
// (--window, or all with --full-grid) and group.
func nexusWeightsTable(c nexusConfig, rs []nexusResult) *simTable {
	windows := []int{c.window}
	if c.fullGrid {
		windows = nexusSweep
	}
	t := &simTable{header: []string{"cache", "assignment", "window"}}
	for _, g := range nexusSweep {
		t.header = append(t.header, "group "+strconv.Itoa(g)+" hit%")
	}
	for _, r := range rs {
		for _, a := range nexus.Assignments() {
			for _, w := range windows {
				row := []string{simPct(r.CacheFraction) + "%", a.String(), strconv.Itoa(w)}
				for _, g := range nexusSweep {
					row = append(row, simPct(r.Weights[nexusKey(a, "w"+strconv.Itoa(w), "g"+strconv.Itoa(g))]))
				}
				t.add(row...)
			}
		}
	}
	return t
}

// nexusWindowTable is Nexus's hit rate and response time by window and
// group.
func nexusWindowTable(rs []nexusResult) *simTable {
	t := &simTable{header: []string{"cache", "window"}}
	for _, g := range nexusSweep {
		t.header = append(t.header, "group "+strconv.Itoa(g)+" hit%")
	}
	for _, g := range nexusSweep {
		t.header = append(t.header, "g"+strconv.Itoa(g)+" ms")
	}
	for _, r := range rs {
		for _, w := range nexusSweep {
			row := []string{simPct(r.CacheFraction) + "%", strconv.Itoa(w)}
			for _, g := range nexusSweep {
				row = append(row, simPct(r.WindowGroup[nexusKey("w"+strconv.Itoa(w), "g"+strconv.Itoa(g))]))
			}
			for _, g := range nexusSweep {
				row = append(row, simF4(r.WindowGroupResponse[nexusKey("w"+strconv.Itoa(w), "g"+strconv.Itoa(g))]))
			}
			t.add(row...)
		}
	}
	return t
}

// nexusEmit prints a table followed by a blank line (unless --json) and
// writes its CSV under --out.
func nexusEmit(cmd *cobra.Command, o *simOptions, t *simTable, title, csv string) error {
	if _, err := t.emit(cmd, o, title, csv); err != nil {
		return err
	}
	if !o.json {
		fmt.Fprintln(cmd.OutOrStdout())
	}
	return nil
}

func nexusFractionChart(o *simOptions, rs []nexusResult) error {
	h := &simChart{title: "Client local hit rate (Nexus Figs. 12, 13)", xlabel: "client cache size (fraction of its working set)",
		ylabel: "local hit rate", legend: "br", yPrec: 2}
	t := &simChart{title: "Mean response time (Nexus Figs. 14, 15; no queueing)", xlabel: "client cache size (fraction of its working set)",
		ylabel: "mean response time (ms)", legend: "tr", yPrec: 3}
	for _, n := range []string{"lru", "lfu", "pg1", "pg2", "nexus", "opt"} {
		for _, r := range rs {
			h.line(n).add(r.CacheFraction, r.HitRate[n])
			t.line(n).add(r.CacheFraction, r.MeanResponseMs[n])
		}
	}
	if err := h.save(o.out, "nexus_hit.png"); err != nil {
		return err
	}
	return t.save(o.out, "nexus_response.png")
}

func nexusWindowChart(o *simOptions, r nexusResult) error {
	c := &simChart{title: fmt.Sprintf("Nexus hit rate by window and group size (Fig. 9), cache %s%%", simPct(r.CacheFraction)),
		xlabel: "prefetch group size", ylabel: "local hit rate", legend: "br", yPrec: 3}
	for _, w := range nexusSweep {
		for _, g := range nexusSweep {
			c.line("window "+strconv.Itoa(w)).add(float64(g), r.WindowGroup[nexusKey("w"+strconv.Itoa(w), "g"+strconv.Itoa(g))])
		}
	}
	return c.save(o.out, "nexus_window.png")
}
