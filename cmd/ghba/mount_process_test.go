package main

// Multi-process tests of `ghba mount`: agents and mounts are processes of
// the built binary, as a user runs them; programs run on the mount as a
// user would run them. They need FUSE (/dev/fuse, root or fusermount3);
// without it they skip, unless GHBA_REQUIRE_FUSE=1 (set by .ci/run).

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ghba/ghba/cmd/ghba/mount/difftest"
	"github.com/ghba/ghba/node/contents/s3test"
	"github.com/ghba/ghba/rpc"
	"github.com/ghba/ghba/rpc/rpctest"
)

// procMount is a `ghba mount` process of a procCluster, in the
// foreground (so that the test can kill it).
type procMount struct {
	c      *procCluster
	name   string
	dir    string
	log    string
	cmd    *exec.Cmd
	exited chan struct{}
}

// needFUSE skips the test when FUSE cannot be used here, or fails it when
// GHBA_REQUIRE_FUSE is set.
func needFUSE(t testing.TB) {
	t.Helper()
	why := ""
	if _, err := os.Stat("/dev/fuse"); err != nil {
		why = "no /dev/fuse"
	} else if os.Geteuid() != 0 {
		if _, err := exec.LookPath("fusermount3"); err != nil {
			why = "not root and no fusermount3"
		}
	}
	if why == "" {
		return
	}
	if os.Getenv("GHBA_REQUIRE_FUSE") != "" {
		t.Fatalf("FUSE is required (GHBA_REQUIRE_FUSE) but cannot be used: %s", why)
	}
	t.Skipf("FUSE cannot be used here (%s); set GHBA_REQUIRE_FUSE=1 to fail instead", why)
}

// mountCluster starts a 3-agent cluster (R=3) with a file:// data store
// under the test's directory.
func mountCluster(t *testing.T) *procCluster {
	t.Helper()
	return mountClusterWith(t, "")
}

// mountClusterWith is mountCluster with the data store url ("": a file://
// store under the test's directory) and extra lines of agent config.
func mountClusterWith(t *testing.T, url string, config ...string) *procCluster {
	t.Helper()
	needFUSE(t)
	c := newProcClusterR(t, 0, 3)
	c.extraConfig = strings.Join(config, "")
	for range 3 {
		c.addNode()
	}
	c.startAll()
	c.waitReady("the cluster", c.nodes...)
	if url == "" {
		url = "file://" + filepath.Join(c.dir, "data-store")
	}
	// A new shard leader's first write waits for the leases an earlier
	// one may have granted (cache_lease): the first write may take that long.
	if out, errOut, code := c.all("--timeout", "60s", "data-store", "set", url); code != 0 {
		t.Fatalf("data-store set: exit %d: %s%s", code, out, errOut)
	}
	return c
}

// all runs a CLI command against every node's RPC address.
func (c *procCluster) all(args ...string) (string, string, int) {
	c.t.Helper()
	return c.cli(append([]string{"--addr", c.addrList()}, args...)...)
}

// addrList returns every node's RPC address, comma-separated.
func (c *procCluster) addrList() string {
	var a []string
	for _, n := range c.nodes {
		a = append(a, n.rpcAddr())
	}
	return strings.Join(a, ",")
}

// mount starts `ghba mount` on a new directory and waits until it serves.
func (c *procCluster) mount(name string, args ...string) *procMount {
	c.t.Helper()
	m := &procMount{c: c, name: name, dir: filepath.Join(c.dir, "mnt-"+name), log: filepath.Join(c.dir, "mount-"+name+".log")}
	if err := os.MkdirAll(m.dir, 0o755); err != nil {
		c.t.Fatal(err)
	}
	m.start(args...)
	c.t.Cleanup(func() {
		m.stop()
		if c.t.Failed() {
			c.t.Logf("last lines of the log of mount %s:\n%s", m.name, procTail(m.log, 40, 1<<16))
		}
	})
	return m
}

func (m *procMount) start(args ...string) {
	c := m.c
	f, err := os.OpenFile(m.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		c.t.Fatal(err)
	}
	defer f.Close()
	all := append([]string{"--addr", c.addrList(), "mount", "--log-level", "debug"}, args...)
	m.cmd = exec.Command(c.bin, append(all, m.dir)...)
	m.cmd.Env = procEnv()
	m.cmd.Stdout, m.cmd.Stderr = f, f
	m.cmd.SysProcAttr = procSysProcAttr()
	if err := procStart(m.cmd); err != nil {
		c.t.Fatalf("starting ghba mount: %v", err)
	}
	m.exited = make(chan struct{})
	go func() { m.cmd.Wait(); close(m.exited) }() //nolint:errcheck // the exit is read through exited
	c.waitFor("mount "+m.name+" to serve", time.Minute, nil, func() (bool, string) {
		select {
		case <-m.exited:
			c.t.Fatalf("ghba mount exited: %s", procTail(m.log, 20, 1<<16))
		default:
		}
		ok, err := isFuseMount(m.dir)
		return ok, fmt.Sprint(err)
	})
}

// stop unmounts (SIGTERM: the mount flushes and unmounts) and waits for
// the process; a mount left behind is detached.
func (m *procMount) stop() {
	if m.cmd.Process != nil {
		m.cmd.Process.Signal(syscall.SIGTERM) //nolint:errcheck // it may be gone
		select {
		case <-m.exited:
		case <-time.After(time.Minute):
			m.cmd.Process.Kill() //nolint:errcheck // it may be gone
			<-m.exited
		}
	}
	if ok, _ := isFuseMount(m.dir); ok {
		unix.Unmount(m.dir, unix.MNT_DETACH) //nolint:errcheck // best effort in cleanup
	}
}

// kill kills the mount process with SIGKILL.
func (m *procMount) kill() {
	m.cmd.Process.Kill() //nolint:errcheck // it may be gone
	<-m.exited
}

// sh runs a shell command in dir and fails the test on error.
func sh(t testing.TB, dir, script string) string {
	t.Helper()
	cmd := exec.Command("sh", "-ec", script)
	cmd.Dir = dir
	cmd.Env = append(procEnv(), "LC_ALL=C", "TZ=UTC", "HOME="+t.TempDir(),
		"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.org", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.org")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("in %s: %s: %v\n%s", dir, script, err, out.String())
	}
	return out.String()
}

// needTools skips the test when a program it runs is missing, or fails
// it under GHBA_REQUIRE_FUSE (CI installs them).
func needTools(t testing.TB, tools ...string) {
	t.Helper()
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("GHBA_REQUIRE_FUSE") != "" {
				t.Fatalf("%s is required on the mount tests' machine (GHBA_REQUIRE_FUSE)", tool)
			}
			t.Skipf("%s is not installed", tool)
		}
	}
}

// TestProcessMountDiff runs seeded system-call sequences and the corpus on
// a tmpfs directory and on the mount of a 3-agent cluster (R=3): results,
// errno values, listings and contents must be the same
// (cmd/ghba/mount/difftest; GHBA_DIFF_* reproduce a failing seed).
func TestProcessMountDiff(t *testing.T) {
	c := mountCluster(t)
	m := c.mount("diff", "--xattrs") // the sequences set extended attributes
	cfg, err := difftest.ConfigFromEnv()
	if err != nil {
		t.Fatal(err)
	}
	if os.Getenv(difftest.EnvSeeds) == "" {
		cfg.Seeds = 30 // each op is a round trip to the cluster: fewer than on tmpfs
	}
	cfg.Skip = map[string]string{
		"deep_paths.ops": "full paths of 4,096 bytes or more: the cluster keys metadata by full path (HBA) up to PATH_MAX; the mount answers ENAMETOOLONG (TestProcessMountDiff checks it)",
	}
	difftest.Suite(t, difftest.TmpfsDir(t), m.dir, cfg)

	// The limitation the corpus skips: a full path past PATH_MAX is
	// refused with ENAMETOOLONG, never EINVAL or EIO.
	deep := m.dir
	for i := 0; i < 17; i++ {
		deep = filepath.Join(deep, fmt.Sprintf("c%02d%s", i, strings.Repeat("L", 252)))
		err := os.Mkdir(deep, 0o755)
		if err == nil {
			continue
		}
		if !errors.Is(err, syscall.ENAMETOOLONG) || len(deep)-len(m.dir) < 4096 {
			t.Fatalf("mkdir at depth %d (%d bytes): %v, want ENAMETOOLONG past 4,095 bytes", i, len(deep)-len(m.dir), err)
		}
		return
	}
	t.Fatal("a full path of over 4,096 bytes was accepted")
}

// TestProcessMountS3 is the differential run with the contents in a real
// S3-compatible server (rclone serve s3, node/contents/s3test): the same
// results as tmpfs, and the files' blocks are objects in the bucket.
func TestProcessMountS3(t *testing.T) {
	needFUSE(t)
	url := s3test.Start(t) // the credentials go to the agents and the mount through the environment
	c := mountClusterWith(t, url)
	m := c.mount("s3", "--xattrs")
	cfg, err := difftest.ConfigFromEnv()
	if err != nil {
		t.Fatal(err)
	}
	if os.Getenv(difftest.EnvSeeds) == "" {
		cfg.Seeds = 10
	}
	cfg.Skip = map[string]string{"deep_paths.ops": "full paths of 4,096 bytes or more (TestProcessMountDiff)"}
	difftest.Suite(t, difftest.TmpfsDir(t), m.dir, cfg)
	want := bytes.Repeat([]byte("s3 block\n"), 1<<20) // 9 MiB: three blocks
	if err := os.WriteFile(filepath.Join(m.dir, "big"), want, 0o644); err != nil {
		t.Fatal(err)
	}
	m.stop()
	m.start()
	got, err := os.ReadFile(filepath.Join(m.dir, "big"))
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("a 9 MiB file read back after a remount: %d bytes, %v", len(got), err)
	}
}

// TestProcessMountPrograms runs real programs on the mount and compares
// what they make with the same on a local directory.
func TestProcessMountPrograms(t *testing.T) {
	needTools(t, "tar", "diff", "git", "rsync", "find", "cp", "getfattr", "setfattr")
	c := mountCluster(t)
	m := c.mount("programs", "--xattrs")
	local := t.TempDir()
	goroot := strings.TrimSpace(sh(t, ".", "go env GOROOT"))
	tarball := filepath.Join(t.TempDir(), "src.tar")
	// A real source tree: part of Go's own, with its many small files.
	sh(t, goroot, "tar cf "+tarball+" src/encoding src/container src/sort")

	t.Run("tar", func(t *testing.T) {
		sh(t, m.dir, "tar xf "+tarball)
		sh(t, local, "tar xf "+tarball)
		sh(t, m.dir, "diff -r src "+filepath.Join(local, "src"))
	})
	t.Run("ls-find-chmod-mv-rm", func(t *testing.T) {
		for _, dir := range []string{m.dir, local} {
			sh(t, dir, "cp -r src/container work && chmod -R go-w work && mv work/list work/list2 && touch -d 2020-01-01 work/heap/heap.go && touch -d 2021-01-01 stamp")
		}
		for _, script := range []string{
			// (a directory's size is the file system's own, and the time of
			// a copy is when it ran: not compared; the times touch set are)
			"ls -lR --time-style=+%s work | sed 's/^total .*//' | awk '$1 ~ /^d/ { $5 = \"-\" } $6 > 1700000000 { $6 = \"now\" } { print }'",
			"find work -newer stamp | sort",
			"find work -type f -perm -644 | sort",
			"stat -c '%n %s %a %F' work/list2/list.go",
		} {
			got, want := sh(t, m.dir, script), sh(t, local, script)
			if got != want {
				t.Errorf("%s:\nmount:\n%s\nlocal:\n%s", script, got, want)
			}
		}
		sh(t, m.dir, "rm -rf work && test ! -e work")
	})
	t.Run("git", func(t *testing.T) {
		sh(t, m.dir, "mkdir repo && cp -r src/sort repo/ && cd repo && git init -q && git add -A && git commit -qm first")
		if st := sh(t, filepath.Join(m.dir, "repo"), "git status --porcelain"); st != "" {
			t.Fatalf("git status after commit is not clean:\n%s", st)
		}
		sh(t, filepath.Join(m.dir, "repo"), "echo '// more' >> sort/sort.go && git commit -qam second && git log --oneline | wc -l | grep -q 2 && git fsck --no-progress")
	})
	t.Run("go-build", func(t *testing.T) {
		sh(t, m.dir, `mkdir hello && cd hello && printf 'module hello\n\ngo 1.21\n' > go.mod && printf 'package main\n\nimport "fmt"\n\nfunc main() { fmt.Println("hello from ghba") }\n' > main.go`)
		// The machine's build cache (sh gives the programs a HOME of their
		// own): the standard library is not built again, the module is.
		out, err := exec.Command("go", "env", "GOCACHE").Output()
		if err != nil {
			t.Fatalf("go env GOCACHE: %v", err)
		}
		gocache := strings.TrimSpace(string(out))
		sh(t, filepath.Join(m.dir, "hello"), "GOFLAGS=-mod=mod GOCACHE="+gocache+" go build -o hello . && ./hello | grep -q 'hello from ghba'")
	})
	t.Run("rsync", func(t *testing.T) {
		back := t.TempDir()
		sh(t, local, "rsync -a src/encoding/ "+filepath.Join(m.dir, "rs")+"/")
		sh(t, m.dir, "rsync -a rs/ "+back+"/")
		sh(t, local, "diff -r src/encoding "+back)
		// A second run finds nothing to do.
		if out := sh(t, local, "rsync -ai src/encoding/ "+filepath.Join(m.dir, "rs")+"/"); strings.TrimSpace(out) != "" {
			t.Errorf("second rsync changed something:\n%s", out)
		}
	})
	t.Run("hard-links", func(t *testing.T) {
		// ln, cp -al, rsync -H and find -samefile as on a local file
		// system: names of one inode share its link count, attributes and
		// contents, whichever shards home them.
		for _, dir := range []string{m.dir, local} {
			sh(t, dir, "mkdir hl && cd hl && mkdir a b && echo one > a/f && ln a/f b/g && ln b/g a/h && cp -al a c && echo two >> c/f && chmod 600 b/g && rm a/h")
		}
		for _, script := range []string{
			"cd hl && stat -c '%n %h %a %s' a/f b/g c/f c/h && cat b/g",
			"cd hl && find . -samefile a/f | sort",
			"cd hl && test ! -e a/h && echo new > c/new && mv c/new b/g && stat -c '%n %h' a/f b/g c/f c/h",
		} {
			got, want := sh(t, m.dir, script), sh(t, local, script)
			if got != want {
				t.Errorf("%s:\nmount:\n%s\nlocal:\n%s", script, got, want)
			}
		}
		back := t.TempDir()
		sh(t, m.dir, "rsync -aH hl/ "+back+"/")
		if got := sh(t, back, "stat -c '%h' a/f c/f c/h | sort -u"); got != "3\n" {
			t.Errorf("rsync -H from the mount: link counts %q, want 3", got)
		}
		sh(t, local, "rm -rf "+filepath.Join(m.dir, "hl2")+" && rsync -aH hl/ "+filepath.Join(m.dir, "hl2")+"/")
		if got := sh(t, m.dir, "stat -c '%h' hl2/a/f hl2/c/f hl2/c/h | sort -u && find hl2 -samefile hl2/a/f | wc -l"); got != "3\n3\n" {
			t.Errorf("rsync -H into the mount: %q, want 3 links and 3 names", got)
		}
		out, errOut, code := c.all("ln", "/hl/a/f", "/hl/a/cli")
		if code != 0 {
			t.Fatalf("ghba ln: exit %d: %s%s", code, out, errOut)
		}
		if got := sh(t, m.dir, "stat -c '%h' hl/a/cli"); got != "4\n" {
			t.Errorf("a name made by ghba ln: %q links, want 4", got)
		}
		if _, _, code := c.all("ln", "/hl/a", "/hl/d"); code != 6 {
			t.Errorf("ghba ln of a directory: exit %d, want 6", code)
		}
		sh(t, m.dir, "rm -r hl hl2 && test ! -e hl")
	})
	t.Run("import", func(t *testing.T) {
		// ghba import of a tree with hard links, a FIFO, a device and
		// extended attributes: through the mount, find -samefile,
		// getfattr -d and ls -l agree with the source (contents stay in
		// the source: only metadata is imported).
		src := t.TempDir()
		sh(t, src, "mkdir -p a b && echo one > a/f && ln a/f b/g && ln a/f a/h && echo two > a/solo && mkfifo -m 640 b/fifo && mknod b/chr c 1 3 && "+
			"setfattr -n user.k -v v1 a/f && setfattr -n user.other -v 'x y' a/solo && touch -d 2021-03-04 a/solo a/f")
		out, errOut, code := c.all("import", src, "--to", "/imp", "--xattrs")
		if code != 0 {
			t.Fatalf("ghba import: exit %d: %s%s", code, out, errOut)
		}
		dst := filepath.Join(m.dir, "imp")
		for _, script := range []string{
			"find . -samefile a/f | sort",
			"getfattr -d -R --absolute-names . 2>/dev/null | grep -v '^$' | sed 's|^# file: .*/|# file: |' | sort",
			"ls -lnR --time-style=+%s . | sed 's/^total .*//' | awk '$1 ~ /^d/ { $5 = \"-\"; $6 = \"-\" } { print }'",
		} {
			got, want := sh(t, dst, script), sh(t, src, script)
			if got != want {
				t.Errorf("%s:\nmount:\n%s\nsource:\n%s", script, got, want)
			}
		}
	})
	t.Run("special-files", func(t *testing.T) {
		// FIFOs, devices and sockets are made as on a local file system,
		// and a FIFO of the mount carries data between two processes (the
		// kernel's pipe: the cluster keeps only its inode). Devices need
		// root (CAP_MKNOD), which the mount tests have.
		for _, dir := range []string{m.dir, local} {
			sh(t, dir, "mkdir sp && cd sp && mkfifo -m 640 fifo && mknod chr c 1 3 && mknod blk b 7 0")
			l, err := net.Listen("unix", filepath.Join(dir, "sp", "sock"))
			if err != nil {
				t.Fatal(err)
			}
			l.(*net.UnixListener).SetUnlinkOnClose(false)
			l.Close()
		}
		script := "cd sp && stat -c '%n %F %t %T %a %h' fifo chr blk sock && ls -l | cut -c1-10 | sort"
		if got, want := sh(t, m.dir, script), sh(t, local, script); got != want {
			t.Errorf("%s:\nmount:\n%s\nlocal:\n%s", script, got, want)
		}
		if got := sh(t, m.dir, "cd sp && (echo through the fifo > fifo &) && cat fifo"); got != "through the fifo\n" {
			t.Errorf("read from the mount's FIFO: %q", got)
		}
		out, errOut, code := c.all("--json", "stat", "/sp/chr")
		if code != 0 || !strings.Contains(out, `"type": "char"`) || !strings.Contains(out, fmt.Sprintf(`"rdev": %d`, unix.Mkdev(1, 3))) {
			t.Fatalf("ghba stat /sp/chr: exit %d: %s%s", code, out, errOut)
		}
		sh(t, m.dir, "rm -r sp && test ! -e sp")
	})
	t.Run("xattrs", func(t *testing.T) {
		// Extended attributes as setxattr(2) and friends have them, and
		// as cp and rsync carry them in and out of the mount.
		f := filepath.Join(m.dir, "x.txt")
		if err := os.WriteFile(f, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
		mustXattr := func(what string, err, want error) {
			t.Helper()
			if !errors.Is(err, want) && !(want == nil && err == nil) {
				t.Fatalf("%s: %v, want %v", what, err, want)
			}
		}
		mustXattr("set", unix.Setxattr(f, "user.a", []byte("one"), 0), nil)
		mustXattr("set trusted", unix.Setxattr(f, "trusted.t", []byte("root only"), 0), nil)
		mustXattr("create existing", unix.Setxattr(f, "user.a", []byte("x"), unix.XATTR_CREATE), unix.EEXIST)
		mustXattr("replace missing", unix.Setxattr(f, "user.b", []byte("x"), unix.XATTR_REPLACE), unix.ENODATA)
		mustXattr("replace", unix.Setxattr(f, "user.a", []byte("two"), unix.XATTR_REPLACE), nil)
		if n, err := unix.Getxattr(f, "user.a", nil); err != nil || n != 3 {
			t.Fatalf("size of user.a: %d, %v", n, err)
		}
		if _, err := unix.Getxattr(f, "user.a", make([]byte, 2)); !errors.Is(err, unix.ERANGE) {
			t.Fatalf("get into a short buffer: %v, want ERANGE", err)
		}
		buf := make([]byte, 64)
		if n, err := unix.Getxattr(f, "user.a", buf); err != nil || string(buf[:n]) != "two" {
			t.Fatalf("get user.a: %q, %v", buf[:n], err)
		}
		if n, err := unix.Listxattr(f, buf); err != nil || string(buf[:n]) != "trusted.t\x00user.a\x00" {
			t.Fatalf("list: %q, %v", buf[:n], err)
		}
		mustXattr("remove", unix.Removexattr(f, "user.a"), nil)
		_, err := unix.Getxattr(f, "user.a", buf)
		mustXattr("get removed", err, unix.ENODATA)
		mustXattr("remove missing", unix.Removexattr(f, "user.a"), unix.ENODATA)
		out, errOut, code := c.all("xattr", "get", "/x.txt", "trusted.t")
		if code != 0 || out != "root only" {
			t.Fatalf("ghba xattr get: exit %d: %q %s", code, out, errOut)
		}
		if _, errOut, code := c.all("xattr", "set", "--create", "/x.txt", "user.cli", "from the CLI"); code != 0 {
			t.Fatalf("ghba xattr set: exit %d: %s", code, errOut)
		}
		if out, errOut, code := c.all("xattr", "list", "/x.txt"); code != 0 || out != "trusted.t\nuser.cli\n" {
			t.Fatalf("ghba xattr list: exit %d: %q %s", code, out, errOut)
		}
		if n, err := unix.Getxattr(f, "user.cli", buf); err != nil || string(buf[:n]) != "from the CLI" {
			t.Fatalf("the mount's user.cli after ghba xattr set: %q, %v", buf[:n], err)
		}
		if _, errOut, code := c.all("xattr", "rm", "/x.txt", "user.cli"); code != 0 {
			t.Fatalf("ghba xattr rm: exit %d: %s", code, errOut)
		}
		if _, _, code := c.all("xattr", "get", "/x.txt", "user.cli"); code != 1 {
			t.Fatalf("ghba xattr get of a removed attribute: exit %d, want 1", code)
		}
		// In with cp, out with rsync, both keeping them.
		src := filepath.Join(local, "withattrs")
		if err := os.WriteFile(src, []byte("data"), 0o644); err != nil {
			t.Fatal(err)
		}
		mustXattr("set locally", unix.Setxattr(src, "user.origin", []byte("local disk"), 0), nil)
		sh(t, local, "cp --preserve=xattr withattrs "+filepath.Join(m.dir, "copied"))
		back := t.TempDir()
		sh(t, m.dir, "rsync -aX copied "+back+"/")
		for _, p := range []string{filepath.Join(m.dir, "copied"), filepath.Join(back, "copied")} {
			if n, err := unix.Getxattr(p, "user.origin", buf); err != nil || string(buf[:n]) != "local disk" {
				t.Errorf("%s: user.origin %q, %v", p, buf[:n], err)
			}
		}
		sh(t, m.dir, "rm x.txt copied")
	})
	t.Run("deep-paths", func(t *testing.T) {
		// A tree deeper than PATH_MAX (4,096 bytes), made and read by
		// paths relative to a directory, as local file systems allow.
		comp := strings.Repeat("d", 200)
		fd, err := unix.Open(m.dir, unix.O_DIRECTORY|unix.O_RDONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		depth := 0
		for ; depth < 30; depth++ { // about 6,000 bytes
			if err := unix.Mkdirat(fd, comp, 0o755); err != nil {
				t.Fatalf("mkdir at depth %d: %v", depth, err)
			}
			next, err := unix.Openat(fd, comp, unix.O_DIRECTORY|unix.O_RDONLY, 0)
			unix.Close(fd)
			if err != nil {
				t.Fatalf("open at depth %d: %v", depth, err)
			}
			fd = next
		}
		ffd, err := unix.Openat(fd, "bottom.txt", unix.O_CREAT|unix.O_WRONLY, 0o644)
		if err == nil {
			_, err = unix.Write(ffd, []byte("at the bottom\n"))
			unix.Close(ffd)
		}
		unix.Close(fd)
		if err != nil {
			t.Fatalf("create at depth %d: %v", depth, err)
		}
		if got := sh(t, m.dir, "find "+comp+" | wc -l && find "+comp+" -name bottom.txt -execdir cat {} +"); got != "31\nat the bottom\n" {
			t.Errorf("find in the deep tree: %q", got)
		}
		sh(t, m.dir, "rm -rf "+comp+" && test ! -e "+comp)
	})
	t.Run("cli-sees-mount", func(t *testing.T) {
		if err := os.WriteFile(filepath.Join(m.dir, "sized"), bytes.Repeat([]byte("x"), 12345), 0o644); err != nil {
			t.Fatal(err)
		}
		out, errOut, code := c.all("--json", "stat", "/sized")
		if code != 0 || !strings.Contains(out, `"size": 12345`) {
			t.Fatalf("ghba stat /sized: exit %d: %s%s", code, out, errOut)
		}
		if _, errOut, code := c.all("mkdir", "-p", "/from-cli/sub"); code != 0 {
			t.Fatalf("ghba mkdir: %s", errOut)
		}
		c.waitFor("the mount to list what the CLI made", 10*time.Second, nil, func() (bool, string) {
			_, err := os.Stat(filepath.Join(m.dir, "from-cli", "sub"))
			return err == nil, fmt.Sprint(err)
		})
	})
}

// TestProcessMountTwoMounts checks close-to-open consistency between two
// mounts of one cluster: files written and closed in one, concurrently,
// are read whole in the other once opened after the close returned. Mount
// b lets its kernel keep names and attributes for 15 s, as long as the
// cluster's leases (cache_lease 15s): another mount's change must still
// reach it at once, by the lease's revocation. Then the access times of a
// (relatime, the default) and of a third mount with --atime noatime.
func TestProcessMountTwoMounts(t *testing.T) {
	c := mountClusterWith(t, "", "cache_lease: 15s\n")
	a := c.mount("a")
	b := c.mount("b", "--entry-timeout", "15s", "--attr-timeout", "15s")
	if err := os.Mkdir(filepath.Join(a.dir, "shared"), 0o755); err != nil {
		t.Fatal(err)
	}
	const files, writers = 60, 4
	content := func(i, round int) []byte {
		return bytes.Repeat([]byte(fmt.Sprintf("file %d round %d\n", i, round)), 1000+i*37)
	}
	errs := make(chan error, writers)
	for w := range writers {
		go func() {
			var err error
			defer func() { errs <- err }()
			for i := w; i < files; i += writers {
				for round := range 2 {
					name := fmt.Sprintf("f%03d", i)
					if err = os.WriteFile(filepath.Join(a.dir, "shared", name), content(i, round), 0o644); err != nil {
						return
					}
					// close returned: the other mount must see this round.
					var got []byte
					if got, err = os.ReadFile(filepath.Join(b.dir, "shared", name)); err != nil {
						return
					}
					if !bytes.Equal(got, content(i, round)) {
						err = fmt.Errorf("%s round %d: mount b read %d bytes, want %d (%q...)", name, round, len(got), len(content(i, round)), got[:min(len(got), 40)])
						return
					}
				}
			}
		}()
	}
	for range writers {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	// Two mounts write different blocks of one file at the same time: each
	// close merges its blocks into what the other committed (IfVersion),
	// so both survive.
	both := filepath.Join("shared", "both")
	const block = 4 << 20
	if err := os.WriteFile(filepath.Join(a.dir, both), make([]byte, 4*block), 0o644); err != nil {
		t.Fatal(err)
	}
	for round := range 5 {
		var wg sync.WaitGroup
		errs := make([]error, 4)
		for i := range 4 {
			wg.Go(func() {
				dir := a.dir
				if i%2 == 1 {
					dir = b.dir
				}
				f, err := os.OpenFile(filepath.Join(dir, both), os.O_WRONLY, 0)
				if err != nil {
					errs[i] = err
					return
				}
				_, errs[i] = f.WriteAt(bytes.Repeat([]byte{byte('A' + i + round)}, block), int64(i)*block)
				if err := f.Close(); errs[i] == nil {
					errs[i] = err
				}
			})
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.Join(b.dir, both))
		if err != nil || len(got) != 4*block {
			t.Fatalf("round %d: %d bytes, %v", round, len(got), err)
		}
		for i := range 4 {
			if got[i*block] != byte('A'+i+round) || got[(i+1)*block-1] != byte('A'+i+round) {
				t.Fatalf("round %d: block %d holds %q, want %q: a concurrent close lost another mount's block", round, i, got[i*block], byte('A'+i+round))
			}
		}
	}

	// b's kernel holds f001's attributes for up to 15 s: a's chmod must
	// show in b at once, by the revocation of b's lease.
	f001 := filepath.Join(b.dir, "shared", "f001")
	if _, err := os.Stat(f001); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(a.dir, "shared", "f001"), 0o600); err != nil {
		t.Fatal(err)
	}
	c.waitFor("mount b to see a's chmod (its lease revoked)", 5*time.Second, nil, func() (bool, string) {
		st, err := os.Stat(f001)
		return err == nil && st.Mode().Perm() == 0o600, fmt.Sprint(st.Mode(), err)
	})
	// And the other way round, through a rename: b replaces a file that a
	// reads afterwards.
	tmp := filepath.Join(b.dir, "shared", ".tmp")
	if err := os.WriteFile(tmp, []byte("new contents\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(b.dir, "shared", "f000")); err != nil {
		t.Fatal(err)
	}
	c.waitFor("mount a to see b's rename", 10*time.Second, nil, func() (bool, string) {
		got, err := os.ReadFile(filepath.Join(a.dir, "shared", "f000"))
		return err == nil && string(got) == "new contents\n", fmt.Sprintf("%q %v", got[:min(len(got), 20)], err)
	})
	// a writes a file that b replaces (an editor's save by rename) before
	// a closes it: a's close succeeds, and its writes stay with the inode
	// that lost its name, never reaching b's file (versions count per
	// inode, so the two may be at the same one).
	victim := filepath.Join("shared", "victim")
	if err := os.WriteFile(filepath.Join(a.dir, victim), []byte("old\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	fa, err := os.OpenFile(filepath.Join(a.dir, victim), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fa.WriteAt([]byte("written by a to the replaced file\n"), 0); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(b.dir, "shared", ".new"), []byte("new\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(b.dir, "shared", ".new"), filepath.Join(b.dir, victim)); err != nil {
		t.Fatal(err)
	}
	if err := fa.Close(); err != nil {
		t.Errorf("close in a of the file b replaced: %v", err)
	}
	for _, m := range []*procMount{a, b} {
		if got, err := os.ReadFile(filepath.Join(m.dir, victim)); err != nil || string(got) != "new\n" {
			t.Errorf("mount %s reads the replacement as %q, %v; want %q", m.name, got, err, "new\n")
		}
	}
	// And a chmod through a descriptor of the replaced file (fchmod)
	// leaves the replacement alone.
	if fa, err = os.Open(filepath.Join(a.dir, victim)); err != nil {
		t.Fatal(err)
	}
	defer fa.Close()
	if err := os.WriteFile(filepath.Join(b.dir, "shared", ".new"), []byte("newer\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(b.dir, "shared", ".new"), filepath.Join(b.dir, victim)); err != nil {
		t.Fatal(err)
	}
	if err := fa.Chmod(0o600); !errors.Is(err, syscall.ESTALE) {
		t.Errorf("fchmod in a of the file b replaced: %v, want ESTALE", err)
	}
	if st, err := os.Stat(filepath.Join(b.dir, victim)); err != nil || st.Mode().Perm() != 0o644 {
		t.Errorf("the replacement after a's fchmod of the replaced file: %v, %v; want mode 0644", st.Mode(), err)
	}
	checkAtimes(t, a, c.mount("noatime", "--atime", "noatime"))
}

// checkAtimes checks the access times of relatime mount r (Linux's
// default: the first read after a change records the access, and keeps
// the ctime; a listing does the same for a directory) and of noatime
// mount n (reads record nothing).
func checkAtimes(t *testing.T, r, n *procMount) {
	t.Helper()
	times := func(p string) (atime, mtime, ctime int64) {
		t.Helper()
		var st syscall.Stat_t
		if err := syscall.Stat(p, &st); err != nil {
			t.Fatal(err)
		}
		return st.Atim.Nano(), st.Mtim.Nano(), st.Ctim.Nano()
	}
	read := func(p string) {
		t.Helper()
		if _, err := os.ReadFile(p); err != nil {
			t.Fatal(err)
		}
	}
	dir := filepath.Join(r.dir, "atime")
	f := filepath.Join(dir, "f")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(f, []byte("read me\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	a0, m0, c0 := times(f)
	if a0 > m0 {
		t.Fatalf("a new file's atime %d is after its mtime %d", a0, m0)
	}
	read(f)
	a1, _, c1 := times(f)
	if a1 <= m0 || c1 != c0 {
		t.Errorf("relatime: after a read atime %d (mtime %d), ctime %d (was %d): want the atime past the mtime, the ctime kept", a1, m0, c1, c0)
	}
	read(f)
	if a2, _, _ := times(f); a2 != a1 {
		t.Errorf("relatime: a second read moved the atime from %d to %d", a1, a2)
	}
	_, dm, _ := times(dir)
	if _, err := os.ReadDir(dir); err != nil {
		t.Fatal(err)
	}
	if da, _, _ := times(dir); da <= dm {
		t.Errorf("relatime: a listing left the directory's atime %d not past its mtime %d", da, dm)
	}
	g := filepath.Join(n.dir, "atime", "g")
	if err := os.WriteFile(g, []byte("read me too\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	a0, _, _ = times(g)
	read(g)
	if a1, _, _ := times(g); a1 != a0 {
		t.Errorf("noatime: a read moved the atime from %d to %d", a0, a1)
	}
}

// TestProcessMountFaults kills an agent while cp -r copies into the mount,
// and kills a mount process: every file whose close returned is intact,
// and ghba umount frees the dead mount's mount point.
func TestProcessMountFaults(t *testing.T) {
	needTools(t, "cp", "diff")
	c := mountCluster(t)
	m := c.mount("faults")
	goroot := strings.TrimSpace(sh(t, ".", "go env GOROOT"))
	src := filepath.Join(goroot, "src", "encoding")

	// cp -r while node2 is killed and restarted. cp reports an error for a
	// file in flight at worst; every file it copied whole is intact.
	cp := exec.Command("cp", "-r", src, filepath.Join(m.dir, "copy"))
	var cpOut bytes.Buffer
	cp.Stdout, cp.Stderr = &cpOut, &cpOut
	if err := cp.Start(); err != nil {
		t.Fatal(err)
	}
	c.waitFor("cp to have copied something", 30*time.Second, nil, func() (bool, string) {
		ents, err := os.ReadDir(filepath.Join(m.dir, "copy"))
		return err == nil && len(ents) > 3, fmt.Sprint(err)
	})
	victim := c.nodes[1]
	c.kill(victim)
	cpErr := cp.Wait()
	c.start(victim)
	c.waitReady("node2 back", c.nodes...)
	failed := map[string]bool{}
	if cpErr != nil {
		t.Logf("cp reported errors (allowed for files in flight): %v\n%s", cpErr, cpOut.String())
		sc := bufio.NewScanner(&cpOut)
		for sc.Scan() {
			if _, rest, ok := strings.Cut(sc.Text(), "'"); ok {
				if name, _, ok := strings.Cut(rest, "'"); ok {
					failed[name] = true
				}
			}
		}
	}
	checked := 0
	err := filepath.WalkDir(src, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		dst := filepath.Join(m.dir, "copy", rel)
		if failed[dst] {
			return nil
		}
		got, rerr := os.ReadFile(dst)
		if errors.Is(rerr, os.ErrNotExist) && cpErr != nil {
			return nil // not reached by a cp that stopped
		}
		want, _ := os.ReadFile(p)
		if rerr != nil || !bytes.Equal(got, want) {
			return fmt.Errorf("%s: %d bytes, want %d (%v)", rel, len(got), len(want), rerr)
		}
		checked++
		return nil
	})
	if err != nil {
		t.Fatalf("a file cp closed is not intact: %v", err)
	}
	t.Logf("%d copied files intact", checked)

	// kill -9 of the mount: closed files survive, ghba umount recovers the
	// mount point, and a new mount serves them.
	if err := os.WriteFile(filepath.Join(m.dir, "closed"), []byte("kept\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	m.kill()
	if _, err := os.Stat(m.dir); !errors.Is(err, syscall.ENOTCONN) {
		t.Fatalf("stat of a dead mount: %v, want ENOTCONN", err)
	}
	if out, errOut, code := c.cli("umount", m.dir); code != 0 {
		t.Fatalf("ghba umount of a dead mount: exit %d: %s%s", code, out, errOut)
	}
	if ok, _ := isFuseMount(m.dir); ok {
		t.Fatal("the dead mount is still mounted after ghba umount")
	}
	m.start()
	got, err := os.ReadFile(filepath.Join(m.dir, "closed"))
	if err != nil || string(got) != "kept\n" {
		t.Fatalf("closed file after the mount's kill: %q %v", got, err)
	}
}

// TestProcessMountCLI checks the mount command's contract: clear errors
// with exit codes, --background, ghba umount.
func TestProcessMountCLI(t *testing.T) {
	c := mountCluster(t)
	notEmpty := t.TempDir()
	if err := os.WriteFile(filepath.Join(notEmpty, "x"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	dead := rpctest.DeadAddr(t)
	for _, tc := range []struct {
		name string
		args []string
		code int
		msg  string
	}{
		{"not empty", []string{"--addr", c.addrList(), "mount", notEmpty}, exitUsage, "not empty"},
		{"missing", []string{"--addr", c.addrList(), "mount", filepath.Join(notEmpty, "nope")}, exitUsage, "mount point"},
		{"no cluster", []string{"--addr", dead, "--timeout", "2s", "mount", t.TempDir()}, exitUnavail, "cluster"},
		{"bad --pprof", []string{"--addr", c.addrList(), "mount", "--pprof", "127.0.0.1:notaport", t.TempDir()}, exitUsage, "--pprof"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, c.bin, tc.args...)
			cmd.Env = procEnv()
			out, err := cmd.CombinedOutput()
			code := 0
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				code = ee.ExitCode()
			}
			if code != tc.code || !strings.Contains(string(out), tc.msg) || strings.Count(strings.TrimSpace(string(out)), "\n") > 0 {
				t.Fatalf("exit %d, want %d with one line containing %q: %s", code, tc.code, tc.msg, out)
			}
		})
	}
	t.Run("background", func(t *testing.T) {
		dir := filepath.Join(c.dir, "mnt-bg")
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		out, errOut, code := c.all("mount", "--background", "--log-file", filepath.Join(c.dir, "bg.log"), dir)
		if code != 0 {
			t.Fatalf("mount --background: exit %d: %s%s", code, out, errOut)
		}
		if ok, _ := isFuseMount(dir); !ok {
			t.Fatal("mount --background returned before the mount served")
		}
		if err := os.WriteFile(filepath.Join(dir, "f"), []byte("bg\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		pid := backgroundPID(t, out)
		if out, errOut, code := c.cli("umount", dir); code != 0 {
			t.Fatalf("ghba umount: exit %d: %s%s", code, out, errOut)
		}
		if out, _, code := c.all("--json", "stat", "/f"); code != 0 || !strings.Contains(out, `"size": 3`) {
			t.Fatalf("the file the background mount wrote: exit %d: %s", code, out)
		}
		// Mounted again at once: the first mount's process, finishing
		// after its unmount, must leave the new mount alone.
		out, errOut, code = c.all("mount", "--background", "--log-file", filepath.Join(c.dir, "bg2.log"), dir)
		if code != 0 {
			t.Fatalf("mount --background again: exit %d: %s%s", code, out, errOut)
		}
		c.waitFor("the first mount's process to exit", time.Minute, nil, func() (bool, string) {
			return processGone(pid), fmt.Sprintf("pid %d", pid)
		})
		if got, err := os.ReadFile(filepath.Join(dir, "f")); err != nil || string(got) != "bg\n" {
			t.Fatalf("the new mount after the old one's process exited: %q %v", got, err)
		}
		if out, errOut, code := c.cli("umount", dir); code != 0 {
			t.Fatalf("ghba umount of the new mount: exit %d: %s%s", code, out, errOut)
		}
	})
}

// backgroundPID returns the pid ghba mount --background printed.
func backgroundPID(t *testing.T, out string) int {
	t.Helper()
	_, rest, ok := strings.Cut(out, "(pid ")
	if ok {
		if pid, err := strconv.Atoi(strings.TrimRight(strings.Fields(rest)[0], ",)")); err == nil {
			return pid
		}
	}
	t.Fatalf("no pid in the output of mount --background: %q", out)
	return 0
}

// processGone reports whether process pid has exited (it is gone, or a
// zombie nobody reaped yet).
func processGone(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	_, rest, _ := strings.Cut(string(b), ") ")
	return strings.HasPrefix(rest, "Z") || strings.HasPrefix(rest, "X")
}

// TestProcessMountACL mounts a cluster with ACLs on: with the management
// (root) token the mount acts for the calling process (new inodes are
// owned by its uid and gid, the kernel checks each caller's permissions);
// with an ordinary user's token it acts as that user; without a token it
// refuses to mount (exit 7).
func TestProcessMountACL(t *testing.T) {
	needFUSE(t)
	if os.Geteuid() != 0 {
		t.Skip("runs programs as other users: needs root")
	}
	c := newProcCluster(t, 0)
	c.aclConfig = fmt.Sprintf("acl:\n  enabled: true\n  server_token: %q\n", procACLServerToken)
	for range 3 {
		c.addNode()
	}
	n1 := c.nodes[0]
	c.start(n1)
	c.waitServing(n1)
	rootToken := strings.TrimSpace(c.shell("anonymous", "").expect(0, n1, "", "acl", "bootstrap"))
	c.token = rootToken
	c.waitReady("node1 leads the group", n1)
	c.start(c.nodes[1])
	c.start(c.nodes[2])
	c.waitReady("3 nodes ready", c.nodes...)
	root := c.shell("root", rootToken)
	root.expect(0, n1, "", "--timeout", "60s", "data-store", "set", "file://"+filepath.Join(c.dir, "data-store"))
	root.expect(0, n1, "alice-password\n", "user", "add", "alice", "--uid", "1000", "--gid", "1000", "--password-stdin")
	alice := c.shell("alice", "")
	alice.expect(0, n1, "alice-password\n", "login", "--user", "alice", "--password-stdin")
	root.expect(0, n1, "", "mkdir", "/shared")
	root.expect(0, n1, "", "chmod", "1777", "/shared")

	// No token: the mount refuses to start, with the credential's exit code.
	dir := filepath.Join(c.dir, "mnt-none")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, errOut, code := c.runCLI("", nil, "", "", "--addr", c.addrList(), "mount", dir); code != exitAuth {
		t.Fatalf("mount without a token: exit %d, want %d: %s", code, exitAuth, errOut)
	}

	tokenFile := func(name, token string) string {
		f := filepath.Join(c.dir, name+".token")
		if err := os.WriteFile(f, []byte(token+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		return f
	}
	// asUser runs a shell command as uid:gid, on the mount.
	asUser := func(uid uint32, script string) error {
		cmd := exec.Command("sh", "-c", script)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
		out, err := cmd.CombinedOutput()
		if err != nil {
			return fmt.Errorf("%w: %s", err, out)
		}
		return nil
	}
	owner := func(p string) string {
		out := root.expect(0, n1, "", "--json", "stat", p)
		var in rpc.Inode
		if err := json.Unmarshal([]byte(out), &in); err != nil {
			t.Fatalf("stat %s: %v\n%s", p, err, out)
		}
		return fmt.Sprintf("%d:%d", in.UID, in.GID)
	}

	// Other users must reach the mount point (t.TempDir makes 0700
	// directories).
	for d := c.dir; d != filepath.Dir(d) && strings.HasPrefix(d, os.TempDir()+"/"); d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// The management token: the mount acts for the calling process.
	m := c.mount("root", "--allow-other", "--token-file", tokenFile("root", rootToken))
	if err := asUser(1234, "echo hi > "+filepath.Join(m.dir, "shared", "by-1234")); err != nil {
		t.Fatal(err)
	}
	if got := owner("/shared/by-1234"); got != "1234:1234" {
		t.Errorf("a file uid 1234 made through the root token's mount is owned by %s, want 1234:1234", got)
	}
	// The kernel checks each caller: uid 1235 may not write 1234's file.
	if err := asUser(1235, "echo no >> "+filepath.Join(m.dir, "shared", "by-1234")); err == nil {
		t.Error("uid 1235 appended to uid 1234's 0644 file through the mount")
	}

	// An ordinary user's token: every caller acts as that user.
	a := c.mount("alice", "--token-file", tokenFile("alice", alice.savedToken()))
	if err := os.WriteFile(filepath.Join(a.dir, "shared", "by-alice"), []byte("alice\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := owner("/shared/by-alice"); got != "1000:1000" {
		t.Errorf("a file made through alice's mount is owned by %s, want 1000:1000", got)
	}
	if err := os.WriteFile(filepath.Join(a.dir, "not-alices"), nil, 0o644); !errors.Is(err, fs.ErrPermission) {
		t.Errorf("alice's mount writing into root's 0755 directory: %v, want permission denied", err)
	}
}
