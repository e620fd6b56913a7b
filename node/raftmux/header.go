package raftmux

import (
	"errors"
	"fmt"
	"io"
)

// The header a dialer writes before raft's first byte:
//
//	offset  size  field
//	0       4     magic "RMUX"
//	4       1     version (1)
//	5       1     n, the id's length, 1..MaxIDLen
//	6       n     the id: printable ASCII (0x21..0x7e)
//
// Nothing is answered: the accepting side hands the connection to the
// id's layer, or closes it.
const (
	// Version is the header version this package writes and accepts.
	Version = 1
	// MaxIDLen is the longest Raft group id, in bytes.
	MaxIDLen = 128

	magic     = "RMUX"
	fixedLen  = len(magic) + 2 // magic, version, id length
	maxHeader = fixedLen + MaxIDLen
)

// Errors of a header that readHeader refuses.
var (
	errBadMagic   = errors.New("not a raftmux header (bad magic)")
	errBadVersion = errors.New("unsupported raftmux header version")
	errTruncated  = errors.New("raftmux header cut short")
)

// validID reports whether id can name a Raft group: 1..MaxIDLen bytes of
// printable ASCII without spaces. The error wraps ErrInvalidID.
func validID(id string) error {
	if len(id) == 0 || len(id) > MaxIDLen {
		return fmt.Errorf("%w: %d bytes, want 1..%d", ErrInvalidID, len(id), MaxIDLen)
	}
	for i := range len(id) {
		if c := id[i]; c < 0x21 || c > 0x7e {
			return fmt.Errorf("%w: byte %#x at %d is not printable ASCII", ErrInvalidID, c, i)
		}
	}
	return nil
}

// appendHeader appends the header naming id to b. id must be valid.
func appendHeader(b []byte, id string) []byte {
	b = append(b, magic...)
	b = append(b, Version, byte(len(id)))
	return append(b, id...)
}

// readHeader reads one header from r, exactly its bytes and no more (raft's
// stream follows it), and returns its id. A stream that ends inside the
// header gives an error wrapping errTruncated and the read error; a header
// that is malformed gives errBadMagic, errBadVersion or ErrInvalidID; any
// other read error (a deadline) is returned wrapped as it is.
func readHeader(r io.Reader) (string, error) {
	var fixed [fixedLen]byte
	if err := readFull(r, fixed[:]); err != nil {
		return "", err
	}
	if string(fixed[:len(magic)]) != magic {
		return "", fmt.Errorf("%w: % x", errBadMagic, fixed[:len(magic)])
	}
	if v := fixed[len(magic)]; v != Version {
		return "", fmt.Errorf("%w: %d, want %d", errBadVersion, v, Version)
	}
	n := int(fixed[len(magic)+1])
	if n == 0 || n > MaxIDLen {
		return "", fmt.Errorf("%w: length %d, want 1..%d", ErrInvalidID, n, MaxIDLen)
	}
	id := make([]byte, n)
	if err := readFull(r, id); err != nil {
		return "", err
	}
	if err := validID(string(id)); err != nil {
		return "", err
	}
	return string(id), nil
}

// readFull is io.ReadFull whose end-of-stream errors also wrap
// errTruncated.
func readFull(r io.Reader, b []byte) error {
	_, err := io.ReadFull(r, b)
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("%w: %w", errTruncated, err)
	}
	if err != nil {
		return fmt.Errorf("reading the raftmux header: %w", err)
	}
	return nil
}
