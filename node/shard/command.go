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
	cmdRekey uint8 = 2 // body: old prefix, new prefix (uvarint length + bytes each); v2: then the new chain (store.AppendCodes)
	// cmdRecode sets an ancestor code in a subtree (a chmod or chown of a
	// directory). Body: root (uvarint length + bytes), then its code
	// (store.AppendCodes of none or one code).
	cmdRecode uint8 = 3

	// IgnorableFlag marks a command type that builds which do not know it
	// may skip.
	IgnorableFlag uint8 = 0x80

	formatV1 uint8 = 1
	formatV2 uint8 = 2 // cmdRekey with the ancestor codes of the new prefix

	// maxPrefixLen bounds a rekey or recode prefix (a path). One longer
	// than store.LegacyMaxPathLen is written only once every member
	// speaks batch format 5 (the namespace checks before it renames).
	maxPrefixLen = store.MaxPathLen
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

// encodeBatch returns the log entry of a store batch, in batch format
// max at most (docs/design.md, "Upgrades and unknown commands").
func encodeBatch(b *store.Batch, max byte) ([]byte, error) {
	body, err := b.AppendBinaryFormat(make([]byte, 0, 64), max)
	if err != nil {
		return nil, fmt.Errorf("shard: encoding batch: %w", err)
	}
	return append([]byte{cmdBatch, formatV1}, body...), nil
}

// encodeRekey returns the log entry of a directory re-key to newPrefix,
// whose ancestor codes are chain.
func encodeRekey(oldPrefix, newPrefix string, chain []store.AncestorCode) []byte {
	out := []byte{cmdRekey, formatV2}
	out = appendString(out, oldPrefix)
	out = appendString(out, newPrefix)
	return store.AppendCodes(out, chain)
}

// encodeRecode returns the log entry of a recode of root's subtree with
// root's new code (nil: none).
func encodeRecode(root string, code *store.AncestorCode) []byte {
	out := appendString([]byte{cmdRecode, formatV1}, root)
	if code != nil {
		out = store.AppendCodes(out, []store.AncestorCode{*code})
	}
	return out
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// command is a decoded log entry.
type command struct {
	typ       uint8
	batch     *store.Batch         // cmdBatch
	old, new_ string               // cmdRekey (old: cmdRecode's root)
	codes     []store.AncestorCode // cmdRekey's chain, cmdRecode's code
}

// known reports whether this build applies commands of type typ in format
// version v.
func known(typ, v uint8) bool {
	switch typ {
	case cmdBatch, cmdRecode:
		return v == formatV1
	case cmdRekey:
		return v == formatV1 || v == formatV2
	}
	return false
}

// prefixes reads n length-prefixed paths from the start of body and
// returns them and the rest.
func prefixes(body []byte, n int) ([]string, []byte, error) {
	strs := make([]string, n)
	for i := range strs {
		l, k := binary.Uvarint(body)
		if k <= 0 || l > maxPrefixLen || uint64(len(body)-k) < l {
			return nil, nil, fmt.Errorf("%w: path", ErrMalformedCommand)
		}
		strs[i] = string(body[k : k+int(l)])
		body = body[k+int(l):]
	}
	return strs, body, nil
}

// decodeCommand decodes a log entry. An unknown type or version returns
// ErrUnknownCommand; a known one with a bad body ErrMalformedCommand. A
// batch in a format newer than maxBatch (a pinned replica standing in for
// an older build, Options.MaxLogFormat) is unknown too.
func decodeCommand(data []byte, maxBatch byte) (command, error) {
	if len(data) < 2 {
		return command{}, fmt.Errorf("%w: entry of %d bytes", ErrMalformedCommand, len(data))
	}
	c := command{typ: data[0]}
	if !known(c.typ, data[1]) {
		return c, fmt.Errorf("%w: type %d version %d", ErrUnknownCommand, data[0], data[1])
	}
	body := data[2:]
	switch c.typ {
	case cmdBatch:
		if v := store.BatchFormat(body); v > maxBatch {
			return c, fmt.Errorf("%w: batch format %d (this replica speaks %d at most)", ErrUnknownCommand, v, maxBatch)
		}
		c.batch = new(store.Batch)
		if err := c.batch.UnmarshalBinary(body); err != nil {
			return c, fmt.Errorf("%w: %w", ErrMalformedCommand, err)
		}
	case cmdRekey, cmdRecode:
		n := 2
		if c.typ == cmdRecode {
			n = 1
		}
		strs, rest, err := prefixes(body, n)
		if err != nil {
			return c, err
		}
		c.old = strs[0]
		if c.typ == cmdRekey {
			c.new_ = strs[1]
		}
		if c.typ == cmdRekey && data[1] == formatV1 {
			if len(rest) != 0 {
				return c, fmt.Errorf("%w: %d trailing bytes", ErrMalformedCommand, len(rest))
			}
			break
		}
		if c.codes, err = store.DecodeCodes(rest); err != nil {
			return c, fmt.Errorf("%w: %w", ErrMalformedCommand, err)
		}
		if c.typ == cmdRecode && len(c.codes) > 1 {
			return c, fmt.Errorf("%w: recode with %d codes", ErrMalformedCommand, len(c.codes))
		}
	}
	return c, nil
}
