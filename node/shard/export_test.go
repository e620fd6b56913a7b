package shard

import (
	"context"
	"io"

	"github.com/ghba/ghba/node/store"
)

// Command types and format version of the log format (command.go), for
// tests that write entries by hand.
const (
	CmdBatch  = cmdBatch
	CmdRekey  = cmdRekey
	CmdRecode = cmdRecode
	FormatV1  = formatV1
)

// EncodeBatch, EncodeRekey and EncodeRecode are the log entries of a
// store batch, a re-key and a recode.
var (
	EncodeRekey  = encodeRekey
	EncodeRecode = encodeRecode
)

// EncodeBatch returns the log entry of b in the newest batch format.
func EncodeBatch(b *store.Batch) ([]byte, error) { return encodeBatch(b, store.MaxBatchFormat) }

// EncodeBatchFormat returns the log entry of b in batch format max at most.
func EncodeBatchFormat(b *store.Batch, max byte) ([]byte, error) { return encodeBatch(b, max) }

// DecodeCommandMax decodes a log entry as a replica pinned to batch
// format maxBatch does (Options.MaxLogFormat).
func DecodeCommandMax(data []byte, maxBatch byte) (uint8, error) {
	c, err := decodeCommand(data, maxBatch)
	return c.typ, err
}

// DecodeCommand decodes a log entry and returns its type.
func DecodeCommand(data []byte) (uint8, error) {
	c, err := decodeCommand(data, store.MaxBatchFormat)
	return c.typ, err
}

// ApplyRaw commits data, as it is, as one command of r's shard (r must
// lead it) and returns its result, as Apply does.
func ApplyRaw(ctx context.Context, r *Replica, data []byte) error { return r.apply(ctx, data) }

// VerifyRounds returns the number of rounds of leadership checks r ran.
func VerifyRounds(r *Replica) uint64 { return r.verify.rounds.Load() }

// InLease reports whether r's read lease covers now.
func InLease(r *Replica) bool { return r.verify.inLease() }

// RevokeLease voids r's read lease until done is called, as a leadership
// transfer does.
func RevokeLease(r *Replica) (done func()) { return r.verify.revoke() }

// TakeSnapshot makes r's Raft take a snapshot now.
func TakeSnapshot(r *Replica) error { return r.raft.Snapshot().Error() }

// RestoreSnapshot restores r's state machine from rc, a snapshot's
// contents (a store backup), as an InstallSnapshot does.
func RestoreSnapshot(r *Replica, rc io.ReadCloser) error { return r.fsm.Restore(rc) }
