package node

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"sync"

	"github.com/ghba/ghba/node/store"
	"github.com/ghba/ghba/routing"
	"github.com/ghba/ghba/rpc"
)

// located is the answer of a lookup: the home of a path, its type, its
// inode when asked for, and how it was found.
type located struct {
	home  string
	typ   string
	inode *rpc.Inode
	level string
	hops  int
}

// maxL4Retries bounds the re-tries of the authoritative step when it races
// with a change (the parent moved, the child was just removed).
const maxL4Retries = 3

// locate finds the home of the normalized path p through the G-HBA query
// path (DESIGN §3): this node's own filters first (a free verification in
// its store), then the L1 array (LRU filters), then the L2 array (local
// filter replicas: with G-HBA this node's segment), each used only on a
// unique hit and verified at the hit node; then, with G-HBA, L3, the
// multicast to this node's group; then L4, the
// authoritative step: the parent directory's entry at the parent's home
// (found the same way; the root's home is well known), or, when that home
// cannot be reached, a broadcast. A false positive costs one verification.
// The error is fs.ErrNotExist only when a live authority said so, and
// rpc.ErrUnavailable when the home (or an authority needed) is down.
func (n *Namespace) locate(ctx context.Context, p string, withInode bool) (located, error) {
	if p == "/" {
		return n.locateRoot(ctx, withInode)
	}
	k := routing.HashPath(n.hash, p)
	hops := 0
	// This node first: verifying costs no RPC.
	inLRU, inLocal := n.selfTest(k)
	if inLocal {
		l, ok, err := n.verifyLocal(ctx, p, withInode)
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
	}
	n.arrMu.RLock()
	r1 := n.l1.QueryKey(k)
	r2 := n.l2.QueryKey(k)
	n.arrMu.RUnlock()
	var tried []string // hit nodes that turned out not to home p
	if inLocal {
		tried = append(tried, n.id)
	}
	if r1.Hit() && n.isUp(r1.ID) && r1.ID != n.id {
		l, ok, err := n.verifyRemote(ctx, r1.ID, p, withInode, false)
		hops++
		if err != nil {
			return l, err
		}
		if ok {
			l.level, l.hops = rpc.LevelL1, hops
			return l, nil
		}
		tried = append(tried, r1.ID)
	}
	if r2.Hit() && !slices.Contains(tried, r2.ID) && n.isUp(r2.ID) {
		l, ok, err := n.verifyRemote(ctx, r2.ID, p, withInode, false)
		hops++
		if err != nil {
			return l, err
		}
		if ok {
			l.level, l.hops = rpc.LevelL2, hops
			return l, nil
		}
		tried = append(tried, r2.ID)
	}
	if n.segmented() {
		// L3: the group multicast covers the whole cluster: every member
		// holds its own filter and its segment.
		id, sent := n.l3(ctx, p, k, tried)
		hops += sent
		if id != "" && n.isUp(id) {
			var l located
			var ok bool
			var err error
			if id == n.id {
				l, ok, err = n.verifyLocal(ctx, p, withInode)
			} else {
				l, ok, err = n.verifyRemote(ctx, id, p, withInode, false)
				hops++
			}
			if err != nil {
				return l, err
			}
			if ok {
				l.level, l.hops = rpc.LevelL3, hops
				return l, nil
			}
		}
	}
	return n.authoritative(ctx, p, withInode, hops)
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
				return located{hops: hops}, notExist(p)
			}
			return located{hops: hops}, err
		}
		if pl.typ != rpc.TypeDir {
			return located{hops: hops}, fmt.Errorf("%s: %s: %w", p, dir, rpc.ErrNotDir)
		}
		er, err := n.getEntry(ctx, pl.home, dir, name)
		if pl.home != n.id {
			hops++
		}
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
			return located{hops: hops}, notExist(p)
		}
		home := er.Entry.Home
		var l located
		var ok bool
		if home == n.id {
			l, ok, err = n.verifyLocal(ctx, p, withInode)
		} else {
			if !n.isUp(home) {
				return located{hops: hops}, fmt.Errorf("%s: home %s: %w", p, home, errNodeDown(home))
			}
			l, ok, err = n.verifyRemote(ctx, home, p, withInode, true)
			hops++
		}
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

// isUnavailable reports whether err means a node could not be reached or
// could not answer (as opposed to an authoritative answer).
func isUnavailable(err error) bool {
	return errors.Is(err, rpc.ErrUnavailable) || errors.Is(err, rpc.ErrShuttingDown)
}

// broadcast is the last resort of L4: ask every live node whether it homes
// p. Found: that is the answer. Not found: unavailable (some authority
// could not be asked), never "does not exist".
func (n *Namespace) broadcast(ctx context.Context, p string, withInode bool, hops int, cause error) (located, error) {
	n.counters.broadcasts.Add(1)
	ps := n.peers.Load()
	var (
		mu    sync.Mutex
		found *located
		wg    sync.WaitGroup
	)
	for i := range ps.list {
		peer := ps.list[i]
		if peer.ID != n.id && !peer.Up {
			continue
		}
		if peer.ID != n.id {
			hops++
		}
		wg.Go(func() {
			var l located
			var ok bool
			var err error
			if peer.ID == n.id {
				l, ok, err = n.verifyLocal(ctx, p, withInode)
			} else {
				l, ok, err = n.verifyRemote(ctx, peer.ID, p, withInode, false)
			}
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

// locateRoot finds "/": at its well-known home, or, if a drain moved it
// and the cluster has not recorded the new home yet, by broadcast.
func (n *Namespace) locateRoot(ctx context.Context, withInode bool) (located, error) {
	home := n.peers.Load().root
	if o := n.rootOverride.Load(); o != nil {
		home = *o
	}
	hops := 0
	if home == "" {
		return located{}, fmt.Errorf("%w: the root's home is not known yet", rpc.ErrUnavailable)
	}
	var l located
	var ok bool
	var err error
	if home == n.id {
		l, ok, err = n.verifyLocal(ctx, "/", withInode)
	} else if n.isUp(home) {
		l, ok, err = n.verifyRemote(ctx, home, "/", withInode, true)
		hops++
	} else {
		err = errNodeDown(home)
	}
	if err != nil {
		if !isUnavailable(err) || ctx.Err() != nil {
			return located{hops: hops}, err
		}
		// The root's home is down, or it was drained and the cluster has
		// not recorded the new home yet: look for it everywhere.
		l, err := n.broadcast(ctx, "/", withInode, hops, err)
		if err == nil {
			h := l.home
			n.rootOverride.Store(&h)
		}
		return l, err
	}
	if ok {
		l.level, l.hops = rpc.LevelL1, hops
		return l, nil
	}
	l, err = n.broadcast(ctx, "/", withInode, hops, fmt.Errorf("%w: / is not at its home %s", rpc.ErrUnavailable, home))
	if err == nil {
		h := l.home
		n.rootOverride.Store(&h)
	}
	return l, err
}

// verifyLocal checks whether this node homes p (after resolving marks on
// it) and touches it on the LRU list.
func (n *Namespace) verifyLocal(ctx context.Context, p string, withInode bool) (located, bool, error) {
	if err := n.settle(ctx, p, false); err != nil {
		return located{}, false, err
	}
	ino, err := n.st.GetInode(ctx, p)
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return located{}, false, nil
		}
		return located{}, false, err
	}
	n.touch(p)
	l := located{home: n.id, typ: typeString(ino.Type)}
	if withInode {
		w := wireInode(p, n.id, &ino)
		l.inode = &w
	}
	return l, true, nil
}

// verifyRemote asks node id whether it homes p. Unless strict, an
// unreachable node is "not found here" (a filter hit that could not be
// verified); strict returns the error (the node is known to be the home).
func (n *Namespace) verifyRemote(ctx context.Context, id, p string, withInode, strict bool) (located, bool, error) {
	var resp rpc.LocalCheckResponse
	err := n.call(ctx, id, rpc.MethodLocalCheck, &rpc.LocalCheckRequest{Path: p, WithInode: withInode}, &resp)
	if err != nil {
		if ctx.Err() != nil || strict {
			return located{}, false, err
		}
		if isUnavailable(err) {
			return located{}, false, nil
		}
		return located{}, false, err
	}
	if !resp.Exists {
		return located{}, false, nil
	}
	l := located{home: id, typ: resp.Type}
	if withInode {
		if resp.Inode == nil {
			return located{}, false, fmt.Errorf("%w: %s answered without the inode", rpc.ErrProtocol, id)
		}
		resp.Inode.Home = id
		l.inode = resp.Inode
	}
	return l, true, nil
}

// getEntry asks the home of dir for its entry name.
func (n *Namespace) getEntry(ctx context.Context, home, dir, name string) (homeEntryResp, error) {
	if home == n.id {
		return n.entryHere(ctx, dir, name)
	}
	var resp homeEntryResp
	err := n.call(ctx, home, methodHomeEntry, &homeEntryReq{Dir: dir, Name: name}, &resp)
	return resp, err
}

// entryHere reads entry name of dir at this node, dir's home.
func (n *Namespace) entryHere(ctx context.Context, dir, name string) (homeEntryResp, error) {
	if err := n.settle(ctx, joinPath(dir, name), false); err != nil {
		return homeEntryResp{}, err
	}
	ino, err := n.st.GetInode(ctx, dir)
	if errors.Is(err, store.ErrNotFound) {
		return homeEntryResp{NotHome: true}, nil
	} else if err != nil {
		return homeEntryResp{}, err
	}
	if ino.Type != store.TypeDir {
		return homeEntryResp{NotDir: true}, nil
	}
	e, err := n.st.GetEntry(ctx, dir, name)
	if errors.Is(err, store.ErrNotFound) {
		return homeEntryResp{}, nil
	} else if err != nil {
		return homeEntryResp{}, err
	}
	return homeEntryResp{Exists: true, Entry: wireEntry(e)}, nil
}

func (n *Namespace) handleHomeEntry(ctx context.Context, r *homeEntryReq) (*homeEntryResp, error) {
	dir, err := CleanPath(r.Dir)
	if err != nil {
		return nil, err
	}
	if r.Name == "" || len(r.Name) > MaxNameLen || r.Name == "." || r.Name == ".." || containsSlashOrNUL(r.Name) {
		return nil, fmt.Errorf("%w: bad name %q", rpc.ErrInvalidPath, r.Name)
	}
	resp, err := n.entryHere(ctx, dir, r.Name)
	if err != nil {
		return nil, err
	}
	return &resp, nil
}

func containsSlashOrNUL(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] == '/' || s[i] == 0 {
			return true
		}
	}
	return false
}

func (n *Namespace) handleGetEntry(ctx context.Context, r *rpc.GetEntryRequest) (*rpc.GetEntryResponse, error) {
	resp, err := n.handleHomeEntry(ctx, &homeEntryReq{Dir: r.Dir, Name: r.Name})
	if err != nil {
		return nil, err
	}
	switch {
	case resp.NotHome:
		return nil, fmt.Errorf("%w: %s is not homed at %s", rpc.ErrUnavailable, r.Dir, n.id)
	case resp.NotDir:
		return nil, fmt.Errorf("%s: %w", r.Dir, rpc.ErrNotDir)
	}
	return &rpc.GetEntryResponse{Exists: resp.Exists, Entry: resp.Entry}, nil
}

func (n *Namespace) handleLocalCheck(ctx context.Context, r *rpc.LocalCheckRequest) (*rpc.LocalCheckResponse, error) {
	p, err := CleanPath(r.Path)
	if err != nil {
		return nil, err
	}
	l, ok, err := n.verifyLocal(ctx, p, r.WithInode)
	if err != nil {
		return nil, err
	}
	resp := &rpc.LocalCheckResponse{NodeID: n.id, Exists: ok}
	if ok {
		resp.Type = l.typ
		resp.Inode = l.inode
	}
	return resp, nil
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
