package strace

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/ghba/ghba/routing/workload"
)

// convert runs Convert on the lines and returns the trace text.
func convert(t *testing.T, in string, opt Options) (string, Stats) {
	t.Helper()
	var buf bytes.Buffer
	w := workload.NewWriter(&buf)
	st, err := Convert(strings.NewReader(in), w, opt)
	if err != nil {
		t.Fatalf("Convert: %v", err)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	// Whatever the input, the output is a valid trace.
	if _, err := workload.ReadAll(bytes.NewReader(buf.Bytes())); err != nil {
		t.Fatalf("output does not parse: %v\n%s", err, buf.String())
	}
	return buf.String(), st
}

func TestConvert(t *testing.T) {
	for _, tc := range []struct {
		name    string
		opt     Options
		in      string
		want    string
		skipped map[string]int
	}{
		{
			name: "ops, cwd, fds, exists",
			opt:  Options{Cwd: "/home/u"},
			in: `100 10:00:00.000000 execve("/usr/bin/tool", ["tool"], 0x7ffc /* 3 vars */) = 0
100 10:00:00.000100 newfstatat(AT_FDCWD, "src", {st_mode=S_IFDIR|0755, st_size=4096, ...}, 0) = 0
100 10:00:00.000200 chdir("src") = 0
100 10:00:00.000300 openat(AT_FDCWD, ".", O_RDONLY|O_NONBLOCK|O_CLOEXEC|O_DIRECTORY) = 3
100 10:00:00.000400 getdents64(3, 0x5560 /* 4 entries */, 32768) = 112
100 10:00:00.000500 getdents64(3, 0x5560 /* 0 entries */, 32768) = 0
100 10:00:00.000600 newfstatat(3, "a.c", {st_mode=S_IFREG|0644, st_size=10, ...}, AT_SYMLINK_NOFOLLOW) = 0
100 10:00:00.000700 newfstatat(3, "", {st_mode=S_IFDIR|0755, st_size=4096, ...}, AT_EMPTY_PATH) = 0
100 10:00:00.000800 openat(AT_FDCWD, "../notes", O_RDONLY) = -1 ENOENT (No such file or directory)
100 10:00:00.000900 openat(AT_FDCWD, "a.o.tmp", O_WRONLY|O_CREAT|O_TRUNC, 0666) = 4
100 10:00:00.001000 rename("a.o.tmp", "a.o") = 0
100 10:00:00.001100 openat(AT_FDCWD, "a.c", O_RDWR|O_CREAT, 0666) = 5
100 10:00:00.001200 mkdir("out", 0777) = 0
100 10:00:00.001300 mkdir("/home/u", 0777) = -1 EEXIST (File exists)
100 10:00:00.001400 unlinkat(AT_FDCWD, "a.o", 0) = 0
100 10:00:00.001500 unlinkat(AT_FDCWD, "out", AT_REMOVEDIR) = 0
100 10:00:00.001600 access("/etc/ld.so.preload", R_OK) = -1 ENOENT (No such file or directory)
100 10:00:00.001700 readlink("/usr/bin/cc", "gcc", 4096) = 3
100 10:00:00.001800 creat("/tmp/x", 0644) = 6
100 10:00:00.001900 openat(AT_FDCWD, "/tmp/y", O_WRONLY|O_CREAT|O_EXCL, 0600) = 7
100 10:00:00.002000 symlink("a.c", "link.c") = 0
100 10:00:00.002100 unlink("/tmp/nothere") = -1 ENOENT (No such file or directory)
100 10:00:00.002200 openat(AT_FDCWD, "/proc/self/maps", O_RDONLY) = 8
100 10:00:00.002300 close(3) = 0
100 10:00:00.002400 exit_group(0) = ?
100 10:00:00.002500 +++ exited with 0 +++
`,
			want: `0 0 exists /home/u/
0 0 exists /home/u/src/
0 0 exists /home/u/src/a.c
0 0 exists /usr/bin/cc
0 0 exists /usr/bin/tool
0 0 stat /usr/bin/tool
0.0001 0 stat /home/u/src/
0.0002 0 stat /home/u/src/
0.0003 0 open /home/u/src/
0.0004 0 readdir /home/u/src
0.0006 0 stat /home/u/src/a.c
0.0008 0 stat /home/u/notes
0.0009 0 create /home/u/src/a.o.tmp
0.001 0 rename /home/u/src/a.o.tmp /home/u/src/a.o
0.0011 0 open /home/u/src/a.c
0.0012 0 mkdir /home/u/src/out
0.0013 0 stat /home/u/
0.0014 0 unlink /home/u/src/a.o
0.0015 0 rmdir /home/u/src/out
0.0016 0 stat /etc/ld.so.preload
0.0017 0 stat /usr/bin/cc
0.0018 0 create /tmp/x
0.0019 0 create /tmp/y
0.002 0 create /home/u/src/link.c
0.0021 0 stat /tmp/nothere
`,
			skipped: map[string]int{SkipRereaddir: 1, SkipFDOnly: 1, SkipSystem: 1, SkipOther: 1, SkipUnknownRet: 0},
		},
		{
			name: "-y decorations, no --cwd",
			in: `7 09:00:00.000000 openat(AT_FDCWD</work/m>, "go.mod", O_RDONLY|O_CLOEXEC) = 3</work/m/go.mod>
7 09:00:00.000001 newfstatat(AT_FDCWD</work/m>, "pkg", {st_mode=S_IFDIR|0755, st_size=4096, ...}, 0) = 0
7 09:00:00.000002 openat(AT_FDCWD</work/m>, "pkg", O_RDONLY|O_CLOEXEC) = 4</work/m/pkg>
7 09:00:00.000003 getdents64(4</work/m/pkg>, 0x1 /* 3 entries */, 8192) = 80
7 09:00:00.000004 getdents64(9</elsewhere/dir>, 0x1 /* 3 entries */, 8192) = 80
7 09:00:00.000005 unlinkat(4</work/m/pkg>, "old.go", 0) = 0
7 09:00:00.000006 openat(AT_FDCWD</work/m>, "we ird/a>b,c\"d", O_RDONLY) = 3</work/m/we ird/a\76b,c\"d>
`,
			want: `0 0 exists /elsewhere/dir/
0 0 exists /work/m/go.mod
0 0 exists /work/m/pkg/
0 0 exists /work/m/pkg/old.go
0 0 exists /work/m/we%20ird/a>b,c"d
0 0 open /work/m/go.mod
0.000001 0 stat /work/m/pkg/
0.000002 0 open /work/m/pkg/
0.000003 0 readdir /work/m/pkg
0.000004 0 readdir /elsewhere/dir
0.000005 0 unlink /work/m/pkg/old.go
0.000006 0 open /work/m/we%20ird/a>b,c"d
`,
		},
		{
			name: "unfinished, resumed, children, threads",
			opt:  Options{Cwd: "/w", PIDAsClient: true},
			in: `10 10:00:00.000000 chdir("/w/a") = 0
10 10:00:00.000010 clone(child_stack=NULL, flags=CLONE_CHILD_CLEARTID|CLONE_CHILD_SETTID|SIGCHLD <unfinished ...>
11 10:00:00.000020 openat(AT_FDCWD, "early", O_RDONLY) = 3
10 10:00:00.000030 <... clone resumed>, child_tidptr=0x7f) = 11
11 10:00:00.000040 openat(AT_FDCWD, "x", O_RDONLY <unfinished ...>
10 10:00:00.000050 clone3({flags=CLONE_VM|CLONE_FS|CLONE_FILES|CLONE_SIGHAND|CLONE_THREAD|CLONE_SYSVSEM, exit_signal=0, stack=0x7f, stack_size=0x8000}, 88) = 12
12 10:00:00.000060 chdir("sub") = 0
11 10:00:00.000070 <... openat resumed>) = 4
10 10:00:00.000080 stat("y", 0x7ffd) = -1 ENOENT (No such file or directory)
12 10:00:00.000090 getdents64(4, 0x1 /* 2 entries */, 8192) = 48
11 10:00:00.000100 getdents64(3, 0x1 /* 2 entries */, 8192) = 48
13 10:00:00.000110 stat("z", 0x7ffd) = -1 ENOENT (No such file or directory)
11 10:00:00.000120 vfork( <unfinished ...>
11 10:00:00.000130 +++ exited with 0 +++
`,
			// 11 ran before its clone returned: it started in the first
			// process's directory, which it then inherits anyway. 12 is a
			// thread of 10: same client, shared working directory.
			// getdents64 by 12 on fd 4 is unknown (10 never opened 4);
			// the listing by 11 shows that "early" is a directory. 13 was
			// never cloned: it starts in 10's directory.
			want: `0 0 exists /w/a/
0 0 exists /w/a/early/
0 0 exists /w/a/sub/
0 0 exists /w/a/x
0 0 stat /w/a/
0.00002 1 open /w/a/early/
0.00004 1 open /w/a/x
0.00006 0 stat /w/a/sub/
0.00008 0 stat /w/a/sub/y
0.0001 1 readdir /w/a/early
0.00011 2 stat /w/a/sub/z
`,
			skipped: map[string]int{SkipUnknownFD: 1, SkipNotResumed: 1},
		},
		{
			name: "midnight",
			in: `1 23:59:59.999000 stat("/a", {st_mode=S_IFREG|0644, ...}) = 0
1 00:00:00.001000 stat("/b", {st_mode=S_IFREG|0644, ...}) = 0
1 00:00:01.000000 stat("/c", {st_mode=S_IFREG|0644, ...}) = 0
`,
			want: `0 0 exists /a
0 0 exists /b
0 0 exists /c
0 0 stat /a
0.002 0 stat /b
1.001 0 stat /c
`,
		},
		{
			name: "no timestamps",
			in: `stat("/a", 0x1) = 0
garbage line
stat("/b", 0x1) = 0
`,
			want: `0 0 exists /a
0 0 exists /b
0 0 stat /a
0.000002 0 stat /b
`,
			skipped: map[string]int{SkipUnparsable: 1},
		},
		{
			name: "unknown cwd",
			in: `1 10:00:00.000000 stat("rel", 0x1) = 0
1 10:00:00.000001 chdir("/d") = 0
1 10:00:00.000002 stat("rel", 0x1) = 0
1 10:00:00.000003 stat("/abs/path"..., 0x1) = 0
strace: Process 2 attached
`,
			want: `0 0 exists /d/
0 0 exists /d/rel
0.000001 0 stat /d/
0.000002 0 stat /d/rel
`,
			skipped: map[string]int{SkipUnknownCwd: 1, SkipBadPath: 1, SkipMessage: 1},
		},
		{
			name: "working directory learned later",
			in: `1 10:00:00.000000 access("rel", F_OK) = 0
1 10:00:00.000001 rename("a", "b") = 0
1 10:00:00.000002 openat(AT_FDCWD</w>, "x", O_RDONLY) = 3
1 10:00:00.000003 stat("rel2", 0x1) = -1 ENOENT (No such file or directory)
2 10:00:00.000004 stat("y", 0x1) = 0
1 10:00:00.000005 clone(child_stack=NULL, flags=SIGCHLD) = 2
3 10:00:00.000006 stat("z", 0x1) = 0
3 10:00:00.000007 chdir("/v") = 0
3 10:00:00.000008 openat(AT_FDCWD</v>, "x", O_RDONLY) = 3
`,
			// 1's directory shows at its openat; 2 ran before its clone
			// returned and inherits it; 3 was never cloned and starts in
			// 1's directory.
			want: `0 0 exists /v/
0 0 exists /v/x
0 0 exists /w/a
0 0 exists /w/rel
0 0 exists /w/x
0 0 exists /w/y
0 0 exists /w/z
0 0 stat /w/rel
0.000001 0 rename /w/a /w/b
0.000002 0 open /w/x
0.000003 0 stat /w/rel2
0.000004 0 stat /w/y
0.000006 0 stat /w/z
0.000007 0 stat /v/
0.000008 0 open /v/x
`,
			skipped: map[string]int{SkipUnknownCwd: 0},
		},
		{
			name: "prefix, rewrite, drop failed",
			opt:  Options{Prefix: "/home/alice/src", DropFailed: true, Rewrites: []Rewrite{{"/home/alice/src", "/src"}, {"/home/alice", "/home/user"}}},
			in: `1 10:00:00.000000 stat("/home/alice/src/a", 0x1) = 0
1 10:00:00.000001 stat("/home/alice/srcx", 0x1) = 0
1 10:00:00.000002 stat("/home/alice/src/b", 0x1) = -1 ENOENT (No such file or directory)
1 10:00:00.000003 rename("/home/alice/src/a", "/tmp/a") = 0
1 10:00:00.000004 rename("/tmp/b", "/home/alice/src/b") = 0
1 10:00:00.000005 stat("/home/alice/src", 0x1) = 0
`,
			want: `0 0 exists /src/
0 0 exists /src/a
0 0 stat /src/a
0.000003 0 unlink /src/a
0.000004 0 create /src/b
0.000005 0 stat /src/
`,
			skipped: map[string]int{SkipPrefix: 1, SkipFailed: 1},
		},
		{
			name: "keep system, rewrite root",
			opt:  Options{KeepSystem: true, Rewrites: []Rewrite{{"/", "/s000"}}},
			in: `1 10:00:00.000000 openat(AT_FDCWD, "/proc/self/maps", O_RDONLY) = 3
1 10:00:00.000001 stat("/", {st_mode=S_IFDIR|0755, ...}) = 0
`,
			want: `0 0 exists /s000/
0 0 exists /s000/proc/self/maps
0 0 open /s000/proc/self/maps
0.000001 0 stat /s000/
`,
		},
		{
			name: "directory rename moves known paths",
			in: `1 10:00:00.000000 mkdir("/t/d", 0777) = 0
1 10:00:00.000001 openat(AT_FDCWD, "/t/d/f", O_WRONLY|O_CREAT, 0644) = 3
1 10:00:00.000002 rename("/t/d", "/t/e") = 0
1 10:00:00.000003 openat(AT_FDCWD, "/t/e/f", O_WRONLY|O_CREAT, 0644) = 3
1 10:00:00.000004 openat(AT_FDCWD, "/t/d/f", O_WRONLY|O_CREAT, 0644) = 3
1 10:00:00.000005 renameat2(AT_FDCWD, "/t/e", AT_FDCWD, "/t/d", RENAME_EXCHANGE) = 0
`,
			want: `0 0 mkdir /t/d
0.000001 0 create /t/d/f
0.000002 0 rename /t/d/ /t/e/
0.000003 0 open /t/e/f
0.000004 0 create /t/d/f
`,
			skipped: map[string]int{SkipExchange: 1},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, st := convert(t, tc.in, tc.opt)
			if got != tc.want {
				t.Errorf("got\n%s\nwant\n%s", got, tc.want)
			}
			for k, n := range tc.skipped {
				if st.Skipped[k] != n {
					t.Errorf("skipped %q: %d, want %d (all: %v)", k, st.Skipped[k], n, st.Skipped)
				}
			}
			if st.Lines != strings.Count(tc.in, "\n") {
				t.Errorf("%d lines, want %d", st.Lines, strings.Count(tc.in, "\n"))
			}
			if want := strings.Count(tc.want, "\n"); st.Records != want {
				t.Errorf("%d records, want %d", st.Records, want)
			}
		})
	}
}

func TestConvertClients(t *testing.T) {
	in := `5 10:00:00.000000 stat("/a", 0x1) = 0
6 10:00:00.000001 stat("/b", 0x1) = 0
5 10:00:00.000002 stat("/c", 0x1) = 0
7 10:00:00.000003 stat("/d", 0x1) = 0
`
	clients := func(opt Options) []int {
		text, st := convert(t, in, opt)
		recs, _ := workload.ReadAll(strings.NewReader(text))
		var out []int
		for _, r := range recs {
			if r.Op != workload.OpExists {
				out = append(out, r.Client)
			}
		}
		if max := 0; len(out) > 0 {
			for _, c := range out {
				if c > max {
					max = c
				}
			}
			if st.Clients != max+1 {
				t.Errorf("Stats.Clients %d, want %d", st.Clients, max+1)
			}
		}
		return out
	}
	if got := clients(Options{}); !reflect.DeepEqual(got, []int{0, 0, 0, 0}) {
		t.Errorf("default clients %v", got)
	}
	if got := clients(Options{PIDAsClient: true}); !reflect.DeepEqual(got, []int{0, 1, 0, 2}) {
		t.Errorf("--pid-as-client clients %v", got)
	}
}

func TestConvertLongLine(t *testing.T) {
	long := `1 10:00:00.000000 execve("/bin/x", ["` + strings.Repeat("a", maxLine) + `"], 0x1) = 0` + "\n"
	in := long + `1 10:00:00.000001 stat("/a", 0x1) = 0` + "\n" + long
	got, st := convert(t, in, Options{})
	if want := "0 0 exists /a\n0 0 stat /a\n"; got != want { // skipped lines give no time
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
	if st.Skipped[SkipTooLong] != 2 || st.Lines != 3 {
		t.Errorf("stats %+v", st)
	}
}

func TestConvertOptionErrors(t *testing.T) {
	for name, opt := range map[string]Options{
		"relative cwd":     {Cwd: "w"},
		"relative prefix":  {Prefix: "src"},
		"relative rewrite": {Rewrites: []Rewrite{{"/a", "b"}}},
	} {
		_, err := Convert(strings.NewReader(""), workload.NewWriter(&bytes.Buffer{}), opt)
		if !errors.Is(err, ErrOptions) {
			t.Errorf("%s: %v, want ErrOptions", name, err)
		}
	}
	for in, ok := range map[string]bool{"/a=/b": true, "/a=/": true, "/a": false, "a=/b": false, "/a=b": false} {
		if _, err := ParseRewrite(in); (err == nil) != ok {
			t.Errorf("ParseRewrite(%q): %v", in, err)
		}
	}
}

func TestWriteSummary(t *testing.T) {
	_, st := convert(t, "garbage\n1 10:00:00.000000 stat(\"/proc/x\", 0x1) = 0\n", Options{})
	var buf bytes.Buffer
	if err := st.WriteSummary(&buf); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"2 lines", "0 records", SkipUnparsable, SkipSystem} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("summary lacks %q:\n%s", want, buf.String())
		}
	}
}
