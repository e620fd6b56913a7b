// Package rpctest: TEMPORARY stand-in until the rpctest branch is merged.
package rpctest

import (
	"bytes"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"
)

type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Logger is temporary.
func Logger(t testing.TB) *slog.Logger {
	if os.Getenv("GHBA_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	buf := new(syncBuffer)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("logs:\n%s", buf.String())
		}
	})
	return slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

// Eventually is temporary.
func Eventually(t testing.TB, d time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not true after %v: %v", what, d, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
