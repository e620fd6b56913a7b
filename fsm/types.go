package fsm

import (
	"fmt"
	"slices"
	"unicode/utf8"

	"github.com/ghba/ghba/routing"
)

// Limits on command values, so that one bad log entry cannot make every
// replica allocate without bound.
const (
	// MaxIDLen bounds node ids, group names and addresses, in bytes.
	MaxIDLen = 255
	// MaxGroupSizeLimit bounds Config.MaxGroupSize.
	MaxGroupSizeLimit = 1024
	// MaxIDFilterBits bounds the IDBFA geometry (2^24 bits: 8 MiB of
	// counters per member).
	MaxIDFilterBits = 1 << 24
	// MaxShardsPerCommand bounds the shards one AddMember or Absorb brings.
	MaxShardsPerCommand = 1 << 14
)

// Config is a group's configuration, fixed by its Bootstrap command.
type Config struct {
	// Group is the group's name.
	Group string `json:"group"`
	// MaxGroupSize is M, the most members the group may have.
	MaxGroupSize int `json:"max_group_size"`
	// Filter is the geometry of every member's local filter (and so of the
	// replicas the members hold).
	Filter routing.Geometry `json:"filter"`
	// LRUEntries is the length of every member's LRU list.
	LRUEntries int `json:"lru_entries"`
	// LRU is the geometry of the LRU filters.
	LRU routing.Geometry `json:"lru"`
	// IDFilter is the geometry of the IDBFA's ID filters; see
	// DefaultIDFilter.
	IDFilter routing.Geometry `json:"id_filter"`
	// Replication is R, the number of replicas of every shard of the
	// group (fewer while the group has fewer members able to host them).
	// 0 means 1: a group bootstrapped before shards were replicated kept
	// one copy. See ReplicationFactor.
	Replication int `json:"replication"`
}

// ReplicationFactor returns R: Replication, or 1 when it is 0.
func (c Config) ReplicationFactor() int { return max(c.Replication, 1) }

// normalized returns c with Replication set to R, for comparisons.
func (c Config) normalized() Config {
	c.Replication = c.ReplicationFactor()
	return c
}

// DefaultIDFilter is the IDBFA geometry EncodeBootstrap uses when the
// config leaves it zero: 16 bits per origin for 1,024 origins per member.
func DefaultIDFilter() routing.Geometry {
	g, err := routing.NewGeometry(1024, 16, 0, routing.HashXX)
	if err != nil { // constant arguments: cannot happen
		panic(err)
	}
	return g
}

// Validate reports whether c can configure a group.
func (c Config) Validate() error {
	if err := validID("group", c.Group); err != nil {
		return err
	}
	if c.MaxGroupSize < 1 || c.MaxGroupSize > MaxGroupSizeLimit {
		return fmt.Errorf("max group size %d (want 1..%d): %w", c.MaxGroupSize, MaxGroupSizeLimit, ErrInvalidCommand)
	}
	if c.LRUEntries < 0 {
		return fmt.Errorf("lru entries %d: %w", c.LRUEntries, ErrInvalidCommand)
	}
	for _, g := range []struct {
		name string
		geo  routing.Geometry
	}{{"filter", c.Filter}, {"lru", c.LRU}, {"id filter", c.IDFilter}} {
		if err := g.geo.Validate(); err != nil {
			return fmt.Errorf("%s geometry: %w: %w", g.name, ErrInvalidCommand, err)
		}
	}
	if c.Replication < 0 || c.Replication > MaxGroupSizeLimit {
		return fmt.Errorf("replication %d (want 0..%d): %w", c.Replication, MaxGroupSizeLimit, ErrInvalidCommand)
	}
	if c.IDFilter.M > MaxIDFilterBits {
		return fmt.Errorf("id filter of %d bits (at most %d): %w", c.IDFilter.M, MaxIDFilterBits, ErrInvalidCommand)
	}
	return nil
}

// sameGeometry reports whether c and o describe the same filters.
func (c Config) sameGeometry(o Config) bool {
	return c.Filter == o.Filter && c.LRU == o.LRU && c.IDFilter == o.IDFilter && c.LRUEntries == o.LRUEntries
}

// Status is a member's state in its group.
type Status string

// Member statuses. Only active members hold filter replicas and take new
// shard replicas; a failed member keeps the shard replicas it hosts until
// it is repaired (RepairMemberCommand), a leaving one hosts none. A leaving
// or failed member keeps its seat (it still counts towards M) until
// removed.
const (
	StatusActive  Status = "active"
	StatusLeaving Status = "leaving"
	StatusFailed  Status = "failed"
)

// Valid reports whether s is one of the member statuses.
func (s Status) Valid() bool {
	return s == StatusActive || s == StatusLeaving || s == StatusFailed
}

// Member is one metadata server of the group.
type Member struct {
	// ID is the node id, unique in the cluster (also its Raft server id).
	ID string `json:"id"`
	// RPCAddr is the host:port of the node's RPC server.
	RPCAddr string `json:"rpc_addr"`
	// RaftAddr is the host:port of the node's Raft transport.
	RaftAddr string `json:"raft_addr"`
	// SerfAddr is the host:port of the node's Serf agent.
	SerfAddr string `json:"serf_addr"`
	// HTTPAddr is the host:port of the node's HTTP (metrics, status) server.
	HTTPAddr string `json:"http_addr"`
	// Status is set by the FSM: active on join, then as SetStatus says.
	Status Status `json:"status"`
	// JoinIndex is the Raft index of the command that last made the member
	// active; set by the FSM.
	JoinIndex uint64 `json:"join_index"`
}

// sameAddrs reports whether m and o have the same addresses.
func (m Member) sameAddrs(o Member) bool {
	return m.RPCAddr == o.RPCAddr && m.RaftAddr == o.RaftAddr && m.SerfAddr == o.SerfAddr && m.HTTPAddr == o.HTTPAddr
}

// validate checks the id and addresses of a member in a command.
func (m Member) validate() error {
	if err := validID("member id", m.ID); err != nil {
		return err
	}
	for _, a := range []string{m.RPCAddr, m.RaftAddr, m.SerfAddr, m.HTTPAddr} {
		if len(a) > MaxIDLen || !utf8.ValidString(a) {
			return fmt.Errorf("member %q: bad address %q: %w", m.ID, a, ErrInvalidCommand)
		}
	}
	return nil
}

// validID checks a node id or group name: 1..MaxIDLen bytes of UTF-8
// without NUL.
func validID(what, s string) error {
	if s == "" || len(s) > MaxIDLen || !utf8.ValidString(s) || slices.Contains([]byte(s), 0) {
		return fmt.Errorf("%s %q (want 1..%d bytes of UTF-8 without NUL): %w", what, s, MaxIDLen, ErrInvalidCommand)
	}
	return nil
}

// normalizeIDs validates ids and returns them sorted without duplicates.
func normalizeIDs(what string, ids []string) ([]string, error) {
	for _, id := range ids {
		if err := validID(what, id); err != nil {
			return nil, err
		}
	}
	out := slices.Clone(ids)
	slices.Sort(out)
	return slices.Compact(out), nil
}

// ApplyResult is what FSM.Apply returns for every log entry; the leader
// reads it from raft's ApplyFuture.Response (see Result).
type ApplyResult struct {
	// Index is the Raft index of the entry.
	Index uint64
	// Type is the entry's message type (0 when it could not be read).
	Type MsgType
	// Moves are the net replica moves the command caused: at most one per
	// origin (from its holder before the command to its holder after), in
	// the order the origins first moved. A Move with an empty From is an origin gaining its first
	// holder; one with an empty To is an origin losing its holder (removed,
	// or the group has no active member left).
	Moves []routing.Move
	// Shards are the shards whose placement the command changed (owner or
	// replicas, arrival or departure), sorted by id.
	Shards []ShardChange
	// MovedOut names, for a Split, the shards each departing member owned
	// and took with it (member id → shard ids, sorted): they are no longer
	// in this group's FSM, and the member's new group gets them when it
	// joins it (AddMemberCommand.Shards). Nil for other commands.
	MovedOut map[string][]string
	// Err is the domain error that refused the command; the state is then
	// unchanged. It wraps ErrHalted when the FSM halted on this entry or
	// had halted before.
	Err error
	// Skipped reports an entry of an Ignorable type that this build does
	// not know (or whose format version it does not know): it was skipped,
	// the state is unchanged and Err is nil.
	Skipped bool
}

// Result unpacks a raft ApplyFuture's Response: the *ApplyResult and its
// Err. A response of another type is reported as ErrInconsistent.
func Result(resp any) (*ApplyResult, error) {
	r, ok := resp.(*ApplyResult)
	if !ok || r == nil {
		return nil, fmt.Errorf("raft response %T: %w", resp, ErrInconsistent)
	}
	return r, r.Err
}

// Event tells the node about a change of the group's state. Events are
// delivered in log order.
type Event struct {
	// Index is the Raft index of the command (or, with Restored, of the
	// snapshot's last command).
	Index uint64
	// Type is the command's message type; 0 with Restored.
	Type MsgType
	// Moves are the command's replica moves (as in ApplyResult): a member
	// that is To pulls the origin's filter, one that is From drops it.
	Moves []routing.Move
	// Shards are the command's shard placement changes (as in
	// ApplyResult): a member in a change's Added opens a replica of the
	// shard, one in Removed may close it once the shard's leader has
	// removed it from the shard's Raft configuration.
	Shards []ShardChange
	// Restored reports that the whole state was replaced from a snapshot:
	// resynchronize everything (e.g. Held(self), HostedBy(self)) instead of
	// using Moves and Shards.
	Restored bool
}

// SkippedEntry describes a log entry or snapshot record that this build did
// not know and skipped because it was marked ignorable (IgnorableFlag, or
// the same bit in a snapshot record kind).
type SkippedEntry struct {
	// Index is the Raft index of the entry; for a snapshot record, the
	// index of the snapshot's last entry.
	Index uint64
	// Type is the entry's message type; 0 for a snapshot record.
	Type MsgType
	// Version is the entry's format version; 0 for a snapshot record.
	Version uint8
	// Record is the snapshot record kind; 0 for a log entry.
	Record uint8
}

// String describes the skipped entry or record for a log line.
func (s SkippedEntry) String() string {
	if s.Record != 0 {
		return fmt.Sprintf("snapshot record of unknown kind %d (snapshot at index %d)", s.Record, s.Index)
	}
	return fmt.Sprintf("entry %d of unknown type %s version %d", s.Index, s.Type, s.Version)
}

// Shard is one shard of the group: the metadata of one home, its own Raft
// group with replicas on members of this group (docs/design.md,
// "Replicated shards"). Placement is decided by the FSM (see the package
// documentation, "Shards").
type Shard struct {
	// ID names the shard (the id of the node that created it).
	ID string `json:"id"`
	// Owner is the member that should lead the shard (its preferred
	// leader); always one of Replicas. It is empty only while the shard has
	// no replica, when the group has no member able to host it.
	Owner string `json:"owner"`
	// Replicas are the members hosting a replica, sorted: min(R, n) of
	// them, n being the active members plus the failed members, not yet
	// repaired, that already host it.
	Replicas []string `json:"replicas"`
	// Creator is the incarnation of the data directory of the joiner whose
	// AddMember brought the shard into the group when the group did not
	// have it (AddMemberCommand.Incarnation): that node bootstraps the
	// shard's Raft group if the shard is new. It never changes while the
	// shard stays in the group, and is not part of the placement. Empty
	// when unknown: a shard added by a joiner that did not send its
	// incarnation, by an Absorb, derived from an old snapshot, or
	// restored from a format-1 snapshot.
	Creator string `json:"creator,omitempty"`
}

// clone returns a copy of sh that shares nothing with it.
func (sh Shard) clone() Shard {
	sh.Replicas = slices.Clone(sh.Replicas)
	return sh
}

// equal reports whether sh and o are the same placement (Creator, which
// never changes, is not compared).
func (sh Shard) equal(o Shard) bool {
	return sh.ID == o.ID && sh.Owner == o.Owner && slices.Equal(sh.Replicas, o.Replicas)
}

// hosts reports whether member id hosts a replica of sh.
func (sh Shard) hosts(id string) bool {
	_, ok := slices.BinarySearch(sh.Replicas, id)
	return ok
}

// ShardChange is what one command did to one shard's placement.
type ShardChange struct {
	// ID is the shard.
	ID string
	// Before is the shard before the command; its ID is empty when the
	// shard arrived in the group (AddMember, Absorb).
	Before Shard
	// After is the shard after the command; its ID is empty when the shard
	// left the group (Split).
	After Shard
}

// Added returns the members hosting a replica after the command and not
// before, sorted.
func (c ShardChange) Added() []string {
	_, added := diffSorted(c.Before.Replicas, c.After.Replicas)
	return added
}

// Removed returns the members hosting a replica before the command and
// not after, sorted.
func (c ShardChange) Removed() []string {
	removed, _ := diffSorted(c.Before.Replicas, c.After.Replicas)
	return removed
}

// OwnedShards lists the shards one member owns, in an AbsorbCommand.
type OwnedShards struct {
	// Member is the member's id.
	Member string
	// Shards are the ids of the shards it owns.
	Shards []string
}
