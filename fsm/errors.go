package fsm

import "errors"

// Errors reported in ApplyResult.Err (wrapped with context) and by Restore
// and DecodeCommand. Test for them with errors.Is.
var (
	// ErrNotBootstrapped reports a command applied before the group's
	// Bootstrap command.
	ErrNotBootstrapped = errors.New("fsm: group not bootstrapped")
	// ErrGeometryChanged reports a Bootstrap whose filter geometries (local,
	// LRU, IDBFA) or LRU size differ from the group's.
	ErrGeometryChanged = errors.New("fsm: filter geometry differs from the group's")
	// ErrConfigConflict reports a Bootstrap whose group name or maximum size
	// differs from the group's.
	ErrConfigConflict = errors.New("fsm: configuration differs from the group's")
	// ErrGroupFull reports adding members beyond the maximum group size M.
	ErrGroupFull = errors.New("fsm: group full")
	// ErrUnknownMember reports a member id that is not in the group.
	ErrUnknownMember = errors.New("fsm: unknown member")
	// ErrOriginIsMember reports an origin id that is a member of the group:
	// origins are the nodes outside the group.
	ErrOriginIsMember = errors.New("fsm: origin is a member of the group")
	// ErrShardConflict reports a member bringing a shard that the group
	// already has under another owner.
	ErrShardConflict = errors.New("fsm: shard owned by another member")
	// ErrMemberActive reports a RepairMember command for a member that is
	// active (it came back before the repair).
	ErrMemberActive = errors.New("fsm: member is active")
	// ErrUnknownCommand reports a log entry with an unknown message type.
	// Unless the type is Ignorable, FSM.Apply halts on it (ErrHalted).
	ErrUnknownCommand = errors.New("fsm: unknown command type")
	// ErrUnsupportedVersion reports a log entry whose format version this
	// build cannot decode. Unless the type is Ignorable, FSM.Apply halts on
	// it (ErrHalted).
	ErrUnsupportedVersion = errors.New("fsm: unsupported command version")
	// ErrMalformedCommand reports a log entry that is truncated or whose
	// body does not decode.
	ErrMalformedCommand = errors.New("fsm: malformed command")
	// ErrInvalidCommand reports a well-formed command with bad values (an
	// empty or oversized id, an unknown status, an invalid geometry, …).
	ErrInvalidCommand = errors.New("fsm: invalid command")
	// ErrInconsistent reports a state that broke an internal invariant; the
	// command that met it is refused and the state is left unchanged.
	ErrInconsistent = errors.New("fsm: inconsistent state")
	// ErrCorruptSnapshot reports a snapshot that cannot be restored.
	ErrCorruptSnapshot = errors.New("fsm: corrupt snapshot")
	// ErrUnsupportedSnapshot reports a snapshot written by a newer build: a
	// format this build does not know, or a record kind it does not know
	// and that is not marked ignorable. Restore halts on it (ErrHalted); the
	// error matches ErrCorruptSnapshot too.
	ErrUnsupportedSnapshot = errors.New("fsm: snapshot from a newer build")
	// ErrHalted reports that the FSM met a log entry or snapshot it cannot
	// apply and that it may not skip (see the package documentation,
	// "Upgrades and unknown commands"). The error that halted the FSM wraps
	// ErrHalted and its cause; from then on every Apply result, Snapshot
	// and Restore fails with an error wrapping ErrHalted, and the state
	// stays as it was before that entry.
	ErrHalted = errors.New("fsm: halted")
)
