package namespace

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/ghba/ghba/node/internal/backoff"
	"github.com/ghba/ghba/node/store"
	"github.com/ghba/ghba/rpc"
)

// Inode ids (docs/design.md, "Inode ids"). Every inode gets a
// cluster-unique id when it is created, which it keeps for ever (a rename,
// even a directory's whose subtree is re-keyed on every shard, moves the
// inode's value with its id). "/" has RootID. The others come in blocks
// that the root shard hands out from a counter (the meta record idsNextKey
// of its store, next to "/"), advanced by a compare-and-set batch through
// its Raft log, so that no two blocks overlap whichever leader hands them
// out. A home (one leadership of one shard) takes a block when it first
// creates an inode and another when that one is used up, and keeps it in
// memory only: a new leadership takes a new block, so an id is never
// given twice, and the ids of a block a leadership did not use are never
// given at all (there are 2^64).
//
// Inodes created before ids existed have ID 0. A home whose store lacks
// the meta record idsLegacyKey numbers them in the background
// (numberLegacy), and the entries naming them when the entry is in the
// same shard; an entry in another shard keeps ID 0 (a listing then says
// "unknown", and the mount stats the child).

const (
	// RootID is the id of "/".
	RootID uint64 = 1
	// idsNextKey is the root shard's meta record of the first id no block
	// holds (8 bytes, big-endian; absent: firstID).
	idsNextKey = "ids/next"
	// idsLegacyKey is a shard's meta record that its inodes without an id
	// have been numbered (numberLegacy).
	idsLegacyKey = "ids/legacy-done"
	// firstID is the first id of the first block.
	firstID = RootID + 1
	// minIDBlock and maxIDBlock bound the ids a home takes at once: it
	// starts with minIDBlock and doubles the next block while it uses one
	// up within idBlockQuick.
	minIDBlock   = 4096
	maxIDBlock   = 1 << 20
	idBlockQuick = time.Minute
	// legacyBatch is how many inodes one batch of the legacy pass numbers.
	legacyBatch = 256
)

// idBlock is the block of ids a home gives its new inodes.
type idBlock struct {
	mu         sync.Mutex
	next, end  uint64 // [next, end) are left
	size       uint64 // the last block's size
	taken      time.Time
	allocMu    sync.Mutex // at the root shard's home: one counter update at a time
	legacyDone bool       // numberLegacy finished (tests)
}

// homeAllocIDsReq asks the root shard's leader for a block of N new ids.
type homeAllocIDsReq struct {
	shardReq
	N uint64 `json:"n"`
}

// homeAllocIDsResp is a block: the ids [First, First+N).
type homeAllocIDsResp struct {
	First uint64 `json:"first"`
	N     uint64 `json:"n"`
}

// newIDs returns k ids never given to any inode, from this home's block
// (taking a new block from the root shard when it runs out).
func (h *home) newIDs(ctx context.Context, k int) ([]uint64, error) {
	if k <= 0 {
		return nil, nil
	}
	b := &h.ids
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]uint64, 0, k)
	for len(out) < k {
		if b.next == b.end {
			size := uint64(minIDBlock)
			if b.size != 0 {
				size = b.size
				if time.Since(b.taken) < idBlockQuick {
					size = min(2*size, maxIDBlock)
				}
			}
			size = max(size, uint64(k-len(out)))
			first, err := h.allocIDs(ctx, size)
			if err != nil {
				return nil, fmt.Errorf("new inode ids: %w", err)
			}
			b.next, b.end, b.size, b.taken = first, first+size, size, time.Now()
		}
		out = append(out, b.next)
		b.next++
	}
	return out, nil
}

// newID returns one new id (newIDs).
func (h *home) newID(ctx context.Context) (uint64, error) {
	ids, err := h.newIDs(ctx, 1)
	if err != nil {
		return 0, err
	}
	return ids[0], nil
}

// allocIDs takes a block of n ids from the root shard (Home.AllocIDs, run
// here when this node leads the root shard). Unlike most writes, a call
// whose outcome is unknown (the root shard's leader lost its leadership
// while committing) is simply made again, for at most LeaderWait: a block
// taken and never answered is only a range of ids nobody uses.
func (h *home) allocIDs(ctx context.Context, n uint64) (uint64, error) {
	var (
		resp *homeAllocIDsResp
		err  error
	)
	wait := backoff.NewJitter(10*time.Millisecond, 250*time.Millisecond)
	deadline := time.Now().Add(h.r.tune.LeaderWait)
	var root string
	for {
		root = h.r.dir.RootShard()
		if root == "" {
			err = fmt.Errorf("%w: the root shard is not known yet", rpc.ErrUnavailable)
		} else {
			resp, err = callShard(ctx, h.r, root, methodHomeAllocIDs, &homeAllocIDsReq{N: n}, (*home).handleAllocIDs)
		}
		if err == nil || !isUnavailable(err) && !retryable(err) || time.Now().After(deadline) || wait.Wait(ctx) != nil {
			break
		}
	}
	if err != nil {
		// Not the caller's shard that failed but the root shard: a
		// "not the leader" from it must not read as one about the shard
		// the caller asked, so it is reported as unavailable.
		if retryable(err) {
			err = asUnavailable(err)
		}
		return 0, fmt.Errorf("root shard %s: %w", root, err)
	}
	if resp.N != n || resp.First < firstID || resp.First > math.MaxUint64-n {
		return 0, fmt.Errorf("%w: block of %d ids from %d for %d asked", rpc.ErrProtocol, resp.N, resp.First, n)
	}
	return resp.First, nil
}

// handleAllocIDs hands out the next block of r.N ids: it advances the
// counter idsNextKey of this shard, which must be the root shard (the
// batch requires "/"), with a compare-and-set through the shard's log.
func (h *home) handleAllocIDs(ctx context.Context, r *homeAllocIDsReq) (*homeAllocIDsResp, error) {
	if r.N == 0 || r.N > maxIDBlock {
		return nil, fmt.Errorf("%w: a block of %d ids (1 to %d)", rpc.ErrBadRequest, r.N, maxIDBlock)
	}
	b := &h.ids
	b.allocMu.Lock()
	defer b.allocMu.Unlock()
	for attempt := 0; ; attempt++ {
		cur, err := h.st.GetMeta(ctx, idsNextKey)
		next := firstID
		switch {
		case err == nil:
			if len(cur) != 8 {
				return nil, fmt.Errorf("shard %s: corrupt id counter (%d bytes)", h.id, len(cur))
			}
			next = binary.BigEndian.Uint64(cur)
		case errors.Is(err, store.ErrNotFound):
			cur = nil // the counter is absent: require it still is
		default:
			return nil, err
		}
		if next > math.MaxUint64-r.N {
			return nil, fmt.Errorf("shard %s: inode ids exhausted", h.id)
		}
		var sb store.Batch
		sb.RequireInodeExists("/") // the counter lives with "/", in the root shard only
		sb.RequireMeta(idsNextKey, cur)
		sb.SetMeta(idsNextKey, binary.BigEndian.AppendUint64(nil, next+r.N))
		err = h.apply(ctx, &sb)
		switch {
		case err == nil:
			return &homeAllocIDsResp{First: next, N: r.N}, nil
		case errors.Is(err, store.ErrConflict) && attempt < 3:
			continue // another leadership moved the counter: read it again
		case errors.Is(err, store.ErrNotFound):
			return nil, fmt.Errorf("%w: shard %s does not home / and keeps no id counter", rpc.ErrUnavailable, h.id)
		}
		return nil, fmt.Errorf("taking inode ids: %w", storeErr(err))
	}
}

// numberLegacy gives an id to every inode of the shard that has none (one
// created before ids existed), unless the shard's store records that this
// was done. It runs in the background of a new leadership, in batches, and
// starts again from the top until a pass finds nothing left to number;
// then it records that in the store through the shard's log.
func (h *home) numberLegacy() {
	ctx := h.ctx
	if _, err := h.st.GetMeta(ctx, idsLegacyKey); err == nil {
		h.setLegacyDone()
		return
	}
	wait := backoff.NewJitter(100*time.Millisecond, 10*time.Second)
	for ctx.Err() == nil {
		if !h.writesIDs() {
			// A replica may run a build without ids: the log carries
			// none yet (docs/design.md, "Upgrades and unknown commands").
			if wait.Wait(ctx) != nil {
				return
			}
			continue
		}
		n, clean, err := h.numberLegacyPass(ctx)
		if err == nil && clean {
			var b store.Batch
			b.SetMeta(idsLegacyKey, []byte{1})
			if err = h.apply(ctx, &b); err == nil {
				if n > 0 {
					h.log.Info("numbered the inodes created before inode ids", "inodes", n)
				}
				h.setLegacyDone()
				return
			}
		}
		if err != nil && ctx.Err() == nil {
			h.log.Warn("numbering inodes without an id; will retry", "numbered", n, "err", err)
		}
		if wait.Wait(ctx) != nil {
			return
		}
	}
}

// writesIDs reports whether the shard's log carries inode ids now.
func (h *home) writesIDs() bool { return h.writesFormat(store.BatchFormatV2) }

// writesFormat reports whether the shard's replica writes batch format v
// now (a replica without LogFormat writes the newest).
func (h *home) writesFormat(v byte) bool {
	lf, ok := h.rep.(interface{ LogFormat() byte })
	return !ok || lf.LogFormat() >= v
}

// maxPathLen returns the longest path the shard's log carries now:
// store.MaxPathLen once it writes batch format 5, else the older formats'
// limit (a directory rename must not make longer paths before then: an
// older build would halt on the batches that name them).
func (h *home) maxPathLen() int {
	if h.writesFormat(store.BatchFormatV5) {
		return store.MaxPathLen
	}
	return store.LegacyMaxPathLen
}

// legacyNumbered reports whether numberLegacy has finished.
func (h *home) legacyNumbered() bool {
	h.ids.mu.Lock()
	defer h.ids.mu.Unlock()
	return h.ids.legacyDone
}

func (h *home) setLegacyDone() {
	h.ids.mu.Lock()
	h.ids.legacyDone = true
	h.ids.mu.Unlock()
}

// numberLegacyPass scans the store once and numbers the inodes without
// an id, legacyBatch at a time; clean reports that every one it met was
// numbered (none changed under it).
func (h *home) numberLegacyPass(ctx context.Context) (numbered int, clean bool, err error) {
	clean = true
	after := ""
	for {
		var paths []string
		last := ""
		err := h.st.SearchInodes(ctx, "/", after, nil, func(p string, ino store.Inode) error {
			last = p
			if ino.ID == 0 {
				paths = append(paths, p)
			}
			if len(paths) == legacyBatch {
				return errStopScan
			}
			return nil
		})
		if err != nil && !errors.Is(err, errStopScan) {
			return numbered, false, err
		}
		if len(paths) > 0 {
			n, all, err := h.numberBatch(ctx, paths)
			numbered += n
			if err != nil {
				return numbered, false, err
			}
			clean = clean && all
		}
		if !errors.Is(err, errStopScan) {
			return numbered, clean, nil
		}
		after = last
	}
}

// numberBatch numbers the inodes of paths that still have no id, and
// their entries when this shard holds them, in one batch: under the locks
// and a registration of the paths (no operation of this home, and no
// transaction part, changes them meanwhile), with each inode's version
// required (a change the batch did not see fails it) and increased (a
// read-modify-write that began before fails). all is false when the
// batch failed on a changed inode (the next pass tries again).
func (h *home) numberBatch(ctx context.Context, paths []string) (numbered int, all bool, err error) {
	need := 0
	for _, p := range paths {
		if p != "/" {
			need++
		}
	}
	ids, err := h.newIDs(ctx, need)
	if err != nil {
		return 0, false, err
	}
	keys := make([]string, 0, 2*len(paths))
	for _, p := range paths {
		keys = append(keys, "a:"+p, "e:"+p)
	}
	unlock, err := h.locks.lock(ctx, keys...)
	if err != nil {
		return 0, false, err
	}
	defer unlock()
	reg, err := h.beginOp(ctx, h.newTxnID(), nil, paths, nil)
	if err != nil {
		return 0, false, err
	}
	defer h.endOp(reg)
	var b store.Batch
	for _, p := range paths {
		ino, err := h.st.GetInode(ctx, p)
		if errors.Is(err, store.ErrNotFound) {
			continue // removed or moved since the scan
		} else if err != nil {
			return 0, false, err
		}
		if ino.ID != 0 {
			continue
		}
		id := RootID
		if p != "/" {
			id, ids = ids[0], ids[1:]
		}
		b.RequireInodeVersion(p, ino.Version)
		ino.ID = id
		ino.Version++
		b.PutInode(p, ino)
		numbered++
		if p == "/" {
			continue
		}
		dir, name := splitPath(p)
		if _, err := h.st.GetInode(ctx, dir); err != nil {
			continue // the entry is in the directory's shard, another one
		}
		e, err := h.st.GetEntry(ctx, dir, name)
		if err == nil && e.ID == 0 && e.Home == h.id {
			b.RequireEntryExists(dir, name)
			e.ID = id
			b.PutEntry(dir, e)
		}
	}
	if numbered == 0 {
		return 0, true, nil
	}
	b.KeepDirTimes() // the same entries, with their ids
	if err := h.apply(ctx, &b); err != nil {
		if errors.Is(err, store.ErrConflict) || errors.Is(err, store.ErrNotFound) {
			return 0, false, nil
		}
		return 0, false, err
	}
	return numbered, true, nil
}
