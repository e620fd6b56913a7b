package difftest

import (
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestGenerateDeterministic(t *testing.T) {
	for seed := uint64(0); seed < 20; seed++ {
		a, b := Generate(seed, 300), Generate(seed, 300)
		if FormatSequence(a) != FormatSequence(b) {
			t.Fatalf("seed %d: two sequences differ", seed)
		}
		short := Generate(seed, 120)
		if FormatSequence(short) != FormatSequence(a[:120]) {
			t.Fatalf("seed %d: Generate(seed, 120) is not a prefix of Generate(seed, 300)", seed)
		}
		for i, op := range a {
			if err := op.Validate(); err != nil {
				t.Fatalf("seed %d op %d (%v): %v", seed, i, op, err)
			}
		}
		if seed > 0 && FormatSequence(a) == FormatSequence(Generate(seed-1, 300)) {
			t.Fatalf("seeds %d and %d give the same sequence", seed-1, seed)
		}
	}
	if n := len(Generate(1, 0)); n != 0 {
		t.Errorf("Generate(1, 0) has %d ops", n)
	}
}

// TestGeneratorCoverage runs many generated sequences on a tmpfs and
// requires every op kind, and every error case the generator aims at, to
// occur, explicit times to be compared after utimens, and hard links to be
// used through their several names (see linkPatterns).
func TestGeneratorCoverage(t *testing.T) {
	dir := TmpfsDir(t)
	seen := map[string]int{}
	timed := 0
	for seed := uint64(1); seed <= 150; seed++ {
		work, err := workDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		res, err := Run(work, Generate(seed, 200))
		if err != nil {
			t.Fatal(err)
		}
		linkPatterns(res, seen)
		for _, r := range res {
			seen[r.Op.Kind.String()+" "+ErrnoString(r.Errno)]++
			if r.Op.Kind == OpRename && r.Op.Flags&unix.RENAME_NOREPLACE != 0 {
				seen["rename-noreplace "+ErrnoString(r.Errno)]++
			}
			if r.Op.Kind == OpStat && r.Stat != nil && r.Stat.Mtime.Kind == TimeExact {
				timed++
			}
			if (r.Op.Kind == OpStat || r.Op.Kind == OpLstat) && r.Stat != nil {
				seen["stat "+r.Stat.Type.String()]++
				if r.Stat.Nlink > 1 && r.Stat.Type != TypeDir {
					seen["stat nlink>1 "+r.Stat.Type.String()]++
				}
			}
			if r.Op.Kind == OpPwrite && r.Errno == 0 && r.Op.Off > 1<<20 {
				seen["pwrite far"]++
			}
			if r.Op.Kind == OpPread && r.Errno == 0 && r.N == 0 && r.Op.Len > 0 {
				seen["pread past EOF"]++
			}
			if r.Op.Kind == OpOpen && r.Errno == 0 {
				for _, f := range []struct {
					name string
					bit  int
				}{{"O_CREAT", unix.O_CREAT}, {"O_EXCL", unix.O_EXCL}, {"O_TRUNC", unix.O_TRUNC}, {"O_APPEND", unix.O_APPEND}} {
					if r.Op.Flags&f.bit != 0 {
						seen["open "+f.name]++
					}
				}
			}
			if r.Op.Kind == OpUtimens && r.Errno == 0 {
				for _, tm := range []TimeKind{r.Stat.Atime.Kind, r.Stat.Mtime.Kind} {
					seen[fmt.Sprintf("utimens time %d", tm)]++
				}
			}
		}
		if err := removeAll(work); err != nil {
			t.Fatal(err)
		}
	}
	want := []string{
		"open O_CREAT", "open O_EXCL", "open O_TRUNC", "open O_APPEND",
		"open EEXIST", "open EISDIR", "open ENOTDIR", "open ELOOP", "open ENOENT", "open ENAMETOOLONG",
		"pwrite far", "pread past EOF", "pread EINVAL", "pwrite EINVAL", "read EISDIR", "write EBADF",
		"ftruncate ok", "ftruncate EINVAL", "truncate ok", "truncate EISDIR",
		"rename ok", "rename EISDIR", "rename ENOTDIR", "rename ENOTEMPTY", "rename EINVAL", "rename ENOENT",
		"rename ENAMETOOLONG", "rename-noreplace EEXIST", "rename-noreplace ok",
		"mkdir ok", "mkdir EEXIST", "mkdir ENAMETOOLONG", "rmdir ok", "rmdir ENOTEMPTY", "rmdir ENOTDIR",
		"unlink ok", "unlink EISDIR", "symlink ok", "symlink EEXIST", "readlink ok", "readlink EINVAL",
		"chmod ok", "chown ok", "lchown ok", "fchmod ok", "fchown ok", "fsync ok", "lseek ok", "lseek EINVAL",
		"utimens ok", "utimens time 1", "utimens time 2", "utimens time 3",
		"stat ok", "stat ENOTDIR", "stat ELOOP", "lstat ok", "readdir ok", "readdir ENOTDIR",
		"access ok", "access EACCES", "close ok", "fstat ok",
		"mkfifo ok", "mknod ok", "mknod EEXIST", "stat fifo", "stat socket",
		"link ok", "link EEXIST", "link EPERM", "link ENOENT", "link ENOTDIR", "link ENAMETOOLONG",
		"stat nlink>1 file", "stat nlink>1 symlink",
		"links: write one name, read another", "links: write and read through two descriptors",
		"links: chmod one name, stat another", "links: unlink one name, stat another",
		"links: unlink one name, link another", "links: rename onto another name",
		"links: setxattr one name, getxattr another",
	}
	if os.Geteuid() == 0 { // (only root makes devices)
		want = append(want, "stat chardev", "stat blockdev")
	}
	for _, w := range want {
		if seen[w] == 0 {
			t.Errorf("never seen: %s", w)
		}
	}
	if timed == 0 {
		t.Errorf("no stat result compared an explicit mtime")
	}
	if t.Failed() || testing.Verbose() {
		var keys []string
		for k, n := range seen {
			keys = append(keys, fmt.Sprintf("%s=%d", k, n))
		}
		sort.Strings(keys)
		t.Logf("outcomes: %s", strings.Join(keys, " "))
	}
}

// linkPatterns counts in seen the uses of hard links Generate arranges
// (viaLinks): ops on one inode through two names, recognised in the results
// of a run.
func linkPatterns(res []Result, seen map[string]int) {
	ok := func(i int, k Kind) bool { return i < len(res) && res[i].Op.Kind == k && res[i].Errno == 0 }
	for i, r := range res {
		switch {
		case ok(i, OpOpen) && (ok(i+1, OpWrite) || ok(i+1, OpPwrite)) && res[i+1].N > 0 && ok(i+2, OpClose) &&
			ok(i+3, OpOpen) && res[i+3].Op.Path != r.Op.Path && ok(i+4, OpRead) && res[i+4].N > 0:
			seen["links: write one name, read another"]++
		case ok(i, OpOpen) && ok(i+1, OpOpen) && res[i+1].Op.Path != r.Op.Path && ok(i+2, OpPwrite) &&
			ok(i+3, OpPread) && res[i+3].N > 0 && string(res[i+3].Data) == string(res[i+2].Op.Payload()):
			seen["links: write and read through two descriptors"]++
		case ok(i, OpChmod) && ok(i+1, OpStat) && res[i+1].Op.Path != r.Op.Path && res[i+1].Stat.Perm == r.Op.Mode:
			seen["links: chmod one name, stat another"]++
		case ok(i, OpUnlink) && ok(i+1, OpStat) && res[i+1].Stat.Type == TypeFile && res[i+1].Op.Path != r.Op.Path:
			seen["links: unlink one name, stat another"]++
		case ok(i, OpRename) && r.Op.Path != r.Op.To && ok(i+1, OpLstat) && res[i+1].Op.Path == r.Op.Path &&
			ok(i+2, OpLstat) && res[i+2].Op.Path == r.Op.To:
			seen["links: rename onto another name"]++ // both names stay
		case ok(i, OpSetxattr) && ok(i+1, OpGetxattr) && res[i+1].Op.Path != r.Op.Path &&
			string(res[i+1].Data) == string(r.Op.Payload()):
			seen["links: setxattr one name, getxattr another"]++
		}
		if ok(i, OpLink) && i > 0 && res[i-1].Op.Kind == OpPread && i > 2 {
			for j := i - 1; j >= 0 && j >= i-6; j-- {
				if ok(j, OpUnlink) {
					seen["links: unlink one name, link another"]++
					break
				}
			}
		}
	}
}
