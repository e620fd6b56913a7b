// Package store is the durable metadata store of one metadata server
// (docs/design.md, "Store"), on Badger with synced writes.
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
//   - system records: schema version and the inode counts (CountInodes).
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
package store
