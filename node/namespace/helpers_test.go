package namespace_test

import (
	"errors"
	"fmt"
	"io/fs"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ghba/ghba/rpc"
	"github.com/ghba/ghba/rpc/rpctest"
)

// errKind names the sentinel an error matches, for comparisons in tests.
func errKind(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, rpc.ErrInvalidPath):
		return "invalid"
	case errors.Is(err, rpc.ErrUnavailable):
		return "unavailable"
	case errors.Is(err, fs.ErrNotExist):
		return "notexist"
	case errors.Is(err, fs.ErrExist):
		return "exist"
	case errors.Is(err, rpc.ErrNotDir):
		return "notdir"
	case errors.Is(err, rpc.ErrIsDir):
		return "isdir"
	case errors.Is(err, rpc.ErrNotEmpty):
		return "notempty"
	case errors.Is(err, fs.ErrInvalid):
		return "einval"
	}
	return "other: " + err.Error()
}

func mustOK(t testing.TB, err error, what string, args ...any) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", fmt.Sprintf(what, args...), err)
	}
}

// loadCheck counts the rounds of a test's background workers
// (rpctest.Loop) and their failures, of which it reports the first 20.
type loadCheck struct {
	t       testing.TB
	timeout time.Duration // of a wait for more rounds
	done    atomic.Int64
	failed  atomic.Int64
}

// fail records a failed round.
func (l *loadCheck) fail(format string, a ...any) {
	if l.failed.Add(1) <= 20 {
		l.t.Errorf(format, a...)
	}
}

// wait waits until k more rounds are done.
func (l *loadCheck) wait(k int64) {
	l.t.Helper()
	want := l.done.Load() + k
	rpctest.Eventually(l.t, l.timeout, fmt.Sprintf("%d more rounds", k), func() error {
		if n := l.done.Load(); n < want {
			return fmt.Errorf("%d of %d", n, want)
		}
		return nil
	})
}
