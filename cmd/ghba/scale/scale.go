// Package scale measures how ghba's throughput grows with its number of
// nodes at equal CPU per node (`make scale`, issue 37) and reports it: a
// table, a CSV file and a PNG plot with HBA Fig. 16's speedups beside
// ours. With a list of workloads (`make scale-load`) it also measures,
// against each cluster, the latency and throughput under more and more
// clients, and reports them as HBA Figs. 15, 16 and 17 do (load.go).
//
// The run itself is TestScaleOut (scale_test.go): for each replication
// factor and node count it starts that many agent containers of the
// project's image (the container harness of cmd/ghba/chaos), limits each
// to the same CPU share, runs `ghba bench`'s mdtest phases from a client
// container with concurrency in proportion to the nodes, and records each
// phase's rate and the CPU the nodes and the rest of the machine used.
// This file holds what turns those points into the report.
package scale

import (
	"cmp"
	"encoding/csv"
	"fmt"
	"image/color"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// HBAFig16 are the peak metadata throughputs of the HBA prototype with 2,
// 4, 8 and 16 metadata servers over one server (HBA §7, Fig. 16: 1.7,
// 2.8, 3.8 and 4.4 times).
var HBAFig16 = map[int]float64{1: 1, 2: 1.7, 4: 2.8, 8: 3.8, 16: 4.4}

// Point is one phase measured against one cluster.
type Point struct {
	// Nodes is the cluster's number of agents; Replication the
	// replication factor asked for (a shard has min(Replication, Nodes)
	// copies).
	Nodes, Replication int
	// Phase is the mdtest phase ("file-create", ...).
	Phase string
	// Clients is the number of client tasks in all (every task issues
	// its next operation when the last one answered: a closed model, as
	// HBA §7 replays its traces).
	Clients int
	// OpsPerSec is the mean over the iterations of the phase's rate;
	// P50Ms and P99Ms the latencies of all its operations.
	OpsPerSec, P50Ms, P99Ms float64
	// Hops is the mean number of server-to-server RPCs per operation (as
	// the bench reports them).
	Hops float64
	// Ops and Errors count the phase's operations over the iterations.
	Ops, Errors int
	// Speedup is OpsPerSec over the rate of the same phase and
	// replication with the fewest nodes measured (Speedups fills it).
	Speedup float64
	// NodeCores is the CPU the agent containers used together during the
	// whole bench, in cores (CPU seconds per second), and ClientCores the
	// client container's; IdleCores is what the nodes used together at
	// rest just before. NaN when the cgroups could not be read.
	NodeCores, IdleCores, ClientCores float64
	// CPUShare is each agent's CPU limit in cores.
	CPUShare float64
}

// MeanLatencyMs is the mean time of one operation in milliseconds: in a
// closed model with Clients tasks, Little's law gives Clients / OpsPerSec.
func (p Point) MeanLatencyMs() float64 {
	if p.OpsPerSec <= 0 {
		return math.NaN()
	}
	return 1000 * float64(p.Clients) / p.OpsPerSec
}

// Speedups fills every point's Speedup: its rate over the rate of the same
// phase and replication factor at the smallest node count among pts (the
// scale-out run, where the clients grow with the nodes).
func Speedups(pts []Point) { speedups(pts, false) }

// LoadSpeedups fills every point's Speedup as Speedups does, against the
// point with the same number of clients: at a fixed number of clients
// the rate ratio is also the latency at the fewest nodes over this
// latency, HBA Fig. 17's speedup.
func LoadSpeedups(pts []Point) { speedups(pts, true) }

func speedups(pts []Point, byClients bool) {
	type key struct {
		r, clients int
		phase      string
	}
	keyOf := func(p Point) key {
		k := key{r: p.Replication, phase: p.Phase}
		if byClients {
			k.clients = p.Clients
		}
		return k
	}
	base := make(map[key]Point)
	for _, p := range pts {
		k := keyOf(p)
		if b, ok := base[k]; !ok || p.Nodes < b.Nodes {
			base[k] = p
		}
	}
	for i := range pts {
		b := base[keyOf(pts[i])]
		pts[i].Speedup = math.NaN()
		if b.OpsPerSec > 0 {
			pts[i].Speedup = pts[i].OpsPerSec / b.OpsPerSec
		}
	}
}

// sorted returns pts ordered by replication, phase (in first-seen order),
// nodes and clients.
func sorted(pts []Point) []Point {
	order := make(map[string]int)
	for _, p := range pts {
		if _, ok := order[p.Phase]; !ok {
			order[p.Phase] = len(order)
		}
	}
	out := slices.Clone(pts)
	slices.SortStableFunc(out, func(a, b Point) int {
		return cmp.Or(cmp.Compare(a.Replication, b.Replication), cmp.Compare(order[a.Phase], order[b.Phase]),
			cmp.Compare(a.Nodes, b.Nodes), cmp.Compare(a.Clients, b.Clients))
	})
	return out
}

// WriteTable writes pts as an aligned table, one row per replication,
// phase and node count, with HBA Fig. 16's speedup for that node count.
func WriteTable(w io.Writer, pts []Point) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "R\tnodes\tclients\tphase\tops/s\tspeedup\tHBA Fig.16\tmean ms\tp50 ms\tp99 ms\thops\terrors\tnode cores\tidle\tclient cores\t")
	for _, p := range sorted(pts) {
		fmt.Fprintf(tw, "%d\t%d\t%d\t%s\t%.0f\t%.2f\t%s\t%.2f\t%.2f\t%.2f\t%.2f\t%d\t%.2f\t%.2f\t%.2f\t\n", p.Replication, p.Nodes, p.Clients, p.Phase,
			p.OpsPerSec, p.Speedup, paper(p.Nodes), p.MeanLatencyMs(), p.P50Ms, p.P99Ms, p.Hops, p.Errors, p.NodeCores, p.IdleCores, p.ClientCores)
	}
	return tw.Flush()
}

// paper renders HBA Fig. 16's speedup at n servers, "-" where it has none.
func paper(n int) string {
	if s, ok := HBAFig16[n]; ok {
		return strconv.FormatFloat(s, 'f', 1, 64)
	}
	return "-"
}

// WriteCSV writes pts as CSV with a header row.
func WriteCSV(w io.Writer, pts []Point) error {
	cw := csv.NewWriter(w)
	f := func(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }
	rows := [][]string{{"replication", "nodes", "cpus_per_node", "phase", "ops_per_sec", "speedup", "hba_fig16_speedup",
		"p50_ms", "p99_ms", "mean_hops", "ops", "errors", "node_cores", "idle_node_cores", "client_cores", "clients", "mean_latency_ms"}}
	for _, p := range sorted(pts) {
		rows = append(rows, []string{strconv.Itoa(p.Replication), strconv.Itoa(p.Nodes), f(p.CPUShare), p.Phase,
			f(p.OpsPerSec), f(p.Speedup), paper(p.Nodes), f(p.P50Ms), f(p.P99Ms), f(p.Hops), strconv.Itoa(p.Ops),
			strconv.Itoa(p.Errors), f(p.NodeCores), f(p.IdleCores), f(p.ClientCores), strconv.Itoa(p.Clients), f(p.MeanLatencyMs())})
	}
	if err := cw.WriteAll(rows); err != nil {
		return fmt.Errorf("scale: write CSV: %w", err)
	}
	return nil
}

// WritePlot writes a PNG to path: for each replication factor a panel of
// every phase's speedup against the node count, with HBA Fig. 16's
// speedups and the linear one beside them. The tree phases are left out:
// they make one directory per task, too few operations to rate.
func WritePlot(path string, pts []Point) error {
	var rs []int
	for _, p := range pts {
		if !slices.Contains(rs, p.Replication) {
			rs = append(rs, p.Replication)
		}
	}
	slices.Sort(rs)
	if len(rs) == 0 {
		return fmt.Errorf("scale: plot %s: no points", path)
	}
	panels := make([][]*plot.Plot, 1)
	maxNodes := 1
	for _, p := range pts {
		maxNodes = max(maxNodes, p.Nodes)
	}
	for _, r := range rs {
		pl, err := panel(r, pts, maxNodes)
		if err != nil {
			return fmt.Errorf("scale: plot %s: %w", path, err)
		}
		panels[0] = append(panels[0], pl)
	}
	return writePanels(path, panels, 5.5*vg.Inch, 4.5*vg.Inch)
}

// writePanels draws panels (rows of plots, each w by h) into one PNG at
// path.
func writePanels(path string, panels [][]*plot.Plot, w, h vg.Length) error {
	img := vgimg.New(vg.Length(len(panels[0]))*w, vg.Length(len(panels))*h)
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: len(panels), Cols: len(panels[0]), PadX: vg.Millimeter, PadY: vg.Millimeter,
		PadTop: vg.Millimeter, PadBottom: vg.Millimeter, PadLeft: vg.Millimeter, PadRight: vg.Millimeter}
	canvases := plot.Align(panels, tiles, dc)
	for i := range panels {
		for j, pl := range panels[i] {
			pl.Draw(canvases[i][j])
		}
	}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("scale: plot: %w", err)
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return fmt.Errorf("scale: plot %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("scale: plot %s: %w", path, err)
	}
	return nil
}

// panel is the plot of replication factor r.
func panel(r int, pts []Point, maxNodes int) (*plot.Plot, error) {
	pl := plot.New()
	pl.Title.Text = fmt.Sprintf("R=%d: speedup over the fewest nodes", r)
	pl.X.Label.Text = "nodes (equal CPU each)"
	pl.Y.Label.Text = "throughput / throughput at fewest nodes"
	pl.Legend.Top, pl.Legend.Left = true, true
	var args []any
	for _, p := range sorted(pts) {
		if p.Replication != r || math.IsNaN(p.Speedup) || strings.HasPrefix(p.Phase, "tree-") {
			continue
		}
		if len(args) == 0 || args[len(args)-2] != p.Phase {
			args = append(args, p.Phase, plotter.XYs{})
		}
		args[len(args)-1] = append(args[len(args)-1].(plotter.XYs), plotter.XY{X: float64(p.Nodes), Y: p.Speedup})
	}
	if err := plotutil.AddLinePoints(pl, args...); err != nil {
		return nil, err
	}
	var fig, linear plotter.XYs
	for _, n := range slices.Sorted(func(yield func(int) bool) {
		for n := range HBAFig16 {
			if n <= maxNodes && !yield(n) {
				return
			}
		}
	}) {
		fig = append(fig, plotter.XY{X: float64(n), Y: HBAFig16[n]})
		linear = append(linear, plotter.XY{X: float64(n), Y: float64(n)})
	}
	for _, ref := range []struct {
		name string
		xys  plotter.XYs
		dash []vg.Length
	}{{"HBA Fig. 16", fig, []vg.Length{vg.Points(6), vg.Points(3)}}, {"linear", linear, []vg.Length{vg.Points(2), vg.Points(2)}}} {
		l, err := plotter.NewLine(ref.xys)
		if err != nil {
			return nil, err
		}
		l.Color = color.Gray{Y: 0x40}
		l.Dashes = ref.dash
		l.Width = vg.Points(1.5)
		pl.Add(l)
		pl.Legend.Add(ref.name, l)
	}
	return pl, nil
}
