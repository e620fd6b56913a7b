package chaos

import (
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/anishathalye/porcupine"
)

// CheckLimits bound the linearizability check.
type CheckLimits struct {
	// Timeout bounds the whole check's wall time.
	Timeout time.Duration
	// Memory bounds the memory of porcupine's search, in bytes, for all
	// the partitions checked at once (see checkPartition).
	Memory int64
	// Parallel is the number of partitions checked at once (default
	// GOMAXPROCS).
	Parallel int
}

// Default bounds of the check.
const (
	// DefaultCheckMemory is CheckLimits.Memory when it is 0.
	DefaultCheckMemory = 2 << 30
	// maxPossibilities bounds the possibilities of one state (see
	// modelState): past it the check answers Unknown, as past its memory
	// bound.
	maxPossibilities = 1 << 14
	// cacheEntryBytes is what one step porcupine accepts costs it at most,
	// besides the bitset of the linearized operations (one bit per
	// operation of the partition) and the state (stateBytes): the cache
	// entry, the boxed state, the cache bucket and the call stack's entry.
	cacheEntryBytes = 160
)

// PartitionReport is the check of one root.
type PartitionReport struct {
	Root string `json:"root"`
	// Ops is the number of operations checked; Pending the writes among
	// them whose outcome stayed unknown; Resolved the creates and mkdirs
	// whose outcome was unknown until a stat saw their token.
	Ops      int `json:"ops"`
	Pending  int `json:"pending"`
	Resolved int `json:"resolved"`
	// Result is porcupine's verdict: "Ok", "Illegal" or "Unknown".
	Result string `json:"result"`
	// Why says why a verdict is Unknown (time or memory bound).
	Why string `json:"why,omitempty"`
	// Steps is the number of steps the search accepted; Memory what they
	// cost at most (the bound's measure, see checkPartition), MaxSet the
	// most possibilities one state held.
	Steps  int64 `json:"steps"`
	Memory int64 `json:"memory_bytes"`
	MaxSet int   `json:"max_set"`
	// Took is the partition's wall time.
	Took time.Duration `json:"took_ns"`
	// Counterexample describes an Illegal partition in words.
	Counterexample string `json:"counterexample,omitempty"`

	result porcupine.CheckResult
	ops    []porcupine.Operation
	pend   []*Op
}

// CheckReport is the verdict of the linearizability check.
type CheckReport struct {
	// Result is Ok only if every partition is Ok, Illegal if any is.
	Result     porcupine.CheckResult `json:"-"`
	Verdict    string                `json:"verdict"`
	Took       time.Duration         `json:"took_ns"`
	Partitions []*PartitionReport    `json:"partitions"`
}

// Failed returns the partitions that are not Ok.
func (r *CheckReport) Failed() []*PartitionReport {
	var out []*PartitionReport
	for _, p := range r.Partitions {
		if p.result != porcupine.Ok {
			out = append(out, p)
		}
	}
	return out
}

// Summary is one line: the verdict, time, partitions, the largest one and
// the most pending writes in one.
func (r *CheckReport) Summary() string {
	var ops, pend, maxOps, maxPend, maxSet int
	var steps, mem int64
	for _, p := range r.Partitions {
		ops += p.Ops
		pend += p.Pending
		maxOps = max(maxOps, p.Ops)
		maxPend = max(maxPend, p.Pending)
		maxSet = max(maxSet, p.MaxSet)
		steps += p.Steps
		mem = max(mem, p.Memory)
	}
	return fmt.Sprintf("porcupine %s in %s: %d partitions, %d operations (largest %d), %d pending writes (at most %d in one partition), %d steps, at most %d possibilities in a state and %.1f MiB in a partition",
		r.Verdict, r.Took.Round(time.Millisecond), len(r.Partitions), ops, maxOps, pend, maxPend, steps, maxSet, float64(mem)/(1<<20))
}

func verdict(r porcupine.CheckResult) string {
	switch r {
	case porcupine.Ok:
		return "Ok"
	case porcupine.Illegal:
		return "Illegal"
	}
	return "Unknown"
}

// CheckLinearizable checks the history root by root (ResolveByTokens
// should have run), at most lim.Parallel roots at once, each within the
// time left and its share of the memory bound. An Illegal partition is
// checked again with porcupine's partial linearizations, for its
// counterexample and the visualization.
func CheckLinearizable(ops []Op, lim CheckLimits) *CheckReport {
	start := time.Now()
	if lim.Parallel <= 0 {
		lim.Parallel = runtime.GOMAXPROCS(0)
	}
	if lim.Memory <= 0 {
		lim.Memory = DefaultCheckMemory
	}
	deadline := start.Add(lim.Timeout)
	roots, parts, pend := Partitions(ops)
	rep := &CheckReport{Partitions: make([]*PartitionReport, len(parts))}
	for i, part := range parts {
		p := &PartitionReport{Root: roots[i], Ops: len(part), Pending: len(pend[i]), ops: part, pend: pend[i]}
		for _, o := range part {
			if op := o.Input.(*Op); op.Result == ResUnknown && !op.pending() {
				p.Resolved++
			}
		}
		rep.Partitions[i] = p
	}
	work := make(chan *PartitionReport)
	var wg sync.WaitGroup
	for range lim.Parallel {
		wg.Go(func() {
			for p := range work {
				checkPartition(p, deadline, lim.Memory/int64(lim.Parallel))
			}
		})
	}
	for _, p := range rep.Partitions {
		work <- p
	}
	close(work)
	wg.Wait()
	rep.Result = porcupine.Ok
	for _, p := range rep.Partitions {
		switch {
		case p.result == porcupine.Illegal:
			rep.Result = porcupine.Illegal
		case p.result == porcupine.Unknown && rep.Result == porcupine.Ok:
			rep.Result = porcupine.Unknown
		}
	}
	rep.Verdict = verdict(rep.Result)
	rep.Took = time.Since(start)
	return rep
}

// checkPartition checks one root within deadline and memory bytes.
//
// Porcupine has no memory bound of its own: its search caches every
// (linearized set, state) pair it reaches. Each accepted step adds at most
// one cache entry: cacheEntryBytes, a bitset of one bit per operation and
// the state (stateBytes). The model adds these up and, past memory,
// refuses every further step: the search then unwinds in time linear in
// the history and answers Illegal, which the flag turns into Unknown
// ("memory bound").
func checkPartition(p *PartitionReport, deadline time.Time, memory int64) {
	start := time.Now()
	defer func() { p.Took = time.Since(start) }()
	perStep := cacheEntryBytes + int64(len(p.ops)+7)/8
	// Atomics: after a timeout porcupine returns before its search has
	// stopped.
	var steps, used, maxSet atomic.Int64
	var over atomic.Bool
	model := rootModel(p.pend, func(st modelState) bool {
		steps.Add(1)
		if n := int64(len(st.ps)); n > maxSet.Load() {
			maxSet.Store(n)
		}
		if used.Add(perStep+stateBytes(st)) > memory || len(st.ps) > maxPossibilities {
			over.Store(true)
			return false
		}
		return true
	})
	left := time.Until(deadline)
	if left <= 0 {
		p.result, p.Result, p.Why = porcupine.Unknown, "Unknown", "no time left"
		return
	}
	res := porcupine.CheckOperationsTimeout(model, p.ops, left)
	p.Steps, p.Memory, p.MaxSet = steps.Load(), min(used.Load(), memory), int(maxSet.Load())
	switch {
	case over.Load():
		res = porcupine.Unknown
		p.Why = fmt.Sprintf("memory bound: %d steps reached %d MiB or a state of more than %d possibilities", p.Steps, memory>>20, maxPossibilities)
	case res == porcupine.Unknown:
		p.Why = fmt.Sprintf("time bound: the check's deadline passed after %s", time.Since(start).Round(time.Millisecond))
	}
	p.result, p.Result = res, verdict(res)
	if res != porcupine.Illegal {
		return
	}
	// Again with the partial linearizations, within the same bounds (the
	// search is the same; porcupine's partial linearizations add at most
	// one slice of the partition's length per improvement).
	used.Store(0)
	over.Store(false)
	r2, info := porcupine.CheckOperationsVerbose(model, p.ops, max(time.Until(deadline), 10*time.Second))
	switch {
	case over.Load():
		p.Counterexample = "(the search for a counterexample reached the memory bound)"
		return
	case r2 != porcupine.Illegal:
		p.Counterexample = fmt.Sprintf("(the search for a counterexample answered %s)", verdict(r2))
		return
	}
	p.Counterexample = counterexample(p.ops, p.pend, &info)
}

// counterexample describes an Illegal partition: the longest linearizable
// prefix porcupine found, the state after it, and each operation that
// could come next with the reason the model refuses it.
func counterexample(part []porcupine.Operation, pend []*Op, info *porcupine.LinearizationInfo) string {
	lins := info.PartialLinearizationsOperations()
	if len(lins) == 0 || len(lins[0]) == 0 {
		return "(no partial linearization)"
	}
	best := lins[0][0]
	for _, l := range lins[0][1:] {
		if len(l) > len(best) {
			best = l
		}
	}
	done := make(map[*Op]bool)
	s := modelState{ps: []possibility{{}}}
	for _, o := range best {
		op := o.Input.(*Op)
		done[op] = true
		_, s = stepSet(s, op, pend)
	}
	var rest []porcupine.Operation
	minRet := int64(-1)
	for _, o := range part {
		if !done[o.Input.(*Op)] {
			rest = append(rest, o)
			if minRet < 0 || o.Return < minRet {
				minRet = o.Return
			}
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d of %d operations linearize; the state after them: %s\n", len(best), len(part), describeSet(s, pend))
	from := max(0, len(best)-4)
	for _, o := range best[from:] {
		fmt.Fprintf(&b, "    after  %s %s\n", span(o), o.Input.(*Op).String())
	}
	slices.SortFunc(rest, func(a, c porcupine.Operation) int { return int(a.Call - c.Call) })
	shown := 0
	for _, o := range rest {
		if o.Call > minRet || shown == 6 {
			break
		}
		op := o.Input.(*Op)
		fmt.Fprintf(&b, "    cannot %s %s: %s\n", span(o), op.String(), explain(s, op, pend))
		shown++
	}
	return strings.TrimRight(b.String(), "\n")
}

// span renders an operation's interval ("pending" for a write whose
// outcome stayed unknown).
func span(o porcupine.Operation) string {
	if op := o.Input.(*Op); op.pending() {
		return ms(o.Call) + "–pending"
	}
	return ms(o.Call) + "–" + ms(o.Return)
}

// visualOps returns the operations to visualize for the evidence and
// their pending writes by root: those of the Illegal partitions, or of
// every partition if all are Ok; none if the others are Unknown (their
// search did not end within the bounds, a verbose one would not either).
func (r *CheckReport) visualOps() ([]porcupine.Operation, map[string][]*Op) {
	var ps []*PartitionReport
	for _, p := range r.Partitions {
		if p.result == porcupine.Illegal {
			ps = append(ps, p)
		}
	}
	if len(r.Failed()) == 0 {
		ps = r.Partitions
	}
	var out []porcupine.Operation
	pend := make(map[string][]*Op)
	for _, p := range ps {
		out = append(out, p.ops...)
		pend[p.Root] = p.pend
	}
	return out, pend
}

// boundedStep returns an onStep function for the model that refuses
// every step once memory is used up (see checkPartition), and the flag it
// raises then.
func boundedStep(memory int64) (func(modelState) bool, *atomic.Bool) {
	var used atomic.Int64
	var over atomic.Bool
	return func(st modelState) bool {
		if used.Add(cacheEntryBytes+stateBytes(st)) > memory || len(st.ps) > maxPossibilities {
			over.Store(true)
			return false
		}
		return true
	}, &over
}
