// Package fsm is the replicated state machine of one G-HBA group: the
// hashicorp/raft FSM that every metadata server of the group runs (G-HBA
// §2.3–2.4; docs/design.md, "Groups").
//
// The state of a group is:
//
//   - its configuration (Config): group name, maximum group size M, the
//     geometries of the local, LRU and IDBFA filters and the replication
//     R of its shards, set once by a Bootstrap command;
//   - its members (Member): id, addresses, status (active, leaving, failed)
//     and the Raft index at which each joined;
//   - the segment assignment (routing.Assignment): every origin (a node
//     outside the group, announced by the leader from Serf) has its filter
//     replica held by exactly one active member, balanced to within one;
//     a join performs the light-weight migration of G-HBA §2.4 and a leave
//     or failure reverses it;
//   - the group's IDBFA (routing.IDBFA), kept in step with the assignment
//     and exported to other groups (FSM.IDBFA);
//   - its shards (Shard): for each, the member that owns it (its preferred
//     leader) and the members hosting its replicas (see "Shards");
//   - counters of filter replicas migrated and of shard replicas moved
//     between members.
//
// # Commands
//
// A log entry is one message-type byte (MsgType), one format-version byte
// and a msgpack body (hashicorp/go-msgpack/v2, the codec raft uses). The
// Encode* helpers build the bytes the leader passes to raft.Apply;
// DecodeCommand parses them. FSM.Apply never panics on a bad entry: it
// returns an *ApplyResult whose Err wraps one of the package's sentinel
// errors (check with errors.Is) and leaves the state unchanged — or, for an
// entry this build does not know, skips it or halts (see "Upgrades and
// unknown commands"). Every command is atomic: it validates first, mutates
// a private copy and publishes the copy only on success.
//
// Commands that may be retried after a leader change are idempotent where
// that makes sense: adding a member or origin that is already there (with
// the shards it owns already), removing an origin that is not there,
// repairing a member twice and repeating a Bootstrap with the same
// configuration change nothing.
//
// Format 2 of a log entry extends Bootstrap (Config.Replication), AddMember
// and Absorb (the shards the members own). A command whose new fields are
// zero is still written in format 1, which older builds apply exactly as
// this build does; format 2, and the RepairMember type (10, not ignorable),
// halt older builds rather than let them drop what they cannot read. Read
// back, a format-1 entry has the new fields zero: Replication 0 means one
// copy, and an AddMember without Shards means the default shard.
//
// Format 3 extends AddMember with the incarnation of the joiner's data
// directory (AddMemberCommand.Incarnation); it is written only when the
// incarnation is set, and halts builds that know format 2 at most. The
// shards the command adds to the group record it as their Creator, which
// snapshots carry from snapshot format 2 on (written only while some shard
// has a Creator, so older builds halt on it rather than drop the field).
// Read back, an entry of format 1 or 2, or a snapshot of format 1, has no
// incarnation and no Creator.
//
// # Shards
//
// A shard is the metadata of one home, its own Raft group with replicas on
// members of this group (docs/design.md, "Replicated shards"). The FSM
// decides where they live, deterministically: every choice below is a
// function of the state, ties broken by id.
//
// A member brings the shards it owns when it joins (AddMemberCommand.Shards;
// by default a new member owns the shard named after it). Each new shard is
// owned by the joiner and placed on it and the R−1 active members hosting
// the fewest replicas, and records the incarnation of the joiner's data
// directory as its Creator (Shard.Creator): the group's leader tells a
// joiner it created a shard — it is the one to bootstrap the shard's Raft
// group — when the shard is new or its Creator is the joiner's
// incarnation, also when the joiner retries after an answer it lost. Shards outlive members: a member that leaves
// (SetStatus leaving, RemoveMember) or that the leader repairs
// (RepairMemberCommand, replica_repair_after after its node failed) is
// taken out of every replica set, each replica replaced by the active
// member hosting the fewest, and each shard it owned is given to the
// replica owning the fewest (an active one if any). A failed member keeps
// its replicas and shards until repaired — it may come back — but never
// gains one. A split takes the shards the departing members own out of the
// group (ApplyResult.MovedOut); their new group gets them through
// AddMember. Nothing else ever removes a shard.
//
// After every command that changes the members, the group is balanced:
// every shard gets min(R, n) replicas, n being the active members plus the
// failed ones already hosting it; then, among the active members, shard
// ownership is evened out to within one (the member owning the most gives
// one shard to the one owning the fewest, taking a replica of it if it
// has none, in place of the giver's); then replica loads are evened out
// to within one (a replica moves from the most loaded member to the least
// loaded; a replica of a shard the giver owns moves only with its
// ownership, exchanged if need be for one of the taker's). The
// ApplyResult and the Event of a command list the shards whose placement
// changed (ShardChange: before and after), and ShardReplicasMoved counts
// the replicas moved from one member to another.
//
// A shard has no owner and no replica only while the group has no member
// able to host it (no active member, and its last failed host repaired or
// removed); the next member to become active gets it.
//
// # Upgrades and unknown commands
//
// During a rolling upgrade the members of a group run different builds, and
// a newer leader may commit log entries an older member cannot decode. A
// member that skips an entry the others apply silently diverges from its
// group, so the FSM sorts what it reads into three cases:
//
//   - A message type or format version this build does not know was written
//     by a newer build. If the type has IgnorableFlag set (types 128–255),
//     whoever introduced the command declared that older builds may miss it:
//     the FSM skips the entry (state unchanged, ApplyResult.Skipped set, Err
//     nil), counts it and keeps its index (FSM.Skipped), and reports it to
//     Options.OnSkip. Any other unknown type or version halts the FSM: it
//     reports the error once to Options.OnFatal and from then on applies
//     nothing — every later Apply returns an Err wrapping ErrHalted, and
//     Snapshot and Restore fail — so its state stays frozen at the entry
//     before the unknown one instead of drifting from the group's. The node
//     logs the error and shuts itself down; once it runs a build that knows
//     the command it replays the entry from its log (a halted FSM takes no
//     snapshot, so the log is never compacted past that entry).
//   - An entry of a known type and version whose body does not decode
//     (ErrMalformedCommand), or a command the state refuses
//     (ErrInvalidCommand, ErrUnknownMember, …), is refused and the FSM goes
//     on, as before. Every member running the same code refuses it the same
//     way, so nothing diverges; a garbage body is a bug, not an upgrade, and
//     halting on it would stop every member of the group at once.
//   - Snapshots follow the same rule. A record kind this build does not
//     know is skipped if it has the ignorable bit (0x80) set and halts the
//     FSM otherwise (ErrUnsupportedSnapshot), as does an unknown snapshot
//     format; the CRC is checked first, so a damaged snapshot is only
//     ErrCorruptSnapshot. The shard records (kinds 6 and 7) are not
//     ignorable: a build from before shards halts on them rather than
//     restore a group without its shards. A snapshot such a build wrote
//     (no placement record) restores with the shards derived from its
//     members: each active or failed member owns and hosts the shard named
//     after it, a leaving member's is given away, then the group is
//     balanced.
//
// So a new command (or a new format version of one) that older members
// must not miss may be written only once every member of the group runs a
// build that knows it; writing it earlier stops the older members loudly
// rather than letting them diverge. Only a command whose effect older
// builds may safely miss is numbered with IgnorableFlag.
//
// # Reads and notifications
//
// Getters take a read lock and return copies; the published state is
// immutable, so a Snapshot only captures a pointer and Persist encodes it
// concurrently with later Applies. Options.OnChange tells the node about
// every state change (assignment moves to pull or drop replicas, shard
// placement changes to open or close shard replicas, member changes,
// restores); Options.OnFatal and Options.OnSkip report a halt and skipped
// entries. They run on raft's FSM goroutine and must not block.
package fsm
