package rpc

import (
	"sync/atomic"
	"time"
)

// workers runs a server's calls on goroutines that take one call after
// another. A new goroutine starts on a small stack, and a call's handler
// (decode, namespace, Raft or store) grows it several times over, copying
// it each time: with a goroutine per call, stack growth took 14% of a
// node's CPU under a stat load (3 agents on 2 cores, ghba bench). A worker
// keeps the stack its calls grew, so only its first calls pay.
type workers struct {
	tasks chan func() // unbuffered: a send succeeds only to an idle worker
	stop  <-chan struct{}
	// started counts the goroutines run started.
	started atomic.Uint64
}

// workerIdle is how long a worker waits for a call before it exits, so
// that a burst of concurrent calls does not leave its goroutines behind.
const workerIdle = 10 * time.Second

func newWorkers(stop <-chan struct{}) *workers {
	return &workers{tasks: make(chan func()), stop: stop}
}

// run runs task on an idle worker, or on a new one if none is idle; it
// never blocks. Callers bound the tasks running at once (Server.sem).
func (w *workers) run(task func()) {
	select {
	case w.tasks <- task:
	default:
		w.started.Add(1)
		go w.loop(task)
	}
}

// loop runs task, then the tasks it is handed, until it has been idle for
// workerIdle or stop is closed.
func (w *workers) loop(task func()) {
	idle := time.NewTimer(workerIdle)
	defer idle.Stop()
	for {
		task()
		idle.Reset(workerIdle)
		select {
		case task = <-w.tasks:
		case <-idle.C:
			return
		case <-w.stop:
			return
		}
	}
}
