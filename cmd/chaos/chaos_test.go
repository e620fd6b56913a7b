package chaos

// The container fault suite. It needs the docker CLI and a reachable
// daemon; without them it FAILS (CI runs it). Developers can skip it with
// -short or GHBA_CHAOS=off.
//
//	go test -tags hashicorpmetrics -run TestChaos -count=1 -v ./cmd/chaos/   # the short run
//	make chaos DURATION=10m                                                  # a longer one
//
// Environment: GHBA_CHAOS_DURATION (default: the short run, one fault of
// each kind), GHBA_CHAOS_SEED (choices of faults, targets and operations),
// GHBA_CHAOS_GROUPS (2 or 3 groups of 3 nodes), GHBA_CHAOS_AUTO=1 (9 nodes
// with group auto and max_group_size 3, started one by one so that the
// groups form by splits; the faults add split-kill, first), GHBA_CHAOS_OUT
// (keep the history and logs there even when the run passes).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
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
	setupTimeout   = 3 * time.Minute  // mkdir of the workload's directories
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
	out      string
}

func loadRunConfig(t *testing.T) runConfig {
	t.Helper()
	rc := runConfig{groups: 2, seed: uint64(time.Now().UnixNano())}
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
	switch v := os.Getenv("GHBA_CHAOS_AUTO"); v {
	case "", "0":
	case "1":
		rc.auto, rc.groups = true, 3
	default:
		t.Fatalf("GHBA_CHAOS_AUTO=%q: want 1 or 0", v)
	}
	rc.out = os.Getenv("GHBA_CHAOS_OUT")
	return rc
}

// Report is what the history file holds.
type Report struct {
	Seed       uint64       `json:"seed"`
	Nodes      []*Node      `json:"nodes"`
	Faults     []FaultEvent `json:"faults"`
	Violations []string     `json:"violations"`
	Ops        []Op         `json:"ops"`
}

func TestChaos(t *testing.T) {
	if testing.Short() || os.Getenv("GHBA_CHAOS") == "off" {
		t.Skip("container fault suite skipped (-short or GHBA_CHAOS=off)")
	}
	rc := loadRunConfig(t)
	log := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelInfo}))
	autoEnv := ""
	if rc.auto {
		autoEnv = " GHBA_CHAOS_AUTO=1"
	}
	log.Info("chaos run", "seed", rc.seed, "groups", rc.groups, "auto", rc.auto, "duration", rc.duration,
		"reproduce", fmt.Sprintf("GHBA_CHAOS_SEED=%d GHBA_CHAOS_GROUPS=%d GHBA_CHAOS_DURATION=%s%s", rc.seed, rc.groups, rc.duration, autoEnv))
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
	if err := d.BuildImage(ctx, modRoot, image, labelRun+"="+prefix, labelOwner+"="+runOwner()); err != nil {
		t.Fatal(err)
	}

	cl, err := NewCluster(ctx, d, ClusterConfig{Prefix: prefix, Image: image, Groups: rc.groups, PerGroup: 3, Auto: rc.auto, Log: log, Rand: rng})
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
	var (
		recMu sync.Mutex
		rec   *Recorder
		inj   *Injector
		viol  []string
		// linInfo is porcupine's answer, once checked.
		linInfo *porcupine.LinearizationInfo
	)
	t.Cleanup(func() {
		if !t.Failed() && rc.out == "" {
			return
		}
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
		r := Report{Seed: rc.seed, Nodes: slices.Concat(cl.Nodes, cl.Retired), Violations: viol}
		if rec != nil {
			r.Ops = rec.Ops()
		}
		if inj != nil {
			r.Faults = inj.Events()
		}
		li := linInfo
		recMu.Unlock()
		// The evidence leaves the cluster's removal and the image's 90s.
		lctx, lcancel := cleanupContext(cleanupDeadline, 90*time.Second)
		defer lcancel()
		saveEvidence(lctx, t, dir, &r, li)
		cl.SaveLogs(lctx, dir)
		t.Logf("chaos evidence (history.json, linearizability.html, node logs) kept in %s", dir)
		fmt.Fprintf(os.Stderr, "chaos evidence kept in %s\n", dir)
	})

	if err := cl.Start(ctx); err != nil {
		t.Fatal(err)
	}
	formed := time.Now()

	// Eight directories: porcupine's search grows with the operations of
	// unknown outcome pending in one partition, so spread them.
	var dirs []string
	for i := range 8 {
		dirs = append(dirs, fmt.Sprintf("/chaos%d", i))
	}
	if err := makeDirs(ctx, cl.RPCAddrs(), dirs, log); err != nil {
		t.Fatal(err)
	}

	recMu.Lock()
	rec = NewRecorder()
	inj = NewInjector(cl, d, rng, rec, log)
	recMu.Unlock()
	w := &Workload{Dirs: dirs, Clients: workloadClient, Addrs: cl.RPCAddrs(), Seed: rng.Uint64(), Log: log}
	wctx, stopWork := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { w.Run(wctx, rec) })

	kinds := AllFaults
	if rc.auto {
		kinds = AutoFaults
	}
	faultErr := runFaults(ctx, inj, rng, kinds, rc.duration, runDeadline, log)
	if faultErr == nil {
		faultErr = sleep(ctx, quietAround)
	}
	stopWork()
	wg.Wait()
	if faultErr != nil {
		t.Errorf("faults: %v", faultErr)
	}

	// Heal and read everything back through every node.
	if err := cl.WaitConverged(ctx, recoverTimeout); err != nil {
		t.Errorf("after the faults: %v", err)
	}
	firstFinal := 0
	for _, o := range rec.Ops() {
		firstFinal = max(firstFinal, o.Client+1)
	}
	if err := FinalReads(ctx, rec, cl.RPCAddrs(), dirs, firstFinal, finalTimeout, log); err != nil {
		t.Errorf("final reads: %v", err)
	}

	ops := rec.Ops()
	var v []string
	for _, m := range WrongAnswers(ops) {
		v = append(v, "wrong answer: "+m)
	}
	v = append(v, Durability(ops)...)
	checkStart := time.Now()
	limit := min(checkTimeout+rc.duration/2, max(time.Until(runDeadline), time.Second))
	res, info := porcupine.CheckOperationsVerbose(Model(), PorcupineHistory(ops), limit)
	switch res {
	case porcupine.Illegal:
		v = append(v, "the history is not linearizable (see linearizability.html)")
	case porcupine.Unknown:
		t.Logf("linearizability check inconclusive after %s (too many operations with unknown outcome)", limit)
	}
	recMu.Lock()
	viol, linInfo = v, &info
	recMu.Unlock()
	logSummary(t, ops, inj.Events(), v, res, time.Since(checkStart), formed.Sub(started), time.Since(started))
	for _, m := range v {
		t.Errorf("violation: %s", m)
	}
}

// runFaults injects one fault of each of kinds (duration 0) or, after the
// first of kinds, random ones until duration has passed; it starts no fault that would not leave the
// run's deadline room for a typical fault and the run's tail (an error in
// the short run, which must inject every kind; a warning otherwise).
func runFaults(ctx context.Context, inj *Injector, rng *rand.Rand, kinds []string, duration time.Duration, deadline time.Time, log *slog.Logger) error {
	if err := sleep(ctx, quietAround); err != nil {
		return err
	}
	end := time.Now().Add(duration)
	for i := 0; ; i++ {
		var kind string
		switch {
		case duration == 0 && i < len(kinds):
			kind = kinds[i]
		case duration > 0 && i == 0:
			kind = kinds[0]
		case duration > 0 && time.Now().Before(end):
			kind = kinds[rng.IntN(len(kinds))]
		default:
			return nil
		}
		if left := time.Until(deadline); left < faultReserve+tailReserve {
			if duration == 0 {
				return fmt.Errorf("chaos: %s left before the run's deadline: no room for fault %s (the machine is too slow for -timeout)", left.Round(time.Second), kind)
			}
			log.Warn("stopping the faults early: the run's deadline is near (raise -timeout)", "left", left.Round(time.Second), "duration", duration)
			return nil
		}
		if err := inj.Inject(ctx, kind); err != nil {
			return err
		}
		if err := sleep(ctx, faultGap); err != nil {
			return err
		}
	}
}

// makeDirs creates the workload's directories (mkdir -p: idempotent, so
// retried across nodes until the cluster answers).
func makeDirs(ctx context.Context, addrs, dirs []string, log *slog.Logger) error {
	c := newClient(addrs, log)
	defer c.Close()
	for _, d := range dirs {
		err := poll(ctx, setupTimeout, func(ctx context.Context) (string, error) {
			mctx, cancel := context.WithTimeout(ctx, opTimeout)
			defer cancel()
			_, err := c.Mkdir(mctx, &rpc.MkdirRequest{Path: d, Mode: 0o755, Parents: true})
			switch {
			case err == nil:
				return "", nil
			case Classify(err) == ResWrong:
				return "", fmt.Errorf("chaos: mkdir %s: %w", d, err)
			}
			return err.Error(), nil
		})
		if err != nil {
			return fmt.Errorf("chaos: mkdir %s: %w", d, err)
		}
	}
	return nil
}

// saveEvidence writes history.json and porcupine's visualization (from li,
// or checked again if the run stopped before the check) into dir.
func saveEvidence(ctx context.Context, t *testing.T, dir string, r *Report, li *porcupine.LinearizationInfo) {
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
	if li == nil {
		limit := checkTimeout
		if dl, ok := ctx.Deadline(); ok {
			limit = min(limit, max(time.Until(dl)/2, time.Second))
		}
		_, info := porcupine.CheckOperationsVerbose(Model(), PorcupineHistory(r.Ops), limit)
		li = &info
	}
	var notes []porcupine.Annotation
	for _, f := range r.Faults {
		notes = append(notes, porcupine.Annotation{Tag: "faults", Start: f.Start, End: f.End,
			Description: f.Kind + " " + f.Target, Details: f.Err, BackgroundColor: "#f8d0d0"})
	}
	li.AddAnnotations(notes)
	if err := porcupine.VisualizePath(Model(), *li, filepath.Join(dir, "linearizability.html")); err != nil {
		t.Logf("visualize: %v", err)
	}
}

func logSummary(t *testing.T, ops []Op, faults []FaultEvent, v []string, res porcupine.CheckResult, checkTook, formTook, total time.Duration) {
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
	fmt.Fprintf(&b, "chaos summary: %d operations recorded; cluster formed in %s; run took %s; porcupine %v in %s\n",
		len(ops), formTook.Round(time.Second), total.Round(time.Second), res, checkTook.Round(time.Millisecond))
	for _, k := range keys {
		fmt.Fprintf(&b, "  %-22s %d\n", k, counts[k])
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
	fc := make(map[string]int)
	for _, f := range faults {
		fc[f.Kind]++
		fmt.Fprintf(&b, "  fault %-16s %-4s %s–%s %s\n", f.Kind, f.Target, ms(f.Start), ms(f.End), f.Err)
	}
	fmt.Fprintf(&b, "  faults by kind: %v\n  violations: %d", fc, len(v))
	t.Log(b.String())
}

// ---- The model and the checks, without docker ----

func at(kind, dir, name, to, result string, call, ret int64, entries ...string) Op {
	return Op{Kind: kind, Dir: dir, Name: name, To: to, Result: result, Call: call, Return: ret, Entries: entries}
}

func check(t *testing.T, ops []Op) porcupine.CheckResult {
	t.Helper()
	return porcupine.CheckOperationsTimeout(Model(), PorcupineHistory(ops), 10*time.Second)
}

func TestModelLinearizable(t *testing.T) {
	ops := []Op{
		at(OpCreate, "/d", "a", "", ResOK, 0, 10),
		at(OpStat, "/d", "a", "", ResOK, 11, 12),
		at(OpRename, "/d", "a", "b", ResOK, 13, 20),
		at(OpReadDir, "/d", "", "", ResOK, 15, 16, "a"), // concurrent with the rename
		at(OpReadDir, "/d", "", "", ResOK, 21, 22, "b"),
		at(OpCreate, "/d", "b", "", ResExist, 23, 24),
		at(OpUnlink, "/d", "b", "", ResOK, 25, 26),
		at(OpStat, "/d", "b", "", ResNotExist, 27, 28),
		at(OpCreate, "/e", "a", "", ResOK, 0, 5), // another partition
	}
	if got := check(t, ops); got != porcupine.Ok {
		t.Fatalf("check = %v, want Ok", got)
	}
}

func TestModelDetectsLostCreate(t *testing.T) {
	ops := []Op{
		at(OpCreate, "/d", "a", "", ResOK, 0, 10),
		at(OpReadDir, "/d", "", "", ResOK, 20, 21),
		at(OpStat, "/d", "a", "", ResNotExist, 22, 23),
	}
	ops[1].Final, ops[2].Final = true, true
	if got := check(t, ops); got != porcupine.Illegal {
		t.Fatalf("check = %v, want Illegal", got)
	}
	if d := Durability(ops); len(d) != 1 || !strings.Contains(d[0], "lost") {
		t.Fatalf("Durability = %q, want one lost write", d)
	}
}

func TestModelDetectsResurrection(t *testing.T) {
	ops := []Op{
		at(OpCreate, "/d", "a", "", ResOK, 0, 10),
		at(OpRename, "/d", "a", "c", ResOK, 11, 12),
		at(OpStat, "/d", "a", "", ResOK, 20, 21),
	}
	ops[2].Final = true
	if got := check(t, ops); got != porcupine.Illegal {
		t.Fatalf("check = %v, want Illegal", got)
	}
	if d := Durability(ops); len(d) != 1 || !strings.Contains(d[0], "came back") {
		t.Fatalf("Durability = %q, want one resurrection", d)
	}
}

func TestModelUnknownOutcome(t *testing.T) {
	// An unknown create may have been applied, late or never.
	for _, final := range [][]string{{"a"}, nil} {
		ops := []Op{
			at(OpCreate, "/d", "a", "", ResUnknown, 0, 10),
			at(OpReadDir, "/d", "", "", ResOK, 20, 21),
			at(OpReadDir, "/d", "", "", ResOK, 30, 31, final...),
		}
		if got := check(t, ops); got != porcupine.Ok {
			t.Fatalf("final %v: check = %v, want Ok", final, got)
		}
		if d := Durability(ops); len(d) != 0 {
			t.Fatalf("Durability = %q, want none", d)
		}
	}
	// But once seen, it cannot disappear again.
	ops := []Op{
		at(OpCreate, "/d", "a", "", ResUnknown, 0, 10),
		at(OpReadDir, "/d", "", "", ResOK, 20, 21, "a"),
		at(OpReadDir, "/d", "", "", ResOK, 30, 31),
	}
	if got := check(t, ops); got != porcupine.Illegal {
		t.Fatalf("check = %v, want Illegal", got)
	}
}

func TestClassify(t *testing.T) {
	for _, c := range []struct {
		err  error
		want string
	}{
		{nil, ResOK},
		{rpc.CodeNotExist.Err("x"), ResNotExist},
		{rpc.CodeExist.Err("x"), ResExist},
		{rpc.CodeUnavailable.Err("home down"), ResUnknown},
		{fmt.Errorf("rpc: no node answered: %w", rpc.ErrUnavailable), ResNotSent},
		{fmt.Errorf("x: %w: %w", rpc.ErrUnavailable, rpc.ErrOutcomeUnknown), ResUnknown},
		{context.DeadlineExceeded, ResUnknown},
		{rpc.CodeInternal.Err("boom"), ResWrong},
		{errors.New("strange"), ResWrong},
	} {
		if got := Classify(c.err); got != c.want {
			t.Errorf("Classify(%v) = %s, want %s", c.err, got, c.want)
		}
	}
}
