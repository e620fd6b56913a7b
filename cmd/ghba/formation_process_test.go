package main

// TestProcessFormation: 9 agents with group auto and max_group_size 3
// started all at once, round after round, each round a fresh cluster; a
// writer creates paths as soon as the cluster takes them and a reader
// looks every acknowledged path up through every serving node until the
// cluster has settled into 3 groups of 3 with 2 filter replicas per
// member. Long: it runs only with GHBA_FORMATION_RUNS set (make formation).
//
//	GHBA_FORMATION_RUNS=20 go test -tags hashicorpmetrics -count=1 -timeout 90m -run TestProcessFormation -v ./cmd/ghba/
//
// GHBA_FORMATION_BIN=PATH runs the agents and CLI of another ghba binary
// (e.g. an older build, to compare) instead of building the current source.
// GHBA_PROCESS_TEST_LOGS=DIR keeps every round's agent logs there (the
// other process tests keep them only after a failure).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ghba/ghba/rpc"
	"github.com/ghba/ghba/rpc/client"
)

// The shape of a formation round.
const (
	formationNodes    = 9
	formationMaxGroup = 3
	formationGroups   = formationNodes / formationMaxGroup
	// formationReplicas is each member's share of its group's outside
	// origins: (N − M') / M' = (9 − 3) / 3.
	formationReplicas = (formationNodes - formationMaxGroup) / formationMaxGroup
	// formationTimeout bounds a round from the last start to settled.
	formationTimeout = 150 * time.Second
	// formationProgress is how often an unsettled round logs why.
	formationProgress = 10 * time.Second
	// formationReaderPause is the reader's pause between two passes (a
	// pass through the 9 nodes takes a few hundred ms; the agents and the
	// reader share the machine).
	formationReaderPause = 500 * time.Millisecond
	// formationWriterTimeout bounds the writer once the round settled.
	formationWriterTimeout = 60 * time.Second
	// formationDirs and formationFiles shape the writer's tree: the
	// directories /d0… and formationFiles files in each.
	formationDirs  = 4
	formationFiles = 10
)

// formationHTTP asks the agents' /v1/health (keep-alive across calls).
var formationHTTP = &http.Client{Timeout: 3 * time.Second}

// formationRound is what one round measured.
type formationRound struct {
	settled  bool
	settle   time.Duration // last start → first poll that saw it settled
	firstAck time.Duration // last start → first acknowledged create (0: none)
	serving  time.Duration // last start → every node serving, from settled on (0: not seen)
	why      string        // why it did not settle (the last poll's answer)

	// Lookups while it formed, through nodes whose /v1/health answered 200
	// just before; skipped: the node was not serving.
	lookups, failed, notFound, skipped int64
	// The last full pass after settling, through every node.
	finalLookups, finalFailed int64

	// The writer: paths acknowledged of paths wanted, writes retried after
	// an error through a serving node, writes not sent because the node
	// was not serving, creates with an unknown outcome.
	acked, want, retries, notServing, uncertain int64
}

// TestProcessFormation: see the top of this file. Each round starts 9
// auto agents (node1 bootstraps, the others retry_join it) without
// waiting between them; it must settle within formationTimeout into 3
// groups of 3, each with a leader, every node joined and holding 2 filter
// replicas, as every node sees it; no lookup of an acknowledged path
// through a serving node may fail during formation, and after it every
// path must be found through every node. A table of the rounds and a
// "formation:" summary line are logged at the end.
func TestProcessFormation(t *testing.T) {
	env := os.Getenv("GHBA_FORMATION_RUNS")
	if env == "" || env == "0" {
		t.Skip("formation rounds: set GHBA_FORMATION_RUNS (make formation)")
	}
	runs, err := strconv.Atoi(env)
	if err != nil || runs < 0 {
		t.Fatalf("GHBA_FORMATION_RUNS=%q: want a positive integer", env)
	}
	if testing.Short() {
		t.Skip("multi-process test: runs agents as separate processes")
	}
	var rounds []formationRound
	defer func() { formationReport(t, runs, rounds) }()
	for i := range runs {
		var r formationRound
		ok := t.Run(fmt.Sprintf("round%02d", i+1), func(t *testing.T) {
			defer func() { rounds = append(rounds, r) }()
			formationOnce(t, &r)
		})
		if !r.settled {
			t.Errorf("round %d did not settle: %s", i+1, r.why)
			return
		}
		if !ok {
			t.Logf("round %d failed (see above); going on with the next", i+1)
		}
	}
}

// newFormationCluster prepares an empty procCluster; with
// GHBA_FORMATION_BIN it runs that binary instead of building one.
func newFormationCluster(t *testing.T) *procCluster {
	bin := os.Getenv("GHBA_FORMATION_BIN")
	if bin == "" {
		return newProcCluster(t, 0)
	}
	if testing.Short() {
		t.Skip("multi-process test: runs agents as separate processes")
	}
	c := &procCluster{t: t, bin: bin, dir: t.TempDir(), used: map[int]bool{}, clients: map[string]*client.Client{}, replication: 3}
	t.Cleanup(c.cleanup)
	return c
}

// formationOnce runs one round and fills r.
func formationOnce(t *testing.T, r *formationRound) {
	c := newFormationCluster(t)
	if keep := os.Getenv("GHBA_PROCESS_TEST_LOGS"); keep != "" {
		t.Cleanup(func() { c.keepLogs(keep) })
	}
	for range formationNodes {
		c.addNodeWith(procNodeOpts{Group: "auto", MaxGroupSize: formationMaxGroup, LRUEntries: procGroupsLRU})
	}
	for _, n := range c.nodes {
		c.start(n)
	}
	lastStart := time.Now()
	m := newProcModel()

	stop := make(chan struct{})
	w := &formationWriter{c: c, m: m, stop: stop, done: make(chan struct{}), start: lastStart}
	go w.run()
	rd := &formationReader{c: c, m: m, stop: make(chan struct{})}
	rd.wg.Go(rd.run)
	defer func() {
		close(stop)
		<-w.done
		rd.halt()
		w.fill(r)
		rd.fill(r)
	}()

	deadline := lastStart.Add(formationTimeout)
	nextLog := lastStart.Add(formationProgress)
	for {
		c.checkRunning(c.nodes...)
		ok, why := c.formationSettled()
		if ok {
			r.settled, r.settle = true, time.Since(lastStart)
			break
		}
		r.why = why
		if time.Now().After(deadline) {
			c.t.Fatalf("not settled %v after the last start: %s; %s", formationTimeout, why, c.notServing())
		}
		if time.Now().After(nextLog) {
			t.Logf("%v after the last start, not settled: %s; %s", time.Since(lastStart).Round(time.Second), why, c.notServing())
			nextLog = nextLog.Add(formationProgress)
		}
		time.Sleep(procPollInterval)
	}
	r.why = ""
	gs, _ := c.client(c.nodes[0]).Groups(context.Background())
	if gs != nil {
		var desc []string
		for _, g := range gs.Groups {
			desc = append(desc, fmt.Sprintf("%s %v (leader %s)", g.Group, g.Members, g.Leader))
		}
		t.Logf("settled %v after the last start: %s; %s", r.settle.Round(time.Millisecond), strings.Join(desc, ", "), c.notServing())
	}
	// Every node serving (/v1/health 200) may come later than settled:
	// measured alongside, for the table; not a criterion of the test.
	serving := make(chan time.Duration, 1)
	go func() {
		for time.Now().Before(deadline.Add(formationWriterTimeout)) {
			if c.allServing() {
				serving <- time.Since(lastStart)
				return
			}
			time.Sleep(procPollInterval)
		}
		serving <- 0
	}()
	defer func() { r.serving = <-serving }()
	rd.halt()
	rd.report(t)

	select {
	case <-w.done:
	case <-time.After(formationWriterTimeout):
		t.Errorf("the writer has %d of %d paths acknowledged %v after the cluster settled", w.acked.Load(), w.want.Load(), formationWriterTimeout)
	}
	w.report(t)
	rd.finalPass(t)
}

// keepLogs copies every agent's log to dir, named as cleanup names the
// logs it keeps after a failure (which then replaces these copies).
func (c *procCluster) keepLogs(dir string) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		c.t.Logf("keeping the logs: %v", err)
		return
	}
	for _, n := range c.nodes {
		b, err := os.ReadFile(n.log)
		if err == nil {
			err = os.WriteFile(filepath.Join(dir, strings.ReplaceAll(c.t.Name(), "/", "_")+"-"+n.id+".log"), b, 0o644)
		}
		if err != nil {
			c.t.Logf("keeping %s's log: %v", n.id, err)
		}
	}
}

// formationSettled reports whether the cluster has formed 3 groups of 3,
// each with a leader among its members, as every node sees them (Groups),
// every node has joined its group (/v1/status joined, group as in the
// groups) and holds 2 filter replicas (replicas_held).
func (c *procCluster) formationSettled() (bool, string) {
	sts, err := c.statuses(c.nodes)
	if err != nil {
		return false, err.Error()
	}
	for _, n := range c.nodes {
		st := sts[n.id]
		switch {
		case !st.Joined:
			return false, n.id + " has not joined a group"
		case st.ReplicasHeld != formationReplicas:
			return false, fmt.Sprintf("%s (group %s) holds %d filter replicas, want %d", n.id, st.Group, st.ReplicasHeld, formationReplicas)
		}
	}
	for _, n := range c.nodes {
		ctx, cancel := context.WithTimeout(context.Background(), procRPCTimeout)
		gr, err := c.client(n).Groups(ctx)
		cancel()
		if err != nil {
			return false, fmt.Sprintf("groups via %s: %v", n.id, err)
		}
		if len(gr.Groups) != formationGroups {
			return false, fmt.Sprintf("%s sees %d groups, want %d: %+v", n.id, len(gr.Groups), formationGroups, gr.Groups)
		}
		in := 0
		for _, g := range gr.Groups {
			if len(g.Members) != formationMaxGroup || !slices.Contains(g.Members, g.Leader) {
				return false, fmt.Sprintf("%s sees group %s: members %v, leader %q", n.id, g.Group, g.Members, g.Leader)
			}
			for _, id := range g.Members {
				st := sts[id]
				if st == nil || st.Group != g.Group {
					return false, fmt.Sprintf("%s sees %s in group %s, its status says %+v", n.id, id, g.Group, st)
				}
				in++
			}
		}
		if in != len(c.nodes) {
			return false, fmt.Sprintf("%s sees %d nodes in groups: %+v", n.id, in, gr.Groups)
		}
	}
	return true, ""
}

// allServing reports whether every node's /v1/health answers 200.
func (c *procCluster) allServing() bool {
	for _, n := range c.nodes {
		if ok, _ := c.health(n); !ok {
			return false
		}
	}
	return true
}

// notServing describes the nodes whose /v1/health does not answer 200,
// with their reasons.
func (c *procCluster) notServing() string {
	var out []string
	for _, n := range c.nodes {
		if ok, why := c.health(n); !ok {
			out = append(out, n.id+": "+why)
		}
	}
	if len(out) == 0 {
		return "every node serving"
	}
	return "not serving: " + strings.Join(out, "; ")
}

// health reports whether n serves (its /v1/health answers 200) and, if
// not, why.
func (c *procCluster) health(n *procNode) (bool, string) {
	resp, err := formationHTTP.Get("http://127.0.0.1:" + strconv.Itoa(n.http) + "/v1/health")
	if err != nil {
		return false, err.Error()
	}
	defer resp.Body.Close()
	var h healthBody
	err = json.NewDecoder(resp.Body).Decode(&h)
	_, _ = io.Copy(io.Discard, resp.Body)
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return false, "no /v1/health (a binary older than readiness?)"
	case err != nil:
		return false, fmt.Sprintf("%s: %v", resp.Status, err)
	case resp.StatusCode != http.StatusOK:
		return false, fmt.Sprintf("%s %s: %s", resp.Status, h.Status, h.Reason)
	}
	return true, ""
}

// healthBody is the body of /v1/health.
type healthBody struct {
	Status string `json:"status"`
	Reason string `json:"reason"`
}

// ---- the writer ----

// formationWriter creates the directories /d0… and their files through
// the nodes in turn, each through a node that serves, retrying after an
// error (the cluster is still forming: not an error of the test, but
// counted and logged) until acknowledged or stopped. Acknowledged paths
// join the model; a create that answers "exists" after a failed attempt
// had an unknown outcome and stays out of it.
type formationWriter struct {
	c     *procCluster
	m     *procModel
	stop  <-chan struct{}
	done  chan struct{}
	start time.Time

	firstAck                                    atomic.Int64 // ns after start; 0: none yet
	want, acked, retries, notServing, uncertain atomic.Int64
	errs                                        procErrs
}

func (w *formationWriter) run() {
	defer close(w.done)
	var dirs, files []string
	for d := range formationDirs {
		dirs = append(dirs, fmt.Sprintf("/d%d", d))
		for f := range formationFiles {
			files = append(files, fmt.Sprintf("/d%d/f%d", d, f))
		}
	}
	w.want.Store(int64(len(dirs) + len(files)))
	procParallel(dirs, func(i int, p string) { w.write(i, p, rpc.TypeDir) })
	procParallel(files, func(i int, p string) { w.write(i, p, rpc.TypeFile) })
}

// write creates p (type typ), starting with node slot.
func (w *formationWriter) write(slot int, p, typ string) {
	ctx := context.Background()
	tried := false
	for k := slot; ; k++ {
		select {
		case <-w.stop:
			return
		default:
		}
		n := w.c.nodes[k%len(w.c.nodes)]
		if ok, _ := w.c.health(n); !ok {
			w.notServing.Add(1)
			time.Sleep(50 * time.Millisecond)
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		var home string
		var err error
		if typ == rpc.TypeDir {
			var r *rpc.MkdirResponse
			if r, err = w.c.client(n).Mkdir(cctx, &rpc.MkdirRequest{Path: p, Mode: 0o755, UID: 1000, GID: 1000}); err == nil {
				home = r.Inode.Home
			}
		} else {
			var r *rpc.CreateResponse
			if r, err = w.c.client(n).Create(cctx, &rpc.CreateRequest{Path: p, Mode: 0o644, UID: 1000, GID: 1000}); err == nil {
				home = r.Inode.Home
			}
		}
		cancel()
		switch {
		case err == nil:
			w.m.ack(p, typ, home)
			w.acked.Add(1)
			w.firstAck.CompareAndSwap(0, int64(time.Since(w.start)))
			return
		case tried && errors.Is(err, fs.ErrExist):
			w.m.unsure(p, typ)
			w.uncertain.Add(1)
			return
		}
		tried = true
		w.retries.Add(1)
		w.errs.add("%s %s via %s (serving): %v", typ, p, n.id, err)
		time.Sleep(procPollInterval)
	}
}

// report logs the writer's counts and its first errors.
func (w *formationWriter) report(t *testing.T) {
	w.errs.mu.Lock()
	defer w.errs.mu.Unlock()
	t.Logf("writer: %d of %d paths acknowledged (the first %v after the last start), %d unknown outcomes, %d attempts retried after an error through a serving node, %d attempts not sent (node not serving)",
		w.acked.Load(), w.want.Load(), time.Duration(w.firstAck.Load()).Round(time.Millisecond), w.uncertain.Load(), w.retries.Load(), w.notServing.Load())
	if w.errs.n > 0 {
		t.Logf("writer: first errors (retried, not failures):\n  %s", strings.Join(w.errs.msgs[:min(len(w.errs.msgs), 8)], "\n  "))
	}
}

func (w *formationWriter) fill(r *formationRound) {
	r.firstAck = time.Duration(w.firstAck.Load())
	r.acked, r.want, r.retries, r.notServing, r.uncertain = w.acked.Load(), w.want.Load(), w.retries.Load(), w.notServing.Load(), w.uncertain.Load()
}

// ---- the reader ----

// formationReader looks every acknowledged path up (as lookupPass does:
// the Lookup RPC through one node) through every node, pass after pass,
// until halted. A lookup is sent only if the node's /v1/health answered
// 200 just before (skipped otherwise); it fails if it errs or answers
// another home or type than the model's.
type formationReader struct {
	c    *procCluster
	m    *procModel
	stop chan struct{}
	once sync.Once
	wg   sync.WaitGroup

	passes, lookups, failed, notFound, skipped atomic.Int64
	errs                                       procErrs
	// The last pass after settling.
	finalLookups, finalFailed int64
}

func (rd *formationReader) run() {
	for {
		select {
		case <-rd.stop:
			return
		default:
		}
		paths := rd.m.paths()
		if len(paths) == 0 {
			time.Sleep(50 * time.Millisecond)
			continue
		}
		procParallel(formationJobs(paths, len(rd.c.nodes)), func(i int, p string) {
			select {
			case <-rd.stop:
				return
			default:
			}
			n := rd.c.nodes[i/len(paths)]
			if ok, _ := rd.c.health(n); !ok {
				rd.skipped.Add(1)
				return
			}
			rd.lookups.Add(1)
			if msg, notFound := rd.check(n, p); msg != "" {
				rd.failed.Add(1)
				if notFound {
					rd.notFound.Add(1)
				}
				rd.errs.add("%s", msg)
			}
		})
		rd.passes.Add(1)
		time.Sleep(formationReaderPause)
	}
}

// formationJobs returns paths once per node, node after node.
func formationJobs(paths []string, nodes int) []string {
	jobs := make([]string, 0, len(paths)*nodes)
	for range nodes {
		jobs = append(jobs, paths...)
	}
	return jobs
}

// check looks p up through n and returns "" or what was wrong (with n's
// readiness right after), and whether the answer was "not found".
func (rd *formationReader) check(n *procNode, p string) (string, bool) {
	start := time.Now()
	r, err := rd.c.lookup(context.Background(), n, p)
	var msg string
	switch {
	case err != nil:
		msg = fmt.Sprintf("lookup %s via %s (home %s): %v after %v", p, n.id, rd.m.home(p), err, time.Since(start).Round(time.Millisecond))
	case r.Home != rd.m.home(p) || r.Type != rd.m.typ(p):
		msg = fmt.Sprintf("lookup %s via %s: home %s type %s (%s), want home %s type %s", p, n.id, r.Home, r.Type, r.Level, rd.m.home(p), rd.m.typ(p))
	default:
		return "", false
	}
	if ok, why := rd.c.health(n); !ok {
		msg += "; then " + n.id + " no longer serves: " + why
	}
	return msg, errors.Is(err, fs.ErrNotExist)
}

// halt stops the passes and waits for the current one (idempotent).
func (rd *formationReader) halt() {
	rd.once.Do(func() { close(rd.stop) })
	rd.wg.Wait()
}

// report logs the lookups made while the cluster formed and fails the
// test if one failed.
func (rd *formationReader) report(t *testing.T) {
	t.Logf("lookups while forming: %d passes, %d lookups through serving nodes, %d failed (%d not found), %d skipped (node not serving)",
		rd.passes.Load(), rd.lookups.Load(), rd.failed.Load(), rd.notFound.Load(), rd.skipped.Load())
	rd.errs.report(t, "lookups of acknowledged paths through serving nodes while the cluster formed")
}

// finalPass looks every acknowledged path up through every node, serving
// or not: each must be found.
func (rd *formationReader) finalPass(t *testing.T) {
	paths := rd.m.paths()
	var errs procErrs
	var failed atomic.Int64
	procParallel(formationJobs(paths, len(rd.c.nodes)), func(i int, p string) {
		if msg, _ := rd.check(rd.c.nodes[i/len(paths)], p); msg != "" {
			failed.Add(1)
			errs.add("%s", msg)
		}
	})
	rd.finalLookups, rd.finalFailed = int64(len(paths)*len(rd.c.nodes)), failed.Load()
	t.Logf("last pass after settling: %d lookups through %d nodes, %d failed", rd.finalLookups, len(rd.c.nodes), rd.finalFailed)
	errs.report(t, "lookups after the cluster settled")
}

func (rd *formationReader) fill(r *formationRound) {
	r.lookups, r.failed, r.notFound, r.skipped = rd.lookups.Load(), rd.failed.Load(), rd.notFound.Load(), rd.skipped.Load()
	r.finalLookups, r.finalFailed = rd.finalLookups, rd.finalFailed
}

// ---- the report ----

// formationReport logs the table of the rounds and the summary line.
func formationReport(t *testing.T, runs int, rounds []formationRound) {
	if len(rounds) == 0 {
		return
	}
	var b strings.Builder
	fmt.Fprintf(&b, "formation of %d auto nodes (max_group_size %d) started at once, %d of %d rounds run:\n", formationNodes, formationMaxGroup, len(rounds), runs)
	fmt.Fprintf(&b, "%-6s %-10s %-10s %-11s %-26s %-8s %-8s %s\n", "round", "settled", "serving", "first write", "forming: failed/lookups", "skipped", "final", "writer acked/retried/not-serving/unknown")
	var settles, servings []time.Duration
	var lookups, failed, final, finalFailed, skipped int64
	for i, r := range rounds {
		settle := "no"
		if r.settled {
			settle = r.settle.Round(10 * time.Millisecond).String()
			settles = append(settles, r.settle)
		}
		first, serving := "-", "-"
		if r.firstAck > 0 {
			first = r.firstAck.Round(10 * time.Millisecond).String()
		}
		if r.serving > 0 {
			serving = r.serving.Round(10 * time.Millisecond).String()
			servings = append(servings, r.serving)
		}
		fmt.Fprintf(&b, "%-6d %-10s %-10s %-11s %-26s %-8d %-8s %d/%d / %d / %d / %d\n", i+1, settle, serving, first,
			fmt.Sprintf("%d/%d (%d not found)", r.failed, r.lookups, r.notFound), r.skipped,
			fmt.Sprintf("%d/%d", r.finalFailed, r.finalLookups), r.acked, r.want, r.retries, r.notServing, r.uncertain)
		lookups += r.lookups + r.finalLookups
		failed += r.failed + r.finalFailed
		final += r.finalLookups
		finalFailed += r.finalFailed
		skipped += r.skipped
	}
	p50, worst := formationQuantiles(settles)
	sp50, sworst := formationQuantiles(servings)
	fmt.Fprintf(&b, "settle (last start → 3 groups of 3, %d replicas each): p50 %s, max %s over %d settled rounds; every node serving: p50 %s, max %s over %d rounds\n",
		formationReplicas, p50, worst, len(settles), sp50, sworst, len(servings))
	fmt.Fprintf(&b, "lookups of acknowledged paths: %d failed of %d (the last passes: %d of %d), %d skipped (node not serving)\n",
		failed, lookups, finalFailed, final, skipped)
	fmt.Fprintf(&b, "formation: runs=%d settled=%d settle_p50=%s settle_max=%s serving_p50=%s serving_max=%s lookups=%d failed=%d final_lookups=%d final_failed=%d skipped=%d",
		len(rounds), len(settles), p50, worst, sp50, sworst, lookups, failed, final, finalFailed, skipped)
	t.Log(b.String())
}

// formationQuantiles returns the median (the lower one of an even count)
// and the maximum of ds, rounded, or "-".
func formationQuantiles(ds []time.Duration) (p50, worst string) {
	if len(ds) == 0 {
		return "-", "-"
	}
	ds = slices.Sorted(slices.Values(ds))
	return ds[(len(ds)-1)/2].Round(10 * time.Millisecond).String(), ds[len(ds)-1].Round(10 * time.Millisecond).String()
}
