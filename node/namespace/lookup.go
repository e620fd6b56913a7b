package namespace

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"sync"
	"time"

	"github.com/ghba/ghba/routing"
	"github.com/ghba/ghba/rpc"
)

// The query path (docs/design.md, "Query path"; HBA §4, G-HBA §2): every
// level in this file, in the order a lookup takes them.

// located is the answer of a lookup: the shard that homes a path, its
// type, its inode when asked for, and how it was found.
type located struct {
	shard string
	typ   string
	inode *rpc.Inode
	// anchor is the shard of the record when the path is one name of an
	// inode with several (hardlinks.go; only with the inode).
	anchor string
	level  string
	hops   int
	// With fs.ErrNotExist, missing is the path whose name the entries of
	// its parent directory, in shard missingIn, said does not exist (L4):
	// the path itself or, when a directory on the way is missing, that
	// directory.
	missing, missingIn string
}

// maxL4Retries bounds the re-tries of the authoritative step when it races
// with a change (the parent moved, the child was just removed).
const maxL4Retries = 3

// locate finds the home of the normalized path p:
//
//   - this node's own filters first (a free verification in its store);
//   - L1, the array of every node's LRU filter;
//   - L2, the array of local-filter replicas (with G-HBA this node's
//     segment);
//   - L3 (G-HBA), the multicast to this node's group, whose members
//     together hold every node's filter, unless the parent directory is
//     homed in a shard this node leads: L4 then needs no RPC to find the
//     parent, and the parent's entry says at once where the path is, or
//     that it does not exist;
//   - L4, the authoritative step: the parent directory's entry at the
//     parent's home (found the same way; the root's home is well known),
//     or, when that home cannot be reached, a broadcast.
//
// A level is used only on a unique hit, verified at the hit node; zero or
// several hits go to the next level, so a false positive costs one
// verification, never a wrong answer. The error is fs.ErrNotExist only when
// a live authority said so, and rpc.ErrUnavailable when the home (or an
// authority needed) is down.
func (n *Namespace) locate(ctx context.Context, p string, withInode bool) (located, error) {
	if p == "/" {
		return n.locateRoot(ctx, withInode)
	}
	k := routing.HashPath(n.rt.Hash, p)
	hops := 0
	var tried []string // hit shards that turned out not to home p
	// The shards this node leads first: verifying costs no RPC.
	for _, h := range n.ledHomes() {
		inLRU, inLocal := h.testKey(k)
		if !inLocal {
			continue
		}
		l, ok, err := n.verify(ctx, h.id, p, withInode, false)
		if err != nil {
			return l, err
		}
		if ok {
			l.level = rpc.LevelL2
			if inLRU {
				l.level = rpc.LevelL1
			}
			return l, nil
		}
		tried = append(tried, h.id)
	}
	n.arrMu.RLock()
	r1 := n.l1.QueryKey(k)
	r2 := n.l2.QueryKey(k)
	n.arrMu.RUnlock()
	levels := []struct {
		level string
		hit   routing.Result
	}{{rpc.LevelL1, r1}, {rpc.LevelL2, r2}}
	for _, lv := range levels {
		if !lv.hit.Hit() || slices.Contains(tried, lv.hit.ID) || !n.shardUp(lv.hit.ID) {
			continue
		}
		l, ok, err := n.verify(ctx, lv.hit.ID, p, withInode, false)
		hops += n.hop(lv.hit.ID)
		if err != nil {
			return l, err
		}
		if ok {
			l.level, l.hops = lv.level, hops
			return l, nil
		}
		tried = append(tried, lv.hit.ID)
	}
	if n.segmented() && len(n.dirHomesHere(directParent(p))) == 0 && !n.routesAsHBA() {
		id, sent := n.l3(ctx, p, k, tried)
		hops += sent
		if id != "" && n.shardUp(id) {
			l, ok, err := n.verify(ctx, id, p, withInode, false)
			hops += n.hop(id)
			if err != nil {
				return l, err
			}
			if ok {
				l.level, l.hops = rpc.LevelL3, hops
				return l, nil
			}
		}
	}
	start := time.Now()
	l, err := n.authoritative(ctx, p, withInode, hops)
	n.counters.l4Steps.Add(1)
	n.counters.l4Nanos.Add(uint64(time.Since(start)))
	return l, err
}

// dirHomesHere returns the homes of the shards this node leads that may
// home directory dir: the root's shard for "/", else those whose filters
// hold dir (a false positive is possible; the caller reads the store).
func (n *Namespace) dirHomesHere(dir string) []*home {
	if dir == "/" {
		if h := n.home(n.peers.Load().root); h != nil {
			return []*home{h}
		}
		return nil
	}
	k := routing.HashPath(n.rt.Hash, dir)
	var out []*home
	for _, h := range n.ledHomes() {
		if _, inLocal := h.testKey(k); inLocal {
			out = append(out, h)
		}
	}
	return out
}

// candidate returns the shard that L1 and L2 name for p, unverified: the
// first shard this node leads whose filters hold p, else a unique L1 or
// L2 hit whose leader is up ("" for none, and for the root). Only an
// operation that checks p at the home under the Raft log may act on it
// (target.checked): a wrong candidate answers "not the home", and the
// operation takes the query path.
func (n *Namespace) candidate(p string) string {
	if p == "/" {
		return ""
	}
	k := routing.HashPath(n.rt.Hash, p)
	for _, h := range n.ledHomes() {
		if _, inLocal := h.testKey(k); inLocal {
			return h.id
		}
	}
	n.arrMu.RLock()
	r1 := n.l1.QueryKey(k)
	r2 := n.l2.QueryKey(k)
	n.arrMu.RUnlock()
	for _, r := range []routing.Result{r1, r2} {
		if r.Hit() && n.shardUp(r.ID) {
			return r.ID
		}
	}
	return ""
}

// l3 is the group multicast (G-HBA §2.2): every other live member of this
// node's group tests p against its segment and the filters of the shards it
// leads; with this node's own answer, exactly one positive names the shard
// to verify. It returns the unique positive ("" for none or several) and
// the number of RPCs sent.
func (n *Namespace) l3(ctx context.Context, p string, k routing.Key, skip []string) (string, int) {
	ps := n.peers.Load()
	my := n.dir.Self().Group
	var mates []Peer
	for _, m := range ps.list {
		if m.ID != n.id && m.Group == my && m.Up && m.RPCAddr != "" {
			mates = append(mates, m)
		}
	}
	if len(mates) == 0 {
		return "", 0
	}
	positives := map[string]bool{}
	for _, id := range n.positives(k) {
		positives[id] = true
	}
	start := time.Now()
	defer func() { n.counters.l3Nanos.Add(uint64(time.Since(start))) }()
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, m := range mates {
		wg.Go(func() {
			cctx, cancel := context.WithTimeout(ctx, n.tune.PeerTimeout)
			defer cancel()
			var resp l3QueryResp
			if err := n.cl.Call(cctx, m.RPCAddr, methodL3Query, &l3QueryReq{Path: p}, &resp); err != nil {
				return // a silent member: its segment is missed, L4 covers it
			}
			mu.Lock()
			for _, id := range resp.Positives {
				positives[id] = true
			}
			mu.Unlock()
		})
	}
	wg.Wait()
	n.counters.multicasts.Add(1)
	for _, id := range skip {
		delete(positives, id) // already verified: a false hit at L1/L2
	}
	if len(positives) != 1 {
		return "", len(mates)
	}
	for id := range positives {
		return id, len(mates)
	}
	return "", len(mates)
}

// positives returns the shards whose filters this node holds (its L2
// replicas and the filters of the shards it leads) that report key k.
func (n *Namespace) positives(k routing.Key) []string {
	n.arrMu.RLock()
	out := n.l2.Positives(k, nil)
	n.arrMu.RUnlock()
	for _, h := range n.ledHomes() {
		if _, in := h.testKey(k); in {
			out = append(out, h.id)
		}
	}
	return out
}

func (n *Namespace) handleL3Query(ctx context.Context, r *l3QueryReq) (*l3QueryResp, error) {
	p, err := CleanPath(r.Path)
	if err != nil {
		return nil, err
	}
	return &l3QueryResp{NodeID: n.id, Positives: n.positives(routing.HashPath(n.rt.Hash, p))}, nil
}

// authoritative is the L4 step for p (not "/").
func (n *Namespace) authoritative(ctx context.Context, p string, withInode bool, hops int) (located, error) {
	dir, name := splitPath(p)
	for range maxL4Retries {
		pl, err := n.locate(ctx, dir, false)
		hops += pl.hops
		if err != nil {
			if isUnavailable(err) {
				return n.broadcast(ctx, p, withInode, hops, err)
			}
			if errors.Is(err, rpc.ErrNotDir) {
				return located{hops: hops}, fmt.Errorf("%s: %w", p, rpc.ErrNotDir)
			}
			if errors.Is(err, fs.ErrNotExist) {
				return located{hops: hops, missing: pl.missing, missingIn: pl.missingIn}, notExist(p)
			}
			return located{hops: hops}, err
		}
		if pl.typ != rpc.TypeDir {
			return located{hops: hops}, fmt.Errorf("%s: %s: %w", p, dir, rpc.ErrNotDir)
		}
		er, err := n.getEntry(ctx, pl.shard, dir, name)
		hops += n.hop(pl.shard)
		if err != nil {
			if isUnavailable(err) {
				return n.broadcast(ctx, p, withInode, hops, err)
			}
			return located{hops: hops}, err
		}
		switch {
		case er.NotHome:
			continue // the parent moved meanwhile: find it again
		case er.NotDir:
			return located{hops: hops}, fmt.Errorf("%s: %s: %w", p, dir, rpc.ErrNotDir)
		case !er.Exists:
			return located{hops: hops, missing: p, missingIn: pl.shard}, notExist(p)
		}
		home := er.Entry.Home
		l, ok, err := n.verify(ctx, home, p, withInode, true)
		hops += n.hop(home)
		if err != nil {
			return located{hops: hops}, err
		}
		if ok {
			l.level, l.hops = rpc.LevelL4, hops
			return l, nil
		}
		// The entry named a home that does not have the path: a change
		// raced with us. Look again.
	}
	return located{hops: hops}, fmt.Errorf("%w: %s: the parent's entry and the home disagree; try again", rpc.ErrUnavailable, p)
}

// broadcast is the last resort of L4: ask every shard with a live leader
// whether it homes p. Found: that is the answer. Not found: unavailable
// (some authority could not be asked), never "does not exist".
func (n *Namespace) broadcast(ctx context.Context, p string, withInode bool, hops int, cause error) (located, error) {
	n.counters.broadcasts.Add(1)
	ps := n.peers.Load()
	var (
		mu    sync.Mutex
		found *located
		wg    sync.WaitGroup
	)
	for _, s := range ps.shards {
		if !n.shardUp(s.ID) {
			continue
		}
		hops += n.hop(s.ID)
		wg.Go(func() {
			l, ok, err := n.verify(ctx, s.ID, p, withInode, false)
			if err == nil && ok {
				mu.Lock()
				if found == nil {
					found = &l
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if found != nil {
		found.level, found.hops = rpc.LevelL4, hops
		return *found, nil
	}
	return located{hops: hops}, fmt.Errorf("%s: %w", p, asUnavailable(cause))
}

// locateRoot finds "/" in the root shard.
func (n *Namespace) locateRoot(ctx context.Context, withInode bool) (located, error) {
	root := n.peers.Load().root
	if root == "" {
		return located{}, fmt.Errorf("%w: the root's shard is not known yet", rpc.ErrUnavailable)
	}
	l, ok, err := n.verify(ctx, root, "/", withInode, true)
	hops := n.hop(root)
	switch {
	case err != nil:
		return located{hops: hops}, err
	case !ok:
		return located{hops: hops}, fmt.Errorf("%w: / is not in its shard %s yet", rpc.ErrUnavailable, root)
	}
	l.level, l.hops = rpc.LevelL1, hops
	return l, nil
}

// verify asks shard whether it homes p (at its leader: this node, or an
// RPC). Unless strict, a shard that cannot be reached is "not found
// there" (a filter hit that could not be verified); strict returns the
// error (the shard is known to be the home).
func (n *Namespace) verify(ctx context.Context, shard, p string, withInode, strict bool) (located, bool, error) {
	call := callShardOnce[localCheckReq, localCheckResp] // a candidate: no wait for a leader
	if strict {
		call = callShard[localCheckReq, localCheckResp]
	}
	resp, err := call(ctx, n, shard, methodLocalCheck, &localCheckReq{Path: p, WithInode: withInode}, (*home).localCheck)
	if err != nil && !strict && retryable(err) && ctx.Err() == nil {
		// The candidate's leadership is moving (a transfer back to a
		// restarted owner that knows no leader yet, a deposition of this
		// node): wait for the shard's leader as a strict check does
		// (bounded, and not at all for a shard that is down), rather than
		// fail a path this shard may home.
		resp, err = callShard(ctx, n, shard, methodLocalCheck, &localCheckReq{Path: p, WithInode: withInode}, (*home).localCheck)
	}
	if err != nil {
		if !n.leads(shard) && !strict && ctx.Err() == nil && isUnavailable(err) {
			return located{}, false, nil
		}
		return located{}, false, err
	}
	if !resp.Exists {
		return located{}, false, nil
	}
	l := located{shard: shard, typ: resp.Type}
	if withInode {
		if resp.Inode == nil {
			return located{}, false, fmt.Errorf("%w: shard %s answered without the inode", rpc.ErrProtocol, shard)
		}
		resp.Inode.Home = shard
		l.inode, l.anchor = resp.Inode, resp.Anchor
	}
	return l, true, nil
}

// getEntry asks the shard of dir for its entry name.
func (n *Namespace) getEntry(ctx context.Context, shard, dir, name string) (*homeEntryResp, error) {
	return callShard(ctx, n, shard, methodHomeEntry, &homeEntryReq{Dir: dir, Name: name}, (*home).entryHere)
}

// countLookup records a client lookup's level and hops.
func (n *Namespace) countLookup(l located, err error) {
	c := &n.counters
	c.lookups.Add(1)
	c.hops.Add(uint64(l.hops))
	if err != nil {
		switch {
		case errors.Is(err, fs.ErrNotExist):
			c.notFound.Add(1)
		case isUnavailable(err):
			c.unavailable.Add(1)
		}
		return
	}
	switch l.level {
	case rpc.LevelL1:
		c.l1.Add(1)
	case rpc.LevelL2:
		c.l2.Add(1)
	case rpc.LevelL3:
		c.l3.Add(1)
	case rpc.LevelL4:
		c.l4.Add(1)
	}
}
