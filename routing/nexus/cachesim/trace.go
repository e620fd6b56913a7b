package cachesim

import (
	"context"
	"fmt"
	"math"

	"github.com/ghba/ghba/routing/workload"
)

// Access is one metadata access of a Trace.
type Access struct {
	Client int32 // dense client index, 0 … Trace.Clients−1
	Path   int32 // interned path id
	Local  int32 // the client's own dense id of Path: 0 … ClientWorkingSet[Client]−1
	Path2  int32 // rename target id; −1 for other ops
	Op     workload.Op
}

// IsWrite reports whether the access modifies metadata (create, mkdir,
// unlink, rmdir, rename): it goes to the metadata server even when the
// path is cached, and write-invalidate removes other clients' copies.
func (a Access) IsWrite() bool {
	switch a.Op {
	case workload.OpCreate, workload.OpMkdir, workload.OpUnlink, workload.OpRmdir, workload.OpRename:
		return true
	}
	return false
}

// Removes reports whether the access removes its path (unlink, rmdir,
// rename's source): the issuing client drops its copy afterwards.
func (a Access) Removes() bool {
	return a.Op == workload.OpUnlink || a.Op == workload.OpRmdir || a.Op == workload.OpRename
}

// never is the next use of an entry that is not used again.
const never = math.MaxInt64

// Trace is a metadata trace reduced to accesses over interned paths.
//
// Which records are accesses: every timed record (stat, open, readdir —
// metadata reads — and create, mkdir, unlink, rmdir, rename — metadata
// writes) accesses its Path at the issuing client's cache; exists records
// only declare the namespace and are not accesses. A rename accesses its
// source, which it removes; its target is a new path nobody has cached.
// A directory rename changes the paths of its subtree: cached entries under
// the old name are never accessed again and age out of the caches.
type Trace struct {
	Accesses []Access
	Paths    int // interned paths (rename targets included)
	Clients  int
	// ClientIDs maps a dense client index to the trace's client id.
	ClientIDs []int
	// WorkingSet counts the distinct paths accessed; ClientWorkingSet the
	// distinct paths each client accesses (the client cache sizes are
	// fractions of it).
	WorkingSet       int
	ClientWorkingSet []int
	// Reads and Writes count the accesses of each kind.
	Reads, Writes int

	// local maps (client, path) to the client's dense id of the path.
	local   map[uint64]int32
	nextUse [2][]int64 // by consistency (0: with write-invalidate), built on demand
}

func clientPath(c, p int32) uint64 { return uint64(uint32(c))<<32 | uint64(uint32(p)) }

// Builder interns the records of a trace into a Trace. It is not safe for
// concurrent use.
type Builder struct {
	tr      Trace
	paths   map[string]int32
	clients map[int]int32
	local   map[uint64]int32 // (client, path) → the client's dense id
	global  []bool           // path accessed by anyone
}

// NewBuilder returns an empty Builder.
func NewBuilder() *Builder {
	return &Builder{paths: make(map[string]int32), clients: make(map[int]int32), local: make(map[uint64]int32)}
}

func (b *Builder) intern(p string) int32 {
	if id, ok := b.paths[p]; ok {
		return id
	}
	id := int32(len(b.paths))
	b.paths[p] = id
	b.global = append(b.global, false)
	return id
}

// Add appends r if it is an access (any timed record); exists records are
// skipped.
func (b *Builder) Add(r workload.Record) {
	if r.Op == workload.OpExists || !r.Op.Valid() {
		return
	}
	c, ok := b.clients[r.Client]
	if !ok {
		c = int32(len(b.tr.ClientIDs))
		b.clients[r.Client] = c
		b.tr.ClientIDs = append(b.tr.ClientIDs, r.Client)
		b.tr.ClientWorkingSet = append(b.tr.ClientWorkingSet, 0)
	}
	a := Access{Client: c, Path: b.intern(r.Path), Path2: -1, Op: r.Op}
	if r.Op == workload.OpRename {
		a.Path2 = b.intern(r.Path2)
	}
	if !b.global[a.Path] {
		b.global[a.Path] = true
		b.tr.WorkingSet++
	}
	key := clientPath(c, a.Path)
	l, ok := b.local[key]
	if !ok {
		l = int32(b.tr.ClientWorkingSet[c])
		b.local[key] = l
		b.tr.ClientWorkingSet[c]++
	}
	a.Local = l
	if a.IsWrite() {
		b.tr.Writes++
	} else {
		b.tr.Reads++
	}
	b.tr.Accesses = append(b.tr.Accesses, a)
}

// Trace returns the trace built so far; the Builder must not be used
// afterwards.
func (b *Builder) Trace() *Trace {
	t := b.tr
	t.Paths = len(b.paths)
	t.Clients = len(t.ClientIDs)
	t.local = b.local
	*b = Builder{}
	return &t
}

// FromRecords builds a Trace from records.
func FromRecords(recs []workload.Record) *Trace {
	b := NewBuilder()
	for _, r := range recs {
		b.Add(r)
	}
	return b.Trace()
}

// Source streams trace records (routing/sim.Source has this type).
type Source = func(ctx context.Context, emit func(workload.Record) error) error

// Load reads every record of src into a Trace.
func Load(ctx context.Context, src Source) (*Trace, error) {
	b := NewBuilder()
	if err := src(ctx, func(r workload.Record) error { b.Add(r); return nil }); err != nil {
		return nil, fmt.Errorf("cachesim: load trace: %w", err)
	}
	t := b.Trace()
	if len(t.Accesses) == 0 {
		return nil, fmt.Errorf("cachesim: the trace has no accesses: %w", ErrConfig)
	}
	return t, nil
}

// NextUse returns, for every access i, the index of the issuing client's
// next access to the same path while its cached copy stays valid, or
// math.MaxInt64 when there is none: when the access removes the path, or,
// with consistency control, when another client writes the path first
// (write-invalidate removes the copy). OPT (Belady's MIN) evicts by it.
func (t *Trace) NextUse(consistency bool) []int64 {
	k := 0
	if !consistency {
		k = 1
	}
	if t.nextUse[k] != nil {
		return t.nextUse[k]
	}
	next := make([]int64, len(t.Accesses))
	after := make(map[uint64]int64) // (client, path) → next access index
	// Per path, the nearest later write (w1, by client c1) and the nearest
	// later write by a client other than c1 (w2): the nearest later write
	// by a client other than c is w1 if c1 ≠ c, else w2.
	w1 := make([]int64, t.Paths)
	w2 := make([]int64, t.Paths)
	c1 := make([]int32, t.Paths)
	for i := range w1 {
		w1[i], w2[i], c1[i] = never, never, -1
	}
	for i := len(t.Accesses) - 1; i >= 0; i-- {
		a := t.Accesses[i]
		key := clientPath(a.Client, a.Path)
		n, ok := after[key]
		if !ok {
			n = never
		}
		if consistency {
			w := w1[a.Path]
			if c1[a.Path] == a.Client {
				w = w2[a.Path]
			}
			if w < n {
				n = never
			}
		}
		if a.Removes() {
			n = never
		}
		next[i] = n
		after[key] = int64(i)
		if a.IsWrite() {
			if c1[a.Path] != a.Client {
				w2[a.Path] = w1[a.Path]
			}
			w1[a.Path], c1[a.Path] = int64(i), a.Client
		}
	}
	t.nextUse[k] = next
	return next
}
