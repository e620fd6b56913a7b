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
