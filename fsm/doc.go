// Package fsm is the replicated state machine of one G-HBA group: the
// hashicorp/raft FSM that every metadata server of the group runs (G-HBA
// §2.3–2.4, DESIGN.md §1 and §4).
//
// The state of a group is:
//
//   - its configuration (Config): group name, maximum group size M and the
//     geometries of the local, LRU and IDBFA filters, set once by a
//     Bootstrap command;
//   - its members (Member): id, addresses, status (active, leaving, failed)
//     and the Raft index at which each joined;
//   - the segment assignment (routing.Assignment): every origin (a node
//     outside the group, announced by the leader from Serf) has its filter
//     replica held by exactly one active member, balanced to within one;
//     a join performs the light-weight migration of G-HBA §2.4 and a leave
//     or failure reverses it;
//   - the group's IDBFA (routing.IDBFA), kept in step with the assignment
//     and exported to other groups (FSM.IDBFA);
//   - a counter of replicas migrated between members.
//
// # Commands
//
// A log entry is one message-type byte (MsgType), one format-version byte
// and a msgpack body (hashicorp/go-msgpack/v2, the codec raft uses). The
// Encode* helpers build the bytes the leader passes to raft.Apply;
// DecodeCommand parses them. FSM.Apply never panics on a bad entry: it
// returns an *ApplyResult whose Err wraps one of the package's sentinel
// errors (check with errors.Is) and leaves the state unchanged. Every
// command is atomic: it validates first, mutates a private copy and
// publishes the copy only on success.
//
// Commands that may be retried after a leader change are idempotent where
// that makes sense: adding a member or origin that is already there,
// removing an origin that is not there and repeating a Bootstrap with the
// same configuration change nothing.
//
// # Reads and notifications
//
// Getters take a read lock and return copies; the published state is
// immutable, so a Snapshot only captures a pointer and Persist encodes it
// concurrently with later Applies. Options.OnChange tells the node about
// every state change (assignment moves to pull or drop replicas, member
// changes, restores); it runs on raft's FSM goroutine and must not block.
package fsm
