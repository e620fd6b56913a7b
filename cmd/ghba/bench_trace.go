package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/ghba/ghba/routing/nexus"
	"github.com/ghba/ghba/routing/workload"
	"github.com/ghba/ghba/rpc"
	"github.com/ghba/ghba/rpc/client"
)

// Cache modes of "ghba bench --trace".
const (
	cacheOff   = "off"
	cacheLRU   = "lru"
	cacheNexus = "nexus"
)

// traceStreams is a trace split by client: the paths that exist before it
// starts (directories first) and each client's records in order.
type traceStreams struct {
	dirs, files []string
	streams     [][]workload.Record
	// after[i] lists the streams that ended, in the recording, before
	// stream i began: the replay starts stream i once they have finished,
	// so that a program run after another (the second of two builds) is
	// replayed after it, and programs that overlapped run concurrently.
	after    [][]int
	distinct int
}

// readTraceStreams reads a trace file.
func readTraceStreams(name string) (*traceStreams, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	r := workload.NewReader(f)
	byClient := map[int][]workload.Record{}
	seen := map[string]bool{}
	ts := &traceStreams{}
	for {
		rec, err := r.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		seen[rec.Path] = true
		if rec.Op == workload.OpExists {
			if rec.IsDir() {
				ts.dirs = append(ts.dirs, rec.Path)
			} else {
				ts.files = append(ts.files, rec.Path)
			}
			continue
		}
		byClient[rec.Client] = append(byClient[rec.Client], rec)
	}
	ids := make([]int, 0, len(byClient))
	for id := range byClient {
		ids = append(ids, id)
	}
	sort.Ints(ids)
	for _, id := range ids {
		ts.streams = append(ts.streams, byClient[id])
	}
	ts.after = streamOrder(ts.streams)
	ts.distinct = len(seen)
	return ts, nil
}

// streamOrder returns, for each stream, the streams whose last record is
// earlier than its first: the happens-before the recording shows between
// clients that did not overlap.
func streamOrder(streams [][]workload.Record) [][]int {
	after := make([][]int, len(streams))
	for i, s := range streams {
		for j, t := range streams {
			if j != i && t[len(t)-1].Time < s[0].Time {
				after[i] = append(after[i], j)
			}
		}
	}
	return after
}

// traceResult is one cache mode's replay.
type traceResult struct {
	Cache       string  `json:"cache"`
	Clients     int     `json:"clients"`
	Ops         int     `json:"ops"`
	Errors      int     `json:"errors"`
	Missing     int     `json:"missing"` // stats of paths that do not exist (failed calls in the trace)
	OpsPerSec   float64 `json:"ops_per_sec"`
	Stats       int     `json:"stats"`
	StatMeanMs  float64 `json:"stat_mean_ms"`
	StatP99Ms   float64 `json:"stat_p99_ms"`
	HitRate     float64 `json:"hit_rate"` // local hits / stats
	Prefetched  uint64  `json:"prefetched"`
	PrefetchUse uint64  `json:"prefetch_used"`
	Invalidated uint64  `json:"invalidated"`
	Entries     int     `json:"cache_entries"`
}

// runTraceBench replays the trace once per cache mode given, each replay
// under its own prefix, and prints the results.
func runTraceBench(cmd *cobra.Command, o *clientOptions, bo *benchOptions) error {
	ts, err := readTraceStreams(bo.trace)
	if err != nil {
		return err
	}
	if len(ts.streams) == 0 {
		return usageErrorf("bench: %s has no timed records", bo.trace)
	}
	clients := bo.clients
	if clients <= 0 {
		clients = len(ts.streams)
	}
	entries := bo.cacheEntries
	if entries <= 0 {
		entries = max(16, ts.distinct/10)
	}
	if bo.prefetchGroup < 1 {
		return usageErrorf("bench: --prefetch-group %d: must be at least 1", bo.prefetchGroup)
	}
	if bo.listPrefetch < 0 {
		return usageErrorf("bench: --list-prefetch %d: must not be negative", bo.listPrefetch)
	}
	var results []traceResult
	runs := map[string]int{}
	for _, mode := range bo.cacheModes {
		// A mode given again (off,nexus,off,nexus: rounds that share the
		// machine's drift) replays under a prefix of its own.
		runs[mode]++
		prefix := fmt.Sprintf("%s-%s", bo.prefix, mode)
		if n := runs[mode]; n > 1 {
			prefix = fmt.Sprintf("%s-%d", prefix, n)
		}
		res, err := replayTrace(cmd, o, bo, ts, prefix, mode, clients, entries)
		if err != nil {
			return err
		}
		results = append(results, *res)
		fmt.Fprintf(cmd.ErrOrStderr(), "bench: %s replayed under %s\n", mode, prefix)
	}
	if o.json {
		return writeJSON(cmd.OutOrStdout(), map[string]any{"trace": bo.trace, "cache_entries": entries, "prefetch_group": bo.prefetchGroup,
			"list_prefetch": bo.listPrefetch, "results": results})
	}
	w := cmd.OutOrStdout()
	fmt.Fprintf(w, "trace %s: %d clients, %d distinct paths; cache of %d entries per client, nexus prefetch group %d, listings prefetch %d entries\n\n",
		bo.trace, len(ts.streams), ts.distinct, entries, bo.prefetchGroup, bo.listPrefetch)
	t := newTable(w, "CACHE", "CLIENTS", "OPS", "ERRORS", "OPS/S", "STATS", "STAT MEAN", "STAT P99", "HIT RATE", "PREFETCHED", "USED")
	for _, r := range results {
		t.row(r.Cache, r.Clients, r.Ops, r.Errors, fmt.Sprintf("%.0f", r.OpsPerSec), r.Stats,
			fmt.Sprintf("%.3fms", r.StatMeanMs), fmt.Sprintf("%.3fms", r.StatP99Ms),
			fmt.Sprintf("%.1f%%", 100*r.HitRate), r.Prefetched, r.PrefetchUse)
	}
	if err := t.flush(); err != nil {
		return err
	}
	for _, r := range results {
		if r.Errors > bo.maxErrors {
			return fmt.Errorf("%w: %d errors with cache %s", errBenchFailed, r.Errors, r.Cache)
		}
	}
	return nil
}

// replayTrace creates the trace's existing paths under prefix, then
// replays its streams in a closed loop through clients clients (stream i
// on client i mod clients), each with its own cache of entries inodes in
// mode (nexus: prefetching bo.prefetchGroup paths with a miss; both
// caches: bo.listPrefetch entries of a listing); with bo.traceOrder, a
// stream starts once the streams that ended before it in the recording
// have finished (traceStreams.after), else every stream starts at once.
func replayTrace(cmd *cobra.Command, o *clientOptions, bo *benchOptions, ts *traceStreams, prefix, mode string, clients, entries int) (*traceResult, error) {
	if err := createTraceNamespace(cmd, o, ts, prefix); err != nil {
		return nil, err
	}
	cls := make([]*client.Client, clients)
	for i := range cls {
		c, err := o.clientWith(cmd, func(opts *client.Options) { opts.Cache = traceCache(bo, mode, entries) })
		if err != nil {
			return nil, err
		}
		defer c.Close()
		cls[i] = c
	}
	res := &traceResult{Cache: mode, Clients: clients}
	start := time.Now()
	statLat := replayStreams(cmd.Context(), bo, ts, prefix, cls, res)
	res.OpsPerSec = float64(res.Ops) / time.Since(start).Seconds()
	res.Stats = len(statLat)
	if len(statLat) > 0 {
		var sum time.Duration
		for _, d := range statLat {
			sum += d
		}
		res.StatMeanMs = float64(sum.Microseconds()) / 1000 / float64(len(statLat))
		slices.Sort(statLat)
		res.StatP99Ms = percentileMs(statLat, 0.99)
	}
	var hits uint64
	for _, c := range cls {
		s := c.CacheStats()
		hits += s.Hits
		res.Prefetched += s.Prefetched
		res.PrefetchUse += s.PrefetchUsed
		res.Invalidated += s.Invalidated
		res.Entries += s.Entries
	}
	if res.Stats > 0 {
		res.HitRate = float64(hits) / float64(res.Stats)
	}
	return res, nil
}

// traceCache returns the client cache of a replay in mode (nil: none):
// entries inodes, prefetching bo.prefetchGroup paths with a miss (nexus)
// and bo.listPrefetch entries of a listing (both).
func traceCache(bo *benchOptions, mode string, entries int) *client.CacheOptions {
	switch mode {
	case cacheLRU:
		return &client.CacheOptions{Entries: entries, ListPrefetch: bo.listPrefetch}
	case cacheNexus:
		g, _ := nexus.New[string](nexus.Config{})
		return &client.CacheOptions{Entries: entries, Prefetch: client.PrefetchNexus, Predictor: g, Group: bo.prefetchGroup,
			ListPrefetch: bo.listPrefetch}
	}
	return nil
}

// createTraceNamespace creates prefix and under it the trace's existing
// paths: its directories by depth, then its files.
func createTraceNamespace(cmd *cobra.Command, o *clientOptions, ts *traceStreams, prefix string) error {
	ctx := cmd.Context()
	setup, err := o.client(cmd)
	if err != nil {
		return err
	}
	defer setup.Close()
	if _, err := setup.Mkdir(ctx, &rpc.MkdirRequest{Path: prefix, Mode: 0o755, Parents: true}); err != nil {
		return fmt.Errorf("bench: mkdir %s: %w", prefix, err)
	}
	mkdir := func(p string) error {
		_, err := setup.Mkdir(ctx, &rpc.MkdirRequest{Path: p, Mode: 0o755, Parents: true})
		return err
	}
	dirs := slices.Clone(ts.dirs)
	slices.SortFunc(dirs, func(a, b string) int { return strings.Count(a, "/") - strings.Count(b, "/") })
	for d := 0; d < len(dirs); {
		depth := strings.Count(dirs[d], "/")
		e := d
		for e < len(dirs) && strings.Count(dirs[e], "/") == depth {
			e++
		}
		if err := createAll(prefix, dirs[d:e], mkdir); err != nil {
			return fmt.Errorf("bench: creating the trace's directories: %w", err)
		}
		d = e
	}
	if err := createAll(prefix, ts.files, func(p string) error {
		if err := mkdir(p[:strings.LastIndexByte(p, '/')]); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
		_, err := setup.Create(ctx, &rpc.CreateRequest{Path: p, Mode: 0o644})
		return err
	}); err != nil {
		return fmt.Errorf("bench: creating the trace's files: %w", err)
	}
	return nil
}

// createAll runs op on prefix+p for every path of paths, 16 at a time,
// and returns its first error other than fs.ErrExist.
func createAll(prefix string, paths []string, op func(p string) error) error {
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	next := make(chan string)
	for range 16 {
		wg.Go(func() {
			for p := range next {
				if err := op(prefix + p); err != nil && !errors.Is(err, fs.ErrExist) {
					mu.Lock()
					first = cmp0(first, err)
					mu.Unlock()
				}
			}
		})
	}
	for _, p := range paths {
		next <- p
	}
	close(next)
	wg.Wait()
	return first
}

// replayStreams replays the trace's streams under prefix in a closed loop,
// stream i on cls[i mod len(cls)] (with bo.traceOrder, once the streams
// that ended before it in the recording have finished), counts the
// operations, errors and missing paths into res and returns the stat and
// open times.
func replayStreams(ctx context.Context, bo *benchOptions, ts *traceStreams, prefix string, cls []*client.Client, res *traceResult) []time.Duration {
	var mu sync.Mutex
	var statLat []time.Duration
	var wg sync.WaitGroup
	done := make([]chan struct{}, len(ts.streams))
	for i := range done {
		done[i] = make(chan struct{})
	}
	for i, stream := range ts.streams {
		c := cls[i%len(cls)]
		wg.Go(func() {
			defer close(done[i])
			if bo.traceOrder {
				for _, j := range ts.after[i] {
					<-done[j] // every stream closes its channel, also when ctx ends
				}
			}
			var lat []time.Duration
			var ops, errs, missing int
			for _, rec := range stream {
				if ctx.Err() != nil {
					break
				}
				t0 := time.Now()
				err := replayOp(ctx, c, prefix, rec)
				d := time.Since(t0)
				ops++
				if rec.Op == workload.OpStat || rec.Op == workload.OpOpen {
					lat = append(lat, d)
				}
				switch {
				case err == nil:
				case errors.Is(err, fs.ErrNotExist), errors.Is(err, fs.ErrExist), errors.Is(err, rpc.ErrNotEmpty),
					errors.Is(err, rpc.ErrNotDir), errors.Is(err, rpc.ErrIsDir):
					missing++ // the trace's own failed calls, or an order the replay does not keep
				default:
					errs++
				}
			}
			mu.Lock()
			statLat = append(statLat, lat...)
			res.Ops += ops
			res.Errors += errs
			res.Missing += missing
			mu.Unlock()
		})
	}
	wg.Wait()
	return statLat
}

// replayOp runs one trace record under prefix through c.
func replayOp(ctx context.Context, c *client.Client, prefix string, rec workload.Record) error {
	p := prefix + rec.Path
	if rec.Path == "/" {
		p = prefix
	}
	var err error
	switch rec.Op {
	case workload.OpStat, workload.OpOpen:
		_, err = c.Stat(ctx, p)
	case workload.OpReaddir:
		_, err = c.ReadDir(ctx, &rpc.ReadDirRequest{Path: p})
	case workload.OpCreate:
		_, err = c.Create(ctx, &rpc.CreateRequest{Path: p, Mode: 0o644})
	case workload.OpMkdir:
		_, err = c.Mkdir(ctx, &rpc.MkdirRequest{Path: p, Mode: 0o755})
	case workload.OpUnlink:
		err = c.Unlink(ctx, p)
	case workload.OpRmdir:
		err = c.Rmdir(ctx, p)
	case workload.OpRename:
		_, err = c.Rename(ctx, p, prefix+rec.Path2)
	}
	return err
}

// cmp0 returns a if it is not nil, else b.
func cmp0(a, b error) error {
	if a != nil {
		return a
	}
	return b
}
