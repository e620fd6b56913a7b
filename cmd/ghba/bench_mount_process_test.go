package main

// The mdtest phases of `ghba bench` through a real `ghba mount` (FUSE) of
// a 3-agent cluster, agents and mount being processes of the built binary
// (mount_process_test.go); TestBenchMdtestCluster covers the same phases
// with a local directory standing in for the mount.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestProcessMountBenchMdtest runs every mdtest phase through the Go
// client and through a real mount of a 3-agent cluster (R=3), with one
// shared tree and with a tree per task (--unique-dir), and checks the
// counts: every item created was stat'ed, read, renamed and removed, with
// no error, and the tree is empty at the end, in the cluster and in the
// mount. A split run checks that what the mount created is in the cluster,
// and an interrupted run that it reports the interruption.
func TestProcessMountBenchMdtest(t *testing.T) {
	c := mountCluster(t)
	m := c.mount("mdtest")
	cl := c.client(c.nodes[0])
	const tasks, items, iterations, depth, branch = 4, 20, 2, 1, 2
	const treeDirs = 1 + branch // a tree of depth 1
	via := []string{viaClient, viaMount + ":" + m.dir}
	// bench runs ghba bench's mdtest phases below prefix with the common
	// sizes and args, and returns its --json report.
	bench := func(t *testing.T, prefix string, args ...string) mdtestJSON {
		t.Helper()
		all := append([]string{"--timeout", "30s", "--json", "bench", "--prefix", prefix, "-c", strconv.Itoa(tasks),
			"-n", strconv.Itoa(items), "-z", strconv.Itoa(depth), "-b", strconv.Itoa(branch)}, args...)
		out, errOut, code := c.all(all...)
		if code != 0 {
			t.Fatalf("ghba %s: exit %d: %s", strings.Join(all, " "), code, errOut)
		}
		var rep mdtestJSON
		if err := json.Unmarshal([]byte(out), &rep); err != nil {
			t.Fatalf("bench --json: %v\n%s", err, out)
		}
		return rep
	}
	// empty fails the test unless prefix is empty both in the cluster and
	// in the mount.
	empty := func(t *testing.T, prefix string) {
		t.Helper()
		if d, f := walkCount(t, cl, prefix); d != 0 || f != 0 {
			t.Errorf("after the run %s holds %d directories and %d files in the cluster, want none", prefix, d, f)
		}
		if entries, err := os.ReadDir(filepath.Join(m.dir, prefix)); err != nil || len(entries) != 0 {
			t.Errorf("after the run %s holds %d entries in the mount (%v), want none", prefix, len(entries), err)
		}
	}

	for i, tt := range []struct {
		name   string
		unique bool
	}{{"shared tree", false}, {"unique trees", true}} {
		t.Run(tt.name, func(t *testing.T) {
			prefix := "/mdtest-" + strconv.Itoa(i)
			args := []string{"--phases", "mdtest", "--iterations", strconv.Itoa(iterations), "--via", strings.Join(via, ",")}
			trees := 1
			if tt.unique {
				args, trees = append(args, "--unique-dir"), tasks
			}
			rep := bench(t, prefix, args...)
			if rep.Tasks != tasks || rep.ItemsPerTask != items || rep.TreeDirs != treeDirs || rep.Iterations != iterations || !slices.Equal(rep.Via, via) {
				t.Errorf("report header %+v", rep)
			}
			want := map[string]int{mdTreeCreate: trees * treeDirs, mdTreeRemove: trees * treeDirs}
			for _, name := range mdtestPhaseNames() {
				if _, tree := want[name]; !tree {
					want[name] = tasks * items
				}
			}
			// Every phase of every iteration through every way in, in order.
			var wantOrder, gotOrder []string
			for _, v := range via {
				for it := range iterations {
					for _, name := range mdtestPhaseNames() {
						wantOrder = append(wantOrder, v+" "+strconv.Itoa(it)+" "+name)
					}
				}
			}
			for _, ph := range rep.Phases {
				gotOrder = append(gotOrder, ph.Node+" "+strconv.Itoa(ph.Iteration)+" "+ph.Phase)
				if ph.Ops != want[ph.Phase] || ph.Errors != 0 {
					t.Errorf("%s via %s iteration %d: %d ops, %d errors; want %d, 0", ph.Phase, ph.Node, ph.Iteration, ph.Ops, ph.Errors, want[ph.Phase])
				}
			}
			if !slices.Equal(gotOrder, wantOrder) {
				t.Fatalf("phases run:\n%s\nwant:\n%s", strings.Join(gotOrder, "\n"), strings.Join(wantOrder, "\n"))
			}
			if len(rep.Summary) != len(via)*len(mdtestPhases) {
				t.Fatalf("%d summary rows, want %d", len(rep.Summary), len(via)*len(mdtestPhases))
			}
			for _, s := range rep.Summary {
				if len(s.Rates) != iterations || s.Ops != iterations*want[s.Phase] || s.Errors != 0 ||
					s.Max < s.Mean || s.Mean < s.Min || s.Min <= 0 || s.P99Ms < s.P50Ms || s.Operation == "" {
					t.Errorf("summary of %s via %s: %+v", s.Phase, s.Node, s)
				}
			}
			empty(t, prefix)
		})
	}

	// The phases through the mount split over two runs: what the first
	// created through the mount is in the cluster, and the second finds it
	// all and leaves nothing.
	t.Run("split runs through the mount", func(t *testing.T) {
		const prefix = "/mdtest-split"
		rep := bench(t, prefix, "-u", "--via", via[1], "--phases", "tree-create,dir-create,file-create")
		for _, ph := range rep.Phases {
			if ph.Errors != 0 {
				t.Errorf("%s: %d errors", ph.Phase, ph.Errors)
			}
		}
		d, f := walkCount(t, cl, prefix)
		if wantDirs := 1 + tasks*treeDirs + tasks*items; d != wantDirs || f != tasks*items {
			t.Fatalf("after the creates through the mount the cluster holds %d directories and %d files below %s, want %d and %d",
				d, f, prefix, wantDirs, tasks*items)
		}
		rep = bench(t, prefix, "-u", "--via", via[1], "--phases", "dir-stat,dir-rename,dir-remove,file-stat,file-read,file-remove,tree-remove")
		for _, ph := range rep.Phases {
			if ph.Ops == 0 || ph.Errors != 0 {
				t.Errorf("%s: %d ops, %d errors", ph.Phase, ph.Ops, ph.Errors)
			}
		}
		empty(t, prefix)
	})
	// Interrupted (SIGINT) while it creates directories through the mount,
	// bench stops and says so, rather than failing to remove the directory
	// of the iteration it stopped (exit 4, "directory not empty").
	t.Run("interrupted through the mount", func(t *testing.T) {
		const prefix = "/mdtest-interrupted"
		cmd := exec.Command(c.bin, "--addr", c.addrList(), "bench", "--prefix", prefix, "--phases", "mdtest",
			"-c", strconv.Itoa(tasks), "-n", "5000", "--via", via[1])
		cmd.Env = procEnv()
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		cmd.SysProcAttr = procSysProcAttr()
		if err := procStart(cmd); err != nil {
			t.Fatal(err)
		}
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		tree := filepath.Join(m.dir, prefix, "test-dir.mount-0", "mdtest_tree.0")
		c.waitFor("bench to create directories through the mount", time.Minute, nil, func() (bool, string) {
			entries, err := os.ReadDir(tree)
			return err == nil && len(entries) >= 20, fmt.Sprintf("%d entries, %v", len(entries), err)
		})
		if err := cmd.Process.Signal(os.Interrupt); err != nil {
			t.Fatal(err)
		}
		var err error
		select {
		case err = <-exited:
		case <-time.After(procCLITimeout):
			cmd.Process.Kill() //nolint:errcheck // it may be gone
			t.Fatalf("bench did not exit within %v of SIGINT", procCLITimeout)
		}
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != exitError || !strings.Contains(stderr.String(), "context canceled") {
			t.Fatalf("bench after SIGINT: %v, stderr %q; want exit %d and the cancellation", err, stderr.String(), exitError)
		}
	})
}
