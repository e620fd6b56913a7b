package rpc

import (
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"testing"
)

func TestCodeMapping(t *testing.T) {
	for code := CodeOK; code <= CodeInvalid; code++ {
		if code == CodeOK {
			if code.Err("x") != nil {
				t.Error("CodeOK.Err != nil")
			}
			continue
		}
		err := code.Err("msg")
		got := ErrorCode(err)
		want := code
		if code == CodeShuttingDown {
			want = CodeUnavailable
		}
		if got != want {
			t.Errorf("ErrorCode(%v.Err()) = %v, want %v", code, got, want)
		}
		if s := code.sentinel(); s != nil {
			if ErrorCode(fmt.Errorf("wrapped: %w", s)) != want && code != CodeShuttingDown {
				t.Errorf("ErrorCode(wrapped %v) = %v", s, ErrorCode(fmt.Errorf("w: %w", s)))
			}
			if !errors.Is(err, s) {
				t.Errorf("%v.Err() does not match %v", code, s)
			}
		}
		if strings.HasPrefix(code.String(), "code_") {
			t.Errorf("code %d has no name", code)
		}
	}
	if ErrorCode(nil) != CodeOK {
		t.Error("ErrorCode(nil) != CodeOK")
	}
	if ErrorCode(errors.New("x")) != CodeInternal {
		t.Error("plain error is not CodeInternal")
	}
	// Unavailable wins over not-exist: a down home must never read as absent.
	if ErrorCode(errors.Join(fs.ErrNotExist, ErrUnavailable)) != CodeUnavailable {
		t.Error("unavailable+notexist is not CodeUnavailable")
	}
}
