package fsm

import (
	"bytes"
	"fmt"

	"github.com/ghba/ghba/routing"
	"github.com/hashicorp/go-msgpack/v2/codec"
)

// MsgType is the first byte of a log entry: which command it carries.
type MsgType uint8

// Message types. Values are part of the log format: never renumber. Types
// 1–127 must be applied by every member; a type with IgnorableFlag set
// (128–255) may be skipped by a build that does not know it (see the
// package documentation, "Upgrades and unknown commands").
const (
	MsgBootstrap     MsgType = 1  // BootstrapCommand
	MsgAddMember     MsgType = 2  // AddMemberCommand
	MsgRemoveMember  MsgType = 3  // RemoveMemberCommand
	MsgSetStatus     MsgType = 4  // SetStatusCommand
	MsgSetOrigins    MsgType = 5  // SetOriginsCommand
	MsgAddOrigins    MsgType = 6  // AddOriginsCommand
	MsgRemoveOrigins MsgType = 7  // RemoveOriginsCommand
	MsgSplit         MsgType = 8  // SplitCommand
	MsgAbsorb        MsgType = 9  // AbsorbCommand
	MsgRepairMember  MsgType = 10 // RepairMemberCommand
)

// IgnorableFlag is the high bit of a message type. It is part of the type's
// number, chosen when the command is introduced: set it only for a command
// whose effect older builds may miss without the group's state diverging in
// a way that matters (advisory data nobody relies on for correctness). A
// build that does not know a type with the flag set, or does not know its
// format version, skips the entry; one without the flag halts the FSM.
const IgnorableFlag MsgType = 0x80

// Ignorable reports whether builds that do not know t may skip entries of
// type t (IgnorableFlag is set).
func (t MsgType) Ignorable() bool { return t&IgnorableFlag != 0 }

// Format versions (second byte of a log entry). Format 1 is every command
// as first written. Format 2 adds fields to three commands: Config.Replication
// in BootstrapCommand, AddMemberCommand.Shards and AbsorbCommand.Shards.
// Format 3 adds AddMemberCommand.Incarnation. Encode writes the oldest
// format that carries the command: format 1 while the newer fields have
// their zero values (so an older build applies the entry exactly as this
// one does), a newer format otherwise (an older build, which would
// silently drop the fields, halts instead). An entry read by this build
// has the fields newer than its format at their zero values, whatever its
// body says.
const (
	FormatV1 uint8 = 1
	FormatV2 uint8 = 2
	FormatV3 uint8 = 3
)

// String names the message type.
func (t MsgType) String() string {
	if s, ok := specOf(t); ok {
		return s.name
	}
	return fmt.Sprintf("msg(%d)", uint8(t))
}

// Command is a decoded log entry.
type Command interface {
	// MsgType is the command's message type.
	MsgType() MsgType
}

// BootstrapCommand sets the group's configuration. It must be the first
// command; repeating it with the same configuration changes nothing, with a
// different geometry it fails with ErrGeometryChanged and with another
// group name, size or replication with ErrConfigConflict (a Replication of
// 0 and of 1 are the same).
type BootstrapCommand struct {
	// Config is the group's configuration.
	Config Config
}

// AddMemberCommand adds a member to the group (status active, JoinIndex the
// entry's index) and performs the light-weight migration: each active
// member hands it about current − T/(M'+1) replicas. It fails with
// ErrGroupFull when the group already has MaxGroupSize members. A member
// already present gets its addresses updated and, unless it was active, is
// reactivated (a rejoin). An origin with the same id stops being an origin.
//
// The shards the member owns become shards of the group, owned by it and
// placed on it and the R−1 active members hosting the fewest replicas;
// then the group is balanced (see the package documentation, "Shards"). A
// shard new to the group records Incarnation as its Creator. A shard
// already in the group is left as it is (its Creator too) if the member
// owns it (a retry), adopted if it has no owner, and refused with
// ErrShardConflict if another member owns it.
type AddMemberCommand struct {
	// Member is the joining node.
	Member Member
	// Shards are the ids of the shards the member owns (format 2). Nil —
	// every format-1 entry — means the default: a member new to the group
	// owns the shard named after it, unless the group has that shard
	// already (a node that left earlier and whose shard outlived it); a
	// member already present brings nothing. Non-nil lists them exactly,
	// empty for none.
	Shards []string
	// Incarnation identifies the joining node's data directory (format 3;
	// empty in older entries, and from joiners that do not send it). The
	// shards this command adds to the group record it as their Creator,
	// so that the leader can tell a joiner retrying after a lost answer
	// that its earlier attempt created them. It comes from the command,
	// never from a member's local state: every member applies it alike.
	Incarnation string `codec:",omitempty"`
}

// RemoveMemberCommand removes a member (it leaves Raft); its replicas, if
// it was active, go to the other active members (G-HBA §2.4 in reverse),
// its shard replicas are placed on other members and the shards it owned
// get new owners, as RepairMemberCommand does. An unknown id fails with
// ErrUnknownMember.
type RemoveMemberCommand struct {
	// ID is the member to remove.
	ID string
}

// SetStatusCommand changes a member's status. Leaving active status
// reassigns the member's filter replicas to the other active members
// (graceful leave, or a Serf member-failed); returning to active performs
// the light-weight migration towards it. A failed member keeps its shard
// replicas and the shards it owns (it may come back; RepairMemberCommand
// gives them away); a leaving one gives them away at once. The group is
// then balanced.
type SetStatusCommand struct {
	// ID is the member.
	ID string
	// Status is its new status.
	Status Status
}

// SetOriginsCommand makes Origins the exact set of origins (the nodes
// outside the group, as the leader sees them in Serf): origins not listed
// are removed, new ones added. Listing a member fails with
// ErrOriginIsMember.
type SetOriginsCommand struct {
	// Origins are the ids of all nodes outside the group.
	Origins []string
}

// AddOriginsCommand adds origins; each goes to the least loaded active
// member. Origins already present are kept where they are.
type AddOriginsCommand struct {
	// Origins are the ids to add.
	Origins []string
}

// RemoveOriginsCommand removes origins (unknown ones are ignored); the
// group is rebalanced with at most one move per removal.
type RemoveOriginsCommand struct {
	// Origins are the ids to remove.
	Origins []string
}

// SplitCommand removes members IDs from the group at once: they form a new
// group (NewGroup, informational) elsewhere and become origins of this one
// (g-hba-survey §VI: splitting deletes them one by one). At least one member
// must remain. The shards the departing members own leave the group with
// them (ApplyResult.MovedOut names them); the replicas they hosted of the
// shards that stay are placed on the remaining members.
type SplitCommand struct {
	// IDs are the members leaving for the new group.
	IDs []string
	// NewGroup names the new group.
	NewGroup string
}

// AbsorbCommand adds Members at once, merging group FromGroup
// (informational) into this one with the light-weight migration. The total
// must stay within MaxGroupSize. Members already present, and the shards
// the members bring, are treated as in AddMemberCommand.
type AbsorbCommand struct {
	// Members are the nodes joining.
	Members []Member
	// FromGroup names the group they come from.
	FromGroup string
	// Shards are the shards the members own (format 2): a member not
	// listed brings none. Nil — every format-1 entry — means the default
	// of AddMemberCommand for every member. A member may be listed once,
	// a shard once.
	Shards []OwnedShards
}

// RepairMemberCommand replaces the shard replicas of a member that is not
// active (the leader applies it once the node has been failed for
// replica_repair_after): the member is removed from every replica set,
// replacements are placed on the active members hosting the fewest, and
// each shard it owned gets a new owner among its replicas; then the group
// is balanced. The member stays (failed) until removed; if it comes back it
// gets replicas again through balancing. A member hosting and owning
// nothing is left as it is; an active one fails with ErrMemberActive, an
// unknown one with ErrUnknownMember.
type RepairMemberCommand struct {
	// ID is the member to repair.
	ID string
}

// MsgType implements Command.
func (*BootstrapCommand) MsgType() MsgType { return MsgBootstrap }

// MsgType implements Command.
func (*AddMemberCommand) MsgType() MsgType { return MsgAddMember }

// MsgType implements Command.
func (*RemoveMemberCommand) MsgType() MsgType { return MsgRemoveMember }

// MsgType implements Command.
func (*SetStatusCommand) MsgType() MsgType { return MsgSetStatus }

// MsgType implements Command.
func (*SetOriginsCommand) MsgType() MsgType { return MsgSetOrigins }

// MsgType implements Command.
func (*AddOriginsCommand) MsgType() MsgType { return MsgAddOrigins }

// MsgType implements Command.
func (*RemoveOriginsCommand) MsgType() MsgType { return MsgRemoveOrigins }

// MsgType implements Command.
func (*SplitCommand) MsgType() MsgType { return MsgSplit }

// MsgType implements Command.
func (*AbsorbCommand) MsgType() MsgType { return MsgAbsorb }

// MsgType implements Command.
func (*RepairMemberCommand) MsgType() MsgType { return MsgRepairMember }

// versioned is a command that a format after format 1 extended.
type versioned interface {
	Command
	// version returns the oldest format that carries the command.
	version() uint8
	// dropAfter zeroes the fields that formats after v added: an entry of
	// format v has none.
	dropAfter(v uint8)
}

func (c *BootstrapCommand) version() uint8 { return v2If(c.Config.Replication != 0) }
func (c *BootstrapCommand) dropAfter(v uint8) {
	if v < FormatV2 {
		c.Config.Replication = 0
	}
}

func (c *AddMemberCommand) version() uint8 {
	if c.Incarnation != "" {
		return FormatV3
	}
	return v2If(c.Shards != nil)
}

func (c *AddMemberCommand) dropAfter(v uint8) {
	if v < FormatV3 {
		c.Incarnation = ""
	}
	if v < FormatV2 {
		c.Shards = nil
	}
}

func (c *AbsorbCommand) version() uint8 { return v2If(c.Shards != nil) }
func (c *AbsorbCommand) dropAfter(v uint8) {
	if v < FormatV2 {
		c.Shards = nil
	}
}

// v2If returns FormatV2 if extended, FormatV1 otherwise.
func v2If(extended bool) uint8 {
	if extended {
		return FormatV2
	}
	return FormatV1
}

// cmdSpec is one entry of the command registry.
type cmdSpec struct {
	name string
	// decode decodes a body of the given format version.
	decode func(version uint8, body []byte) (Command, error)
	// apply validates cmd against s; it returns nil (no change) or the next
	// state, and the moves.
	apply func(s *state, cmd Command, index uint64) (*state, []routing.Move, error)
}

// specOf is the command registry: message type → name, decoders by
// version, and the function applying it. A switch keeps it immutable.
func specOf(t MsgType) (cmdSpec, bool) {
	switch t {
	case MsgBootstrap:
		return cmdSpec{"bootstrap", v2[BootstrapCommand], applyBootstrap}, true
	case MsgAddMember:
		return cmdSpec{"add-member", v3[AddMemberCommand], applyAddMember}, true
	case MsgRemoveMember:
		return cmdSpec{"remove-member", v1[RemoveMemberCommand], applyRemoveMember}, true
	case MsgSetStatus:
		return cmdSpec{"set-status", v1[SetStatusCommand], applySetStatus}, true
	case MsgSetOrigins:
		return cmdSpec{"set-origins", v1[SetOriginsCommand], applySetOrigins}, true
	case MsgAddOrigins:
		return cmdSpec{"add-origins", v1[AddOriginsCommand], applyAddOrigins}, true
	case MsgRemoveOrigins:
		return cmdSpec{"remove-origins", v1[RemoveOriginsCommand], applyRemoveOrigins}, true
	case MsgSplit:
		return cmdSpec{"split", v1[SplitCommand], applySplit}, true
	case MsgAbsorb:
		return cmdSpec{"absorb", v2[AbsorbCommand], applyAbsorb}, true
	case MsgRepairMember:
		return cmdSpec{"repair-member", v1[RepairMemberCommand], applyRepairMember}, true
	}
	return cmdSpec{}, false
}

// commandPtr is a pointer to a command struct.
type commandPtr[T any] interface {
	*T
	Command
}

// v1 decodes a format-1 msgpack body into a new T.
func v1[T any, P commandPtr[T]](version uint8, body []byte) (Command, error) {
	if version != FormatV1 {
		return nil, fmt.Errorf("version %d: %w", version, ErrUnsupportedVersion)
	}
	var v T
	if err := decodeBody(body, &v); err != nil {
		return nil, err
	}
	return P(&v), nil
}

// versionedPtr is a pointer to a command struct that a format after
// format 1 extended.
type versionedPtr[T any] interface {
	*T
	versioned
}

// v2 decodes a format-1 or format-2 msgpack body into a new T.
func v2[T any, P versionedPtr[T]](version uint8, body []byte) (Command, error) {
	return upTo[T, P](FormatV2, version, body)
}

// v3 decodes a msgpack body of formats 1 to 3 into a new T.
func v3[T any, P versionedPtr[T]](version uint8, body []byte) (Command, error) {
	return upTo[T, P](FormatV3, version, body)
}

// upTo decodes a msgpack body of format version, one of formats 1 to
// latest, into a new T, with the fields of the formats after version
// zeroed.
func upTo[T any, P versionedPtr[T]](latest, version uint8, body []byte) (Command, error) {
	if version < FormatV1 || version > latest {
		return nil, fmt.Errorf("version %d: %w", version, ErrUnsupportedVersion)
	}
	var v T
	if err := decodeBody(body, &v); err != nil {
		return nil, err
	}
	P(&v).dropAfter(version)
	return P(&v), nil
}

// newHandle returns the msgpack handle of the command and snapshot
// encodings (one per use: no package-level mutable state).
func newHandle() *codec.MsgpackHandle {
	h := &codec.MsgpackHandle{}
	h.RawToString = true
	h.MaxInitLen = 4096 // preallocate little for lengths read from input
	return h
}

// encodeBody appends the msgpack encoding of v to dst.
func encodeBody(dst []byte, v any) ([]byte, error) {
	buf := bytes.NewBuffer(dst)
	if err := codec.NewEncoder(buf, newHandle()).Encode(v); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// decodeBody decodes the msgpack value that must fill body exactly.
func decodeBody(body []byte, v any) (err error) {
	defer func() { // the codec recovers its own panics; belt and braces
		if r := recover(); r != nil {
			err = fmt.Errorf("decode: %v: %w", r, ErrMalformedCommand)
		}
	}()
	d := codec.NewDecoderBytes(body, newHandle())
	if err := d.Decode(v); err != nil {
		return fmt.Errorf("decode: %w: %w", ErrMalformedCommand, err)
	}
	if n := d.NumBytesRead(); n != len(body) {
		return fmt.Errorf("%d trailing bytes: %w", len(body)-n, ErrMalformedCommand)
	}
	return nil
}

// Encode returns the log entry of cmd: type byte, version byte (the oldest
// format that carries cmd), msgpack body. Encoding the package's command
// types cannot fail; Encode panics if it does (a programming error).
func Encode(cmd Command) []byte {
	version := FormatV1
	if v, ok := cmd.(versioned); ok {
		version = v.version()
	}
	b, err := encodeBody([]byte{byte(cmd.MsgType()), version}, cmd)
	if err != nil {
		panic(fmt.Sprintf("fsm: encoding %s: %v", cmd.MsgType(), err))
	}
	return b
}

// DecodeCommand parses a log entry. Errors wrap ErrMalformedCommand,
// ErrUnknownCommand or ErrUnsupportedVersion.
func DecodeCommand(b []byte) (Command, error) {
	if len(b) < 2 {
		return nil, fmt.Errorf("entry of %d bytes: %w", len(b), ErrMalformedCommand)
	}
	t := MsgType(b[0])
	s, ok := specOf(t)
	if !ok {
		return nil, fmt.Errorf("type %d: %w", b[0], ErrUnknownCommand)
	}
	cmd, err := s.decode(b[1], b[2:])
	if err != nil {
		return nil, fmt.Errorf("%s: %w", s.name, err)
	}
	return cmd, nil
}

// EncodeBootstrap builds a Bootstrap entry. A zero cfg.IDFilter is replaced
// by DefaultIDFilter, so the log carries the concrete geometry.
func EncodeBootstrap(cfg Config) []byte {
	if cfg.IDFilter == (Config{}).IDFilter {
		cfg.IDFilter = DefaultIDFilter()
	}
	return Encode(&BootstrapCommand{Config: cfg})
}

// EncodeAddMember builds an AddMember entry (m.Status and m.JoinIndex are
// ignored) in which the member brings its default shards (see
// AddMemberCommand.Shards).
func EncodeAddMember(m Member) []byte { return Encode(&AddMemberCommand{Member: m}) }

// EncodeAddMemberShards builds an AddMember entry in which the member owns
// exactly shards (none if empty).
func EncodeAddMemberShards(m Member, shards []string) []byte {
	if shards == nil {
		shards = []string{}
	}
	return Encode(&AddMemberCommand{Member: m, Shards: shards})
}

// EncodeAddMemberIncarnation builds an AddMember entry in which the member
// owns exactly shards (none if empty) and the shards new to the group
// record incarnation, the joiner's data directory, as their Creator. An
// empty incarnation gives the entry of EncodeAddMemberShards.
func EncodeAddMemberIncarnation(m Member, shards []string, incarnation string) []byte {
	if shards == nil {
		shards = []string{}
	}
	return Encode(&AddMemberCommand{Member: m, Shards: shards, Incarnation: incarnation})
}

// EncodeRepairMember builds a RepairMember entry.
func EncodeRepairMember(id string) []byte { return Encode(&RepairMemberCommand{ID: id}) }

// EncodeRemoveMember builds a RemoveMember entry.
func EncodeRemoveMember(id string) []byte { return Encode(&RemoveMemberCommand{ID: id}) }

// EncodeSetStatus builds a SetStatus entry.
func EncodeSetStatus(id string, st Status) []byte {
	return Encode(&SetStatusCommand{ID: id, Status: st})
}

// EncodeSetOrigins builds a SetOrigins entry.
func EncodeSetOrigins(origins []string) []byte {
	return Encode(&SetOriginsCommand{Origins: origins})
}

// EncodeAddOrigins builds an AddOrigins entry.
func EncodeAddOrigins(origins ...string) []byte {
	return Encode(&AddOriginsCommand{Origins: origins})
}

// EncodeRemoveOrigins builds a RemoveOrigins entry.
func EncodeRemoveOrigins(origins ...string) []byte {
	return Encode(&RemoveOriginsCommand{Origins: origins})
}

// EncodeSplit builds a Split entry.
func EncodeSplit(ids []string, newGroup string) []byte {
	return Encode(&SplitCommand{IDs: ids, NewGroup: newGroup})
}

// EncodeAbsorb builds an Absorb entry in which every member brings its
// default shards (see AddMemberCommand.Shards).
func EncodeAbsorb(members []Member, fromGroup string) []byte {
	return Encode(&AbsorbCommand{Members: members, FromGroup: fromGroup})
}

// EncodeAbsorbShards builds an Absorb entry in which the members own
// exactly the shards listed in owned (a member not listed owns none).
func EncodeAbsorbShards(members []Member, fromGroup string, owned []OwnedShards) []byte {
	if owned == nil {
		owned = []OwnedShards{}
	}
	return Encode(&AbsorbCommand{Members: members, FromGroup: fromGroup, Shards: owned})
}
