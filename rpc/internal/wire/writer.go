package wire

import (
	"net"
	"runtime"
	"sync"
	"time"
)

// Write buffering limits.
const (
	// writeBufferLimit is the pending-bytes level above which writers wait
	// for the flusher (back-pressure toward a slow peer).
	writeBufferLimit = 1 << 20
	// keepBuffer is the largest buffer kept for reuse after a flush.
	keepBuffer = 256 << 10
)

// Writer serializes frame writes on one connection and batches them
// without a goroutine of its own. Writers append complete frames to a
// pending buffer under a mutex (no syscall). The first writer that finds no
// flush in progress becomes the flusher: it swaps the buffer out, writes it
// to the socket with the mutex released, and repeats until nothing is
// pending. Frames appended meanwhile ride along in the flusher's next
// write (their writers wait for it), so under load many pipelined frames
// share one syscall and when idle every frame goes out at once. After the
// first write error every write fails with it.
type Writer struct {
	nc      net.Conn
	timeout time.Duration // write deadline per socket write; 0 = none

	mu       sync.Mutex
	space    sync.Cond // signaled after each socket write
	buf      []byte    // pending frames
	spare    []byte    // the other buffer, reused
	flushing bool
	appended uint64 // bytes ever appended
	written  uint64 // bytes ever handed to the socket (or dropped on error)
	err      error
}

// NewWriter returns a Writer on nc with buffers of size bytes to start
// with; timeout bounds each socket write (0: none).
func NewWriter(nc net.Conn, size int, timeout time.Duration) *Writer {
	w := &Writer{
		nc:      nc,
		timeout: timeout,
		buf:     make([]byte, 0, size),
		spare:   make([]byte, 0, size),
	}
	w.space.L = &w.mu
	return w
}

// Queue appends frames to the pending bytes without writing them: they go
// out with the next frame committed. A client queues its preface and auth
// frame this way, so that they precede its first request in one write.
func (w *Writer) Queue(frames []byte) {
	w.mu.Lock()
	w.buf = append(w.buf, frames...)
	w.appended += uint64(len(frames))
	w.mu.Unlock()
}

// Begin takes the lock, waiting while too much is pending, and returns
// the pending buffer to append one frame to, or the sticky error (the lock
// is held in both cases). Finish with Commit or Abort.
func (w *Writer) Begin() ([]byte, error) {
	w.mu.Lock()
	for w.err == nil && w.flushing && len(w.buf) >= writeBufferLimit {
		w.space.Wait()
	}
	return w.buf, w.err
}

// BeginIfRoom is Begin for frames that must not wait behind a backlog
// (a cancel, a goaway): it takes the lock (with tryLock, only if it is
// free at once) and returns the pending buffer and true, to finish with
// Commit or CommitNoWait; or false, without the lock, when the lock was
// busy, a write has failed or too much is pending.
func (w *Writer) BeginIfRoom(tryLock bool) ([]byte, bool) {
	if tryLock {
		if !w.mu.TryLock() {
			return nil, false
		}
	} else {
		w.mu.Lock()
	}
	if w.err != nil || len(w.buf) >= writeBufferLimit {
		w.mu.Unlock()
		return nil, false
	}
	return w.buf, true
}

// Abort releases the lock without adding anything.
func (w *Writer) Abort() { w.mu.Unlock() }

// Commit stores buf (the pending buffer with the caller's frame appended),
// writes it to the socket — itself, or by waiting for the writer already
// flushing — and releases the lock. When Commit returns nil the frame has
// been handed to the kernel; an error is the connection's error, and the
// frame may or may not have been sent.
func (w *Writer) Commit(buf []byte) error {
	return w.commitFrame(buf, true)
}

// CommitNoWait is Commit for best-effort frames: if another writer is
// flushing, it leaves the frame to that writer and returns at once.
func (w *Writer) CommitNoWait(buf []byte) error {
	return w.commitFrame(buf, false)
}

func (w *Writer) commitFrame(buf []byte, wait bool) error {
	w.appended += uint64(len(buf) - len(w.buf))
	w.buf = buf
	if w.flushing {
		end := w.appended
		for wait && w.err == nil && w.written < end {
			w.space.Wait()
		}
		err := w.err
		w.mu.Unlock()
		return err
	}
	if w.err != nil {
		err := w.err
		w.mu.Unlock()
		return err
	}
	w.flushing = true
	// Let runnable goroutines (other callers, other handlers) append their
	// frames before the syscall: on few cores this is what makes batches
	// (grpc-go's writer yields the same way).
	w.mu.Unlock()
	runtime.Gosched()
	w.mu.Lock()
	for len(w.buf) > 0 && w.err == nil {
		out := w.buf
		w.buf = w.spare[:0]
		w.spare = nil
		w.mu.Unlock()
		var err error
		if w.timeout > 0 {
			err = w.nc.SetWriteDeadline(time.Now().Add(w.timeout))
		}
		if err == nil {
			_, err = w.nc.Write(out)
		}
		w.mu.Lock()
		w.written += uint64(len(out))
		if cap(out) <= keepBuffer {
			w.spare = out[:0]
		} else {
			w.spare = make([]byte, 0, InitialBufferSize)
		}
		if err != nil {
			w.err = err
		}
		w.space.Broadcast()
	}
	w.flushing = false
	w.space.Broadcast()
	err := w.err
	w.mu.Unlock()
	return err
}
