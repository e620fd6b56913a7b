package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ghba/ghba/fsm"
	"github.com/ghba/ghba/node/internal/backoff"
	"github.com/ghba/ghba/node/store"
	"github.com/ghba/ghba/rpc"
	"github.com/hashicorp/serf/serf"
)

// Group split and merge (g-hba-survey §VI; docs/design.md, "Groups"), for nodes with
// group "auto":
//
//   - Split: the leader of a full group (M members) that receives an auto
//     join while no other group has room moves ⌈(M+1)/2⌉−1 of its members
//     (the highest ids, never itself) and the joiner to a new group. It
//     applies SplitCommand (they become origins), removes them from Raft and
//     tells each to switch (methodGroupSwitch); the lowest id among them
//     bootstraps the new group, the others and the joiner (told in its
//     groupJoinResp) join it through the normal join path.
//   - Merge: the leader of a group whose members are all alive, that totals
//     at most M with another healthy group and is the smaller of the two
//     (ties: the greater name moves), tells its members and then itself to
//     switch to the other group; each joins it through the normal join
//     path, and the old group disappears.
//   - Switch: a node records the switch in its store (metaSwitch, with
//     metaGroup deleted) before tearing down its Raft, wipes data_dir/raft,
//     opens a fresh Raft and FSM on the same port and bootstraps or joins
//     the new group; joining deletes the record. A node killed mid-switch
//     finds the record at restart, wipes its Raft state and joins a group
//     again (as any auto node, preferring the switch's target), so it
//     never comes back into the old group's FSM.
//
// Files never move (zero metadata migration); only the FSMs re-assign
// filter replicas.

// switchRecord is a group switch in progress, as recorded in metaSwitch.
type switchRecord struct {
	Group     string `json:"group"`
	From      string `json:"from"`
	Via       string `json:"via,omitempty"`
	Bootstrap bool   `json:"bootstrap,omitempty"`
	Reason    string `json:"reason"`
	// Shards are the shards the node owns and takes to the new group
	// (nil in a record of a build before replicated shards).
	Shards []string `json:"shards"`
}

func parseSwitchRecord(s string) (*switchRecord, error) {
	var r switchRecord
	if err := json.Unmarshal([]byte(s), &r); err != nil {
		return nil, fmt.Errorf("switch record: %w", err)
	}
	return &r, nil
}

// joinHint steers the join loop of an auto node towards the group a switch
// or a split's redirect named, until it expires.
type joinHint struct {
	group string    // the group to join
	via   string    // or the group this node gossips
	from  string    // never this one (the group being left)
	until time.Time // then choose like any auto node
}

// reshapeState is the leader's split/merge bookkeeping (under memberMu).
type reshapeState struct {
	movedAway   map[string]time.Time // members split away, by when
	sig         string               // the group's members as last seen
	stableSince time.Time            // since when sig has not changed
	last        time.Time            // last split or merge by this leader
	lastMovers  []string             // the members the last split moved
	newGroup    string               // the group the last split founds
	newVia      string               // its founder
	newSize     int                  // its members and the joiners sent there
	merging     bool                 // a merge is being carried out
}

// movedAwayRecently reports whether this leader moved id to another group
// less than movedAwayGrace ago (reconcile does not add it back). Called
// with memberMu held.
func (n *Node) movedAwayRecently(id string) bool {
	t, ok := n.reshape.movedAway[id]
	if ok && time.Since(t) > n.tune.MovedAwayGrace {
		delete(n.reshape.movedAway, id)
		return false
	}
	return ok
}

// groupNumber returns N of a group named "gN" or "gN-founder", and
// whether it is one.
func groupNumber(g string) (int, bool) {
	rest, ok := strings.CutPrefix(g, "g")
	if !ok {
		return 0, false
	}
	if i := strings.IndexByte(rest, '-'); i >= 0 {
		rest = rest[:i]
	}
	k, err := strconv.Atoi(rest)
	return k, err == nil && k > 0
}

// newGroupName returns "gN-founder": N is the greatest N of a group any
// member Serf knows gossips (or this node's), plus 1, and founder the id of
// the node that will bootstrap it. Two leaders splitting at once may pick
// the same N, but never the same founder, so two Raft groups never share a
// name.
func (n *Node) newGroupName(founder string) string {
	hi := 0
	if k, ok := groupNumber(n.group()); ok {
		hi = k
	}
	if s := n.serfAgent(); s != nil {
		for _, m := range s.Members() {
			if k, ok := groupNumber(m.Tags[tagGroup]); ok && k > hi {
				hi = k
			}
		}
	}
	return "g" + strconv.Itoa(hi+1) + "-" + founder
}

// groupAdvertised reports whether an alive node other than this one
// gossips group g.
func (n *Node) groupAdvertised(g string) bool {
	s := n.serfAgent()
	if s == nil {
		return false
	}
	for _, m := range s.Members() {
		if m.Name != n.cfg.NodeID && m.Status == serf.StatusAlive && m.Tags[tagRole] == roleGHBA && m.Tags[tagGroup] == g {
			return true
		}
	}
	return false
}

// activeHint returns the join hint if one is set and not expired (an
// expired one is cleared).
func (n *Node) activeHint() (joinHint, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	h := n.hint
	if h.group == "" && h.via == "" {
		return joinHint{}, false
	}
	if time.Now().After(h.until) {
		n.hint = joinHint{}
		n.log.Info("the group a switch named did not show up; choosing a group like any auto node", "group", h.group, "via", h.via)
		return joinHint{}, false
	}
	return h, true
}

// setHint sets the join hint.
func (n *Node) setHint(h joinHint) {
	n.mu.Lock()
	n.hint = h
	n.mu.Unlock()
}

// handleGroupSwitch is methodGroupSwitch: this node's leader moves it to
// another group. The switch is recorded before the call returns; the
// Raft is replaced in the background.
func (n *Node) handleGroupSwitch(ctx context.Context, req *groupSwitchReq) (*groupSwitchResp, error) {
	if n.cfg.Group != GroupAuto {
		return nil, fmt.Errorf("%w: node %s has a fixed group", fs.ErrInvalid, n.cfg.NodeID)
	}
	if req.Group == "" || req.Group == req.From {
		return nil, fmt.Errorf("%w: switch to group %q from %q", fs.ErrInvalid, req.Group, req.From)
	}
	n.mu.Lock()
	p := n.pendingSwitch
	joined, g := n.joined, n.groupName
	n.mu.Unlock()
	if p != nil && p.Group == req.Group && p.From == req.From {
		return &groupSwitchResp{}, nil // a retry
	}
	if !joined || g != req.From {
		return nil, fmt.Errorf("%w: node %s is not a member of group %q", rpc.ErrUnavailable, n.cfg.NodeID, req.From)
	}
	shards := req.Shards
	if shards == nil { // a leader of a build before replicated shards
		shards = nonNil(n.groupFSM().OwnedBy(n.cfg.NodeID))
	}
	rec := switchRecord{Group: req.Group, From: req.From, Via: req.Via, Bootstrap: req.Bootstrap, Reason: req.Reason, Shards: shards}
	if err := n.beginSwitch(ctx, rec); err != nil {
		return nil, err
	}
	n.log.Info("told to switch groups", "from", req.From, "to", req.Group, "reason", req.Reason,
		"leader", req.Leader, "bootstrap", req.Bootstrap)
	return &groupSwitchResp{}, nil
}

// beginSwitch records the switch (crash-safe: before anything is torn
// down), stops gossiping membership of the old group (tagMoving) and
// starts replacing the Raft in the background.
func (n *Node) beginSwitch(ctx context.Context, rec switchRecord) error {
	b, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("switch record: %w", err)
	}
	// Reserve the switch first (one at a time, only on a running node
	// that is a member of rec.From), so that a retried request cannot
	// start a second one and a refused request writes nothing.
	n.mu.Lock()
	switch {
	case n.state != lcRunning:
		n.mu.Unlock()
		return errNotRunning
	case n.switching || n.pendingSwitch != nil:
		n.mu.Unlock()
		return fmt.Errorf("%w: node %s is already switching groups", rpc.ErrUnavailable, n.cfg.NodeID)
	case !n.joined || n.groupName != rec.From:
		n.mu.Unlock()
		return fmt.Errorf("%w: node %s is not a member of group %q", rpc.ErrUnavailable, n.cfg.NodeID, rec.From)
	}
	n.switching = true
	n.mu.Unlock()
	var batch store.Batch
	batch.SetMeta(metaSwitch, b)
	batch.DeleteMeta(metaGroup)
	// The shards the switch carries outlive the switch record: until the
	// new group's FSM has them (a node killed between its switch and its
	// first join would otherwise join without them, orphaning them).
	batch.SetMeta(metaShardCarry, []byte(strings.Join(rec.Shards, ",")))
	if err := n.store.Commit(ctx, &batch); err != nil {
		n.mu.Lock()
		n.switching = false
		n.mu.Unlock()
		return fmt.Errorf("node: recording the group switch: %w", err)
	}
	n.mu.Lock()
	if n.state != lcRunning {
		// Shutdown began meanwhile: the record stands, and the restart
		// carries the switch out.
		n.switching = false
		n.mu.Unlock()
		return errNotRunning
	}
	n.pendingSwitch = &rec
	n.carry = rec.Shards
	n.movingFrom = rec.From
	if gr := n.curRaft(); gr != nil {
		gr.leaving = rec.From
	}
	n.groupName, n.joined = "", false
	n.switching = true
	n.hint = joinHint{}
	if !rec.Bootstrap {
		n.hint = joinHint{group: rec.Group, via: rec.Via, from: rec.From, until: time.Now().Add(n.tune.SwitchHintTimeout)}
	}
	n.mu.Unlock()
	if err := n.updateTags(); err != nil {
		n.log.Warn("updating serf tags", "err", err)
	}
	n.dir.refresh()
	if !n.bg.Go(func() { n.runSwitch(rec) }) {
		return errNotRunning // shutting down: the record stands, a restart carries the switch out
	}
	return nil
}

// runSwitch replaces the node's Raft: the old group's is shut down and
// its state wiped, a fresh one opened on the same port; then the node
// bootstraps the new group or the join loop joins it.
func (n *Node) runSwitch(rec switchRecord) {
	ctx := n.bgCtx
	start := time.Now()
	var gr *groupRaft
	err := backoff.Retry(ctx, backoff.New(100*time.Millisecond, 5*time.Second), 0,
		func() error {
			var err error
			gr, err = n.replaceRaft(ctx)
			if errors.Is(err, errNotRunning) || errors.Is(err, errRaftStuck) {
				return backoff.Stop(err)
			}
			return err
		},
		func(err error, next time.Duration) {
			n.log.Error("replacing the group raft failed; retrying", "err", err, "retry_in", next)
		})
	if errors.Is(err, errRaftStuck) {
		// Its goroutines may still write to the raft directory: this
		// process cannot reuse it. The switch is recorded; a restart of
		// the node completes it.
		n.log.Error("the old group raft did not stop; restart this node to complete the group switch", "to", rec.Group)
	}
	if err != nil {
		return
	}
	n.switches.Add(1)
	n.metrics.switches.Inc()
	if rec.Bootstrap {
		if err := n.bootstrapNewGroup(ctx, gr, rec); err != nil {
			// The node stays groupless and the join loop finds it a group.
			// Its fresh Raft may already hold the failed bootstrap's
			// configuration: wipe it again, so that it never joins another
			// group's Raft with a log of its own.
			n.log.Error("bootstrapping the new group failed; joining a group instead", "group", rec.Group, "err", err)
			n.mu.Lock()
			n.groupName = ""
			n.mu.Unlock()
			_ = backoff.Retry(ctx, backoff.New(time.Second, time.Second), 0,
				func() error {
					_, err := n.replaceRaft(ctx)
					if errors.Is(err, errNotRunning) || errors.Is(err, errRaftStuck) {
						return backoff.Stop(err)
					}
					return err
				},
				func(err error, _ time.Duration) { n.log.Error("wiping the group raft failed; retrying", "err", err) })
		}
	}
	n.mu.Lock()
	n.switching = false
	n.mu.Unlock()
	n.log.Info("group raft replaced", "from", rec.From, "to", rec.Group, "reason", rec.Reason,
		"bootstrap", rec.Bootstrap, "took", time.Since(start).Round(time.Millisecond))
	n.dir.refresh()
	n.triggerJoin()
}

// replaceRaft closes the current group Raft, wipes its state and opens a
// fresh one with its leader loop.
func (n *Node) replaceRaft(ctx context.Context) (*groupRaft, error) {
	n.switchMu.Lock()
	if n.raftClosed {
		n.switchMu.Unlock()
		return nil, errNotRunning
	}
	if old := n.curRaft(); old != nil {
		if err := old.close(ctx); err != nil {
			n.log.Warn("closing the old group raft", "err", err)
		}
		if old.unclean {
			n.switchMu.Unlock()
			return nil, errRaftStuck
		}
	}
	n.switchMu.Unlock()
	if h := n.tune.MidSwitchHook; h != nil {
		h(ctx) // tests: a crash here leaves the old group's raft state behind
	}
	n.switchMu.Lock()
	defer n.switchMu.Unlock()
	if n.raftClosed {
		return nil, errNotRunning
	}
	if err := os.RemoveAll(n.raftDir()); err != nil {
		return nil, fmt.Errorf("wiping the old group's raft state: %w", err)
	}
	gr, err := n.openGroupRaft()
	if err != nil {
		return nil, err
	}
	n.gr.Store(gr)
	n.startLeaderLoop(gr)
	return gr, nil
}

// bootstrapNewGroup creates the group a split named, with this node as its
// only member. If an alive node already gossips that name (two splits
// chose it at once), a new name is chosen; the other movers find the group
// through Via (this node).
func (n *Node) bootstrapNewGroup(ctx context.Context, gr *groupRaft, rec switchRecord) error {
	name := rec.Group
	if n.groupAdvertised(name) {
		renamed := n.newGroupName(n.cfg.NodeID)
		n.log.Info("the new group's name is taken; renaming it", "group", name, "new_name", renamed)
		name = renamed
	}
	n.mu.Lock()
	n.groupName = name // establish names the FSM after it
	n.mu.Unlock()
	if err := n.bootstrapSelf(gr); err != nil {
		return err
	}
	if err := n.setJoined(ctx, name); err != nil {
		return err
	}
	n.metrics.joins.Inc()
	n.log.Info("bootstrapped a new group", "group", name, "from", rec.From, "reason", rec.Reason)
	return nil
}

// splitForJoin splits this node's full group to make room for the auto
// joiner j (leader only): see the package comment above. It returns the
// response redirecting the joiner to the new group.
func (n *Node) splitForJoin(ctx context.Context, j fsm.Member) (*groupJoinResp, error) {
	n.memberMu.Lock()
	defer n.memberMu.Unlock()
	// A join that arrives while this leader's split is carried out goes
	// to the split's new group while it has room.
	if r := n.takeIntoSplit(); r != nil {
		n.log.Info("a join arrived while the split is carried out: sent to the new group", "joiner", j.ID, "group", r.Redirect)
		return r, nil
	}
	n.awaitSplits(ctx)
	// Decide on the group sizes Serf shows now, not on the Directory's
	// last snapshot (a mover that just arrived in its new group would be
	// missed, and with it the room there).
	n.dir.refresh()
	if !n.isLeader() {
		return nil, errNotLeader
	}
	gr := n.curRaft()
	plan, redirect, err := n.planSplit(gr, j)
	if plan == nil {
		return redirect, err
	}
	return n.carryOutSplit(ctx, gr, plan, &j)
}

// awaitSplits waits, for at most half an RPC timeout, while a split of
// this node's group is still being carried out (this leader's or
// another's). Joins that arrive meanwhile wait here (a queue, in arrival
// order of memberMu) instead of being refused and retrying: once the
// movers show up in their new group, the join is decided again, by the
// group sizes Serf shows then. Called with memberMu held; it releases it
// while it waits.
func (n *Node) awaitSplits(ctx context.Context) {
	wctx, cancel := context.WithTimeout(ctx, n.tune.RPCTimeout/2)
	defer cancel()
	for n.splitInProgress(n.group()) {
		n.memberMu.Unlock()
		t := time.NewTimer(splitPoll)
		select {
		case <-wctx.Done():
		case <-t.C:
		}
		t.Stop()
		n.memberMu.Lock()
		if wctx.Err() != nil {
			break
		}
	}
}

// splitPlan is a split that planSplit decided: movers leave group for
// the new group name, with the joiner.
type splitPlan struct {
	group, name string
	movers      []string
	maxGroup    int // the group's max_group_size
}

// planSplit decides how gr's group makes room for the joiner j: it
// returns the split, or instead a redirect to a group with room or to
// another leader's split, or the error that refuses the join. Called with
// memberMu held.
func (n *Node) planSplit(gr *groupRaft, j fsm.Member) (*splitPlan, *groupJoinResp, error) {
	f := gr.fsm
	c, ok := f.Config()
	if !ok {
		return nil, nil, fmt.Errorf("%w: group not bootstrapped", rpc.ErrUnavailable)
	}
	m := n.maxGroup(c)
	myGroup := n.group()
	members := f.Members()
	if len(members) < m {
		return nil, nil, fmt.Errorf("%w: group %q has room again", rpc.ErrUnavailable, myGroup)
	}
	if _, ok := f.Member(j.ID); ok {
		return nil, nil, fmt.Errorf("%w: %s is a member already", fs.ErrExist, j.ID)
	}
	if g, via := n.groupWithRoom(myGroup, m); g != "" {
		return nil, &groupJoinResp{Leader: n.cfg.NodeID, Redirect: g, Via: via}, nil
	}
	if g := n.dir.splitterGroup(); g != "" && g != myGroup {
		// Another leader splits (splitterGroup): send the joiner there.
		if via := n.dir.memberOf(g); via != "" {
			return nil, &groupJoinResp{Leader: n.cfg.NodeID, Redirect: g, Via: via}, nil
		}
	}
	if n.splitInProgress(myGroup) {
		return nil, nil, fmt.Errorf("%w: %w: group %q is full and a split is still being carried out", rpc.ErrUnavailable, fsm.ErrGroupFull, myGroup)
	}
	alive := n.serfAutoAlive()
	var cand []string
	for _, mem := range members {
		if mem.Status != fsm.StatusActive || (mem.ID != n.cfg.NodeID && !alive[mem.ID]) {
			return nil, nil, fmt.Errorf("%w: %w: member %s is not an alive auto node", rpc.ErrUnavailable, fsm.ErrGroupFull, mem.ID)
		}
		if mem.ID != n.cfg.NodeID {
			cand = append(cand, mem.ID)
		}
	}
	k := (m+2)/2 - 1 // ⌈(M+1)/2⌉ − 1 members go, with the joiner
	if k < 1 || len(cand) < k {
		return nil, nil, fmt.Errorf("%w: a group of %d cannot split", fsm.ErrGroupFull, len(members))
	}
	slices.Sort(cand)
	movers := cand[len(cand)-k:] // the highest ids
	return &splitPlan{group: myGroup, name: n.newGroupName(movers[0]), movers: movers, maxGroup: m}, nil, nil
}

// carryOutSplit commits the split p through gr, removes the movers from
// gr's Raft and tells those removed, in the background, to switch to the
// new group. It returns the response redirecting the joiner j there (nil
// j: a split of a group above its size, maybeSplit). Called with memberMu
// held.
func (n *Node) carryOutSplit(ctx context.Context, gr *groupRaft, p *splitPlan, j *fsm.Member) (*groupJoinResp, error) {
	joiner := ""
	if j != nil {
		joiner = j.ID
	}
	n.log.Info("splitting the group", "group", p.group, "new_group", p.name, "moving", p.movers, "joiner", joiner, "max_group_size", p.maxGroup)
	res, err := n.applyOn(ctx, gr, fsm.EncodeSplit(p.movers, p.name))
	if err != nil {
		return nil, fmt.Errorf("split command: %w", err)
	}
	removed := n.removeMovers(ctx, p.movers)
	if len(removed) == 0 {
		return nil, fmt.Errorf("%w: split of group %q: no member could leave its raft", rpc.ErrUnavailable, p.group)
	}
	n.reshape.lastMovers = removed
	// The new group: its movers and the joiner, and room for the joiners
	// that arrive while the split is carried out (takeIntoSplit).
	boot := removed[0]
	n.reshape.newGroup, n.reshape.newVia, n.reshape.newSize = p.name, boot, len(removed)
	if j != nil {
		n.reshape.newSize++
	}
	// The movers are told in the background, with the node's context: the
	// joiner's call may end first, and membership changes (memberMu) must
	// not wait for up to k RPC timeouts.
	reqs := make(map[string]*groupSwitchReq, len(removed))
	for _, id := range removed {
		reqs[id] = &groupSwitchReq{Group: p.name, From: p.group, Via: boot, Bootstrap: id == boot, Reason: "split",
			Leader: n.cfg.NodeID, Shards: nonNil(res.MovedOut[id])}
	}
	n.bg.Go(func() {
		for _, id := range removed {
			if err := n.tellSwitch(n.bgCtx, id, reqs[id]); err != nil {
				n.log.Warn("telling a member to switch groups failed", "member", id, "err", err)
			}
		}
	})
	n.splits.Add(1)
	n.metrics.splits.Inc()
	n.log.Info("group split", "group", p.group, "new_group", p.name, "moved", removed, "joiner", joiner, "remaining", gr.fsm.Size())
	n.signalRefresh()
	return &groupJoinResp{Leader: n.cfg.NodeID, Redirect: p.name, Via: boot}, nil
}

// removeMovers removes a split's movers from the group's Raft and returns
// those removed. Only a mover that has left this group's Raft may switch:
// one whose removal failed would stay a voter here while it founds or
// joins the new group. It stays, and reconcile adds it back to the FSM
// once the movedAway grace has passed. Called with memberMu held.
func (n *Node) removeMovers(ctx context.Context, movers []string) []string {
	if n.reshape.movedAway == nil {
		n.reshape.movedAway = map[string]time.Time{}
	}
	now := time.Now()
	n.reshape.last, n.reshape.lastMovers, n.reshape.newGroup = now, nil, ""
	var removed []string
	for _, id := range movers {
		if err := n.removeServer(ctx, id); err != nil {
			n.log.Warn("removing a moved member from raft failed; it stays in the group", "member", id, "err", err)
			continue
		}
		n.reshape.movedAway[id] = now
		removed = append(removed, id)
	}
	return removed
}

// takeIntoSplit returns a redirect to the group this leader's split in
// progress founds, while that group has room for one more joiner, and
// counts the joiner in: a split takes in the joiners that arrive while it
// is carried out, up to max_group_size, without waiting for its movers to
// show up there. nil when there is no such split or no room. Called with
// memberMu held.
func (n *Node) takeIntoSplit() *groupJoinResp {
	rs := &n.reshape
	f := n.groupFSM()
	if rs.newGroup == "" || f == nil || !n.isLeader() || !n.splitInProgress(n.group()) {
		return nil
	}
	c, ok := f.Config()
	if !ok || rs.newSize >= n.maxGroup(c) {
		return nil
	}
	rs.newSize++
	return &groupJoinResp{Leader: n.cfg.NodeID, Redirect: rs.newGroup, Via: rs.newVia}
}

// splitPoll is how often a join waiting for a split to finish checks.
const splitPoll = 100 * time.Millisecond

// splitInProgress reports whether a split is still being carried out:
// Serf shows an alive node moving between groups (this leader's split or
// another's: the new group it founds or joins will have room), or one of
// the movers of this leader's last split (less than MergeSettle/2 ago)
// does not show as a member of another group yet. A split decided before
// then would not see the room the new groups have, and splits decided by
// several leaders at once would found more groups than the cluster needs.
// Called with memberMu held.
func (n *Node) splitInProgress(myGroup string) bool {
	s := n.serfAgent()
	if s == nil {
		return false
	}
	arrived := map[string]bool{}
	for _, m := range s.Members() {
		if m.Status != serf.StatusAlive || m.Tags[tagRole] != roleGHBA {
			continue
		}
		if m.Tags[tagMoving] == "1" {
			return true
		}
		if g := m.Tags[tagGroup]; g != "" && g != myGroup {
			arrived[m.Name] = true
		}
	}
	if time.Since(n.reshape.last) >= n.tune.MergeSettle/2 {
		return false
	}
	for _, id := range n.reshape.lastMovers {
		if !arrived[id] {
			return true
		}
	}
	return false
}

// memberOf returns an alive member of group g that is not leaving, or "".
func (d *directory) memberOf(g string) string {
	for _, p := range d.Peers() {
		if p.Group == g && p.Up && !p.Leaving {
			return p.ID
		}
	}
	return ""
}

// groupWithRoom returns another group than myGroup that Serf shows below
// maxSize (the smallest; ties by name) and one of its alive members to
// reach it through, or "".
func (n *Node) groupWithRoom(myGroup string, maxSize int) (group, via string) {
	best := -1
	for g, k := range n.dir.groupSizes() {
		if g == myGroup || k >= maxSize || (best >= 0 && (k > best || k == best && g > group)) {
			continue
		}
		if m := n.dir.memberOf(g); m != "" {
			group, via, best = g, m, k
		}
	}
	return group, via
}

// tellSwitch sends req to node id, retrying briefly.
func (n *Node) tellSwitch(ctx context.Context, id string, req *groupSwitchReq) error {
	if h := n.tune.TellSwitchHook; h != nil {
		if err := h(id); err != nil {
			return err
		}
	}
	ctx, cancel := context.WithTimeout(ctx, n.tune.RPCTimeout)
	defer cancel()
	return backoff.Retry(ctx, backoff.New(100*time.Millisecond, 100*time.Millisecond), 0, func() error {
		addr := n.dir.rpcAddrOf(id)
		if addr == "" {
			return fmt.Errorf("%w: no rpc address for %s", rpc.ErrUnavailable, id)
		}
		return n.client.Call(ctx, addr, methodGroupSwitch, req, &groupSwitchResp{})
	}, nil)
}

// serfAutoAlive returns the auto nodes Serf shows alive, not leaving and
// not moving.
func (n *Node) serfAutoAlive() map[string]bool {
	out := map[string]bool{}
	s := n.serfAgent()
	if s == nil {
		return out
	}
	for _, m := range s.Members() {
		if m.Tags[tagRole] == roleGHBA && m.Status == serf.StatusAlive && m.Tags[tagAuto] == "1" &&
			m.Tags[tagLeaving] != "1" && m.Tags[tagMoving] != "1" {
			out[m.Name] = true
		}
	}
	return out
}

// maybeMerge merges this leader's group into another one when the rule
// says so (leader only, from the leader routine after each reconcile):
//
//   - every member of both groups is an alive auto node, no node anywhere is
//     moving or groupless (a switch or join in progress), no member is
//     failed or leaving;
//   - together they have at most M members, and this group is the smaller
//     one (ties: the one with the greater name moves), so that only one
//     side acts;
//   - anti-flap: this group's members have not changed for mergeSettle
//     (total ≤ M−1) or for mergeQuiet (total == M: one join would split it
//     again; but only mergeSettle when either group has fewer members
//     than R, whose shards then lack copies), and this leader did not
//     split or merge within mergeSettle.
//     A split leaves M+1 members in the two halves, which never merge
//     back unless a node leaves.
func (n *Node) maybeMerge(ctx context.Context, gr *groupRaft) {
	if n.cfg.Group != GroupAuto || !n.isLeader() || n.leaving.Load() || ctx.Err() != nil {
		return
	}
	c, ok := gr.fsm.Config()
	if !ok {
		return
	}
	maxSize := n.maxGroup(c)
	myGroup := n.group()
	n.memberMu.Lock()
	defer n.memberMu.Unlock()
	members := gr.fsm.Members()
	var sig strings.Builder
	for _, m := range members {
		sig.WriteString(m.ID + "=" + string(m.Status) + ",")
	}
	now := time.Now()
	if sig.String() != n.reshape.sig {
		n.reshape.sig, n.reshape.stableSince = sig.String(), now
	}
	if n.reshape.merging || now.Sub(n.reshape.last) < n.tune.MergeSettle || now.Sub(n.reshape.stableSince) < n.tune.MergeSettle {
		return
	}
	s := n.serfAgent()
	if s == nil {
		return
	}
	alive := n.serfAutoAlive()
	for _, m := range members {
		if m.Status != fsm.StatusActive || (m.ID != n.cfg.NodeID && !alive[m.ID]) {
			return
		}
	}
	sizes, healthy := map[string]int{}, map[string]bool{}
	via := map[string]string{}
	for _, m := range s.Members() {
		if m.Tags[tagRole] != roleGHBA || m.Status == serf.StatusLeft || m.Name == n.cfg.NodeID {
			continue
		}
		g := m.Tags[tagGroup]
		if m.Status == serf.StatusAlive && (g == "" || m.Tags[tagMoving] == "1") {
			return // a join or a switch is in progress somewhere
		}
		if g == "" || g == myGroup {
			continue
		}
		if _, seen := healthy[g]; !seen {
			healthy[g] = true
		}
		sizes[g]++
		if !alive[m.Name] {
			healthy[g] = false
		}
		if v := via[g]; v == "" || m.Name < v {
			via[g] = m.Name
		}
	}
	mine := len(members)
	target := ""
	for g, k := range sizes {
		if !healthy[g] || mine+k > maxSize || mine > k || (mine == k && myGroup < g) {
			continue
		}
		// A group with fewer members than R keeps its shards with fewer
		// copies than asked (a single member: one copy, lost with its
		// disk): it merges without the long quiet period, durability
		// before anti-flap.
		under := mine < c.ReplicationFactor() || k < c.ReplicationFactor()
		if mine+k == maxSize && !under && now.Sub(n.reshape.stableSince) < n.tune.MergeQuiet {
			continue
		}
		if target == "" || k > sizes[target] || (k == sizes[target] && g < target) {
			target = g
		}
	}
	if target == "" {
		return
	}
	n.reshape.merging, n.reshape.last, n.reshape.lastMovers, n.reshape.newGroup = true, now, nil, ""
	var others []string
	for _, m := range members {
		if m.ID != n.cfg.NodeID {
			others = append(others, m.ID)
		}
	}
	n.log.Info("merging the group into another", "group", myGroup, "into", target, "members", mine,
		"target_members", sizes[target], "max_group_size", maxSize)
	n.merges.Add(1)
	n.metrics.merges.Inc()
	// Carried out in the background: the followers' switches end this
	// leadership (and the leader routine) before this node switches too.
	if !n.bg.Go(func() { n.runMerge(myGroup, target, via[target], others) }) {
		n.reshape.merging = false // shutting down
	}
}

// runMerge tells the other members, then this node, to switch to group
// target.
func (n *Node) runMerge(myGroup, target, via string, others []string) {
	defer func() {
		n.memberMu.Lock()
		n.reshape.merging = false
		n.memberMu.Unlock()
	}()
	ctx := n.bgCtx
	for _, id := range others {
		req := &groupSwitchReq{Group: target, From: myGroup, Via: via, Reason: "merge", Leader: n.cfg.NodeID,
			Shards: nonNil(n.groupFSM().OwnedBy(id))}
		if err := n.tellSwitch(ctx, id, req); err != nil {
			n.log.Warn("telling a member to switch groups failed", "member", id, "err", err)
		}
	}
	if ctx.Err() != nil {
		return
	}
	rec := switchRecord{Group: target, From: myGroup, Via: via, Reason: "merge", Shards: nonNil(n.groupFSM().OwnedBy(n.cfg.NodeID))}
	if err := n.beginSwitch(ctx, rec); err != nil {
		n.log.Error("switching to the merged group failed", "into", target, "err", err)
		return
	}
	n.log.Info("group merged", "group", myGroup, "into", target, "moved", append(others, n.cfg.NodeID))
}

// checkOrphaned runs on the refresher's tick. An auto node that is a
// member of a group without a leader, whose other Raft voters are all
// alive in one other group (they merged away without it), switches to
// that group instead of waiting for a quorum that cannot come back.
func (n *Node) checkOrphaned() {
	if n.cfg.Group != GroupAuto || n.leaving.Load() {
		n.orphanSince = time.Time{}
		return
	}
	n.mu.Lock()
	joined, g, busy := n.joined, n.groupName, n.switching || n.pendingSwitch != nil
	n.mu.Unlock()
	if !joined || busy || n.leaderID() != "" {
		n.orphanSince = time.Time{}
		return
	}
	ctx, cancel := context.WithTimeout(n.bgCtx, time.Second)
	servers, err := n.raftServers(ctx)
	cancel()
	s := n.serfAgent()
	if err != nil || s == nil {
		return
	}
	where := map[string]string{} // voter → the group it gossips
	for _, m := range s.Members() {
		if _, ok := servers[m.Name]; ok && m.Name != n.cfg.NodeID && m.Status == serf.StatusAlive && m.Tags[tagMoving] != "1" {
			where[m.Name] = m.Tags[tagGroup]
		}
	}
	target, via := "", ""
	for id := range servers {
		if id == n.cfg.NodeID {
			continue
		}
		grp, ok := where[id]
		if !ok || grp == "" || grp == g || target != "" && grp != target {
			n.orphanSince = time.Time{} // a voter is down, still here, or split between groups
			return
		}
		target, via = grp, id
	}
	if target == "" {
		return // a group of one elects itself
	}
	if n.orphanSince.IsZero() {
		n.orphanSince = time.Now()
		return
	}
	if time.Since(n.orphanSince) < n.tune.OrphanTimeout {
		return
	}
	n.orphanSince = time.Time{}
	n.log.Warn("every other voter of the group moved to another group; following them", "group", g, "to", target)
	ctx, cancel = context.WithTimeout(n.bgCtx, 10*time.Second)
	defer cancel()
	rec := switchRecord{Group: target, From: g, Via: via, Reason: "orphaned", Shards: nonNil(n.groupFSM().OwnedBy(n.cfg.NodeID))}
	if err := n.beginSwitch(ctx, rec); err != nil {
		n.log.Warn("following the group's members failed", "to", target, "err", err)
	}
}

// nonNil returns s, or an empty slice for nil (a list that says "none",
// not "not given").
func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
