// Command ghba is the G-HBA metadata service: the server agent, the client
// CLI, the trace-driven simulator and the benchmarks share this binary.
package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/signal"
	"syscall"

	"github.com/ghba/ghba/rpc"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := newRootCmd().ExecuteContext(ctx)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "ghba:", err)
		os.Exit(exitCode(err))
	}
}

// Exit codes (a contract for scripts).
const (
	exitOK       = 0
	exitError    = 1
	exitUsage    = 2
	exitNotFound = 3
	exitExists   = 4
	exitUnavail  = 5
	exitDenied   = 6 // a permission refusal
	exitAuth     = 7 // a missing, wrong or expired credential
)

// usageError marks errors caused by bad command-line input (exit code 2).
type usageError struct{ err error }

func (u usageError) Error() string { return u.err.Error() }
func (u usageError) Unwrap() error { return u.err }

func usageErrorf(format string, a ...any) error { return usageError{fmt.Errorf(format, a...)} }

// exitCode maps an error to the exit code: usage errors and invalid paths
// 2, not found 3, already exists 4, unavailable (including a node that did
// not answer before the deadline) 5, permission refused 6, a missing, wrong
// or expired credential 7, anything else 1. Unavailability is
// tested before non-existence: a path whose home is down is never reported
// as not found.
func exitCode(err error) int {
	var (
		u  usageError
		bg mountExit
	)
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &bg):
		return bg.exitCode()
	case errors.As(err, &u), errors.Is(err, rpc.ErrInvalidPath):
		return exitUsage
	case errors.Is(err, rpc.ErrUnauthenticated):
		return exitAuth
	case errors.Is(err, fs.ErrPermission):
		return exitDenied
	case errors.Is(err, rpc.ErrUnavailable), errors.Is(err, context.DeadlineExceeded):
		return exitUnavail
	case errors.Is(err, fs.ErrNotExist):
		return exitNotFound
	case errors.Is(err, fs.ErrExist):
		return exitExists
	}
	return exitError
}
