package chaos

// The container fault suite. It needs the docker CLI and a reachable
// daemon; without them it FAILS (CI runs it). Developers can skip it with
// -short or GHBA_CHAOS=off.
//
//	go test -tags hashicorpmetrics -run TestChaos -count=1 -v ./cmd/ghba/chaos/   # the short run
//	make chaos DURATION=10m                                                  # a longer one
//	make chaos-broken BROKEN=stale                                           # the suite must catch a broken server
//
// Environment: GHBA_CHAOS_DURATION (default: the short run, one fault of
// each kind), GHBA_CHAOS_SEED (choices of faults, targets and operations),
// GHBA_CHAOS_GROUPS (2 or 3 groups of 3 nodes), GHBA_CHAOS_AUTO=1 (9 nodes
// with group auto and max_group_size 3, started one by one so that the
// groups form by splits; the faults add split-kill, first),
// GHBA_CHAOS_DOUBLE=1 (also overlap two faults, see DoubleFaults),
// GHBA_CHAOS_BROKEN=<mode> (build the nodes with the ghba_broken tag and
// run them with GHBA_STORE_BROKEN=<mode>: a deliberately wrong server, see
// node/store's broken.go), GHBA_CHAOS_CHECK_MEM (the check's memory bound
// in MiB, default 2048), GHBA_CHAOS_OUT (keep the history and logs there
// even when the run passes).

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/ghba/ghba/rpc"
)

// Bounds of the run.
const (
	finalTimeout   = 2 * time.Minute  // final reads after healing
	checkTimeout   = 2 * time.Minute  // porcupine, plus half the run's duration
	quietAround    = 3 * time.Second  // workload without faults before and after
	faultGap       = 2 * time.Second  // between two faults
	runSlack       = 12 * time.Minute // the whole test without a -timeout: duration + this
	workloadClient = 6
	// cleanupBudget is kept free at the end of go test's -timeout for the
	// cleanups (evidence, containers, network, volumes, image): when the
	// timeout fires, go test panics and t.Cleanup never runs.
	cleanupBudget = 4 * time.Minute
	// minRun is the least time the run itself needs besides the faults'
	// duration (build, start, final reads, check).
	minRun = 5 * time.Minute
	// faultReserve and tailReserve: a new fault starts only if the run's
	// deadline leaves room for a typical fault and for what follows the
	// last one (quiet, convergence, final reads, check). A slower machine
	// still ends at the deadline, as a failure with its cleanups done.
	faultReserve = 90 * time.Second
	tailReserve  = 2 * time.Minute
	// doubleShare is the share of fault slots that overlap two faults
	// when GHBA_CHAOS_DOUBLE=1 (one in doubleShare).
	doubleShare = 3
)

// runDeadlines returns the deadline of the run (workload, faults, final
// reads, check) and that of the cleanups: from go test's -timeout if it
// has one, minus cleanupBudget for the cleanups.
func runDeadlines(t *testing.T, duration time.Duration) (run, cleanup time.Time) {
	if dl, ok := t.Deadline(); ok {
		return dl.Add(-cleanupBudget), dl.Add(-10 * time.Second)
	}
	run = time.Now().Add(duration + runSlack)
	return run, run.Add(cleanupBudget)
}

// cleanupContext returns a context for one cleanup that ends reserve
// before the cleanups' deadline (so that the later cleanups keep that
// much), but lasts at least 10 seconds.
func cleanupContext(deadline time.Time, reserve time.Duration) (context.Context, context.CancelFunc) {
	d := deadline.Add(-reserve)
	if time.Until(d) < 10*time.Second {
		d = time.Now().Add(10 * time.Second)
	}
	return context.WithDeadline(context.Background(), d)
}

// runConfig is the run's configuration from the environment.
type runConfig struct {
	duration time.Duration // 0: the short run
	seed     uint64
	groups   int
	auto     bool
	double   bool   // overlap two faults in some fault slots
	broken   string // GHBA_STORE_BROKEN of the nodes ("": a correct server)
	checkMem int64  // bytes
	out      string
	// faults, when set (GHBA_CHAOS_FAULTS), are the fault kinds of the
	// run instead of every kind.
	faults []string
	// keep keeps the evidence even when the run passes.
	keep bool
	// tolerateRecovery logs, rather than fails the test on, a fault that
	// could not be injected or healed and final reads without an answer:
	// a server broken on purpose may break its recovery too
	// (TestChaosBroken judges only the check's verdict).
	tolerateRecovery bool
}

func loadRunConfig(t *testing.T) runConfig {
	t.Helper()
	rc := runConfig{groups: 2, seed: uint64(time.Now().UnixNano()), checkMem: DefaultCheckMemory}
	if v := os.Getenv("GHBA_CHAOS_DURATION"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			t.Fatalf("GHBA_CHAOS_DURATION=%q: want a Go duration like 10m", v)
		}
		rc.duration = d
	}
	if v := os.Getenv("GHBA_CHAOS_SEED"); v != "" {
		s, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("GHBA_CHAOS_SEED=%q: want an unsigned integer", v)
		}
		rc.seed = s
	}
	if v := os.Getenv("GHBA_CHAOS_GROUPS"); v != "" {
		g, err := strconv.Atoi(v)
		if err != nil || g < 2 || g > 3 {
			t.Fatalf("GHBA_CHAOS_GROUPS=%q: want 2 or 3", v)
		}
		rc.groups = g
	}
	for _, b := range []struct {
		name string
		dst  *bool
	}{{"GHBA_CHAOS_AUTO", &rc.auto}, {"GHBA_CHAOS_DOUBLE", &rc.double}} {
		switch v := os.Getenv(b.name); v {
		case "", "0":
		case "1":
			*b.dst = true
		default:
			t.Fatalf("%s=%q: want 1 or 0", b.name, v)
		}
	}
	if rc.auto {
		rc.groups = 3
	}
	if v := os.Getenv("GHBA_CHAOS_CHECK_MEM"); v != "" {
		m, err := strconv.ParseInt(v, 10, 64)
		if err != nil || m < 16 {
			t.Fatalf("GHBA_CHAOS_CHECK_MEM=%q: want MiB, at least 16", v)
		}
		rc.checkMem = m << 20
	}
	rc.broken = os.Getenv("GHBA_CHAOS_BROKEN")
	rc.out = os.Getenv("GHBA_CHAOS_OUT")
	if v := os.Getenv("GHBA_CHAOS_FAULTS"); v != "" {
		for k := range strings.SplitSeq(v, ",") {
			if !slices.Contains(AutoFaults, k) {
				t.Fatalf("GHBA_CHAOS_FAULTS=%q: %q is not a fault kind (%s)", v, k, strings.Join(AutoFaults, ", "))
			}
			rc.faults = append(rc.faults, k)
		}
	}
	return rc
}

// reproduce returns the environment that repeats the run's choices.
func (rc runConfig) reproduce() string {
	s := fmt.Sprintf("GHBA_CHAOS_SEED=%d GHBA_CHAOS_GROUPS=%d GHBA_CHAOS_DURATION=%s", rc.seed, rc.groups, rc.duration)
	if rc.auto {
		s += " GHBA_CHAOS_AUTO=1"
	}
	if rc.double {
		s += " GHBA_CHAOS_DOUBLE=1"
	}
	if rc.broken != "" {
		s += " GHBA_CHAOS_BROKEN=" + rc.broken
	}
	if rc.faults != nil {
		s += " GHBA_CHAOS_FAULTS=" + strings.Join(rc.faults, ",")
	}
	return s
}

// Report is what the history file holds.
type Report struct {
	Seed    uint64       `json:"seed"`
	Config  string       `json:"config"`
	Summary *RunSummary  `json:"summary,omitempty"`
	Check   *CheckReport `json:"check,omitempty"`
	Nodes   []*Node      `json:"nodes"`
	Faults  []FaultEvent `json:"faults"`
	// Outages are the nodes' times out of service, Availability what the
	// availability check found.
	Outages      []Outage            `json:"outages"`
	Availability *AvailabilityReport `json:"availability,omitempty"`
	Violations   []string            `json:"violations"`
	Ops          []Op                `json:"ops"`
}

// runOutcome is what one run found.
type runOutcome struct {
	violations   []string
	check        *CheckReport
	availability *AvailabilityReport
	summary      *RunSummary
	evidence     string // the directory the evidence was kept in, if any
}

// TestChaos is the fault suite: it fails on any violation, and when the
// linearizability check is not Ok.
func TestChaos(t *testing.T) {
	if testing.Short() || os.Getenv("GHBA_CHAOS") == "off" {
		t.Skip("container fault suite skipped (-short or GHBA_CHAOS=off)")
	}
	out := runChaos(t, loadRunConfig(t))
	for _, m := range out.violations {
		t.Errorf("violation: %s", m)
	}
}

// TestChaosBroken runs the suite against a deliberately broken server
// (GHBA_CHAOS_BROKEN=stale or early-ack; see node/store's broken.go) and
// passes only if the suite catches it: the linearizability check answers
// Illegal with a counterexample, and the evidence is kept. Without
// GHBA_CHAOS_BROKEN it is skipped; `make chaos-broken BROKEN=stale` runs
// it.
func TestChaosBroken(t *testing.T) {
	rc := loadRunConfig(t)
	if rc.broken == "" {
		t.Skip("GHBA_CHAOS_BROKEN is not set (make chaos-broken BROKEN=stale runs this test)")
	}
	if testing.Short() || os.Getenv("GHBA_CHAOS") == "off" {
		t.Skip("container fault suite skipped (-short or GHBA_CHAOS=off)")
	}
	rc.keep, rc.tolerateRecovery = true, true
	out := runChaos(t, rc)
	if out.check == nil {
		t.Fatalf("broken server %q: the run ended before its check (violations: %q)", rc.broken, out.violations)
	}
	failed := out.check.Failed()
	if out.check.Result != porcupine.Illegal || len(failed) == 0 || failed[0].Counterexample == "" {
		t.Fatalf("broken server %q NOT caught: porcupine %s, %d violations: %q", rc.broken, out.check.Verdict, len(out.violations), out.violations)
	}
	for _, p := range failed {
		t.Logf("broken server %q caught in %s (%s): %s", rc.broken, p.Root, p.Result, p.Counterexample)
	}
	t.Logf("broken server %q caught: %d violations; evidence in %s", rc.broken, len(out.violations), out.evidence)
}

// runChaos builds the image, starts the cluster, runs the workload and the
// faults, heals, reads everything back and checks the history. It fails t
// (Fatal) only when the run itself cannot go on; what the checks found is
// in the outcome. The evidence is kept when the checks found something,
// when rc.keep or rc.out asks for it, and (from a cleanup) when t failed.
func runChaos(t *testing.T, rc runConfig) *runOutcome {
	log := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelInfo}))
	log.Info("chaos run", "seed", rc.seed, "groups", rc.groups, "auto", rc.auto, "double", rc.double,
		"broken", rc.broken, "duration", rc.duration, "reproduce", rc.reproduce())
	runDeadline, cleanupDeadline := runDeadlines(t, rc.duration)
	if left := time.Until(runDeadline); left < rc.duration+minRun {
		t.Fatalf("go test's -timeout leaves %s for the run (%s are kept for the cleanups); GHBA_CHAOS_DURATION=%s needs at least %s: raise -timeout",
			left.Round(time.Second), cleanupBudget, rc.duration, rc.duration+minRun)
	}
	ctx, cancel := context.WithDeadline(t.Context(), runDeadline)
	defer cancel()
	log.Info("run deadlines", "run", time.Until(runDeadline).Round(time.Second), "cleanups", time.Until(cleanupDeadline).Round(time.Second))
	rng := rand.New(rand.NewPCG(rc.seed, 0x9e3779b9))
	started := time.Now()

	d := &Docker{Log: log}
	if err := d.CheckDaemon(ctx); err != nil {
		t.Fatal(err)
	}
	d.SweepLeftovers(ctx)
	modRoot, err := ModuleRoot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	prefix := fmt.Sprintf("ghbachaos-%d-%04x", os.Getpid(), rng.IntN(1<<16))
	image := "ghba-chaos:" + prefix
	t.Cleanup(func() {
		cctx, ccancel := cleanupContext(cleanupDeadline, 0)
		defer ccancel()
		if _, err := d.Run(cctx, "rmi", "-f", image); err != nil {
			t.Logf("cleanup: %v", err)
		}
	})
	var tags, env []string
	if rc.broken != "" {
		tags, env = []string{"ghba_broken"}, []string{"GHBA_STORE_BROKEN=" + rc.broken}
		log.Warn("the nodes are built BROKEN on purpose: the suite must fail", "mode", rc.broken)
	}
	if err := d.BuildImage(ctx, modRoot, image, tags, labelRun+"="+prefix, labelOwner+"="+runOwner()); err != nil {
		t.Fatal(err)
	}

	// The nodes start as the older build when a rolling upgrade is among
	// the faults (the first one upgrades them).
	kinds := AllFaults
	if rc.auto {
		kinds = AutoFaults
	}
	if rc.faults != nil {
		kinds = rc.faults
	}
	cl, err := NewCluster(ctx, d, ClusterConfig{Prefix: prefix, Image: image, Groups: rc.groups, PerGroup: 3, Auto: rc.auto, Log: log, Rand: rng, Env: env,
		OldBuild: slices.Contains(kinds, FaultRollingUpgrade)})
	t.Cleanup(func() {
		cctx, ccancel := cleanupContext(cleanupDeadline, 20*time.Second)
		defer ccancel()
		if err := cl.Close(cctx); err != nil {
			t.Logf("cleanup: %v", err)
		}
	})
	if err != nil {
		t.Fatal(err)
	}

	// Whatever happens from here, a failed run keeps its evidence. (Cleanups
	// run last-in first-out: this one before the cluster is removed.)
	out := &runOutcome{}
	var (
		recMu sync.Mutex
		rec   *Recorder
		inj   *Injector
	)
	var keepOnce sync.Once
	keep := func(ctx context.Context) {
		keepOnce.Do(func() {
			dir := rc.out
			if dir == "" {
				var err error
				if dir, err = os.MkdirTemp("", "ghba-chaos-"+prefix+"-"); err != nil {
					t.Logf("keep evidence: %v", err)
					return
				}
			} else if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Logf("keep evidence: %v", err)
				return
			}
			recMu.Lock()
			r := Report{Seed: rc.seed, Config: rc.reproduce(), Nodes: slices.Concat(cl.Nodes, cl.Retired),
				Violations: out.violations, Check: out.check, Summary: out.summary}
			if rec != nil {
				r.Ops = rec.Ops()
			}
			if inj != nil {
				r.Faults = inj.Events()
				r.Outages = inj.Outages()
			}
			r.Availability = out.availability
			recMu.Unlock()
			saveEvidence(ctx, t, dir, &r)
			cl.SaveLogs(ctx, dir)
			out.evidence = dir
			t.Logf("chaos evidence (history.json, linearizability.html, counterexample.txt, node logs) kept in %s", dir)
			fmt.Fprintf(os.Stderr, "chaos evidence kept in %s\n", dir)
		})
	}
	t.Cleanup(func() {
		if !t.Failed() && rc.out == "" && !rc.keep {
			return
		}
		// The evidence leaves the cluster's removal and the image's 90s.
		lctx, lcancel := cleanupContext(cleanupDeadline, 90*time.Second)
		defer lcancel()
		keep(lctx)
	})

	if err := cl.Start(ctx); err != nil {
		t.Fatal(err)
	}
	// Every shard led by its owner with all its replicas before the
	// workload starts: no fail-over is under way.
	if err := cl.WaitShardsSettled(ctx, recoverTimeout); err != nil {
		t.Fatal(err)
	}
	formed := time.Now()

	recMu.Lock()
	rec = NewRecorder()
	rec.SetNodes(cl.Nodes)
	inj = NewInjector(cl, d, rng, rec, log)
	recMu.Unlock()
	w := &Workload{Clients: workloadClient, Addrs: cl.RPCAddrs(), Seed: rng.Uint64(), Log: log}
	if err := w.Advance(ctx); err != nil {
		t.Fatal(err)
	}
	wctx, stopWork := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { w.Run(wctx, rec) })
	sctx, stopStalls := context.WithCancel(ctx)
	defer stopStalls()
	var stallWG sync.WaitGroup
	stallWG.Go(func() { inj.WatchStalls(sctx) })

	faultErr := runFaults(ctx, inj, w, kinds, rc, runDeadline, log)
	if faultErr == nil {
		faultErr = sleep(ctx, quietAround)
	}
	stopWork()
	wg.Wait()
	if faultErr != nil {
		recoveryFailed(t, rc, "faults: %v", faultErr)
	}

	// Heal and read everything back through every node.
	if err := cl.WaitConverged(ctx, recoverTimeout); err != nil {
		recoveryFailed(t, rc, "after the faults: %v", err)
	}
	firstFinal := 0
	for _, o := range rec.Ops() {
		firstFinal = max(firstFinal, o.Client+1)
	}
	if err := FinalReads(ctx, rec, cl.RPCAddrs(), w.AllRoots(), firstFinal, finalTimeout, log); err != nil {
		recoveryFailed(t, rc, "final reads: %v", err)
	}

	ops := rec.Ops()
	ResolveByTokens(ops)
	var v []string
	for _, m := range WrongAnswers(ops) {
		v = append(v, "wrong answer: "+m)
	}
	v = append(v, Durability(ops)...)
	limit := min(checkTimeout+rc.duration/2, max(time.Until(runDeadline), time.Second))
	check := CheckLinearizable(ops, CheckLimits{Timeout: limit, Memory: rc.checkMem})
	for _, p := range check.Failed() {
		switch p.Result {
		case "Illegal":
			v = append(v, fmt.Sprintf("the history of %s is not linearizable (see linearizability.html): %s", p.Root, p.Counterexample))
		default:
			v = append(v, fmt.Sprintf("the linearizability check of %s is inconclusive (%s): %d operations, %d pending writes",
				p.Root, p.Why, p.Ops, p.Pending))
		}
	}
	stopStalls()
	stallWG.Wait()
	avail := CheckAvailability(ops, inj.Outages())
	v = append(v, avail.Violations...)
	sum := summarize(ops, inj.Events(), check)
	sum.Unavailable, sum.UnavailableInWindows, sum.UnavailableOutside = avail.Unavailable, avail.InWindows, avail.Outside
	recMu.Lock()
	// The evidence wants the operations with their resolution.
	rec.replace(ops)
	out.violations, out.check, out.summary, out.availability = v, check, sum, avail
	recMu.Unlock()
	logSummary(t, ops, inj.Events(), sum, check, avail, v, formed.Sub(started), time.Since(started))
	if len(v) > 0 || rc.keep || rc.out != "" {
		kctx, kcancel := cleanupContext(runDeadline.Add(cleanupBudget/2), 0)
		keep(kctx)
		kcancel()
	}
	return out
}

// recoveryFailed fails t, or with rc.tolerateRecovery only logs.
func recoveryFailed(t *testing.T, rc runConfig, format string, args ...any) {
	t.Helper()
	if rc.tolerateRecovery {
		t.Logf("(a server broken on purpose; not a failure of this test) "+format, args...)
		return
	}
	t.Errorf(format, args...)
}

// runFaults injects one fault of each of kinds (the short run, duration
// 0; with rc.double then one double fault) or, after the first of kinds,
// random ones until the duration has passed (with rc.double one slot in
// doubleShare overlaps two faults); it starts no fault that would not
// leave the run's deadline room for a typical fault and the run's tail
// (an error in the short run, which must inject every kind; a warning
// otherwise). Before each fault slot the workload moves to a new
// generation of roots (Workload.Advance).
func runFaults(ctx context.Context, inj *Injector, w *Workload, kinds []string, rc runConfig, deadline time.Time, log *slog.Logger) error {
	if err := sleep(ctx, quietAround); err != nil {
		return err
	}
	duration := rc.duration
	end := time.Now().Add(duration)
	for i := 0; ; i++ {
		var kind string
		var pair [2]string
		switch {
		case duration == 0 && i < len(kinds):
			kind = kinds[i]
		case duration == 0 && i == len(kinds) && rc.double:
			pair = DoubleFaults[inj.intn(len(DoubleFaults))]
		case duration > 0 && i == 0:
			kind = kinds[0]
		case duration > 0 && time.Now().Before(end) && rc.double && inj.intn(doubleShare) == 0:
			pair = DoubleFaults[inj.intn(len(DoubleFaults))]
		case duration > 0 && time.Now().Before(end):
			kind = kinds[inj.intn(len(kinds))]
		default:
			return nil
		}
		name := kind
		if kind == "" {
			name = pair[0] + "+" + pair[1]
		}
		if left := time.Until(deadline); left < faultReserve+tailReserve {
			if duration == 0 {
				return fmt.Errorf("chaos: %s left before the run's deadline: no room for fault %s (the machine is too slow for -timeout)", left.Round(time.Second), name)
			}
			log.Warn("stopping the faults early: the run's deadline is near (raise -timeout)", "left", left.Round(time.Second), "duration", duration)
			return nil
		}
		// Fresh roots for the workload: each partition of the check
		// sees one fault slot.
		if err := w.Advance(ctx); err != nil {
			return err
		}
		var err error
		if kind != "" {
			err = inj.Inject(ctx, kind)
		} else {
			err = inj.InjectDouble(ctx, pair[0], pair[1])
		}
		if err != nil {
			return err
		}
		if err := sleep(ctx, faultGap); err != nil {
			return err
		}
	}
}

// saveEvidence writes history.json, the counterexamples and porcupine's
// visualization (of the partitions that are not Ok, or of every partition
// when all are; checked again verbosely, within ctx's time) into dir.
func saveEvidence(ctx context.Context, t *testing.T, dir string, r *Report) {
	b, err := json.MarshalIndent(r, "", " ")
	if err == nil {
		err = os.WriteFile(filepath.Join(dir, "history.json"), b, 0o644)
	}
	if err != nil {
		t.Logf("save history: %v", err)
	}
	if len(r.Ops) == 0 {
		return
	}
	if r.Check == nil {
		return // the run ended before its check
	}
	var ce strings.Builder
	for _, p := range r.Check.Failed() {
		fmt.Fprintf(&ce, "%s: %s %s\n%s\n\n", p.Root, p.Result, p.Why, p.Counterexample)
	}
	if ce.Len() > 0 {
		if err := os.WriteFile(filepath.Join(dir, "counterexample.txt"), []byte(ce.String()), 0o644); err != nil {
			t.Logf("save counterexample: %v", err)
		}
	}
	ops, pend := r.Check.visualOps()
	if len(ops) == 0 {
		t.Logf("no linearizability.html: the check of the failed partitions did not end within its bounds")
		return
	}
	limit := checkTimeout
	if dl, ok := ctx.Deadline(); ok {
		limit = min(limit, max(time.Until(dl)/2, time.Second))
	}
	onStep, over := boundedStep(DefaultCheckMemory / 2)
	_, info := porcupine.CheckOperationsVerbose(fullModel(pend, onStep), ops, limit)
	if over.Load() {
		t.Logf("no linearizability.html: the verbose check reached its memory bound")
		return
	}
	var notes []porcupine.Annotation
	for _, f := range r.Faults {
		desc := f.Kind + " " + f.Target
		if f.With != "" {
			desc += " (with " + f.With + ")"
		}
		notes = append(notes, porcupine.Annotation{Tag: "faults", Start: f.Start, End: f.End,
			Description: desc, Details: f.Err, BackgroundColor: "#f8d0d0"})
	}
	info.AddAnnotations(notes)
	if err := porcupine.VisualizePath(fullModel(pend, nil), info, filepath.Join(dir, "linearizability.html")); err != nil {
		t.Logf("visualize: %v", err)
	}
}

// RunSummary is what a run reports: operations, unknown outcomes, faults
// and the check.
type RunSummary struct {
	// Ops counts every recorded operation; Workload those of the workers
	// (not the final reads), ReadBacks the workers' stats after an
	// unknown write.
	Ops       int `json:"ops"`
	Workload  int `json:"workload"`
	ReadBacks int `json:"read_backs"`
	// Stats counts the workload's successful stats, Cached those its
	// caching workers answered from their metadata cache; Missing and
	// MissingCached the same of its stats that answered "does not exist".
	Stats         int `json:"stats"`
	Cached        int `json:"cached"`
	Missing       int `json:"missing"`
	MissingCached int `json:"missing_cached"`
	// Unknown counts the workload's operations with an unknown outcome
	// (UnknownWrites of them writes); Resolved the unknown creates and
	// mkdirs a stat saw; Pending the unknown writes left for the check.
	Unknown       int `json:"unknown"`
	UnknownWrites int `json:"unknown_writes"`
	Resolved      int `json:"resolved"`
	Pending       int `json:"pending"`
	// Faults counts the faults by kind (both of a double fault), Double
	// the double faults.
	Faults map[string]int `json:"faults"`
	Double int            `json:"double"`
	// Verdict and CheckTook are the linearizability check's.
	Verdict   string        `json:"verdict"`
	CheckTook time.Duration `json:"check_took_ns"`
	// Unavailable counts the operations that answered "unavailable",
	// inside a fail-over window and outside every one (violations; see
	// CheckAvailability).
	Unavailable          int `json:"unavailable"`
	UnavailableInWindows int `json:"unavailable_in_windows"`
	UnavailableOutside   int `json:"unavailable_outside"`
}

// UnknownShare is Unknown over Workload.
func (s *RunSummary) UnknownShare() float64 {
	if s.Workload == 0 {
		return 0
	}
	return float64(s.Unknown) / float64(s.Workload)
}

// summarize counts what a run did.
func summarize(ops []Op, faults []FaultEvent, check *CheckReport) *RunSummary {
	s := &RunSummary{Ops: len(ops), Faults: make(map[string]int), Verdict: check.Verdict, CheckTook: check.Took}
	for i := range ops {
		o := &ops[i]
		if o.Final {
			continue
		}
		s.Workload++
		if o.ReadBack {
			s.ReadBacks++
		}
		if o.Kind == OpStat && o.Result == ResOK {
			s.Stats++
			if o.Cached {
				s.Cached++
			}
		}
		if o.Kind == OpStat && o.Result == ResNotExist {
			s.Missing++
			if o.Cached {
				s.MissingCached++
			}
		}
		if o.Result != ResUnknown {
			continue
		}
		s.Unknown++
		if o.isWrite() {
			s.UnknownWrites++
			if o.pending() {
				s.Pending++
			} else {
				s.Resolved++
			}
		}
	}
	for _, f := range faults {
		s.Faults[f.Kind]++
		if f.With != "" {
			s.Double++
		}
	}
	s.Double /= 2
	return s
}

func (s *RunSummary) faultList() string {
	var parts []string
	total := 0
	for _, k := range slices.Sorted(maps.Keys(s.Faults)) {
		parts = append(parts, fmt.Sprintf("%s %d", k, s.Faults[k]))
		total += s.Faults[k]
	}
	return fmt.Sprintf("%d (%s; %d double)", total, strings.Join(parts, ", "), s.Double)
}

func logSummary(t *testing.T, ops []Op, faults []FaultEvent, sum *RunSummary, check *CheckReport, avail *AvailabilityReport, v []string, formTook, total time.Duration) {
	counts := make(map[string]int)
	for _, o := range ops {
		k := o.Kind + "/" + o.Result
		if o.Final {
			k = "final " + k
		}
		counts[k]++
	}
	keys := make([]string, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	fmt.Fprintf(&b, "chaos summary: %d operations recorded (%d of the workload, %d of them read-backs); cluster formed in %s; run took %s\n",
		sum.Ops, sum.Workload, sum.ReadBacks, formTook.Round(time.Second), total.Round(time.Second))
	fmt.Fprintf(&b, "  unknown outcomes: %d of %d (%.2f%%); writes %d: %d resolved by a stat of their token, %d pending in the check\n",
		sum.Unknown, sum.Workload, 100*sum.UnknownShare(), sum.UnknownWrites, sum.Resolved, sum.Pending)
	fmt.Fprintf(&b, "  stats: %d answered, %d of them from a client's metadata cache; %d answered \"does not exist\", %d of them from a cache\n",
		sum.Stats, sum.Cached, sum.Missing, sum.MissingCached)
	fmt.Fprintf(&b, "  %s\n", check.Summary())
	fmt.Fprintf(&b, "  availability: %s\n", avail.Summary())
	fmt.Fprintf(&b, "  faults: %s\n", sum.faultList())
	for _, k := range keys {
		fmt.Fprintf(&b, "  %-24s %d\n", k, counts[k])
	}
	// Operations without an answer while no fault was active (between
	// faults the cluster had converged): not a violation, but a sign of
	// slow recovery or of an overloaded machine.
	quiet := 0
	for _, o := range ops {
		if o.Result != ResUnknown && o.Result != ResNotSent || o.Final {
			continue
		}
		during := false
		for _, f := range faults {
			during = during || o.Return >= f.Start && o.Call <= f.End
		}
		if !during {
			quiet++
		}
	}
	fmt.Fprintf(&b, "  without an answer outside fault windows: %d\n", quiet)
	for _, f := range faults {
		with := ""
		if f.With != "" {
			with = "with " + f.With
		}
		fmt.Fprintf(&b, "  fault %-24s %-8s %s–%s %s %s\n", f.Kind, f.Target, ms(f.Start), ms(f.End), with, f.Err)
	}
	for _, w := range avail.Windows {
		to := "end"
		if w.To != openEnd {
			to = ms(w.To)
		}
		fmt.Fprintf(&b, "  window %s–%s %s\n", ms(w.From), to, w.Why)
	}
	for _, p := range check.Partitions {
		fmt.Fprintf(&b, "  check %-8s %-7s %5d ops %3d pending %3d resolved %9d steps %4d possibilities %7.1f MiB %s %s\n",
			p.Root, p.Result, p.Ops, p.Pending, p.Resolved, p.Steps, p.MaxSet, float64(p.Memory)/(1<<20), p.Took.Round(time.Millisecond), p.Why)
	}
	fmt.Fprintf(&b, "  violations: %d", len(v))
	t.Log(b.String())
}

// ---- The model and the checks, without docker ----

// h builds a history of one root, /r: each op is given its call and
// return times.
type h struct{ ops []Op }

func (x *h) add(o Op, call, ret int64, result string) *Op {
	o.Root, o.Call, o.Return, o.Result = "/r", call, ret, result
	x.ops = append(x.ops, o)
	return &x.ops[len(x.ops)-1]
}

func mkdir(d string, tok uint32) Op     { return Op{Kind: OpMkdir, Dir: d, Token: tok} }
func create(d, n string, tok uint32) Op { return Op{Kind: OpCreate, Dir: d, Name: n, Token: tok} }
func stat(d, n string, seen uint32) Op  { return Op{Kind: OpStat, Dir: d, Name: n, Seen: seen} }
func readdir(d string, es ...string) Op { return Op{Kind: OpReadDir, Dir: d, Entries: es} }

func checkOps(t *testing.T, ops []Op) porcupine.CheckResult {
	t.Helper()
	ops = slices.Clone(ops)
	ResolveByTokens(ops)
	rep := CheckLinearizable(ops, CheckLimits{Timeout: 20 * time.Second, Memory: 64 << 20})
	for _, p := range rep.Failed() {
		t.Logf("%s: %s %s\n%s", p.Root, p.Result, p.Why, p.Counterexample)
	}
	return rep.Result
}

func TestModelLinearizable(t *testing.T) {
	var x h
	x.add(mkdir("x", 1), 0, 5, ResOK)
	x.add(mkdir("y", 2), 0, 5, ResOK)
	x.add(create("x", "a", 3), 6, 10, ResOK)
	x.add(stat("x", "a", 3), 11, 12, ResOK)
	x.add(Op{Kind: OpRename, Dir: "x", Name: "a", ToDir: "y", To: "b"}, 13, 20, ResOK)
	x.add(readdir("x", "a"), 15, 16, ResOK) // concurrent with the rename
	x.add(readdir("y"), 15, 16, ResOK)
	x.add(stat("y", "b", 3), 21, 22, ResOK) // the token moved with the file
	x.add(Op{Kind: OpRmdir, Dir: "y"}, 23, 24, ResNotEmpty)
	x.add(Op{Kind: OpRmdir, Dir: "x"}, 23, 24, ResOK)
	x.add(Op{Kind: OpRenameDir, Dir: "y", ToDir: "x"}, 25, 26, ResOK)
	x.add(stat("x", "", 2), 27, 28, ResOK)
	x.add(stat("x", "b", 3), 27, 28, ResOK)
	x.add(Op{Kind: OpReadDir}, 27, 28, ResOK).Entries = []string{"x"}
	x.add(create("y", "a", 4), 29, 30, ResNotExist)
	x.add(Op{Kind: OpUnlink, Dir: "x", Name: "b"}, 31, 32, ResOK)
	x.add(Op{Kind: OpMkdir, Dir: "x", Token: 5}, 33, 34, ResExist)
	x.ops = append(x.ops, Op{Kind: OpCreate, Root: "/other", Dir: "x", Name: "a", Token: 9, Result: ResNotExist, Call: 0, Return: 5})
	if got := checkOps(t, x.ops); got != porcupine.Ok {
		t.Fatalf("check = %v, want Ok", got)
	}
}

func TestModelDetectsLostCreate(t *testing.T) {
	var x h
	x.add(mkdir("x", 1), 0, 5, ResOK)
	x.add(create("x", "a", 2), 6, 10, ResOK)
	x.add(stat("x", "a", 0), 22, 23, ResNotExist).Final = true
	if got := checkOps(t, x.ops); got != porcupine.Illegal {
		t.Fatalf("check = %v, want Illegal", got)
	}
	if d := Durability(x.ops); len(d) != 1 || !strings.Contains(d[0], "lost") {
		t.Fatalf("Durability = %q, want one lost write", d)
	}
}

func TestModelDetectsStaleRead(t *testing.T) {
	var x h
	x.add(mkdir("x", 1), 0, 5, ResOK)
	x.add(create("x", "a", 2), 6, 10, ResOK)
	x.add(readdir("x"), 11, 12, ResOK) // misses a
	if got := checkOps(t, x.ops); got != porcupine.Illegal {
		t.Fatalf("check = %v, want Illegal", got)
	}
}

func TestModelDetectsWrongToken(t *testing.T) {
	var x h
	x.add(mkdir("x", 1), 0, 5, ResOK)
	x.add(create("x", "a", 2), 6, 10, ResOK)
	x.add(Op{Kind: OpUnlink, Dir: "x", Name: "a"}, 11, 12, ResOK)
	x.add(create("x", "a", 3), 13, 14, ResOK)
	x.add(stat("x", "a", 2), 15, 16, ResOK) // the old file
	if got := checkOps(t, x.ops); got != porcupine.Illegal {
		t.Fatalf("check = %v, want Illegal", got)
	}
}

func TestModelDetectsResurrection(t *testing.T) {
	var x h
	x.add(mkdir("x", 1), 0, 5, ResOK)
	x.add(create("x", "a", 2), 6, 10, ResOK)
	x.add(Op{Kind: OpRename, Dir: "x", Name: "a", ToDir: "x", To: "c"}, 11, 12, ResOK)
	x.add(stat("x", "a", 2), 20, 21, ResOK).Final = true
	if got := checkOps(t, x.ops); got != porcupine.Illegal {
		t.Fatalf("check = %v, want Illegal", got)
	}
	if d := Durability(x.ops); len(d) != 1 || !strings.Contains(d[0], "came back") {
		t.Fatalf("Durability = %q, want one resurrection", d)
	}
}

func TestModelNotEmpty(t *testing.T) {
	// rmdir of a non-empty directory must fail; a directory rename onto a
	// non-empty one too.
	var x h
	x.add(mkdir("x", 1), 0, 5, ResOK)
	x.add(mkdir("y", 2), 0, 5, ResOK)
	x.add(create("y", "a", 3), 6, 7, ResOK)
	x.add(Op{Kind: OpRenameDir, Dir: "x", ToDir: "y"}, 8, 9, ResOK)
	if got := checkOps(t, x.ops); got != porcupine.Illegal {
		t.Fatalf("rename over a non-empty directory: check = %v, want Illegal", got)
	}
	x.ops[3].Result = ResNotEmpty
	x.add(Op{Kind: OpRmdir, Dir: "y"}, 10, 11, ResOK)
	if got := checkOps(t, x.ops); got != porcupine.Illegal {
		t.Fatalf("rmdir of a non-empty directory: check = %v, want Illegal", got)
	}
	x.ops[4].Result = ResNotEmpty
	if got := checkOps(t, x.ops); got != porcupine.Ok {
		t.Fatalf("check = %v, want Ok", got)
	}
}

func TestModelUnknownOutcome(t *testing.T) {
	// An unknown create may have been applied, late or never.
	for _, final := range [][]string{{"a"}, nil} {
		var x h
		x.add(mkdir("x", 1), 0, 5, ResOK)
		x.add(create("x", "a", 2), 6, 10, ResUnknown)
		x.add(readdir("x"), 20, 21, ResOK)
		x.add(readdir("x", final...), 30, 31, ResOK)
		if got := checkOps(t, x.ops); got != porcupine.Ok {
			t.Fatalf("final %v: check = %v, want Ok", final, got)
		}
		if d := Durability(x.ops); len(d) != 0 {
			t.Fatalf("Durability = %q, want none", d)
		}
	}
	// But once seen, it cannot disappear again.
	var x h
	x.add(mkdir("x", 1), 0, 5, ResOK)
	x.add(create("x", "a", 2), 6, 10, ResUnknown)
	x.add(readdir("x", "a"), 20, 21, ResOK)
	x.add(readdir("x"), 30, 31, ResOK)
	if got := checkOps(t, x.ops); got != porcupine.Illegal {
		t.Fatalf("check = %v, want Illegal", got)
	}
	// An unknown create that failed (the name was taken) is a no-op.
	x = h{}
	x.add(mkdir("x", 1), 0, 5, ResOK)
	x.add(create("x", "a", 2), 6, 7, ResOK)
	x.add(create("x", "a", 3), 8, 10, ResUnknown)
	x.add(stat("x", "a", 2), 20, 21, ResOK)
	x.add(Op{Kind: OpUnlink, Dir: "x", Name: "a"}, 22, 23, ResOK)
	x.add(stat("x", "a", 0), 24, 25, ResNotExist)
	if got := checkOps(t, x.ops); got != porcupine.Ok {
		t.Fatalf("failed unknown create: check = %v, want Ok", got)
	}
}

func TestModelPendingWrites(t *testing.T) {
	// A pending create may fire late: absent at 20, there at 30.
	var x h
	x.add(mkdir("x", 1), 0, 5, ResOK)
	x.add(create("x", "a", 2), 6, 10, ResUnknown)
	x.add(stat("x", "a", 0), 20, 21, ResNotExist)
	x.add(Op{Kind: OpUnlink, Dir: "x", Name: "b"}, 22, 23, ResNotExist)
	x.add(readdir("x", "a"), 30, 31, ResOK)
	if got := checkOps(t, x.ops); got != porcupine.Ok {
		t.Fatalf("late create: check = %v, want Ok", got)
	}
	// Not before its call.
	x = h{}
	x.add(mkdir("x", 1), 0, 5, ResOK)
	x.add(readdir("x", "a"), 6, 7, ResOK)
	x.add(create("x", "a", 2), 8, 10, ResUnknown)
	if got := checkOps(t, x.ops); got != porcupine.Illegal {
		t.Fatalf("create seen before its call: check = %v, want Illegal", got)
	}
	// At most once: a pending unlink cannot remove two files.
	x = h{}
	x.add(mkdir("x", 1), 0, 5, ResOK)
	x.add(create("x", "a", 2), 6, 7, ResOK)
	x.add(Op{Kind: OpUnlink, Dir: "x", Name: "a"}, 8, 9, ResUnknown)
	x.add(stat("x", "a", 0), 10, 11, ResNotExist)
	x.add(create("x", "a", 3), 12, 13, ResOK)
	x.add(stat("x", "a", 0), 14, 15, ResNotExist)
	if got := checkOps(t, x.ops); got != porcupine.Illegal {
		t.Fatalf("one unlink, two removals: check = %v, want Illegal", got)
	}
	// Two pending writes that undo each other leave no trace; their
	// effects in between are allowed.
	x = h{}
	x.add(mkdir("x", 1), 0, 5, ResOK)
	x.add(create("x", "a", 2), 6, 7, ResUnknown)
	x.add(Op{Kind: OpUnlink, Dir: "x", Name: "a"}, 6, 7, ResUnknown)
	x.add(stat("x", "a", 2), 10, 11, ResOK)
	x.add(readdir("x"), 12, 13, ResOK)
	if got := checkOps(t, x.ops); got != porcupine.Ok {
		t.Fatalf("create then unlink: check = %v, want Ok", got)
	}
}

// outagePending is the number of pending writes TestCheckOutage makes.
var outagePending = 15

func TestCheckOutage(t *testing.T) {
	// Many writes of unknown outcome during an outage in which nothing
	// reads their paths, then reads showing that none took effect: the
	// search that used to branch on each of them (and backtrack over the
	// whole outage) must stay small.
	var x h
	x.add(mkdir("x", 1), 0, 5, ResOK)
	x.add(mkdir("y", 2), 0, 5, ResOK)
	x.add(create("x", "a", 3), 6, 7, ResOK)
	tm := int64(10)
	tok := uint32(100)
	for i := range outagePending {
		d, n := Slots[i%2], Names[i%3]
		switch i % 5 {
		case 0:
			x.add(create(d, n, tok), tm, tm+1, ResUnknown)
			tok++
		case 1:
			x.add(Op{Kind: OpUnlink, Dir: d, Name: n}, tm, tm+1, ResUnknown)
		case 2:
			x.add(Op{Kind: OpRename, Dir: d, Name: n, ToDir: "y", To: "c"}, tm, tm+1, ResUnknown)
		case 3:
			x.add(Op{Kind: OpRmdir, Dir: "y"}, tm, tm+1, ResUnknown)
		case 4:
			x.add(Op{Kind: OpMkdir, Dir: d, Token: tok}, tm, tm+1, ResUnknown)
			tok++
		}
		x.add(Op{Kind: OpReadDir}, tm+1, tm+2, ResOK).Entries = []string{"x", "y"}
		tm += 3
	}
	x.add(readdir("x", "a"), tm, tm+1, ResOK)
	x.add(readdir("y"), tm, tm+1, ResOK)
	x.add(stat("x", "a", 3), tm, tm+1, ResOK)
	ops := slices.Clone(x.ops)
	rep := CheckLinearizable(ops, CheckLimits{Timeout: 20 * time.Second, Memory: 256 << 20})
	p := rep.Partitions[0]
	t.Logf("%s: %d steps, %d possibilities at most, %.1f MiB, %s", p.Result, p.Steps, p.MaxSet, float64(p.Memory)/(1<<20), p.Took)
	if rep.Result != porcupine.Ok {
		t.Fatalf("check = %s (%s), want Ok", rep.Verdict, p.Why)
	}
	if p.Steps > 5000 {
		t.Errorf("%d steps for %d operations: the pending writes branch", p.Steps, p.Ops)
	}
}

// TestCheckHistory checks again the history a run kept
// (GHBA_CHAOS_HISTORY=…/history.json), for a developer who wants to look
// at a check again; skipped without it.
func TestCheckHistory(t *testing.T) {
	f := os.Getenv("GHBA_CHAOS_HISTORY")
	if f == "" {
		t.Skip("GHBA_CHAOS_HISTORY is not set")
	}
	b, err := os.ReadFile(f)
	if err != nil {
		t.Fatal(err)
	}
	var r Report
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("%s: %v", f, err)
	}
	for i := range r.Ops {
		r.Ops[i].SeenAt = 0
	}
	ResolveByTokens(r.Ops)
	rep := CheckLinearizable(r.Ops, CheckLimits{Timeout: 10 * time.Minute})
	for _, p := range rep.Partitions {
		t.Logf("%-12s %-7s %5d ops %3d pending %9d steps %5d possibilities %7.1f MiB %s %s",
			p.Root, p.Result, p.Ops, p.Pending, p.Steps, p.MaxSet, float64(p.Memory)/(1<<20), p.Took.Round(time.Millisecond), p.Why)
	}
	t.Log(rep.Summary())
	for _, p := range rep.Failed() {
		t.Errorf("%s: %s %s\n%s", p.Root, p.Result, p.Why, p.Counterexample)
	}
}

func TestResolveByTokens(t *testing.T) {
	// A stat that answers an unknown create's token proves it: the create
	// then returns by that stat, and a read after the stat that misses it
	// is illegal — but an unlink before then explains it.
	var x h
	x.add(mkdir("x", 1), 0, 5, ResOK)
	x.add(create("x", "a", 2), 6, 10, ResUnknown)
	x.add(stat("x", "a", 2), 20, 21, ResOK)
	x.add(readdir("x"), 30, 31, ResOK)
	ops := slices.Clone(x.ops)
	if n := ResolveByTokens(ops); n != 1 || ops[1].SeenAt != 21 || ops[1].pending() {
		t.Fatalf("ResolveByTokens = %d, SeenAt %d", n, ops[1].SeenAt)
	}
	if got := checkOps(t, x.ops); got != porcupine.Illegal {
		t.Fatalf("check = %v, want Illegal", got)
	}
	x.add(Op{Kind: OpUnlink, Dir: "x", Name: "a"}, 22, 23, ResOK)
	if got := checkOps(t, x.ops); got != porcupine.Ok {
		t.Fatalf("with the unlink: check = %v, want Ok", got)
	}
}

func TestCheckManyPendingWrites(t *testing.T) {
	// Many writes of unknown outcome that would fail (no-ops) must not
	// blow the search up: they can only go after the end.
	var x h
	x.add(mkdir("x", 1), 0, 5, ResOK)
	x.add(create("x", "a", 2), 6, 7, ResOK)
	tm := int64(10)
	for i := range 40 {
		x.add(create("x", "a", uint32(100+i)), tm, tm+1, ResUnknown)
		x.add(Op{Kind: OpRmdir, Dir: "y"}, tm, tm+1, ResUnknown)
		x.add(stat("x", "a", 2), tm+2, tm+3, ResOK)
		tm += 4
	}
	start := time.Now()
	if got := checkOps(t, x.ops); got != porcupine.Ok {
		t.Fatalf("check = %v, want Ok", got)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("check took %s", d)
	}
}

func TestCheckMemoryBound(t *testing.T) {
	// Pending writes that do apply (creates and unlinks of names never
	// read until a last stat that nothing explains) make porcupine try
	// every subset before it can answer Illegal; a tiny bound must answer
	// Unknown instead.
	var x h
	x.add(mkdir("x", 1), 0, 5, ResOK)
	x.add(mkdir("y", 2), 0, 5, ResOK)
	tm := int64(10)
	for i := range 30 {
		d, n := Slots[i%2], Names[(i/2)%3]
		x.add(create(d, n, uint32(100+i)), tm, tm+1, ResUnknown)
		x.add(Op{Kind: OpUnlink, Dir: d, Name: n}, tm, tm+1, ResUnknown)
		x.add(Op{Kind: OpStat, Dir: "x", Name: ""}, tm+2, tm+3, ResOK).Seen = 1
		tm += 4
	}
	x.add(stat("x", "a", 999), tm, tm+1, ResOK)
	ops := slices.Clone(x.ops)
	rep := CheckLinearizable(ops, CheckLimits{Timeout: 20 * time.Second, Memory: 4 << 10})
	if rep.Result != porcupine.Unknown || !strings.Contains(rep.Partitions[0].Why, "memory") {
		t.Fatalf("check = %s (%s), want Unknown by the memory bound", rep.Verdict, rep.Partitions[0].Why)
	}
}

// randomHistory simulates n operations of concurrent clients on one root:
// each takes effect at a random point of its interval, in that order, and
// gets the model's answer; about one write in six has an unknown outcome
// and takes effect or not. With corrupt, one answer is changed, which
// usually (not always) makes the history illegal.
func randomHistory(rng *rand.Rand, n int, corrupt bool) []Op {
	w := &Workload{}
	w.roots.Store(&[]string{"/r"})
	type ev struct {
		at int64
		o  *Op
	}
	var evs []ev
	ops := make([]Op, n)
	for i := range ops {
		o := w.next(rng, "", false)
		o.Call = int64(rng.IntN(1000))
		o.Return = o.Call + 1 + int64(rng.IntN(60))
		at := o.Call + rng.Int64N(o.Return-o.Call+1)
		if o.isWrite() && rng.IntN(6) == 0 {
			o.Result = ResUnknown // it may take effect long after
			at = o.Call + rng.Int64N(400)
		}
		ops[i] = o
		evs = append(evs, ev{at, &ops[i]})
	}
	slices.SortFunc(evs, func(a, b ev) int { return cmp.Compare(a.at, b.at) })
	s := rootState{}
	for _, e := range evs {
		o := e.o
		if o.Result == ResUnknown {
			if rng.IntN(2) == 0 {
				continue // never took effect
			}
			_, s = apply(s, o)
			continue
		}
		res, next := apply(s, o)
		o.Result = res
		switch {
		case o.Kind == OpStat && res == ResOK && o.Name == "":
			o.Seen = s.s[slotIndex(o.Dir)].tok
		case o.Kind == OpStat && res == ResOK:
			o.Seen = s.s[slotIndex(o.Dir)].files[nameIndex(o.Name)]
		case o.Kind == OpReadDir && res == ResOK:
			o.Entries = nil
			if o.Dir == "" {
				for i, d := range Slots {
					if s.s[i].tok != 0 {
						o.Entries = append(o.Entries, d)
					}
				}
			} else {
				for i, nm := range Names {
					if s.s[slotIndex(o.Dir)].files[i] != 0 {
						o.Entries = append(o.Entries, nm)
					}
				}
			}
		}
		if o.isWrite() {
			s = next
		}
	}
	if corrupt {
		o := &ops[rng.IntN(n)]
		switch {
		case o.Result == ResOK && o.Kind == OpStat:
			o.Seen++
		case o.Result == ResOK:
			o.Result = ResNotExist
		default:
			o.Result = ResOK
		}
	}
	return ops
}

func TestClosureDeferral(t *testing.T) {
	// Firing only the armed writes that conflict with the next operation
	// (closure) accepts exactly the histories that firing all of them
	// accepts.
	defer func() { deferFiring = true }()
	rng := rand.New(rand.NewPCG(7, 11))
	counts := map[porcupine.CheckResult]int{}
	for i := range 400 {
		ops := randomHistory(rng, 40, i%2 == 1)
		var got [2]porcupine.CheckResult
		for j, d := range []bool{true, false} {
			deferFiring = d
			h := slices.Clone(ops)
			ResolveByTokens(h)
			got[j] = CheckLinearizable(h, CheckLimits{Timeout: 20 * time.Second, Memory: 256 << 20}).Result
		}
		if got[0] != got[1] {
			b, _ := json.Marshal(ops)
			t.Fatalf("history %d: deferred firing says %v, firing all says %v: %s", i, got[0], got[1], b)
		}
		if i%2 == 0 && got[0] != porcupine.Ok {
			b, _ := json.Marshal(ops)
			t.Fatalf("history %d, simulated from the model: %v: %s", i, got[0], b)
		}
		counts[got[0]]++
	}
	t.Logf("verdicts: %v", counts)
}

func TestClassify(t *testing.T) {
	for _, c := range []struct {
		err  error
		want string
	}{
		{nil, ResOK},
		{rpc.CodeNotExist.Err("x"), ResNotExist},
		{rpc.CodeExist.Err("x"), ResExist},
		{rpc.CodeNotEmpty.Err("x"), ResNotEmpty},
		{rpc.CodeUnavailable.Err("home down"), ResUnknown},
		{rpc.CodeShuttingDown.Err("bye"), ResNotSent},
		{fmt.Errorf("rpc: no node answered: %w", rpc.ErrUnavailable), ResNotSent},
		{fmt.Errorf("x: %w: %w", rpc.ErrUnavailable, rpc.ErrOutcomeUnknown), ResUnknown},
		{context.DeadlineExceeded, ResUnknown},
		{rpc.CodeInternal.Err("boom"), ResWrong},
		{rpc.CodeNotDir.Err("x"), ResWrong},
		{errors.New("strange"), ResWrong},
	} {
		if got := Classify(c.err); got != c.want {
			t.Errorf("Classify(%v) = %s, want %s", c.err, got, c.want)
		}
	}
}

func TestWorkloadMix(t *testing.T) {
	// The mix, run sequentially against the model, meets every result of
	// every kind that the model can give (so rmdir and directory renames
	// see empty and non-empty directories).
	w := &Workload{}
	w.roots.Store(&[]string{"/r"})
	rng := rand.New(rand.NewPCG(1, 2))
	s := rootState{}
	seen := make(map[string]int)
	for range 20000 {
		o := w.next(rng, "", false)
		res, next := apply(s, &o)
		if o.isWrite() {
			s = next
		}
		seen[o.Kind+"/"+res]++
	}
	for _, k := range []string{"create/ok", "create/exist", "create/notexist", "unlink/ok", "rename/ok", "rename/notexist",
		"mkdir/ok", "mkdir/exist", "rmdir/ok", "rmdir/notempty", "rmdir/notexist", "renamedir/ok", "renamedir/notempty", "renamedir/notexist"} {
		if seen[k] < 50 {
			t.Errorf("%s: %d times in 20000 operations", k, seen[k])
		}
	}
	t.Logf("outcomes of the mix: %v", seen)
}

func TestAvailabilityWindows(t *testing.T) {
	sec := func(x float64) int64 { return int64(x * float64(time.Second)) }
	outs := []Outage{
		// n1 killed at 10 s, started at 13 s, back at 20 s.
		{Fault: FaultKillRandom, Node: "n1", Group: "g1", Down: sec(10), Up: sec(13), Back: sec(20)},
		// n4 paused from 40 s to 70 s, back at 75 s.
		{Fault: FaultPause, Node: "n4", Group: "g2", Down: sec(40), Up: sec(70), Back: sec(75)},
		// n2 and n3 of g1 out at once from 100 s to 130 s.
		{Fault: FaultKillRandom, Node: "n2", Group: "g1", Down: sec(100), Up: sec(103), Back: sec(110)},
		{Fault: FaultPartitionNode, Node: "n3", Group: "g1", Down: sec(105), Up: sec(125), Back: sec(130)},
		// g3 cut off from 200 s to 220 s.
		{Fault: FaultPartitionGroup, Node: "n7", Group: "g3", Down: sec(200), Up: sec(220), Back: sec(222), NoMajority: true},
	}
	una := func(call, ret float64) Op {
		return Op{Kind: OpStat, Root: "/r", Dir: "x", Name: "a", Call: sec(call), Return: sec(ret), Result: ResUnknown,
			Unavailable: true, Node: "n5", Err: "unavailable: shard n1 has no reachable leader"}
	}
	for _, c := range []struct {
		op     Op
		inside bool
	}{
		{una(11, 12), true},    // n1's fail-over
		{una(25, 29), true},    // n1 back at 20 s: up to 30 s
		{una(31, 32), false},   // after
		{una(45, 46), true},    // n4 paused at 40 s: up to 50 s
		{una(55, 58), false},   // n4 still paused, its shards failed over
		{una(49, 51), true},    // overlaps the end of the window
		{una(72, 73), true},    // n4 back
		{una(150, 155), true},  // g1 without a majority: up to 130 + 30 s
		{una(165, 166), false}, // after
		{una(240, 250), true},  // g3 cut off: up to 222 + 30 s
		{una(260, 261), false},
	} {
		r := CheckAvailability([]Op{c.op}, outs)
		if got := r.InWindows == 1; got != c.inside || r.Unavailable != 1 || r.Outside+r.InWindows != 1 {
			t.Errorf("unavailable %s–%s: inside %v (%+v), want %v", ms(c.op.Call), ms(c.op.Return), got, r, c.inside)
		}
		if !c.inside && (len(r.Violations) != 1 || !strings.Contains(r.Violations[0], "via n5")) {
			t.Errorf("violations %q", r.Violations)
		}
	}
	// Planned operations open no window: a rolling restart's or upgrade's
	// outages none, a hand-back's only its kill's.
	planned := []Outage{
		{Fault: FaultRollingRestart, Node: "n1", Group: "g1", Down: sec(10), Up: sec(12), Back: sec(15), Planned: true},
		{Fault: FaultHandBack, Node: "n2", Group: "g1", Down: sec(30), Up: sec(35), Back: sec(50), PlannedBack: true},
	}
	for _, c := range []struct {
		op     Op
		inside bool
	}{
		{una(11, 12), false}, // during the rolling restart
		{una(31, 32), true},  // n2 killed: its fail-over
		{una(45, 46), false}, // n2 back: the hand-back is planned
	} {
		if r := CheckAvailability([]Op{c.op}, planned); (r.InWindows == 1) != c.inside {
			t.Errorf("planned: unavailable %s–%s: inside %v, want %v", ms(c.op.Call), ms(c.op.Return), r.InWindows == 1, c.inside)
		}
	}
	// An answered operation is never a violation; an outage not yet back
	// opens a window to the end.
	ok := una(55, 58)
	ok.Unavailable, ok.Result = false, ResOK
	open := []Outage{{Fault: FaultWipe, Node: "n1", Group: "g1", Down: sec(50), Up: sec(52)}}
	if r := CheckAvailability([]Op{ok, una(500, 501)}, open); r.Unavailable != 1 || r.Outside != 0 {
		t.Errorf("open outage: %+v", r)
	}
	// Two members of one group out one after the other (the first seen
	// running again before the second went down) leave a majority, even
	// if the shards settle only after both.
	seq := []Outage{
		{Fault: FaultShardLeaderKills, Node: "n1", Group: "g1", Down: sec(10), Up: sec(25), Seen: sec(26), Back: sec(60)},
		{Fault: FaultShardLeaderKills, Node: "n2", Group: "g1", Down: sec(27), Up: sec(42), Seen: sec(43), Back: sec(60)},
	}
	for _, w := range AvailabilityWindows(seq) {
		if strings.Contains(w.Why, "no majority") {
			t.Errorf("sequential outages: window %+v", w)
		}
	}
	if r := CheckAvailability([]Op{una(21, 22)}, seq); r.Outside != 1 {
		t.Errorf("sequential outages, n1 down past its fail-over: %+v", r)
	}
	// A host stall opens a window to failoverWindow after it.
	stall := []Outage{{Fault: FaultHostStall, Node: "all", Down: sec(100), Up: sec(100.6), Back: sec(100.6)}}
	if r := CheckAvailability([]Op{una(101, 102), una(111, 112)}, stall); r.InWindows != 1 || r.Outside != 1 || r.Stalls != 1 ||
		r.LongestStall != 600*time.Millisecond {
		t.Errorf("host stall: %+v", r)
	}
	// The checked share: a run of 0–100 s with one window of 10–30 s.
	ops := []Op{una(0, 1), una(99, 100)}
	ops[0].Unavailable, ops[1].Unavailable = false, false
	r := CheckAvailability(ops, []Outage{{Node: "n1", Group: "g1", Down: sec(10), Up: sec(12), Back: sec(20)}})
	if r.Checked < 0.79 || r.Checked > 0.81 {
		t.Errorf("checked share %.3f, want 0.8", r.Checked)
	}
}

func TestShardsSettled(t *testing.T) {
	n1, n2, n3 := &Node{ID: "n1"}, &Node{ID: "n2"}, &Node{ID: "n3"}
	st := func(id string, rs ...ReplicaStatus) *Status { return &Status{NodeID: id, Group: "g1", Replicas: rs} }
	rep := func(sh string, leading bool, members ...string) ReplicaStatus {
		return ReplicaStatus{Shard: sh, Leading: leading, Owner: sh, Members: members}
	}
	all := []string{"n1", "n2", "n3"}
	sts := map[*Node]*Status{
		n1: st("n1", rep("n1", true, all...), rep("n2", false, all...)),
		n2: st("n2", rep("n1", false, all...), rep("n2", true, all...)),
		n3: st("n3"),
	}
	if why := shardsSettled(sts, defaultReplication); why != "" {
		t.Fatalf("settled: %s", why)
	}
	sts[n3] = st("n3", rep("n1", false, all...), rep("n2", true, all...))
	if why := shardsSettled(sts, defaultReplication); !strings.Contains(why, "leaders") {
		t.Errorf("two leaders: %q", why)
	}
	sts[n3] = st("n3", ReplicaStatus{Shard: "n3", Leading: true, Owner: "n3", Members: []string{"n1", "n3"}, Learners: []string{"n2"}})
	if why := shardsSettled(sts, defaultReplication); !strings.Contains(why, "catching up") {
		t.Errorf("learner: %q", why)
	}
	sts[n3] = st("n3", ReplicaStatus{Shard: "n3", Leading: true, Owner: "n3", Members: []string{"n1", "n2@x1", "n3"}})
	if why := shardsSettled(sts, defaultReplication); !strings.Contains(why, "lost replica") {
		t.Errorf("lost replica: %q", why)
	}
	sts[n3] = st("n3", ReplicaStatus{Shard: "n3", Leading: false, Owner: "n3", Members: all})
	sts[n1].Replicas = append(sts[n1].Replicas, ReplicaStatus{Shard: "n3", Leading: true, Owner: "n3", Members: all})
	if why := shardsSettled(sts, defaultReplication); !strings.Contains(why, "owner n3") {
		t.Errorf("led by another: %q", why)
	}
}
