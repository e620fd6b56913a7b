package strace

import (
	"bytes"
	"strings"
	"testing"

	"github.com/ghba/ghba/routing/workload"
)

var fuzzSeeds = []string{
	`12345 10:11:12.123456 openat(AT_FDCWD, "/usr/lib/x.so", O_RDONLY|O_CLOEXEC) = 3`,
	`[pid  4242] 10:11:12.000001 stat("/a b", {st_mode=S_IFDIR|0755, st_size=4096, ...}) = 0`,
	`8407 18:19:48.940092 execve("/usr/bin/ls", ["ls", "-l", "lib"], 0x5642b3248eb8 /* 35 vars */ <unfinished ...>`,
	`8406 18:19:48.959679 <... wait4 resumed>[{WIFEXITED(s) && WEXITSTATUS(s) == 0}], 0, NULL) = 8408`,
	`12472 18:22:47.870849 openat(AT_FDCWD</tmp/stx>, "we ird/a>b,c\"d", O_RDONLY) = 3</tmp/stx/we ird/a\76b,c\"d>`,
	`5 10:00:00.000000 openat(AT_FDCWD, "\x2f\x65", O_RDONLY) = -1 ENOENT (No such file or directory) <0.000012>`,
	`8408 18:19:48.959676 +++ exited with 0 +++`,
	`8406 18:19:48.959691 --- SIGCHLD {si_signo=SIGCHLD} ---`,
	`10 10:00:00.000050 clone3({flags=CLONE_VM|CLONE_FS|CLONE_FILES|CLONE_THREAD, exit_signal=0}, 88) = 12`,
	`1 10:00:00.000005 renameat2(AT_FDCWD, "/t/e", AT_FDCWD, "/t/d", RENAME_NOREPLACE) = 0`,
	`strace: Process 12346 attached`,
	`stat("\101\0", 0x1) = 0`,
}

// FuzzParseLine feeds arbitrary bytes to the line parser and the argument
// decoders: they must not panic, and what they accept must be consistent.
func FuzzParseLine(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		l, err := ParseLine(s)
		if err != nil {
			return
		}
		switch l.Kind {
		case Call, Resumed:
			if !isName(l.Name) || l.Ret == "" {
				t.Fatalf("%q: accepted %+v", s, l)
			}
		case Unfinished:
			if !isName(l.Name) {
				t.Fatalf("%q: accepted %+v", s, l)
			}
		case Signal, Exit:
		default:
			t.Fatalf("%q: kind %v", s, l.Kind)
		}
		if l.PID < 0 || l.Time < 0 {
			t.Fatalf("%q: pid %d time %v", s, l.PID, l.Time)
		}
		for _, a := range SplitArgs(l.Args) {
			String(a)
			FD(a)
			HasFlag(a, "O_CREAT")
		}
		ParseResult(l.Ret)
	})
}

// FuzzConvert converts arbitrary input: Convert must not fail or panic,
// and its output must be a valid trace.
func FuzzConvert(f *testing.F) {
	f.Add(strings.Join(fuzzSeeds, "\n"), false)
	f.Add("1 10:00:00.000000 chdir(\"/d\") = 0\n1 10:00:00.000001 openat(AT_FDCWD, \"x\", O_RDONLY|O_CREAT) = 3\n1 10:00:00.000002 getdents64(3, 0x1, 10) = 0\n1 10:00:00.000003 rename(\"x\", \"/\") = 0\n", true)
	f.Fuzz(func(t *testing.T, in string, pids bool) {
		var buf bytes.Buffer
		w := workload.NewWriter(&buf)
		if _, err := Convert(strings.NewReader(in), w, Options{Cwd: "/c", PIDAsClient: pids}); err != nil {
			t.Fatalf("Convert: %v", err)
		}
		if err := w.Flush(); err != nil {
			t.Fatal(err)
		}
		if _, err := workload.ReadAll(&buf); err != nil {
			t.Fatalf("output does not parse: %v", err)
		}
	})
}
