package namespace

import (
	"context"
	"errors"
	"fmt"
	"io/fs"

	"github.com/ghba/ghba/rpc"
)

// Reaching other nodes. Every server-to-server request of the namespace
// goes through callNode, and every operation that must run at a path's
// home (or at its parent directory's home) through atHome: they are the
// one place that decides how a home is found and called.

// maxRelocate bounds how often an entry node looks a home up again after
// being told "not the home" (a concurrent rename or drain).
const maxRelocate = 4

// errNodeDown reports a home (or coordinator) that cannot be reached.
func errNodeDown(id string) error {
	return fmt.Errorf("%w: node %s is down", rpc.ErrUnavailable, id)
}

// errMoved is returned when a home could not be pinned down after several
// attempts (paths moving under heavy concurrent renames or a drain).
func errMoved(p string) error {
	return fmt.Errorf("%w: %s keeps moving; try again", rpc.ErrUnavailable, p)
}

// isUnavailable reports whether err means a node could not be reached or
// could not answer (as opposed to an authoritative answer).
func isUnavailable(err error) bool {
	return errors.Is(err, rpc.ErrUnavailable) || errors.Is(err, rpc.ErrShuttingDown)
}

// asUnavailable makes sure err matches rpc.ErrUnavailable (a failed call
// to a node that had to answer, whatever the reason).
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
		return errNodeDown(id)
	}
	return n.cl.Call(ctx, p.RPCAddr, method, req, resp)
}

// callNode runs a server-to-server request at node id: local, the
// method's handler, when id is this node (no RPC, no encoding), an RPC to
// id otherwise.
func callNode[Req, Resp any](ctx context.Context, n *Namespace, id, method string, req *Req,
	local func(context.Context, *Req) (*Resp, error)) (*Resp, error) {
	if id == n.id {
		return local(ctx, req)
	}
	resp := new(Resp)
	if err := n.call(ctx, id, method, req, resp); err != nil {
		return nil, err
	}
	return resp, nil
}

// hop returns the RPCs a request to node id costs: 0 for this node.
func (n *Namespace) hop(id string) int {
	if id == n.id {
		return 0
	}
	return 1
}

// homeReply is implemented by the replies of the Home.* methods (wire.go).
type homeReply interface {
	// notHome reports that the receiver no longer homes the path it was
	// asked about (a rename or a drain moved it): look it up again.
	notHome() bool
}

// target says where an operation runs: at the home of path, which must be
// a directory when dir is set. For an operation on a child of path (create,
// remove, rename), child names it, and errors say "child: parent path …".
type target struct {
	path  string
	child string
	dir   bool
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

// locateTarget finds the home of at.path through the query path.
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

// atHome runs an operation at the home of at.path: it finds the home
// through the query path, runs local there if it is this node or calls
// method on it otherwise, and looks the home up again while the answer is
// "not the home" (at most maxRelocate times). It returns the reply and the
// RPCs the lookups and the call cost.
func atHome[Req, Resp any, PR interface {
	*Resp
	homeReply
}](ctx context.Context, n *Namespace, at target, method string, req *Req,
	local func(context.Context, *Req) (*Resp, error)) (*Resp, int, error) {
	hops := 0
	for range maxRelocate {
		l, err := n.locateTarget(ctx, at)
		hops += l.hops
		if err != nil {
			return nil, hops, err
		}
		resp, err := callNode(ctx, n, l.home, method, req, local)
		hops += n.hop(l.home)
		if err != nil {
			return nil, hops, err
		}
		if !PR(resp).notHome() {
			return resp, hops, nil
		}
	}
	return nil, hops, errMoved(at.path)
}
