package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ghba/ghba/rpc"
	"github.com/ghba/ghba/rpc/client"
)

// codesSettleTimeout bounds how long the stats of one check may keep
// failing (other than with "not found") once the cluster is whole again
// after a kill.
const codesSettleTimeout = 30 * time.Second

// codesDepth is the depth of a normalized path: 0 for "/", 1 for "/a".
func codesDepth(p string) int {
	if p == "/" {
		return 0
	}
	return strings.Count(p, "/")
}

// codesAncestors returns the directories above p, from "/" down to its
// parent.
func codesAncestors(p string) []string {
	var out []string
	for q := p; q != "/"; {
		q = path.Dir(q)
		out = append(out, q)
	}
	slices.Reverse(out)
	return out
}

// codesWant is the model: the ancestor codes of p, walking its ancestors'
// inodes (st) from the root down; every ancestor that does not grant
// search to user, group and other contributes its depth, execute bits and
// owner.
func codesWant(p string, st map[string]*rpc.StatResponse) []rpc.AncestorCode {
	var want []rpc.AncestorCode
	for _, a := range codesAncestors(p) {
		in := st[a]
		if x := in.Mode & 0o111; x != 0o111 {
			want = append(want, rpc.AncestorCode{Depth: uint32(codesDepth(a)), Mode: x, UID: in.UID, GID: in.GID})
		}
	}
	return want
}

// codesStat stats p through n, retrying an error other than "not found"
// (a restarted node's shard resolving what the kill interrupted) until
// deadline; retried counts the failed attempts.
func (c *procCluster) codesStat(n *procNode, p string, deadline time.Time, retried *atomic.Int64) (*rpc.StatResponse, error) {
	for {
		st, err := c.client(n).Stat(context.Background(), p)
		if err == nil || errors.Is(err, fs.ErrNotExist) || time.Now().After(deadline) {
			return st, err
		}
		retried.Add(1)
		time.Sleep(procPollInterval)
	}
}

// checkAncestorCodes stats every path of paths and every directory above
// them through the nodes of via (round robin) and compares each inode's
// ancestor codes with those codesWant derives from the stats of its
// ancestors. It returns the stats.
func (c *procCluster) checkAncestorCodes(what string, paths map[string]bool, via []*procNode) map[string]*rpc.StatResponse {
	c.t.Helper()
	start := time.Now()
	all := map[string]bool{"/": true}
	for p := range paths {
		all[p] = true
		for _, a := range codesAncestors(p) {
			all[a] = true
		}
	}
	list := make([]string, 0, len(all))
	for p := range all {
		list = append(list, p)
	}
	sort.Strings(list)
	var (
		mu      sync.Mutex
		stats   = make(map[string]*rpc.StatResponse, len(list))
		errs    procErrs
		retried atomic.Int64
	)
	deadline := start.Add(codesSettleTimeout)
	procParallel(list, func(i int, p string) {
		n := via[i%len(via)]
		st, err := c.codesStat(n, p, deadline, &retried)
		if err != nil {
			errs.add("%s: stat %s via %s: %v", what, p, n.id, err)
			return
		}
		mu.Lock()
		stats[p] = st
		mu.Unlock()
	})
	errs.report(c.t, what+": stats")
	if errs.n > 0 {
		c.t.FailNow()
	}
	var bad procErrs
	byLen := map[int]int{}
	for _, p := range list {
		if p == "/" {
			continue
		}
		got, want := stats[p].Ancestors, codesWant(p, stats)
		byLen[len(want)]++
		if !slices.Equal(got, want) {
			bad.add("%s: %s (mode %#o, home %s): ancestors %+v, want %+v", what, p, stats[p].Mode, stats[p].Home, got, want)
		}
	}
	c.t.Logf("%s: ancestor codes of %d paths checked in %v (paths by number of codes: %v; failed stats retried: %d)",
		what, len(list)-1, time.Since(start).Round(time.Millisecond), byLen, retried.Load())
	bad.report(c.t, what+": ancestor codes differ from the model")
	return stats
}

// codesOp is an operation of TestProcessAncestorCodes, through cl.
type codesOp func(ctx context.Context, cl *client.Client) error

// codesAttempts bounds the attempts of a round at landing its kill while
// the operation runs (codesKillRound).
const codesAttempts = 3

// codesFault runs op through entry in a goroutine, kills victim with
// SIGKILL delay later, restarts it, waits until the cluster is whole and
// returns whether op was still running when the kill was sent, and op's
// error.
func (c *procCluster) codesFault(what string, entry, victim *procNode, delay time.Duration, op codesOp) (during bool, err error) {
	c.t.Helper()
	type result struct {
		err  error
		took time.Duration
	}
	done := make(chan result, 1)
	cl := c.client(entry)
	began := time.Now()
	go func() {
		err := op(context.Background(), cl)
		done <- result{err, time.Since(began)}
	}()
	time.Sleep(delay) // deliberate: the kill is to land while the operation runs
	var r result
	select {
	case r = <-done:
	default:
		during = true
	}
	sent := time.Since(began)
	c.kill(victim)
	c.t.Logf("%s: kill -9 of %s sent %v after the request to %s (delay %v); the operation was still running: %v",
		what, victim.id, sent.Round(time.Microsecond), entry.id, delay.Round(time.Microsecond), during)
	c.start(victim)
	c.waitReady(what+": "+victim.id+" restarted and the cluster whole", c.nodes...)
	if during {
		select {
		case r = <-done:
		case <-time.After(2 * procRPCTimeout):
			c.t.Fatalf("%s: the operation did not return %v after the restart", what, 2*procRPCTimeout)
		}
	}
	c.t.Logf("%s: the operation returned after %v: %v", what, r.took.Round(time.Microsecond), r.err)
	if resumed := codesResumed(victim); len(resumed) > 0 {
		c.t.Logf("%s: restarted %s resumed from its disk:\n  %s", what, victim.id, strings.Join(resumed, "\n  "))
	}
	return during, r.err
}

// codesResumed returns the lines of n's log since its last start that
// report an interrupted re-key or recode resumed.
func codesResumed(n *procNode) []string {
	b, err := os.ReadFile(n.log)
	if err != nil {
		return []string{err.Error()}
	}
	s := string(b)
	if i := strings.LastIndex(s, "===== test: start #"); i >= 0 {
		s = s[i:]
	}
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, "resuming rekey") || strings.Contains(l, "resuming recode") {
			out = append(out, l)
		}
	}
	return out
}

// codesRetry runs op through entry until it succeeds, retrying while it
// fails as unavailable, for at most procReadyTimeout, and returns how
// long the successful call took.
func (c *procCluster) codesRetry(what string, entry *procNode, op codesOp) time.Duration {
	c.t.Helper()
	deadline := time.Now().Add(procReadyTimeout)
	for tries := 1; ; tries++ {
		began := time.Now()
		err := op(context.Background(), c.client(entry))
		if err == nil {
			took := time.Since(began)
			c.t.Logf("%s via %s: done in %v (attempt %d)", what, entry.id, took.Round(time.Microsecond), tries)
			return took
		}
		if !procUnavailable(err) || time.Now().After(deadline) {
			c.t.Fatalf("%s via %s: attempt %d: %v", what, entry.id, tries, err)
		}
		time.Sleep(procPollInterval)
	}
}

// codesKillRound runs op through entry with a kill -9 of victim at a
// random moment within calib, the operation's duration when undisturbed
// (codesFault); settle checks the outcome, given op's error, and reports
// whether op took effect. If op had returned before the kill was sent,
// undo reverts it (when it took effect, and checks) and the round is tried
// again with an earlier kill, up to codesAttempts times.
func (c *procCluster) codesKillRound(what string, entry, victim *procNode, calib time.Duration, op codesOp,
	settle func(what string, err error) bool, undo func(what string)) {
	c.t.Helper()
	for attempt := 1; ; attempt++ {
		d := calib >> (attempt - 1)
		delay := d/5 + rand.N(d*3/5+1)
		w := what
		if attempt > 1 {
			w = fmt.Sprintf("%s, attempt %d", what, attempt)
		}
		during, err := c.codesFault(w, entry, victim, delay, op)
		applied := settle(w, err)
		if during || c.t.Failed() {
			return
		}
		if attempt == codesAttempts {
			c.t.Logf("%s: in %d attempts the kill never landed while the operation ran (an undisturbed one takes about %v)",
				what, attempt, calib.Round(time.Microsecond))
			return
		}
		if applied {
			undo(w + ": undo")
		}
	}
}

// TestProcessAncestorCodes: ancestor permission codes (HBA §4.2.2) stay
// right after a chmod of a directory, a rename of a directory into a
// directory with other permissions, and a kill -9 during such an update.
// 3 agents with R=1 (a killed node's shard is down until it restarts and
// resumes the interrupted recode or re-key from its own disk). The tree:
// /p (0755), /p/d (0700) with subdirectories of various modes holding
// ~1,800 files on every shard, and /q (0750, group 7). After each step
// every path's codes must equal what walking its ancestors' modes and
// owners gives (checkAncestorCodes):
//
//  0. undisturbed chmods and renames of /p/d (which time them);
//  1. chmod 755 /p/d, sent to its home, with kill -9 of another node
//     during it; then chmod again so that it is 755;
//  2. chmod 700 /p/d with kill -9 of its home (the coordinator); then
//     chmod again so that it is 700;
//  3. mv /p/d /q/moved (sent to the home of /p, which coordinates) with
//     kill -9 of a random node: afterwards exactly one of the names
//     exists.
//
// The kill is sent at a random moment within the time an undisturbed
// operation takes; a round whose operation finished before it is undone
// and tried again with an earlier kill (codesKillRound). An operation that
// reported success must have taken effect.
func TestProcessAncestorCodes(t *testing.T) {
	start := time.Now()
	c := newProcClusterR(t, 3, 1)
	c.startAll()
	ctx := context.Background()
	byID := map[string]*procNode{}
	for _, n := range c.nodes {
		byID[n.id] = n
	}
	nodeOf := func(home string) *procNode {
		t.Helper()
		n := byID[home]
		if n == nil {
			t.Fatalf("home %q is not a node", home)
		}
		return n
	}

	// ---- the tree ----
	paths := map[string]bool{}
	homes := map[string]int{}
	var homesMu sync.Mutex
	mkdir := func(p string, mode, uid, gid uint32) {
		t.Helper()
		n := c.nodes[len(paths)%len(c.nodes)]
		r, err := c.client(n).Mkdir(ctx, &rpc.MkdirRequest{Path: p, Mode: mode, UID: uid, GID: gid})
		if err != nil {
			t.Fatalf("mkdir %s via %s: %v", p, n.id, err)
		}
		paths[p] = true
		homes[r.Inode.Home]++
	}
	mkdir("/p", 0o755, 0, 0)
	mkdir("/p/d", 0o700, 1000, 1000)
	mkdir("/p/d/s0", 0o755, 1000, 1000)
	mkdir("/p/d/s1", 0o711, 1001, 1001) // restricts reading, not search: no code
	mkdir("/p/d/s2", 0o750, 1000, 1002)
	mkdir("/p/d/s1/deep", 0o710, 1003, 1003)
	mkdir("/q", 0o750, 0, 7)
	var files []string
	for _, s := range []string{"/p/d/s0", "/p/d/s1", "/p/d/s2"} {
		for k := range 600 {
			files = append(files, fmt.Sprintf("%s/f%03d", s, k))
		}
	}
	for k := range 30 {
		files = append(files, fmt.Sprintf("/p/d/s1/deep/f%02d", k))
	}
	var errs procErrs
	procParallel(files, func(i int, p string) {
		n := c.nodes[i%len(c.nodes)]
		r, err := c.client(n).Create(ctx, &rpc.CreateRequest{Path: p, Mode: 0o644, UID: 1000, GID: 1000})
		if err != nil {
			errs.add("create %s via %s: %v", p, n.id, err)
			return
		}
		homesMu.Lock()
		homes[r.Inode.Home]++
		homesMu.Unlock()
	})
	errs.report(t, "creating the tree")
	if errs.n > 0 {
		t.FailNow()
	}
	for _, p := range files {
		paths[p] = true
	}
	t.Logf("created %d paths in %v; homes: %v", len(paths), time.Since(start).Round(time.Millisecond), homes)
	for _, n := range c.nodes {
		if homes[n.id] == 0 {
			t.Fatalf("no path of the tree is homed on %s (homes %v): a kill of it would interrupt no recode", n.id, homes)
		}
	}
	base := paths
	moved := func() map[string]bool {
		out := map[string]bool{}
		for p := range base {
			if p == "/p/d" || strings.HasPrefix(p, "/p/d/") {
				p = "/q/moved" + strings.TrimPrefix(p, "/p/d")
			}
			out[p] = true
		}
		return out
	}
	stats := c.checkAncestorCodes("initial tree", paths, c.nodes)

	// The CLI's stat --json shows the codes.
	deepFile := "/p/d/s1/deep/f00"
	out, errOut, code := c.at(c.nodes[1], "--json", "stat", deepFile)
	if code != 0 {
		t.Fatalf("ghba stat --json %s: exit %d: %s", deepFile, code, errOut)
	}
	var cliSt rpc.StatResponse
	if err := json.Unmarshal([]byte(out), &cliSt); err != nil {
		t.Fatalf("ghba stat --json %s: %v: %s", deepFile, err, out)
	}
	if want := codesWant(deepFile, stats); len(want) != 2 || !slices.Equal(cliSt.Ancestors, want) {
		t.Errorf("ghba stat --json %s: ancestors %+v, want %+v (2 codes: /p/d's and deep's; s1 is 0711)\n%s", deepFile, cliSt.Ancestors, want, out)
	}

	chmod := func(p string, mode uint32) codesOp {
		return func(ctx context.Context, cl *client.Client) error {
			_, err := cl.SetAttr(ctx, &rpc.SetAttrRequest{Path: p, Mode: &mode})
			return err
		}
	}
	rename := func(src, dst string) codesOp {
		return func(ctx context.Context, cl *client.Client) error {
			_, err := cl.Rename(ctx, src, dst)
			return err
		}
	}
	// settleChmod checks the outcome of a chmod of /p/d from old to mode,
	// interrupted by a kill: the codes, and a mode that is the old or the
	// new one, the new one if the chmod reported success.
	settleChmod := func(old, mode uint32) func(what string, err error) bool {
		return func(what string, err error) bool {
			t.Helper()
			stats = c.checkAncestorCodes(what, paths, c.nodes)
			got := stats["/p/d"].Mode & 0o7777
			switch {
			case got != old && got != mode:
				t.Errorf("%s: mode of /p/d is %#o, want %#o or %#o", what, got, old, mode)
			case err == nil && got != mode:
				t.Errorf("%s: chmod %o /p/d reported success but the mode is %#o", what, mode, got)
			}
			t.Logf("%s: chmod %o /p/d returned %v; the mode is %#o", what, mode, err, got)
			return got == mode
		}
	}

	// ---- 0: undisturbed chmods and renames, timed ----
	coord := nodeOf(stats["/p/d"].Home)
	calibChmod := (c.codesRetry("chmod 710 /p/d", coord, chmod("/p/d", 0o710)) +
		c.codesRetry("chmod 700 /p/d", coord, chmod("/p/d", 0o700))) / 2
	pcoord := nodeOf(stats["/p"].Home)
	calibRename := (c.codesRetry("mv /p/d /p/e", pcoord, rename("/p/d", "/p/e")) +
		c.codesRetry("mv /p/e /p/d", pcoord, rename("/p/e", "/p/d"))) / 2
	t.Logf("an undisturbed chmod of /p/d takes about %v, a rename of it %v", calibChmod.Round(time.Microsecond), calibRename.Round(time.Microsecond))
	stats = c.checkAncestorCodes("after undisturbed chmods and renames", paths, c.nodes)
	if t.Failed() {
		return
	}

	// ---- 1: chmod 755 /p/d; kill -9 of a participant ----
	coord = nodeOf(stats["/p/d"].Home)
	var others []*procNode
	for _, n := range c.nodes {
		if n != coord {
			others = append(others, n)
		}
	}
	victim := others[rand.IntN(len(others))]
	c.codesKillRound(fmt.Sprintf("round 1 (chmod 755 /p/d via its home %s, kill -9 %s)", coord.id, victim.id),
		coord, victim, calibChmod, chmod("/p/d", 0o755), settleChmod(0o700, 0o755), func(what string) {
			c.codesRetry(what+": chmod 700 /p/d", coord, chmod("/p/d", 0o700))
			stats = c.checkAncestorCodes(what, paths, c.nodes)
		})
	c.codesRetry("round 1: chmod 755 /p/d again", coord, chmod("/p/d", 0o755))
	stats = c.checkAncestorCodes("round 1, after chmod 755 again", paths, c.nodes)
	if m := stats["/p/d"].Mode & 0o7777; m != 0o755 {
		t.Errorf("mode of /p/d after a successful chmod 755: %#o", m)
	}
	if n := len(stats[deepFile].Ancestors); n != 1 {
		t.Errorf("%s under /p/d 0755: ancestors %+v, want 1 code (deep's)", deepFile, stats[deepFile].Ancestors)
	}
	if t.Failed() {
		return
	}

	// ---- 2: chmod 700 /p/d; kill -9 of the coordinator ----
	coord = nodeOf(stats["/p/d"].Home)
	c.codesKillRound(fmt.Sprintf("round 2 (chmod 700 /p/d via its home %s, kill -9 %s)", coord.id, coord.id),
		coord, coord, calibChmod, chmod("/p/d", 0o700), settleChmod(0o755, 0o700), func(what string) {
			c.codesRetry(what+": chmod 755 /p/d", coord, chmod("/p/d", 0o755))
			stats = c.checkAncestorCodes(what, paths, c.nodes)
		})
	c.codesRetry("round 2: chmod 700 /p/d again", coord, chmod("/p/d", 0o700))
	stats = c.checkAncestorCodes("round 2, after chmod 700 again", paths, c.nodes)
	if m := stats["/p/d"].Mode & 0o7777; m != 0o700 {
		t.Errorf("mode of /p/d after a successful chmod 700: %#o", m)
	}
	if t.Failed() {
		return
	}

	// ---- 3: mv /p/d /q/moved; kill -9 of a random node ----
	pcoord = nodeOf(stats["/p"].Home)
	victim = c.nodes[rand.IntN(len(c.nodes))]
	role := "a participant"
	if victim == pcoord {
		role = "the coordinator"
	}
	settleRename := func(what string, err error) bool {
		t.Helper()
		var retried atomic.Int64
		deadline := time.Now().Add(codesSettleTimeout)
		_, srcErr := c.codesStat(c.nodes[0], "/p/d", deadline, &retried)
		_, dstErr := c.codesStat(c.nodes[1], "/q/moved", deadline, &retried)
		for _, e := range []error{srcErr, dstErr} {
			if e != nil && !errors.Is(e, fs.ErrNotExist) {
				t.Fatalf("%s: stat /p/d: %v; stat /q/moved: %v", what, srcErr, dstErr)
			}
		}
		done := dstErr == nil
		switch {
		case srcErr == nil && done:
			t.Fatalf("%s: both /p/d and /q/moved exist (the rename returned %v)", what, err)
		case srcErr != nil && !done:
			t.Fatalf("%s: neither /p/d nor /q/moved exists (the rename returned %v)", what, err)
		case err == nil && !done:
			t.Errorf("%s: the rename reported success but /p/d is still there", what)
		}
		paths = base
		if done {
			paths = moved()
		}
		t.Logf("%s: the rename returned %v; it took effect: %v", what, err, done)
		stats = c.checkAncestorCodes(what, paths, c.nodes)
		return done
	}
	c.codesKillRound(fmt.Sprintf("round 3 (mv /p/d /q/moved via %s, the home of /p; kill -9 %s, %s)", pcoord.id, victim.id, role),
		pcoord, victim, calibRename, rename("/p/d", "/q/moved"), settleRename, func(what string) {
			c.codesRetry(what+": mv /q/moved /p/d", pcoord, rename("/q/moved", "/p/d"))
			paths = base
			stats = c.checkAncestorCodes(what, paths, c.nodes)
		})
	if p := "/q/moved/s1/deep/f00"; paths[p] {
		if n := len(stats[p].Ancestors); n != 3 {
			t.Errorf("%s under /q (0750): ancestors %+v, want 3 codes (/q's, /q/moved's, deep's)", p, stats[p].Ancestors)
		}
	}
	c.checkRunning(c.nodes...)
	t.Logf("TestProcessAncestorCodes: %v in all", time.Since(start).Round(time.Millisecond))
}
