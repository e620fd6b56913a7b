package namespace_test

import (
	"errors"
	"fmt"
	"io/fs"
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
