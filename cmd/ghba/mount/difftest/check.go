package difftest

import (
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The environment variables the checks read (see ConfigFromEnv).
const (
	EnvSeeds    = "GHBA_DIFF_SEEDS"    // number of seeds, default DefaultSeeds
	EnvOps      = "GHBA_DIFF_OPS"      // ops per seed, default DefaultOps
	EnvBase     = "GHBA_DIFF_BASE"     // first seed, default 1
	EnvSeed     = "GHBA_DIFF_SEED"     // run this seed only (and no corpus)
	EnvFile     = "GHBA_DIFF_FILE"     // run this sequence file only
	EnvMinimize = "GHBA_DIFF_MINIMIZE" // 0: do not minimise failing sequences
	// EnvDir is read by this package's TestTmpfsAgainstDir only: the
	// directory to compare with a tmpfs, or "tempdir".
	EnvDir = "GHBA_DIFF_DIR"
)

// Defaults for `make test`: DefaultSeeds seeds of DefaultOps ops.
const (
	DefaultSeeds = 300
	DefaultOps   = 200
)

// maxFailures is how many failing seeds a Suite reports before it stops.
const maxFailures = 3

// Minimisation budget: at most this many runs of a candidate sequence and
// this much time per failure.
const (
	minimizeRuns = 600
	minimizeTime = 30 * time.Second
)

// Config says which sequences a Suite runs.
type Config struct {
	Seeds    int    // how many seeds, from Base on
	Ops      int    // ops per generated sequence
	Base     uint64 // the first seed
	Seed     uint64 // with HasSeed: this seed only
	HasSeed  bool
	File     string // if set: this sequence file only
	Minimize bool   // minimise a failing sequence before reporting it
	// Skip names corpus files the file system under test is known not to
	// match, each with the reason (a documented limitation): they are
	// reported as skipped with it, never silently left out.
	Skip map[string]string
}

// ConfigFromEnv reads the GHBA_DIFF_* variables (the Env* constants) over
// the defaults.
func ConfigFromEnv() (Config, error) {
	c := Config{Seeds: DefaultSeeds, Ops: DefaultOps, Base: 1, Minimize: true}
	var err error
	if v := os.Getenv(EnvSeeds); v != "" {
		if c.Seeds, err = strconv.Atoi(v); err != nil || c.Seeds < 0 {
			return c, fmt.Errorf("%s=%q: want a count", EnvSeeds, v)
		}
	}
	if v := os.Getenv(EnvOps); v != "" {
		if c.Ops, err = strconv.Atoi(v); err != nil || c.Ops < 0 {
			return c, fmt.Errorf("%s=%q: want a count", EnvOps, v)
		}
	}
	if v := os.Getenv(EnvBase); v != "" {
		if c.Base, err = strconv.ParseUint(v, 0, 64); err != nil {
			return c, fmt.Errorf("%s=%q: %w", EnvBase, v, err)
		}
	}
	if v := os.Getenv(EnvSeed); v != "" {
		if c.Seed, err = strconv.ParseUint(v, 0, 64); err != nil {
			return c, fmt.Errorf("%s=%q: %w", EnvSeed, v, err)
		}
		c.HasSeed = true
	}
	c.File = os.Getenv(EnvFile)
	if v := os.Getenv(EnvMinimize); v == "0" || v == "false" {
		c.Minimize = false
	}
	return c, nil
}

//go:embed testdata/corpus/*.ops
var corpusFS embed.FS

// Sequence is a named sequence of ops, such as a corpus file.
type Sequence struct {
	Name string
	Ops  []Op
}

// Corpus returns the handwritten sequences of testdata/corpus (embedded in
// the package, so tests of other packages can run them), sorted by name.
func Corpus() ([]Sequence, error) {
	names, err := fs.Glob(corpusFS, "testdata/corpus/*.ops")
	if err != nil {
		return nil, fmt.Errorf("corpus: %w", err)
	}
	var out []Sequence
	for _, n := range names {
		f, err := corpusFS.Open(n)
		if err != nil {
			return nil, fmt.Errorf("corpus: %w", err)
		}
		ops, err := ParseSequence(f)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("corpus %s: %w", path.Base(n), err)
		}
		out = append(out, Sequence{Name: path.Base(n), Ops: ops})
	}
	return out, nil
}

// Differ runs sequences on fresh work directories below two directories and
// compares them. A is the reference (tmpfs), B the file system under test.
// The zero value with DirA and DirB set is ready to use.
type Differ struct {
	DirA, DirB string
	// run replaces Run when set: tests inject divergences with it.
	run func(root string, ops []Op) ([]Result, error)
}

func (d *Differ) runOps(root string, ops []Op) ([]Result, error) {
	if d.run != nil {
		return d.run(root, ops)
	}
	return Run(root, ops)
}

// NewDiffer returns a Differ for dirA (the reference) and dirB.
func NewDiffer(dirA, dirB string) *Differ {
	return &Differ{DirA: dirA, DirB: dirB}
}

// workDir makes a fresh directory below parent with the same mode and
// owner on both sides whatever parent is (a tmpfs root is 1777, a temporary
// directory 0700, a mount root something else).
func workDir(parent string) (string, error) {
	dir, err := os.MkdirTemp(parent, "difftest-")
	if err != nil {
		return "", fmt.Errorf("work directory: %w", err)
	}
	if err := unix.Chown(dir, os.Geteuid(), os.Getegid()); err != nil {
		_ = os.Remove(dir)
		return "", fmt.Errorf("work directory: chown %s: %w", dir, err)
	}
	if err := unix.Chmod(dir, 0o755); err != nil {
		_ = os.Remove(dir)
		return "", fmt.Errorf("work directory: chmod %s: %w", dir, err)
	}
	return dir, nil
}

// removeAll removes a work directory, making directories writable and
// searchable first if a plain removal fails (not root, mode 0000).
func removeAll(dir string) error {
	if err := os.RemoveAll(dir); err == nil {
		return nil
	}
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if d != nil && d.IsDir() {
			_ = os.Chmod(p, 0o700)
		}
		return nil
	})
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("remove %s: %w", dir, err)
	}
	return nil
}

// Diff runs ops on a fresh work directory below each of DirA and DirB (the
// two at once), compares the results, then the final trees. The error is
// about setting up, not about the comparison.
func (d *Differ) Diff(ops []Op) (*Divergence, error) {
	workA, err := workDir(d.DirA)
	if err != nil {
		return nil, err
	}
	defer removeAll(workA)
	workB, err := workDir(d.DirB)
	if err != nil {
		return nil, err
	}
	defer removeAll(workB)
	var ra, rb []Result
	var ea, eb error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		rb, eb = d.runOps(workB, ops)
	}()
	ra, ea = d.runOps(workA, ops)
	wg.Wait()
	if err := errors.Join(ea, eb); err != nil {
		return nil, fmt.Errorf("run: %w", err)
	}
	var div *Divergence
	if err := Compare(ra, rb); err != nil {
		if errors.As(err, &div) {
			return div, nil
		}
		return nil, err
	}
	ta, err := Tree(workA)
	if err != nil {
		return nil, err
	}
	tb, err := Tree(workB)
	if err != nil {
		return nil, err
	}
	if err := CompareTrees(ta, tb); err != nil {
		if errors.As(err, &div) {
			return div, nil
		}
		return nil, err
	}
	return nil, nil
}

// Minimize shrinks ops, which diverge, to a shorter sequence that still
// diverges: first the prefix up to the first divergence (or the shortest
// diverging prefix when only the final trees differ), then removal of
// chunks of ops, halving the chunk size down to single ops. It stops after
// minimizeRuns runs or minimizeTime and returns the smallest sequence found,
// its divergence and the number of runs.
func (d *Differ) Minimize(ops []Op, div *Divergence) ([]Op, *Divergence, int, error) {
	runs := 0
	deadline := time.Now().Add(minimizeTime)
	budget := func() bool { return runs < minimizeRuns && time.Now().Before(deadline) }
	// try reports the divergence of cand, if any, cutting cand after the
	// diverging op.
	try := func(cand []Op) ([]Op, *Divergence, error) {
		runs++
		cdiv, err := d.Diff(cand)
		if err != nil || cdiv == nil {
			return nil, nil, err
		}
		if cdiv.Index >= 0 && cdiv.Index < len(cand) {
			cand = cand[:cdiv.Index+1]
		}
		return cand, cdiv, nil
	}
	if div.Index >= 0 && div.Index < len(ops) {
		ops = ops[:div.Index+1]
	} else {
		// only the final trees differ: binary search a diverging prefix
		lo, hi := 0, len(ops) // ops[:hi] diverges
		for lo+1 < hi && budget() {
			mid := (lo + hi) / 2
			cand, cdiv, err := try(ops[:mid])
			if err != nil {
				return ops, div, runs, err
			}
			if cdiv != nil {
				hi, div = len(cand), cdiv
				ops = cand
			} else {
				lo = mid
			}
		}
		ops = ops[:hi]
	}
	// chunk removal; the pass with single ops repeats while it removes some
	for chunk := max(len(ops)/2, 1); budget(); {
		removed := false
		for i := 0; i < len(ops) && budget(); {
			end := min(i+chunk, len(ops))
			cand := append(append([]Op(nil), ops[:i]...), ops[end:]...)
			if len(cand) == 0 {
				i = end
				continue
			}
			got, cdiv, err := try(cand)
			if err != nil {
				return ops, div, runs, err
			}
			if cdiv != nil {
				ops, div, removed = got, cdiv, true
				continue
			}
			i = end
		}
		if chunk > 1 {
			chunk /= 2
		} else if !removed {
			break
		}
	}
	return ops, div, runs, nil
}

// Check generates the sequence of seed (n ops), runs it on dirA (the
// reference) and dirB and reports a divergence with t.Errorf: the seed,
// the divergence, a minimised sequence and how to rerun. It returns whether
// the runs agreed.
func Check(t testing.TB, dirA, dirB string, seed uint64, n int) bool {
	t.Helper()
	rerun := fmt.Sprintf("%s=%d %s=%d", EnvSeed, seed, EnvOps, n)
	return NewDiffer(dirA, dirB).check(t, fmt.Sprintf("seed %d (%d ops)", seed, n), Generate(seed, n), rerun, true)
}

// CheckOps runs a given sequence (say a corpus file) like Check; label names
// it in the report.
func CheckOps(t testing.TB, dirA, dirB, label string, ops []Op) bool {
	t.Helper()
	return NewDiffer(dirA, dirB).check(t, label, ops, "", true)
}

func (d *Differ) check(t testing.TB, label string, ops []Op, rerunEnv string, minimize bool) bool {
	t.Helper()
	div, err := d.Diff(ops)
	if err != nil {
		t.Fatalf("difftest: %s: %v", label, err)
		return false
	}
	if div == nil {
		return true
	}
	var b strings.Builder
	fmt.Fprintf(&b, "difftest: %s diverges between\n  A = %s (reference)\n  B = %s\n", label, d.DirA, d.DirB)
	fmt.Fprintf(&b, "first divergence: %v\n", div)
	if minimize {
		small, sdiv, runs, err := d.Minimize(ops, div)
		switch {
		case err != nil:
			fmt.Fprintf(&b, "minimising failed: %v\n", err)
		default:
			fmt.Fprintf(&b, "minimised to %d of %d ops (%d runs); it diverges with %v\n", len(small), len(ops), runs, sdiv)
			fmt.Fprintf(&b, "minimised sequence:\n%s", indent(FormatSequence(small)))
			if f, err := os.CreateTemp("", "difftest-*.ops"); err == nil {
				fmt.Fprintf(f, "# %s, minimised\n%s", strings.ReplaceAll(label, "\n", " "), FormatSequence(small))
				f.Close()
				fmt.Fprintf(&b, "saved as %s: rerun it with %s=%s, or add it to testdata/corpus\n", f.Name(), EnvFile, f.Name())
			}
		}
	} else if len(ops) <= 50 {
		fmt.Fprintf(&b, "sequence:\n%s", indent(FormatSequence(ops)))
	}
	fmt.Fprintf(&b, "rerun: %s\n", RerunCommand(t, rerunEnv))
	t.Error(b.String())
	return false
}

func indent(s string) string {
	return "    " + strings.ReplaceAll(strings.TrimSuffix(s, "\n"), "\n", "\n    ") + "\n"
}

// RerunCommand returns the go test command that reruns the current test
// (seeded checks: its top-level test with env set; corpus checks: the
// subtest), from the module root.
func RerunCommand(t testing.TB, env string) string {
	parts := strings.Split(t.Name(), "/")
	if env != "" {
		parts = parts[:1]
	}
	for i, p := range parts {
		parts[i] = "^" + regexp.QuoteMeta(p) + "$"
	}
	cmd := fmt.Sprintf("go test -tags hashicorpmetrics -count=1 -run '%s' %s", strings.Join(parts, "/"), packageDir())
	if env != "" {
		cmd = env + " " + cmd
	}
	return cmd
}

// packageDir returns the test's package directory relative to the module
// root ("./cmd/ghba/mount/difftest/"), or "." if unknown.
func packageDir() string {
	wd, err := os.Getwd()
	if err != nil {
		return "."
	}
	for dir := wd; ; {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			rel, err := filepath.Rel(dir, wd)
			if err != nil {
				return "."
			}
			return "./" + filepath.ToSlash(rel) + "/"
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "."
		}
		dir = parent
	}
}

// Suite runs, as cfg (usually ConfigFromEnv) says, either one sequence file
// (cfg.File), or one seed (cfg.HasSeed), or the corpus (a subtest per file
// under "corpus") followed by cfg.Seeds seeds of cfg.Ops ops. It stops after
// a few failing seeds. dirA is the reference (tmpfs), dirB the file system
// under test.
func Suite(t *testing.T, dirA, dirB string, cfg Config) {
	t.Helper()
	d := NewDiffer(dirA, dirB)
	switch {
	case cfg.File != "":
		f, err := os.Open(cfg.File)
		if err != nil {
			t.Fatalf("difftest: %v", err)
		}
		ops, err := ParseSequence(f)
		f.Close()
		if err != nil {
			t.Fatalf("difftest: %s: %v", cfg.File, err)
		}
		d.check(t, cfg.File, ops, EnvFile+"="+cfg.File, cfg.Minimize)
		return
	case cfg.HasSeed:
		d.check(t, fmt.Sprintf("seed %d (%d ops)", cfg.Seed, cfg.Ops), Generate(cfg.Seed, cfg.Ops),
			fmt.Sprintf("%s=%d %s=%d", EnvSeed, cfg.Seed, EnvOps, cfg.Ops), cfg.Minimize)
		return
	}
	corpus, err := Corpus()
	if err != nil {
		t.Fatalf("difftest: %v", err)
	}
	t.Run("corpus", func(t *testing.T) {
		for _, s := range corpus {
			t.Run(s.Name, func(t *testing.T) {
				if why, ok := cfg.Skip[s.Name]; ok {
					t.Skipf("known limitation of the file system under test: %s", why)
				}
				d.check(t, "corpus "+s.Name, s.Ops, "", cfg.Minimize)
			})
		}
	})
	start := time.Now()
	failures := 0
	for i := 0; i < cfg.Seeds && failures < maxFailures; i++ {
		seed := cfg.Base + uint64(i)
		if !d.check(t, fmt.Sprintf("seed %d (%d ops)", seed, cfg.Ops), Generate(seed, cfg.Ops),
			fmt.Sprintf("%s=%d %s=%d", EnvSeed, seed, EnvOps, cfg.Ops), cfg.Minimize) {
			failures++
		}
	}
	if failures >= maxFailures {
		t.Errorf("difftest: stopped after %d failing seeds", failures)
	}
	t.Logf("difftest: %d seeds from %d, %d ops each, in %v", cfg.Seeds, cfg.Base, cfg.Ops, time.Since(start).Round(time.Millisecond))
}

// TmpfsDir returns a directory on a tmpfs for the test: as root, a fresh
// tmpfs (size=256m) mounted on a temporary directory and unmounted at
// cleanup; otherwise a temporary directory in /dev/shm if that is a tmpfs;
// otherwise it skips the test.
func TmpfsDir(t testing.TB) string {
	t.Helper()
	if os.Geteuid() == 0 {
		dir := t.TempDir()
		// nosuid and nodev, as FUSE mounts are (so an open of a device
		// node fails alike on both)
		err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "size=256m,mode=0755")
		if err == nil {
			t.Cleanup(func() {
				var err error
				for range 50 {
					if err = unix.Unmount(dir, 0); err != unix.EBUSY {
						break
					}
					time.Sleep(20 * time.Millisecond)
				}
				if err != nil {
					t.Errorf("difftest: unmount %s: %v", dir, err)
					_ = unix.Unmount(dir, unix.MNT_DETACH)
				}
			})
			return dir
		}
		t.Logf("difftest: cannot mount a tmpfs (%v); trying /dev/shm", err)
	}
	var sfs unix.Statfs_t
	if err := unix.Statfs("/dev/shm", &sfs); err != nil || sfs.Type != unix.TMPFS_MAGIC {
		t.Skip("difftest: no tmpfs: cannot mount one (not root, or not allowed) and /dev/shm is not a tmpfs")
	}
	dir, err := os.MkdirTemp("/dev/shm", "difftest-")
	if err != nil {
		t.Skipf("difftest: no tmpfs: %v", err)
	}
	t.Cleanup(func() {
		if err := removeAll(dir); err != nil {
			t.Errorf("difftest: %v", err)
		}
	})
	return dir
}
