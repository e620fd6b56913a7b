package chaos

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"

	"github.com/anishathalye/porcupine"
)

// Operation kinds.
const (
	OpCreate  = "create"
	OpStat    = "stat"
	OpUnlink  = "unlink"
	OpRename  = "rename"
	OpReadDir = "readdir"
)

// Results of an operation.
const (
	// ResOK is success.
	ResOK = "ok"
	// ResNotExist is fs.ErrNotExist.
	ResNotExist = "notexist"
	// ResExist is fs.ErrExist.
	ResExist = "exist"
	// ResUnknown is an outcome the client cannot know: a timeout, a broken
	// connection, or "unavailable" from a server. A write may have been
	// applied (now or later); a read tells nothing.
	ResUnknown = "unknown"
	// ResNotSent is "unavailable" from the client itself when no node could
	// be reached: the request was certainly never executed.
	ResNotSent = "notsent"
	// ResWrong is any other error: never a correct answer.
	ResWrong = "wrong"
)

// Names are the file names every directory's operations use; a small set
// keeps the model's state one bitmask.
var Names = []string{"a", "b", "c", "d", "e", "f"}

// nameBit returns the bit of name in a directory state (bit 31 for a name
// the workload never uses: no model state has it).
func nameBit(name string) uint32 {
	if i := slices.Index(Names, name); i >= 0 {
		return 1 << i
	}
	return 1 << 31
}

// Op is one recorded operation: what a client invoked, when, and what it
// got back. Times are nanoseconds since the start of the run.
type Op struct {
	// Client is the porcupine client id (a worker gets a fresh id after an
	// operation with an unknown outcome, so one id's operations never
	// overlap).
	Client int `json:"client"`
	// Kind is OpCreate, OpStat, OpUnlink, OpRename or OpReadDir.
	Kind string `json:"kind"`
	// Dir is the directory (the model's partition).
	Dir string `json:"dir"`
	// Name is the file name (the source of a rename); "" for readdir.
	Name string `json:"name,omitempty"`
	// To is the destination name of a rename (same directory).
	To string `json:"to,omitempty"`
	// Call and Return are the invocation and response times.
	Call   int64 `json:"call"`
	Return int64 `json:"return"`
	// Result is one of the Res* values.
	Result string `json:"result"`
	// Entries are the names a successful readdir listed.
	Entries []string `json:"entries,omitempty"`
	// Err is the error text, if any.
	Err string `json:"err,omitempty"`
	// Final marks the reads made after healing.
	Final bool `json:"final,omitempty"`
}

func (o *Op) String() string {
	s := o.Kind + " " + o.Dir
	switch o.Kind {
	case OpRename:
		s += "/" + o.Name + " → " + o.To
	case OpReadDir:
	default:
		s += "/" + o.Name
	}
	s += " = " + o.Result
	if o.Kind == OpReadDir && o.Result == ResOK {
		s += " [" + strings.Join(o.Entries, ",") + "]"
	}
	return s
}

// isWrite reports whether o may change a directory.
func (o *Op) isWrite() bool {
	return o.Kind == OpCreate || o.Kind == OpUnlink || o.Kind == OpRename
}

// dirState is the model's state of one directory: a bitmask of Names.
type dirState uint32

// step is the sequential specification of one directory of files. An
// unknown outcome accepts the operation's effect if it can apply and is a
// no-op otherwise; because such an operation's return time is after the
// end of the history, "never applied" is the same as applying it last.
func step(s dirState, o *Op) (bool, dirState) {
	b := dirState(nameBit(o.Name))
	has := s&b != 0
	unknown := o.Result == ResUnknown
	switch o.Kind {
	case OpCreate:
		if unknown {
			return true, s | b
		}
		if has {
			return o.Result == ResExist, s
		}
		return o.Result == ResOK, s | b
	case OpUnlink:
		if unknown {
			return true, s &^ b
		}
		if !has {
			return o.Result == ResNotExist, s
		}
		return o.Result == ResOK, s &^ b
	case OpRename:
		to := dirState(nameBit(o.To))
		if !has {
			return unknown || o.Result == ResNotExist, s
		}
		if unknown || o.Result == ResOK {
			return true, s&^b | to // a file replaces an existing file
		}
		return false, s
	case OpStat:
		if unknown {
			return true, s
		}
		if has {
			return o.Result == ResOK, s
		}
		return o.Result == ResNotExist, s
	case OpReadDir:
		if unknown {
			return true, s
		}
		var got dirState
		for _, e := range o.Entries {
			got |= dirState(nameBit(e))
		}
		return o.Result == ResOK && got == s, s
	}
	return false, s
}

func describeState(s dirState) string {
	var names []string
	for i, n := range Names {
		if s&(1<<i) != 0 {
			names = append(names, n)
		}
	}
	return "{" + strings.Join(names, ",") + "}"
}

// Model is the porcupine model of the namespace: one partition per
// directory, each a dirState.
func Model() porcupine.Model {
	return porcupine.Model{
		Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
			by := make(map[string][]porcupine.Operation)
			var dirs []string
			for _, op := range h {
				d := op.Input.(*Op).Dir
				if _, ok := by[d]; !ok {
					dirs = append(dirs, d)
				}
				by[d] = append(by[d], op)
			}
			sort.Strings(dirs)
			out := make([][]porcupine.Operation, 0, len(dirs))
			for _, d := range dirs {
				out = append(out, by[d])
			}
			return out
		},
		Init: func() any { return dirState(0) },
		Step: func(state, input, _ any) (bool, any) {
			ok, next := step(state.(dirState), input.(*Op))
			return ok, next
		},
		Hash: func(state any) uint64 { return uint64(state.(dirState)) },
		DescribeOperation: func(input, _ any) string {
			return input.(*Op).String()
		},
		DescribeState: func(state any) string { return describeState(state.(dirState)) },
	}
}

// PorcupineHistory turns the recorded operations into porcupine's form:
// reads without an answer and requests never sent are left out (they
// observed nothing and changed nothing), unknown outcomes return after the
// end of the history.
func PorcupineHistory(ops []Op) []porcupine.Operation {
	var end int64
	for i := range ops {
		end = max(end, ops[i].Return)
	}
	inf := end + 1
	if inf <= 0 {
		inf = math.MaxInt64
	}
	var h []porcupine.Operation
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
		if o.Result == ResUnknown {
			ret = inf
		}
		id, ok := dense[o.Client]
		if !ok {
			id = len(dense)
			dense[o.Client] = id
		}
		h = append(h, porcupine.Operation{ClientId: id, Input: o, Output: o.Result, Call: o.Call, Return: ret})
	}
	return h
}

// Durability checks each name directly: the write of a name that was
// invoked last and overlapped no other write of that name (and whose
// outcome is known) decides whether the name exists at the end; final
// reads that disagree are a lost acknowledged write or a deleted path that
// came back. It returns one message per violation.
func Durability(ops []Op) []string {
	type key struct{ dir, name string }
	writes := make(map[key][]*Op)
	final := make(map[key][]*Op)
	for i := range ops {
		o := &ops[i]
		if o.Result == ResNotSent || o.Result == ResWrong {
			continue
		}
		if o.Final {
			if o.Result != ResOK && o.Result != ResNotExist {
				continue
			}
			if o.Kind == OpStat {
				final[key{o.Dir, o.Name}] = append(final[key{o.Dir, o.Name}], o)
			}
			continue
		}
		if !o.isWrite() {
			continue
		}
		writes[key{o.Dir, o.Name}] = append(writes[key{o.Dir, o.Name}], o)
		if o.Kind == OpRename {
			writes[key{o.Dir, o.To}] = append(writes[key{o.Dir, o.To}], o)
		}
	}
	var out []string
	keys := make([]key, 0, len(writes))
	for k := range writes {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		return keys[i].dir < keys[j].dir || keys[i].dir == keys[j].dir && keys[i].name < keys[j].name
	})
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
			if w != last && (w.Result == ResUnknown || w.Return >= last.Call) {
				overlapped = true
				break
			}
		}
		if overlapped {
			continue
		}
		var want, decided bool
		switch {
		case last.Kind == OpCreate && (last.Result == ResOK || last.Result == ResExist):
			want, decided = true, true
		case last.Kind == OpUnlink && (last.Result == ResOK || last.Result == ResNotExist):
			want, decided = false, true
		case last.Kind == OpRename && last.Result == ResOK:
			want, decided = k.name == last.To, true
		case last.Kind == OpRename && last.Result == ResNotExist && k.name == last.Name:
			want, decided = false, true
		}
		if !decided {
			continue
		}
		for _, f := range final[k] {
			got := f.Result == ResOK
			if got == want {
				continue
			}
			what := "a deleted path came back"
			if want {
				what = "an acknowledged write was lost"
			}
			out = append(out, fmt.Sprintf("%s: %s/%s: last write %q (call %s, return %s) but the final stat answered %s",
				what, k.dir, k.name, last.String(), ms(last.Call), ms(last.Return), f.Result))
		}
	}
	return out
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
