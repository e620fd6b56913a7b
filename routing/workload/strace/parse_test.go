package strace

import (
	"errors"
	"reflect"
	"testing"
	"time"
)

func tod(h, m, s, us int) time.Duration {
	return time.Duration(h)*time.Hour + time.Duration(m)*time.Minute + time.Duration(s)*time.Second + time.Duration(us)*time.Microsecond
}

func TestParseLine(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   string
		want Line
	}{
		{"openat -f -tt",
			`12345 10:11:12.123456 openat(AT_FDCWD, "/usr/lib/x.so", O_RDONLY|O_CLOEXEC) = 3`,
			Line{PID: 12345, Time: tod(10, 11, 12, 123456), HasTime: true, Kind: Call, Name: "openat",
				Args: `AT_FDCWD, "/usr/lib/x.so", O_RDONLY|O_CLOEXEC`, Ret: "3"}},
		{"two spaces after pid (strace -o)",
			`8406  18:19:48.938932 access("/etc/ld.so.preload", R_OK) = -1 ENOENT (No such file or directory)`,
			Line{PID: 8406, Time: tod(18, 19, 48, 938932), HasTime: true, Kind: Call, Name: "access",
				Args: `"/etc/ld.so.preload", R_OK`, Ret: "-1 ENOENT (No such file or directory)"}},
		{"stderr [pid N]",
			`[pid  4242] 10:11:12.000001 stat("/a b", {st_mode=S_IFDIR|0755, st_size=4096, ...}) = 0`,
			Line{PID: 4242, Time: tod(10, 11, 12, 1), HasTime: true, Kind: Call, Name: "stat",
				Args: `"/a b", {st_mode=S_IFDIR|0755, st_size=4096, ...}`, Ret: "0"}},
		{"no pid, no time",
			`unlink("x") = 0`,
			Line{Kind: Call, Name: "unlink", Args: `"x"`, Ret: "0"}},
		{"-ttt",
			`77 1700000000.500000 mkdir("/tmp/d", 0777) = 0`,
			Line{PID: 77, Time: 1700000000*time.Second + 500*time.Millisecond, HasTime: true, Kind: Call, Name: "mkdir",
				Args: `"/tmp/d", 0777`, Ret: "0"}},
		{"-t",
			`10:11:12 chdir("/usr") = 0`,
			Line{Time: tod(10, 11, 12, 0), HasTime: true, Kind: Call, Name: "chdir", Args: `"/usr"`, Ret: "0"}},
		{"-y decorations with a comma and escaped >",
			`12472 18:22:47.870849 openat(AT_FDCWD</tmp/stx>, "we ird/a>b,c\"d", O_RDONLY) = 3</tmp/stx/we ird/a\76b,c\"d>`,
			Line{PID: 12472, Time: tod(18, 22, 47, 870849), HasTime: true, Kind: Call, Name: "openat",
				Args: `AT_FDCWD</tmp/stx>, "we ird/a>b,c\"d", O_RDONLY`, Ret: `3</tmp/stx/we ird/a\76b,c\"d>`}},
		{"-T duration removed",
			`5 10:00:00.000000 openat(AT_FDCWD, "/x", O_RDONLY) = -1 ENOENT (No such file or directory) <0.000012>`,
			Line{PID: 5, Time: tod(10, 0, 0, 0), HasTime: true, Kind: Call, Name: "openat",
				Args: `AT_FDCWD, "/x", O_RDONLY`, Ret: "-1 ENOENT (No such file or directory)"}},
		{"parentheses inside a string",
			`1 00:00:00.1 stat("/a)b(", 0x7ffd) = 0`,
			Line{PID: 1, Time: 100 * time.Millisecond, HasTime: true, Kind: Call, Name: "stat", Args: `"/a)b(", 0x7ffd`, Ret: "0"}},
		{"unfinished",
			`8406 18:19:48.940043 vfork( <unfinished ...>`,
			Line{PID: 8406, Time: tod(18, 19, 48, 940043), HasTime: true, Kind: Unfinished, Name: "vfork"}},
		{"unfinished with arguments",
			`8407 18:19:48.940092 execve("/usr/bin/ls", ["ls", "-l", "lib"], 0x5642b3248eb8 /* 35 vars */ <unfinished ...>`,
			Line{PID: 8407, Time: tod(18, 19, 48, 940092), HasTime: true, Kind: Unfinished, Name: "execve",
				Args: `"/usr/bin/ls", ["ls", "-l", "lib"], 0x5642b3248eb8 /* 35 vars */`}},
		{"resumed",
			`8406 18:19:48.940132 <... vfork resumed>) = 8407`,
			Line{PID: 8406, Time: tod(18, 19, 48, 940132), HasTime: true, Kind: Resumed, Name: "vfork", Ret: "8407"}},
		{"resumed with arguments",
			`8406 18:19:48.959679 <... wait4 resumed>[{WIFEXITED(s) && WEXITSTATUS(s) == 0}], 0, NULL) = 8408`,
			Line{PID: 8406, Time: tod(18, 19, 48, 959679), HasTime: true, Kind: Resumed, Name: "wait4",
				Args: `[{WIFEXITED(s) && WEXITSTATUS(s) == 0}], 0, NULL`, Ret: "8408"}},
		{"exit",
			`8408 18:19:48.959676 +++ exited with 0 +++`,
			Line{PID: 8408, Time: tod(18, 19, 48, 959676), HasTime: true, Kind: Exit, Args: "exited with 0"}},
		{"killed",
			`9 +++ killed by SIGKILL +++`,
			Line{PID: 9, Kind: Exit, Args: "killed by SIGKILL"}},
		{"signal",
			`8406 18:19:48.959691 --- SIGCHLD {si_signo=SIGCHLD, si_code=CLD_EXITED, si_pid=8408} ---`,
			Line{PID: 8406, Time: tod(18, 19, 48, 959691), HasTime: true, Kind: Signal, Args: "SIGCHLD {si_signo=SIGCHLD, si_code=CLD_EXITED, si_pid=8408}"}},
		{"exit_group",
			`8408 18:19:48.959561 exit_group(0)     = ?`,
			Line{PID: 8408, Time: tod(18, 19, 48, 959561), HasTime: true, Kind: Call, Name: "exit_group", Args: "0", Ret: "?"}},
		{"CRLF",
			"1 00:00:01.000000 rmdir(\"/d\") = 0\r",
			Line{PID: 1, Time: time.Second, HasTime: true, Kind: Call, Name: "rmdir", Args: `"/d"`, Ret: "0"}},
		{"getdents64 comment",
			`8407 18:19:48.944769 getdents64(3</usr/lib>, 0x555afb18c790 /* 62 entries */, 32768) = 1928`,
			Line{PID: 8407, Time: tod(18, 19, 48, 944769), HasTime: true, Kind: Call, Name: "getdents64",
				Args: `3</usr/lib>, 0x555afb18c790 /* 62 entries */, 32768`, Ret: "1928"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseLine(tc.in)
			if err != nil {
				t.Fatalf("ParseLine: %v", err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestParseLineErrors(t *testing.T) {
	for _, in := range []string{
		"",
		"garbage",
		"12345",
		"12345 10:11:12.123456",
		`12345 10:11:12.123456 openat(AT_FDCWD, "/x", O_RDONLY)`, // no result
		`12345 10:11:12.123456 openat(AT_FDCWD, "/x`,             // cut line
		`12345 99:11:12.123456 stat("/x") = 0`,                   // bad clock
		`12345 10:11:12.1234567890 stat("/x") = 0`,               // too many digits
		`[pid 12 stat("/x") = 0`,
		`<... openat resumed) = 3`,
		`<... open at resumed>) = 3`,
		`1 stat("/x"}) = 0`,
		`1 st-at("/x") = 0`,
	} {
		if l, err := ParseLine(in); !errors.Is(err, ErrSyntax) {
			t.Errorf("ParseLine(%q) = %+v, %v; want ErrSyntax", in, l, err)
		}
	}
	for _, in := range []string{
		"strace: Process 12346 attached",
		"strace: Process 12346 detached",
	} {
		if _, err := ParseLine(in); !errors.Is(err, ErrMessage) {
			t.Errorf("ParseLine(%q): %v; want ErrMessage", in, err)
		}
	}
}

func TestString(t *testing.T) {
	for _, tc := range []struct {
		in        string
		want      string
		truncated bool
		ok        bool
	}{
		{`"/usr/lib/x.so"`, "/usr/lib/x.so", false, true},
		{`"/a b"`, "/a b", false, true},
		{`"\x41\x42"`, "AB", false, true},
		{`"\x2f\x65\x74\x63"`, "/etc", false, true},
		{`"x\ty\n\"q\"\\"`, "x\ty\n\"q\"\\", false, true},
		{`"\101\0\377"`, "A\x00\xff", false, true},
		{`"\1234"`, "S4", false, true},
		{`"caf\303\251"`, "café", false, true},
		{`"/very/long"...`, "/very/long", true, true},
		{`""`, "", false, true},
		{`/no/quotes`, "", false, false},
		{`"open`, "", false, false},
		{`"a" b`, "", false, false},
		{`"\x4"`, "", false, false},
		{`"\q"`, "", false, false},
		{`"\`, "", false, false},
		{`"\400"`, "", false, false},
	} {
		got, trunc, ok := String(tc.in)
		if got != tc.want || trunc != tc.truncated || ok != tc.ok {
			t.Errorf("String(%s) = %q, %v, %v; want %q, %v, %v", tc.in, got, trunc, ok, tc.want, tc.truncated, tc.ok)
		}
	}
}

func TestSplitArgs(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
	}{
		{``, nil},
		{`"/x"`, []string{`"/x"`}},
		{`AT_FDCWD, "/a,b", O_RDONLY|O_CLOEXEC`, []string{"AT_FDCWD", `"/a,b"`, "O_RDONLY|O_CLOEXEC"}},
		{`3</tmp/a,b>, "", {st_mode=S_IFREG|0644, st_size=1, ...}, AT_EMPTY_PATH`,
			[]string{"3</tmp/a,b>", `""`, "{st_mode=S_IFREG|0644, st_size=1, ...}", "AT_EMPTY_PATH"}},
		{`"/usr/bin/ls", ["ls", "-l"], 0x56 /* 35 vars */`, []string{`"/usr/bin/ls"`, `["ls", "-l"]`, "0x56 /* 35 vars */"}},
		{`AT_FDCWD, "/x"..., 0`, []string{"AT_FDCWD", `"/x"...`, "0"}},
		{`-1, `, []string{"-1", ""}},
	} {
		if got := SplitArgs(tc.in); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("SplitArgs(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestFD(t *testing.T) {
	for _, tc := range []struct {
		in   string
		fd   int
		cwd  bool
		path string
		ok   bool
	}{
		{"3", 3, false, "", true},
		{"3</usr/lib>", 3, false, "/usr/lib", true},
		{`4</tmp/we ird/a\76b>`, 4, false, "/tmp/we ird/a>b", true},
		{"AT_FDCWD", -100, true, "", true},
		{"AT_FDCWD</home/u>", -100, true, "/home/u", true},
		{"-100", -100, true, "", true},
		{"5<pipe:[1234]>", 5, false, "", true},
		{"-1", 0, false, "", false},
		{"x", 0, false, "", false},
	} {
		fd, cwd, p, ok := FD(tc.in)
		if fd != tc.fd || cwd != tc.cwd || p != tc.path || ok != tc.ok {
			t.Errorf("FD(%q) = %d, %v, %q, %v", tc.in, fd, cwd, p, ok)
		}
	}
}

func TestParseResult(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Result
		err  bool
	}{
		{"0", Result{Known: true}, false},
		{"3", Result{Known: true, Value: 3}, false},
		{"3</etc/passwd>", Result{Known: true, Value: 3, Path: "/etc/passwd"}, false},
		{`3</tmp/x\ty z>`, Result{Known: true, Value: 3, Path: "/tmp/x\ty z"}, false},
		{"-1 ENOENT (No such file or directory)", Result{Known: true, Value: -1, Errno: "ENOENT"}, false},
		{"-1 EEXIST (File exists)", Result{Known: true, Value: -1, Errno: "EEXIST"}, false},
		{"?", Result{}, false},
		{"? ERESTARTSYS (To be restarted if SA_RESTART is set)", Result{}, false},
		{"0x7f0000", Result{Known: true, Value: 0x7f0000}, false},
		{"-1", Result{Known: true, Value: -1, Errno: "EUNKNOWN"}, false},
		{"abc", Result{}, true},
	} {
		got, err := ParseResult(tc.in)
		if (err != nil) != tc.err || got != tc.want {
			t.Errorf("ParseResult(%q) = %+v, %v; want %+v (error %v)", tc.in, got, err, tc.want, tc.err)
		}
	}
}

func TestHasFlag(t *testing.T) {
	for _, tc := range []struct {
		arg, flag string
		want      bool
	}{
		{"O_RDONLY|O_CREAT|O_EXCL", "O_CREAT", true},
		{"O_RDONLY|O_CREAT|O_EXCL", "O_EXCL", true},
		{"O_RDONLY", "O_CREAT", false},
		{"{flags=O_RDWR|O_CREAT, resolve=RESOLVE_NO_SYMLINKS}", "O_CREAT", true},
		{"flags=CLONE_VM|CLONE_FS|CLONE_FILES", "CLONE_FS", true},
		{"flags=CLONE_VM|CLONE_FSX", "CLONE_FS", false},
		{"XCLONE_FS", "CLONE_FS", false},
		{"AT_REMOVEDIR", "AT_REMOVEDIR", true},
	} {
		if got := HasFlag(tc.arg, tc.flag); got != tc.want {
			t.Errorf("HasFlag(%q, %q) = %v", tc.arg, tc.flag, got)
		}
	}
}
