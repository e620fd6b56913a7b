package chaos

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ghba/ghba/rpc"
	"github.com/ghba/ghba/rpc/client"
)

// setupTimeout bounds the mkdir of the workload's roots.
const setupTimeout = 3 * time.Minute

// opTimeout bounds one operation of the workload.
const opTimeout = 8 * time.Second

// Recorder collects the history; it is safe for concurrent use.
type Recorder struct {
	start time.Time
	mu    sync.Mutex
	ops   []Op
	names map[string]string // RPC address → node id
}

// SetNodes names the nodes' RPC addresses in the operations recorded from
// now on (Op.Node).
func (r *Recorder) SetNodes(ns []*Node) {
	names := make(map[string]string)
	for _, n := range ns {
		names[n.RPCAddr()] = n.ID
	}
	r.mu.Lock()
	r.names = names
	r.mu.Unlock()
}

// nodeName returns the node id of an RPC address, or the address.
func (r *Recorder) nodeName(addr string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if id, ok := r.names[addr]; ok {
		return id
	}
	return addr
}

// NewRecorder starts the history's clock.
func NewRecorder() *Recorder { return &Recorder{start: time.Now()} }

// now is the history's clock (monotonic nanoseconds since the start).
func (r *Recorder) now() int64 { return int64(time.Since(r.start)) }

// at is t on the history's clock.
func (r *Recorder) at(t time.Time) int64 { return int64(t.Sub(r.start)) }

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

// replace sets the history to ops (after ResolveByTokens, for the
// evidence).
func (r *Recorder) replace(ops []Op) {
	r.mu.Lock()
	r.ops = append([]Op(nil), ops...)
	r.mu.Unlock()
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
	case errors.Is(err, rpc.ErrNotEmpty):
		return ResNotEmpty
	case errors.Is(err, rpc.ErrShuttingDown):
		// Only the transport answers it, for a request it did not
		// execute; the client tries another node after it, and a write
		// is never sent again once its outcome is unknown.
		return ResNotSent
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

// workClient is a workload's client.Client that knows the node it sent
// its last request to.
type workClient struct {
	*client.Client
	sent *sentTo
}

// Exec runs one operation through c and records it, with the node it
// asked last and whether it answered "unavailable".
func (r *Recorder) Exec(ctx context.Context, c *workClient, clientID int, o Op) Op {
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	p := o.Path()
	o.Client = clientID
	c.sent.reset()
	o.Call = r.now()
	var err error
	switch o.Kind {
	case OpCreate:
		_, err = c.Create(ctx, &rpc.CreateRequest{Path: p, Mode: 0o644, UID: o.Token})
	case OpMkdir:
		_, err = c.Mkdir(ctx, &rpc.MkdirRequest{Path: p, Mode: 0o755, UID: o.Token})
	case OpStat:
		var st *rpc.StatResponse
		hits := c.CacheStats().Hits
		st, err = c.Stat(ctx, p)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			o.Cached = c.CacheStats().Hits > hits // a cached absence
		case err != nil:
		case st.Inode.IsDir() != (o.Name == ""):
			err = fmt.Errorf("chaos: %s: stat answered type %s", p, st.Inode.Type)
		default:
			o.Seen = st.Inode.UID
			o.Cached = st.Level == rpc.LevelCache
		}
	case OpUnlink:
		err = c.Unlink(ctx, p)
	case OpRmdir:
		err = c.Rmdir(ctx, p)
	case OpRename, OpRenameDir:
		_, err = c.Rename(ctx, p, o.ToPath())
	case OpReadDir:
		var es []rpc.DirEntry
		es, err = c.ReadDirAll(ctx, p, 0)
		for _, e := range es {
			if want := wantType(o.Dir == ""); e.Type != want {
				err = fmt.Errorf("chaos: readdir %s: entry %s of type %s, want %s", p, e.Name, e.Type, want)
			}
			o.Entries = append(o.Entries, e.Name)
		}
	default:
		err = fmt.Errorf("chaos: unknown operation %q", o.Kind)
	}
	o.Return = r.now()
	o.Result = Classify(err)
	o.Unavailable = errors.Is(err, rpc.ErrUnavailable)
	o.Node = r.nodeName(c.sent.last())
	if err != nil {
		o.Err = err.Error()
	}
	r.add(o)
	return o
}

// wantType is the type of the entries of a root (directories) or of a
// slot (files).
func wantType(root bool) string {
	if root {
		return rpc.TypeDir
	}
	return rpc.TypeFile
}

// Workload is the set of concurrent clients.
type Workload struct {
	// Clients is the number of concurrent workers.
	Clients int
	// Addrs are the nodes' RPC addresses.
	Addrs []string
	// Seed seeds each worker's choices.
	Seed uint64
	// Log receives progress.
	Log *slog.Logger

	tokens atomic.Uint32 // the last token given out

	mu    sync.Mutex
	gens  [][]string               // the roots of every generation so far
	gates map[string]*rootGate     // by root
	roots atomic.Pointer[[]string] // the current generation's roots
}

// Writes of unknown outcome in one root. After one, the root's writes go
// one at a time, each after a wait that doubles with every further one
// (gateBackoffMin to gateBackoffMax), until one gets a known outcome;
// and a root never has more than maxUnknownPerRoot of them, counting the
// writes in flight: then it is read-only for the rest of its generation.
// The check carries every possibility these writes leave open, so this
// bounds its cost; the workers read the root meanwhile.
const (
	maxUnknownPerRoot = 8
	gateBackoffMin    = 2 * time.Second
	gateBackoffMax    = 16 * time.Second
)

// rootGate admits the writes of one root (see maxUnknownPerRoot); it is
// safe for concurrent use.
type rootGate struct {
	mu       sync.Mutex
	unknown  int // writes of unknown outcome so far
	inFlight int
	backoff  time.Duration // 0: no unknown write since the last known one
	until    time.Time     // no write before
}

// begin reports whether a write may start now, and counts it in flight.
func (g *rootGate) begin(now time.Time) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.unknown+g.inFlight >= maxUnknownPerRoot || now.Before(g.until) || g.backoff > 0 && g.inFlight > 0 {
		return false
	}
	g.inFlight++
	return true
}

// end records the outcome of a write begin admitted.
func (g *rootGate) end(now time.Time, unknown bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.inFlight--
	if !unknown {
		g.backoff, g.until = 0, time.Time{}
		return
	}
	g.unknown++
	g.backoff = min(max(2*g.backoff, gateBackoffMin), gateBackoffMax)
	g.until = now.Add(g.backoff)
}

func (w *Workload) gate(root string) *rootGate {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.gates[root]
}

// Advance creates the roots of the next generation (mkdir -p, retried
// until the cluster answers) and makes the workers use them from then on.
func (w *Workload) Advance(ctx context.Context) error {
	w.mu.Lock()
	gen := len(w.gens)
	w.mu.Unlock()
	var roots []string
	for i := range RootsPerGeneration {
		roots = append(roots, RootPath(gen, i))
	}
	if err := makeDirs(ctx, w.Addrs, roots, w.Log); err != nil {
		return fmt.Errorf("chaos: roots of generation %d: %w", gen, err)
	}
	w.mu.Lock()
	w.gens = append(w.gens, roots)
	if w.gates == nil {
		w.gates = make(map[string]*rootGate)
	}
	for _, r := range roots {
		w.gates[r] = &rootGate{}
	}
	w.mu.Unlock()
	w.roots.Store(&roots)
	w.Log.Info("workload generation", "gen", gen, "roots", roots[0]+"…")
	return nil
}

// AllRoots returns the roots of every generation so far.
func (w *Workload) AllRoots() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for _, g := range w.gens {
		out = append(out, g...)
	}
	return out
}

// makeDirs creates dirs (mkdir -p: idempotent, so retried across nodes
// until the cluster answers).
func makeDirs(ctx context.Context, addrs, dirs []string, log *slog.Logger) error {
	c := newClient(addrs, log, false)
	defer c.Close()
	for _, d := range dirs {
		err := poll(ctx, setupTimeout, func(ctx context.Context) (string, error) {
			mctx, cancel := context.WithTimeout(ctx, opTimeout)
			defer cancel()
			_, err := c.Mkdir(mctx, &rpc.MkdirRequest{Path: d, Mode: 0o755, Parents: true})
			switch {
			case err == nil:
				return "", nil
			case Classify(err) == ResWrong:
				return "", fmt.Errorf("chaos: mkdir %s: %w", d, err)
			}
			return err.Error(), nil
		})
		if err != nil {
			return fmt.Errorf("chaos: mkdir %s: %w", d, err)
		}
	}
	return nil
}

// newClient returns a client for the workload: short timeouts so that a
// paused or cut-off node costs a few seconds, not the default 30. With
// cached, its stats answer from a metadata cache under the nodes' leases
// (client.Options.Cache), which its listings also fill (ListPrefetch), and
// are checked like every other operation.
func newClient(addrs []string, log *slog.Logger, cached bool) *workClient {
	s := &sentTo{}
	opts := client.Options{
		Addrs:       addrs,
		Logger:      log,
		Dial:        s.dial,
		DialTimeout: time.Second,
		Timeout:     opTimeout,
		MaxAttempts: 3,
		IdleTimeout: 10 * time.Second,
	}
	if cached {
		opts.Cache = &client.CacheOptions{Entries: 4096, ListPrefetch: 64}
	}
	return &workClient{sent: s, Client: client.New(opts)}
}

// The mix of operations, in percent (cumulative thresholds in next).
// Creates and unlinks keep about half the names of a slot taken, so that
// rmdir and directory renames meet both empty and non-empty directories.
const (
	mixCreate    = 20
	mixStat      = 14
	mixUnlink    = 14
	mixRename    = 16 // half of them across the two slots
	mixReadDir   = 8
	mixReadRoot  = 3
	mixStatDir   = 3
	mixMkdir     = 9
	mixRmdir     = 8
	mixRenameDir = 5
)

// next draws the next operation of a worker, in root (in the current
// generation if root is "": Advance must have run once); with readOnly,
// only reads (stat and readdir, in their proportions of the mix).
func (w *Workload) next(rng *rand.Rand, root string, readOnly bool) Op {
	pick := func(s []string) string { return s[rng.IntN(len(s))] }
	other := func(d string) string {
		if d == Slots[0] {
			return Slots[1]
		}
		return Slots[0]
	}
	if root == "" {
		root = pick(*w.roots.Load())
	}
	o := Op{Root: root, Dir: pick(Slots), Name: pick(Names)}
	mix := []struct {
		kind string
		pct  int
	}{
		{OpCreate, mixCreate}, {OpStat, mixStat}, {OpUnlink, mixUnlink}, {OpRename, mixRename},
		{OpReadDir, mixReadDir}, {"readroot", mixReadRoot}, {"statdir", mixStatDir},
		{OpMkdir, mixMkdir}, {OpRmdir, mixRmdir}, {OpRenameDir, mixRenameDir},
	}
	if readOnly {
		mix = []struct {
			kind string
			pct  int
		}{{OpStat, mixStat}, {OpReadDir, mixReadDir}, {"readroot", mixReadRoot}, {"statdir", mixStatDir}}
	}
	total := 0
	for _, k := range mix {
		total += k.pct
	}
	x := rng.IntN(total)
	for _, k := range mix {
		if x >= k.pct {
			x -= k.pct
			continue
		}
		o.Kind = k.kind
		break
	}
	switch o.Kind {
	case OpCreate:
		o.Token = w.tokens.Add(1)
	case OpRename:
		o.ToDir, o.To = o.Dir, pick(Names)
		if rng.IntN(2) == 0 {
			o.ToDir = other(o.Dir)
		}
		for o.ToDir == o.Dir && o.To == o.Name {
			o.To = pick(Names)
		}
	case OpReadDir:
		o.Name = ""
	case "readroot":
		o.Kind, o.Dir, o.Name = OpReadDir, "", ""
	case "statdir":
		o.Kind, o.Name = OpStat, ""
	case OpMkdir:
		o.Name, o.Token = "", w.tokens.Add(1)
	case OpRmdir:
		o.Name = ""
	case OpRenameDir:
		o.Name, o.ToDir = "", other(o.Dir)
	}
	return o
}

// readBackTimeout bounds how long a worker reads back the outcome of a
// write whose outcome is unknown (longer than a pause or a partition
// lasts: failure detection, hold, recovery).
const readBackTimeout = 90 * time.Second

// readBacks returns the stats that show what an unknown write did: of
// every path of its root (the two slots and their files), the ones it
// touches first. A stat of each path observes every write that may have
// happened in the root, so the possibilities the check must carry for
// the unknown writes collapse right after them.
func readBacks(o *Op) []Op {
	st := func(dir, name string) Op {
		return Op{Kind: OpStat, Root: o.Root, Dir: dir, Name: name, ReadBack: true}
	}
	var first []Op
	switch o.Kind {
	case OpCreate, OpUnlink:
		first = []Op{st(o.Dir, o.Name)}
	case OpRename:
		first = []Op{st(o.Dir, o.Name), st(o.ToDir, o.To)}
	case OpMkdir, OpRmdir:
		first = []Op{st(o.Dir, "")}
	case OpRenameDir:
		first = []Op{st(o.Dir, ""), st(o.ToDir, "")}
	}
	out := first
	for _, d := range Slots {
		for _, n := range append([]string{""}, Names...) {
			q := st(d, n)
			if !slices.ContainsFunc(first, func(f Op) bool { return f.Dir == q.Dir && f.Name == q.Name }) {
				out = append(out, q)
			}
		}
	}
	return out
}

// Run runs the workers until ctx is done, recording into r.
//
// A worker whose write gets an unknown outcome writes nothing more until
// it has read back every path of that write's root (each stat with a
// fresh deadline, retried with backoff for up to readBackTimeout), and
// the root's gate (rootGate) then spaces and caps its writes: a fault
// leaves a few writes of unknown outcome per root instead of one per
// attempt (a server that answers "unavailable" at once, because the
// root's home is down, would otherwise yield dozens), and a write the
// gate refuses becomes a read of the same root. The stats are ordinary
// operations of the history, which narrow what the unknown writes may
// have done (a stat that answers the token of a create or mkdir proves it
// took effect; see ResolveByTokens). They never turn a write into an
// acknowledged one.
func (w *Workload) Run(ctx context.Context, r *Recorder) {
	var wg sync.WaitGroup
	for i := range w.Clients {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(w.Seed, uint64(i)+1))
			// Odd workers read through a metadata cache.
			c := newClient(w.Addrs, w.Log.With("worker", i, "cache", i%2 == 1), i%2 == 1)
			defer c.Close()
			if i%2 == 1 {
				defer func() { // how much of the cache the run went through
					s := c.CacheStats()
					w.Log.Info("cached worker done", "worker", i, "hits", s.Hits, "misses", s.Misses,
						"prefetched", s.Prefetched, "prefetch_used", s.PrefetchUsed, "invalidated", s.Invalidated)
				}()
			}
			id := i
			for ctx.Err() == nil {
				o := w.next(rng, "", false)
				var g *rootGate
				if o.isWrite() {
					if g = w.gate(o.Root); !g.begin(time.Now()) {
						g, o = nil, w.next(rng, o.Root, true)
					}
				}
				// The workers' context ends the run; an operation in
				// flight then is recorded as unknown, which is honest.
				got := r.Exec(context.WithoutCancel(ctx), c, id, o)
				if g != nil {
					g.end(time.Now(), got.Result == ResUnknown)
				}
				if i%2 == 1 && got.Kind == OpStat && (got.Result == ResOK || got.Result == ResNotExist) {
					// A caching worker reads what it just read again,
					// as applications do (a missing path too): the
					// cache's answer is checked.
					got = r.Exec(context.WithoutCancel(ctx), c, id, o)
				}
				var pause time.Duration
				switch got.Result {
				case ResUnknown:
					// This client's id may now overlap its next
					// operation: take a fresh one.
					id += w.Clients
					if got.isWrite() {
						w.readBack(ctx, r, c, &id, &got)
					}
					pause = 100 * time.Millisecond
				case ResNotSent, ResWrong:
					pause = 300 * time.Millisecond
				default:
					pause = time.Duration(rng.IntN(20)) * time.Millisecond
				}
				if sleep(ctx, pause) != nil {
					return
				}
			}
		})
	}
	wg.Wait()
}

// readBack stats the paths of readBacks(o) until each has answered (or
// readBackTimeout, or the end of the run).
func (w *Workload) readBack(ctx context.Context, r *Recorder, c *workClient, id *int, o *Op) {
	todo := readBacks(o)
	deadline := time.Now().Add(readBackTimeout)
	backoff := 200 * time.Millisecond
	for len(todo) > 0 {
		var again []Op
		for _, q := range todo {
			got := r.Exec(context.WithoutCancel(ctx), c, *id, q)
			switch got.Result {
			case ResOK, ResNotExist:
			default:
				*id += w.Clients
				again = append(again, q)
			}
		}
		todo = again
		if len(todo) == 0 || time.Now().After(deadline) || sleep(ctx, backoff) != nil {
			return
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

// FinalReads reads every root and slot and stats every path through
// every node (the nodes at once), retrying "unavailable" until deadline;
// the reads are recorded as Final operations, with client ids from
// firstClient on. It returns an error if some read never got an answer.
func FinalReads(ctx context.Context, r *Recorder, addrs, roots []string, firstClient int, deadline time.Duration, log *slog.Logger) error {
	ctx, cancel := context.WithTimeout(ctx, deadline)
	defer cancel()
	var (
		mu   sync.Mutex
		errs []error
		ids  atomic.Int64
		wg   sync.WaitGroup
	)
	ids.Store(int64(firstClient))
	for _, a := range addrs {
		wg.Go(func() {
			s := &sentTo{}
			c := &workClient{sent: s, Client: client.New(client.Options{Addrs: []string{a}, Logger: log, Dial: s.dial,
				HomeCacheSize: -1, Timeout: opTimeout, DialTimeout: time.Second})}
			defer c.Close()
			id := int(ids.Add(1))
			for _, root := range roots {
				ops := []Op{{Kind: OpReadDir, Root: root, Final: true}}
				for _, d := range Slots {
					ops = append(ops, Op{Kind: OpStat, Root: root, Dir: d, Final: true}, Op{Kind: OpReadDir, Root: root, Dir: d, Final: true})
					for _, n := range Names {
						ops = append(ops, Op{Kind: OpStat, Root: root, Dir: d, Name: n, Final: true})
					}
				}
				for _, o := range ops {
					for {
						got := r.Exec(ctx, c, id, o)
						if got.Result != ResUnknown && got.Result != ResNotSent {
							break
						}
						id = int(ids.Add(1)) // an unknown read leaves its id "open"
						if ctx.Err() != nil {
							mu.Lock()
							errs = append(errs, fmt.Errorf("chaos: final %s via %s: no answer after healing: %s", o.String(), a, got.Err))
							mu.Unlock()
							break
						}
						if sleep(ctx, 500*time.Millisecond) != nil {
							break
						}
					}
				}
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}
