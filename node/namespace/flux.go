package namespace

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ghba/ghba/node/internal/backoff"
	"github.com/ghba/ghba/rpc"
)

// Paths in flux.
//
// A node that has staged (prepared) a part of a transaction marks the
// paths the part changes. A mark covers the path and its whole subtree.
// Until the transaction is resolved:
//   - a reader of a marked path at this node waits until the part is
//     resolved (participant.go asks the coordinator how the transaction
//     ended, and applies or discards the part accordingly), so that no
//     reader sees a change and then not;
//   - an operation that changes paths at this node (a registration) waits
//     for marks on related paths to be resolved;
//   - a new mark on related paths by another transaction is refused (the
//     coordinator retries).
//
// A registration names the paths an operation in progress at this node
// depends on ("parents", which must not be deleted or moved meanwhile) and
// changes ("targets"). Staging a part waits until no registration of
// another transaction is related to its marks, so a part never overlaps an
// operation that started before it. The table is in memory; marks are
// rebuilt from the durable prepared records at start.

// opReg is an operation in progress at this node.
type opReg struct {
	txn     string   // the operation's transaction id, if any
	parents []string // must stay (conflict with marks at or above them)
	targets []string // change (conflict with marks at, above or below them)
	// removes are targets this node may delete in a local batch without
	// staging them: they also conflict with other registrations whose
	// parents are at or under them (a local rmdir waits for a create in
	// the directory, and the other way round).
	removes []string
	done    chan struct{}
}

type fluxTable struct {
	mu    sync.Mutex
	count atomic.Int32 // len(marks): readers skip the table when 0
	marks map[string]*partTxn
	// under counts, for each path, the marks strictly under it, so that
	// markBelow needs no scan of every mark for a path with none under
	// it (a batch of creates checks each of its new names).
	under map[string]int
	regs  map[*opReg]struct{}
}

func (f *fluxTable) init() {
	f.marks = make(map[string]*partTxn)
	f.under = make(map[string]int)
	f.regs = make(map[*opReg]struct{})
}

// setMark marks path m for part p unless m is marked already. Callers
// hold mu.
func (f *fluxTable) setMark(m string, p *partTxn) {
	if _, ok := f.marks[m]; ok {
		return
	}
	f.marks[m] = p
	f.countUnder(m, 1)
	f.count.Store(int32(len(f.marks)))
}

// dropMark removes p's mark on path m. Callers hold mu.
func (f *fluxTable) dropMark(m string, p *partTxn) {
	if f.marks[m] != p {
		return
	}
	delete(f.marks, m)
	f.countUnder(m, -1)
	f.count.Store(int32(len(f.marks)))
}

// countUnder adds d to the count of marks under each proper ancestor of
// m. Callers hold mu.
func (f *fluxTable) countUnder(m string, d int) {
	for a := m; a != "/"; {
		a = directParent(a)
		if f.under[a] += d; f.under[a] == 0 {
			delete(f.under, a)
		}
	}
}

// markAtOrAbove returns a mark on p or an ancestor of p whose transaction
// is not txn. Callers hold mu.
func (f *fluxTable) markAtOrAbove(p, txn string) *partTxn {
	if m := f.marks[p]; m != nil && m.id != txn {
		return m
	}
	for i := len(p) - 1; i > 0; i-- {
		if p[i] == '/' {
			if m := f.marks[p[:i]]; m != nil && m.id != txn {
				return m
			}
		}
	}
	if p != "/" {
		if m := f.marks["/"]; m != nil && m.id != txn {
			return m
		}
	}
	return nil
}

// markBelow returns a mark strictly under p whose transaction is not txn.
// Callers hold mu.
func (f *fluxTable) markBelow(p, txn string) *partTxn {
	if f.under[p] == 0 {
		return nil
	}
	for mp, m := range f.marks {
		if m.id != txn && strictlyUnder(mp, p) {
			return m
		}
	}
	return nil
}

// conflictFor returns a mark that conflicts with registration r. Callers
// hold mu.
func (f *fluxTable) conflictFor(r *opReg) *partTxn {
	for _, p := range r.parents {
		if m := f.markAtOrAbove(p, r.txn); m != nil {
			return m
		}
	}
	for _, p := range r.targets {
		if m := f.markAtOrAbove(p, r.txn); m != nil {
			return m
		}
		if m := f.markBelow(p, r.txn); m != nil {
			return m
		}
	}
	return nil
}

// regBlockedBy returns a registration of another operation that r must
// wait for (see opReg.removes). Callers hold mu.
func (f *fluxTable) regBlockedBy(r *opReg) *opReg {
	if len(f.regs) == 0 {
		return nil
	}
	for e := range f.regs {
		if e.txn == r.txn && r.txn != "" {
			continue
		}
		if removesParent(r.removes, e.parents) || removesParent(e.removes, r.parents) {
			return e
		}
	}
	return nil
}

// removesParent reports whether a path of removes is at or above a path
// of parents.
func removesParent(removes, parents []string) bool {
	for _, x := range removes {
		for _, a := range parents {
			if isUnder(a, x) {
				return true
			}
		}
	}
	return false
}

// regConflicts reports whether registration r is related to a new mark m.
func regConflicts(r *opReg, m string) bool {
	for _, p := range r.parents {
		if isUnder(p, m) {
			return true
		}
	}
	for _, p := range r.targets {
		if isUnder(p, m) || isUnder(m, p) {
			return true
		}
	}
	return false
}

// beginOp records an operation in progress, first waiting (resolving
// them with their coordinators) for marks that conflict with it, and for
// operations it must not overlap (see opReg.removes). The caller must
// call endOp.
func (h *home) beginOp(ctx context.Context, txn string, parents, targets, removes []string) (*opReg, error) {
	r := &opReg{txn: txn, parents: parents, targets: append(targets, removes...), removes: removes, done: make(chan struct{})}
	wait := backoff.New(h.r.tune.MarkBackoffMin, h.r.tune.MarkBackoffMax)
	for {
		f := &h.txns.flux
		f.mu.Lock()
		m := f.conflictFor(r)
		var e *opReg
		if m == nil {
			e = f.regBlockedBy(r)
		}
		if m == nil && e == nil {
			f.regs[r] = struct{}{}
			f.mu.Unlock()
			return r, nil
		}
		f.mu.Unlock()
		if e != nil {
			select {
			case <-e.done:
				continue
			case <-ctx.Done():
				return nil, fmt.Errorf("waiting for an operation on a related path: %w: %w", rpc.ErrUnavailable, ctx.Err())
			}
		}
		pending, err := h.txns.await(ctx, m)
		if err != nil {
			return nil, err
		}
		if pending {
			if err := wait.Wait(ctx); err != nil {
				return nil, fmt.Errorf("waiting for transaction %s: %w: %w", m.id, rpc.ErrUnavailable, err)
			}
		}
	}
}

// endOp ends an operation recorded by beginOp.
func (h *home) endOp(r *opReg) {
	if r == nil {
		return
	}
	h.txns.flux.mu.Lock()
	delete(h.txns.flux.regs, r)
	h.txns.flux.mu.Unlock()
	close(r.done)
}

// addMarks marks paths for part p. It fails (busy) if a mark of another
// transaction is related to one of them; otherwise it returns the done
// channels of the registrations of other transactions related to them,
// which the caller must wait for.
func (t *participant) addMarks(p *partTxn) (wait []chan struct{}, conflict *partTxn) {
	f := &t.flux
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, m := range p.marks {
		if c := f.markAtOrAbove(m, p.id); c != nil {
			return nil, c
		}
		if c := f.markBelow(m, p.id); c != nil {
			return nil, c
		}
	}
	for _, m := range p.marks {
		f.setMark(m, p)
	}
	for r := range f.regs {
		if r.txn == p.id {
			continue
		}
		for _, m := range p.marks {
			if regConflicts(r, m) {
				wait = append(wait, r.done)
				break
			}
		}
	}
	return wait, nil
}

// removeMarks removes the marks of part p.
func (t *participant) removeMarks(p *partTxn) {
	f := &t.flux
	f.mu.Lock()
	for _, m := range p.marks {
		f.dropMark(m, p)
	}
	f.mu.Unlock()
}

// waitAll waits for every channel, or until ctx is done or d passes.
func waitAll(ctx context.Context, chans []chan struct{}, d time.Duration) bool {
	if len(chans) == 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	for _, c := range chans {
		select {
		case <-c:
		case <-ctx.Done():
			return false
		case <-t.C:
			return false
		}
	}
	return true
}

// forceMarks marks p's paths without checks (loading prepared parts at
// start, when they are known not to conflict).
func (t *participant) forceMarks(p *partTxn) {
	f := &t.flux
	f.mu.Lock()
	for _, m := range p.marks {
		f.setMark(m, p)
	}
	f.mu.Unlock()
}
