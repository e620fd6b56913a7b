package fsimport

import (
	"context"
	"sync"

	"github.com/ghba/ghba/rpc"
	"github.com/ghba/ghba/rpc/client"
)

// batcher gathers the batched creates of many directories into few
// requests (client.Client.BatchCreateDirs, one request per home): while
// limit requests are in flight, the directories that workers hand it
// wait, and the next request takes as many of them as fit. Most
// directories of a real tree hold a few entries, and a request per
// directory cost more than its entries (a log entry, and a transaction
// per new subdirectory placed on another shard); together, a shard
// writes one log entry and one transaction per other shard for all of
// them.
type batcher struct {
	c     *client.Client
	limit int // requests in flight
	// maxEntries and maxText bound one request's entries and the bytes
	// of their texts.
	maxEntries, maxText int

	mu       sync.Mutex
	pending  []*dirJob
	inflight int
}

// dirJob is one directory's batched create, waiting for its result.
type dirJob struct {
	req  rpc.BatchCreateRequest
	res  rpc.BatchCreateDirResult
	done chan struct{}
}

// create creates req's entries together with those of other directories
// handed in meanwhile and returns req's result. Its caller may send other
// directories' requests too before it returns: a worker that finds fewer
// than limit requests in flight sends until none waits.
func (b *batcher) create(ctx context.Context, req rpc.BatchCreateRequest) rpc.BatchCreateDirResult {
	j := &dirJob{req: req, done: make(chan struct{})}
	b.mu.Lock()
	b.pending = append(b.pending, j)
	for b.inflight < b.limit && len(b.pending) > 0 {
		jobs := b.take()
		b.inflight++
		b.mu.Unlock()
		b.send(ctx, jobs)
		b.mu.Lock()
		b.inflight--
	}
	b.mu.Unlock()
	<-j.done
	return j.res
}

// take removes the longest prefix of the pending jobs that fits in one
// request (at least one job). Callers hold mu.
func (b *batcher) take() []*dirJob {
	n, entries, text := 0, 0, 0
	for _, j := range b.pending {
		e, t := len(j.req.Entries), 0
		for i := range j.req.Entries {
			t += len(j.req.Entries[i].Text)
		}
		if n > 0 && (entries+e > b.maxEntries || text+t > b.maxText) {
			break
		}
		n, entries, text = n+1, entries+e, text+t
	}
	jobs := b.pending[:n:n]
	b.pending = b.pending[n:]
	return jobs
}

// send sends jobs in one call and hands each its directory's result (the
// call's error when it failed as a whole).
func (b *batcher) send(ctx context.Context, jobs []*dirJob) {
	req := &rpc.BatchCreateDirsRequest{Dirs: make([]rpc.BatchCreateRequest, len(jobs))}
	for i, j := range jobs {
		req.Dirs[i] = j.req
	}
	resp, err := b.c.BatchCreateDirs(ctx, req)
	for i, j := range jobs {
		if err != nil {
			j.res = rpc.BatchCreateDirResult{Code: rpc.ErrorCode(err), Message: err.Error()}
		} else {
			j.res = resp.Dirs[i]
		}
		close(j.done)
	}
}
