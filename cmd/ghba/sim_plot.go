package main

import (
	"fmt"
	"path/filepath"
	"sort"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// simSeries is one line of a plot.
type simSeries struct {
	name string
	xs   []float64
	ys   []float64
}

func (s *simSeries) add(x, y float64) {
	s.xs = append(s.xs, x)
	s.ys = append(s.ys, y)
}

// simChart is a line simChart saved as PNG.
type simChart struct {
	title, xlabel, ylabel string
	logX                  bool
	// legend is the legend's corner: "tl", "tr", "bl" or "br" (default "tl").
	legend string
	// yPrec, when positive, labels the y ticks with that many decimals (on
	// a range of a few hundredths the default labels 1.05, 1.1 and 1.15
	// all "1.1").
	yPrec  int
	series []*simSeries
}

// line returns the series called name, creating it.
func (c *simChart) line(name string) *simSeries {
	for _, s := range c.series {
		if s.name == name {
			return s
		}
	}
	s := &simSeries{name: name}
	c.series = append(c.series, s)
	return s
}

// save writes the chart to dir/name. Points are sorted by x.
func (c *simChart) save(dir, name string) error {
	p := plot.New()
	p.Title.Text = c.title
	p.X.Label.Text = c.xlabel
	p.Y.Label.Text = c.ylabel
	p.Legend.Top = c.legend == "" || c.legend[0] == 't'
	p.Legend.Left = c.legend == "" || c.legend[1] == 'l'
	p.Legend.XOffs, p.Legend.YOffs = -vg.Points(6), -vg.Points(6)
	if p.Legend.Left {
		p.Legend.XOffs = vg.Points(6)
	}
	if !p.Legend.Top {
		p.Legend.YOffs = vg.Points(6)
	}
	if c.logX {
		p.X.Scale = plot.LogScale{}
		p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	}
	if c.yPrec > 0 {
		p.Y.Tick.Marker = plot.TickerFunc(func(min, max float64) []plot.Tick {
			ts := plot.DefaultTicks{}.Ticks(min, max)
			for i := range ts {
				if ts[i].Label != "" {
					ts[i].Label = strconv.FormatFloat(ts[i].Value, 'f', c.yPrec, 64)
				}
			}
			return ts
		})
	}
	var args []any
	for _, s := range c.series {
		pts := make(plotter.XYs, len(s.xs))
		for i := range s.xs {
			pts[i].X, pts[i].Y = s.xs[i], s.ys[i]
		}
		sort.Slice(pts, func(i, j int) bool { return pts[i].X < pts[j].X })
		args = append(args, s.name, pts)
	}
	if err := plotutil.AddLinePoints(p, args...); err != nil {
		return fmt.Errorf("plot %s: %w", name, err)
	}
	if err := p.Save(7*vg.Inch, 4.5*vg.Inch, filepath.Join(dir, name)); err != nil {
		return fmt.Errorf("plot %s: %w", name, err)
	}
	return nil
}
