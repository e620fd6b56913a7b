// Package store is the durable metadata store of one metadata server
// (docs/design.md, "Store"), on Badger with synced writes, or the state of
// one replica of a Raft-replicated shard (docs/design.md, "The shard state
// machine"), on Badger without them.
//
// # Data model
//
// The store holds the records whose home is this node:
//
//   - inodes (Inode), keyed by normalized full path ("/a/b");
//   - directory entries (Entry) of the directories homed here, keyed by
//     (directory path, child name): child name → child type and home node.
//     ReadDir is a sorted, paginated range scan;
//   - intents (Intent): small records of multi-step operations (create,
//     unlink, rename across two homes), recorded first at the parent's home
//     and resolved by the node on restart (ListIntents);
//   - meta records: opaque key → bytes for the node's applied-state
//     bookkeeping (GetMeta, Batch.SetMeta, Batch.RequireMeta);
//   - rekey records of directory renames in progress (PendingRekeys);
//   - system records: schema version, the inode counts (CountInodes) and,
//     in log-applied mode, the applied log index (AppliedIndex).
//
// Keys are one prefix byte per record kind followed by the record's path,
// name or id; entries are prefix + dir + 0x00 + name, so the entries of a
// directory are contiguous and sorted by name and never mix with those of a
// sibling such as "/a b". Values start with a format version byte and are
// hand-encoded with encoding/binary; decoders reject bad input without
// panicking. codec.go documents every layout.
//
// # Writes and group commit
//
// Every write is a Batch of preconditions and mutations applied atomically
// by Commit. One committer goroutine collects the requests queued while the
// previous group was being synced and applies them, in order, in one Badger
// transaction (one sync): each request's preconditions see the effects of
// the requests before it in the group, and a request whose precondition
// fails fails alone. A group larger than Badger's transaction limit is split
// into several transactions. Every request is acknowledged after the sync of
// its transaction: a nil error means durable. Writers waiting for their
// acknowledgements would otherwise split into two alternating cohorts, so
// the committer briefly lingers (bounded by Options.Linger and half the
// last commit's duration) when the previous group's writers are expected
// back; a lone writer never waits.
//
// Throughput (go test -bench CommitParallel): group commit reaches about
// writers × 1/sync-latency, against 1/sync-latency for one sync per write.
//
// # Directory rename
//
// RekeyPrefix moves a subtree from one path prefix to another in bounded,
// idempotent steps after recording a rekey record; ResumeRekey completes
// an interrupted one. See RekeyPrefix for the protocol.
//
// # Log-applied mode (replicated shards)
//
// A shard replica opens its store with Options.NoSyncWrites: its Raft log
// (synced) is the point of durability, and the store is the state machine
// that the log's committed entries are applied to. The leader's namespace
// builds the same Batch values as a single-copy node, encodes them with
// Batch.MarshalBinary (a versioned, validated binary format) into its log
// entries, and every replica decodes them with Batch.UnmarshalBinary and
// applies them in log order:
//
//   - ApplyLog applies a run of entries in as few Badger transactions as
//     possible, each of which also records the index of its last entry
//     (the applied index, AppliedIndex). So after a crash the store holds
//     exactly the effects of the entries up to the index it claims, and
//     entries at or below it are skipped when Raft replays its log. An
//     entry whose preconditions fail changes nothing: its error is its
//     ApplyResult, the same on every replica. Each result also lists the
//     inodes the entry added and removed, for the replica's counting
//     filter.
//   - RekeyPrefixAt is a directory rekey as a log entry: its start
//     transaction records the index, a refusal is the entry's result, and
//     ResumeRekey completes an interrupted one (call it after Open and
//     after Restore, before applying more entries).
//   - Sync makes the store durable; the state machine calls it before a
//     snapshot, so that Raft never truncates its log behind writes that a
//     power loss could still take away.
//   - Backup streams a point-in-time copy of every key (Badger's backup
//     stream, from one read transaction) and returns its applied index;
//     Restore replaces the whole store with one. Restore excludes every
//     other call (they fail with ErrRestoring), and one that fails after
//     dropping the old contents leaves the store refusing every call
//     (ErrRestoreIncomplete, kept across reopening by a marker file) until
//     a Restore succeeds, never a mix of old and new.
//
// Commit still works on such a store, but a replica's writes must all come
// from its log, or replicas diverge.
package store
