package mount

import (
	"context"
	"errors"
	"time"

	"github.com/ghba/ghba/rpc"
)

// retryUnavailable runs op until it succeeds, fails with anything but a
// plain "unavailable" (an answer, or an outcome the client could not
// learn), or d has passed since the first attempt; between attempts it
// waits 50 ms, doubling to 1 s. A fail-over of a shard takes 2-3 s.
func retryUnavailable(ctx context.Context, d time.Duration, op func(ctx context.Context) error) error {
	deadline := time.Now().Add(d)
	wait := 50 * time.Millisecond
	for {
		err := op(ctx)
		if err == nil || !errors.Is(err, rpc.ErrUnavailable) || errors.Is(err, rpc.ErrOutcomeUnknown) || time.Now().Add(wait).After(deadline) {
			return err
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		wait = min(2*wait, time.Second)
	}
}

// detach returns ctx without its cancellation. The kernel interrupts a
// request when the calling process gets any signal, and Go programs get
// one whenever the runtime preempts a goroutine (SIGURG): a file system
// that gave up on an interrupted request would make their mkdir, write and
// rename fail with EINTR, which no local file system does. Operations are
// bounded by the client's timeouts and RetryTimeout instead.
func detach(ctx context.Context) context.Context { return context.WithoutCancel(ctx) }

// change runs op, a change that is not idempotent (mkdir, create, unlink,
// rmdir, rename), as retry does, and settles an unknown outcome (the
// answer was lost: the change may or may not have been applied) by
// reading the cluster: applied reports whether the change is there. If it
// is, that is success; if not, op is tried again until RetryTimeout. An
// answer that follows a lost one (exists, not found) is checked the same
// way, since the lost attempt may have been applied in between: a
// directory created there is taken as the mkdir's, as NFS clients do.
func (f *FS) change(ctx context.Context, op func(ctx context.Context) error, applied func(ctx context.Context) bool) error {
	deadline := time.Now().Add(f.opts.RetryTimeout)
	lost := false
	for {
		err := f.retry(ctx, op)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, rpc.ErrOutcomeUnknown):
			lost = true
			if applied(ctx) {
				return nil
			}
			if time.Now().After(deadline) || ctx.Err() != nil {
				return err
			}
		case lost && applied(ctx):
			return nil
		default:
			return err
		}
	}
}
