package chaos

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"net"
	"slices"
	"strings"
	"sync/atomic"
	"time"
)

// The availability check: outside a fail-over window after each fault, no
// operation answers "unavailable" (errors.Is(err, rpc.ErrUnavailable):
// a server's "unavailable" or "not the leader", a client that reached no
// node, a connection that broke). Every shard has R=3 replicas on the
// members of its group, so one node out of service leaves every shard a
// live majority: after a fail-over, every operation must be served.
const (
	// failoverWindow is the time "unavailable" is accepted after a node
	// goes out of service (killed, paused, cut off, stopped) and after it
	// is back (from its start, unpause or reconnection to when the harness
	// saw the cluster converged, plus this). Going out, the shards it led
	// elect new leaders (Raft's election timeout is 1 s) and the other
	// nodes learn them (leader hints, Serf); coming back, its replicas
	// catch up and the shards it owns hand their leadership back to it.
	failoverWindow = 10 * time.Second
	// noMajorityWindow replaces failoverWindow after an outage in which a
	// shard may have had no live majority as some node saw it: a group cut
	// off from the others (partition-group), two members of one group out
	// at once (double faults), a split (split-kill). "Unavailable" is then
	// the right answer from the outage's start until the cluster has
	// converged again, and this long after.
	noMajorityWindow = 30 * time.Second
	// stallTick and stallThreshold: the harness's clock ticks every
	// stallTick; a tick stallThreshold late or more means that the host,
	// which runs every node's container, stalled (CPU or I/O starvation
	// on a loaded machine). A stall past a shard leader's lease (500 ms)
	// makes every leader step down at once, as if the host had paused
	// every node: it is recorded as an outage of every node (FaultHostStall,
	// with failoverWindow after it).
	stallTick      = 100 * time.Millisecond
	stallThreshold = 300 * time.Millisecond
)

// FaultHostStall is the kind of an outage WatchStalls records: not a
// fault the harness injects, but one of the machine.
const FaultHostStall = "host-stall"

// Outage is one node's time out of service during a fault, on the
// history's clock: Down when it was killed, paused, cut off or stopped, Up
// when it was started, unpaused or reconnected, Seen when the harness next
// saw the cluster converged (every node up), Back when it next saw it
// converged with its shards settled (0: not yet; the outage is then
// open).
type Outage struct {
	Fault string `json:"fault"`
	Node  string `json:"node"`
	Group string `json:"group"`
	Down  int64  `json:"down"`
	Up    int64  `json:"up,omitempty"`
	Seen  int64  `json:"seen,omitempty"`
	Back  int64  `json:"back,omitempty"`
	// NoMajority marks an outage in which a shard may lack a live
	// majority (see noMajorityWindow) whatever the other outages.
	NoMajority bool `json:"no_majority,omitempty"`
	// Planned marks a planned operation (a graceful stop and start, an
	// upgrade): it opens no fail-over window, any "unavailable" during it
	// fails the run. PlannedBack marks an outage whose going out is a
	// crash (a fail-over window after Down) and whose coming back is
	// planned (the hand-back of its shards' leadership: no window after
	// Up). Overlapping outages of one group still open the no-majority
	// window.
	Planned     bool `json:"planned,omitempty"`
	PlannedBack bool `json:"planned_back,omitempty"`
}

// Window is a span of the history in which "unavailable" is accepted.
type Window struct {
	From int64  `json:"from"`
	To   int64  `json:"to"` // math.MaxInt64: to the end
	Why  string `json:"why"`
}

const openEnd int64 = math.MaxInt64

// after is t plus d, or openEnd when t is 0 (not yet).
func after(t int64, d time.Duration) int64 {
	if t == 0 {
		return openEnd
	}
	return t + int64(d)
}

// AvailabilityWindows returns the windows the outages open: failoverWindow
// after each Down and from each Up to failoverWindow after its Back (none
// for a planned outage, and none after the Up of one planned back); from
// Down to noMajorityWindow after Back for an outage marked NoMajority and
// for two outages of different members of one group that overlap from
// Down to Seen (from the first Down to the last Back).
func AvailabilityWindows(outs []Outage) []Window {
	var ws []Window
	for _, o := range outs {
		who := o.Fault + " " + o.Node
		switch {
		case o.NoMajority:
			ws = append(ws, Window{o.Down, after(o.Back, noMajorityWindow), who + ": a shard may lack a majority"})
		case o.Planned:
			// (no window: docs/design.md, "Planned leadership moves")
		case o.PlannedBack:
			ws = append(ws, Window{o.Down, o.Down + int64(failoverWindow), who + " down"})
		case o.Up == 0:
			ws = append(ws, Window{o.Down, openEnd, who + " down, never back"})
		default:
			ws = append(ws, Window{o.Down, o.Down + int64(failoverWindow), who + " down"},
				Window{o.Up, after(o.Back, failoverWindow), who + " back"})
		}
	}
	for i, a := range outs {
		for _, b := range outs[i+1:] {
			if a.Node == b.Node || a.Group == "" || a.Group != b.Group {
				continue
			}
			// Out until seen running again by every node.
			if a.Down > cmp.Or(b.Seen, b.Back, openEnd) || b.Down > cmp.Or(a.Seen, a.Back, openEnd) {
				continue
			}
			to := openEnd
			if a.Back != 0 && b.Back != 0 {
				to = max(a.Back, b.Back) + int64(noMajorityWindow)
			}
			ws = append(ws, Window{min(a.Down, b.Down), to,
				fmt.Sprintf("%s %s and %s %s out at once: group %s has no majority", a.Fault, a.Node, b.Fault, b.Node, a.Group)})
		}
	}
	slices.SortFunc(ws, func(x, y Window) int { return cmp.Compare(x.From, y.From) })
	return ws
}

// AvailabilityReport is what the availability check found.
type AvailabilityReport struct {
	// Unavailable counts the operations that answered "unavailable" (the
	// workload's and the final reads), InWindows those that overlap a
	// window, Outside the others (each a violation).
	Unavailable int `json:"unavailable"`
	InWindows   int `json:"in_windows"`
	Outside     int `json:"outside"`
	// Checked is the share of the workload's time outside every window:
	// the time the check covers.
	Checked float64 `json:"checked_share"`
	// Stalls counts the host stalls (FaultHostStall), LongestStall is the
	// longest.
	Stalls       int           `json:"stalls"`
	LongestStall time.Duration `json:"longest_stall_ns"`
	// Windows are the windows, Violations the operations outside them.
	Windows    []Window `json:"windows"`
	Violations []string `json:"violations,omitempty"`
}

// maxListed bounds the operations a violation lists.
const maxListed = 20

// CheckAvailability checks that every operation that answered
// "unavailable" overlaps a window of the outages.
func CheckAvailability(ops []Op, outs []Outage) *AvailabilityReport {
	r := &AvailabilityReport{Windows: AvailabilityWindows(outs)}
	for _, o := range outs {
		if o.Fault == FaultHostStall {
			r.Stalls++
			r.LongestStall = max(r.LongestStall, time.Duration(o.Up-o.Down))
		}
	}
	var outside []*Op
	var first, last int64 = -1, 0
	for i := range ops {
		o := &ops[i]
		if !o.Final {
			if first < 0 || o.Call < first {
				first = o.Call
			}
			last = max(last, o.Return)
		}
		if !o.Unavailable {
			continue
		}
		r.Unavailable++
		if slices.ContainsFunc(r.Windows, func(w Window) bool { return o.Call <= w.To && o.Return >= w.From }) {
			r.InWindows++
			continue
		}
		r.Outside++
		outside = append(outside, o)
	}
	if first >= 0 && last > first {
		r.Checked = 1 - float64(covered(r.Windows, first, last))/float64(last-first)
	}
	if len(outside) == 0 {
		return r
	}
	slices.SortFunc(outside, func(a, b *Op) int { return cmp.Compare(a.Call, b.Call) })
	var b strings.Builder
	fmt.Fprintf(&b, "%d operations answered \"unavailable\" outside every fail-over window (every shard had a live majority):", len(outside))
	for i, o := range outside {
		if i == maxListed {
			fmt.Fprintf(&b, "\n    … and %d more (history.json: \"unavailable\": true)", len(outside)-maxListed)
			break
		}
		fmt.Fprintf(&b, "\n    %s–%s %s via %s: %s", ms(o.Call), ms(o.Return), o.String(), cmp.Or(o.Node, "?"), o.Err)
	}
	r.Violations = append(r.Violations, b.String())
	return r
}

// covered returns how much of [from, to] the windows cover.
func covered(ws []Window, from, to int64) int64 {
	var sum int64
	// ws is sorted by From; cur is where the counted part ends.
	cur := from
	for _, w := range ws {
		lo, hi := max(w.From, cur), min(w.To, to)
		if hi > lo {
			sum += hi - lo
			cur = hi
		}
	}
	return sum
}

// Summary is one line of counts.
func (r *AvailabilityReport) Summary() string {
	return fmt.Sprintf("%d answered \"unavailable\": %d inside fail-over windows, %d outside; %d windows, %.0f%% of the workload's time checked (outside every window); %d host stalls (longest %s)",
		r.Unavailable, r.InWindows, r.Outside, len(r.Windows), 100*r.Checked, r.Stalls, r.LongestStall.Round(time.Millisecond))
}

// sentTo remembers the node a client last wrote a request to: a worker's
// client runs one operation at a time, so after an operation it names the
// node asked last (its RPC address).
type sentTo struct {
	addr atomic.Pointer[string]
}

// dial is a client.Options.Dial that tracks the writes of each connection.
func (s *sentTo) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	d := net.Dialer{KeepAlive: 15 * time.Second}
	nc, err := d.DialContext(ctx, network, addr)
	if err != nil {
		s.addr.Store(&addr) // the node asked, though it did not answer
		return nil, err
	}
	return &sentConn{Conn: nc, addr: addr, s: s}, nil
}

// reset forgets the last node.
func (s *sentTo) reset() { s.addr.Store(nil) }

// last returns the address written to last, or "".
func (s *sentTo) last() string {
	if p := s.addr.Load(); p != nil {
		return *p
	}
	return ""
}

type sentConn struct {
	net.Conn
	addr string
	s    *sentTo
}

func (c *sentConn) Write(b []byte) (int, error) {
	c.s.addr.Store(&c.addr)
	return c.Conn.Write(b)
}
