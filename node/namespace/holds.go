package namespace

import (
	"context"
	"fmt"
	"io/fs"
	"sync"
	"time"

	"github.com/ghba/ghba/rpc"
)

// Holds (docs/design.md, "Garbage collection of contents"). A client that
// has files open (a mount) holds their inodes at the shards that home
// them, and renews the holds while the files stay open. A shard's leader
// deletes no trashed object of a held inode, so a file removed while open
// somewhere keeps its contents until its last close there, however long
// after the grace period. Holds live in the leader's memory: a new leader
// deletes nothing until a hold's lifetime has passed since its leadership
// began, by which time every client that still holds has renewed with it.
// A client that dies stops renewing, and its holds end after their
// lifetime.

// maxHoldTTL bounds how long a hold lasts unless renewed.
const maxHoldTTL = 30 * time.Second

// holdTTL is how long a hold lasts: the grace period, at most maxHoldTTL
// (a shorter grace makes the collection prompter, and the holds with it).
func (n *Namespace) holdTTL() time.Duration {
	return min(maxHoldTTL, n.gcGrace)
}

// holdTable is a shard leader's holds: until when each inode id is held.
type holdTable struct {
	mu    sync.Mutex
	until map[uint64]time.Time
}

// renew holds ids until until, or releases them.
func (t *holdTable) renew(ids []uint64, until time.Time, release bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.until == nil {
		t.until = make(map[uint64]time.Time)
	}
	for _, id := range ids {
		if release {
			delete(t.until, id)
		} else {
			t.until[id] = until
		}
	}
}

// held reports whether id is held at now, and forgets the holds that
// ended.
func (t *holdTable) held(id uint64, now time.Time) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	u, ok := t.until[id]
	if ok && now.After(u) {
		delete(t.until, id)
		return false
	}
	return ok
}

// Hold holds (or releases) the contents of inodes r.IDs at the leader of
// shard r.Shard.
func (n *Namespace) Hold(ctx context.Context, r *rpc.HoldRequest) (*rpc.HoldResponse, error) {
	switch {
	case r.Shard == "":
		return nil, fmt.Errorf("%w: a hold names no shard", fs.ErrInvalid)
	case len(r.IDs) > rpc.MaxHoldIDs:
		return nil, fmt.Errorf("%w: %d ids in one hold (at most %d)", fs.ErrInvalid, len(r.IDs), rpc.MaxHoldIDs)
	}
	resp, err := callShard(ctx, n, r.Shard, methodHomeHold, &homeHoldReq{IDs: r.IDs, Release: r.Release}, (*home).holdHere)
	if err != nil {
		return nil, err
	}
	return &rpc.HoldResponse{TTL: resp.TTL}, nil
}

// holdHere renews or releases holds at this shard's leader.
func (h *home) holdHere(_ context.Context, r *homeHoldReq) (*homeHoldResp, error) {
	ttl := h.r.holdTTL()
	h.holds.renew(r.IDs, time.Now().Add(ttl), r.Release)
	return &homeHoldResp{TTL: int64(ttl)}, nil
}

// holdsKnown reports whether this leadership has lasted a hold's lifetime:
// only then does it know every hold in force.
func (h *home) holdsKnown(now time.Time) bool {
	return now.Sub(h.led) >= h.r.holdTTL()
}
