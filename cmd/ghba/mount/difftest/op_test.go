package difftest

import (
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// examples has at least one op of every kind, with the optional fields both
// set and not, odd strings and extreme values.
func examples() []Op {
	return []Op{
		{Kind: OpOpen, FD: 0, Path: "a/b", Flags: unix.O_RDWR | unix.O_CREAT | unix.O_EXCL | unix.O_TRUNC | unix.O_APPEND, Mode: 0o4755},
		{Kind: OpOpen, FD: 7, Path: "d", Flags: unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW},
		{Kind: OpOpen, FD: 1, Path: "", Flags: unix.O_WRONLY},
		{Kind: OpClose, FD: 3},
		{Kind: OpWrite, FD: 1, Len: 4097, Pat: 12345},
		{Kind: OpWrite, FD: 1, Data: "with \"quotes\", # and\nnewline \x00\xff"},
		{Kind: OpWrite, FD: 2},
		{Kind: OpPwrite, FD: 2, Off: 1 << 30, Data: "x"},
		{Kind: OpPwrite, FD: 2, Off: -1, Len: 1, Pat: 1 << 40},
		{Kind: OpRead, FD: 4, Len: 65536},
		{Kind: OpPread, FD: 5, Off: 9, Len: 0},
		{Kind: OpLseek, FD: 6, Off: -10, Whence: unix.SEEK_END},
		{Kind: OpLseek, FD: 6, Off: 10, Whence: unix.SEEK_CUR},
		{Kind: OpLseek, FD: 6, Off: 0, Whence: unix.SEEK_SET},
		{Kind: OpFtruncate, FD: 0, Size: -1},
		{Kind: OpFstat, FD: 1},
		{Kind: OpFsync, FD: 2},
		{Kind: OpFchmod, FD: 3, Mode: 0},
		{Kind: OpFchown, FD: 4, UID: -1, GID: 65534},
		{Kind: OpTruncate, Path: "x y", Size: 4 << 20},
		{Kind: OpMkdir, Path: "ünï/" + strings.Repeat("L", 256), Mode: 0o1777},
		{Kind: OpRmdir, Path: "."},
		{Kind: OpUnlink, Path: "nl\nname"},
		{Kind: OpRename, Path: "a", To: "b/c"},
		{Kind: OpRename, Path: "a", To: "b", Flags: unix.RENAME_NOREPLACE},
		{Kind: OpRename, Path: "a", To: "b", Flags: unix.RENAME_EXCHANGE},
		{Kind: OpSymlink, Target: "missing/\xff", Path: "l"},
		{Kind: OpSymlink, Target: "", Path: "l"},
		{Kind: OpReadlink, Path: "l"},
		{Kind: OpChmod, Path: "f", Mode: 0o7777},
		{Kind: OpChown, Path: "f", UID: 100000, GID: 0},
		{Kind: OpLchown, Path: "l", UID: 1, GID: -1},
		{Kind: OpUtimens, Path: "f", Atime: Time{Kind: TimeExact, Sec: 1_000_000_000, Nsec: 123}, Mtime: Time{Kind: TimeNow}},
		{Kind: OpUtimens, Path: "l", Atime: Time{Kind: TimeOmit}, Mtime: Time{Kind: TimeExact, Sec: 7_258_118_400, Nsec: 999_999_999}, NoFollow: true},
		{Kind: OpStat, Path: "a/b/"},
		{Kind: OpLstat, Path: "#not a comment"},
		{Kind: OpReaddir, Path: "d"},
		{Kind: OpAccess, Path: "f", Flags: unix.F_OK},
		{Kind: OpAccess, Path: "f", Flags: unix.R_OK | unix.W_OK | unix.X_OK},
		{Kind: OpMkfifo, Path: "p", Mode: 0o640},
		{Kind: OpSetxattr, Path: "f", Name: "user.a", Data: "v"},
		{Kind: OpSetxattr, Path: "d", Name: "user.\"quoted\" name", Len: 300, Pat: 7, Flags: unix.XATTR_CREATE | unix.XATTR_REPLACE},
		{Kind: OpGetxattr, Path: "f", Name: "", Len: 0},
		{Kind: OpGetxattr, Path: "l", Name: "nouser.a", Len: 512},
		{Kind: OpListxattr, Path: "f", Len: 3},
		{Kind: OpRemovexattr, Path: "f", Name: "user.a"},
		{Kind: OpMknod, Path: "c", Type: unix.S_IFCHR, Mode: 0o620, Dev: unix.Mkdev(1, 3)},
		{Kind: OpMknod, Path: "b", Type: unix.S_IFBLK, Mode: 0, Dev: unix.Mkdev(4095, 1<<20-1)},
		{Kind: OpMknod, Path: "s", Type: unix.S_IFSOCK, Mode: 0o777},
		{Kind: OpLink, Path: "a/f", To: "b/ünï g"},
		{Kind: OpLink, Path: "", To: "#x\n"},
	}
}

func TestParseRoundTrip(t *testing.T) {
	seen := map[Kind]bool{}
	for _, op := range examples() {
		seen[op.Kind] = true
		text := op.String()
		got, err := ParseOp(text)
		if err != nil {
			t.Errorf("ParseOp(%q): %v", text, err)
			continue
		}
		if got != op {
			t.Errorf("round trip of %q:\n got %#v\nwant %#v", text, got, op)
		}
		if strings.Contains(text, "\n") {
			t.Errorf("%q: the text form spans lines", text)
		}
	}
	for _, k := range Kinds() {
		if !seen[k] {
			t.Errorf("no example of %s", k)
		}
	}
	// whole generated sequences, through FormatSequence and ParseSequence
	for seed := uint64(1); seed <= 50; seed++ {
		ops := Generate(seed, 300)
		got, err := ParseSequence(strings.NewReader(FormatSequence(ops)))
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		if len(got) != len(ops) {
			t.Fatalf("seed %d: %d ops back, want %d", seed, len(got), len(ops))
		}
		for i := range ops {
			if got[i] != ops[i] {
				t.Fatalf("seed %d op %d: got %v, want %v", seed, i, got[i], ops[i])
			}
		}
	}
}

func TestParseLenient(t *testing.T) {
	for text, want := range map[string]Op{
		`rename  to="b"   from="a"   # EISDIR`:                 {Kind: OpRename, Path: "a", To: "b"},
		`link to="b" from="a" # EEXIST`:                        {Kind: OpLink, Path: "a", To: "b"},
		`open fd=1 path="f" flags=O_CREAT|O_WRONLY`:            {Kind: OpOpen, FD: 1, Path: "f", Flags: unix.O_CREAT | unix.O_WRONLY},
		`utimens path="f" atime=12.5 mtime=OMIT nofollow # ok`: {Kind: OpUtimens, Path: "f", Atime: Time{Kind: TimeExact, Sec: 12, Nsec: 500_000_000}, Mtime: Time{Kind: TimeOmit}, NoFollow: true},
		`write fd=0 data="a # b"`:                              {Kind: OpWrite, Data: "a # b"},
		`mkdir path="d" mode=755`:                              {Kind: OpMkdir, Path: "d", Mode: 0o755},
	} {
		got, err := ParseOp(text)
		if err != nil {
			t.Errorf("ParseOp(%q): %v", text, err)
			continue
		}
		if got != want {
			t.Errorf("ParseOp(%q) = %v, want %v", text, got, want)
		}
	}
	ops, err := ParseSequence(strings.NewReader("# a comment\n\n  stat path=\"a\"  \n#x\nfsync fd=1\n"))
	if err != nil || len(ops) != 2 {
		t.Errorf("ParseSequence: %v, %v", ops, err)
	}
}

func TestParseErrors(t *testing.T) {
	for _, text := range []string{
		``,
		`hardlink from="a" to="b"`,
		`link path="a" to="b"`,
		`link from="a"`,
		`link from="a" to="b" flags=NOREPLACE`,
		`link from="a" to="../b"`,
		`link from="/etc/passwd" to="b"`,
		`stat`,
		`stat path=a`,
		`stat path="a" path="b"`,
		`stat path="/etc/passwd"`,
		`stat path="a/../../b"`,
		`stat path=".."`,
		`rename from="a" to="../x"`,
		`symlink target="/etc" path="l"`,
		`symlink target="../.." path="l"`,
		`stat path="a\x00b"`,
		`stat path="unterminated`,
		`stat path="a"x`,
		`open fd=8 path="a" flags=O_RDONLY`,
		`open fd=-1 path="a" flags=O_RDONLY`,
		`open fd=0 path="a" flags=O_RDONLY|O_SYNC`,
		`open fd=0 path="a" flags=O_RDONLY mode=010000`,
		`open fd=0 path="a"`,
		`chmod path="a" mode=9`,
		`rename from="a" to="b" flags=WHITEOUT`,
		`lseek fd=0 off=0 whence=DATA`,
		`write fd=0`,
		`write fd=0 len=3`,
		`write fd=0 data="x" len=1 pat=2`,
		`read fd=0 len=2000000`,
		`utimens path="a" atime=NOW`,
		`utimens path="a" atime=1.0000000001 mtime=NOW`,
		`utimens path="a" atime=NOW mtime=NOW nofollow=1`,
		`chown path="a" uid=-2 gid=0`,
		`stat path="a" nofollow`,
		`access path="a" mode=RW`,
	} {
		if op, err := ParseOp(text); err == nil {
			t.Errorf("ParseOp(%q) = %v, want an error", text, op)
		}
	}
	if err := (Op{Kind: OpLink, Path: "a", To: "b", Flags: 1}).Validate(); err == nil {
		t.Errorf("a link with flags validated (linkat's flags are always 0)")
	}
	if _, err := ParseSequence(strings.NewReader("stat path=\"a\"\nbogus\n")); err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Errorf("ParseSequence error %v, want one naming line 2", err)
	}
}
