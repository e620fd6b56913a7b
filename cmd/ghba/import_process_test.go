package main

import (
	"bufio"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ghba/ghba/cmd/ghba/fsimport"
	"github.com/ghba/ghba/cmd/ghba/fsimport/fsimporttest"
	"github.com/ghba/ghba/rpc"
)

// TestProcessImport imports a real tree (a copy of the Go toolchain's
// crypto sources, with a symlink and a FIFO added) into agent processes
// with "ghba import", interrupts it with SIGINT part-way, resumes it, and
// compares every path's type, mode, size, mtime and link target, read back
// with "ghba stat --json", against a walk of the source; then changes the
// source and checks that a second import applies exactly those changes.
func TestProcessImport(t *testing.T) {
	if testing.Short() {
		t.Skip("process test")
	}
	src := filepath.Join(t.TempDir(), "crypto")
	if out, err := exec.Command("cp", "-a", filepath.Join(runtime.GOROOT(), "src", "crypto"), src).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v: %s", err, out)
	}
	if err := os.Symlink("sha256/sha256.go", filepath.Join(src, "link")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(src, "fifo"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := newProcCluster(t, 3)
	c.startAll()
	addr := c.nodes[0].rpcAddr()

	// Interrupt the first import after 100 creates.
	cmd := exec.Command(c.bin, "--addr", addr, "import", src, "--to", "/imp/crypto", "-v", "--no-progress", "--workers", "2")
	cmd.Env = procEnv()
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(stdout)
	for n := 0; n < 100 && sc.Scan(); {
		if strings.HasPrefix(sc.Text(), "create ") {
			n++
		}
	}
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	for sc.Scan() { // drain
	}
	err = cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() == 0 || !strings.Contains(stderr.String(), "interrupted") {
		t.Fatalf("interrupted import: %v, stderr %q (did it finish before the signal?)", err, stderr.String())
	}

	want := sourceTree(t, src)
	out, errOut, code := c.at(c.nodes[1], "import", "-v", "--no-progress", src, "--to", "/imp/crypto")
	if code != 0 {
		t.Fatalf("resumed import: exit %d: %s", code, errOut)
	}
	// The interrupted import did not set back the times of the
	// directories it changed (the times of its changes): the resumed one
	// does, and those are its only updates.
	dirTimes := 0
	for line := range strings.Lines(out) {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "update /imp/crypto")
		if !ok {
			continue
		}
		rel, fields, _ := strings.Cut(strings.TrimPrefix(rest, "/"), " ")
		if e, ok := want[cmp.Or(rel, ".")]; !ok || e.Type != rpc.TypeDir || fields != "[mtime]" {
			t.Errorf("resumed import: %q; want updates of directories' times only", line)
		}
		dirTimes++
	}
	var sum map[string]int
	if i := strings.LastIndex(out, "imported "); i >= 0 {
		var created, updated, deleted, skipped, errs, unchanged int
		if _, err := fmt.Sscanf(out[i:], "imported "+src+" into /imp/crypto: %d created, %d updated, %d deleted, %d skipped, %d errors, %d unchanged",
			&created, &updated, &deleted, &skipped, &errs, &unchanged); err == nil {
			sum = map[string]int{"created": created, "updated": updated, "deleted": deleted, "skipped": skipped, "errors": errs, "unchanged": unchanged}
		}
	}
	if sum == nil {
		t.Fatalf("resumed import: no summary in %q", out)
	}
	if sum["created"]+sum["unchanged"]+sum["updated"] != len(want) || sum["created"] == 0 || sum["created"] >= len(want)-100 ||
		sum["updated"] != dirTimes || sum["deleted"] != 0 || sum["skipped"] != 0 || sum["errors"] != 0 {
		t.Errorf("resumed import: %v; want the rest of %d entries created (the FIFO too)", sum, len(want))
	}
	compareImported(t, c, want, "/imp/crypto")

	// Change the source: touch, add, delete in one directory.
	dir := filepath.Join(src, "sha256")
	old := time.Date(2020, 1, 2, 3, 4, 5, 6, time.UTC)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.Chtimes(filepath.Join(dir, "sha256.go"), old, old))
	must(os.WriteFile(filepath.Join(dir, "new.txt"), []byte("new"), 0o640))
	must(os.Remove(filepath.Join(dir, "sha256_test.go")))
	out, errOut, code = c.at(c.nodes[2], "--json", "import", src, "--to", "/imp/crypto")
	if code != 0 {
		t.Fatalf("second import: exit %d: %s", code, errOut)
	}
	// The directory's mtime changed too (an entry added and removed).
	if sum := importSummary(t, out); sum["created"] != 1 || sum["updated"] != 2 || sum["deleted"] != 1 || sum["errors"] != 0 {
		t.Errorf("second import: %v; want 1 created, 2 updated (the file and its directory), 1 deleted", sum)
	}
	compareImported(t, c, sourceTree(t, src), "/imp/crypto")

	// find: spread the files' modification times over 0-60 days ago
	// (half a day off whole days, away from find's day boundaries),
	// import the change, then compare ghba find with find(1).
	now := time.Now()
	i := 0
	must(filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		i++
		age := time.Duration(i%61)*24*time.Hour + 12*time.Hour
		return os.Chtimes(p, now.Add(-age), now.Add(-age))
	}))
	if _, errOut, code := c.at(c.nodes[0], "import", src, "--to", "/imp/crypto", "--no-progress"); code != 0 {
		t.Fatalf("import of the new times: exit %d: %s", code, errOut)
	}
	for _, q := range [][]string{
		{"-name", "*.go"},
		{"-name", "*_test.go", "-type", "f"},
		{"-type", "d"},
		{"-type", "l"},
		{"-type", "p"},
		{"-name", "[!a-m]*"},
		{"-type", "f", "-size", "+8k"},
		{"-type", "f", "-size", "-2"},
		{"-type", "f", "-size", "3k"},
		{"-type", "f", "-size", "+5000c"},
		{"-mtime", "-7"},
		{"-mtime", "+30", "-name", "*.go"},
		{"-mtime", "12"},
	} {
		out, err := exec.Command("find", append([]string{src}, q...)...).Output()
		if err != nil {
			t.Fatalf("find(1) %v: %v", q, err)
		}
		var want []string
		for _, l := range strings.Fields(string(out)) {
			want = append(want, "/imp/crypto"+strings.TrimPrefix(l, src))
		}
		slices.Sort(want)
		args := []string{"find", "/imp/crypto", "--sort"}
		for _, a := range q {
			if strings.HasPrefix(a, "-") && len(a) > 2 && a[1] >= 'a' && a[1] <= 'z' {
				a = "-" + a
			}
			args = append(args, a)
		}
		out2, errOut, code := c.at(c.nodes[1], args...)
		got := strings.Fields(out2)
		if len(want) == 0 && code != exitNotFound || len(want) > 0 && code != 0 {
			t.Errorf("ghba %v: exit %d: %s", args, code, errOut)
		}
		if !slices.Equal(got, want) {
			var only []string
			for _, p := range want {
				if !slices.Contains(got, p) {
					only = append(only, "find(1) only: "+p)
				}
			}
			for _, p := range got {
				if !slices.Contains(want, p) {
					only = append(only, "ghba only: "+p)
				}
			}
			t.Errorf("ghba %v: %d paths, find(1): %d; %v", args, len(got), len(want), only)
		} else {
			t.Logf("find %v: %d paths, as find(1)", q, len(want))
		}
	}

	// A plain query: exact names as find -name gives them, first; then
	// related names.
	out, errOut, code = c.at(c.nodes[2], "find", "sha256.go")
	if code != 0 {
		t.Fatalf("find sha256.go: exit %d: %s", code, errOut)
	}
	exactOut, err := exec.Command("find", src, "-name", "sha256.go").Output()
	must(err)
	var wantExact, exact, related []string
	for _, l := range strings.Fields(string(exactOut)) {
		wantExact = append(wantExact, "/imp/crypto"+strings.TrimPrefix(l, src))
	}
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		stage, p, _ := strings.Cut(l, "\t")
		switch {
		case stage == "exact" && len(related) == 0:
			exact = append(exact, p)
		case stage == "related" && path.Base(p) != "sha256.go":
			related = append(related, p)
		default:
			t.Errorf("find sha256.go: line %q out of place", l)
		}
	}
	slices.Sort(exact)
	slices.Sort(wantExact)
	if !slices.Equal(exact, wantExact) || len(related) == 0 {
		t.Errorf("find sha256.go: exact %v (want %v), %d related: %v", exact, wantExact, len(related), related)
	}
	for _, p := range related { // the same stem, or the words sha256 and go
		if b := strings.ToLower(path.Base(p)); b != "sha256" && !strings.HasPrefix(b, "sha256.") && !strings.HasPrefix(b, "sha256_") {
			t.Errorf("find sha256.go: %s is not related", p)
		}
	}
	t.Logf("find sha256.go: %d exact, related %v", len(exact), related)

	// Texts: an import with --content gives every text file its first
	// 4 KiB; find --text copyright then finds exactly the files whose
	// text holds that word (checked here with a regular expression on the
	// same bytes), and a plain query ends with text matches.
	word := regexp.MustCompile(`(?i)(^|[^\pL\pN_'.])copyright([^\pL\pN_'.]|$)`)
	var texts, withWord []string
	must(filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		text, err := fsimport.ReadText(p, fsimport.DefaultContentBytes)
		if err != nil || text == "" {
			return err
		}
		dst := "/imp/crypto" + strings.TrimPrefix(p, src)
		texts = append(texts, dst)
		if word.MatchString(text) {
			withWord = append(withWord, dst)
		}
		return nil
	}))
	out, errOut, code = c.at(c.nodes[0], "--json", "import", src, "--to", "/imp/crypto", "--content")
	if sum := importSummary(t, out); code != 0 || sum["updated"] != len(texts) || sum["created"] != 0 || sum["errors"] != 0 {
		t.Errorf("import --content: exit %d, %v; want %d texts added: %s", code, sum, len(texts), errOut)
	}
	out, errOut, code = c.at(c.nodes[1], "find", "/imp/crypto", "--text", "copyright", "--sort")
	if got := strings.Fields(out); code != 0 || !slices.Equal(got, withWord) {
		t.Errorf("find --text copyright: exit %d (%s): %d paths, want the %d text files holding the word (of %d texts); first %v", code, errOut, len(got), len(withWord), len(texts), got[:min(len(got), 6)])
	} else {
		t.Logf("find --text copyright: %d of %d text files, as a regular expression finds them", len(got), len(texts))
	}
	out, _, code = c.at(c.nodes[2], "find", "hmac")
	var stages []string
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		stage, _, _ := strings.Cut(l, "\t")
		if len(stages) == 0 || stages[len(stages)-1] != stage {
			stages = append(stages, stage)
		}
	}
	if code != 0 || !slices.Equal(stages, []string{"exact", "related", "text"}) {
		t.Errorf("find hmac: exit %d, stages in the order %v, want exact, related, text", code, stages)
	}

	// ghba ln -s makes the same kind of entry by hand.
	if _, errOut, code := c.at(c.nodes[0], "ln", "-s", "crypto/link", "/imp/l"); code != 0 {
		t.Fatalf("ln -s: exit %d: %s", code, errOut)
	}
	if out, _, code := c.at(c.nodes[1], "stat", "/imp/l"); code != 0 || !strings.Contains(out, "crypto/link") || !strings.Contains(out, "symlink") {
		t.Errorf("stat of a symlink: exit %d: %s", code, out)
	}
	if _, _, code := c.at(c.nodes[0], "ln", "target", "/imp/hard"); code != exitUsage {
		t.Errorf("ln without -s: exit %d, want %d", code, exitUsage)
	}

	// ghba mknod makes special files; stat shows a device's numbers, and
	// find --type picks them.
	for _, args := range [][]string{{"/imp/pipe", "p"}, {"/imp/disk", "b", "8", "1"}} {
		if _, errOut, code := c.at(c.nodes[0], append([]string{"mknod"}, args...)...); code != 0 {
			t.Fatalf("mknod %v: exit %d: %s", args, code, errOut)
		}
	}
	if out, _, code := c.at(c.nodes[1], "stat", "/imp/disk"); code != 0 || !strings.Contains(out, "block") || !strings.Contains(out, "8, 1") {
		t.Errorf("stat of a block device: exit %d: %s", code, out)
	}
	if out, _, code := c.at(c.nodes[2], "find", "--sort", "--type", "p", "/imp"); code != 0 || !strings.HasSuffix(strings.TrimSpace(out), "\n/imp/pipe") {
		t.Errorf("find --type p /imp: exit %d: %q, want the imported FIFO and /imp/pipe", code, out)
	}
	if _, _, code := c.at(c.nodes[0], "mknod", "/imp/bad", "c"); code != exitUsage {
		t.Errorf("mknod of a device without numbers: exit %d, want %d", code, exitUsage)
	}
}

// sourceTree walks root like an import (fsimporttest.Tree).
func sourceTree(t *testing.T, root string) map[string]fsimporttest.Entry {
	t.Helper()
	tree, err := fsimporttest.Tree(root)
	if err != nil {
		t.Fatal(err)
	}
	return tree
}

func importSummary(t *testing.T, out string) map[string]int {
	t.Helper()
	var sum map[string]int
	if err := json.Unmarshal([]byte(out), &sum); err != nil {
		t.Fatalf("import --json: %v: %q", err, out)
	}
	return sum
}

// compareImported stats every path of want below dest with "ghba stat
// --json" (8 at a time) and lists every directory with "ghba ls --json",
// so that both missing and extra paths are found.
func compareImported(t *testing.T, c *procCluster, want map[string]fsimporttest.Entry, dest string) {
	t.Helper()
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for rel, w := range want {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			p := path.Join(dest, rel)
			out, errOut, code := c.at(c.nodes[0], "--json", "stat", p)
			var got fsimporttest.Entry
			err := json.Unmarshal([]byte(out), &got)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case code != 0:
				t.Errorf("stat %s: exit %d: %s", p, code, errOut)
			case err != nil:
				t.Errorf("stat %s: %v", p, err)
			case got != w:
				t.Errorf("%s: got %+v, want %+v", p, got, w)
			}
			if w.Type != rpc.TypeDir {
				return
			}
			out, errOut, code = c.at(c.nodes[0], "--json", "ls", p)
			var entries []struct{ Name string }
			if code != 0 || json.Unmarshal([]byte(out), &entries) != nil {
				t.Errorf("ls %s: exit %d: %s", p, code, errOut)
				return
			}
			for _, e := range entries {
				if _, ok := want[path.Join(rel, e.Name)]; !ok {
					t.Errorf("%s has %s, which the source has not", p, e.Name)
				}
			}
		})
	}
	wg.Wait()
	t.Logf("compared %d paths", len(want))
}

// TestProcessSources registers a source, scans it once, then runs "ghba
// scan" as a process until its schedule has picked up a change of the
// source, and stops it with SIGINT.
func TestProcessSources(t *testing.T) {
	if testing.Short() {
		t.Skip("process test")
	}
	c := newProcCluster(t, 3)
	c.startAll()
	n := c.nodes[0]
	src := t.TempDir()
	if err := os.MkdirAll(filepath.Join(src, "a"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "a", "one.txt"), []byte("1"), 0o644); err != nil {
		t.Fatal(err)
	}
	list := func() rpc.Source {
		t.Helper()
		out, errOut, code := c.at(n, "--json", "source", "list")
		var srcs []rpc.Source
		if code != 0 || json.Unmarshal([]byte(out), &srcs) != nil || len(srcs) != 1 {
			t.Fatalf("source list: exit %d: %s %s", code, out, errOut)
		}
		return srcs[0]
	}
	if _, errOut, code := c.at(n, "source", "add", "docs", src, "--every", "1s", "--machine", "m1"); code != 0 {
		t.Fatalf("source add: exit %d: %s", code, errOut)
	}
	if _, _, code := c.at(n, "source", "add", "docs", src); code != exitExists {
		t.Errorf("source add of a registered name: exit %d, want %d", code, exitExists)
	}
	if _, _, code := c.at(n, "source", "add", "bad/name", src); code != exitUsage {
		t.Errorf("source add bad/name: exit %d, want %d", code, exitUsage)
	}
	if s := list(); s.LastScan != 0 || s.Machine != "m1" || s.Dest != "/sources/docs" || s.Dir != src {
		t.Errorf("registered: %+v", s)
	}
	if _, errOut, code := c.at(n, "scan", "--once"); code == 0 || !strings.Contains(errOut, "no source") {
		t.Errorf("scan --once on a machine without sources: exit %d: %s", code, errOut)
	}
	if _, errOut, code := c.at(n, "scan", "--once", "--machine", "m1"); code != 0 {
		t.Fatalf("scan --once: exit %d: %s", code, errOut)
	}
	first := list()
	if first.LastScan == 0 || first.Entries != 3 || first.Created != 3 || first.Errors != 0 {
		t.Errorf("after the first scan: %+v", first)
	}
	if out, _, code := c.at(n, "stat", "/sources/docs/a/one.txt"); code != 0 || !strings.Contains(out, "file") {
		t.Errorf("stat of a scanned file: exit %d: %s", code, out)
	}

	// The schedule: a scan process picks up a new file within its period.
	if err := os.WriteFile(filepath.Join(src, "a", "two.txt"), []byte("2"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(c.bin, "--addr", n.rpcAddr(), "scan", "--machine", "m1")
	cmd.Env = procEnv()
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c.waitFor("the scheduled scan", 30*time.Second, nil, func() (bool, string) {
		s := list()
		return s.LastScan > first.LastScan && s.Entries == 4, fmt.Sprintf("%+v", s)
	})
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("scan after SIGINT: %v; stderr: %s", err, stderr.String())
	}
	if _, _, code := c.at(n, "stat", "/sources/docs/a/two.txt"); code != 0 {
		t.Errorf("the scheduled scan did not import a/two.txt (exit %d); its log: %s", code, stderr.String())
	}
	if _, errOut, code := c.at(n, "source", "rm", "docs"); code != 0 {
		t.Errorf("source rm: exit %d: %s", code, errOut)
	}
	if out, _, code := c.at(n, "--json", "source", "list"); code != 0 || strings.TrimSpace(out) != "[]" {
		t.Errorf("source list after rm: exit %d: %s", code, out)
	}
}
