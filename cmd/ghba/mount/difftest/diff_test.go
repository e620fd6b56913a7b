package difftest

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestTmpfsAgainstTmpfs runs the corpus and the generated sequences on two
// separate tmpfs mounts and requires them to agree: this validates the
// runner, and that nothing nondeterministic (inode numbers, times, the
// order of listings) leaks into the results.
func TestTmpfsAgainstTmpfs(t *testing.T) {
	cfg, err := ConfigFromEnv()
	if err != nil {
		t.Fatal(err)
	}
	Suite(t, TmpfsDir(t), TmpfsDir(t), cfg)
}

// TestTmpfsAgainstDir compares a tmpfs with the directory named by
// GHBA_DIFF_DIR (say a mount point), or with the default temporary
// directory's file system (ext4, overlay, ...) when GHBA_DIFF_DIR=tempdir,
// to see that the comparison rules are not tmpfs-specific. Skipped unless
// GHBA_DIFF_DIR is set.
func TestTmpfsAgainstDir(t *testing.T) {
	dir := os.Getenv(EnvDir)
	switch dir {
	case "":
		t.Skipf("set %s to a directory (or to \"tempdir\") to compare a tmpfs with it", EnvDir)
	case "tempdir":
		dir = t.TempDir()
	}
	cfg, err := ConfigFromEnv()
	if err != nil {
		t.Fatal(err)
	}
	var sfs unix.Statfs_t
	if err := unix.Statfs(dir, &sfs); err != nil {
		t.Fatalf("%s: %v", dir, err)
	}
	t.Logf("B = %s, file system magic %#x", dir, sfs.Type)
	Suite(t, TmpfsDir(t), dir, cfg)
}

func errnoByName(name string) (unix.Errno, bool) {
	if name == "ok" {
		return 0, true
	}
	for e := unix.Errno(1); e < 256; e++ {
		if unix.ErrnoName(e) == name {
			return e, true
		}
	}
	return 0, false
}

// TestCorpusExpectations checks the "# ERRNO" notes of the corpus files
// against a tmpfs, so that each file is known to exercise what it says.
func TestCorpusExpectations(t *testing.T) {
	dir := TmpfsDir(t)
	names, err := fs.Glob(corpusFS, "testdata/corpus/*.ops")
	if err != nil || len(names) < 5 {
		t.Fatalf("corpus: %v files, %v", len(names), err)
	}
	seqs, err := Corpus()
	if err != nil || len(seqs) != len(names) {
		t.Fatalf("Corpus: %d sequences, %v", len(seqs), err)
	}
	for _, name := range names {
		t.Run(path.Base(name), func(t *testing.T) {
			data, err := corpusFS.ReadFile(name)
			if err != nil {
				t.Fatal(err)
			}
			var ops []Op
			var want []string
			sc := bufio.NewScanner(strings.NewReader(string(data)))
			sc.Buffer(nil, 1<<20)
			for sc.Scan() {
				line := strings.TrimSpace(sc.Text())
				if line == "" || strings.HasPrefix(line, "#") {
					continue
				}
				op, comment, err := parseOpComment(line)
				if err != nil {
					t.Fatal(err)
				}
				ops = append(ops, op)
				want = append(want, comment)
			}
			work, err := workDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer removeAll(work)
			res, err := Run(work, ops)
			if err != nil {
				t.Fatal(err)
			}
			noted := 0
			for i, r := range res {
				w := strings.Fields(want[i])
				if len(w) == 0 {
					continue
				}
				e, ok := errnoByName(w[0])
				if !ok {
					continue
				}
				noted++
				if r.Errno != e {
					t.Errorf("op %d %v: %s, the file says %s", i, r.Op, r, w[0])
				}
			}
			if noted < len(ops)/2 {
				t.Errorf("only %d of %d ops note their errno", noted, len(ops))
			}
		})
	}
}

// failingTB records what a check reports instead of failing the test.
type failingTB struct {
	testing.TB
	errors []string
}

func (f *failingTB) Helper()           {}
func (f *failingTB) Error(args ...any) { f.errors = append(f.errors, fmt.Sprint(args...)) }
func (f *failingTB) Errorf(format string, args ...any) {
	f.errors = append(f.errors, fmt.Sprintf(format, args...))
}
func (f *failingTB) Fatalf(format string, args ...any) {
	f.TB.Fatalf("unexpected fatal: "+format, args...)
}

// TestDivergenceReport injects a fault into the B side (a rename of a file
// over a directory succeeds instead of failing with EISDIR, as a buggy
// mount might) and checks the report: the seed, the op, a minimised
// sequence that still diverges, and the rerun command.
func TestDivergenceReport(t *testing.T) {
	a, b := TmpfsDir(t), TmpfsDir(t)
	d := NewDiffer(a, b)
	d.run = func(root string, ops []Op) ([]Result, error) {
		res, err := Run(root, ops)
		if strings.HasPrefix(root, b+"/") {
			for i := range res {
				if res[i].Op.Kind == OpRename && res[i].Errno == unix.EISDIR {
					res[i].Errno = 0
				}
			}
		}
		return res, err
	}
	var seed uint64
	var div *Divergence
	for seed = 1; seed < 100; seed++ {
		var err error
		if div, err = d.Diff(Generate(seed, 200)); err != nil {
			t.Fatal(err)
		}
		if div != nil {
			break
		}
	}
	if div == nil {
		t.Fatal("no seed renames a file over a directory")
	}
	ftb := &failingTB{TB: t}
	if d.check(ftb, fmt.Sprintf("seed %d (200 ops)", seed), Generate(seed, 200), fmt.Sprintf("%s=%d %s=200", EnvSeed, seed, EnvOps), true) {
		t.Fatal("check passed")
	}
	if len(ftb.errors) != 1 {
		t.Fatalf("%d reports, want 1", len(ftb.errors))
	}
	report := ftb.errors[0]
	t.Logf("report:\n%s", report)
	for _, want := range []string{
		fmt.Sprintf("seed %d (200 ops)", seed),
		"errno EISDIR vs ok",
		"minimised to ",
		fmt.Sprintf("rerun: GHBA_DIFF_SEED=%d GHBA_DIFF_OPS=200 go test -tags hashicorpmetrics -count=1 -run '^TestDivergenceReport$' ./cmd/ghba/mount/difftest/", seed),
		"GHBA_DIFF_FILE=",
	} {
		if !strings.Contains(report, want) {
			t.Errorf("report lacks %q", want)
		}
	}
	small, sdiv, runs, err := d.Minimize(Generate(seed, 200), div)
	if err != nil {
		t.Fatal(err)
	}
	if sdiv == nil || sdiv.Op.Kind != OpRename || len(small) > 10 {
		t.Errorf("minimised to %d ops in %d runs, diverging at %v:\n%s", len(small), runs, sdiv, FormatSequence(small))
	}
	// No single op of the minimised sequence can go.
	for i := range small {
		less := slices.Delete(slices.Clone(small), i, i+1)
		if div, err := d.Diff(less); err != nil || div != nil {
			t.Errorf("the minimised sequence still diverges without op %d (%s): %v", i, small[i], err)
		}
	}
	if again, err := d.Diff(small); err != nil || again == nil {
		t.Errorf("the minimised sequence does not diverge: %v", err)
	}
	// the saved file
	i := strings.Index(report, "GHBA_DIFF_FILE=")
	file := strings.Fields(report[i+len("GHBA_DIFF_FILE="):])[0]
	file = strings.TrimSuffix(file, ",")
	defer os.Remove(file)
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	saved, err := ParseSequence(f)
	f.Close()
	if err != nil || FormatSequence(saved) != FormatSequence(small) {
		t.Errorf("saved sequence %s:\n%s\nwant\n%s (%v)", file, FormatSequence(saved), FormatSequence(small), err)
	}
}

// TestFinalTreeDivergence: results agree but the trees do not.
func TestFinalTreeDivergence(t *testing.T) {
	a, b := TmpfsDir(t), TmpfsDir(t)
	d := NewDiffer(a, b)
	d.run = func(root string, ops []Op) ([]Result, error) {
		res, err := Run(root, ops)
		if err == nil && strings.HasPrefix(root, b+"/") {
			err = os.WriteFile(filepath.Join(root, "f"), []byte("changed"), 0o644)
		}
		return res, err
	}
	ops, err := ParseSequence(strings.NewReader(`
mkdir path="d" mode=0755
open fd=0 path="f" flags=O_WRONLY|O_CREAT mode=0644
write fd=0 data="original"
close fd=0
stat path="d"
`))
	if err != nil {
		t.Fatal(err)
	}
	div, err := d.Diff(ops)
	if err != nil {
		t.Fatal(err)
	}
	if div == nil || div.Index != FinalState || !strings.Contains(div.Detail, `"f"`) {
		t.Fatalf("divergence %v, want one of the final trees at \"f\"", div)
	}
}

func TestTreeAndCompareTrees(t *testing.T) {
	a, b := TmpfsDir(t), TmpfsDir(t)
	build := func(root string) {
		ops, err := ParseSequence(strings.NewReader(`
mkdir path="d" mode=0750
mkdir path="d/e" mode=0000
open fd=0 path="d/f" flags=O_WRONLY|O_CREAT mode=0640
pwrite fd=0 off=100000 data="x"
symlink target="f" path="d/l"
`))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := Run(root, ops); err != nil {
			t.Fatal(err)
		}
	}
	build(a)
	build(b)
	sa, err := Tree(a)
	if err != nil {
		t.Fatal(err)
	}
	sb, err := Tree(b)
	if err != nil {
		t.Fatal(err)
	}
	sa.Entries[0].Perm, sb.Entries[0].Perm = 0, 0 // the mount roots are not ours
	if err := CompareTrees(sa, sb); err != nil {
		t.Fatalf("equal trees differ: %v", err)
	}
	var paths []string
	for _, e := range sa.Entries {
		paths = append(paths, e.Path)
	}
	if got := strings.Join(paths, " "); got != ". d d/e d/f d/l" {
		t.Errorf("paths %q", got)
	}
	if e := sa.Entries[3]; e.Size != 100001 || e.Perm != 0o640 || e.Hash == "" {
		t.Errorf("file entry %v", e)
	}
	if e := sa.Entries[4]; e.Target != "f" || e.Type != TypeSymlink {
		t.Errorf("link entry %v", e)
	}
	for _, mutate := range []func(root string) error{
		func(root string) error { return os.Chmod(filepath.Join(root, "d/f"), 0o600) },
		func(root string) error { return os.Lchown(filepath.Join(root, "d/l"), 1, 1) },
		func(root string) error { return os.WriteFile(filepath.Join(root, "d/g"), nil, 0o644) },
		func(root string) error { return os.Remove(filepath.Join(root, "d/l")) },
		func(root string) error {
			f, err := os.OpenFile(filepath.Join(root, "d/f"), os.O_WRONLY, 0)
			if err != nil {
				return err
			}
			defer f.Close()
			_, err = f.WriteAt([]byte("y"), 100000)
			return err
		},
	} {
		work, err := os.MkdirTemp(b, "m")
		if err != nil {
			t.Fatal(err)
		}
		build(work)
		before, err := Tree(work)
		if err != nil {
			t.Fatal(err)
		}
		if err := mutate(work); err != nil {
			t.Fatal(err)
		}
		after, err := Tree(work)
		if err != nil {
			t.Fatal(err)
		}
		if err := CompareTrees(before, after); err == nil {
			t.Errorf("a change went unnoticed:\n%s", after)
		}
	}
}

// TestTreeHardLinks: a snapshot says which paths share an inode, never
// with the inode numbers (two trees of one tmpfs have different ones and
// still agree), and CompareTrees finds trees whose entries all agree (link
// counts included) but whose names are grouped into inodes differently.
func TestTreeHardLinks(t *testing.T) {
	dir := TmpfsDir(t)
	build := func(links string) (string, Snapshot) {
		t.Helper()
		work, err := workDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { removeAll(work) })
		ops, err := ParseSequence(strings.NewReader(`
mkdir path="d" mode=0755
open fd=0 path="f" flags=O_WRONLY|O_CREAT mode=0644
close fd=0
open fd=0 path="h" flags=O_WRONLY|O_CREAT mode=0644
close fd=0
symlink target="f" path="l"
link from="l" to="d/l2"
` + links))
		if err != nil {
			t.Fatal(err)
		}
		res, err := Run(work, ops)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range res {
			if r.Errno != 0 {
				t.Fatalf("%v: %v", r.Op, r)
			}
		}
		s, err := Tree(work)
		if err != nil {
			t.Fatal(err)
		}
		s.Entries[0].Perm = 0
		return work, s
	}
	workA, a := build("link from=\"f\" to=\"d/g\"\nlink from=\"h\" to=\"i\"\n")
	workA2, a2 := build("link from=\"f\" to=\"d/g\"\nlink from=\"h\" to=\"i\"\n")
	_, b := build("link from=\"f\" to=\"i\"\nlink from=\"h\" to=\"d/g\"\n")
	var st1, st2 unix.Stat_t
	if unix.Lstat(filepath.Join(workA, "f"), &st1) != nil || unix.Lstat(filepath.Join(workA2, "f"), &st2) != nil || st1.Ino == st2.Ino {
		t.Fatalf("the two trees' f: inodes %d and %d, want different ones", st1.Ino, st2.Ino)
	}
	want := [][]string{{"d/g", "f"}, {"d/l2", "l"}, {"h", "i"}}
	if got := a.Links(); !slices.EqualFunc(got, want, slices.Equal) {
		t.Errorf("Links() = %q, want %q", got, want)
	}
	if e := a.Entries[4]; e.Path != "f" || e.SameAs != "d/g" || e.Nlink != 2 || !strings.Contains(e.String(), `same-inode-as="d/g"`) {
		t.Errorf("entry %v", e)
	}
	if err := CompareTrees(a, a2); err != nil {
		t.Errorf("equal trees (inodes numbered differently) differ: %v", err)
	}
	var div *Divergence
	if err := CompareTrees(a, b); !errors.As(err, &div) || !strings.Contains(div.Detail, `"d/g"`) ||
		div.A != `one inode named "d/g", "f"` || div.B != `one inode named "d/g", "h"` {
		t.Fatalf("CompareTrees of trees with other links: %v, want the names of d/g's inode", err)
	}
	// an inode with one name in one tree, two in the other (and all the
	// entries alike): a missing SameAs is a difference too
	c := Snapshot{Entries: slices.Clone(a.Entries)}
	for i := range c.Entries {
		if c.Entries[i].Path == "i" {
			c.Entries[i].SameAs = ""
		}
	}
	if err := CompareTrees(a, c); !errors.As(err, &div) || !strings.Contains(div.Detail, `"h"`) {
		t.Errorf("CompareTrees with a link left out: %v", err)
	}
	if err := CompareTrees(c, a); !errors.As(err, &div) || !strings.Contains(div.Detail, `"h"`) {
		t.Errorf("CompareTrees with a link left out (the other way): %v", err)
	}
}

// TestRunStaysInRoot: paths and targets that could leave the root are
// refused before anything runs, and the process's working directory and
// umask are untouched.
func TestRunStaysInRoot(t *testing.T) {
	dir := TmpfsDir(t)
	wd, _ := os.Getwd()
	old := unix.Umask(0o027)
	defer unix.Umask(old)
	for _, op := range []Op{
		{Kind: OpStat, Path: "../x"},
		{Kind: OpMkdir, Path: "/tmp/x"},
		{Kind: OpRename, Path: "a", To: "b/../../c"},
		{Kind: OpLink, Path: "a", To: "../c"},
		{Kind: OpLink, Path: "/etc/passwd", To: "c"},
		{Kind: OpSymlink, Target: "/", Path: "l"},
		{Kind: OpSymlink, Target: "..", Path: "l"},
		{Kind: OpRead, FD: MaxFD},
	} {
		if _, err := Run(dir, []Op{{Kind: OpMkdir, Path: "ok", Mode: 0o755}, op}); err == nil {
			t.Errorf("Run accepted %v", op)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "ok")); err == nil {
		t.Errorf("Run ran ops of a refused sequence")
	}
	res, err := Run(dir, []Op{{Kind: OpOpen, Path: "f", Flags: unix.O_CREAT | unix.O_WRONLY, Mode: 0o777}, {Kind: OpFstat}})
	if err != nil {
		t.Fatal(err)
	}
	if res[1].Stat == nil || res[1].Stat.Perm != 0o755 {
		t.Errorf("created with %v, want mode 0755 (Umask 022 whatever the process's)", res[1])
	}
	if now, _ := os.Getwd(); now != wd {
		t.Errorf("working directory moved from %s to %s", wd, now)
	}
	if got := unix.Umask(0o027); got != 0o027 {
		t.Errorf("umask %o, want 027", got)
	}
	if _, err := Run(filepath.Join(dir, "missing"), nil); err == nil {
		t.Errorf("Run in a missing directory: no error")
	}
}

// TestTimes checks the timestamp rules: exact values after utimens and in
// later stats, TimeNow and TimeOmit, and that a write or read forgets them.
func TestTimes(t *testing.T) {
	dir := TmpfsDir(t)
	ops, err := ParseSequence(strings.NewReader(`
open fd=0 path="f" flags=O_RDWR|O_CREAT mode=0644
utimens path="f" atime=100.000000001 mtime=200.5
stat path="f"
pwrite fd=0 off=0 data="x"
stat path="f"
pread fd=0 off=0 len=1
stat path="f"
utimens path="f" atime=NOW mtime=OMIT
mkdir path="d" mode=0755
utimens path="d" atime=5.0 mtime=6.0
stat path="d"
`))
	if err != nil {
		t.Fatal(err)
	}
	res, err := Run(dir, ops)
	if err != nil {
		t.Fatal(err)
	}
	exact := func(s, ns int64) Time { return Time{Kind: TimeExact, Sec: s, Nsec: ns} }
	for i, want := range map[int][2]Time{
		1:  {exact(100, 1), exact(200, 500_000_000)},
		2:  {exact(100, 1), exact(200, 500_000_000)},
		4:  {exact(100, 1), {}},
		6:  {{}, {}},
		7:  {{Kind: TimeNow}, {Kind: TimeOmit}},
		9:  {exact(5, 0), exact(6, 0)},
		10: {{}, {}},
	} {
		st := res[i].Stat
		if st == nil || st.Atime != want[0] || st.Mtime != want[1] {
			t.Errorf("op %d %v: %v, want atime %v mtime %v", i, ops[i], res[i], want[0], want[1])
		}
	}
}

func TestConfigFromEnv(t *testing.T) {
	t.Setenv(EnvSeeds, "")
	t.Setenv(EnvOps, "")
	t.Setenv(EnvBase, "")
	t.Setenv(EnvSeed, "")
	t.Setenv(EnvFile, "")
	t.Setenv(EnvMinimize, "")
	c, err := ConfigFromEnv()
	if err != nil || c.Seeds != DefaultSeeds || c.Ops != DefaultOps || c.Base != 1 || c.HasSeed || !c.Minimize {
		t.Errorf("defaults: %+v, %v", c, err)
	}
	t.Setenv(EnvSeed, "0x10")
	t.Setenv(EnvOps, "7")
	t.Setenv(EnvMinimize, "0")
	c, err = ConfigFromEnv()
	if err != nil || !c.HasSeed || c.Seed != 16 || c.Ops != 7 || c.Minimize {
		t.Errorf("set: %+v, %v", c, err)
	}
	t.Setenv(EnvSeeds, "many")
	if _, err := ConfigFromEnv(); err == nil {
		t.Errorf("%s=many accepted", EnvSeeds)
	}
}
