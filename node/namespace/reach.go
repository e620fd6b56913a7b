package namespace

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"time"

	"github.com/ghba/ghba/node/internal/backoff"

	"github.com/ghba/ghba/rpc"
)

// Reaching shards. Every request to a shard goes through callShard, and
// every operation that must run at a path's shard (or at its parent
// directory's shard) through atHome: they are the one place that decides
// how a shard's leader is found and called. On the other side, shardRPC
// serves a request for a shard this node leads, and answers
// rpc.NotLeaderError (with the leader it knows) for any other.

const (
	// maxRelocate bounds how often an entry node looks a home up again
	// after being told "not the home" (a concurrent rename moved it).
	maxRelocate = 4
	// maxRedirects bounds how often callShard follows "not the leader".
	maxRedirects = 3
)

// errNoLeader matches errShardDown's errors.
var errNoLeader = errors.New("no reachable leader")

// errNotSent matches the errors of a call that never left this node (the
// node asked is down, or no connection to it could be made).
var errNotSent = errors.New("not sent")

// errShardDown reports a shard whose leader is not known or not up.
func errShardDown(shard string) error {
	return fmt.Errorf("%w: shard %s has %w", rpc.ErrUnavailable, shard, errNoLeader)
}

// errMoved is returned when a home could not be pinned down after several
// attempts (paths moving under heavy concurrent renames).
func errMoved(p string) error {
	return fmt.Errorf("%w: %s keeps moving; try again", rpc.ErrUnavailable, p)
}

// isUnavailable reports whether err means a shard could not be reached or
// could not answer (as opposed to an authoritative answer).
func isUnavailable(err error) bool {
	return errors.Is(err, rpc.ErrUnavailable) || errors.Is(err, rpc.ErrShuttingDown)
}

// asUnavailable makes sure err matches rpc.ErrUnavailable (a failed call
// to a shard that had to answer, whatever the reason).
func asUnavailable(err error) error {
	if isUnavailable(err) {
		return err
	}
	return fmt.Errorf("%w: %w", rpc.ErrUnavailable, err)
}

// call sends method to node id (an RPC to exactly that node). A node the
// Directory marks down, or does not know, answers rpc.ErrUnavailable at
// once.
func (n *Namespace) call(ctx context.Context, id, method string, req, resp any) error {
	p := n.peer(id)
	if p == nil || !p.Up || p.RPCAddr == "" {
		return fmt.Errorf("%w: node %s is down: %w", rpc.ErrUnavailable, id, errNotSent)
	}
	err := n.cl.Call(ctx, p.RPCAddr, method, req, resp)
	if errors.Is(err, rpc.ErrUnavailable) && !errors.Is(err, rpc.ErrOutcomeUnknown) && !errors.Is(err, rpc.ErrRemote) {
		return fmt.Errorf("%w: %w", err, errNotSent) // (no connection: the request never left)
	}
	return err
}

// shardCall is the request header every shard request embeds.
type shardCall[Req any] interface {
	*Req
	header() *shardReq
}

// callShard runs a request at shard's leader: local, the method's handler,
// when this node leads the shard (no RPC, no encoding), an RPC to the
// leader it knows otherwise, following "not the leader" answers to the
// leader they name (at most maxRedirects times in a row, remembering the
// hint). While the shard has no reachable leader (an election, a dead
// leader that Serf has not marked down yet) and a live replica may take
// over, it waits, at most Tuning.LeaderWait, and tries again: only
// failures that applied nothing (see retryable) are retried.
func callShard[Req, Resp any, PR shardCall[Req]](ctx context.Context, n *Namespace, shard, method string, req PR,
	local func(*home, context.Context, *Req) (*Resp, error)) (*Resp, error) {
	var wait *backoff.Backoff
	var deadline time.Time
	for {
		resp, err := callShardOnce(ctx, n, shard, method, req, local)
		if err == nil || !retryable(err) || !n.leads(shard) && !n.shardUp(shard) && !n.canFailOver(shard) {
			return resp, err
		}
		if wait == nil {
			wait = backoff.NewJitter(10*time.Millisecond, 250*time.Millisecond)
			deadline = time.Now().Add(n.tune.LeaderWait)
		}
		if time.Now().After(deadline) {
			return nil, err
		}
		n.counters.leaderWaits.Add(1)
		if werr := wait.Wait(ctx); werr != nil {
			return nil, err
		}
	}
}

// callShardOnce is one attempt of callShard. When this node knows no live
// leader of the shard (or the one it knows could not be reached), it asks
// a live node that hosts a replica of the shard: that node serves the
// request if it leads the shard now, or answers "not the leader" naming
// the leader its replica knows, which gossip may not have told this node
// yet. When it knows no host of the shard at all (gossip has not brought
// them yet), it asks the node the shard is named after, or a member of
// the shard's group (askPeer).
func callShardOnce[Req, Resp any, PR shardCall[Req]](ctx context.Context, n *Namespace, shard, method string, req PR,
	local func(*home, context.Context, *Req) (*Resp, error)) (*Resp, error) {
	req.header().Shard = shard
	var err error
	unreachable, asked := "", false
	for range maxRedirects + 1 {
		h, gerr := n.enterHome(ctx, shard)
		if gerr != nil {
			return nil, gerr
		}
		if h != nil {
			return local(h, ctx, (*Req)(req))
		}
		to := n.leaderOf(shard)
		if to == "" || to == n.id || to == unreachable || !n.isUp(to) {
			// (n.id: it led the shard, and lost it a moment ago)
			prev := to
			if to = n.otherHost(shard, prev, unreachable); to == "" && n.hostsUnknown(shard) {
				to = n.askPeer(shard, prev, unreachable)
			}
			if to == "" {
				return nil, errShardDown(shard)
			}
		}
		resp := new(Resp)
		if err = n.call(ctx, to, method, req, resp); err == nil {
			return resp, nil
		}
		if errors.Is(err, errNotSent) && unreachable == "" {
			unreachable = to
			continue
		}
		if errors.Is(err, rpc.ErrOutcomeUnknown) && readMethods[method] && !asked {
			// A read whose connection broke under it (a pooled connection
			// to a process killed and started again): it changed nothing,
			// so it is asked again, once, on a new connection.
			asked = true
			continue
		}
		hint, _, ok := rpc.NotLeaderHint(err)
		if !ok || hint == to || hint == unreachable {
			return nil, err
		}
		n.learnLeader(shard, hint)
	}
	return nil, err
}

// retryable reports whether a failed call to a shard applied nothing and
// may succeed once the shard has a leader again: the shard had no
// reachable leader, the node asked does not lead it (Raft refused the
// command before appending it), or the request never left this node.
func retryable(err error) bool {
	switch {
	case errors.Is(err, errNoLeader), errors.Is(err, rpc.ErrNotLeader):
		return true
	case errors.Is(err, rpc.ErrOutcomeUnknown):
		return false
	case errors.Is(err, rpc.ErrShuttingDown): // refused before it was served
		return true
	}
	return errors.Is(err, errNotSent) && !errors.Is(err, rpc.ErrRemote)
}

// shardRPC serves a request for a shard: with fn when this node leads it,
// otherwise with rpc.NotLeaderError naming the leader this node knows. A
// request the home's stop cut short before it did anything (errCutShort)
// is sent on to the shard's next leader.
// A request naming no shard is for the receiver's own (requests of a build
// before replicated shards).
func shardRPC[Req, Resp any, PR shardCall[Req]](n *Namespace, method string,
	fn func(*home, context.Context, *Req) (*Resp, error)) func(context.Context, *Req) (*Resp, error) {
	return func(ctx context.Context, r *Req) (*Resp, error) {
		shard := PR(r).header().Shard
		if shard == "" {
			shard = n.id
		}
		h, err := n.enterHome(ctx, shard)
		if err != nil {
			return nil, err
		}
		if h != nil {
			resp, err := fn(h, ctx, r)
			if err != nil && errors.Is(err, errCutShort) && n.ctx.Err() == nil {
				// The shard's leadership moved away while the request
				// waited, before it did anything: it is sent on to the
				// next leader here, as a caller on this node would, so
				// that a planned move fails no request (a remote caller
				// would only see "unavailable").
				n.counters.forwarded.Add(1)
				return callShard(ctx, n, shard, method, PR(r), fn)
			}
			return resp, err
		}
		e := &rpc.NotLeaderError{Shard: shard}
		if l := n.leaderOf(shard); l != "" && l != n.id {
			e.Leader = l
			if p := n.peer(l); p != nil {
				e.Addr = p.RPCAddr
			}
		}
		return nil, fmt.Errorf("%s: %w", method, e)
	}
}

// hop returns the RPCs a request to shard costs: 0 when this node leads
// it.
func (n *Namespace) hop(shard string) int {
	if n.leads(shard) {
		return 0
	}
	return 1
}

// homeReply is implemented by the replies of the Home.* methods (wire.go).
type homeReply interface {
	// notHome reports that the shard no longer homes the path it was
	// asked about (a rename moved it): look it up again.
	notHome() bool
}

// target says where an operation runs: at the shard of path, which must be
// a directory when dir is set. For an operation on a child of path (create,
// remove, rename), child names it, and errors say "child: parent path …".
type target struct {
	path  string
	child string
	dir   bool
	// checked: the operation itself checks path at its home, in the same
	// Raft entry that changes it (a create requires its parent there, as
	// a directory). atHome's first try then goes to the shard the filters
	// name, without first verifying that it homes path (see candidate).
	checked bool
}

// lookupErr describes a failed lookup of the target.
func (t target) lookupErr(err error) error {
	if t.child != "" && errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%s: parent %s does not exist: %w", t.child, t.path, fs.ErrNotExist)
	}
	return err
}

// notDirErr is the error for a target that is not a directory.
func (t target) notDirErr() error {
	if t.child != "" {
		return fmt.Errorf("%s: %s: %w", t.child, t.path, rpc.ErrNotDir)
	}
	return fmt.Errorf("%s: %w", t.path, rpc.ErrNotDir)
}

// refusal reports whether err refuses an operation on what the home read
// from its store (the name exists, a parent is missing or not a
// directory): an answer that only a verified leader may give.
func refusal(err error) bool {
	return errors.Is(err, fs.ErrExist) || errors.Is(err, fs.ErrNotExist) || errors.Is(err, rpc.ErrNotDir)
}

// locateTarget finds the shard of at.path through the query path.
func (n *Namespace) locateTarget(ctx context.Context, at target) (located, error) {
	l, err := n.locate(ctx, at.path, false)
	if err != nil {
		return l, at.lookupErr(err)
	}
	if at.dir && l.typ != rpc.TypeDir {
		return l, at.notDirErr()
	}
	return l, nil
}

// atHome runs an operation at the shard of at.path: it finds the shard
// through the query path, runs local there if this node leads it or calls
// method on its leader otherwise, and looks the shard up again while the
// answer is "not the home" (at most maxRelocate times). It returns the
// reply and the RPCs the lookups and the call cost.
func atHome[Req, Resp any, PR shardCall[Req], PResp interface {
	*Resp
	homeReply
}](ctx context.Context, n *Namespace, at target, method string, req PR,
	local func(*home, context.Context, *Req) (*Resp, error)) (*Resp, int, error) {
	hops := 0
	if at.checked {
		if s := n.candidate(at.path); s != "" {
			resp, err := callShardOnce(ctx, n, s, method, req, local)
			hops += n.hop(s)
			if err == nil && !PResp(resp).notHome() {
				return resp, hops, nil
			}
			if err != nil && !retryable(err) && !refusal(err) {
				return nil, hops, err
			}
			// A wrong candidate, a refusal read from the store of a
			// leader that may have been deposed, or a failure that
			// applied nothing: the verified way below.
		}
	}
	for range maxRelocate {
		l, err := n.locateTarget(ctx, at)
		hops += l.hops
		if err != nil {
			return nil, hops, err
		}
		resp, err := callShard(ctx, n, l.shard, method, req, local)
		hops += n.hop(l.shard)
		if err != nil {
			return nil, hops, err
		}
		if !PResp(resp).notHome() {
			return resp, hops, nil
		}
	}
	return nil, hops, errMoved(at.path)
}
