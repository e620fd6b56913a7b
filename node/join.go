package node

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/ghba/ghba/fsm"
	"github.com/ghba/ghba/node/internal/backoff"
	"github.com/ghba/ghba/node/namespace"
	"github.com/ghba/ghba/node/store"
	"github.com/ghba/ghba/rpc"
	"github.com/hashicorp/raft"
)

// Joining: the Serf pool (retry_join, ghba join) and a group (the group join
// loop, and the leader side of joins and leaves).

// leaveGroup takes this node out of its group: leadership is transferred
// if it leads, then the leader removes it from the FSM (its replicas go to
// the other members) and from Raft. A group of one just forgets it.
func (n *Node) leaveGroup(ctx context.Context) error {
	servers, err := n.raftServers(ctx)
	if err != nil {
		return err
	}
	others := 0
	for id, s := range servers {
		if id != n.cfg.NodeID && s.Suffrage == raft.Voter {
			others++
		}
	}
	if others == 0 {
		n.log.Info("last member of the group; leaving it empty", "group", n.group())
		return nil
	}
	err = backoff.Retry(ctx, backoff.New(50*time.Millisecond, 2*time.Second), 0,
		func() error { return n.requestLeave(ctx) },
		func(err error, next time.Duration) {
			n.log.Warn("leaving the group failed; retrying", "err", err, "retry_in", next)
		})
	if err != nil {
		return err
	}
	n.log.Info("left the group", "group", n.group())
	return nil
}

// requestLeave makes one attempt at having the leader remove this node.
func (n *Node) requestLeave(ctx context.Context) error {
	if r := n.raftNode(); r.State() == raft.Leader {
		n.log.Info("transferring leadership before leaving")
		if err := waitFuture(ctx, r.LeadershipTransfer()); err != nil {
			return fmt.Errorf("leadership transfer: %w", err)
		}
	}
	return n.callLeader(ctx, methodGroupLeave, &groupLeaveReq{ID: n.cfg.NodeID, leaderOnly: leaderOnly{Group: n.group()}}, &groupLeaveResp{})
}

// callLeader sends method to the group's leader (another node).
func (n *Node) callLeader(ctx context.Context, method string, req, resp any) error {
	leader := n.leaderID()
	if leader == "" || leader == n.cfg.NodeID {
		return fmt.Errorf("%w: no other leader yet", rpc.ErrUnavailable)
	}
	addr := n.dir.rpcAddrOf(leader)
	if addr == "" {
		return fmt.Errorf("%w: no rpc address for leader %s", rpc.ErrUnavailable, leader)
	}
	cctx, cancel := context.WithTimeout(ctx, n.tune.RPCTimeout)
	defer cancel()
	return n.client.Call(cctx, addr, method, req, resp)
}

// groupJoinLoop makes this node a member of a group, unless it is one: it
// picks the group (its configured one, or with "auto" the one with the
// fewest members below max_group_size, as Serf shows them) and asks that
// group's leader, through any member, to add it. It retries with backoff
// until it succeeds or the node stops; Serf joins wake it up.
func (n *Node) groupJoinLoop() {
	ctx := n.bgCtx
	wait := backoff.New(n.tune.GroupJoinMin, n.tune.GroupJoinMax)
	redirects := 0
	for {
		moved := n.isJoined() && n.addressMoved()
		if n.isJoined() && !moved || n.leaving.Load() {
			select {
			case <-ctx.Done():
				return
			case <-n.joinCh:
				continue
			}
		}
		var err error
		if moved {
			err = n.readdress(ctx)
		} else {
			err = n.joinGroupOnce(ctx)
		}
		if err == nil && moved {
			// The group's leader dials the new address now; the
			// configuration it sends next tells this node so.
			t := time.NewTimer(wait.Current())
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			continue
		}
		if err == nil {
			wait.Reset()
			redirects = 0
			continue
		}
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, errRedirected) && redirects < maxRedirects {
			redirects++
			continue
		}
		redirects = 0
		d := wait.Current()
		n.log.Info("waiting to join a group", "reason", err, "retry_in", d)
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-n.joinCh:
			// A Serf event may have made a group visible: retry now,
			// without growing the back-off (a burst of events at start-up
			// would otherwise push it to the maximum at once).
			t.Stop()
		case <-t.C:
			wait.Next() // the next wait is longer
		}
	}
}

// addressMoved reports whether this node's group records it at other
// addresses than it has now: it restarted with its data directory at a new
// address (a container or pod with a new IP), and the group's Raft and its
// shards' Rafts still dial the old one.
// It reads the group Raft's configuration, which a restarted node has from
// its log at once (its FSM applies the log only once a leader reaches it).
func (n *Node) addressMoved() bool {
	r := n.raftNode()
	if r == nil {
		return false
	}
	f := r.GetConfiguration()
	if f.Error() != nil {
		return false
	}
	self := n.selfMember().RaftAddr
	for _, s := range f.Configuration().Servers {
		if string(s.ID) == n.cfg.NodeID {
			return string(s.Address) != self
		}
	}
	return false
}

// readdress tells the group's leader, through any member of the group,
// this node's new addresses: the join of a member refreshes its record
// (fsm AddMember), its group Raft server (ensureVoter) and, through the
// placement the group's leader sends, its shard replicas' Raft servers
// (convergeOnce).
func (n *Node) readdress(ctx context.Context) error {
	group := n.group()
	addrs := n.dir.groupRPCAddrs(group)
	if len(addrs) == 0 {
		return fmt.Errorf("%w: no alive member of group %q", errNoGroup, group)
	}
	req, err := n.joinRequest(ctx, group, false)
	if err != nil {
		return err
	}
	if _, err := n.askGroup(ctx, addrs, req); err != nil {
		return fmt.Errorf("telling group %q the new addresses: %w", group, err)
	}
	n.log.Info("told the group this node's new addresses", "group", group, "raft", req.Member.RaftAddr, "rpc", req.Member.RPCAddr)
	return nil
}

// askGroup sends join request req to the members of a group at addrs in
// turn (any member forwards it to the group's leader) and returns the
// first answer.
func (n *Node) askGroup(ctx context.Context, addrs []string, req *groupJoinReq) (*groupJoinResp, error) {
	var errs []error
	for _, addr := range addrs {
		cctx, cancel := context.WithTimeout(ctx, n.tune.RPCTimeout)
		var resp groupJoinResp
		err := n.client.Call(cctx, addr, methodGroupJoin, req, &resp)
		cancel()
		if err == nil {
			return &resp, nil
		}
		errs = append(errs, fmt.Errorf("via %s: %w", addr, err))
		if ctx.Err() != nil {
			break
		}
	}
	return nil, errors.Join(errs...)
}

// triggerJoin wakes the group join loop.
func (n *Node) triggerJoin() {
	select {
	case n.joinCh <- struct{}{}:
	default:
	}
}

// errNoGroup reports that no group to join is visible yet.
var errNoGroup = errors.New("no group visible in serf yet")

// errRedirected reports a join that the asked group's leader redirected to
// another group (a new group a split founded, or a group with room): the
// join loop tries that group at once.
var errRedirected = fmt.Errorf("%w: redirected", errNoGroup)

// maxRedirects bounds the redirects the join loop follows without its
// back-off.
const maxRedirects = 3

// spentHintPause is about how long a joiner whose hint is spent waits
// before it chooses a group again (between half and one and a half times
// it).
const spentHintPause = 500 * time.Millisecond

// errSwitching reports a join attempt while the node replaces its Raft.
var errSwitching = errors.New("switching groups")

// joinGroupOnce makes one attempt at joining a group.
func (n *Node) joinGroupOnce(ctx context.Context) error {
	n.mu.Lock()
	switching := n.switching
	n.mu.Unlock()
	if switching {
		return errSwitching
	}
	target := n.cfg.Group
	auto := target == GroupAuto
	if auto {
		target = ""
		if h, ok := n.activeHint(); ok {
			var spent bool
			switch target, spent = n.dir.hintTarget(h, n.joinMaxGroup()); {
			case spent:
				// Choose again like any auto node, after a short pause
				// with jitter: a split elsewhere may be founding a group
				// with room that gossip shows only in a moment (choosing
				// at once would make another leader split too, founding
				// more groups than needed).
				n.log.Info("the group a split or switch named is full; choosing a group like any auto node", "group", h.group, "via", h.via)
				n.setHint(joinHint{})
				t := time.NewTimer(spentHintPause/2 + rand.N(spentHintPause))
				select {
				case <-ctx.Done():
					t.Stop()
					return ctx.Err()
				case <-t.C:
				}
				n.dir.refresh()
				target = n.dir.pickGroup(n.joinMaxGroup())
			case target == "":
				return fmt.Errorf("%w: waiting for group %q (via %s)", errNoGroup, h.group, h.via)
			}
		} else {
			target = n.dir.pickGroup(n.joinMaxGroup())
		}
		if target == "" {
			return errNoGroup
		}
	}
	addrs := n.dir.groupRPCAddrs(target)
	if len(addrs) == 0 {
		return fmt.Errorf("%w: no alive member of group %q", errNoGroup, target)
	}
	req, err := n.joinRequest(ctx, target, auto)
	if err != nil {
		return err
	}
	resp, err := n.askGroup(ctx, addrs, req)
	if err != nil {
		return fmt.Errorf("joining group %q: %w", target, err)
	}
	if resp.Refused != "" {
		err := fmt.Errorf("%w: %s", ErrSchemeMismatch, resp.Refused)
		n.fail(err)
		return err
	}
	if resp.Redirect != "" {
		n.log.Info("the full group's leader redirected the join", "group", resp.Redirect, "via", resp.Via, "leader", resp.Leader)
		n.setHint(joinHint{group: resp.Redirect, via: resp.Via, from: target, until: time.Now().Add(n.tune.SwitchHintTimeout)})
		return fmt.Errorf("%w: redirected to group %q", errRedirected, resp.Redirect)
	}
	if resp.Group == "" {
		return fmt.Errorf("%w: empty answer", errNoGroup)
	}
	if err := n.settleOwnShard(ctx, resp.Created); err != nil {
		return err
	}
	if err := n.dropCarry(ctx); err != nil { // the group's FSM has them now
		return err
	}
	if err := n.setJoined(ctx, resp.Group); err != nil {
		return err
	}
	n.metrics.joins.Inc()
	n.log.Info("joined group", "group", resp.Group, "leader", resp.Leader)
	return nil
}

// joinRequest builds the request of a join attempt to group target: this
// node, the shards it brings (recording its intent to create its own, see
// joinShards) and the incarnation of its data directory, which tells the
// leader whether an earlier attempt, whose answer was lost, created them.
func (n *Node) joinRequest(ctx context.Context, target string, auto bool) (*groupJoinReq, error) {
	shards, creates, err := n.joinShards(ctx)
	if err != nil {
		return nil, err
	}
	return &groupJoinReq{leaderOnly: leaderOnly{Group: target}, Auto: auto, Member: n.selfMember(),
		Shards: shards, Creates: creates, Incarnation: n.incarnation, Scheme: namespace.WireScheme(n.cfg.Scheme)}, nil
}

// Join joins the Serf pool through the given Serf addresses (host:port) and
// returns how many were contacted. It is what retry_join and `ghba join`
// do. Group membership follows by itself (see the join loop).
func (n *Node) Join(ctx context.Context, serfAddrs []string) (int, error) {
	if len(serfAddrs) == 0 {
		return 0, errors.New("join: no addresses")
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	s := n.serfAgent()
	if s == nil {
		return 0, errNotRunning
	}
	type result struct {
		n   int
		err error
	}
	ch := make(chan result, 1)
	if !n.joins.Go(func() { // serf.Join has no context; bound it by ctx
		k, err := s.Join(serfAddrs, true)
		ch <- result{k, err}
	}) {
		return 0, errNotRunning
	}
	select {
	case r := <-ch:
		if r.err != nil && r.n == 0 {
			return 0, fmt.Errorf("join %v: %w", serfAddrs, r.err)
		}
		if r.err != nil {
			n.log.Warn("joined some addresses only", "joined", r.n, "addrs", serfAddrs, "err", r.err)
		}
		n.log.Info("joined the serf pool", "joined", r.n, "addrs", serfAddrs)
		n.dir.refresh()
		n.triggerJoin()
		return r.n, nil
	case <-ctx.Done():
		return 0, fmt.Errorf("join %v: %w", serfAddrs, ctx.Err())
	}
}

// retryJoin joins the retry_join addresses with bounded retries and
// exponential backoff, logging every failure.
func (n *Node) retryJoin(ctx context.Context) {
	addrs := n.cfg.RetryJoin
	attempt := 0
	err := backoff.Retry(ctx, backoff.New(n.tune.RetryJoinMin, n.tune.RetryJoinMax), n.tune.RetryJoinAttempts,
		func() error {
			attempt++
			k, err := n.Join(ctx, addrs)
			if err == nil && k == 0 {
				err = errors.New("no address answered")
			}
			return err
		},
		func(err error, next time.Duration) {
			n.log.Warn("retry_join failed; retrying", "addrs", addrs, "attempt", attempt, "retry_in", next, "err", err)
		})
	if err != nil && ctx.Err() == nil {
		n.log.Error("retry_join gave up; use `ghba join`", "addrs", addrs, "attempts", attempt, "err", err)
	}
}

// forward decides where a request that only a group's leader serves
// runs, as Nomad's forward does: it refuses a request for a group this
// node is not a member of; on the established leader it reports handled
// false and the caller serves the request; on any other member it sends
// the request to the leader, once (a request that was already forwarded is
// refused, so two members never bounce it between them), and returns the
// leader's answer.
func forward[Req, Resp any, PReq interface {
	*Req
	header() *leaderOnly
}](ctx context.Context, n *Node, method string, req PReq) (resp *Resp, handled bool, err error) {
	h := req.header()
	if !n.isJoined() || h.Group != n.group() {
		return nil, true, fmt.Errorf("%w: node %s is not a member of group %q", rpc.ErrUnavailable, n.cfg.NodeID, h.Group)
	}
	if n.isLeader() {
		return nil, false, nil
	}
	if h.Forwarded {
		return nil, true, errNotLeader
	}
	leader := n.leaderID()
	if leader == "" || leader == n.cfg.NodeID {
		return nil, true, fmt.Errorf("%w: group %q has no established leader", rpc.ErrUnavailable, n.group())
	}
	addr := n.dir.rpcAddrOf(leader)
	if addr == "" {
		return nil, true, fmt.Errorf("%w: no rpc address for leader %s", rpc.ErrUnavailable, leader)
	}
	fwd := *(*Req)(req)
	PReq(&fwd).header().Forwarded = true
	resp = new(Resp)
	if err := n.client.Call(ctx, addr, method, PReq(&fwd), resp); err != nil {
		return nil, true, err
	}
	return resp, true, nil
}

// handleGroupJoin adds the requester to this node's group: on the leader
// directly, elsewhere by forwarding to the leader once.
func (n *Node) handleGroupJoin(ctx context.Context, req *groupJoinReq) (*groupJoinResp, error) {
	if req.Member.ID == "" || req.Member.RaftAddr == "" {
		return nil, fmt.Errorf("%w: join: member id and raft address are required", fs.ErrInvalid)
	}
	if resp, handled, err := forward[groupJoinReq, groupJoinResp](ctx, n, methodGroupJoin, req); handled {
		return resp, err
	}
	if req.Scheme != "" && !namespace.SchemesAgree(req.Scheme, n.cfg.Scheme) {
		n.log.Warn("join refused: the joiner's routing scheme is not the group's", "joiner", req.Member.ID,
			"joiner_scheme", req.Scheme, "scheme", n.cfg.Scheme)
		want := namespace.WireScheme(n.cfg.Scheme)
		return &groupJoinResp{Leader: n.cfg.NodeID, Scheme: want,
			Refused: fmt.Sprintf("node %s routes with scheme %q but group %q (leader %s) with %q; every node of a group must set the same scheme: set scheme: %s in its config",
				req.Member.ID, req.Scheme, n.group(), n.cfg.NodeID, n.cfg.Scheme, want)}, nil
	}
	shards := req.Shards
	if shards == nil { // a joiner of a build before replicated shards
		shards = []string{req.Member.ID}
	}
	if g, via, s := n.shardElsewhere(shards); req.Creates && g != "" {
		// A node whose data directory was wiped brings the shard named
		// after it, which lives on in another group (an auto node may
		// pick another group with room): it must rejoin that shard's
		// Raft group there, never found a second one here.
		if !req.Auto {
			return nil, fmt.Errorf("%w: join: shard %s of %s belongs to group %q", fs.ErrExist, s, req.Member.ID, g)
		}
		n.log.Info("join redirected to the group of the joiner's shard", "joiner", req.Member.ID, "shard", s, "group", g, "via", via)
		return &groupJoinResp{Leader: n.cfg.NodeID, Redirect: g, Via: via}, nil
	}
	var created []string
	var err error
	if req.Auto && n.groupFullForAuto(req.Member.ID) {
		err = fmt.Errorf("%w: group %q has as many members as the size its leader chose", fsm.ErrGroupFull, n.group())
	} else {
		created, err = n.addMember(ctx, req.Member, shards, req.Incarnation)
	}
	if err != nil {
		if req.Auto && n.cfg.Group == GroupAuto && errors.Is(err, fsm.ErrGroupFull) {
			resp, serr := n.splitForJoin(ctx, req.Member)
			if serr == nil {
				return resp, nil
			}
			n.log.Info("full group not split", "joiner", req.Member.ID, "reason", serr)
		}
		return nil, err
	}
	n.log.Info("node joined the group", "member", req.Member.ID, "group", n.group(), "auto", req.Auto, "shards", shards,
		"created", created, "incarnation", req.Incarnation)
	n.signalRefresh()
	return &groupJoinResp{Group: n.group(), Leader: n.cfg.NodeID, Created: created}, nil
}

// shardElsewhere returns the group (and a member of it to ask) of the
// first of shards that this group's FSM does not know but the Directory
// places in another group; "" when none is.
func (n *Node) shardElsewhere(shards []string) (group, via, shard string) {
	f := n.groupFSM()
	if f == nil {
		return "", "", ""
	}
	for _, s := range shards {
		if _, ok := f.Shard(s); ok {
			continue
		}
		info, ok := n.dir.shard(s)
		if !ok || info.Group == "" || info.Group == n.group() {
			continue
		}
		via = info.Leader
		if via == "" && len(info.Hosts) > 0 {
			via = info.Hosts[0]
		}
		return info.Group, via, s
	}
	return "", "", ""
}

// handleGroupLeave removes the requester from this node's group.
func (n *Node) handleGroupLeave(ctx context.Context, req *groupLeaveReq) (*groupLeaveResp, error) {
	if resp, handled, err := forward[groupLeaveReq, groupLeaveResp](ctx, n, methodGroupLeave, req); handled {
		return resp, err
	}
	if req.Prepare {
		if err := n.markLeaving(ctx, req.ID); err != nil {
			return nil, err
		}
		n.log.Info("member leaving: its shard replicas go to other members", "member", req.ID)
		n.signalRefresh()
		return &groupLeaveResp{}, nil
	}
	if err := n.removeMember(ctx, req.ID); err != nil {
		return nil, err
	}
	n.log.Info("node left the group", "member", req.ID, "group", n.group())
	n.signalRefresh()
	return &groupLeaveResp{}, nil
}

// joinShards returns the shards this node brings to the group it joins:
// the shards it owns after a split or merge (its switch record), or, on
// its very first join, the shard it creates, named after it (creates is
// then true). A node creates its shard only if no node hosts a shard of
// that name: a node whose data dir was wiped rejoins its old shard instead
// of creating a second one (and the leader checks it too, see
// shardElsewhere: gossip may not have told the joiner yet).
func (n *Node) joinShards(ctx context.Context) (shards []string, creates bool, err error) {
	n.mu.Lock()
	carry := n.carry
	n.mu.Unlock()
	if carry != nil {
		return carry, false, nil
	}
	switch c, err := n.getMeta(ctx, metaShardCarry); {
	case err != nil:
		return nil, false, err
	case c != "":
		return strings.Split(c, ","), false, nil
	}
	create, err := n.getMeta(ctx, metaShardCreate)
	if err != nil {
		return nil, false, err
	}
	if create != "" {
		return []string{create}, true, nil
	}
	created, err := n.getMeta(ctx, metaShardCreated)
	if err != nil {
		return nil, false, err
	}
	own := n.cfg.NodeID
	if created != "" || n.shards.get(own) != nil || n.dir.shardKnown(own) {
		return []string{}, false, nil
	}
	if err := n.store.SetMeta(ctx, metaShardCreate, []byte(own)); err != nil {
		return nil, false, fmt.Errorf("node: recording the shard to create: %w", err)
	}
	return []string{own}, true, nil
}

// dropCarry forgets the shards a group switch carried, once the new
// group's FSM has them.
func (n *Node) dropCarry(ctx context.Context) error {
	n.mu.Lock()
	n.carry = nil
	n.mu.Unlock()
	var b store.Batch
	b.DeleteMeta(metaShardCarry)
	if err := n.store.Commit(ctx, &b); err != nil {
		return fmt.Errorf("node: dropping the carried shards: %w", err)
	}
	return nil
}

// settleOwnShard ends this node's intent to create its shard once it
// joined: the shard host loop bootstraps it if the join created it (the
// leader reports a shard as created also when an earlier attempt of this
// data directory, whose answer was lost, added it: see createdBy);
// otherwise (another data directory created it) the intent is dropped, so
// that this node never bootstraps a second Raft group for an existing
// shard.
func (n *Node) settleOwnShard(ctx context.Context, created []string) error {
	create, err := n.getMeta(ctx, metaShardCreate)
	if err != nil || create == "" || slices.Contains(created, create) {
		return err
	}
	var b store.Batch
	b.DeleteMeta(metaShardCreate)
	if err := n.store.Commit(ctx, &b); err != nil {
		return fmt.Errorf("node: dropping the shard to create: %w", err)
	}
	n.log.Info("the shard named after this node exists already: joining it, not creating it", "shard", create)
	return nil
}
