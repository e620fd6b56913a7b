package console

import (
	"fmt"
	"html/template"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Counters are a node's cumulative counters at one moment, the raw
// material of the console's charts (rates are differences of two samples).
type Counters struct {
	// Ops counts the RPC calls the node has served (from clients and from
	// other nodes).
	Ops uint64
	// Levels counts the lookups entered at the node by the level that
	// resolved them: L1 to L4.
	Levels [4]uint64
}

// Sample is Counters taken at a time.
type Sample struct {
	At time.Time
	Counters
}

// History is a bounded ring of samples, oldest first: once full, each new
// sample replaces the oldest. It is safe for concurrent use.
type History struct {
	mu   sync.Mutex
	ring []Sample
	next int // where the next sample goes
	full bool
}

// NewHistory returns a History that keeps the last size samples (at least
// 2, so that it can hold a rate).
func NewHistory(size int) *History {
	return &History{ring: make([]Sample, max(size, 2))}
}

// Add appends s, dropping the oldest sample when the ring is full.
func (h *History) Add(s Sample) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ring[h.next] = s
	h.next++
	if h.next == len(h.ring) {
		h.next, h.full = 0, true
	}
}

// Samples returns a copy of the samples, oldest first.
func (h *History) Samples() []Sample {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.full {
		return append([]Sample(nil), h.ring[:h.next]...)
	}
	out := make([]Sample, 0, len(h.ring))
	out = append(out, h.ring[h.next:]...)
	return append(out, h.ring[:h.next]...)
}

// Series is one line of a chart: a value per point in time.
type Series struct {
	Name  string
	Color string
	// Values has one value per time of the chart's Times.
	Values []float64
}

// Chart is a line chart of one or more series over the same times.
type Chart struct {
	Title  string
	Unit   string
	Times  []time.Time
	Series []Series
}

// rate returns the per-second rate between two readings of a counter (0
// when it went backwards: the node restarted).
func rate(prev, cur uint64, d time.Duration) float64 {
	if cur < prev || d <= 0 {
		return 0
	}
	return float64(cur-prev) / d.Seconds()
}

// Charts turns samples into the console's two charts: RPC operations per
// second, and lookups per second by resolving level. Each point is the
// rate between a sample and the one before it.
func Charts(samples []Sample) []Chart {
	ops := Chart{Title: "Operations served", Unit: "ops/s"}
	levels := Chart{Title: "Lookups resolved per level", Unit: "lookups/s"}
	opsSeries := Series{Name: "RPC calls", Color: "#1f5fa8"}
	colors := [4]string{"#2a9d3c", "#1f5fa8", "#d48a00", "#c0392b"}
	lv := make([]Series, 4)
	for i := range lv {
		lv[i] = Series{Name: "L" + strconv.Itoa(i+1), Color: colors[i]}
	}
	for i := 1; i < len(samples); i++ {
		p, c := samples[i-1], samples[i]
		d := c.At.Sub(p.At)
		ops.Times = append(ops.Times, c.At)
		opsSeries.Values = append(opsSeries.Values, rate(p.Ops, c.Ops, d))
		levels.Times = append(levels.Times, c.At)
		for l := range lv {
			lv[l].Values = append(lv[l].Values, rate(p.Levels[l], c.Levels[l], d))
		}
	}
	ops.Series = []Series{opsSeries}
	levels.Series = lv
	return []Chart{ops, levels}
}

// Chart geometry, in SVG user units.
const (
	chartW, chartH       = 640, 200
	padL, padR, padT, pb = 56, 12, 12, 28
)

// SVG renders the chart as an inline SVG element: a polyline per series
// (every point also marked, as a circle of class "pt"), the axes with the
// maximum and the time span, and a legend. With fewer than one point it
// says that samples are still being collected.
func (c *Chart) SVG() template.HTML {
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="chart" role="img" viewBox="0 0 %d %d" width="%d" height="%d" xmlns="http://www.w3.org/2000/svg">`,
		chartW, chartH, chartW, chartH)
	fmt.Fprintf(&b, `<title>%s</title>`, template.HTMLEscapeString(c.Title+" ("+c.Unit+")"))
	x0, y0, x1, y1 := float64(padL), float64(chartH-pb), float64(chartW-padR), float64(padT)
	fmt.Fprintf(&b, `<path d="M%.0f %.0f V%.0f H%.0f" fill="none" stroke="#888"/>`, x0, y1, y0, x1)
	if len(c.Times) == 0 {
		fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" class="empty">collecting samples…</text></svg>`, x0+10, (y0+y1)/2)
		return template.HTML(b.String()) //nolint:gosec // built from numbers and escaped text only
	}
	top := 0.0
	for _, s := range c.Series {
		for _, v := range s.Values {
			top = math.Max(top, v)
		}
	}
	top = niceCeil(top)
	t0, t1 := c.Times[0], c.Times[len(c.Times)-1]
	span := t1.Sub(t0)
	xOf := func(i int) float64 {
		if span <= 0 {
			return x1
		}
		return x0 + (x1-x0)*float64(c.Times[i].Sub(t0))/float64(span)
	}
	yOf := func(v float64) float64 { return y0 - (y0-y1)*v/top }
	fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" text-anchor="end" class="axis">%s</text>`, x0-4, y1+8, formatValue(top))
	fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" text-anchor="end" class="axis">0</text>`, x0-4, y0)
	fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" class="axis">-%s</text>`, x0, y0+18, span.Round(time.Second))
	fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" text-anchor="end" class="axis">%s</text>`, x1, y0+18, t1.Format("15:04:05"))
	for si, s := range c.Series {
		var pts strings.Builder
		for i, v := range s.Values {
			fmt.Fprintf(&pts, "%.1f,%.1f ", xOf(i), yOf(v))
		}
		fmt.Fprintf(&b, `<polyline class="series" data-series="%s" fill="none" stroke="%s" stroke-width="1.5" points="%s"/>`,
			template.HTMLEscapeString(s.Name), s.Color, strings.TrimSpace(pts.String()))
		for i, v := range s.Values {
			fmt.Fprintf(&b, `<circle class="pt" cx="%.1f" cy="%.1f" r="1.5" fill="%s"><title>%s %s %s</title></circle>`,
				xOf(i), yOf(v), s.Color, template.HTMLEscapeString(s.Name), formatValue(v), c.Times[i].Format("15:04:05"))
		}
		lx := x0 + 10 + float64(si)*90
		fmt.Fprintf(&b, `<rect x="%.0f" y="%.0f" width="10" height="10" fill="%s"/><text x="%.0f" y="%.0f" class="legend">%s</text>`,
			lx, y1, s.Color, lx+14, y1+9, template.HTMLEscapeString(s.Name))
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String()) //nolint:gosec // built from numbers and escaped text only
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten (1 for v ≤ 0),
// the top of a chart's scale.
func niceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if v <= m*p {
			return m * p
		}
	}
	return 10 * p
}

// formatValue prints a rate with few digits.
func formatValue(v float64) string {
	switch {
	case v >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case v >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
	return strconv.FormatFloat(v, 'f', 2, 64)
}
