package scale

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"image/png"
	"log/slog"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ghba/ghba/cmd/ghba/chaos"
)

// TestReport checks the report of a small set of points: the speedups,
// the table, the CSV file and that the plot is a PNG image.
func TestReport(t *testing.T) {
	var pts []Point
	for _, r := range []int{1, 3} {
		for i, n := range []int{1, 2, 4} {
			pts = append(pts,
				Point{Nodes: n, Replication: r, Phase: "file-create", OpsPerSec: 1000 * float64(i+1) / float64(r), CPUShare: 0.1},
				Point{Nodes: n, Replication: r, Phase: "file-stat", OpsPerSec: 5000 * float64(n)})
		}
	}
	Speedups(pts)
	for _, p := range pts {
		want := float64(p.Nodes) // file-stat
		if p.Phase == "file-create" {
			want = map[int]float64{1: 1, 2: 2, 4: 3}[p.Nodes]
		}
		if math.Abs(p.Speedup-want) > 1e-9 {
			t.Errorf("R=%d %d nodes %s: speedup %v, want %v", p.Replication, p.Nodes, p.Phase, p.Speedup, want)
		}
	}
	var table bytes.Buffer
	if err := WriteTable(&table, pts); err != nil {
		t.Fatal(err)
	}
	if lines := strings.Count(table.String(), "\n"); lines != len(pts)+1 {
		t.Errorf("table has %d lines, want %d:\n%s", lines, len(pts)+1, table.String())
	}
	if !strings.Contains(table.String(), "2.8") { // HBA Fig. 16 at 4 nodes
		t.Errorf("table lacks HBA Fig. 16's speedups:\n%s", table.String())
	}
	var b bytes.Buffer
	if err := WriteCSV(&b, pts); err != nil {
		t.Fatal(err)
	}
	rows, err := csv.NewReader(&b).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != len(pts)+1 || rows[1][0] != "1" || rows[1][1] != "1" || rows[1][3] != "file-create" {
		t.Errorf("CSV rows %v", rows[:min(len(rows), 3)])
	}
	path := filepath.Join(t.TempDir(), "scale.png")
	if err := WritePlot(path, pts); err != nil {
		t.Fatal(err)
	}
	checkPNG(t, path, 500)
}

// checkPNG fails t unless path is a PNG image at least minWidth wide.
func checkPNG(t *testing.T, path string, minWidth int) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("plot is not a PNG: %v", err)
	}
	if w := img.Bounds().Dx(); w < minWidth {
		t.Errorf("plot is %d pixels wide, want at least %d", w, minWidth)
	}
}

// TestLoadReport checks the load run's report: the mean latency by
// Little's law, the speedups against the fewest nodes at the same number
// of clients (HBA Fig. 17) and that the plot is a PNG image.
func TestLoadReport(t *testing.T) {
	var pts []Point
	for _, n := range []int{1, 2, 4} {
		for _, c := range []int{8, 32, 128} {
			// Saturates at 500 ops/s per node once clients outnumber 4 per node.
			rate := math.Min(float64(c)*100, 500*float64(n))
			pts = append(pts, Point{Nodes: n, Replication: 1, Clients: c, Phase: "file-stat", OpsPerSec: rate},
				Point{Nodes: n, Replication: 1, Clients: c, Phase: "tree-create", OpsPerSec: 10})
		}
	}
	LoadSpeedups(pts)
	for _, p := range pts {
		if p.Phase != "file-stat" {
			continue
		}
		base := math.Min(float64(p.Clients)*100, 500)
		if want := math.Min(float64(p.Clients)*100, 500*float64(p.Nodes)) / base; math.Abs(p.Speedup-want) > 1e-9 {
			t.Errorf("%d nodes, %d clients: speedup %v, want %v", p.Nodes, p.Clients, p.Speedup, want)
		}
		if want := 1000 * float64(p.Clients) / p.OpsPerSec; math.Abs(p.MeanLatencyMs()-want) > 1e-9 {
			t.Errorf("%d nodes, %d clients: mean latency %v, want %v", p.Nodes, p.Clients, p.MeanLatencyMs(), want)
		}
	}
	if s := pts[len(pts)-2].Speedup; s != 4 { // 4 nodes, 128 clients: 2000 against 500 ops/s
		t.Errorf("4 nodes at 128 clients: speedup %v, want 4", s)
	}
	var table bytes.Buffer
	if err := WriteTable(&table, pts); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(table.String(), "clients") || !strings.Contains(table.String(), "mean ms") {
		t.Errorf("table lacks the clients and the mean latency:\n%s", table.String())
	}
	path := filepath.Join(t.TempDir(), "load.png")
	if err := WriteLoadPlot(path, pts); err != nil {
		t.Fatal(err)
	}
	checkPNG(t, path, 1000) // three panels
	if err := WriteLoadPlot(path, pts[1:2]); err == nil {
		t.Error("a plot of tree phases only: no error")
	}
}

// scaleConfig is the scale-out run's configuration, from the environment
// (the Makefile's scale target sets it).
type scaleConfig struct {
	nodes        []int   // GHBA_SCALE_NODES: node counts, in order
	replications []int   // GHBA_SCALE_REPLICATION: replication factors
	cpus         float64 // GHBA_SCALE_CPUS: each agent's CPU limit in cores
	perNode      int     // GHBA_SCALE_CLIENTS: client tasks per node
	workloads    []int   // GHBA_SCALE_WORKLOADS: client tasks in all, each run against every cluster (HBA Figs. 15-17); none: perNode × nodes
	items        int     // GHBA_SCALE_ITEMS: items per task (mdtest -n)
	iterations   int     // GHBA_SCALE_ITERATIONS: mdtest -i
	phases       string  // GHBA_SCALE_PHASES: bench --phases
	out          string  // GHBA_SCALE_OUT: directory of scale.csv and scale.png
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func ints(t *testing.T, k, def string) []int {
	t.Helper()
	var out []int
	for f := range strings.SplitSeq(envOr(k, def), ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			t.Fatalf("%s=%q: want positive integers, comma-separated", k, envOr(k, def))
		}
		out = append(out, n)
	}
	return out
}

func readConfig(t *testing.T) scaleConfig {
	one := func(k, def string) int { return ints(t, k, def)[0] }
	cpus, err := strconv.ParseFloat(envOr("GHBA_SCALE_CPUS", "0.1"), 64)
	if err != nil || cpus <= 0 {
		t.Fatalf("GHBA_SCALE_CPUS=%q: want a positive number of cores", os.Getenv("GHBA_SCALE_CPUS"))
	}
	var workloads []int
	if os.Getenv("GHBA_SCALE_WORKLOADS") != "" {
		workloads = ints(t, "GHBA_SCALE_WORKLOADS", "")
	}
	return scaleConfig{
		nodes:        ints(t, "GHBA_SCALE_NODES", "1,2,4,8"),
		replications: ints(t, "GHBA_SCALE_REPLICATION", "1,3"),
		cpus:         cpus,
		perNode:      one("GHBA_SCALE_CLIENTS", "32"),
		workloads:    workloads,
		items:        one("GHBA_SCALE_ITEMS", "20"),
		iterations:   one("GHBA_SCALE_ITERATIONS", "2"),
		phases:       envOr("GHBA_SCALE_PHASES", "tree-create,dir-create,dir-stat,dir-remove,file-create,file-stat,file-remove,tree-remove"),
		out:          envOr("GHBA_SCALE_OUT", t.TempDir()),
	}
}

// TestScaleOut is `make scale`: the same bench against 1, 2, 4 and 8
// nodes (GHBA_SCALE_NODES) at R=1 and R=3 (GHBA_SCALE_REPLICATION), each
// node a container limited to GHBA_SCALE_CPUS cores, the client in its own
// container with GHBA_SCALE_CLIENTS tasks per node. It prints the table and
// writes scale.csv and scale.png to GHBA_SCALE_OUT. Skipped unless
// GHBA_SCALE=1 (it needs docker and about 10 minutes of a quiet machine).
func TestScaleOut(t *testing.T) {
	if os.Getenv("GHBA_SCALE") != "1" {
		t.Skip("the scale-out measurement: run it with make scale (GHBA_SCALE=1; needs docker)")
	}
	cfg := readConfig(t)
	log := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelInfo}))
	ctx := t.Context()
	d := &chaos.Docker{Log: log}
	if err := d.CheckDaemon(ctx); err != nil {
		t.Fatal(err)
	}
	d.SweepLeftovers(ctx)
	modRoot, err := chaos.ModuleRoot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 0))
	prefix := fmt.Sprintf("ghbascale-%d-%04x", os.Getpid(), rng.IntN(1<<16))
	image := "ghba-scale:" + prefix
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := d.Run(cctx, "rmi", "-f", image); err != nil {
			t.Logf("cleanup: %v", err)
		}
	})
	if err := d.BuildImage(ctx, modRoot, image, nil, chaos.RunLabels(prefix)...); err != nil {
		t.Fatal(err)
	}
	var pts []Point
	for _, r := range cfg.replications {
		for _, n := range cfg.nodes {
			got, err := measure(ctx, t, d, log, rng, cfg, fmt.Sprintf("%s-r%dn%d", prefix, r, n), image, n, r)
			if err != nil {
				t.Fatalf("R=%d, %d nodes: %v", r, n, err)
			}
			pts = append(pts, got...)
		}
	}
	name, plotFn := "scale", WritePlot
	if len(cfg.workloads) > 0 {
		LoadSpeedups(pts)
		name, plotFn = "load", WriteLoadPlot
		fmt.Printf("\nload: %.2f cores per node, %v client tasks in all, %d items per task, %d iterations (mean rate; mean latency = clients / rate)\n",
			cfg.cpus, cfg.workloads, cfg.items, cfg.iterations)
	} else {
		Speedups(pts)
		fmt.Printf("\nscale-out: %.2f cores per node, %d client tasks per node, %d items per task, %d iterations (mean rate)\n",
			cfg.cpus, cfg.perNode, cfg.items, cfg.iterations)
	}
	if err := WriteTable(os.Stdout, pts); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(cfg.out, 0o755); err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := WriteCSV(&b, pts); err != nil {
		t.Fatal(err)
	}
	csvPath, pngPath := filepath.Join(cfg.out, name+".csv"), filepath.Join(cfg.out, name+".png")
	if err := os.WriteFile(csvPath, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := plotFn(pngPath, pts); err != nil {
		t.Fatal(err)
	}
	fmt.Printf("wrote %s and %s\n", csvPath, pngPath)
	for _, p := range pts {
		if p.Errors > 0 {
			t.Errorf("R=%d, %d nodes, %s: %d operations failed", p.Replication, p.Nodes, p.Phase, p.Errors)
		}
	}
}

// benchSummary is the part of `ghba --json bench`'s mdtest report read here.
type benchSummary struct {
	Summary []struct {
		Phase  string  `json:"phase"`
		Node   string  `json:"node"`
		Mean   float64 `json:"mean"`
		Ops    int     `json:"ops"`
		Errors int     `json:"errors"`
		P50Ms  float64 `json:"p50_ms"`
		P99Ms  float64 `json:"p99_ms"`
		Hops   float64 `json:"mean_hops"`
	} `json:"summary"`
}

// idleWindow is how long measure reads the nodes' CPU at rest.
const idleWindow = 5 * time.Second

// measure starts n nodes at replication r, limits each to cfg.cpus cores
// once they have formed (starting is not measured), reads their CPU at
// rest, runs the bench from a client container once per workload (with
// none, cfg.perNode × n clients) and returns one point per phase and
// workload.
func measure(ctx context.Context, t *testing.T, d *chaos.Docker, log *slog.Logger, rng *rand.Rand, cfg scaleConfig,
	prefix, image string, n, r int) ([]Point, error) {
	log.Info("cluster", "nodes", n, "replication", r)
	cl, err := chaos.NewCluster(ctx, d, chaos.ClusterConfig{Prefix: prefix, Image: image, Groups: 1, PerGroup: n,
		Log: log, Rand: rng, Replication: r})
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := cl.Close(cctx); err != nil {
			t.Logf("cleanup: %v", err)
		}
	}()
	if err != nil {
		return nil, err
	}
	if err := cl.Start(ctx); err != nil {
		return nil, err
	}
	if err := cl.WaitShardsSettled(ctx, 2*time.Minute); err != nil {
		return nil, err
	}
	if err := cl.LimitCPU(ctx, cfg.cpus); err != nil {
		return nil, err
	}
	// What the nodes spend at rest (heartbeats, gossip, filter exchange)
	// is taken from the CPU each has for requests.
	idle0, idleStart := nodesCPU(ctx, d, cl), time.Now()
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(idleWindow):
	}
	idleCores := math.NaN()
	if idle1 := nodesCPU(ctx, d, cl); idle0 >= 0 && idle1 >= 0 {
		idleCores = (idle1 - idle0).Seconds() / time.Since(idleStart).Seconds()
	}
	loads := cfg.workloads
	if len(loads) == 0 {
		loads = []int{cfg.perNode * n}
	}
	var pts []Point
	for _, clients := range loads {
		got, err := runBench(ctx, d, log, cl, cfg, n, r, clients)
		if err != nil {
			return nil, fmt.Errorf("%d clients: %w", clients, err)
		}
		for i := range got {
			got[i].IdleCores = idleCores
		}
		pts = append(pts, got...)
	}
	return pts, nil
}

// runBench runs the bench with clients tasks in all from a client
// container against cl and returns one point per phase.
func runBench(ctx context.Context, d *chaos.Docker, log *slog.Logger, cl *chaos.Cluster, cfg scaleConfig, n, r, clients int) ([]Point, error) {
	args := []string{"--addr", strings.Join(cl.RPCAddrs(), ","), "--json", "bench", "--phases", cfg.phases,
		"--unique-dir", "-c", strconv.Itoa(clients), "-n", strconv.Itoa(cfg.items),
		"-i", strconv.Itoa(cfg.iterations), "--via", "client"}
	nodes0 := nodesCPU(ctx, d, cl)
	start := time.Now()
	client := clientCPU(ctx, d, cl.CommandContainer("client"))
	out, err := cl.RunCommand(ctx, 10*time.Minute, "client", args...)
	wall := time.Since(start).Seconds()
	nodes1 := nodesCPU(ctx, d, cl)
	nodeCores, clientCores := math.NaN(), math.NaN()
	if nodes0 >= 0 && nodes1 >= 0 {
		nodeCores = (nodes1 - nodes0).Seconds() / wall
	}
	if c := client(); c >= 0 {
		clientCores = c.Seconds() / wall
	}
	if err != nil {
		return nil, err
	}
	var rep benchSummary
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		return nil, fmt.Errorf("bench output: %w: %.300s", err, out)
	}
	var pts []Point
	for _, s := range rep.Summary {
		pts = append(pts, Point{Nodes: n, Replication: r, Clients: clients, Phase: s.Phase, OpsPerSec: s.Mean, P50Ms: s.P50Ms,
			P99Ms: s.P99Ms, Hops: s.Hops, Ops: s.Ops, Errors: s.Errors, NodeCores: nodeCores, ClientCores: clientCores, CPUShare: cfg.cpus})
		log.Info("phase", "nodes", n, "replication", r, "clients", clients, "phase", s.Phase, "ops_per_sec", math.Round(s.Mean), "errors", s.Errors)
	}
	log.Info("CPU during the bench", "node_cores", nodeCores, "client_cores", clientCores, "seconds", math.Round(wall))
	if len(pts) == 0 {
		return nil, fmt.Errorf("bench reported no phases: %.300s", out)
	}
	return pts, nil
}

// nodesCPU returns the CPU time the cluster's nodes have used together,
// -1 if a node's cgroup cannot be read.
func nodesCPU(ctx context.Context, d *chaos.Docker, cl *chaos.Cluster) time.Duration {
	var sum time.Duration
	for _, n := range cl.Nodes {
		c, err := d.CPUTime(ctx, n.Container)
		if err != nil {
			return -1
		}
		sum += c
	}
	return sum
}

// clientCPU follows the CPU time of the container that is about to run
// (it is removed when it exits, with its cgroup): it reads it every
// 500 ms until the returned function is called, which returns the last
// time read (-1 if none could be read).
func clientCPU(ctx context.Context, d *chaos.Docker, container string) func() time.Duration {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan time.Duration, 1)
	go func() {
		last := time.Duration(-1)
		t := time.NewTicker(500 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				done <- last
				return
			case <-t.C:
				if c, err := d.CPUTime(ctx, container); err == nil {
					last = c
				}
			}
		}
	}()
	return func() time.Duration {
		cancel()
		return <-done
	}
}
