package store

import (
	"errors"
	"fmt"
	"io/fs"
)

// kindError is a sentinel error that also matches a standard error from
// io/fs with errors.Is, so that callers outside this package can test for
// fs.ErrNotExist and friends without importing the store.
type kindError struct {
	msg  string
	also error
}

func (e *kindError) Error() string { return e.msg }

// Is reports whether target is the standard error this sentinel stands for.
func (e *kindError) Is(target error) bool { return target == e.also }

// Sentinel errors. Errors returned by the store wrap one of these; test them
// with errors.Is.
var (
	// ErrNotFound: the inode, entry, intent or meta record does not exist.
	// errors.Is(err, fs.ErrNotExist) is true as well.
	ErrNotFound error = &kindError{"store: not found", fs.ErrNotExist}
	// ErrExists: a precondition required a record to be absent and it exists
	// (or a rekey destination is not empty). errors.Is(err, fs.ErrExist) is
	// true as well.
	ErrExists error = &kindError{"store: already exists", fs.ErrExist}
	// ErrConflict: a version or value precondition did not hold, or a rekey
	// overlaps one that is still in progress.
	ErrConflict = errors.New("store: conflict")
	// ErrNotEmpty: a directory that was required to be empty has entries.
	ErrNotEmpty = errors.New("store: directory not empty")
	// ErrInvalid: a path, name, id or value was rejected before anything was
	// written. errors.Is(err, fs.ErrInvalid) is true as well.
	ErrInvalid error = &kindError{"store: invalid argument", fs.ErrInvalid}
	// ErrClosed: the store is closed or closing; the request was not applied.
	// errors.Is(err, fs.ErrClosed) is true as well.
	ErrClosed error = &kindError{"store: closed", fs.ErrClosed}
	// ErrTooLarge: a single batch does not fit into one Badger transaction.
	ErrTooLarge = errors.New("store: batch too large for one transaction")
	// ErrCorrupt: a stored record, an encoded Batch or a backup could not
	// be decoded.
	ErrCorrupt = errors.New("store: corrupt record")
	// ErrUnknownVersion: an encoded Batch or a backup has a format version
	// this build does not know (it was written by a newer build).
	ErrUnknownVersion = errors.New("store: unknown format version")
	// ErrFormatTooOld: a Batch cannot be encoded in the newest format its
	// caller allows (a special file below batch format 3), because not
	// every replica speaks the format it needs yet. It also matches
	// errors.ErrUnsupported.
	ErrFormatTooOld = fmt.Errorf("store: the batch needs a newer format than allowed: %w", errors.ErrUnsupported)
	// ErrRestoring: a Restore is in progress; the call was refused without
	// effect. Try again once it has finished.
	ErrRestoring = errors.New("store: restore in progress")
	// ErrRestoreIncomplete: a Restore failed or was interrupted after it had
	// dropped the store's contents. Every call but Restore and Close fails
	// with an error wrapping it (also after reopening) until a Restore
	// succeeds.
	ErrRestoreIncomplete = errors.New("store: restore incomplete")
)

// PreconditionError reports the precondition of a batch that did not hold.
// It unwraps to ErrExists, ErrNotFound, ErrConflict or ErrNotEmpty.
type PreconditionError struct {
	// Index is the position of the precondition among the batch's
	// preconditions, in the order they were added.
	Index int
	// Cond names the precondition, e.g. "inode absent".
	Cond string
	// Target is the path, "dir\x00name" pair rendered as "dir name", id or
	// key the precondition is about.
	Target string
	// Err is the sentinel error.
	Err error
}

// Error implements error.
func (e *PreconditionError) Error() string {
	return fmt.Sprintf("store: precondition %d (%s %q): %v", e.Index, e.Cond, e.Target, e.Err)
}

// Unwrap returns the sentinel error.
func (e *PreconditionError) Unwrap() error { return e.Err }

func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, args...)...)
}

func corruptf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrCorrupt}, args...)...)
}
