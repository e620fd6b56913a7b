// Command ghba is the G-HBA metadata service: the server agent, the client
// CLI, the trace-driven simulator and the benchmarks share this binary.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
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
	exitOK    = 0
	exitError = 1
	exitUsage = 2
)

// usageError marks errors caused by bad command-line input (exit code 2).
type usageError struct{ err error }

func (u usageError) Error() string { return u.err.Error() }
func (u usageError) Unwrap() error { return u.err }

func usageErrorf(format string, a ...any) error { return usageError{fmt.Errorf(format, a...)} }

// exitCode maps an error to the process exit code: 2 for usage errors, 1
// for anything else.
func exitCode(err error) int {
	var u usageError
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &u):
		return exitUsage
	}
	return exitError
}
