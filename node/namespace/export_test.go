package namespace

import (
	"context"
	"sort"

	"github.com/ghba/ghba/routing"
)

// Hooks and views of the namespace's internals for its external tests
// (package namespace_test), which run on node/nodetest's clusters.

// Crash-injection points of SetCrashHook.
const (
	HookPrepared   = hookPrepared
	HookCommitting = hookCommitting
	HookCommitted  = hookCommitted
)

// Path helpers.
var (
	IsUnder       = isUnder
	StrictlyUnder = strictlyUnder
	SplitPath     = splitPath
	JoinPath      = joinPath
	DirectParent  = directParent
)

// SetCrashHook makes a coordinator stop dead at a point of the protocol
// when h returns true (see crashAt).
func (n *Namespace) SetCrashHook(h func(point, txn string) bool) { n.hook.Store(&h) }

// Resolving reports whether a prepared part of a shard this node leads is
// being resolved with its coordinator.
func (n *Namespace) Resolving() bool {
	for _, h := range n.ledHomes() {
		f := &h.txns.flux
		f.mu.Lock()
		for _, p := range f.marks {
			p.resMu.Lock()
			r := p.resolving
			p.resMu.Unlock()
			if r != nil {
				f.mu.Unlock()
				return true
			}
		}
		f.mu.Unlock()
	}
	return false
}

// CheckAt asks shard's leader whether it homes p, as a request that knows
// the shard is p's home does (waiting for its leader, failing if it cannot
// answer).
func (n *Namespace) CheckAt(ctx context.Context, shard, p string) (bool, error) {
	_, ok, err := n.verify(ctx, shard, p, false, true)
	return ok, err
}

// Marks returns the marked paths of the shards this node leads, sorted.
func (n *Namespace) Marks() []string {
	var out []string
	for _, h := range n.ledHomes() {
		h.txns.flux.mu.Lock()
		for p := range h.txns.flux.marks {
			out = append(out, p)
		}
		h.txns.flux.mu.Unlock()
	}
	sort.Strings(out)
	return out
}

// LocalAdd adds p to the counting filter of the shard named after this
// node (a path the store does not have: a false positive as far as
// routing is concerned).
func (n *Namespace) LocalAdd(p string) {
	n.home(n.id).rep.Filter(func(f *routing.CountingFilter) { f.Add(p) })
}

// L2Query queries the L2 array for p.
func (n *Namespace) L2Query(p string) routing.Result {
	n.arrMu.RLock()
	defer n.arrMu.RUnlock()
	return n.l2.QueryKey(routing.HashPath(n.rt.Hash, p))
}

// ResetL2Replica replaces origin's L2 replica with an empty filter at
// version 0, as a replica that missed deltas.
func (n *Namespace) ResetL2Replica(origin string) {
	n.arrMu.Lock()
	defer n.arrMu.Unlock()
	_ = n.l2.Replace(origin, routing.NewFilter(n.localGeo))
}

// DropReplicas forgets every replica of other nodes' filters (a node that
// joined after a failure).
func (n *Namespace) DropReplicas() {
	n.arrMu.Lock()
	defer n.arrMu.Unlock()
	for _, o := range n.l1.IDs() {
		_ = n.l1.Remove(o)
		_ = n.l2.Remove(o)
	}
}

// NeedFull returns, for each shard this node leads and each peer, the
// filter kinds to be sent in full at the next propagation.
func (n *Namespace) NeedFull() map[string]map[string][2]bool {
	out := map[string]map[string][2]bool{}
	for _, h := range n.ledHomes() {
		h.push.mu.Lock()
		m := make(map[string][2]bool, len(h.push.needFull))
		for k, v := range h.push.needFull {
			m[k] = v
		}
		h.push.mu.Unlock()
		out[h.id] = m
	}
	return out
}

// The server-to-server protocol (wire.go), for tests that send it bad
// requests.
const (
	MethodLocalCheck  = methodLocalCheck
	MethodHomeEntry   = methodHomeEntry
	MethodFilterPush  = methodFilterPush
	MethodFilterPull  = methodFilterPull
	MethodTxnPrepare  = methodTxnPrepare
	MethodHomeCreate  = methodHomeCreate
	MethodHomeRename  = methodHomeRename
	MethodHomeReadDir = methodHomeReadDir
	FilterLocal       = filterLocal
	FilterLRU         = filterLRU
	OpPutInode        = opPutInode
	PartPrefix        = partPrefix // the store intents of prepared parts
)

type (
	LocalCheckReq  = localCheckReq
	HomeEntryReq   = homeEntryReq
	FilterPushReq  = filterPushReq
	FilterPullReq  = filterPullReq
	TxnPrepareReq  = txnPrepareReq
	TxnOp          = txnOp
	HomeCreateReq  = homeCreateReq
	HomeRenameReq  = homeRenameReq
	HomeReadDirReq = homeReadDirReq
)

// Rebase moves p, which must be under oldRoot, to the same place under
// newRoot.
func Rebase(p, oldRoot, newRoot string) string {
	if p == oldRoot {
		return newRoot
	}
	return newRoot + p[len(oldRoot):]
}

// LegacyIDsKey is the meta record of a shard whose inodes without an id
// have been numbered (ids.go).
const LegacyIDsKey = idsLegacyKey

// LinksCounted reports whether this node leads shard and its home's pass
// counting the directories' links has finished.
func (n *Namespace) LinksCounted(shard string) bool {
	h := n.home(shard)
	if h == nil {
		return false
	}
	return h.linksCounted.Load()
}

// LegacyNumbered reports whether this node leads shard and its home's
// pass numbering the inodes without an id has finished.
func (n *Namespace) LegacyNumbered(shard string) bool {
	h := n.home(shard)
	return h != nil && h.legacyNumbered()
}

// NamesShard reports whether this node's current view of the Directory
// names shard id.
func (n *Namespace) NamesShard(id string) bool {
	_, ok := n.peers.Load().shard[id]
	return ok
}
