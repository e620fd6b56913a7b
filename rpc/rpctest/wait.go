package rpctest

import (
	"net"
	"testing"
	"time"
)

// maxPoll is the longest pause between two checks of Eventually.
const maxPoll = 50 * time.Millisecond

// Eventually calls cond until it returns nil, pausing between calls (1 ms
// at first, growing to 50 ms), and fails t with what and cond's last error
// if it still fails once timeout has passed. Call it from the test's
// goroutine, as t.Fatal requires. A cond that says what is still wrong
// ("2 of 3 members", not "false") makes the failure readable.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	pause := time.Millisecond
	for {
		err := cond()
		if err == nil {
			return
		}
		left := time.Until(deadline)
		if left <= 0 {
			t.Fatalf("%s: not true after %v: %v", what, timeout, err)
		}
		time.Sleep(min(pause, left))
		pause = min(2*pause, maxPoll)
	}
}

// DeadAddr returns a loopback address (127.0.0.1:port) that nothing
// listens on: it was free a moment ago, and dialing it is refused at once.
func DeadAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("dead address: %v", err)
	}
	addr := ln.Addr().String()
	if err := ln.Close(); err != nil {
		t.Fatalf("dead address: %v", err)
	}
	return addr
}
