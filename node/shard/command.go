package shard

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/ghba/ghba/node/store"
)

// A log entry of a shard is one command: a type byte, a format version
// byte and a body. Types are part of the log format: never renumber. As in
// the group FSM (docs/design.md, "Upgrades and unknown commands"), a type
// with IgnorableFlag set may be skipped by a build that does not know it;
// any other unknown type or version halts the replica.
const (
	cmdBatch uint8 = 1 // body: store.Batch binary encoding
	cmdRekey uint8 = 2 // body: old prefix, new prefix (uvarint length + bytes each)

	// IgnorableFlag marks a command type that builds which do not know it
	// may skip.
	IgnorableFlag uint8 = 0x80

	formatV1 uint8 = 1

	// maxPrefixLen bounds a rekey prefix (a path).
	maxPrefixLen = 4096
)

// Errors of decoding and applying commands.
var (
	// ErrUnknownCommand reports a command type or version this build does
	// not know; without IgnorableFlag it halts the replica.
	ErrUnknownCommand = errors.New("shard: unknown command")
	// ErrMalformedCommand reports a command of a known type whose body does
	// not decode.
	ErrMalformedCommand = errors.New("shard: malformed command")
	// ErrHalted is the result of every entry after the replica halted (on
	// an unknown command, or a store that failed).
	ErrHalted = errors.New("shard: replica halted")
)

// encodeBatch returns the log entry of a store batch.
func encodeBatch(b *store.Batch) ([]byte, error) {
	body, err := b.MarshalBinary()
	if err != nil {
		return nil, fmt.Errorf("shard: encoding batch: %w", err)
	}
	return append([]byte{cmdBatch, formatV1}, body...), nil
}

// encodeRekey returns the log entry of a directory re-key.
func encodeRekey(oldPrefix, newPrefix string) []byte {
	out := []byte{cmdRekey, formatV1}
	for _, s := range []string{oldPrefix, newPrefix} {
		out = binary.AppendUvarint(out, uint64(len(s)))
		out = append(out, s...)
	}
	return out
}

// command is a decoded log entry.
type command struct {
	typ       uint8
	batch     *store.Batch // cmdBatch
	old, new_ string       // cmdRekey
}

// decodeCommand decodes a log entry. An unknown type or version returns
// ErrUnknownCommand; a known one with a bad body ErrMalformedCommand.
func decodeCommand(data []byte) (command, error) {
	if len(data) < 2 {
		return command{}, fmt.Errorf("%w: entry of %d bytes", ErrMalformedCommand, len(data))
	}
	c := command{typ: data[0]}
	if data[1] != formatV1 || (c.typ != cmdBatch && c.typ != cmdRekey) {
		return c, fmt.Errorf("%w: type %d version %d", ErrUnknownCommand, data[0], data[1])
	}
	body := data[2:]
	switch c.typ {
	case cmdBatch:
		c.batch = new(store.Batch)
		if err := c.batch.UnmarshalBinary(body); err != nil {
			return c, fmt.Errorf("%w: %w", ErrMalformedCommand, err)
		}
	case cmdRekey:
		var strs [2]string
		for i := range strs {
			n, k := binary.Uvarint(body)
			if k <= 0 || n > maxPrefixLen || uint64(len(body)-k) < n {
				return c, fmt.Errorf("%w: rekey prefix", ErrMalformedCommand)
			}
			strs[i] = string(body[k : k+int(n)])
			body = body[k+int(n):]
		}
		if len(body) != 0 {
			return c, fmt.Errorf("%w: %d trailing bytes", ErrMalformedCommand, len(body))
		}
		c.old, c.new_ = strs[0], strs[1]
	}
	return c, nil
}
