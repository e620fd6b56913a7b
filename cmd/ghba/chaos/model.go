package chaos

import (
	"cmp"
	"fmt"
	"math"
	"path"
	"slices"
	"sort"
	"strings"

	"github.com/anishathalye/porcupine"
)

// Operation kinds.
const (
	// OpCreate creates a file Root/Dir/Name carrying Token (its UID).
	OpCreate = "create"
	// OpStat stats a file Root/Dir/Name, or with Name "" the directory
	// Root/Dir; Seen is the UID (token) it answered.
	OpStat = "stat"
	// OpUnlink removes the file Root/Dir/Name.
	OpUnlink = "unlink"
	// OpRename renames the file Root/Dir/Name to Root/ToDir/To (the same
	// or the other directory of the root).
	OpRename = "rename"
	// OpReadDir lists Root/Dir, or with Dir "" the root itself.
	OpReadDir = "readdir"
	// OpMkdir creates the directory Root/Dir carrying Token (its UID).
	OpMkdir = "mkdir"
	// OpRmdir removes the directory Root/Dir.
	OpRmdir = "rmdir"
	// OpRenameDir renames the directory Root/Dir to Root/ToDir.
	OpRenameDir = "renamedir"
)

// Results of an operation.
const (
	// ResOK is success.
	ResOK = "ok"
	// ResNotExist is fs.ErrNotExist.
	ResNotExist = "notexist"
	// ResExist is fs.ErrExist.
	ResExist = "exist"
	// ResNotEmpty is rpc.ErrNotEmpty (rmdir or rename over a non-empty
	// directory).
	ResNotEmpty = "notempty"
	// ResUnknown is an outcome the client cannot know: a timeout, a broken
	// connection, or "unavailable" from a server. A write may have been
	// applied (now or later); a read tells nothing.
	ResUnknown = "unknown"
	// ResNotSent is "unavailable" from the client itself when no node could
	// be reached, or a server's "shutting down": the request was certainly
	// never executed.
	ResNotSent = "notsent"
	// ResWrong is any other error: never a correct answer.
	ResWrong = "wrong"
)

// The namespace of the workload. The workers use RootsPerGeneration root
// directories at a time, a generation; a new generation of fresh roots
// begins with every fault slot (Workload.Advance), so each root sees at
// most one fault (or one double fault). A root is created before its
// generation begins and never changes; it is one partition of the
// linearizability check. Inside a root the workload uses the two
// directory slots Slots ("x", "y"), which it creates, removes and renames
// onto each other, and in each slot the file names Names, which it
// creates, removes and renames within and across the two slots. No
// operation touches two roots, so each root's history is checked alone
// (P-compositionality); the two slots of a root are as fine as a
// partition can be once files and directories move between them, and the
// generations keep each partition's writes of unknown outcome (those of
// one fault) few: the check's cost grows with them.
const RootsPerGeneration = 8

var (
	// Slots are the directory names inside a root.
	Slots = []string{"x", "y"}
	// Names are the file names inside a slot.
	Names = []string{"a", "b", "c"}
)

// RootPath returns the path of root i of generation gen.
func RootPath(gen, i int) string { return fmt.Sprintf("/chaos%d-%d", gen, i) }

// Op is one recorded operation: what a client invoked, when, and what it
// got back. Times are nanoseconds since the start of the run.
type Op struct {
	// Client is the porcupine client id (a worker gets a fresh id after a
	// write with an unknown outcome, so one id's operations never
	// overlap).
	Client int `json:"client"`
	// Kind is one of the Op* kinds.
	Kind string `json:"kind"`
	// Root is the operation's root directory (its partition).
	Root string `json:"root"`
	// Dir is the directory slot ("" for a readdir of the root).
	Dir string `json:"dir,omitempty"`
	// Name is the file name ("" for an operation on a directory).
	Name string `json:"name,omitempty"`
	// ToDir and To are the destination of a rename (To "" for a
	// directory rename).
	ToDir string `json:"to_dir,omitempty"`
	To    string `json:"to,omitempty"`
	// Token is the unique UID a create or mkdir gives its inode: a later
	// stat that answers it proves that this very operation took effect
	// (a rename keeps it).
	Token uint32 `json:"token,omitempty"`
	// Seen is the UID a successful stat answered.
	Seen uint32 `json:"seen,omitempty"`
	// Cached marks a stat answered from the client's metadata cache (an
	// inode, or that the path does not exist).
	Cached bool `json:"cached,omitempty"`
	// Call and Return are the invocation and response times.
	Call   int64 `json:"call"`
	Return int64 `json:"return"`
	// Result is one of the Res* values: what the client got.
	Result string `json:"result"`
	// SeenAt, for a create or mkdir whose outcome is unknown, is the
	// return time of the first stat that answered its Token (see
	// ResolveByTokens): it took effect before then. 0 if no stat did.
	SeenAt int64 `json:"seen_at,omitempty"`
	// Entries are the names a successful readdir listed.
	Entries []string `json:"entries,omitempty"`
	// Err is the error text, if any.
	Err string `json:"err,omitempty"`
	// Unavailable marks an error that matches rpc.ErrUnavailable (a
	// server's "unavailable" or "not the leader", no node reached, a
	// broken connection); see CheckAvailability.
	Unavailable bool `json:"unavailable,omitempty"`
	// Node is the node the client sent its request to last.
	Node string `json:"node,omitempty"`
	// Final marks the reads made after healing.
	Final bool `json:"final,omitempty"`
	// ReadBack marks the reads a worker made to learn the outcome of its
	// write that had an unknown outcome.
	ReadBack bool `json:"read_back,omitempty"`

	// pidx is a pending write's index in its partition (see Partitions).
	pidx int
}

// Path is the path the operation names (its source for a rename).
func (o *Op) Path() string { return opPath(o.Root, o.Dir, o.Name) }

// ToPath is the destination of a rename.
func (o *Op) ToPath() string { return opPath(o.Root, o.ToDir, o.To) }

func opPath(root, dir, name string) string { return path.Join(root, dir, name) }

func (o *Op) String() string {
	var b strings.Builder
	b.WriteString(o.Kind + " " + o.Path())
	switch o.Kind {
	case OpRename, OpRenameDir:
		b.WriteString(" → " + o.ToPath())
	}
	if o.Token != 0 {
		fmt.Fprintf(&b, " #%d", o.Token)
	}
	b.WriteString(" = " + o.Result)
	switch {
	case o.Kind == OpReadDir && o.Result == ResOK:
		b.WriteString(" [" + strings.Join(o.Entries, ",") + "]")
	case o.Kind == OpStat && o.Result == ResOK:
		fmt.Fprintf(&b, " #%d", o.Seen)
	}
	if o.Result == ResUnknown && o.SeenAt > 0 {
		fmt.Fprintf(&b, " (token seen by %s)", ms(o.SeenAt))
	}
	return b.String()
}

// isWrite reports whether o may change the namespace.
func (o *Op) isWrite() bool {
	switch o.Kind {
	case OpCreate, OpUnlink, OpRename, OpMkdir, OpRmdir, OpRenameDir:
		return true
	}
	return false
}

// pending reports whether o is a write whose effect, if any, may come at
// any time after its call: its outcome is unknown and no stat saw its
// token.
func (o *Op) pending() bool { return o.Result == ResUnknown && o.isWrite() && o.SeenAt == 0 }

// slot is the model's state of one directory slot: tok is the
// directory's token (0: the directory does not exist) and files the
// tokens of its files by index in Names (0: no such file).
type slot struct {
	tok   uint32
	files [3]uint32
}

func (s *slot) empty() bool { return s.files == [3]uint32{} }

// rootState is the namespace of one root (one partition).
type rootState struct {
	s [2]slot
}

func slotIndex(d string) int { return slices.Index(Slots, d) }
func nameIndex(n string) int { return slices.Index(Names, n) }

// apply is the sequential specification of one root: the result o gets
// in state s and the state after it (what a successful read must see is
// checked by observed).
func apply(s rootState, o *Op) (string, rootState) {
	d := slotIndex(o.Dir)
	switch o.Kind {
	case OpCreate, OpUnlink, OpRename:
		n := nameIndex(o.Name)
		if d < 0 || n < 0 || s.s[d].tok == 0 {
			return ResNotExist, s // the slot does not exist
		}
		has := s.s[d].files[n] != 0
		switch {
		case o.Kind == OpCreate && has:
			return ResExist, s
		case o.Kind == OpCreate:
			s.s[d].files[n] = o.Token
			return ResOK, s
		case !has:
			return ResNotExist, s
		case o.Kind == OpUnlink:
			s.s[d].files[n] = 0
			return ResOK, s
		}
		d2, n2 := slotIndex(o.ToDir), nameIndex(o.To)
		if d2 < 0 || n2 < 0 || s.s[d2].tok == 0 {
			return ResNotExist, s // the destination's slot does not exist
		}
		f := s.s[d].files[n]
		s.s[d].files[n] = 0
		s.s[d2].files[n2] = f // a file replaces an existing file
		return ResOK, s
	case OpMkdir:
		if d < 0 {
			return ResWrong, s
		}
		if s.s[d].tok != 0 {
			return ResExist, s
		}
		s.s[d] = slot{tok: o.Token}
		return ResOK, s
	case OpRmdir:
		switch {
		case d < 0 || s.s[d].tok == 0:
			return ResNotExist, s
		case !s.s[d].empty():
			return ResNotEmpty, s
		}
		s.s[d] = slot{}
		return ResOK, s
	case OpRenameDir:
		d2 := slotIndex(o.ToDir)
		switch {
		case d < 0 || d2 < 0 || s.s[d].tok == 0:
			return ResNotExist, s
		case s.s[d2].tok != 0 && !s.s[d2].empty():
			return ResNotEmpty, s
		}
		s.s[d2] = s.s[d] // a directory replaces an empty directory
		s.s[d] = slot{}
		return ResOK, s
	case OpStat, OpReadDir:
		if o.Dir == "" {
			return ResOK, s // the root itself
		}
		if d < 0 || s.s[d].tok == 0 {
			return ResNotExist, s
		}
		if o.Name == "" {
			return ResOK, s
		}
		if n := nameIndex(o.Name); n < 0 || s.s[d].files[n] == 0 {
			return ResNotExist, s
		}
		return ResOK, s
	}
	return ResWrong, s
}

// observed reports whether a successful read o saw what state s holds.
func observed(s rootState, o *Op) bool {
	switch {
	case o.Kind == OpReadDir && o.Dir == "":
		var want []string
		for i, d := range Slots {
			if s.s[i].tok != 0 {
				want = append(want, d)
			}
		}
		return slices.Equal(o.Entries, want)
	case o.Kind == OpReadDir:
		sl := s.s[slotIndex(o.Dir)]
		var want []string
		for i, n := range Names {
			if sl.files[i] != 0 {
				want = append(want, n)
			}
		}
		return slices.Equal(o.Entries, want)
	case o.Kind == OpStat && o.Name == "":
		return o.Seen == s.s[slotIndex(o.Dir)].tok
	case o.Kind == OpStat:
		return o.Seen == s.s[slotIndex(o.Dir)].files[nameIndex(o.Name)]
	}
	return true
}

// The model of a partition is a set of possibilities, not one state.
//
// A write whose outcome stayed unknown (pending) may take effect at any
// one time after its call, or never. Branching on when would make the
// search exponential in the pending writes (porcupine tries each where it
// could apply, at every point, and backtracks over all of them when a
// read much later disagrees: what made the old check give up). Instead
// the state carries every possibility: the namespace and the set of
// pending writes "armed" there — called, not yet applied. Before each
// operation, any armed write that can apply may fire (the closure); then
// the operation keeps the possibilities in which it gets its recorded
// answer. A possibility whose armed set is a subset of another's with the
// same namespace is dropped (it can do nothing the other cannot). An
// armed write that never fires never happened; one that would fail is
// never fired (it changed nothing).
//
// A pending write only arms, and the pending writes arm in the order of
// their calls, each before any other operation called after it: arming
// earlier allows a superset of what arming later allows, so this loses
// no linearization, and porcupine never branches on where to arm (the
// model refuses every other order at once).
type possibility struct {
	s     rootState
	armed string // bitmap of the partition's pending writes, by pidx
}

// modelState is the state porcupine sees: the possibilities, canonical
// (sorted, without duplicates or dominated ones), and how many pending
// writes are armed (a function of the linearized set, so neither hashed
// nor compared).
type modelState struct {
	ps     []possibility
	nArmed int
}

// The armed bitmaps have no trailing zero byte, so that equal sets are
// equal strings.

func hasBit(m string, i int) bool { return i/8 < len(m) && m[i/8]&(1<<(i%8)) != 0 }

func setBit(m string, i int) string {
	b := []byte(m)
	for len(b) <= i/8 {
		b = append(b, 0)
	}
	b[i/8] |= 1 << (i % 8)
	return string(b)
}

func clearBit(m string, i int) string {
	if !hasBit(m, i) {
		return m
	}
	b := []byte(m)
	b[i/8] &^= 1 << (i % 8)
	for len(b) > 0 && b[len(b)-1] == 0 {
		b = b[:len(b)-1]
	}
	return string(b)
}

// subset reports whether every bit of a is in b.
func subset(a, b string) bool {
	if len(a) > len(b) {
		return false
	}
	for i := range len(a) {
		if a[i]&^b[i] != 0 {
			return false
		}
	}
	return true
}

func cmpPossibility(a, b possibility) int {
	for i := range a.s.s {
		if a.s.s[i].tok != b.s.s[i].tok {
			return cmp.Compare(a.s.s[i].tok, b.s.s[i].tok)
		}
		for j := range a.s.s[i].files {
			if a.s.s[i].files[j] != b.s.s[i].files[j] {
				return cmp.Compare(a.s.s[i].files[j], b.s.s[i].files[j])
			}
		}
	}
	return strings.Compare(a.armed, b.armed)
}

// canonical sorts ps, drops duplicates and dominated possibilities
// (those of one namespace are adjacent once sorted).
func canonical(ps []possibility) []possibility {
	slices.SortFunc(ps, cmpPossibility)
	ps = slices.Compact(ps)
	out := ps[:0]
	for i := 0; i < len(ps); {
		j := i + 1
		for j < len(ps) && ps[j].s == ps[i].s {
			j++
		}
		group := ps[i:j]
		for k, p := range group {
			dominated := false
			for l, q := range group {
				if l != k && subset(p.armed, q.armed) {
					dominated = true // distinct after Compact: a strict subset
					break
				}
			}
			if !dominated {
				out = append(out, p)
			}
		}
		i = j
	}
	return out
}

// closure returns ps with every possibility reachable by firing armed
// writes that apply (each at most once) before o, canonical. Only armed
// writes that conflict with o, or with one that does (transitively), may
// fire (see footprint): any other commutes with all of them and with o,
// so firing it after o gives the same possibilities, and it stays armed.
// This keeps the possibilities of independent paths from multiplying at
// every step (exact: TestClosureDeferral compares it with firing all).
func closure(ps []possibility, pend []*Op, o *Op) []possibility {
	fire := relevant(ps, pend, o)
	seen := make(map[possibility]bool, len(ps))
	queue := slices.Clone(ps)
	for _, p := range queue {
		seen[p] = true
	}
	for i := 0; i < len(queue); i++ {
		p := queue[i]
		for _, k := range fire {
			if !hasBit(p.armed, k) {
				continue
			}
			if res, next := apply(p.s, pend[k]); res == ResOK && next != p.s {
				q := possibility{s: next, armed: clearBit(p.armed, k)}
				if !seen[q] {
					seen[q] = true
					queue = append(queue, q)
				}
			}
		}
	}
	return canonical(queue)
}

// deferFiring enables the deferral of closure (tests compare both).
var deferFiring = true

// relevant returns the indexes of the armed writes that may fire before
// o: with deferFiring, those whose footprint conflicts with o's or with
// that of another one so chosen, else every armed one.
func relevant(ps []possibility, pend []*Op, o *Op) []int {
	var armed []int
	for k := range pend {
		for _, p := range ps {
			if hasBit(p.armed, k) {
				armed = append(armed, k)
				break
			}
		}
	}
	if !deferFiring {
		return armed
	}
	r, w := footprint(o)
	var out []int
	taken := make([]bool, len(pend))
	for changed := true; changed; {
		changed = false
		for _, k := range armed {
			if taken[k] {
				continue
			}
			pr, pw := footprint(pend[k])
			if pw&(r|w) != 0 || w&pr != 0 {
				taken[k], changed = true, true
				r, w = r|pr, w|pw
				out = append(out, k)
			}
		}
	}
	return out
}

// footprint returns what o reads and what it writes among the eight
// locations of a root: the two slots (existence and token) and their six
// files. Two operations neither of which writes what the other reads or
// writes commute: same answers, same state, in either order. (An absent
// slot has no files, so mkdir writes the slot only.)
func footprint(o *Op) (reads, writes uint8) {
	d, n := slotIndex(o.Dir), nameIndex(o.Name)
	slotBit := func(d int) uint8 { return 1 << d }
	file := func(d, n int) uint8 { return 1 << (2 + 3*d + n) }
	files := func(d int) uint8 { return 7 << (2 + 3*d) }
	switch {
	case o.Kind == OpReadDir && o.Dir == "":
		return slotBit(0) | slotBit(1), 0
	case d < 0:
		return 0xff, 0xff // not an operation of the workload: conflicts with all
	}
	switch o.Kind {
	case OpCreate, OpUnlink:
		return slotBit(d) | file(d, n), file(d, n)
	case OpRename:
		d2, n2 := slotIndex(o.ToDir), nameIndex(o.To)
		return slotBit(d) | file(d, n) | slotBit(d2), file(d, n) | file(d2, n2)
	case OpMkdir:
		return slotBit(d), slotBit(d)
	case OpRmdir:
		return slotBit(d) | files(d), slotBit(d)
	case OpRenameDir:
		d2 := slotIndex(o.ToDir)
		all := slotBit(d) | slotBit(d2) | files(d) | files(d2)
		return all, all
	case OpStat:
		if n < 0 {
			return slotBit(d), 0
		}
		return slotBit(d) | file(d, n), 0
	case OpReadDir:
		return slotBit(d) | files(d), 0
	}
	return 0xff, 0xff
}

// stepSet is porcupine's step: a pending write arms (in call order);
// any other operation, once every pending write called before it is
// armed, keeps the possibilities, after the closure, in which it gets its
// recorded answer (a create or mkdir whose token a stat saw: success)
// and, for a read, observes what it read.
func stepSet(st modelState, o *Op, pend []*Op) (bool, modelState) {
	if o.pending() {
		if o.pidx != st.nArmed {
			return false, st
		}
		ps := make([]possibility, len(st.ps))
		for i, p := range st.ps {
			ps[i] = possibility{s: p.s, armed: setBit(p.armed, o.pidx)}
		}
		return true, modelState{ps: ps, nArmed: st.nArmed + 1}
	}
	if st.nArmed < len(pend) && pend[st.nArmed].Call <= o.Call {
		return false, st // a pending write called before o must arm first
	}
	want := o.Result
	if o.Result == ResUnknown { // seen: it succeeded
		want = ResOK
	}
	var out []possibility
	for _, p := range closure(st.ps, pend, o) {
		res, next := apply(p.s, o)
		if res != want || res == ResOK && !o.isWrite() && !observed(p.s, o) {
			continue
		}
		out = append(out, possibility{s: next, armed: p.armed})
	}
	if len(out) == 0 {
		return false, st
	}
	return true, modelState{ps: canonical(out), nArmed: st.nArmed}
}

// explain says why o cannot follow st ("" if it can).
func explain(st modelState, o *Op, pend []*Op) string {
	if ok, _ := stepSet(st, o, pend); ok {
		return ""
	}
	if o.pending() {
		return "the pending writes arm in the order of their calls"
	}
	if st.nArmed < len(pend) && pend[st.nArmed].Call <= o.Call {
		return "a pending write called before it arms first"
	}
	ps := closure(st.ps, pend, o)
	var why []string
	for _, p := range ps {
		res, _ := apply(p.s, o)
		w := "the model answers " + res
		if res == o.Result || o.Result == ResUnknown && res == ResOK {
			w = "the model holds " + describeState(p.s) // a read that saw otherwise
		}
		if !slices.Contains(why, w) {
			why = append(why, w)
		}
	}
	return strings.Join(why, ", or ")
}

func describeState(s rootState) string {
	var parts []string
	for i, d := range Slots {
		sl := s.s[i]
		if sl.tok == 0 {
			parts = append(parts, d+": none")
			continue
		}
		var fs []string
		for j, n := range Names {
			if sl.files[j] != 0 {
				fs = append(fs, fmt.Sprintf("%s#%d", n, sl.files[j]))
			}
		}
		parts = append(parts, fmt.Sprintf("%s#%d{%s}", d, sl.tok, strings.Join(fs, " ")))
	}
	return strings.Join(parts, " ")
}

// describeSet renders the possibilities (the first few) with their armed
// writes.
func describeSet(st modelState, pend []*Op) string {
	var b strings.Builder
	for i, p := range st.ps {
		if i == 4 {
			fmt.Fprintf(&b, " | … %d more", len(st.ps)-i)
			break
		}
		if i > 0 {
			b.WriteString(" | ")
		}
		b.WriteString(describeState(p.s))
		var armed []string
		n := 0
		for k := range 8 * len(p.armed) {
			if hasBit(p.armed, k) {
				n++
				if k < len(pend) {
					o := pend[k]
					d := o.Kind + " " + o.Path()
					if o.Kind == OpRename || o.Kind == OpRenameDir {
						d += " → " + o.ToPath()
					}
					armed = append(armed, d+" called "+ms(o.Call))
				}
			}
		}
		switch {
		case len(armed) > 0:
			fmt.Fprintf(&b, " (armed: %s)", strings.Join(armed, "; "))
		case n > 0:
			fmt.Fprintf(&b, " (%d pending writes armed)", n)
		}
	}
	return b.String()
}

func hashSet(st modelState) uint64 {
	h := uint64(14695981039346656037)
	mix := func(v uint64) { h = (h ^ v) * 1099511628211 }
	for _, p := range st.ps {
		for i := range p.s.s {
			mix(uint64(p.s.s[i].tok))
			for _, f := range p.s.s[i].files {
				mix(uint64(f))
			}
		}
		for i := range len(p.armed) {
			mix(uint64(p.armed[i]))
		}
	}
	return h
}

// stateBytes estimates what porcupine keeps of a state in its cache.
func stateBytes(st modelState) int64 {
	n := int64(48)
	for _, p := range st.ps {
		n += 64 + int64(len(p.armed))
	}
	return n
}

// rootModel is the porcupine model of one root whose pending writes are
// pend (by pidx): no Partition function, each history it checks is one
// partition already (see Partitions). onStep, if set, is called after
// every accepted step with the new state; when it returns false the step
// is refused, which makes porcupine give up quickly (the memory bound,
// see checkPartition).
func rootModel(pend []*Op, onStep func(modelState) bool) porcupine.Model {
	return model(func(string) []*Op { return pend }, onStep)
}

// fullModel is the model of several roots at once, partitioned by root,
// for a verbose check and the visualization; pend gives each root's
// pending writes, onStep is as for rootModel.
func fullModel(pend map[string][]*Op, onStep func(modelState) bool) porcupine.Model {
	m := model(func(root string) []*Op { return pend[root] }, onStep)
	m.Partition = func(h []porcupine.Operation) [][]porcupine.Operation {
		by := make(map[string][]porcupine.Operation)
		var roots []string
		for _, o := range h {
			r := o.Input.(*Op).Root
			if _, ok := by[r]; !ok {
				roots = append(roots, r)
			}
			by[r] = append(by[r], o)
		}
		slices.Sort(roots)
		out := make([][]porcupine.Operation, 0, len(roots))
		for _, r := range roots {
			out = append(out, by[r])
		}
		return out
	}
	return m
}

func model(pendOf func(root string) []*Op, onStep func(modelState) bool) porcupine.Model {
	return porcupine.Model{
		Init: func() any { return modelState{ps: []possibility{{}}} },
		Step: func(state, input, _ any) (bool, any) {
			o := input.(*Op)
			ok, next := stepSet(state.(modelState), o, pendOf(o.Root))
			if ok && onStep != nil && !onStep(next) {
				return false, state
			}
			return ok, next
		},
		Equal: func(a, b any) bool {
			return slices.Equal(a.(modelState).ps, b.(modelState).ps)
		},
		Hash:              func(state any) uint64 { return hashSet(state.(modelState)) },
		DescribeOperation: func(input, _ any) string { return input.(*Op).String() },
		// The visualization's states name no root: armed writes are
		// counted, not named.
		DescribeState: func(state any) string { return describeSet(state.(modelState), nil) },
	}
}

// Partitions groups the operations by root, in root order, as porcupine
// operations, with each root's pending writes (numbered by pidx): reads
// without an answer, requests never sent and wrong answers are left out
// (they observed nothing and changed nothing; wrong answers are reported
// apart); a pending write returns after the end of the history; a
// create or mkdir whose token a stat saw returns then (ResolveByTokens
// should run first).
func Partitions(ops []Op) (roots []string, parts [][]porcupine.Operation, pend [][]*Op) {
	var end int64
	for i := range ops {
		end = max(end, ops[i].Return, ops[i].SeenAt)
	}
	end = min(end, math.MaxInt64-10)
	by := make(map[string][]porcupine.Operation)
	pby := make(map[string][]*Op)
	dense := make(map[int]int) // client ids, renumbered 0.. for the visualization
	for i := range ops {
		o := &ops[i]
		if o.Result == ResNotSent || o.Result == ResWrong {
			continue
		}
		if o.Result == ResUnknown && !o.isWrite() {
			continue
		}
		ret := o.Return
		switch {
		case o.pending():
			ret = end + 1
			pby[o.Root] = append(pby[o.Root], o)
		case o.Result == ResUnknown:
			ret = o.SeenAt
		}
		id, ok := dense[o.Client]
		if !ok {
			id = len(dense)
			dense[o.Client] = id
		}
		by[o.Root] = append(by[o.Root], porcupine.Operation{ClientId: id, Input: o, Output: o.Result, Call: o.Call, Return: ret})
	}
	for r := range by {
		roots = append(roots, r)
	}
	sort.Strings(roots)
	for _, r := range roots {
		ps := pby[r]
		slices.SortStableFunc(ps, func(a, b *Op) int { return cmp.Compare(a.Call, b.Call) })
		for i, o := range ps {
			o.pidx = i
		}
		parts = append(parts, by[r])
		pend = append(pend, ps)
	}
	return roots, parts, pend
}

// ResolveByTokens sets SeenAt of every create and mkdir whose outcome is
// unknown to the earliest return of a successful stat that answered its
// token. Tokens are unique, so such a stat proves that this operation
// created the inode, before the stat returned.
func ResolveByTokens(ops []Op) int {
	first := make(map[uint32]int64)
	for i := range ops {
		o := &ops[i]
		if o.Kind == OpStat && o.Result == ResOK && o.Seen != 0 {
			if t, ok := first[o.Seen]; !ok || o.Return < t {
				first[o.Seen] = o.Return
			}
		}
	}
	n := 0
	for i := range ops {
		o := &ops[i]
		if o.Result != ResUnknown || (o.Kind != OpCreate && o.Kind != OpMkdir) || o.Token == 0 {
			continue
		}
		if t, ok := first[o.Token]; ok {
			o.SeenAt = max(t, o.Call)
			n++
		}
	}
	return n
}

// Durability checks each path directly: the write of a path that was
// invoked last and overlapped no other write of that path (and whose
// outcome is known) decides whether the path exists at the end, and for
// a create or mkdir which token it holds; final stats that disagree are a
// lost acknowledged write or a deleted path that came back. It returns
// one message per violation. (The linearizability check covers this too;
// this one names the path and the write in plain words.)
func Durability(ops []Op) []string {
	writes := make(map[string][]*Op)
	final := make(map[string][]*Op)
	for i := range ops {
		o := &ops[i]
		if o.Result == ResNotSent || o.Result == ResWrong {
			continue
		}
		if o.Final {
			if o.Kind == OpStat && (o.Result == ResOK || o.Result == ResNotExist) {
				final[o.Path()] = append(final[o.Path()], o)
			}
			continue
		}
		for _, p := range touched(o) {
			writes[p] = append(writes[p], o)
		}
	}
	var out []string
	keys := make([]string, 0, len(writes))
	for k := range writes {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		ws := writes[k]
		last := ws[0]
		for _, w := range ws[1:] {
			if w.Call > last.Call {
				last = w
			}
		}
		if last.Result == ResUnknown {
			continue
		}
		overlapped := false
		for _, w := range ws {
			if w != last && (w.pending() || max(w.Return, w.SeenAt) >= last.Call) {
				overlapped = true
				break
			}
		}
		if overlapped {
			continue
		}
		want, tok, decided := decides(last, k)
		if !decided {
			continue
		}
		for _, f := range final[k] {
			got := f.Result == ResOK
			if got == want && (!got || tok == 0 || f.Seen == tok) {
				continue
			}
			what := "a deleted path came back"
			switch {
			case want && got:
				what = fmt.Sprintf("an acknowledged write was lost (token #%d, not #%d)", f.Seen, tok)
			case want:
				what = "an acknowledged write was lost"
			}
			out = append(out, fmt.Sprintf("%s: %s: last write %q (call %s, return %s) but the final stat answered %s",
				what, k, last.String(), ms(last.Call), ms(last.Return), f.String()))
		}
	}
	return out
}

// touched returns the paths whose existence or content a write o may
// change (nil for a read). mkdir and rmdir leave the files of their slot
// absent before and after, so they touch the directory only.
func touched(o *Op) []string {
	var ps []string
	switch o.Kind {
	case OpCreate, OpUnlink, OpMkdir, OpRmdir:
		ps = append(ps, o.Path())
	case OpRename:
		ps = append(ps, o.Path(), o.ToPath())
	case OpRenameDir:
		for _, d := range []string{o.Dir, o.ToDir} {
			ps = append(ps, opPath(o.Root, d, ""))
			for _, n := range Names {
				ps = append(ps, opPath(o.Root, d, n))
			}
		}
	}
	return ps
}

// decides returns what a write w with a known outcome says of path k at
// its linearization point: whether k exists and, if w gave it its token,
// that token; decided is false when w's outcome does not tell.
func decides(w *Op, k string) (exists bool, tok uint32, decided bool) {
	isSrc := k == w.Path()
	switch w.Kind {
	case OpCreate:
		switch w.Result {
		case ResOK:
			return true, w.Token, true
		case ResExist:
			return true, 0, true
		case ResNotExist:
			return false, 0, true // the slot did not exist
		}
	case OpMkdir:
		switch w.Result {
		case ResOK:
			return true, w.Token, true
		case ResExist:
			return true, 0, true
		}
	case OpUnlink:
		return false, 0, w.Result == ResOK || w.Result == ResNotExist
	case OpRmdir:
		switch w.Result {
		case ResOK, ResNotExist:
			return false, 0, true
		case ResNotEmpty:
			return true, 0, true
		}
	case OpRename:
		switch {
		case w.Result == ResOK:
			return !isSrc, 0, true
		case w.Result == ResNotExist && isSrc && w.Dir == w.ToDir:
			return false, 0, true // in one slot: the source did not exist
		}
	case OpRenameDir:
		fromSrc := k == opPath(w.Root, w.Dir, "") || strings.HasPrefix(k, opPath(w.Root, w.Dir, "")+"/")
		isDst := k == opPath(w.Root, w.ToDir, "")
		switch {
		case w.Result == ResOK && fromSrc:
			return false, 0, true
		case w.Result == ResOK && isDst:
			return true, 0, true
		case w.Result == ResNotExist && fromSrc:
			return false, 0, true
		case w.Result == ResNotEmpty && (isDst || k == opPath(w.Root, w.Dir, "")):
			return true, 0, true
		}
	}
	return false, 0, false
}

// WrongAnswers returns one message per operation that got an answer that
// is neither a correct one nor "unavailable".
func WrongAnswers(ops []Op) []string {
	var out []string
	for i := range ops {
		if ops[i].Result == ResWrong {
			out = append(out, fmt.Sprintf("%s at %s: %s", ops[i].String(), ms(ops[i].Call), ops[i].Err))
		}
	}
	return out
}

func ms(ns int64) string { return fmt.Sprintf("%.3fs", float64(ns)/1e9) }
