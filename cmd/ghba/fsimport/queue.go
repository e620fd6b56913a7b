package fsimport

import (
	"context"
	"sync"
)

// queue holds the import's pending operations (directory scans and entry
// updates) for a pool of workers. It is unbounded, so that an operation
// can queue more without waiting for a worker, and last in first out, so
// that the import goes depth first and the queue holds about one
// directory's entries per level of the tree.
type queue struct {
	mu       sync.Mutex
	cond     *sync.Cond
	ops      []func(context.Context)
	pending  int // queued or running
	canceled bool
}

func (q *queue) init() { q.cond = sync.NewCond(&q.mu) }

// push queues op.
func (q *queue) push(op func(context.Context)) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.ops = append(q.ops, op)
	q.pending++
	q.cond.Signal()
}

// cancel makes every worker return once its operation has ended.
func (q *queue) cancel() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.canceled = true
	q.cond.Broadcast()
}

// work runs operations until none is queued or running, or cancel.
func (q *queue) work(ctx context.Context) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for {
		for len(q.ops) == 0 && q.pending > 0 && !q.canceled {
			q.cond.Wait()
		}
		if q.pending == 0 || q.canceled {
			q.cond.Broadcast()
			return
		}
		op := q.ops[len(q.ops)-1]
		q.ops[len(q.ops)-1] = nil
		q.ops = q.ops[:len(q.ops)-1]
		q.mu.Unlock()
		op(ctx)
		q.mu.Lock()
		q.pending--
		if q.pending == 0 {
			q.cond.Broadcast()
		}
	}
}
