package chaos

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math/rand/v2"
	"path"
	"sync"
	"time"

	"github.com/ghba/ghba/rpc"
)

// opTimeout bounds one operation of the workload.
const opTimeout = 8 * time.Second

// Recorder collects the history; it is safe for concurrent use.
type Recorder struct {
	start time.Time
	mu    sync.Mutex
	ops   []Op
}

// NewRecorder starts the history's clock.
func NewRecorder() *Recorder { return &Recorder{start: time.Now()} }

// now is the history's clock (monotonic nanoseconds since the start).
func (r *Recorder) now() int64 { return int64(time.Since(r.start)) }

func (r *Recorder) add(o Op) {
	r.mu.Lock()
	r.ops = append(r.ops, o)
	r.mu.Unlock()
}

// Ops returns a copy of the history so far.
func (r *Recorder) Ops() []Op {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Op(nil), r.ops...)
}

// Classify maps an operation's error to a result.
func Classify(err error) string {
	switch {
	case err == nil:
		return ResOK
	case errors.Is(err, fs.ErrNotExist):
		return ResNotExist
	case errors.Is(err, fs.ErrExist):
		return ResExist
	case errors.Is(err, rpc.ErrOutcomeUnknown), errors.Is(err, context.DeadlineExceeded),
		errors.Is(err, context.Canceled):
		return ResUnknown
	case errors.Is(err, rpc.ErrUnavailable) && errors.Is(err, rpc.ErrRemote):
		return ResUnknown // a server's "unavailable": some step may have run
	case errors.Is(err, rpc.ErrUnavailable):
		return ResNotSent // the client reached no node: nothing was sent
	}
	return ResWrong
}

// Exec runs one operation through c and records it.
func (r *Recorder) Exec(ctx context.Context, c *rpc.Client, client int, o Op) Op {
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	p := path.Join(o.Dir, o.Name)
	o.Client = client
	o.Call = r.now()
	var err error
	switch o.Kind {
	case OpCreate:
		_, err = c.Create(ctx, &rpc.CreateRequest{Path: p, Mode: 0o644})
	case OpStat:
		var st *rpc.StatResponse
		st, err = c.Stat(ctx, p)
		if err == nil && st.Inode.IsDir() {
			err = fmt.Errorf("chaos: %s: a file of the workload is a directory", p)
		}
	case OpUnlink:
		err = c.Unlink(ctx, p)
	case OpRename:
		_, err = c.Rename(ctx, p, path.Join(o.Dir, o.To))
	case OpReadDir:
		var es []rpc.DirEntry
		es, err = c.ReadDirAll(ctx, o.Dir, 0)
		for _, e := range es {
			o.Entries = append(o.Entries, e.Name)
		}
	}
	o.Return = r.now()
	o.Result = Classify(err)
	if err != nil {
		o.Err = err.Error()
	}
	r.add(o)
	return o
}

// Workload is the set of concurrent clients.
type Workload struct {
	// Dirs are the directories (created before the run).
	Dirs []string
	// Clients is the number of concurrent workers.
	Clients int
	// Addrs are the nodes' RPC addresses.
	Addrs []string
	// Seed seeds each worker's choices.
	Seed uint64
	// Log receives progress.
	Log *slog.Logger
}

// newClient returns an rpc.Client for the workload: short timeouts so that
// a paused or cut-off node costs a few seconds, not the default 30.
func newClient(addrs []string, log *slog.Logger) *rpc.Client {
	return rpc.NewClient(rpc.Options{
		Addrs:       addrs,
		Logger:      log,
		DialTimeout: time.Second,
		Timeout:     opTimeout,
		MaxAttempts: 3,
		IdleTimeout: 10 * time.Second,
	})
}

// Run runs the workers until ctx is done, recording into r.
func (w *Workload) Run(ctx context.Context, r *Recorder) {
	var wg sync.WaitGroup
	for i := range w.Clients {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(w.Seed, uint64(i)+1))
			c := newClient(w.Addrs, w.Log.With("worker", i))
			defer c.Close()
			id := i
			for ctx.Err() == nil {
				o := Op{Dir: w.Dirs[rng.IntN(len(w.Dirs))], Name: Names[rng.IntN(len(Names))]}
				switch x := rng.IntN(100); {
				case x < 25:
					o.Kind = OpCreate
				case x < 45:
					o.Kind = OpStat
				case x < 60:
					o.Kind = OpUnlink
				case x < 80:
					o.Kind = OpRename
					for o.To = o.Name; o.To == o.Name; {
						o.To = Names[rng.IntN(len(Names))]
					}
				default:
					o.Kind, o.Name = OpReadDir, ""
				}
				// The workers' context ends the run; an operation in
				// flight then is recorded as unknown, which is honest.
				got := r.Exec(context.WithoutCancel(ctx), c, id, o)
				var pause time.Duration
				switch got.Result {
				case ResUnknown:
					// This client's id may now overlap its next
					// operation: take a fresh one.
					// Back off longer after a write: every unknown write
					// stays pending to the end of the history and makes
					// the linearizability check costlier.
					pause = 300 * time.Millisecond
					if got.isWrite() {
						id += w.Clients
						pause = time.Second
					}
				case ResNotSent, ResWrong:
					pause = 300 * time.Millisecond
				default:
					pause = time.Duration(rng.IntN(20)) * time.Millisecond
				}
				select {
				case <-ctx.Done():
				case <-time.After(pause):
				}
			}
		})
	}
	wg.Wait()
}

// FinalReads reads every directory through every node and stats every
// name, retrying "unavailable" until deadline; the reads are recorded as
// Final operations. It returns an error if some read never got an answer.
func FinalReads(ctx context.Context, r *Recorder, addrs, dirs []string, firstClient int, deadline time.Duration, log *slog.Logger) error {
	ctx, cancel := context.WithTimeout(ctx, deadline)
	defer cancel()
	var errs []error
	id := firstClient
	for _, a := range addrs {
		c := rpc.NewClient(rpc.Options{Addrs: []string{a}, Logger: log, HomeCacheSize: -1, Timeout: opTimeout, DialTimeout: time.Second})
		for _, d := range dirs {
			ops := []Op{{Kind: OpReadDir, Dir: d, Final: true}}
			for _, n := range Names {
				ops = append(ops, Op{Kind: OpStat, Dir: d, Name: n, Final: true})
			}
			for _, o := range ops {
				for {
					got := r.Exec(ctx, c, id, o)
					if got.Result == ResOK || got.Result == ResNotExist || got.Result == ResExist || got.Result == ResWrong {
						break
					}
					id++ // an unknown read leaves its id "open"
					if ctx.Err() != nil {
						errs = append(errs, fmt.Errorf("chaos: final %s via %s: no answer after healing: %s", o.String(), a, got.Err))
						break
					}
					select {
					case <-ctx.Done():
					case <-time.After(500 * time.Millisecond):
					}
				}
			}
		}
		c.Close()
		id++
	}
	return errors.Join(errs...)
}
