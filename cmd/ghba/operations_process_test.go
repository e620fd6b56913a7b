package main

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ghba/ghba/node/store"
	"github.com/ghba/ghba/rpc"
	"github.com/ghba/ghba/rpc/client"
)

// Operations under load (issue 34; docs/design.md, "Planned leadership
// moves"; docs/operations.md, "Rolling restarts and upgrades"): three
// agents with R = 3 and a client load of creates, stats, renames and
// listings through one Go client with its defaults (every node's address,
// its home cache), running throughout. Every request must succeed, except
// "unavailable" within the fail-over window right after a kill -9.

// procLoadWorkers is the load's concurrency.
const procLoadWorkers = 4

// procOp is one request of the load.
type procOp struct {
	at   time.Time
	took time.Duration
	op   string
	path string
	err  error
}

// procLoad runs the load until stopped, recording every request.
type procLoad struct {
	c    *procCluster
	cl   *client.Client
	stop chan struct{}
	wg   sync.WaitGroup

	mu  sync.Mutex
	ops []procOp
}

// startLoad creates a directory per worker and starts the workers.
func (c *procCluster) startLoad(name string) *procLoad {
	c.t.Helper()
	addrs := make([]string, 0, len(c.nodes))
	for _, n := range c.nodes {
		addrs = append(addrs, n.rpcAddr())
	}
	l := &procLoad{c: c, cl: client.New(client.Options{Addrs: addrs, Dial: c.tls.dialer(c.t), Token: c.token}), stop: make(chan struct{})}
	c.t.Cleanup(func() { l.halt(); l.cl.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), procRPCTimeout)
	defer cancel()
	root := "/" + name
	if _, err := l.cl.Mkdir(ctx, &rpc.MkdirRequest{Path: root, Mode: 0o755}); err != nil {
		c.t.Fatalf("mkdir %s: %v", root, err)
	}
	for g := range procLoadWorkers {
		dir := fmt.Sprintf("%s/w%d", root, g)
		if _, err := l.cl.Mkdir(ctx, &rpc.MkdirRequest{Path: dir, Mode: 0o755}); err != nil {
			c.t.Fatalf("mkdir %s: %v", dir, err)
		}
		l.wg.Go(func() { l.worker(dir) })
	}
	return l
}

// worker creates, stats, renames and lists in dir until stopped. A failed
// step ends its file's sequence (what follows would fail by the
// operation's semantics).
func (l *procLoad) worker(dir string) {
	for i := 0; ; i++ {
		select {
		case <-l.stop:
			return
		default:
		}
		p := fmt.Sprintf("%s/f%d", dir, i)
		q := p + ".r"
		if l.do("create", p, func(ctx context.Context) error {
			_, err := l.cl.Create(ctx, &rpc.CreateRequest{Path: p, Mode: 0o644})
			return err
		}) != nil {
			continue
		}
		if l.do("stat", p, func(ctx context.Context) error { _, err := l.cl.Stat(ctx, p); return err }) != nil {
			continue
		}
		if l.do("rename", p, func(ctx context.Context) error { _, err := l.cl.Rename(ctx, p, q); return err }) != nil {
			continue
		}
		l.do("stat", q, func(ctx context.Context) error { _, err := l.cl.Stat(ctx, q); return err })
		if i%8 == 7 {
			l.do("readdir", dir, func(ctx context.Context) error {
				_, err := l.cl.ReadDir(ctx, &rpc.ReadDirRequest{Path: dir, Limit: 100})
				return err
			})
		}
	}
}

// do runs one request and records it.
func (l *procLoad) do(op, p string, fn func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(context.Background(), procRPCTimeout)
	defer cancel()
	start := time.Now()
	err := fn(ctx)
	l.mu.Lock()
	l.ops = append(l.ops, procOp{at: start, took: time.Since(start), op: op, path: p, err: err})
	l.mu.Unlock()
	return err
}

// halt stops the workers and waits for them (idempotent).
func (l *procLoad) halt() {
	select {
	case <-l.stop:
	default:
		close(l.stop)
	}
	l.wg.Wait()
}

// count returns the requests recorded so far.
func (l *procLoad) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.ops)
}

// waitMore waits until k more requests were made (the load runs).
func (l *procLoad) waitMore(k int) {
	l.c.t.Helper()
	want := l.count() + k
	l.c.waitFor(fmt.Sprintf("%d more requests", k), procReadyTimeout, nil, func() (bool, string) {
		return l.count() >= want, fmt.Sprintf("%d of %d", l.count(), want)
	})
}

// procPhase is a span of a test during which failures are judged alike.
type procPhase struct {
	name       string
	start, end time.Time
	// failover: "unavailable" is allowed (a kill -9's fail-over window).
	failover bool
}

// phases records a test's phases.
type procPhases struct{ list []procPhase }

// begin starts a phase, ending the previous one.
func (ps *procPhases) begin(name string, failover bool) {
	now := time.Now()
	if n := len(ps.list); n > 0 && ps.list[n-1].end.IsZero() {
		ps.list[n-1].end = now
	}
	ps.list = append(ps.list, procPhase{name: name, start: now, failover: failover})
}

// end ends the last phase.
func (ps *procPhases) end() {
	if n := len(ps.list); n > 0 && ps.list[n-1].end.IsZero() {
		ps.list[n-1].end = time.Now()
	}
}

// inFailover reports whether a request that ran from start to end
// overlapped a fail-over phase.
func (ps *procPhases) inFailover(start, end time.Time) bool {
	for _, p := range ps.list {
		if p.failover && end.After(p.start) && (p.end.IsZero() || start.Before(p.end)) {
			return true
		}
	}
	return false
}

// of returns the phase a request that began at t belongs to (nil: none).
func (ps *procPhases) of(t time.Time) *procPhase {
	for i := range ps.list {
		p := &ps.list[i]
		if !t.Before(p.start) && (p.end.IsZero() || t.Before(p.end)) {
			return p
		}
	}
	return nil
}

// judge reports every failed request: "unavailable" is allowed only for a
// request that overlapped a fail-over phase; any other error never (the load's sequences never
// meet "exists" or "not found" unless a request failed before). It logs,
// per phase, the requests, the failures and the slowest request.
func (l *procLoad) judge(ps *procPhases) (failed int) {
	t := l.c.t
	t.Helper()
	l.mu.Lock()
	ops := slices.Clone(l.ops)
	l.mu.Unlock()
	type tally struct {
		n, unavailable, other int
		slowest               time.Duration
	}
	per := map[string]*tally{}
	var errs procErrs
	allowed := 0
	for _, o := range ops {
		ph := ps.of(o.at)
		name := "(outside)"
		if ph != nil {
			name = ph.name
		}
		tl := per[name]
		if tl == nil {
			tl = &tally{}
			per[name] = tl
		}
		tl.n++
		tl.slowest = max(tl.slowest, o.took)
		if o.err == nil {
			continue
		}
		failed++
		if procUnavailable(o.err) {
			tl.unavailable++
			if ps.inFailover(o.at, o.at.Add(o.took)) {
				if allowed++; allowed <= 20 {
					t.Logf("allowed (overlaps a fail-over): %s %s at %s (phase %s, took %v): %v",
						o.op, o.path, o.at.Format("15:04:05.000"), name, o.took.Round(time.Millisecond), o.err)
				}
				continue
			}
		} else {
			tl.other++
		}
		errs.add("%s %s at %s (phase %s, took %v): %v", o.op, o.path, o.at.Format("15:04:05.000"), name, o.took.Round(time.Millisecond), o.err)
	}
	for _, ph := range ps.list {
		if tl := per[ph.name]; tl != nil {
			t.Logf("phase %-28s %6d requests, %d unavailable, %d other errors, slowest %v (fail-over allowed: %t)",
				ph.name, tl.n, tl.unavailable, tl.other, tl.slowest.Round(time.Millisecond), ph.failover)
		}
	}
	t.Logf("load: %d requests in all, %d failed", len(ops), failed)
	errs.report(t, "requests under load")
	return failed
}

// waitHealthy waits until n's /v1/health answers 200.
func (c *procCluster) waitHealthy(n *procNode) {
	c.t.Helper()
	c.waitFor(n.id+" /v1/health 200", procReadyTimeout, func() { c.checkRunning(n) }, c.healthOf(n))
}

// healthOf returns the condition "n's /v1/health answers 200".
func (c *procCluster) healthOf(n *procNode) func() (bool, string) {
	return func() (bool, string) { return c.health(n) }
}

// waitLeads waits until shard s is led by node id, as via sees it.
func (c *procCluster) waitLeads(s, id string, via *procNode) {
	c.t.Helper()
	c.waitShardLeader(fmt.Sprintf("shard %s led by %s", s, id), s, via, func(l string) bool { return l == id })
}

// waitShardLeader waits until ok holds for shard s's leader, as via sees
// it.
func (c *procCluster) waitShardLeader(what, s string, via *procNode, ok func(leader string) bool) {
	c.t.Helper()
	c.waitFor(what, procReadyTimeout, nil, func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), procRPCTimeout)
		defer cancel()
		ss, err := c.client(via).Shards(ctx)
		if err != nil {
			return false, err.Error()
		}
		for _, x := range ss.Shards {
			if x.Shard == s {
				return ok(x.Leader), fmt.Sprintf("leader %q", x.Leader)
			}
		}
		return false, "shard not listed"
	})
}

// handOverWaits returns the "took" of every "handed shard leadership
// over" line in the logs of nodes: how long each planned move held the
// requests that arrived during it.
func (c *procCluster) handOverWaits(nodes ...*procNode) []time.Duration {
	re := regexp.MustCompile(`handed shard leadership over.* took=(\S+)`)
	var out []time.Duration
	for _, n := range nodes {
		b, err := os.ReadFile(n.log)
		if err != nil {
			c.t.Fatal(err)
		}
		for _, m := range re.FindAllStringSubmatch(string(b), -1) {
			if d, err := time.ParseDuration(m[1]); err == nil {
				out = append(out, d)
			}
		}
	}
	slices.Sort(out)
	return out
}

// logWaits logs the p50 and max of waits.
func logWaits(t testing.TB, what string, ws []time.Duration) {
	t.Helper()
	if len(ws) == 0 {
		t.Logf("%s: none", what)
		return
	}
	t.Logf("%s: %d, p50 %v, max %v", what, len(ws), ws[len(ws)/2].Round(time.Microsecond), ws[len(ws)-1].Round(time.Microsecond))
}

// waitSettled waits until every shard is led by its owner with all its
// replicas caught up (procCluster.shardsSettled over up).
func (c *procCluster) waitSettled(what string, up ...*procNode) {
	c.t.Helper()
	c.waitFor(what, procReadyTimeout, func() { c.checkRunning(up...) }, func() (bool, string) { return c.shardsSettled(up) })
}

// rollingRestart stops every node with SIGTERM in turn (a clean exit is
// required), starts it again (with env), and waits for its /v1/health and
// for the shards to settle before the next; it returns how long it took.
func (c *procCluster) rollingRestart(ps *procPhases, l *procLoad, env func(n *procNode) []string) time.Duration {
	c.t.Helper()
	start := time.Now()
	for _, n := range c.nodes {
		ps.begin("SIGTERM and restart of "+n.id, false)
		t0 := time.Now()
		if err := c.stop(n); err != nil {
			c.t.Fatalf("%s: exit on SIGTERM: %v", n.id, err)
		}
		c.t.Logf("%s: stopped by SIGTERM in %v", n.id, time.Since(t0).Round(time.Millisecond))
		if env != nil {
			n.env = env(n)
		}
		c.start(n)
		c.waitHealthy(n)
		c.waitSettled("shards settled after restarting "+n.id, c.nodes...)
		l.waitMore(100)
	}
	return time.Since(start)
}

// TestProcessOperations runs, under one load, the operations of issue 34
// on three agents with R = 3 (docs/design.md, "Planned leadership moves"):
//
//   - kill -9 and restart of each node in turn: "unavailable" is allowed
//     only for requests that overlap the fail-over after the kill (until
//     the node's shard is led elsewhere and 100 more requests were made);
//     none while the node starts again and its shard's leadership is
//     handed back to it (its preferred leader);
//   - a rolling restart by SIGTERM of every node, one at a time, waiting
//     for /v1/health and settled shards: no request may fail;
//   - ghba leave of a node: no request may fail.
func TestProcessOperations(t *testing.T) {
	c := newProcCluster(t, 3)
	c.startAll()
	l := c.startLoad("ops")
	var ps procPhases
	ps.begin("warm-up", false)
	l.waitMore(200)

	for _, v := range c.nodes {
		others := slices.DeleteFunc(slices.Clone(c.nodes), func(n *procNode) bool { return n == v })
		ps.begin("fail-over of "+v.id, true)
		c.kill(v)
		c.waitShardLeader("shard "+v.id+" failed over", v.id, others[0], func(l string) bool { return l != "" && l != v.id })
		l.waitMore(100)
		ps.begin("restart and hand-back to "+v.id, false)
		c.start(v)
		c.waitHealthy(v)
		c.waitLeads(v.id, v.id, others[0])
		c.waitSettled("shards settled after restarting "+v.id, c.nodes...)
		l.waitMore(200)
	}
	handBacks := c.handOverWaits(c.nodes...)

	took := c.rollingRestart(&ps, l, nil)
	t.Logf("rolling restart of %d nodes (SIGTERM, start, /v1/health, shards settled): %v", len(c.nodes), took.Round(time.Millisecond))

	leaver, rest := c.nodes[2], c.nodes[:2]
	ps.begin("leave of "+leaver.id, false)
	out, errOut, code := c.at(leaver, "--json", "leave", "--node-id", leaver.id, "--wait", "3m")
	if code != 0 {
		t.Fatalf("ghba leave %s: exit %d: %s%s", leaver.id, code, out, errOut)
	}
	t.Logf("leave: %s", strings.TrimSpace(out))
	if err := c.waitExit(leaver, procStopTimeout); err != nil {
		t.Errorf("%s after leave: exit status %v, want 0", leaver.id, err)
	}
	ps.begin("after the leave", false)
	c.checkRunning(rest...)
	l.waitMore(300)
	ps.end()
	l.halt()
	l.judge(&ps)
	logWaits(t, "hand-backs after kill -9 (request wait at the old leader)", handBacks)
	logWaits(t, "every planned move (request wait at the old leader)", c.handOverWaits(c.nodes...))
}

// logFormatsInUse returns each node's log_format_in_use as via's members
// show it.
func (c *procCluster) logFormatsInUse(via *procNode) (map[string]int, error) {
	ms, err := c.members(via)
	if err != nil {
		return nil, err
	}
	out := map[string]int{}
	for _, m := range ms {
		out[m.ID] = m.LogFormatInUse
		if m.Versions["log"] == 0 {
			return nil, fmt.Errorf("%s gossips no versions: %+v", m.ID, m)
		}
	}
	return out, nil
}

// TestProcessRollingUpgrade upgrades a cluster under load from a build
// that speaks shard log format 1 only to this build, one node at a time
// by SIGTERM and restart: no request fails; format 1 stays the one in use
// (and written: a node pinned to 1 halts on a format 2 entry, which would
// stop it) until the last node runs this build, then format 2 is in use;
// then a node started again with the older build is refused with a
// message naming the formats, and starts with this build again.
//
// The older build is this binary with the test-only switch
// GHBA_TEST_PIN_LOG_FORMAT=1 (node.WithLogFormatPin): it advertises,
// writes and applies batch format 1 only, as the builds before inode ids
// did (node/store batchcodec.go).
func TestProcessRollingUpgrade(t *testing.T) {
	c := newProcCluster(t, 3)
	old := []string{pinLogFormatEnv + "=1"}
	for _, n := range c.nodes {
		n.env = old
	}
	c.startAll()
	inUse := func(want int) func() (bool, string) {
		return func() (bool, string) {
			for _, n := range c.nodes {
				f, err := c.logFormatsInUse(n)
				if err != nil {
					return false, err.Error()
				}
				for id, v := range f {
					if v != want {
						return false, fmt.Sprintf("%s sees %s using format %d", n.id, id, v)
					}
				}
			}
			return true, ""
		}
	}
	c.waitFor("format 1 in use", procReadyTimeout, nil, inUse(1))
	l := c.startLoad("upgrade")
	var ps procPhases
	ps.begin("warm-up", false)
	l.waitMore(200)
	start := time.Now()
	for i, n := range c.nodes {
		ps.begin("upgrade of "+n.id, false)
		if err := c.stop(n); err != nil {
			t.Fatalf("%s: exit on SIGTERM: %v", n.id, err)
		}
		n.env = nil
		c.start(n)
		c.waitHealthy(n)
		c.waitSettled("shards settled after upgrading "+n.id, c.nodes...)
		l.waitMore(100)
		if i < len(c.nodes)-1 {
			if ok, why := inUse(1)(); !ok {
				t.Errorf("after upgrading %s of %d nodes: %s", n.id, len(c.nodes), why)
			}
		}
		c.checkRunning(c.nodes...)
	}
	c.waitFor("this build's format in use after the last upgrade", procReadyTimeout, nil, inUse(int(store.MaxBatchFormat)))
	t.Logf("rolling upgrade of %d nodes: %v", len(c.nodes), time.Since(start).Round(time.Millisecond))
	l.waitMore(200)

	// Downgrade: the older build refuses to start on a data directory
	// that saw this build's format in use, naming the formats.
	v := c.nodes[0]
	ps.begin("downgrade attempt of "+v.id, false)
	if err := c.stop(v); err != nil {
		t.Fatalf("%s: exit on SIGTERM: %v", v.id, err)
	}
	v.env = old
	c.start(v)
	if err := c.waitExit(v, procReadyTimeout); err == nil {
		t.Errorf("%s started with the older build: exit 0, want an error", v.id)
	}
	b, _ := os.ReadFile(v.log)
	if i := strings.LastIndex(string(b), "downgrade past a format change is refused"); i < 0 {
		t.Errorf("%s's log does not say why the older build was refused", v.id)
	} else {
		line := string(b)[strings.LastIndex(string(b[:i]), "\n")+1:]
		t.Logf("refused: %s", strings.SplitN(line, "\n", 2)[0])
	}
	v.env = nil
	c.start(v)
	c.waitHealthy(v)
	c.waitSettled("shards settled after the refused downgrade", c.nodes...)
	l.waitMore(200)
	ps.end()
	l.halt()
	l.judge(&ps)
}
