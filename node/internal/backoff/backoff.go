// Package backoff holds the one retry delay of the node: exponential, capped,
// with optional jitter, and a sleep that ends early with its context.
//
//	b := backoff.New(50*time.Millisecond, 2*time.Second)
//	for {
//		if err := try(ctx); err == nil {
//			return nil
//		}
//		if err := b.Wait(ctx); err != nil {
//			return err // ctx ended
//		}
//	}
package backoff

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"
)

// Backoff is an exponential delay: Min, doubled after every Next up to Max.
// With Jitter each delay is drawn from [d/2, 3d/2), so that many callers
// retrying at once spread out. The zero value is not usable; use New. A
// Backoff is not safe for concurrent use: each retry loop owns one.
type Backoff struct {
	// Min is the first delay and the delay after Reset.
	Min time.Duration
	// Max caps the delay (before jitter).
	Max time.Duration
	// Jitter spreads each delay over [d/2, 3d/2).
	Jitter bool

	cur time.Duration
}

// New returns a Backoff from first to most without jitter.
func New(first, most time.Duration) *Backoff {
	return &Backoff{Min: first, Max: most}
}

// NewJitter returns a Backoff from first to most with jitter.
func NewJitter(first, most time.Duration) *Backoff {
	return &Backoff{Min: first, Max: most, Jitter: true}
}

// Next returns the delay to wait now and doubles the next one (up to Max).
func (b *Backoff) Next() time.Duration {
	if b.cur <= 0 {
		b.cur = b.Min
	}
	d := b.cur
	b.cur = min(2*b.cur, b.Max)
	if b.Jitter && d > 1 {
		d = d/2 + rand.N(d)
	}
	return d
}

// Current returns the delay the next call to Next is based on (before
// jitter), for log lines such as "retry_in".
func (b *Backoff) Current() time.Duration {
	if b.cur <= 0 {
		return b.Min
	}
	return b.cur
}

// Reset makes the next delay Min again (after a success).
func (b *Backoff) Reset() { b.cur = 0 }

// Wait sleeps for Next() or until ctx ends; it returns ctx.Err() in the
// latter case.
func (b *Backoff) Wait(ctx context.Context) error { return Sleep(ctx, b.Next()) }

// Sleep waits d or until ctx ends; it returns ctx.Err() in the latter case.
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// stopErr marks an error that ends Retry at once.
type stopErr struct{ err error }

func (e stopErr) Error() string { return e.err.Error() }
func (e stopErr) Unwrap() error { return e.err }

// Stop marks err as final: Retry returns err at once instead of retrying.
func Stop(err error) error { return stopErr{err} }

// Retry calls fn until it returns nil or an error marked with Stop, ctx
// ends, or fn has failed attempts times (attempts ≤ 0: no limit). Between
// tries it waits b.Next(); onRetry, if not nil, sees each failure and the
// delay before the next try (for a log line). It returns nil, the error
// given to Stop, the last error after the last attempt, or, when ctx ended,
// an error matching both ctx.Err() and the last error.
func Retry(ctx context.Context, b *Backoff, attempts int, fn func() error, onRetry func(err error, next time.Duration)) error {
	for attempt := 1; ; attempt++ {
		err := fn()
		if err == nil {
			return nil
		}
		if s, ok := err.(stopErr); ok {
			return s.err
		}
		if ctx.Err() != nil {
			return fmt.Errorf("%w (last error: %w)", ctx.Err(), err)
		}
		if attempts > 0 && attempt >= attempts {
			return err
		}
		d := b.Next()
		if onRetry != nil {
			onRetry(err, d)
		}
		if werr := Sleep(ctx, d); werr != nil {
			return fmt.Errorf("%w (last error: %w)", werr, err)
		}
	}
}
