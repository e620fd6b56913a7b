package backoff

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestNextDoublesUpToMax(t *testing.T) {
	b := New(10*time.Millisecond, 50*time.Millisecond)
	want := []time.Duration{10, 20, 40, 50, 50}
	for i, w := range want {
		if got := b.Next(); got != w*time.Millisecond {
			t.Fatalf("Next #%d = %v, want %v", i, got, w*time.Millisecond)
		}
	}
	b.Reset()
	if got := b.Next(); got != 10*time.Millisecond {
		t.Fatalf("after Reset: %v", got)
	}
}

func TestJitterStaysInRange(t *testing.T) {
	b := NewJitter(100*time.Millisecond, 100*time.Millisecond)
	for range 1000 {
		d := b.Next()
		if d < 50*time.Millisecond || d >= 150*time.Millisecond {
			t.Fatalf("jittered delay %v outside [50ms, 150ms)", d)
		}
	}
}

func TestSleepEndsWithContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := Sleep(ctx, time.Hour); !errors.Is(err, context.Canceled) {
		t.Fatalf("Sleep on a canceled context = %v", err)
	}
	if err := Sleep(context.Background(), time.Millisecond); err != nil {
		t.Fatalf("Sleep = %v", err)
	}
}

func TestRetry(t *testing.T) {
	errTry := errors.New("try again")
	errFinal := errors.New("final")
	tests := []struct {
		name     string
		attempts int
		results  []error // fn's answers in order; the last repeats
		want     error
		calls    int
	}{
		{"first try", 0, []error{nil}, nil, 1},
		{"after failures", 0, []error{errTry, errTry, nil}, nil, 3},
		{"stop", 0, []error{errTry, Stop(errFinal)}, errFinal, 2},
		{"attempts exhausted", 3, []error{errTry}, errTry, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			calls, retries := 0, 0
			err := Retry(context.Background(), New(time.Microsecond, time.Microsecond), tt.attempts, func() error {
				r := tt.results[min(calls, len(tt.results)-1)]
				calls++
				return r
			}, func(error, time.Duration) { retries++ })
			if !errors.Is(err, tt.want) || (tt.want == nil) != (err == nil) {
				t.Fatalf("Retry = %v, want %v", err, tt.want)
			}
			if calls != tt.calls || retries != calls-1 {
				t.Fatalf("calls %d retries %d, want %d calls", calls, retries, tt.calls)
			}
		})
	}
}

func TestRetryEndsWithContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	errTry := errors.New("try again")
	calls := 0
	err := Retry(ctx, New(time.Hour, time.Hour), 0, func() error {
		calls++
		cancel()
		return errTry
	}, nil)
	if !errors.Is(err, context.Canceled) || !errors.Is(err, errTry) {
		t.Fatalf("Retry = %v, want canceled and the last error", err)
	}
	if calls != 1 {
		t.Fatalf("calls = %d", calls)
	}
}
