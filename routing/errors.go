package routing

import "errors"

// Errors returned by the routing structures. They are wrapped with context;
// test for them with errors.Is.
var (
	// ErrCorrupt reports an encoding that is truncated, has a bad magic
	// number, an unknown format version, or a checksum mismatch.
	ErrCorrupt = errors.New("routing: corrupt encoding")
	// ErrInvalidGeometry reports a filter size, hash count or hash kind that
	// cannot be used.
	ErrInvalidGeometry = errors.New("routing: invalid filter geometry")
	// ErrGeometryMismatch reports combining filters of different geometries
	// (size, hash count or hash kind).
	ErrGeometryMismatch = errors.New("routing: filter geometry mismatch")
	// ErrVersionMismatch reports a delta whose base version is not the
	// version of the filter it is applied to; the receiver must fetch the
	// full filter instead.
	ErrVersionMismatch = errors.New("routing: filter version mismatch")
	// ErrUnknownMember reports a filter-array or IDBFA member id that is not
	// present.
	ErrUnknownMember = errors.New("routing: unknown member")
	// ErrDuplicateMember reports adding a member id that is already present.
	ErrDuplicateMember = errors.New("routing: duplicate member")
)
