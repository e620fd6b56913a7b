package namespace_test

import (
	"errors"
	"fmt"
	"io/fs"
	"sync"
	"testing"

	"github.com/ghba/ghba/rpc"
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

// loop runs n workers, each calling step(w, i) for i = 0, 1, … until the
// returned halt is called. halt waits for them; it is also registered as
// a Cleanup, so the workers stop before the cluster closes (an earlier
// Cleanup) even when a wait fails the test.
func loop(t *testing.T, n int, step func(w, i int)) (halt func()) {
	stop := make(chan struct{})
	var (
		once sync.Once
		wg   sync.WaitGroup
	)
	for w := range n {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				step(w, i)
			}
		})
	}
	halt = func() {
		once.Do(func() { close(stop) })
		wg.Wait()
	}
	t.Cleanup(halt)
	return halt
}
