package rpc

import (
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"testing"
)

func TestCodeMapping(t *testing.T) {
	last := Code(len(codeNames) - 1)
	if last != CodeNameTooLong {
		t.Errorf("last named code = %v, want %v", last, CodeNameTooLong)
	}
	for code := CodeOK; code <= last; code++ {
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
	// Unauthenticated is its own class, not a permission refusal, and is
	// reported first when an error says both.
	if ErrorCode(errors.Join(fs.ErrPermission, ErrUnauthenticated)) != CodeUnauthenticated {
		t.Error("permission+unauthenticated is not CodeUnauthenticated")
	}
	if err := CodeUnauthenticated.Err("no token"); errors.Is(err, fs.ErrPermission) || !errors.Is(err, ErrUnauthenticated) || !errors.Is(err, ErrRemote) {
		t.Errorf("CodeUnauthenticated.Err matches wrongly: %v", err)
	}
	if errors.Is(CodePermission.Err("denied"), ErrUnauthenticated) {
		t.Error("CodePermission matches ErrUnauthenticated")
	}
	if s := CodeUnauthenticated.String(); s != "unauthenticated" {
		t.Errorf("CodeUnauthenticated.String() = %q", s)
	}
	// A version mismatch is its own class: not a conflict to retry
	// blindly, not "exists", not "unavailable".
	vm := CodeVersionMismatch.Err("version 3, not 2")
	if !errors.Is(vm, ErrVersionMismatch) || errors.Is(vm, fs.ErrExist) || errors.Is(vm, ErrUnavailable) || ErrorCode(fmt.Errorf("setattr /a: %w", ErrVersionMismatch)) != CodeVersionMismatch {
		t.Errorf("CodeVersionMismatch maps wrongly: %v", vm)
	}
	long := CodeNameTooLong.Err("a path of 40000 bytes")
	if !errors.Is(long, ErrNameTooLong) || !errors.Is(long, ErrInvalidPath) || !errors.Is(long, fs.ErrInvalid) ||
		ErrorCode(fmt.Errorf("%w: %w", ErrInvalidPath, ErrNameTooLong)) != CodeNameTooLong {
		t.Errorf("CodeNameTooLong maps wrongly: %v", long)
	}
	us := CodeUnsupported.Err("special files need shard log format 3")
	if !errors.Is(us, errors.ErrUnsupported) || errors.Is(us, ErrUnavailable) || ErrorCode(fmt.Errorf("mknod /p: %w", errors.ErrUnsupported)) != CodeUnsupported {
		t.Errorf("CodeUnsupported maps wrongly: %v", us)
	}
}

func TestNotLeaderHint(t *testing.T) {
	local := &NotLeaderError{Shard: "n3", Leader: "n2", Addr: "10.0.0.2:7400"}
	for _, tc := range []struct {
		name string
		err  error
	}{
		{"local", fmt.Errorf("wrapped: %w", local)},
		{"remote", CodeNotLeader.Err(local.Error())},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !errors.Is(tc.err, ErrNotLeader) || !errors.Is(tc.err, ErrUnavailable) {
				t.Fatalf("%v does not match ErrNotLeader and ErrUnavailable", tc.err)
			}
			if ErrorCode(tc.err) != CodeNotLeader {
				t.Fatalf("ErrorCode(%v) = %v", tc.err, ErrorCode(tc.err))
			}
			leader, addr, ok := NotLeaderHint(tc.err)
			if !ok || leader != "n2" || addr != "10.0.0.2:7400" {
				t.Fatalf("NotLeaderHint = %q %q %v", leader, addr, ok)
			}
		})
	}
	if _, _, ok := NotLeaderHint(CodeNotLeader.Err((&NotLeaderError{Shard: "n3"}).Error())); ok {
		t.Fatal("a hint without a leader reported ok")
	}
	if _, _, ok := NotLeaderHint(CodeUnavailable.Err("down")); ok {
		t.Fatal("an unavailable error gave a hint")
	}
}
