package chaos

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/ghba/ghba/node/store"
	"github.com/ghba/ghba/rpc/client"
)

// Fault kinds.
const (
	FaultKillRandom     = "kill-random"
	FaultKillLeader     = "kill-leader"
	FaultPause          = "pause"
	FaultPartitionNode  = "partition-node"
	FaultPartitionGroup = "partition-group"
	// FaultRollingRestart: every node in turn is restarted (docker
	// restart: SIGTERM, a graceful stop that hands its leaderships over),
	// the cluster converging between two. A planned operation: no
	// fail-over window (docs/design.md, "Planned leadership moves").
	FaultRollingRestart = "rolling-restart"
	// FaultHandBack: one shard's preferred leader (its owner) is killed
	// -9 handBacks times; each time the shard fails over (a fail-over
	// window), the owner starts again and the shard's leadership is
	// handed back to it once it caught up: a planned move, with no window
	// after the restart.
	FaultHandBack = "hand-back"
	// FaultRollingUpgrade: every node in turn is stopped gracefully and
	// started again with this build instead of the older one it ran
	// (ClusterConfig.OldBuild: a build that speaks shard log format 1
	// only); the newer format must come into use only after the last one,
	// and a node still on the older build halts on any entry of it. On
	// nodes already upgraded it is a rolling restart by stop and start.
	// Planned: no fail-over window.
	FaultRollingUpgrade = "rolling-upgrade"
	// FaultSplitKill (group auto only): an extra node joins the full
	// groups, which forces a split; the mover is killed -9 within a second
	// of the split showing, then restarted; once the cluster converged the
	// extra node leaves gracefully.
	FaultSplitKill = "split-kill"
	// FaultWipe: a random node of a group of at least 3 (whose shards keep
	// a majority of their replicas without it) is killed -9; once the shards it led have
	// new leaders and it has been down degradedHold, its data volume is
	// replaced by an empty one and it starts again with the same id, address and group (joining, not
	// bootstrapping); the fault ends when every shard is back to all its
	// replicas, caught up and led by its owner.
	FaultWipe = "wipe"
	// FaultShardLeaderKills: the leader of one random shard is killed -9
	// shardLeaderKills times in a row; each time the harness waits for
	// the shard's new leader, holds the killed node down degradedHold,
	// restarts it and waits for the cluster to converge before it kills
	// the shard's leader of the moment again.
	FaultShardLeaderKills = "kill-shard-leader-repeat"
)

// AllFaults lists every fault kind, in the order of the short run.
var AllFaults = []string{FaultKillRandom, FaultKillLeader, FaultPause, FaultPartitionNode, FaultPartitionGroup, FaultRollingRestart,
	FaultHandBack, FaultRollingUpgrade, FaultWipe, FaultShardLeaderKills}

// AutoFaults are the fault kinds of a run with group auto, the split
// first.
var AutoFaults = append([]string{FaultSplitKill}, AllFaults...)

// splitDetectTimeout bounds the wait for the split an extra node forces.
const splitDetectTimeout = 60 * time.Second

// Bounds of the faults.
const (
	killHold       = 3 * time.Second   // a killed node stays down this long
	detectTimeout  = 45 * time.Second  // a paused or cut-off node is seen down within this
	detectHold     = 3 * time.Second   // and stays so this much longer
	recoverTimeout = 120 * time.Second // the cluster converges again within this
	// failoverTimeout bounds the wait for a new leader of a shard whose
	// leader was killed (Raft's election timeout is 1 s).
	failoverTimeout = 30 * time.Second
	// shardLeaderKills is the number of kills of FaultShardLeaderKills.
	shardLeaderKills = 3
	// handBacks is the number of kills and restarts of FaultHandBack.
	handBacks = 3
	// degradedHold is how long the node a wipe or a round of
	// kill-shard-leader-repeat kills stays down at least: past
	// failoverWindow, so that the availability check covers a cluster
	// serving without it.
	degradedHold = failoverWindow + 5*time.Second
)

// DoubleFaults are the pairs of faults a run with GHBA_CHAOS_DOUBLE=1
// overlaps: the second starts while the first is under way (see
// InjectDouble), on other nodes than the first's. Pairs whose docker
// operations conflict (a pause during a rolling restart: docker cannot
// restart a paused container) are left out.
var DoubleFaults = [][2]string{
	{FaultRollingRestart, FaultPartitionNode},
	{FaultRollingRestart, FaultKillRandom},
	{FaultKillLeader, FaultPause},
	{FaultPartitionGroup, FaultKillRandom},
	{FaultPause, FaultPartitionNode},
	{FaultPartitionNode, FaultKillLeader},
}

// FaultEvent is one injected fault, for the report and the history file.
type FaultEvent struct {
	Kind   string `json:"kind"`
	Target string `json:"target"`
	// With names the other fault of a double fault.
	With  string `json:"with,omitempty"`
	Start int64  `json:"start"`
	End   int64  `json:"end"`
	Err   string `json:"err,omitempty"`
}

// Injector injects faults into a Cluster through the docker CLI.
type Injector struct {
	c      *Cluster
	d      *Docker
	log    *slog.Logger
	rng    *rand.Rand
	rec    *Recorder
	mu     sync.Mutex
	events []FaultEvent
	// claimed are the nodes a fault under way acts on: the other fault of
	// a double fault picks its targets among the rest (guarded by mu,
	// like rng).
	claimed map[*Node]bool
	// outages are the nodes' times out of service (guarded by mu).
	outages []*Outage

	fwOnce sync.Once
	fwOK   bool // the host can edit a container's firewall (probed once)
}

// NewInjector returns an Injector recording fault times on rec's clock.
func NewInjector(c *Cluster, d *Docker, rng *rand.Rand, rec *Recorder, log *slog.Logger) *Injector {
	return &Injector{c: c, d: d, log: log, rng: rng, rec: rec, claimed: make(map[*Node]bool)}
}

// Events returns the faults injected so far.
func (in *Injector) Events() []FaultEvent {
	in.mu.Lock()
	defer in.mu.Unlock()
	return append([]FaultEvent(nil), in.events...)
}

// Outages returns the nodes' times out of service so far.
func (in *Injector) Outages() []Outage {
	in.mu.Lock()
	defer in.mu.Unlock()
	out := make([]Outage, len(in.outages))
	for i, o := range in.outages {
		out[i] = *o
	}
	return out
}

// down records that fault took n out of service now.
func (in *Injector) down(fault string, n *Node) *Outage {
	o := &Outage{Fault: fault, Node: n.ID, Group: n.Group, Down: in.rec.now()}
	in.mu.Lock()
	in.outages = append(in.outages, o)
	in.mu.Unlock()
	return o
}

// up records that o's node runs again (started, unpaused, reconnected).
func (in *Injector) up(o *Outage) {
	in.mu.Lock()
	o.Up = in.rec.now()
	in.mu.Unlock()
}

// WatchStalls records the host's stalls (see stallThreshold) as outages
// of every node, until ctx is done.
func (in *Injector) WatchStalls(ctx context.Context) {
	t := time.NewTicker(stallTick)
	defer t.Stop()
	last := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := time.Now()
		if lag := now.Sub(last) - stallTick; lag >= stallThreshold {
			o := &Outage{Fault: FaultHostStall, Node: "all", Down: in.rec.at(now.Add(-lag)), Up: in.rec.at(now), Seen: in.rec.at(now), Back: in.rec.at(now)}
			in.mu.Lock()
			in.outages = append(in.outages, o)
			in.mu.Unlock()
			in.log.Warn("the host stalled: the harness's clock ticked late", "late", lag.Round(time.Millisecond))
		}
		last = now
	}
}

// converged waits until the cluster has converged (Cluster.WaitConverged)
// and its shards have settled (Cluster.WaitShardsSettled: a node that came
// back has caught up and leads the shards it owns again), and then marks
// every outage whose node runs again as Seen and Back.
func (in *Injector) converged(ctx context.Context, timeout time.Duration) error {
	if err := in.seen(ctx, timeout); err != nil {
		return err
	}
	if err := in.c.WaitShardsSettled(ctx, timeout); err != nil {
		return err
	}
	in.stampRunning(func(o *Outage) *int64 { return &o.Back })
	return nil
}

// seen waits until the cluster has converged (Cluster.WaitConverged) and
// then marks every outage whose node runs again as Seen.
func (in *Injector) seen(ctx context.Context, timeout time.Duration) error {
	if err := in.c.WaitConverged(ctx, timeout); err != nil {
		return err
	}
	in.stampRunning(func(o *Outage) *int64 { return &o.Seen })
	return nil
}

// stampRunning sets the time field of every outage whose node runs again,
// if it is not set yet, to now.
func (in *Injector) stampRunning(field func(*Outage) *int64) {
	now := in.rec.now()
	in.mu.Lock()
	defer in.mu.Unlock()
	for _, o := range in.outages {
		if f := field(o); o.Up != 0 && *f == 0 {
			*f = now
		}
	}
}

func (in *Injector) record(evs ...FaultEvent) {
	in.mu.Lock()
	in.events = append(in.events, evs...)
	in.mu.Unlock()
}

// intn is rng.IntN under mu (the faults of a double fault draw at once).
func (in *Injector) intn(n int) int {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.rng.IntN(n)
}

// claim picks a random node that no fault under way acts on and that ok
// accepts (nil: any), and claims it; release gives it back.
func (in *Injector) claim(ok func(*Node) bool) (*Node, error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	var free []*Node
	for _, n := range in.c.Nodes {
		if !in.claimed[n] && (ok == nil || ok(n)) {
			free = append(free, n)
		}
	}
	if len(free) == 0 {
		return nil, errors.New("chaos: no node is free for this fault")
	}
	n := free[in.rng.IntN(len(free))]
	in.claimed[n] = true
	return n, nil
}

// groupSize returns the number of nodes in group g (in.mu held).
func (in *Injector) groupSize(g string) int {
	k := 0
	for _, n := range in.c.Nodes {
		if n.Group == g {
			k++
		}
	}
	return k
}

func (in *Injector) release(ns ...*Node) {
	in.mu.Lock()
	for _, n := range ns {
		delete(in.claimed, n)
	}
	in.mu.Unlock()
}

// Inject runs one fault of kind, heals it and waits until the cluster has
// converged again. An error means the fault could not be injected or the
// cluster did not recover.
func (in *Injector) Inject(ctx context.Context, kind string) error {
	ev := FaultEvent{Kind: kind, Start: in.rec.now()}
	// With group auto the groups change: read them now.
	err := in.c.RefreshGroups(ctx)
	if err != nil {
		err = fmt.Errorf("chaos: reading the groups before the fault: %w", err)
	} else {
		ev.Target, err = in.do(ctx, kind)
	}
	if err == nil {
		err = in.converged(ctx, recoverTimeout)
	}
	ev.End = in.rec.now()
	if err != nil {
		ev.Err = err.Error()
	}
	in.record(ev)
	in.log.Info("fault done", "kind", kind, "target", ev.Target, "took", time.Duration(ev.End-ev.Start).Round(time.Millisecond), "err", err)
	if err != nil {
		return fmt.Errorf("chaos: fault %s on %s: %w", kind, ev.Target, err)
	}
	return nil
}

// InjectDouble runs the faults first and second at once: second starts
// a random 0.5–5 s after first (2–30 s after a rolling restart begins,
// so that it meets any of its nodes), on nodes first does not act on;
// both heal, then the cluster must converge.
func (in *Injector) InjectDouble(ctx context.Context, first, second string) error {
	start := in.rec.now()
	if err := in.c.RefreshGroups(ctx); err != nil {
		return fmt.Errorf("chaos: reading the groups before the faults: %w", err)
	}
	delay := 500*time.Millisecond + time.Duration(in.intn(4500))*time.Millisecond
	if first == FaultRollingRestart {
		delay = 2*time.Second + time.Duration(in.intn(28000))*time.Millisecond
	}
	in.log.Info("double fault", "first", first, "second", second, "second_after", delay)
	evs := []FaultEvent{{Kind: first, With: second, Start: start}, {Kind: second, With: first}}
	errs := make([]error, 2)
	var wg sync.WaitGroup
	wg.Go(func() { evs[0].Target, errs[0] = in.do(ctx, first) })
	wg.Go(func() {
		if errs[1] = sleep(ctx, delay); errs[1] == nil {
			evs[1].Start = in.rec.now()
			evs[1].Target, errs[1] = in.do(ctx, second)
		}
	})
	wg.Wait()
	err := errors.Join(errs...)
	if err == nil {
		err = in.converged(ctx, recoverTimeout)
	}
	end := in.rec.now()
	for i := range evs {
		evs[i].End = end
		if errs[i] != nil {
			evs[i].Err = errs[i].Error()
		} else if err != nil {
			evs[i].Err = err.Error()
		}
	}
	in.record(evs...)
	in.log.Info("double fault done", "first", first, "first_target", evs[0].Target, "second", second, "second_target", evs[1].Target,
		"took", time.Duration(end-start).Round(time.Millisecond), "err", err)
	if err != nil {
		return fmt.Errorf("chaos: double fault %s on %s + %s on %s: %w", first, evs[0].Target, second, evs[1].Target, err)
	}
	return nil
}

// do injects one fault and heals it; it returns the fault's target.
func (in *Injector) do(ctx context.Context, kind string) (string, error) {
	switch kind {
	case FaultSplitKill:
		return in.splitKill(ctx)
	case FaultShardLeaderKills:
		return in.shardLeaderKills(ctx)
	case FaultKillRandom, FaultPause, FaultPartitionNode, FaultWipe:
		var ok func(*Node) bool
		if kind == FaultWipe {
			// A wipe deletes the node's copies: only where its group
			// keeps a majority of every shard's replicas without it (a
			// group of 3 or more; a smaller one, left by a split and a
			// leave until it merges, holds fewer copies).
			ok = func(n *Node) bool { return in.groupSize(n.Group) >= 3 }
		}
		n, err := in.claim(ok)
		if err != nil {
			return "", err
		}
		defer in.release(n)
		switch kind {
		case FaultKillRandom:
			return n.ID, in.kill(ctx, kind, n)
		case FaultWipe:
			return n.ID, in.wipe(ctx, n)
		case FaultPause:
			return n.ID, in.pause(ctx, n)
		}
		return n.ID, in.partitionNode(ctx, n)
	case FaultKillLeader:
		gs := in.c.Groups()
		g := gs[in.intn(len(gs))]
		l, err := in.c.Leader(ctx, g)
		if err != nil {
			return "", err
		}
		// A fault under way may have claimed this leader: then
		// another group's.
		n, err := in.claim(func(n *Node) bool { return n == l })
		if err != nil {
			for _, g2 := range gs {
				if l2, lerr := in.c.Leader(ctx, g2); lerr == nil {
					if n, err = in.claim(func(n *Node) bool { return n == l2 }); err == nil {
						break
					}
				}
			}
		}
		if err != nil {
			return "", fmt.Errorf("chaos: no leader is free for kill-leader: %w", err)
		}
		defer in.release(n)
		return n.ID, in.kill(ctx, kind, n)
	case FaultPartitionGroup:
		members, g, err := in.claimGroup()
		if err != nil {
			return "", err
		}
		defer in.release(members...)
		return g, in.partitionGroup(ctx, g)
	case FaultRollingRestart:
		// It claims no node: a kill or a partition of a node it restarts
		// combine with the restart.
		return "all", in.rollingRestart(ctx)
	case FaultRollingUpgrade:
		return "all", in.rollingUpgrade(ctx)
	case FaultHandBack:
		return in.handBack(ctx)
	}
	return "", fmt.Errorf("chaos: unknown fault %q", kind)
}

// claimGroup claims every member of a random group none of whose members
// a fault under way acts on.
func (in *Injector) claimGroup() ([]*Node, string, error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	var free []string
	for _, g := range in.c.Groups() {
		ok := true
		for _, n := range in.c.Nodes {
			ok = ok && !(n.Group == g && in.claimed[n])
		}
		if ok {
			free = append(free, g)
		}
	}
	if len(free) == 0 {
		return nil, "", errors.New("chaos: no group is free for partition-group")
	}
	g := free[in.rng.IntN(len(free))]
	var members []*Node
	for _, n := range in.c.Nodes {
		if n.Group == g {
			in.claimed[n] = true
			members = append(members, n)
		}
	}
	return members, g, nil
}

// kill kills n -9 (for fault), holds it down killHold and starts it.
func (in *Injector) kill(ctx context.Context, fault string, n *Node) error {
	in.log.Info("kill -9", "node", n.ID)
	// Each mark before its command: the command takes effect at some
	// point before it returns.
	o := in.down(fault, n)
	if _, err := in.d.Run(ctx, "kill", "-s", "KILL", n.Container); err != nil {
		if strings.Contains(err.Error(), "is not running") {
			// A rolling restart under way (a double fault) has it
			// stopped at this moment, and starts it again itself.
			in.up(o)
			in.log.Info("kill -9: the node is down already (a restart under way brings it back)", "node", n.ID)
			return nil
		}
		return err
	}
	if err := sleep(ctx, killHold); err != nil {
		return err
	}
	in.up(o)
	_, err := in.d.Run(ctx, "start", n.Container)
	return err
}

func (in *Injector) pause(ctx context.Context, n *Node) error {
	in.log.Info("pause", "node", n.ID)
	o := in.down(FaultPause, n)
	if _, err := in.d.Run(ctx, "pause", n.Container); err != nil {
		return err
	}
	err := in.waitSeenDown(ctx, []*Node{n})
	in.up(o)
	_, uerr := in.d.Run(context.WithoutCancel(ctx), "unpause", n.Container)
	return errors.Join(err, uerr)
}

func (in *Injector) partitionNode(ctx context.Context, n *Node) error {
	in.log.Info("partition node", "node", n.ID)
	o := in.down(FaultPartitionNode, n)
	if _, err := in.d.Run(ctx, "network", "disconnect", "-f", in.c.Network, n.Container); err != nil {
		return err
	}
	err := in.waitSeenDown(ctx, []*Node{n})
	in.up(o)
	_, cerr := in.d.Run(context.WithoutCancel(ctx), "network", "connect", "--ip", n.IP, in.c.Network, n.Container)
	return errors.Join(err, cerr)
}

// cutOff records the outages of a group partition: every member's, each
// without a majority as the other groups see it.
func (in *Injector) cutOff(members []*Node) []*Outage {
	var cut []*Outage
	for _, n := range members {
		o := in.down(FaultPartitionGroup, n)
		in.mu.Lock()
		o.NoMajority = true
		in.mu.Unlock()
		cut = append(cut, o)
	}
	return cut
}

// reconnected marks the outages of cutOff as over.
func (in *Injector) reconnected(cut []*Outage) {
	for _, o := range cut {
		in.up(o)
	}
}

// wipe is FaultWipe on n.
func (in *Injector) wipe(ctx context.Context, n *Node) error {
	led := in.ledBy(ctx, n)
	in.log.Info("wipe: kill -9", "node", n.ID, "leads", led)
	o := in.down(FaultWipe, n)
	if _, err := in.d.Run(ctx, "kill", "-s", "KILL", n.Container); err != nil {
		return err
	}
	for _, sh := range led {
		l, err := in.waitShardLeader(ctx, sh, n)
		if err != nil {
			return fmt.Errorf("before wiping %s: %w", n.ID, err)
		}
		in.log.Info("shard failed over", "shard", sh, "leader", l.ID)
	}
	if err := in.holdDown(ctx, o); err != nil {
		return err
	}
	in.up(o)
	if err := in.c.Wipe(ctx, n); err != nil {
		return err
	}
	in.log.Info("wiped node started again on an empty volume", "node", n.ID, "volume", n.Volume)
	// Back once its replicas have caught up and the shards it owns are
	// led by it again.
	if err := in.converged(ctx, recoverTimeout); err != nil {
		return fmt.Errorf("after wiping %s: %w", n.ID, err)
	}
	return nil
}

// holdDown waits until o's node has been down degradedHold.
func (in *Injector) holdDown(ctx context.Context, o *Outage) error {
	return sleep(ctx, time.Duration(o.Down+int64(degradedHold)-in.rec.now()))
}

// ledBy returns the shards n leads, as its /v1/status says (none if it
// does not answer).
func (in *Injector) ledBy(ctx context.Context, n *Node) []string {
	s, err := in.c.Status(ctx, n)
	if err != nil {
		return nil
	}
	var led []string
	for _, r := range s.Replicas {
		if r.Leading {
			led = append(led, r.Shard)
		}
	}
	return led
}

// waitShardLeader waits until a node other than old reports that it leads
// shard, and returns it.
func (in *Injector) waitShardLeader(ctx context.Context, shard string, old *Node) (*Node, error) {
	var l *Node
	err := poll(ctx, failoverTimeout, func(ctx context.Context) (string, error) {
		if l = in.c.ShardLeader(ctx, shard, old); l == nil {
			return "no node leads shard " + shard, nil
		}
		return "", nil
	})
	if err != nil {
		return nil, fmt.Errorf("chaos: shard %s has no new leader: %w", shard, err)
	}
	return l, nil
}

// shardLeaderKills is FaultShardLeaderKills. It returns the fault's
// target ("n3: n3 n1 n3": the shard, the leaders killed).
func (in *Injector) shardLeaderKills(ctx context.Context) (string, error) {
	shards, err := in.c.Shards(ctx)
	if err != nil {
		return "", err
	}
	sh := shards[in.intn(len(shards))]
	target := sh + ":"
	for i := range shardLeaderKills {
		var l *Node
		if err := poll(ctx, failoverTimeout, func(ctx context.Context) (string, error) {
			if l = in.c.ShardLeader(ctx, sh, nil); l == nil {
				return "no node leads shard " + sh, nil
			}
			return "", nil
		}); err != nil {
			return target, fmt.Errorf("chaos: shard %s: %w", sh, err)
		}
		n, err := in.claim(func(n *Node) bool { return n == l })
		if err != nil {
			return target, fmt.Errorf("chaos: the leader %s of shard %s: %w", l.ID, sh, err)
		}
		target += " " + n.ID
		err = in.killShardLeader(ctx, sh, n, i+1)
		in.release(n)
		if err != nil {
			return target, err
		}
	}
	// Inject then waits until the shards have settled.
	return target, nil
}

// killShardLeader kills n, the leader of shard, -9, waits for the shard's
// new leader, starts n again and waits until the cluster has converged
// (not until the shards have settled: the next round may kill the new
// leader while the shard's owner is still catching up).
func (in *Injector) killShardLeader(ctx context.Context, shard string, n *Node, round int) error {
	in.log.Info("kill -9 a shard's leader", "shard", shard, "round", round, "node", n.ID)
	o := in.down(FaultShardLeaderKills, n)
	if _, err := in.d.Run(ctx, "kill", "-s", "KILL", n.Container); err != nil {
		return err
	}
	l, err := in.waitShardLeader(ctx, shard, n)
	if err == nil {
		in.log.Info("shard failed over", "shard", shard, "round", round, "leader", l.ID, "took", time.Duration(in.rec.now()-o.Down).Round(time.Millisecond))
		err = in.holdDown(ctx, o)
	}
	// Started again even when the shard did not fail over, so that the
	// run can go on to its final reads.
	in.up(o)
	if _, serr := in.d.Run(context.WithoutCancel(ctx), "start", n.Container); serr != nil {
		return errors.Join(err, serr)
	}
	if err != nil {
		return err
	}
	if err := in.seen(ctx, recoverTimeout); err != nil {
		return fmt.Errorf("after killing %s, the leader of shard %s: %w", n.ID, shard, err)
	}
	return nil
}

// partitionGroup cuts group g off from every other node while its members
// still reach each other and the clients: DROP rules in each member's
// network namespace (nsenter + the host's iptables). Without those tools it
// disconnects every member from the network instead.
func (in *Injector) partitionGroup(ctx context.Context, g string) error {
	var inside, outside []*Node
	for _, n := range in.c.Nodes {
		if n.Group == g {
			inside = append(inside, n)
		} else {
			outside = append(outside, n)
		}
	}
	if !in.canFirewall(ctx, inside) {
		in.log.Info("partition group by disconnecting every member (no usable nsenter/iptables)", "group", g)
		var errs []error
		cut := in.cutOff(inside)
		for _, n := range inside {
			if _, err := in.d.Run(ctx, "network", "disconnect", "-f", in.c.Network, n.Container); err != nil {
				errs = append(errs, err)
			}
		}
		if len(errs) == 0 {
			errs = append(errs, in.waitSeenDown(ctx, inside))
		}
		in.reconnected(cut)
		for _, n := range inside {
			if _, err := in.d.Run(context.WithoutCancel(ctx), "network", "connect", "--ip", n.IP, in.c.Network, n.Container); err != nil {
				errs = append(errs, err)
			}
		}
		return errors.Join(errs...)
	}
	in.log.Info("partition group", "group", g)
	pids := make(map[*Node]string)
	for _, n := range inside {
		pid, err := in.d.Run(ctx, "inspect", "-f", "{{.State.Pid}}", n.Container)
		if err != nil {
			return err
		}
		pids[n] = pid
	}
	apply := func(ctx context.Context, op string) error {
		var errs []error
		for _, n := range inside {
			for _, o := range outside {
				for _, r := range [][]string{{"INPUT", "-s", o.IP}, {"OUTPUT", "-d", o.IP}} {
					args := []string{"-t", pids[n], "-n", "iptables", "-w", "5", op, r[0], r[1], r[2], "-j", "DROP"}
					if _, err := in.d.run(ctx, nil, "nsenter", args...); err != nil {
						errs = append(errs, err)
					}
				}
			}
		}
		return errors.Join(errs...)
	}
	cut := in.cutOff(inside)
	err := apply(ctx, "-I")
	if err == nil {
		err = in.waitSeenDown(ctx, inside)
	}
	in.reconnected(cut)
	return errors.Join(err, apply(context.WithoutCancel(ctx), "-D"))
}

// canFirewall reports whether the host can edit a container's firewall:
// nsenter and iptables are installed and, probed once on a running node of
// nodes, listing its rules in its network namespace works (without the
// permission every nsenter fails).
func (in *Injector) canFirewall(ctx context.Context, nodes []*Node) bool {
	in.fwOnce.Do(func() {
		for _, t := range []string{"nsenter", "iptables"} {
			if _, err := exec.LookPath(t); err != nil {
				in.log.Warn("group partitions disconnect the members instead of firewalling them", "missing", t)
				return
			}
		}
		var errs []error
		for _, n := range nodes {
			pid, err := in.d.Run(ctx, "inspect", "-f", "{{.State.Pid}}", n.Container)
			if err != nil || pid == "" || pid == "0" {
				errs = append(errs, fmt.Errorf("pid of %s: %q: %w", n.ID, pid, err))
				continue // not running: try another
			}
			pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			_, err = in.d.run(pctx, nil, "nsenter", "-t", pid, "-n", "iptables", "-w", "5", "-S")
			cancel()
			if err != nil {
				in.log.Warn("group partitions disconnect the members instead of firewalling them: the probe failed", "node", n.ID, "err", err)
				return
			}
			in.fwOK = true
			in.log.Info("group partitions firewall the members (nsenter + iptables probed)", "node", n.ID)
			return
		}
		in.log.Warn("group partitions disconnect the members: no running node to probe", "err", errors.Join(errs...))
	})
	return in.fwOK
}

func (in *Injector) rollingRestart(ctx context.Context) error {
	for _, n := range in.c.Nodes {
		in.log.Info("rolling restart", "node", n.ID)
		// docker restart stops and starts: the node is down, then up,
		// somewhere within the command.
		o := in.down(FaultRollingRestart, n)
		o.Planned = true
		if _, err := in.d.Run(ctx, "restart", "-t", "20", n.Container); err != nil {
			return err
		}
		in.up(o)
		if err := in.converged(ctx, recoverTimeout); err != nil {
			return fmt.Errorf("after restarting %s: %w", n.ID, err)
		}
	}
	return nil
}

// rollingUpgrade is FaultRollingUpgrade: each node in turn is recreated
// without the older build's pin (Cluster.Recreate), and the cluster must
// converge before the next; the shard log format in use stays 1 until the
// last node runs this build, then becomes 2.
func (in *Injector) rollingUpgrade(ctx context.Context) error {
	for i, n := range in.c.Nodes {
		in.log.Info("rolling upgrade", "node", n.ID, "from_older_build", len(n.Env) > 0)
		o := in.down(FaultRollingUpgrade, n)
		o.Planned = true
		if err := in.c.Recreate(ctx, n, nil); err != nil {
			return err
		}
		in.up(o)
		if err := in.converged(ctx, recoverTimeout); err != nil {
			return fmt.Errorf("after upgrading %s: %w", n.ID, err)
		}
		if i == len(in.c.Nodes)-1 {
			break
		}
		older := slices.ContainsFunc(in.c.Nodes, func(m *Node) bool { return len(m.Env) > 0 })
		if v, err := in.c.LogFormatInUse(ctx); err != nil {
			return err
		} else if older && v != 1 {
			return fmt.Errorf("chaos: shard log format %d in use while a node runs the older build", v)
		}
	}
	return poll(ctx, recoverTimeout, func(ctx context.Context) (string, error) {
		v, err := in.c.LogFormatInUse(ctx)
		if err != nil {
			return err.Error(), nil
		}
		if want := int(store.MaxBatchFormat); v != want {
			return fmt.Sprintf("shard log format %d in use after the last upgrade, want this build's %d", v, want), nil
		}
		return "", nil
	})
}

// handBack is FaultHandBack. It returns the fault's target ("n3@n3": the
// shard and its owner).
func (in *Injector) handBack(ctx context.Context) (string, error) {
	shards, err := in.c.Shards(ctx)
	if err != nil {
		return "", err
	}
	sh := shards[in.intn(len(shards))]
	var owner *Node
	for _, s := range in.c.statuses(ctx, nil) {
		for _, r := range s.Replicas {
			if r.Shard == sh && r.Owner != "" {
				owner = in.c.Node(r.Owner)
			}
		}
	}
	if owner == nil {
		return sh, fmt.Errorf("chaos: shard %s: no owner known", sh)
	}
	target := sh + "@" + owner.ID
	n, err := in.claim(func(n *Node) bool { return n == owner })
	if err != nil {
		return target, fmt.Errorf("chaos: the owner %s of shard %s: %w", owner.ID, sh, err)
	}
	defer in.release(n)
	for round := range handBacks {
		in.log.Info("kill -9 a shard's preferred leader", "shard", sh, "round", round+1, "node", n.ID)
		o := in.down(FaultHandBack, n)
		o.PlannedBack = true
		if _, err := in.d.Run(ctx, "kill", "-s", "KILL", n.Container); err != nil {
			return target, err
		}
		_, err := in.waitShardLeader(ctx, sh, n)
		if err == nil {
			err = sleep(ctx, killHold)
		}
		in.up(o)
		if _, serr := in.d.Run(context.WithoutCancel(ctx), "start", n.Container); serr != nil {
			return target, errors.Join(err, serr)
		}
		if err != nil {
			return target, err
		}
		// The hand-back: the shard's leadership returns to its owner.
		if err := in.converged(ctx, recoverTimeout); err != nil {
			return target, fmt.Errorf("after restarting %s, the owner of shard %s: %w", n.ID, sh, err)
		}
	}
	return target, nil
}

// waitSeenDown waits until a node outside down sees every node of down as
// not up (Serf's failure detection has fired), then holds a little longer.
func (in *Injector) waitSeenDown(ctx context.Context, down []*Node) error {
	var observers []*Node
	for _, n := range in.c.Nodes {
		if !containsNode(down, n) {
			observers = append(observers, n)
		}
	}
	err := poll(ctx, detectTimeout, func(ctx context.Context) (string, error) {
		for _, o := range observers {
			s, err := in.c.Status(ctx, o)
			if err != nil {
				continue
			}
			up := make(map[string]bool)
			for _, p := range s.Peers {
				up[p.ID] = p.Up
			}
			all := true
			for _, d := range down {
				all = all && !up[d.ID]
			}
			if all {
				return "", nil
			}
		}
		var ids []string
		for _, d := range down {
			ids = append(ids, d.ID)
		}
		return "no node sees " + strings.Join(ids, ",") + " down yet", nil
	})
	if err != nil {
		return fmt.Errorf("failure not detected: %w", err)
	}
	return sleep(ctx, detectHold)
}

func containsNode(ns []*Node, n *Node) bool {
	for _, m := range ns {
		if m == n {
			return true
		}
	}
	return false
}

// sleep waits d or until ctx is done.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// splitKill is FaultSplitKill. It returns the fault's target ("n10>n6":
// the extra node, the mover killed).
func (in *Injector) splitKill(ctx context.Context) (string, error) {
	if !in.c.cfg.Auto {
		return "", errors.New("chaos: split-kill needs group auto")
	}
	sizes := make(map[string]int)
	for _, n := range in.c.Nodes {
		sizes[n.Group]++
	}
	full := true
	for _, k := range sizes {
		full = full && k >= in.c.cfg.PerGroup
	}
	before := make(map[string]*Status)
	for _, n := range in.c.Nodes {
		s, err := in.c.Status(ctx, n)
		if err != nil {
			return "", err
		}
		before[n.ID] = s
	}
	old := slices.Clone(in.c.Nodes)
	// The split changes the groups: a shard may lack a majority until the
	// cluster has converged after the extra node left.
	split := &Outage{Fault: FaultSplitKill, Down: in.rec.now(), NoMajority: true}
	in.mu.Lock()
	in.outages = append(in.outages, split)
	in.mu.Unlock()
	defer in.up(split)
	x, err := in.c.AddExtra(ctx)
	if err != nil {
		return x.ID, err
	}
	in.mu.Lock()
	split.Node = x.ID
	in.mu.Unlock()
	started := time.Now()
	in.log.Info("extra auto node started to force a split", "node", x.ID, "groups_full", full)

	// The mover: a node that left its group (not joined, in another
	// group, or one switch more than before).
	var mover *Node
	err = poll(ctx, splitDetectTimeout, func(ctx context.Context) (string, error) {
		for _, n := range old {
			sctx, cancel := context.WithTimeout(ctx, time.Second)
			s, err := in.c.Status(sctx, n)
			cancel()
			if err != nil {
				continue
			}
			if b := before[n.ID]; !s.Joined || s.Group != b.Group || s.GroupSwitches != b.GroupSwitches {
				mover = n
				return "", nil
			}
		}
		if s, err := in.c.Status(ctx, x); err == nil && s.Joined && !full {
			return "", nil // a group had room: no split
		}
		return "no member has left its group yet", nil
	})
	if err != nil {
		return x.ID, fmt.Errorf("the split %s should force: %w", x.ID, err)
	}
	target := x.ID
	if mover == nil {
		in.log.Info("no split: a group had room for the extra node", "node", x.ID)
	} else {
		target += ">" + mover.ID
		delay := time.Duration(in.intn(700)) * time.Millisecond
		in.log.Info("split under way: killing the mover", "mover", mover.ID, "seen_after", time.Since(started).Round(time.Millisecond), "kill_in", delay)
		if err := sleep(ctx, delay); err != nil {
			return target, err
		}
		if err := in.kill(ctx, FaultSplitKill, mover); err != nil {
			return target, err
		}
	}
	if err := in.converged(ctx, recoverTimeout); err != nil {
		return target, fmt.Errorf("after the split: %w", err)
	}
	return target, in.retire(ctx, x)
}

// retire makes n leave the cluster gracefully (its files drain to other
// nodes; the agent exits) and moves it to the cluster's Retired nodes.
func (in *Injector) retire(ctx context.Context, n *Node) error {
	in.log.Info("extra node leaves", "node", n.ID)
	c := client.New(client.Options{Addrs: []string{n.RPCAddr()}, Logger: in.log, HomeCacheSize: -1, Timeout: 2 * time.Minute, MaxAttempts: 1})
	defer c.Close()
	lctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	resp, err := c.Leave(lctx, n.RPCAddr(), n.ID)
	cancel()
	if err != nil {
		return fmt.Errorf("leave of %s: %w", n.ID, err)
	}
	in.log.Info("extra node left", "node", n.ID, "moved_shard_replicas", resp.MovedShardReplicas, "handed_shards", resp.HandedShards, "handed_replicas", resp.HandedReplicas)
	err = poll(ctx, time.Minute, func(ctx context.Context) (string, error) {
		out, err := in.d.Run(ctx, "inspect", "-f", "{{.State.Running}}", n.Container)
		if err != nil {
			return "", err
		}
		if out == "true" {
			return n.ID + " still running after its leave", nil
		}
		return "", nil
	})
	if err != nil {
		return fmt.Errorf("after the leave of %s: %w", n.ID, err)
	}
	in.c.Retire(n)
	return nil
}
