package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/ghba/ghba/routing/sim"
	"github.com/ghba/ghba/routing/workload"
)

// Default trace sizes: every subcommand's default run takes seconds on a
// 2-core machine; --quick is smaller still (make demo).
const (
	defaultFiles = 100_000
	defaultOps   = 500_000
	quickFiles   = 20_000
	quickOps     = 100_000
)

// simOptions are the flags shared by every sim subcommand (persistent flags
// of "ghba sim").
type simOptions struct {
	seed  int64
	files int
	ops   int
	tif   int
	quick bool
	trace string
	json  bool
	out   string
	runs  int
	scan  float64
	// Repeated access sequences of the generated trace (workload.ScriptConfig).
	scripts     int
	scriptNoise float64
	scriptSkew  float64
}

func newSimCmd() *cobra.Command {
	o := &simOptions{}
	cmd := &cobra.Command{
		Use:   "sim",
		Short: "Trace-driven simulation of PBA, HBA and G-HBA",
		Long: `Trace-driven simulation of N metadata servers built from the real routing
structures (counting filters, LRU lists and filters, bit-sliced filter arrays
updated by deltas, group assignments, IDBFAs), after HBA §5–6 and G-HBA §3.

Traces are generated (routing/workload: a directory tree, Zipf-like
popularity where ~7% of files take ~85% of accesses, temporal locality,
creates, deletes and renames; --tif replays that many disjoint subtraces
together, HBA §5) or replayed from a file in the trace text format (--trace).

Subcommands print a simTable; --json prints one JSON object instead; --out DIR
also writes CSV files and PNG plots there. Progress goes to stderr.`,
		Example: `  ghba sim pba --servers 100 --bits-per-file 8 --json
  ghba sim hba --servers 10 --lru-entries 300
  ghba sim ghba --servers 100 --max-group 9 --out sim-out/
  ghba sim optimal-m --servers 30
  ghba sim migration --servers 100 --max-group 9 --json
  ghba sim spill --servers 100 --max-group 9
  ghba sim update --servers 20,100,1000`,
	}
	f := cmd.PersistentFlags()
	f.Int64Var(&o.seed, "seed", 1, "seed of the generated trace and of the placement and entry-server choices")
	f.IntVar(&o.files, "files", defaultFiles, "total initial files of the generated trace (divided among the --tif subtraces; directories add 10%)")
	f.IntVar(&o.ops, "ops", defaultOps, "total timed operations of the generated trace")
	f.IntVar(&o.tif, "tif", 1, "trace intensifying factor: disjoint subtraces replayed together (HBA §5)")
	f.BoolVar(&o.quick, "quick", false, fmt.Sprintf("small fast configuration (%d files, %d ops) unless --files/--ops are given", quickFiles, quickOps))
	f.StringVar(&o.trace, "trace", "", "replay this trace file (text format of routing/workload) instead of generating one")
	f.BoolVar(&o.json, "json", false, "print one JSON object instead of a table")
	f.StringVar(&o.out, "out", "", "also write CSV files and PNG plots into this directory")
	f.IntVar(&o.runs, "runs", 1, "replay with this many seeds (seed, seed+1, …) and average the results")
	f.Float64Var(&o.scan, "scan-frac", 0, "share of the generated trace's operations that sweep sequentially over the files, a stat of each once per sweep (a scan-heavy workload); 0 = none")
	f.IntVar(&o.scripts, "scripts", 0, "sessions that revisit related files in the generated trace: this many tasks, fixed ordered access sequences (half directory walks, half lists of related files of one subtree, like a build's headers or a project's files) that clients replay again and again, the popular ones more often (--script-skew), with small variations (--script-noise); about two thirds of the operations are then task steps; 0 = none (per subtree with --tif)")
	f.Float64Var(&o.scriptNoise, "script-noise", 0.1, "with --scripts: probability at each step of a task that the replay deviates (half the time the step is skipped, half the time a random access is interleaved)")
	f.Float64Var(&o.scriptSkew, "script-skew", 1, "with --scripts: Zipf exponent of the tasks' popularity (task i is started with probability ∝ 1/i^skew; 0 = all alike)")
	cmd.AddCommand(newSimPBACmd(o), newSimHBACmd(o), newSimGHBACmd(o), newSimOptimalMCmd(o), newSimMigrationCmd(o), newSimBudgetCmd(o), newSimNexusCmd(o))
	cmd.AddCommand(newSimSpillCmd(o), newSimUpdateCmd(o))
	return cmd
}

// runE is the RunE of a sim subcommand, in steps: the shared flags are
// validated (and --quick applied), check validates the subcommand's own
// flags (nil: none to check), the --out directory is created, then run
// runs. Nothing is written before check passes: a usage error leaves no
// --out directory behind.
func (o *simOptions) runE(check, run func(cmd *cobra.Command) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, _ []string) error {
		if err := o.validate(cmd); err != nil {
			return err
		}
		if check != nil {
			if err := check(cmd); err != nil {
				return err
			}
		}
		if err := o.prepareOut(); err != nil {
			return err
		}
		return run(cmd)
	}
}

// validate checks the shared flags and applies --quick.
func (o *simOptions) validate(cmd *cobra.Command) error {
	if o.quick {
		if !cmd.Flags().Changed("files") {
			o.files = quickFiles
		}
		if !cmd.Flags().Changed("ops") {
			o.ops = quickOps
		}
	}
	switch {
	case o.tif < 1:
		return usageErrorf("--tif %d: want at least 1", o.tif)
	case o.files < o.tif:
		return usageErrorf("--files %d: want at least one file per subtrace (--tif %d)", o.files, o.tif)
	case o.ops < o.tif:
		return usageErrorf("--ops %d: want at least one operation per subtrace (--tif %d)", o.ops, o.tif)
	case o.runs < 1:
		return usageErrorf("--runs %d: want at least 1", o.runs)
	case !(o.scan >= 0 && o.scan <= 1):
		return usageErrorf("--scan-frac %v: want a share in [0, 1]", o.scan)
	case o.scan > 0 && o.trace != "":
		return usageErrorf("--scan-frac applies to the generated trace, not to --trace")
	case o.scripts < 0 || o.scripts > 1<<20:
		return usageErrorf("--scripts %d: want 0 to %d", o.scripts, 1<<20)
	case o.scripts > 0 && o.trace != "":
		return usageErrorf("--scripts applies to the generated trace, not to --trace")
	case !(o.scriptNoise >= 0 && o.scriptNoise <= 1):
		return usageErrorf("--script-noise %v: want a probability in [0, 1]", o.scriptNoise)
	case !(o.scriptSkew >= 0 && o.scriptSkew <= 10):
		return usageErrorf("--script-skew %v: want an exponent in [0, 10]", o.scriptSkew)
	}
	if o.trace != "" {
		if _, err := os.Stat(o.trace); err != nil {
			return usageErrorf("--trace: %w", err)
		}
	}
	return nil
}

// workloadConfig is the generator configuration of one subtrace.
func (o *simOptions) workloadConfig() workload.Config {
	cfg := workload.DefaultConfig()
	cfg.Seed = o.seed
	cfg.Files = max(1, o.files/o.tif)
	cfg.Dirs = max(1, cfg.Files/10)
	cfg.Ops = o.ops / o.tif
	cfg.ScanFrac = o.scan
	if o.scripts > 0 {
		cfg.Scripts = workload.ScriptConfig{Count: o.scripts, Noise: o.scriptNoise, Skew: o.scriptSkew, Related: true}
	}
	return cfg
}

// source returns the trace: a replayable generator, or the trace file
// opened anew for every pass.
func (o *simOptions) source() sim.Source {
	if o.trace == "" {
		return sim.GeneratedSource(o.workloadConfig(), o.tif)
	}
	path := o.trace
	return func(ctx context.Context, emit func(workload.Record) error) error {
		f, err := os.Open(path)
		if err != nil {
			return fmt.Errorf("open trace: %w", err)
		}
		defer f.Close()
		if err := sim.ReaderSource(bufio.NewReaderSize(f, 1<<20))(ctx, emit); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		return nil
	}
}

// expectedRecords estimates the records of one pass, for the progress line.
func (o *simOptions) expectedRecords() int64 {
	if o.trace != "" {
		if st, err := os.Stat(o.trace); err == nil {
			return st.Size() / 40 // about 40 bytes per line
		}
		return 0
	}
	return int64(o.files+o.files/10) + int64(o.ops)
}

// describe is a one-line summary of the trace for table headers.
func (o *simOptions) describe() string {
	if o.trace != "" {
		return "trace " + o.trace
	}
	scan := ""
	if o.scan > 0 {
		scan = fmt.Sprintf(", scan %v", o.scan)
	}
	if o.scripts > 0 {
		scan += fmt.Sprintf(", %d scripts (noise %v, skew %v)", o.scripts, o.scriptNoise, o.scriptSkew)
	}
	return fmt.Sprintf("generated trace: %d files, %d ops, TIF %d, seed %d%s", o.files, o.ops, o.tif, o.seed, scan)
}

// simL1AdmissionFlag registers --l1-admission (HBA and G-HBA).
func simL1AdmissionFlag(cmd *cobra.Command, p *string) {
	cmd.Flags().StringVar(p, "l1-admission", "lru",
		"how a path enters a server's LRU list and so its L1 filter: lru (every access, HBA §4.2.2) or frequency (on its second access within a window of 10× the LRU size, counted by an adaptive Bloom filter, g-hba-survey §V; a one-time scan does not flush the hot set)")
}

// simL1Admission parses the value of --l1-admission.
func simL1Admission(s string) (sim.L1Admission, error) {
	a, err := sim.ParseL1Admission(s)
	if err != nil {
		return 0, usageErrorf("--l1-admission %q: want lru or frequency", s)
	}
	return a, nil
}

// replay builds a Replay of n servers with seed offset i (for --runs).
func (o *simOptions) replay(n, i int, p *simProgress) sim.Replay {
	return sim.Replay{Source: o.source(), Servers: n, Seed: o.seed + int64(i), Progress: p.update}
}

// simProgress prints a throttled progress line to stderr: rewritten in place
// on a terminal, a new line every few seconds otherwise.
type simProgress struct {
	w      io.Writer
	tty    bool
	label  string
	total  int64 // expected records per pass (0: unknown)
	passes int   // expected passes
	pass   int
	last   time.Time
	shown  bool
}

func newSimProgress(cmd *cobra.Command, o *simOptions, label string, passes int) *simProgress {
	w := cmd.ErrOrStderr()
	tty := false
	if f, ok := w.(*os.File); ok {
		if st, err := f.Stat(); err == nil {
			tty = st.Mode()&os.ModeCharDevice != 0
		}
	}
	return &simProgress{w: w, tty: tty, label: label, total: o.expectedRecords(), passes: passes}
}

// next starts a new pass described by what.
func (p *simProgress) next(what string) {
	p.pass++
	p.label = what
	p.last = time.Now() // first line after a second: quick runs stay silent
}

func (p *simProgress) update(records int64) {
	now := time.Now()
	every := time.Second
	if !p.tty {
		every = 5 * time.Second
	}
	if now.Sub(p.last) < every {
		return
	}
	p.last = now
	simPct := ""
	if p.total > 0 {
		simPct = fmt.Sprintf(" (%d%%)", min(100, 100*records/p.total))
	}
	if !p.tty {
		fmt.Fprintf(p.w, "sim: pass %d/%d %s: %d records%s\n", p.pass, p.passes, p.label, records, simPct)
		return
	}
	fmt.Fprintf(p.w, "\rsim: pass %d/%d %s: %d records%s   ", p.pass, p.passes, p.label, records, simPct)
	p.shown = true
}

func (p *simProgress) done() {
	if p.shown {
		fmt.Fprintln(p.w)
		p.shown = false
	}
}

// simError turns configuration errors into usage errors (exit code 2).
func simError(err error) error {
	if errors.Is(err, sim.ErrConfig) {
		return usageError{err}
	}
	return err
}

// simPrintJSON prints rs as one JSON object (simJSONResult) when --json is
// given.
func simPrintJSON[T any](cmd *cobra.Command, o *simOptions, rs []T) error {
	if !o.json {
		return nil
	}
	return writeJSON(cmd.OutOrStdout(), simJSONResult(rs))
}

// simJSONResult wraps several results as {"runs": [...]}; a single result is
// printed as is.
func simJSONResult[T any](rs []T) any {
	if len(rs) == 1 {
		return rs[0]
	}
	return struct {
		Runs []T `json:"runs"`
	}{rs}
}

// simTable is a simple aligned text simTable that can also be saved as CSV.
type simTable struct {
	header []string
	rows   [][]string
}

func (t *simTable) add(cells ...string) { t.rows = append(t.rows, cells) }

func (t *simTable) print(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, strings.Join(t.header, "\t")+"\t")
	for _, r := range t.rows {
		fmt.Fprintln(tw, strings.Join(r, "\t")+"\t")
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write table: %w", err)
	}
	return nil
}

// emit prints t under title unless --json, and writes it to csvName in the
// --out directory when one is given. more reports that --out was given (the
// caller then writes its charts there too).
func (t *simTable) emit(cmd *cobra.Command, o *simOptions, title, csvName string) (more bool, err error) {
	if !o.json {
		w := cmd.OutOrStdout()
		fmt.Fprintln(w, title)
		if err := t.print(w); err != nil {
			return false, err
		}
	}
	if o.out == "" {
		return false, nil
	}
	return true, t.writeCSV(o.out, csvName)
}

// writeCSV saves the table as dir/name.
func (t *simTable) writeCSV(dir, name string) error {
	var b strings.Builder
	quote := func(s string) string {
		if strings.ContainsAny(s, ",\"\n") {
			return `"` + strings.ReplaceAll(s, `"`, `""`) + `"`
		}
		return s
	}
	for _, r := range append([][]string{t.header}, t.rows...) {
		for i, c := range r {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(quote(strings.TrimSpace(c)))
		}
		b.WriteByte('\n')
	}
	if err := os.WriteFile(filepath.Join(dir, name), []byte(b.String()), 0o644); err != nil {
		return fmt.Errorf("write CSV: %w", err)
	}
	return nil
}

// prepareOut creates the --out directory.
func (o *simOptions) prepareOut() error {
	if o.out == "" {
		return nil
	}
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return fmt.Errorf("--out: %w", err)
	}
	return nil
}

// Number formatting for tables and CSV.
func simPct(x float64) string   { return strconv.FormatFloat(100*x, 'f', 2, 64) }
func simF4(x float64) string    { return strconv.FormatFloat(x, 'f', 4, 64) }
func simF2(x float64) string    { return strconv.FormatFloat(x, 'f', 2, 64) }
func simG(x float64) string     { return strconv.FormatFloat(x, 'g', 6, 64) }
func simItoa(n int) string      { return strconv.Itoa(n) }
func simI64(n int64) string     { return strconv.FormatInt(n, 10) }
func simRatio(x float64) string { return strconv.FormatFloat(x, 'f', 4, 64) }

// simPositiveInts checks a list flag.
func simPositiveInts(name string, xs []int, min int) error {
	if len(xs) == 0 {
		return usageErrorf("--%s: want at least one value", name)
	}
	for _, x := range xs {
		if x < min {
			return usageErrorf("--%s %d: want at least %d", name, x, min)
		}
	}
	return nil
}

// simPercentages converts a --threshold list (percent) to shares of bits.
func simPercentages(name string, xs []float64) ([]float64, error) {
	if len(xs) == 0 {
		return nil, usageErrorf("--%s: want at least one value", name)
	}
	out := make([]float64, len(xs))
	for i, x := range xs {
		if !(x >= 0 && x <= 100) {
			return nil, usageErrorf("--%s %v: want a percentage in [0, 100]", name, x)
		}
		out[i] = x / 100
	}
	return out, nil
}

// simRunAveraged replays the trace once per server count and seed (--runs)
// through run, which returns one result per configuration, and averages
// each configuration's results over the seeds. Results are ordered by
// server count, then configuration.
func simRunAveraged[R any](cmd *cobra.Command, o *simOptions, label string, servers []int,
	run func(ctx context.Context, r sim.Replay) ([]R, error)) ([]R, error) {
	p := newSimProgress(cmd, o, label, len(servers)*o.runs)
	var results []R
	for _, n := range servers {
		var per [][]R
		for i := 0; i < o.runs; i++ {
			p.next(fmt.Sprintf("%s N=%d seed=%d", label, n, o.seed+int64(i)))
			rs, err := run(cmd.Context(), o.replay(n, i, p))
			p.done()
			if err != nil {
				return nil, simError(err)
			}
			if per == nil {
				per = make([][]R, len(rs))
			}
			for j := range rs {
				per[j] = append(per[j], rs[j])
			}
		}
		for j := range per {
			results = append(results, sim.Mean(per[j]))
		}
	}
	return results, nil
}
