package fsm

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"

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

	// OnFatal, if set, is called once, when the FSM halts (see the package
	// documentation, "Upgrades and unknown commands"), with the error that
	// halted it (it wraps ErrHalted and the cause). The node should log it
	// at error level and shut itself down: a halted FSM applies nothing
	// more. It is called outside the FSM's lock, on raft's FSM goroutine or
	// (for a Restore of a local snapshot) on the goroutine calling
	// raft.NewRaft; like OnChange it must not block — in particular it must
	// not shut raft down itself, but hand that to another goroutine.
	OnFatal func(error)

	// OnSkip, if set, is called for every log entry or snapshot record the
	// FSM skipped because this build does not know it and it is marked
	// ignorable, outside the FSM's lock, on the goroutine of Apply or
	// Restore. The node should log it (at warning level): it means a newer
	// build wrote it. It must not block. FSM.Skipped counts them too.
	OnSkip func(SkippedEntry)
}

// FSM is the replicated state machine of one G-HBA group. It implements
// raft.FSM. Its getters are safe for concurrent use with each other and
// with Apply; they return copies.
type FSM struct {
	onChange func(Event)
	onFatal  func(error)
	onSkip   func(SkippedEntry)

	mu       sync.RWMutex
	st       *state // immutable once published
	applied  uint64 // index of the last entry given to Apply or restored
	halted   error  // why the FSM halted; nil while it runs
	skipped  uint64 // entries and records skipped as ignorable
	lastSkip SkippedEntry
}

var _ raft.FSM = (*FSM)(nil)

// New returns an FSM with an empty, not yet bootstrapped state.
func New(opts Options) *FSM {
	return &FSM{onChange: opts.OnChange, onFatal: opts.OnFatal, onSkip: opts.OnSkip, st: newState()}
}

// current returns the published state.
func (f *FSM) current() *state {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.st
}

// Apply implements raft.FSM: it applies one committed log entry and returns
// its *ApplyResult. A refused command or a garbage body of a known type
// yields a result with Err set and leaves the state unchanged; an entry of
// an unknown type or version is skipped if its type is Ignorable and halts
// the FSM otherwise (see the package documentation). Apply never panics on
// log contents.
func (f *FSM) Apply(l *raft.Log) any {
	res := &ApplyResult{Index: l.Index}
	if err := f.Halted(); err != nil {
		if l.Type == raft.LogCommand && len(l.Data) > 0 {
			res.Type = MsgType(l.Data[0])
		}
		res.Err = haltedAt(l.Index, err)
		return res
	}
	var next *state
	if l.Type == raft.LogCommand {
		next = f.current().apply(l.Data, l.Index, res)
	}
	var skips []SkippedEntry
	if fromNewerBuild(res.Err) {
		if !res.Type.Ignorable() {
			res.Err = f.halt(l.Index, fmt.Errorf("%w: entry %d: %w", ErrHalted, l.Index, res.Err))
			return res
		}
		skips = []SkippedEntry{{Index: l.Index, Type: res.Type, Version: l.Data[1]}}
		res.Err, res.Skipped = nil, true
	}
	if err := f.publish(l.Index, next, skips); err != nil {
		return &ApplyResult{Index: l.Index, Type: res.Type, Err: err}
	}
	f.reportSkips(skips)
	if next != nil && f.onChange != nil {
		f.onChange(Event{Index: l.Index, Type: res.Type, Moves: slices.Clone(res.Moves), Shards: cloneChanges(res.Shards)})
	}
	return res
}

// fromNewerBuild reports whether err means the entry was written by a build
// that knows a command type or format version this one does not.
func fromNewerBuild(err error) bool {
	return errors.Is(err, ErrUnknownCommand) || errors.Is(err, ErrUnsupportedVersion)
}

// publish makes next the state as of entry index (nil: the state is
// unchanged) and counts skips. It changes nothing and fails with ErrHalted
// if the FSM has halted.
func (f *FSM) publish(index uint64, next *state, skips []SkippedEntry) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.halted != nil {
		return haltedAt(index, f.halted)
	}
	if next != nil {
		f.st = next
	}
	f.applied = index
	if len(skips) > 0 {
		f.skipped += uint64(len(skips))
		f.lastSkip = skips[len(skips)-1]
	}
	return nil
}

// reportSkips passes skipped entries or records to OnSkip.
func (f *FSM) reportSkips(skips []SkippedEntry) {
	if f.onSkip == nil {
		return
	}
	for _, s := range skips {
		f.onSkip(s)
	}
}

// halt halts the FSM with cause (which wraps ErrHalted) while processing
// entry index, and reports it to OnFatal, unless it had halted already. It
// returns the error for that entry: cause, or the refusal of a halted FSM.
func (f *FSM) halt(index uint64, cause error) error {
	f.mu.Lock()
	prev := f.halted
	if prev == nil {
		f.halted = cause
	}
	f.mu.Unlock()
	if prev != nil {
		return haltedAt(index, prev)
	}
	if f.onFatal != nil {
		f.onFatal(cause)
	}
	return cause
}

// haltedAt is the error refusing entry index of a halted FSM: it wraps
// ErrHalted and names, without wrapping, the cause (another entry's).
func haltedAt(index uint64, halted error) error {
	return fmt.Errorf("entry %d refused: %w (%v)", index, ErrHalted, halted)
}

// Halted returns the error that halted the FSM (it wraps ErrHalted and the
// cause), or nil while the FSM runs. A halted FSM stays halted: only a new
// FSM (a restarted node, normally running a newer build) applies the log
// again.
func (f *FSM) Halted() error {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.halted
}

// Skipped returns how many log entries and snapshot records this FSM
// skipped because they were of an unknown kind marked ignorable, and the
// last of them. The count is local to this FSM value, not part of the
// replicated state.
func (f *FSM) Skipped() (count uint64, last SkippedEntry) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.skipped, f.lastSkip
}

// apply decodes and applies one entry to s, filling res (Type, and Err or
// the changes). It returns the next state (nil when nothing changed or on
// error).
func (s *state) apply(data []byte, index uint64, res *ApplyResult) (next *state) {
	cmd, err := DecodeCommand(data)
	if err != nil {
		if len(data) > 0 {
			res.Type = MsgType(data[0])
		}
		res.Err = err
		return nil
	}
	t := cmd.MsgType()
	res.Type = t
	if t != MsgBootstrap && !s.bootstrapped {
		res.Err = fmt.Errorf("%s: %w", t, ErrNotBootstrapped)
		return nil
	}
	spec, _ := specOf(t)
	defer func() { // a bug must not take raft down with it
		if r := recover(); r != nil {
			next, res.Moves, res.Shards, res.MovedOut = nil, nil, nil, nil
			res.Err = fmt.Errorf("%s at index %d: panic %v: %w", t, index, r, ErrInconsistent)
		}
	}()
	next, moves, err := spec.apply(s, cmd, index)
	if err != nil {
		res.Err = fmt.Errorf("%s: %w", t, err)
		return nil
	}
	if next == nil {
		return nil
	}
	res.Moves = netMoves(moves)
	next.migrated += migrations(res.Moves)
	res.Shards = diffShards(s.shards, next.shards)
	res.MovedOut = movedOut(res.Shards)
	next.shardMoves += replicaMoves(res.Shards)
	return next
}

// AppliedIndex returns the Raft index of the last entry applied, refused or
// skipped (or of the last command of the restored snapshot). Once the FSM
// has halted it stays at the entry before the one that halted it.
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

// Shards returns every shard of the group, sorted by id.
func (f *FSM) Shards() []Shard {
	s := f.current()
	out := make([]Shard, 0, len(s.shards))
	for _, id := range slices.Sorted(maps.Keys(s.shards)) {
		out = append(out, s.shards[id].clone())
	}
	return out
}

// Shard returns shard id; false when it is not a shard of the group.
func (f *FSM) Shard(id string) (Shard, bool) {
	sh, ok := f.current().shards[id]
	return sh.clone(), ok
}

// HostedBy returns the shards of which member hosts a replica, sorted.
func (f *FSM) HostedBy(member string) []string {
	return f.current().shardIDs(func(sh Shard) bool { return sh.hosts(member) })
}

// OwnedBy returns the shards member owns (is the preferred leader of),
// sorted.
func (f *FSM) OwnedBy(member string) []string {
	return f.current().shardIDs(func(sh Shard) bool { return sh.Owner == member })
}

// ReplicaLoad returns the number of shard replicas member hosts. The FSM
// keeps the loads of the active members within one of each other.
func (f *FSM) ReplicaLoad(member string) int { return len(f.HostedBy(member)) }

// ShardReplicasMoved returns the number of shard replicas moved from one
// member to another since the group began (repairs, leaves, splits and
// balancing). A new shard's placement, a replica added because the group
// grew and one dropped without replacement are not moves.
func (f *FSM) ShardReplicasMoved() uint64 { return f.current().shardMoves }
