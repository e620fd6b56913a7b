package scale

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// The load run (`make scale-load`): against each cluster, the same
// phases under more and more clients, as HBA §7 replays its traces with
// more and more clients against 1, 2, 4, 8 and 16 servers. It gives, per
// phase, HBA's three figures:
//
//   - Fig. 15, the mean latency of an operation against the number of
//     clients (closed model: clients / rate, Point.MeanLatencyMs);
//   - Fig. 16, the throughput against the number of clients;
//   - Fig. 17, the speedup against the number of clients: the latency
//     with the fewest nodes over the latency with n nodes at the same
//     load (LoadSpeedups), which is also the ratio of the rates.

// figure is one of the load plot's columns.
type figure struct {
	title, y string
	value    func(Point) float64
}

var loadFigures = []figure{
	{"HBA Fig. 15: mean latency", "ms per operation", Point.MeanLatencyMs},
	{"HBA Fig. 16: throughput", "operations/s", func(p Point) float64 { return p.OpsPerSec }},
	{"HBA Fig. 17: speedup", "latency at fewest nodes / latency", func(p Point) float64 { return p.Speedup }},
}

// WriteLoadPlot writes a PNG to path: a row per replication factor and
// phase (the tree phases left out, as in WritePlot), and in each row HBA
// Figs. 15, 16 and 17 against the number of clients, a line per node
// count. Call LoadSpeedups first.
func WriteLoadPlot(path string, pts []Point) error {
	type row struct {
		r     int
		phase string
	}
	var rows []row
	for _, p := range sorted(pts) {
		if rw := (row{p.Replication, p.Phase}); !strings.HasPrefix(p.Phase, "tree-") && !slices.Contains(rows, rw) {
			rows = append(rows, rw)
		}
	}
	if len(rows) == 0 {
		return fmt.Errorf("scale: plot %s: no points", path)
	}
	panels := make([][]*plot.Plot, len(rows))
	for i, rw := range rows {
		for _, f := range loadFigures {
			pl := plot.New()
			pl.Title.Text = fmt.Sprintf("R=%d %s: %s", rw.r, rw.phase, f.title)
			pl.X.Label.Text = "clients"
			pl.Y.Label.Text = f.y
			pl.X.Scale, pl.X.Tick.Marker = plot.LogScale{}, plot.LogTicks{}
			pl.Legend.Top, pl.Legend.Left = true, true
			var args []any
			for _, p := range sorted(pts) {
				v := f.value(p)
				if p.Replication != rw.r || p.Phase != rw.phase || math.IsNaN(v) || p.Clients < 1 {
					continue
				}
				name := fmt.Sprintf("%d nodes", p.Nodes)
				if len(args) == 0 || args[len(args)-2] != name {
					args = append(args, name, plotter.XYs{})
				}
				args[len(args)-1] = append(args[len(args)-1].(plotter.XYs), plotter.XY{X: float64(p.Clients), Y: v})
			}
			if err := plotutil.AddLinePoints(pl, args...); err != nil {
				return fmt.Errorf("scale: plot %s: %w", path, err)
			}
			panels[i] = append(panels[i], pl)
		}
	}
	return writePanels(path, panels, 5*vg.Inch, 4*vg.Inch)
}
