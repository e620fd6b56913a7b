package namespace

import (
	"context"

	"github.com/ghba/ghba/node/store"
	"github.com/ghba/ghba/routing"
)

// Replica is a shard replica that this node leads (docs/design.md,
// "Replicated shards"): the namespace's only way to read and change the
// shard's state. node/shard implements it with a Raft group and a Badger
// store; the namespace never writes the store directly.
type Replica interface {
	// Shard returns the shard's id.
	Shard() string
	// Store returns the shard's store, for reads. Every write goes through
	// Apply or Rekey.
	Store() *store.Store
	// Term returns the Raft term of this replica's current leadership.
	Term() uint64
	// Apply commits b through the shard's Raft log and returns its result
	// on the replicas: nil, or a store precondition error (errors.Is with
	// store.ErrConflict, store.ErrExists, …): the batch is applied, or
	// not, everywhere. An error matching rpc.ErrNotLeader means the batch
	// was not appended; one matching rpc.ErrOutcomeUnknown (leadership
	// lost after the batch was appended, ctx ended before Raft decided)
	// means it may still commit under the next leader.
	Apply(ctx context.Context, b *store.Batch) error
	// Rekey moves every path under oldPrefix to newPrefix on every
	// replica, through the log (a directory rename's part in this shard);
	// chain is the ancestor codes of newPrefix (store.RekeyPrefix).
	Rekey(ctx context.Context, oldPrefix, newPrefix string, chain []store.AncestorCode) error
	// Recode sets the ancestor code of root (nil: none) in every inode
	// under root on every replica, through the log (a chmod or chown of a
	// directory: its part in this shard; store.RecodeSubtreeAt).
	Recode(ctx context.Context, root string, code *store.AncestorCode) error
	// VerifyLeader returns nil if the replica still leads its shard at
	// some moment after the call began (a read that must be linearizable
	// calls it after it arrived); concurrent calls share one round of
	// heartbeats.
	VerifyLeader(ctx context.Context) error
	// TestKey tests k against the shard's counting filter, which every
	// replica maintains from the entries it applies.
	TestKey(k routing.Key) bool
	// Filter runs fn with the shard's counting filter locked.
	Filter(fn func(f *routing.CountingFilter))
	// SearchText returns the paths at or below root whose text (in the
	// replica's full-text index, kept from the entries it applies) holds
	// every word of words, best first: hits from..from+size of total.
	SearchText(ctx context.Context, words, root string, from, size int) (paths []string, total uint64, err error)
}
