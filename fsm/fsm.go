package fsm

import (
	"fmt"
	"slices"
	"sync"

	"github.com/ghba/ghba/routing"
	"github.com/hashicorp/raft"
)

// Options configure an FSM.
type Options struct {
	// OnChange, if set, is called after every command that changed the
	// state and after every Restore, in log order, outside the FSM's lock
	// (so it may call the FSM's getters).
	//
	// It runs on raft's FSM goroutine: Apply, Snapshot and Restore wait for
	// it, and while it runs the group's Raft cannot apply anything. It must
	// return quickly and must never block, call raft.Apply/Barrier or wait
	// for anything raft does — hand the event to a buffered channel with a
	// non-blocking send, or to a goroutine, and reconcile from the getters
	// (Held, Members) if events are dropped.
	OnChange func(Event)
}

// FSM is the replicated state machine of one G-HBA group. It implements
// raft.FSM. Its getters are safe for concurrent use with each other and
// with Apply; they return copies.
type FSM struct {
	onChange func(Event)

	mu      sync.RWMutex
	st      *state // immutable once published
	applied uint64 // index of the last entry given to Apply or restored
}

var _ raft.FSM = (*FSM)(nil)

// New returns an FSM with an empty, not yet bootstrapped state.
func New(opts Options) *FSM {
	return &FSM{onChange: opts.OnChange, st: newState()}
}

// current returns the published state.
func (f *FSM) current() *state {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.st
}

// Apply implements raft.FSM: it applies one committed log entry and returns
// its *ApplyResult. A bad entry (unknown type or version, garbage body) or a
// refused command yields a result with Err set and leaves the state
// unchanged; Apply never panics on log contents.
func (f *FSM) Apply(l *raft.Log) any {
	res := &ApplyResult{Index: l.Index}
	var next *state
	if l.Type == raft.LogCommand {
		next, res.Type, res.Moves, res.Err = f.current().apply(l.Data, l.Index)
	}
	f.mu.Lock()
	if next != nil {
		f.st = next
	}
	f.applied = l.Index
	f.mu.Unlock()
	if next != nil && f.onChange != nil {
		f.onChange(Event{Index: l.Index, Type: res.Type, Moves: slices.Clone(res.Moves)})
	}
	return res
}

// apply decodes and applies one entry to s. It returns the next state (nil
// when nothing changed or on error).
func (s *state) apply(data []byte, index uint64) (next *state, t MsgType, moves []routing.Move, err error) {
	cmd, err := DecodeCommand(data)
	if err != nil {
		if len(data) > 0 {
			t = MsgType(data[0])
		}
		return nil, t, nil, err
	}
	t = cmd.MsgType()
	if t != MsgBootstrap && !s.bootstrapped {
		return nil, t, nil, fmt.Errorf("%s: %w", t, ErrNotBootstrapped)
	}
	spec, _ := specOf(t)
	defer func() { // a bug must not take raft down with it
		if r := recover(); r != nil {
			next, moves, err = nil, nil, fmt.Errorf("%s at index %d: panic %v: %w", t, index, r, ErrInconsistent)
		}
	}()
	next, moves, err = spec.apply(s, cmd, index)
	if err != nil {
		return nil, t, nil, fmt.Errorf("%s: %w", t, err)
	}
	if next == nil {
		return nil, t, nil, nil
	}
	moves = netMoves(moves)
	next.migrated += migrations(moves)
	return next, t, moves, nil
}

// AppliedIndex returns the Raft index of the last entry applied (or of the
// last command of the restored snapshot).
func (f *FSM) AppliedIndex() uint64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.applied
}

// Bootstrapped reports whether the group's Bootstrap command was applied.
func (f *FSM) Bootstrapped() bool { return f.current().bootstrapped }

// Config returns the group's configuration; false before bootstrap.
func (f *FSM) Config() (Config, bool) {
	s := f.current()
	return s.cfg, s.bootstrapped
}

// Members returns every member, whatever its status, sorted by id.
func (f *FSM) Members() []Member { return f.current().sortedMembers() }

// Member returns member id; false when it is not in the group.
func (f *FSM) Member(id string) (Member, bool) {
	m, ok := f.current().members[id]
	return m, ok
}

// Size returns the number of members, whatever their status (what counts
// against MaxGroupSize).
func (f *FSM) Size() int { return len(f.current().members) }

// ActiveMembers returns the ids of the active members (those holding
// replicas), sorted.
func (f *FSM) ActiveMembers() []string { return f.current().asg.Members() }

// Origins returns the ids of the origins (nodes outside the group whose
// replicas the group holds), sorted.
func (f *FSM) Origins() []string { return f.current().asg.Origins() }

// HolderOf returns the member holding origin's replica; false when origin
// is unknown or has no holder (no active member).
func (f *FSM) HolderOf(origin string) (string, bool) { return f.current().asg.HolderOf(origin) }

// Held returns the origins whose replicas member holds, sorted.
func (f *FSM) Held(member string) []string { return f.current().asg.Held(member) }

// Load returns the number of replicas member holds.
func (f *FSM) Load(member string) int { return f.current().asg.Load(member) }

// Balance returns the fewest and most replicas held by an active member;
// (0, 0) without active members. The FSM keeps max − min ≤ 1.
func (f *FSM) Balance() (min, max int) { return f.current().asg.Balance() }

// IDBFA returns the encoding of the group's IDBFA (routing.DecodeIDBFA reads
// it) and its version, for export to other groups; nil before bootstrap.
func (f *FSM) IDBFA() (data []byte, version uint64) {
	s := f.current()
	if s.idb == nil {
		return nil, 0
	}
	return slices.Clone(s.idbfaBytes()), s.idb.Version()
}

// IDBFAVersion returns the version of the group's IDBFA (0 before
// bootstrap); it grows with every change.
func (f *FSM) IDBFAVersion() uint64 {
	s := f.current()
	if s.idb == nil {
		return 0
	}
	return s.idb.Version()
}

// ReplicasMigrated returns the number of replicas moved from one member to
// another since the group began (light-weight migration on joins, and
// reassignment on leaves, failures, splits and rebalancing). An origin's
// first assignment and its removal are not migrations.
func (f *FSM) ReplicasMigrated() uint64 { return f.current().migrated }
