package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ghba/ghba/node/nodetest"
	"github.com/ghba/ghba/rpc"
	"github.com/ghba/ghba/rpc/client"
	"github.com/ghba/ghba/rpc/rpctest"
)

// mdtestJSON is the part of bench --json's mdtest report the tests check.
type mdtestJSON struct {
	Prefix       string   `json:"prefix"`
	Tasks        int      `json:"tasks"`
	ItemsPerTask int      `json:"items_per_task"`
	TreeDirs     int      `json:"tree_dirs"`
	Iterations   int      `json:"iterations"`
	Via          []string `json:"via"`
	Phases       []struct {
		Iteration int `json:"iteration"`
		mdtestPhaseJSON
	} `json:"phases"`
	Summary []struct {
		Operation string    `json:"operation"`
		Rates     []float64 `json:"rates"`
		Max       float64   `json:"max"`
		Min       float64   `json:"min"`
		Mean      float64   `json:"mean"`
		StdDev    float64   `json:"std_dev"`
		mdtestPhaseJSON
	} `json:"summary"`
}

// mdtestPhaseJSON is a phase result's fields.
type mdtestPhaseJSON struct {
	Phase  string         `json:"phase"`
	Node   string         `json:"node"`
	Ops    int            `json:"ops"`
	Errors int            `json:"errors"`
	P50Ms  float64        `json:"p50_ms"`
	P99Ms  float64        `json:"p99_ms"`
	Levels map[string]int `json:"levels"`
}

func TestMdtestLayout(t *testing.T) {
	tests := []struct {
		name                         string
		tasks, items, depth, branch  int
		unique                       bool
		wantTreeDirs, wantTreeCreate int
	}{
		{"flat shared", 4, 10, 0, 1, false, 1, 1},
		{"flat unique", 4, 10, 0, 1, true, 1, 4},
		{"chain", 2, 5, 3, 1, false, 4, 4},
		{"binary shared", 3, 7, 2, 2, false, 7, 7},
		{"ternary unique", 3, 7, 2, 3, true, 13, 39},
		{"no items", 2, 0, 1, 2, true, 3, 6},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mo := &mdtestOptions{items: tt.items, depth: tt.depth, branch: tt.branch, uniqueDir: tt.unique}
			l := newMdLayout("/p/test-dir.client-0", mo, tt.tasks, true)
			if l.treeSize != tt.wantTreeDirs {
				t.Errorf("tree of %d directories, want %d", l.treeSize, tt.wantTreeDirs)
			}
			count := func(lists [][]mdItem) (n int) {
				for _, items := range lists {
					n += len(items)
				}
				return n
			}
			if n := count(l.treeCreate()); n != tt.wantTreeCreate {
				t.Errorf("tree-create: %d directories, want %d", n, tt.wantTreeCreate)
			}
			// Parents before children, every path once, below the iteration's directory.
			seen := map[string]bool{l.dir: true}
			for _, items := range l.treeCreate() {
				for _, it := range items {
					if seen[it.path] || !seen[path.Dir(it.path)] {
						t.Errorf("tree-create: %s twice or before its parent", it.path)
					}
					seen[it.path] = true
				}
			}
			for _, name := range []string{"dirs", "files", "dirRenames", "dirsToRemove"} {
				lists := map[string][][]mdItem{"dirs": l.dirs(), "files": l.files(), "dirRenames": l.dirRenames(), "dirsToRemove": l.dirsToRemove()}[name]
				if len(lists) != tt.tasks || count(lists) != tt.tasks*tt.items {
					t.Errorf("%s: %d tasks, %d items; want %d, %d", name, len(lists), count(lists), tt.tasks, tt.tasks*tt.items)
				}
				for _, items := range lists {
					for _, it := range items {
						if !seen[path.Dir(it.path)] {
							t.Errorf("%s: %s is not in a tree directory", name, it.path)
						}
					}
				}
			}
			for t2, items := range l.dirRenames() {
				for i, it := range items {
					if it.to != l.dirsToRemove()[t2][i].path || it.path != l.dirs()[t2][i].path {
						t.Errorf("rename %s → %s: not from dir-create's name to dir-remove's", it.path, it.to)
					}
				}
			}
			removal := l.treeRemove()
			for task, items := range l.treeCreate() {
				for i, it := range items {
					if removal[task][len(items)-1-i] != it {
						t.Fatalf("tree-remove of task %d is not tree-create reversed", task)
					}
				}
			}
		})
	}
}

func TestRateStats(t *testing.T) {
	tests := []struct {
		rates                []float64
		max, min, mean, sdev float64
	}{
		{nil, 0, 0, 0, 0},
		{[]float64{5}, 5, 5, 5, 0},
		{[]float64{2, 4, 4, 4, 5, 5, 7, 9}, 9, 2, 5, 2},
		{[]float64{100, 300}, 300, 100, 200, 100},
	}
	for _, tt := range tests {
		hi, lo, mean, sd := rateStats(tt.rates)
		if hi != tt.max || lo != tt.min || mean != tt.mean || math.Abs(sd-tt.sdev) > 1e-9 {
			t.Errorf("rateStats(%v) = %v, %v, %v, %v; want %v, %v, %v, %v", tt.rates, hi, lo, mean, sd, tt.max, tt.min, tt.mean, tt.sdev)
		}
	}
}

// TestBenchMdtestUsage checks the flags' contract: what runs the mdtest
// phases and what is refused before anything is sent.
func TestBenchMdtestUsage(t *testing.T) {
	f := startFake(t)
	dir := t.TempDir()
	tests := []struct {
		name string
		args []string
		want string // in stderr
	}{
		{"mixed phases", []string{"--phases", "stat,dir-stat"}, "do not run together"},
		{"unknown phase", []string{"--phases", "dir-stats"}, "unknown phase"},
		{"mdtest option with other phases", []string{"--phases", "stat", "--items", "3"}, "options of the mdtest phases"},
		{"bad via", []string{"--phases", "mdtest", "--via", "fuse:/x"}, "want client or mount:DIR"},
		{"empty mount", []string{"--phases", "mdtest", "--via", "mount:"}, "want client or mount:DIR"},
		{"two clients", []string{"--phases", "mdtest", "--via", "client,client"}, "at most one client"},
		{"dir and via", []string{"--dir", dir, "--via", "mount:" + dir}, "give one of them"},
		{"several vias without mdtest", []string{"--via", "client,mount:" + dir}, "mdtest phases only"},
		{"branch 0", []string{"--depth", "2", "--branch", "0"}, "at least 1"},
		{"huge tree", []string{"--depth", "30", "--branch", "4"}, "more than"},
		{"trace", []string{"--phases", "mdtest", "--trace", "x.trace"}, "no mdtest phases"},
		{"not a directory", []string{"--phases", "mdtest", "--via", "mount:" + filepath.Join(dir, "none")}, "not a directory"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, errOut, code := runCLI(t, append([]string{"--addr", f.Addr(), "bench", "--prefix", "/u"}, tt.args...)...)
			if code != exitUsage || !strings.Contains(errOut, tt.want) {
				t.Errorf("exit %d, stderr %q; want %d and %q", code, errOut, exitUsage, tt.want)
			}
		})
	}
	if got := len(f.Paths()); got != 1 { // "/" alone
		t.Errorf("a refused bench changed the namespace: %d paths", got)
	}
}

// startBenchCluster starts three in-process nodes (real Raft, Serf and
// Badger on loopback) and returns their RPC addresses once every node
// serves writes.
func startBenchCluster(t *testing.T) []string {
	t.Helper()
	if testing.Short() {
		t.Skip("starts three real nodes (Raft, Serf, Badger)")
	}
	clearEnv(t)
	log := rpctest.Logger(t)
	c1 := nodetest.Config(t, "n1")
	c1.Bootstrap = true
	c2 := nodetest.Config(t, "n2")
	c2.RetryJoin = []string{nodetest.SerfAddr(c1)}
	c3 := nodetest.Config(t, "n3")
	c3.RetryJoin = []string{nodetest.SerfAddr(c1), nodetest.SerfAddr(c2)}
	n1 := nodetest.Start(t, c1, log)
	nodetest.Start(t, c2, log)
	nodetest.Start(t, c3, log)
	nodetest.WaitMembers(t, 60*time.Second, n1, 3)
	addrs := []string{nodetest.RPCAddr(c1), nodetest.RPCAddr(c2), nodetest.RPCAddr(c3)}
	// Every node takes writes for paths homed on each of the others.
	for _, addr := range addrs {
		c := client.New(client.Options{Addrs: []string{addr}, Timeout: 5 * time.Second})
		rpctest.Eventually(t, 60*time.Second, addr+" creates", func() error {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			for i := range 24 {
				p := fmt.Sprintf("/ready-%d", i)
				if _, err := c.Create(ctx, &rpc.CreateRequest{Path: p, Mode: 0o644}); err != nil && !errors.Is(err, fs.ErrExist) {
					return fmt.Errorf("create %s: %w", p, err)
				}
			}
			return nil
		})
		c.Close()
	}
	c := client.New(client.Options{Addrs: addrs, Timeout: 5 * time.Second})
	defer c.Close()
	for i := range 24 {
		if err := c.Unlink(context.Background(), fmt.Sprintf("/ready-%d", i)); err != nil {
			t.Fatalf("unlink: %v", err)
		}
	}
	return addrs
}

// walkCount counts the directories and files below dir in the cluster
// (not dir itself).
func walkCount(t *testing.T, c *client.Client, dir string) (dirs, files int) {
	t.Helper()
	entries, err := c.ReadDirAll(context.Background(), dir, 0)
	if err != nil {
		t.Fatalf("list %s: %v", dir, err)
	}
	for _, e := range entries {
		if e.Type != rpc.TypeDir {
			files++
			continue
		}
		d, f := walkCount(t, c, dir+"/"+e.Name)
		dirs, files = dirs+d+1, files+f
	}
	return dirs, files
}

// TestBenchMdtestCluster runs every mdtest phase against a three-node
// cluster, through the client and through a directory (a local one stands
// in for the mount: the same system calls), and checks the counts: every
// item created was stat'ed, read, renamed and removed, with no error, and
// the tree is empty at the end.
func TestBenchMdtestCluster(t *testing.T) {
	addrs := startBenchCluster(t)
	c := client.New(client.Options{Addrs: addrs, Timeout: 5 * time.Second})
	defer c.Close()
	mnt := t.TempDir()
	cli := func(args ...string) string {
		t.Helper()
		out, errOut, code := runCLI(t, append([]string{"--addr", strings.Join(addrs, ","), "--timeout", "10s"}, args...)...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, errOut)
		}
		return out
	}
	const tasks, items, iterations = 4, 12, 2

	tests := []struct {
		name          string
		unique        bool
		depth, branch int
		via           []string
		treeDirs      int // directories tree-create makes per iteration
	}{
		{"shared tree via client and directory", false, 1, 3, []string{"client", "mount:" + mnt}, 4},
		{"unique trees via client", true, 2, 2, []string{"client"}, tasks * 7},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			prefix := "/md" + strconv.Itoa(i)
			args := []string{"--json", "bench", "--phases", "mdtest", "--prefix", prefix, "-c", strconv.Itoa(tasks),
				"--items", strconv.Itoa(items), "--depth", strconv.Itoa(tt.depth), "--branch", strconv.Itoa(tt.branch),
				"--iterations", strconv.Itoa(iterations), "--via", strings.Join(tt.via, ",")}
			if tt.unique {
				args = append(args, "--unique-dir")
			}
			if _, err := c.Mkdir(context.Background(), &rpc.MkdirRequest{Path: prefix, Mode: 0o755}); err != nil {
				t.Fatal(err)
			}
			if err := os.MkdirAll(filepath.Join(mnt, prefix), 0o755); err != nil {
				t.Fatal(err)
			}
			var rep mdtestJSON
			if err := json.Unmarshal([]byte(cli(args...)), &rep); err != nil {
				t.Fatal(err)
			}
			if rep.Tasks != tasks || rep.ItemsPerTask != items || rep.Iterations != iterations || !slices.Equal(rep.Via, tt.via) {
				t.Errorf("report header %+v", rep)
			}
			want := map[string]int{mdTreeCreate: tt.treeDirs, mdTreeRemove: tt.treeDirs}
			for _, name := range mdtestPhaseNames() {
				if _, tree := want[name]; !tree {
					want[name] = tasks * items
				}
			}
			// Every phase of every iteration through every way in, in order.
			k := 0
			for _, via := range tt.via {
				for it := range iterations {
					for _, name := range mdtestPhaseNames() {
						if k >= len(rep.Phases) {
							t.Fatalf("%d phase results, want %d", len(rep.Phases), len(tt.via)*iterations*len(want))
						}
						ph := rep.Phases[k]
						k++
						if ph.Phase != name || ph.Node != via || ph.Iteration != it {
							t.Fatalf("phase %d: %s via %s iteration %d, want %s via %s iteration %d", k, ph.Phase, ph.Node, ph.Iteration, name, via, it)
						}
						if ph.Ops != want[name] || ph.Errors != 0 {
							t.Errorf("%s via %s iteration %d: %d ops, %d errors; want %d, 0", name, via, it, ph.Ops, ph.Errors, want[name])
						}
						stat := name == mdDirStat || name == mdFileStat || name == mdFileRead
						if levels := sumLevels(ph.Levels); stat && via == viaClient && levels != ph.Ops {
							t.Errorf("%s via client: levels %v, want %d in all", name, ph.Levels, ph.Ops)
						}
					}
				}
			}
			if k != len(rep.Phases) {
				t.Errorf("%d phase results, want %d", len(rep.Phases), k)
			}
			if len(rep.Summary) != len(tt.via)*len(mdtestPhases) {
				t.Fatalf("%d summary rows, want %d", len(rep.Summary), len(tt.via)*len(mdtestPhases))
			}
			for _, s := range rep.Summary {
				if len(s.Rates) != iterations || s.Ops != iterations*want[s.Phase] || s.Errors != 0 ||
					s.Max < s.Mean || s.Mean < s.Min || s.Min <= 0 || s.StdDev < 0 || s.P99Ms < s.P50Ms || s.Operation == "" {
					t.Errorf("summary %+v", s)
				}
			}
			if d, f := walkCount(t, c, prefix); d != 0 || f != 0 {
				t.Errorf("after the run %s holds %d directories and %d files, want none", prefix, d, f)
			}
			if entries, err := os.ReadDir(filepath.Join(mnt, prefix)); err != nil || len(entries) != 0 {
				t.Errorf("after the run the directory holds %d entries (%v), want none", len(entries), err)
			}
		})
	}

	// The phases split over two runs: the first leaves its tree and items,
	// all there; the second finds them (dir-remove the renamed directories)
	// and leaves nothing. The human summary.
	t.Run("split runs", func(t *testing.T) {
		common := []string{"bench", "--prefix", "/md-split", "-c", strconv.Itoa(tasks), "-n", strconv.Itoa(items), "-u", "-z", "1", "-b", "2"}
		cli(append(common, "--phases", "tree-create,dir-create,file-create")...)
		d, f := walkCount(t, c, "/md-split")
		if wantDirs := 1 + tasks*3 + tasks*items; d != wantDirs || f != tasks*items {
			t.Errorf("after the creates: %d directories and %d files, want %d and %d", d, f, wantDirs, tasks*items)
		}
		out := cli(append(common, "--phases", "dir-stat,dir-rename,dir-remove,file-stat,file-read,file-remove,tree-remove")...)
		for _, w := range []string{"SUMMARY rate (ops/s) via client", "MAX", "STD DEV", "P99", "Directory rename", "File read", "Tree removal", "a tree per task"} {
			if !strings.Contains(out, w) {
				t.Errorf("summary lacks %q:\n%s", w, out)
			}
		}
		if d, f := walkCount(t, c, "/md-split"); d != 0 || f != 0 {
			t.Errorf("after the removals: %d directories and %d files, want none", d, f)
		}
	})
}

// sumLevels returns the operations counted in levels.
func sumLevels(levels map[string]int) int {
	n := 0
	for _, v := range levels {
		n += v
	}
	return n
}
