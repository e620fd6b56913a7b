package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ghba/ghba/routing/workload"
)

// runTrace runs "ghba trace ..." in process with stdin and returns stdout,
// stderr and the error.
func runTrace(t *testing.T, stdin string, args ...string) (string, string, error) {
	t.Helper()
	return execCLI(stdin, append([]string{"trace"}, args...)...)
}

const traceSample = `100 10:00:00.000000 execve("/usr/bin/tool", ["tool"], 0x7ffc /* 3 vars */) = 0
100 10:00:00.000100 openat(AT_FDCWD</home/alice/src>, "main.c", O_RDONLY) = 3</home/alice/src/main.c>
100 10:00:00.000200 clone(child_stack=NULL, flags=SIGCHLD <unfinished ...>
101 10:00:00.000300 newfstatat(AT_FDCWD</home/alice/src>, "inc/a.h", {st_mode=S_IFREG|0644, st_size=1, ...}, 0) = 0
100 10:00:00.000400 <... clone resumed>) = 101
101 10:00:00.000500 openat(AT_FDCWD</home/alice/src>, "/proc/self/status", O_RDONLY) = 4
101 10:00:00.000600 openat(AT_FDCWD</home/alice/src>, "out.o", O_WRONLY|O_CREAT|O_TRUNC, 0644) = -1 EACCES (Permission denied)
this is not strace output
`

func TestTraceFromStrace(t *testing.T) {
	for _, tc := range []struct {
		name   string
		args   []string
		want   string
		stderr []string
	}{
		{"defaults", nil, `0 0 exists /home/alice/src/inc/a.h
0 0 exists /home/alice/src/main.c
0 0 exists /usr/bin/tool
0 0 stat /usr/bin/tool
0.0001 0 open /home/alice/src/main.c
0.0003 0 stat /home/alice/src/inc/a.h
0.0006 0 stat /home/alice/src/out.o
`, []string{"8 lines", "7 records (3 exists) from 1 clients", "unparsable line", "path under /proc"}},
		{"pid as client, rewrite, drop failed", []string{"--pid-as-client", "--rewrite", "/home/alice=/home/user", "--drop-failed", "--quiet", "--comment", "from a test\nline 2"},
			`# from a test
# line 2
0 0 exists /home/user/src/inc/a.h
0 0 exists /home/user/src/main.c
0 0 exists /usr/bin/tool
0 0 stat /usr/bin/tool
0.0001 0 open /home/user/src/main.c
0.0003 1 stat /home/user/src/inc/a.h
`, nil},
		{"prefix, keep system", []string{"--prefix", "/proc", "--keep-system"}, `0 0 exists /proc/self/status
0.0005 0 open /proc/self/status
`, []string{"path outside --prefix"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, stderr, err := runTrace(t, traceSample, append([]string{"from-strace"}, tc.args...)...)
			if err != nil {
				t.Fatalf("from-strace: %v\n%s", err, stderr)
			}
			if out != tc.want {
				t.Errorf("stdout:\n%s\nwant:\n%s", out, tc.want)
			}
			for _, s := range tc.stderr {
				if !strings.Contains(stderr, s) {
					t.Errorf("stderr lacks %q:\n%s", s, stderr)
				}
			}
			if tc.stderr == nil && stderr != "" {
				t.Errorf("stderr not empty: %s", stderr)
			}
		})
	}
}

func TestTraceFromStraceFile(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "x.strace")
	if err := os.WriteFile(in, []byte(traceSample), 0o644); err != nil {
		t.Fatal(err)
	}
	fromFile, _, err := runTrace(t, "", "from-strace", in)
	if err != nil {
		t.Fatal(err)
	}
	fromStdin, _, err := runTrace(t, traceSample, "from-strace")
	if err != nil || fromFile != fromStdin {
		t.Errorf("file and stdin differ (%v):\n%s\n%s", err, fromFile, fromStdin)
	}
}

func TestTraceFromStraceUsage(t *testing.T) {
	for name, args := range map[string][]string{
		"bad rewrite":     {"from-strace", "--rewrite", "relative=/x"},
		"no equals":       {"from-strace", "--rewrite", "/x"},
		"relative cwd":    {"from-strace", "--cwd", "here"},
		"relative prefix": {"from-strace", "--prefix", "src"},
		"two files":       {"from-strace", "a", "b"},
		"missing file":    {"from-strace", filepath.Join(t.TempDir(), "none")},
		"unknown flag":    {"from-strace", "--nope"},
		"unknown command": {"to-strace"},
	} {
		if _, _, err := runTrace(t, "", args...); exitCode(err) != exitUsage {
			t.Errorf("%s: %v (exit %d), want a usage error", name, err, exitCode(err))
		}
	}
}

func TestTraceHelp(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"from-strace", "--help"}} {
		out, _, err := runTrace(t, "", args...)
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"strace -f -tt", "from-strace", "Examples:"} {
			if !strings.Contains(out, want) {
				t.Errorf("ghba trace %v: help lacks %q:\n%s", args, want, out)
			}
		}
	}
}

// TestTraceRecordedGoBuild checks the committed real trace
// (testdata/traces/go-build.trace, see its README): it parses, it is a
// multi-process trace with every kind of lookup and some namespace changes,
// the build's accesses repeat (three runs of one build), and no path of
// the recording machine is left.
func TestTraceRecordedGoBuild(t *testing.T) {
	f, err := os.Open("../../testdata/traces/go-build.trace")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	recs, err := workload.ReadAll(f)
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	s := workload.Stats(recs)
	t.Logf("%d records: %d exists, %d timed from %d clients over %v; ops %v", s.Records, s.Ops[workload.OpExists], s.Accesses(), s.Clients(), s.Duration(), s.Ops)
	if s.Records < 10000 || s.Ops[workload.OpExists] < 1000 {
		t.Errorf("only %d records, %d exists", s.Records, s.Ops[workload.OpExists])
	}
	if s.Clients() < 6 {
		t.Errorf("%d clients, want one per process (several)", s.Clients())
	}
	for _, op := range []workload.Op{workload.OpStat, workload.OpOpen, workload.OpReaddir, workload.OpCreate, workload.OpMkdir, workload.OpRmdir} {
		if s.Ops[op] == 0 {
			t.Errorf("no %s records", op)
		}
	}
	// Three runs of the same build: most paths are accessed at least three times.
	counts := map[string]int{}
	for _, r := range recs {
		if r.Op != workload.OpExists {
			counts[r.Path]++
		}
	}
	repeated := 0
	for _, n := range counts {
		if n >= 3 {
			repeated++
		}
	}
	if frac := float64(repeated) / float64(len(counts)); frac < 0.8 {
		t.Errorf("only %.2f of the paths are accessed 3 times or more", frac)
	}
	for _, r := range recs {
		for _, p := range []string{r.Path, r.Path2} {
			if strings.HasPrefix(p, "/root/") || strings.HasPrefix(p, "/work/") || strings.Contains(p, "bash_jobs") {
				t.Fatalf("machine path left in the trace: %+v", r)
			}
		}
	}
}
