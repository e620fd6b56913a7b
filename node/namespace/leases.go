package namespace

import (
	"context"
	"hash/maphash"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ghba/ghba/rpc"
)

// Leases of the client metadata cache (docs/design.md, "Client cache").
//
// A client that caches inodes asks for a lease with its stat
// (rpc.StatRequest.Lease). The node that leads the path's shard, when it
// is the node the client asked, grants one: the client may answer stats of
// the path from its cache until the lease ends, and the node promises to
// tell it (rpc.Peer.Notify) before any change of the path's inode is
// applied. A write at this node first marks the paths it changes as being
// written (no lease is granted on them meanwhile), revokes the leases held
// on them — each holder is notified and acknowledges having dropped its
// entry, or, if it does not answer, the write waits until its lease has
// expired — then applies the change and unmarks them. A stat races with a
// write safely: the grant compares the path's stripe epoch, taken before
// the stat read the inode, with the epoch after; a write begun meanwhile
// bumped it, and so does every write that ended meanwhile (the stat may
// have read the inode before the write was applied): the lease is
// refused.
//
// A lease may also be on a path's absence (grantAbsent), granted by the
// node that leads the shard of the directory whose entries say the
// missing name does not exist (the path's parent's, or, when a directory
// on the way is missing, that directory's parent's): a write of the
// name's entry (a create, a rename into the directory) revokes it as a
// write of the path's inode does; a write of the directory's own inode (it
// is removed, moved, replaced or its mode changes) revokes every lease on
// an absence under it, as a write of the subtree.
type leaseTable struct {
	ttl     time.Duration // 0: leases are never granted
	seed    maphash.Seed
	stripes [leaseStripes]leaseStripe

	prefixMu sync.Mutex
	prefixes map[string]int // subtrees being written (rekey, recode)
	nprefix  atomic.Int32   // len(prefixes), for the grant's fast path

	stats leaseStats
}

// leaseStats count what the lease table did (Stats, /metrics).
type leaseStats struct {
	granted, grantedAbsent atomic.Uint64 // leases granted on inodes, on absences
	notified               atomic.Uint64 // revocations a holder acknowledged
	expired                atomic.Uint64 // revocations that waited for a lease's end
}

const leaseStripes = 64

type leaseStripe struct {
	mu      sync.Mutex
	epoch   uint64
	writing map[string]int
	holders map[string]map[*rpc.Peer]time.Time // path → holder → expiry
	// absentIn maps a directory (in its own stripe) to the latest expiry
	// of the leases granted on the absence of a path under it.
	absentIn map[string]time.Time
}

func newLeaseTable(ttl time.Duration) *leaseTable {
	t := &leaseTable{ttl: ttl, seed: maphash.MakeSeed(), prefixes: map[string]int{}}
	for i := range t.stripes {
		t.stripes[i].writing = map[string]int{}
		t.stripes[i].holders = map[string]map[*rpc.Peer]time.Time{}
		t.stripes[i].absentIn = map[string]time.Time{}
	}
	return t
}

func (t *leaseTable) stripe(p string) *leaseStripe {
	return &t.stripes[maphash.String(t.seed, p)%leaseStripes]
}

// epoch returns p's stripe epoch, to pass to grant after reading p.
func (t *leaseTable) epoch(p string) uint64 {
	s := t.stripe(p)
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.epoch
}

// grant records a lease on p for peer, if no write of p began since
// epoch was taken and none is in progress, and returns its length (0: no
// lease).
func (t *leaseTable) grant(peer *rpc.Peer, p string, epoch uint64) time.Duration {
	if t.ttl <= 0 || peer == nil {
		return 0
	}
	d := t.record(peer, p, epoch, time.Now().Add(t.ttl))
	if d > 0 {
		t.stats.granted.Add(1)
	}
	return d
}

// absenceMark is a directory whose writes revoke a lease on an absence
// (grantAbsent), with its stripe's epoch taken before the read.
type absenceMark struct {
	dir   string
	epoch uint64
}

// grantAbsent records a lease on the absence of p for peer: the caller
// took p's epoch and the marks' before reading the entries that said p
// does not exist. The marks are the directory of the missing name (p's
// parent, or that of a missing ancestor of p) and the missing ancestor
// itself: a write of either that begins after the grant sees it in
// absentIn and revokes the leases under it (beginWrite); one that began
// before changed its epoch, and the lease is refused.
func (t *leaseTable) grantAbsent(peer *rpc.Peer, p string, epoch uint64, marks []absenceMark) time.Duration {
	if t.ttl <= 0 || peer == nil {
		return 0
	}
	until := time.Now().Add(t.ttl)
	for _, m := range marks {
		ds := t.stripe(m.dir)
		ds.mu.Lock()
		if ds.epoch != m.epoch || ds.writing[m.dir] > 0 {
			ds.mu.Unlock()
			return 0
		}
		if until.After(ds.absentIn[m.dir]) {
			ds.absentIn[m.dir] = until
		}
		ds.mu.Unlock()
	}
	d := t.record(peer, p, epoch, until)
	if d > 0 {
		t.stats.grantedAbsent.Add(1)
	}
	return d
}

// record is grant's and grantAbsent's lease on p until until, checked
// against epoch.
func (t *leaseTable) record(peer *rpc.Peer, p string, epoch uint64, until time.Time) time.Duration {
	if t.nprefix.Load() > 0 && t.underPrefix(p) {
		return 0
	}
	s := t.stripe(p)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.epoch != epoch || s.writing[p] > 0 {
		return 0
	}
	h := s.holders[p]
	if h == nil {
		h = map[*rpc.Peer]time.Time{}
		s.holders[p] = h
	}
	h[peer] = until
	return t.ttl
}

func (t *leaseTable) underPrefix(p string) bool {
	t.prefixMu.Lock()
	defer t.prefixMu.Unlock()
	for q := range t.prefixes {
		if isUnder(p, q) {
			return true
		}
	}
	return false
}

// revocation is a write's hold on the paths it changes (beginWrite).
type revocation struct {
	t        *leaseTable
	paths    []string
	prefixes []string
	once     sync.Once
}

// beginWrite marks paths, and the subtrees at prefixes, as being written,
// and revokes every lease held on them: it returns once every holder has
// acknowledged the revocation or its lease has expired, or with ctx's
// error (the marks are then removed). A path that is a directory with
// leases on absences in it is written as a subtree. The caller applies
// its change, then calls end.
func (t *leaseTable) beginWrite(ctx context.Context, paths, prefixes []string) (*revocation, error) {
	rv := &revocation{t: t, paths: paths}
	now := time.Now()
	held := map[*rpc.Peer]*heldLeases{}
	take := func(p string, holders map[*rpc.Peer]time.Time) {
		for peer, exp := range holders {
			if exp.After(now) {
				hl := held[peer]
				if hl == nil {
					hl = &heldLeases{}
					held[peer] = hl
				}
				hl.inv.Paths = append(hl.inv.Paths, p)
				hl.until = maxTime(hl.until, exp)
			}
		}
	}
	for _, p := range paths {
		s := t.stripe(p)
		s.mu.Lock()
		s.epoch++
		s.writing[p]++
		take(p, s.holders[p])
		delete(s.holders, p)
		if until, ok := s.absentIn[p]; ok {
			delete(s.absentIn, p)
			if until.After(now) {
				prefixes = append(slices.Clip(prefixes), p)
			}
		}
		s.mu.Unlock()
	}
	rv.prefixes = prefixes
	if len(prefixes) > 0 {
		t.prefixMu.Lock()
		for _, q := range prefixes {
			t.prefixes[q]++
		}
		t.nprefix.Store(int32(len(t.prefixes)))
		t.prefixMu.Unlock()
		for i := range t.stripes {
			s := &t.stripes[i]
			s.mu.Lock()
			s.epoch++
			for p, holders := range s.holders {
				for _, q := range prefixes {
					if isUnder(p, q) {
						take(p, holders)
						delete(s.holders, p)
						break
					}
				}
			}
			s.mu.Unlock()
		}
	}
	if len(held) == 0 {
		return rv, nil
	}
	var wg sync.WaitGroup
	for peer, hl := range held {
		wg.Go(func() {
			if hl.revoke(ctx, peer) {
				t.stats.notified.Add(1)
			} else {
				t.stats.expired.Add(1)
			}
		})
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		rv.end()
		return nil, err
	}
	return rv, nil
}

// end removes the write's marks.
func (rv *revocation) end() {
	if rv != nil {
		rv.once.Do(rv.unmark)
	}
}

func (rv *revocation) unmark() {
	t := rv.t
	for _, p := range rv.paths {
		s := t.stripe(p)
		s.mu.Lock()
		s.epoch++ // a stat that read before the write was applied must not be granted now
		if s.writing[p]--; s.writing[p] <= 0 {
			delete(s.writing, p)
		}
		s.mu.Unlock()
	}
	if len(rv.prefixes) > 0 {
		t.prefixMu.Lock()
		for _, q := range rv.prefixes {
			if t.prefixes[q]--; t.prefixes[q] <= 0 {
				delete(t.prefixes, q)
			}
		}
		t.nprefix.Store(int32(len(t.prefixes)))
		t.prefixMu.Unlock()
		for i := range t.stripes {
			s := &t.stripes[i]
			s.mu.Lock()
			s.epoch++
			s.mu.Unlock()
		}
	}
}

// heldLeases are the leases one client holds on what a write changes.
type heldLeases struct {
	inv   rpc.Invalidation
	until time.Time // the latest expiry
}

// revoke tells peer to drop the entries, and waits for its
// acknowledgement (true); if it does not come (the client is gone, slow or
// cut off), it waits until the leases have expired (false).
func (hl *heldLeases) revoke(ctx context.Context, peer *rpc.Peer) bool {
	nctx, cancel := context.WithDeadline(ctx, hl.until)
	defer cancel()
	if err := peer.Notify(nctx, &hl.inv); err == nil {
		return true
	}
	timer := time.NewTimer(time.Until(hl.until))
	defer timer.Stop()
	select {
	case <-timer.C:
	case <-ctx.Done():
	}
	return false
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// sweep drops expired leases and those of clients whose connection ended.
func (t *leaseTable) sweep(now time.Time) {
	for i := range t.stripes {
		s := &t.stripes[i]
		s.mu.Lock()
		for p, holders := range s.holders {
			for peer, exp := range holders {
				if !exp.After(now) || peerGone(peer) {
					delete(holders, peer)
				}
			}
			if len(holders) == 0 {
				delete(s.holders, p)
			}
		}
		for dir, until := range s.absentIn {
			if !until.After(now) {
				delete(s.absentIn, dir)
			}
		}
		s.mu.Unlock()
	}
}

// live reports whether any lease (of a path, or of an absence) is still
// valid at now.
func (t *leaseTable) live(now time.Time) bool {
	for i := range t.stripes {
		s := &t.stripes[i]
		s.mu.Lock()
		for _, holders := range s.holders {
			for peer, exp := range holders {
				if exp.After(now) && !peerGone(peer) {
					s.mu.Unlock()
					return true
				}
			}
		}
		for _, until := range s.absentIn {
			if until.After(now) {
				s.mu.Unlock()
				return true
			}
		}
		s.mu.Unlock()
	}
	return false
}

// count returns the leases held.
func (t *leaseTable) count() int {
	n := 0
	for i := range t.stripes {
		s := &t.stripes[i]
		s.mu.Lock()
		for _, holders := range s.holders {
			n += len(holders)
		}
		s.mu.Unlock()
	}
	return n
}

func peerGone(p *rpc.Peer) bool {
	select {
	case <-p.Done():
		return true
	default:
		return false
	}
}
