package rpctest

import (
	"bytes"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/hashicorp/go-hclog"
)

// LogEnv is the environment variable that sends test logs to stderr as
// they are written instead of only when a test fails: "1", "true" or
// "debug" at debug level, "info", "warn" or "error" at that level.
const LogEnv = "GHBA_TEST_LOG"

// Logger returns a logger for the code under test t. By default it keeps
// what is logged at info level and above in memory and prints it with
// t.Log when t has failed, once t and its subtests are done; with LogEnv
// set it writes to stderr at once instead (see LogEnv). args are added to
// every line, as with slog.Logger.With (for example "node", id).
//
// Unlike a handler writing to t.Log directly, it is safe for goroutines
// that log after t has finished.
func Logger(t testing.TB, args ...any) *slog.Logger {
	if level, ok := envLevel(os.Getenv(LogEnv)); ok {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})).With(args...)
	}
	buf := new(SyncBuffer)
	t.Cleanup(func() {
		if t.Failed() && buf.Len() > 0 {
			t.Logf("log of %s:\n%s", t.Name(), buf.String())
		}
	})
	return slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelInfo})).With(args...)
}

// HCLogger is Logger for code that logs through hclog (hashicorp/raft and
// its transports), named name: it keeps warnings and errors in memory and
// prints them with t.Log when t has failed; with LogEnv set it writes to
// stderr at once instead.
func HCLogger(t testing.TB, name string) hclog.Logger {
	if level, ok := envLevel(os.Getenv(LogEnv)); ok {
		return hclog.New(&hclog.LoggerOptions{Name: name, Output: os.Stderr, Level: hclog.LevelFromString(level.String())})
	}
	buf := new(SyncBuffer)
	t.Cleanup(func() {
		if t.Failed() && buf.Len() > 0 {
			t.Logf("log of %s:\n%s", name, buf.String())
		}
	})
	return hclog.New(&hclog.LoggerOptions{Name: name, Output: buf, Level: hclog.Warn})
}

// envLevel parses the value of LogEnv; false means "not set": buffer.
func envLevel(v string) (slog.Level, bool) {
	switch strings.ToLower(v) {
	case "", "0", "false":
		return 0, false
	case "1", "true":
		return slog.LevelDebug, true
	}
	var l slog.Level
	if err := l.UnmarshalText([]byte(v)); err != nil {
		return slog.LevelDebug, true
	}
	return l, true
}

// SyncBuffer is a buffer that goroutines may write to while a test reads
// it (for example a logger's or a command's output). Its zero value is
// empty and ready to use.
type SyncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write implements io.Writer.
func (b *SyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// Len returns the number of bytes written.
func (b *SyncBuffer) Len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Len()
}

// String returns what was written.
func (b *SyncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
