package fsm

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/ghba/ghba/routing"
)

// state is one version of the group's state. A published state (FSM.st)
// is immutable: commands mutate a clone and publish it, so readers,
// snapshots and Persist never see a state change under them.
type state struct {
	bootstrapped bool
	cfg          Config
	members      map[string]Member   // id → member, every status
	asg          *routing.Assignment // members: the active members
	idb          *routing.IDBFA      // nil until bootstrapped
	migrated     uint64              // replicas moved member → member
	shards       map[string]Shard    // id → placement; slices never mutated
	shardMoves   uint64              // shard replicas moved member → member
	enc          *encCache           // lazily encoded IDBFA
}

// encCache holds the IDBFA encoding of one immutable state.
type encCache struct {
	once sync.Once
	b    []byte
}

// newState returns the empty state of a fresh FSM.
func newState() *state {
	return &state{members: make(map[string]Member), asg: routing.NewAssignment(), shards: make(map[string]Shard), enc: new(encCache)}
}

// clone returns a deep, mutable copy of s.
func (s *state) clone() (*state, error) {
	n := &state{
		bootstrapped: s.bootstrapped,
		cfg:          s.cfg,
		members:      maps.Clone(s.members),
		asg:          s.asg.Clone(),
		migrated:     s.migrated,
		shards:       maps.Clone(s.shards),
		shardMoves:   s.shardMoves,
		enc:          new(encCache),
	}
	if s.idb != nil {
		idb, err := routing.DecodeIDBFA(s.idb.AppendBinary(nil))
		if err != nil {
			return nil, fmt.Errorf("copying idbfa: %w: %w", ErrInconsistent, err)
		}
		n.idb = idb
	}
	return n, nil
}

// idbfaBytes returns the encoding of the state's IDBFA (nil before
// bootstrap), computed once per state. The slice is shared: copy it before
// handing it out.
func (s *state) idbfaBytes() []byte {
	s.enc.once.Do(func() {
		if s.idb != nil {
			s.enc.b = s.idb.AppendBinary(nil)
		}
	})
	return s.enc.b
}

// shardIDs returns the ids of the shards for which keep is true, sorted.
func (s *state) shardIDs(keep func(Shard) bool) []string {
	var out []string
	for id, sh := range s.shards {
		if keep(sh) {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

// sortedMembers returns the members sorted by id.
func (s *state) sortedMembers() []Member {
	out := make([]Member, 0, len(s.members))
	for _, id := range slices.Sorted(maps.Keys(s.members)) {
		out = append(out, s.members[id])
	}
	return out
}

// hasOrigin reports whether o is an origin (assigned or not).
func (s *state) hasOrigin(o string) bool {
	if _, ok := s.asg.HolderOf(o); ok {
		return true
	}
	if len(s.asg.Members()) > 0 { // with members every origin has a holder
		return false
	}
	_, found := slices.BinarySearch(s.asg.Origins(), o)
	return found
}

// applyMoves keeps the IDBFA in step with moves the assignment made.
func (s *state) applyMoves(moves []routing.Move) error {
	for _, mv := range moves {
		if mv.From != "" {
			if err := s.idb.Unassign(mv.From, mv.Origin); err != nil {
				return fmt.Errorf("%w: %w", ErrInconsistent, err)
			}
		}
		if mv.To != "" {
			if err := s.idb.Assign(mv.To, mv.Origin); err != nil {
				return fmt.Errorf("%w: %w", ErrInconsistent, err)
			}
		}
	}
	return nil
}

// activate adds id to the assignment (light-weight migration towards it).
func (s *state) activate(id string) ([]routing.Move, error) {
	if err := s.idb.AddMember(id); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInconsistent, err)
	}
	moves := s.asg.AddMember(id)
	return moves, s.applyMoves(moves)
}

// deactivate removes id from the assignment, reassigning its replicas.
func (s *state) deactivate(id string) ([]routing.Move, error) {
	moves := s.asg.RemoveMember(id)
	if err := s.applyMoves(moves); err != nil {
		return nil, err
	}
	if err := s.idb.RemoveMember(id); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInconsistent, err)
	}
	return moves, nil
}

// addOrigin adds a new origin o and returns its first assignment, if any.
func (s *state) addOrigin(o string) ([]routing.Move, error) {
	h := s.asg.AddOrigin(o)
	if h == "" {
		return nil, nil
	}
	if err := s.idb.Assign(h, o); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInconsistent, err)
	}
	return []routing.Move{{Origin: o, To: h}}, nil
}

// removeOrigin forgets origin o and returns the moves: o leaving its
// holder, then the rebalancing move, if any.
func (s *state) removeOrigin(o string) ([]routing.Move, error) {
	h, moves, ok := s.asg.RemoveOriginMoves(o)
	if !ok {
		return nil, nil
	}
	var out []routing.Move
	if h != "" {
		if err := s.idb.Unassign(h, o); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInconsistent, err)
		}
		out = append(out, routing.Move{Origin: o, From: h})
	}
	if err := s.applyMoves(moves); err != nil {
		return nil, err
	}
	return append(out, moves...), nil
}

// joiner is a member joining the group (AddMember, Absorb), the shards it
// owns (nil for the default: see AddMemberCommand.Shards) and the
// incarnation of its data directory ("" if unknown), which the shards it
// adds record as their Creator.
type joiner struct {
	m      Member
	shards []string
	inc    string
}

// joinerShards returns the shards j brings, sorted, validated, without
// duplicates.
func (s *state) joinerShards(j joiner) ([]string, error) {
	if j.shards != nil {
		return normalizeIDs("shard id", j.shards)
	}
	if _, ok := s.members[j.m.ID]; ok {
		return nil, nil
	}
	if _, ok := s.shards[j.m.ID]; ok {
		return nil, nil
	}
	return []string{j.m.ID}, nil
}

// addMembers adds or refreshes the joiners js (sorted by id, distinct,
// validated) at index, then places the shards they bring and balances:
// the body of AddMember and Absorb.
func (s *state) addMembers(js []joiner, index uint64) (*state, []routing.Move, error) {
	fresh, change := 0, false
	type arrival struct{ shard, owner, creator string }
	var arrivals []arrival
	claimed := make(map[string]string) // shard → joiner claiming it
	for _, j := range js {
		ex, ok := s.members[j.m.ID]
		if !ok {
			fresh++
		}
		if !ok || ex.Status != StatusActive || !ex.sameAddrs(j.m) {
			change = true
		}
		shards, err := s.joinerShards(j)
		if err != nil {
			return nil, nil, err
		}
		if len(claimed)+len(shards) > MaxShardsPerCommand {
			return nil, nil, fmt.Errorf("more than %d shards: %w", MaxShardsPerCommand, ErrInvalidCommand)
		}
		for _, id := range shards {
			if other, dup := claimed[id]; dup {
				return nil, nil, fmt.Errorf("shard %q brought by %q and %q: %w", id, other, j.m.ID, ErrInvalidCommand)
			}
			claimed[id] = j.m.ID
			switch sh, ok := s.shards[id]; {
			case !ok || sh.Owner == "":
				arrivals = append(arrivals, arrival{id, j.m.ID, j.inc})
			case sh.Owner != j.m.ID:
				return nil, nil, fmt.Errorf("%q brings shard %q, owned by %q: %w", j.m.ID, id, sh.Owner, ErrShardConflict)
			}
		}
	}
	if max := s.cfg.MaxGroupSize; len(s.members)+fresh > max {
		return nil, nil, fmt.Errorf("%d members + %d new > %d: %w", len(s.members), fresh, max, ErrGroupFull)
	}
	if !change && len(arrivals) == 0 {
		return nil, nil, nil
	}
	n, err := s.clone()
	if err != nil {
		return nil, nil, err
	}
	var moves []routing.Move
	for _, j := range js {
		m := j.m
		ex, ok := n.members[m.ID]
		if ok && ex.Status == StatusActive {
			ex.RPCAddr, ex.RaftAddr, ex.SerfAddr, ex.HTTPAddr = m.RPCAddr, m.RaftAddr, m.SerfAddr, m.HTTPAddr
			n.members[m.ID] = ex
			continue
		}
		if n.hasOrigin(m.ID) {
			mv, err := n.removeOrigin(m.ID)
			if err != nil {
				return nil, nil, err
			}
			moves = append(moves, mv...)
		}
		m.Status, m.JoinIndex = StatusActive, index
		n.members[m.ID] = m
		mv, err := n.activate(m.ID)
		if err != nil {
			return nil, nil, err
		}
		moves = append(moves, mv...)
	}
	p := n.placer()
	for _, a := range arrivals {
		p.addShard(a.shard, a.owner, a.creator)
	}
	p.balance()
	return n, moves, nil
}

// checkOrigins normalizes a list of origin ids and refuses members.
func (s *state) checkOrigins(ids []string) ([]string, error) {
	ids, err := normalizeIDs("origin", ids)
	if err != nil {
		return nil, err
	}
	for _, o := range ids {
		if _, ok := s.members[o]; ok {
			return nil, fmt.Errorf("origin %q: %w", o, ErrOriginIsMember)
		}
	}
	return ids, nil
}

// changeOrigins removes then adds origins (each list sorted) on a clone.
func (s *state) changeOrigins(remove, add []string) (*state, []routing.Move, error) {
	if len(remove) == 0 && len(add) == 0 {
		return nil, nil, nil
	}
	n, err := s.clone()
	if err != nil {
		return nil, nil, err
	}
	var moves []routing.Move
	for _, o := range remove {
		mv, err := n.removeOrigin(o)
		if err != nil {
			return nil, nil, err
		}
		moves = append(moves, mv...)
	}
	for _, o := range add {
		mv, err := n.addOrigin(o)
		if err != nil {
			return nil, nil, err
		}
		moves = append(moves, mv...)
	}
	return n, moves, nil
}

// netMoves composes the moves of one command per origin: an origin that
// moved several times (a split removing members one by one may hand a
// replica to a member that leaves next) gets one move from its first
// holder to its last, in the order of its first move; an origin back at
// its first holder gets none. It returns nil for no moves.
func netMoves(moves []routing.Move) []routing.Move {
	if len(moves) < 2 {
		return moves
	}
	at := make(map[string]int, len(moves))
	var out []routing.Move
	for _, mv := range moves {
		if i, ok := at[mv.Origin]; ok {
			out[i].To = mv.To
			continue
		}
		at[mv.Origin] = len(out)
		out = append(out, mv)
	}
	out = slices.DeleteFunc(out, func(mv routing.Move) bool { return mv.From == mv.To })
	if len(out) == 0 {
		return nil
	}
	return out
}

// migrations counts the moves from one member to another.
func migrations(moves []routing.Move) uint64 {
	n := uint64(0)
	for _, mv := range moves {
		if mv.From != "" && mv.To != "" {
			n++
		}
	}
	return n
}

// diffSorted returns the elements of a not in b and of b not in a; both
// inputs sorted without duplicates.
func diffSorted(a, b []string) (onlyA, onlyB []string) {
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		switch {
		case j == len(b) || i < len(a) && a[i] < b[j]:
			onlyA = append(onlyA, a[i])
			i++
		case i == len(a) || b[j] < a[i]:
			onlyB = append(onlyB, b[j])
			j++
		default:
			i++
			j++
		}
	}
	return onlyA, onlyB
}

func applyBootstrap(s *state, cmd Command, _ uint64) (*state, []routing.Move, error) {
	c := cmd.(*BootstrapCommand).Config
	if err := c.Validate(); err != nil {
		return nil, nil, err
	}
	if s.bootstrapped {
		if !s.cfg.sameGeometry(c) {
			return nil, nil, fmt.Errorf("group %q has %+v, command %+v: %w", s.cfg.Group, s.cfg, c, ErrGeometryChanged)
		}
		if s.cfg.normalized() != c.normalized() {
			return nil, nil, fmt.Errorf("group %q (max %d, replication %d), command %q (max %d, replication %d): %w",
				s.cfg.Group, s.cfg.MaxGroupSize, s.cfg.ReplicationFactor(), c.Group, c.MaxGroupSize, c.ReplicationFactor(), ErrConfigConflict)
		}
		return nil, nil, nil
	}
	n, err := s.clone()
	if err != nil {
		return nil, nil, err
	}
	n.bootstrapped, n.cfg, n.idb = true, c, routing.NewIDBFA(c.IDFilter)
	return n, nil, nil
}

func applyAddMember(s *state, cmd Command, index uint64) (*state, []routing.Move, error) {
	c := cmd.(*AddMemberCommand)
	if err := c.Member.validate(); err != nil {
		return nil, nil, err
	}
	if c.Incarnation != "" {
		if err := validID("incarnation", c.Incarnation); err != nil {
			return nil, nil, err
		}
	}
	return s.addMembers([]joiner{{c.Member, c.Shards, c.Incarnation}}, index)
}

func applyRemoveMember(s *state, cmd Command, _ uint64) (*state, []routing.Move, error) {
	id := cmd.(*RemoveMemberCommand).ID
	ex, ok := s.members[id]
	if !ok {
		return nil, nil, fmt.Errorf("remove %q: %w", id, ErrUnknownMember)
	}
	n, err := s.clone()
	if err != nil {
		return nil, nil, err
	}
	var moves []routing.Move
	if ex.Status == StatusActive {
		if moves, err = n.deactivate(id); err != nil {
			return nil, nil, err
		}
	}
	delete(n.members, id)
	p := n.placer()
	p.depart(id)
	p.balance()
	return n, moves, nil
}

func applySetStatus(s *state, cmd Command, index uint64) (*state, []routing.Move, error) {
	c := cmd.(*SetStatusCommand)
	if !c.Status.Valid() {
		return nil, nil, fmt.Errorf("status %q: %w", c.Status, ErrInvalidCommand)
	}
	ex, ok := s.members[c.ID]
	if !ok {
		return nil, nil, fmt.Errorf("set status of %q: %w", c.ID, ErrUnknownMember)
	}
	if ex.Status == c.Status {
		return nil, nil, nil
	}
	n, err := s.clone()
	if err != nil {
		return nil, nil, err
	}
	var moves []routing.Move
	switch {
	case ex.Status == StatusActive:
		moves, err = n.deactivate(c.ID)
	case c.Status == StatusActive:
		ex.JoinIndex = index
		moves, err = n.activate(c.ID)
	}
	if err != nil {
		return nil, nil, err
	}
	ex.Status = c.Status
	n.members[c.ID] = ex
	p := n.placer()
	if c.Status == StatusLeaving {
		p.depart(c.ID)
	}
	p.balance()
	return n, moves, nil
}

func applyRepairMember(s *state, cmd Command, _ uint64) (*state, []routing.Move, error) {
	id := cmd.(*RepairMemberCommand).ID
	ex, ok := s.members[id]
	switch {
	case !ok:
		return nil, nil, fmt.Errorf("repair %q: %w", id, ErrUnknownMember)
	case ex.Status == StatusActive:
		return nil, nil, fmt.Errorf("repair %q: %w", id, ErrMemberActive)
	case !s.hostsOrOwns(id):
		return nil, nil, nil
	}
	n, err := s.clone()
	if err != nil {
		return nil, nil, err
	}
	p := n.placer()
	p.depart(id)
	p.balance()
	return n, nil, nil
}

func applySetOrigins(s *state, cmd Command, _ uint64) (*state, []routing.Move, error) {
	want, err := s.checkOrigins(cmd.(*SetOriginsCommand).Origins)
	if err != nil {
		return nil, nil, err
	}
	remove, add := diffSorted(s.asg.Origins(), want)
	return s.changeOrigins(remove, add)
}

func applyAddOrigins(s *state, cmd Command, _ uint64) (*state, []routing.Move, error) {
	ids, err := s.checkOrigins(cmd.(*AddOriginsCommand).Origins)
	if err != nil {
		return nil, nil, err
	}
	_, add := diffSorted(s.asg.Origins(), ids)
	return s.changeOrigins(nil, add)
}

func applyRemoveOrigins(s *state, cmd Command, _ uint64) (*state, []routing.Move, error) {
	ids, err := normalizeIDs("origin", cmd.(*RemoveOriginsCommand).Origins)
	if err != nil {
		return nil, nil, err
	}
	_, absent := diffSorted(s.asg.Origins(), ids)
	remove, _ := diffSorted(ids, absent)
	return s.changeOrigins(remove, nil)
}

func applySplit(s *state, cmd Command, _ uint64) (*state, []routing.Move, error) {
	c := cmd.(*SplitCommand)
	if c.NewGroup != "" {
		if err := validID("group", c.NewGroup); err != nil {
			return nil, nil, err
		}
	}
	ids, err := normalizeIDs("member id", c.IDs)
	if err != nil {
		return nil, nil, err
	}
	if len(ids) == 0 {
		return nil, nil, fmt.Errorf("split of no member: %w", ErrInvalidCommand)
	}
	for _, id := range ids {
		if _, ok := s.members[id]; !ok {
			return nil, nil, fmt.Errorf("split %q: %w", id, ErrUnknownMember)
		}
	}
	if len(ids) >= len(s.members) {
		return nil, nil, fmt.Errorf("split of %d of %d members leaves none: %w", len(ids), len(s.members), ErrInvalidCommand)
	}
	n, err := s.clone()
	if err != nil {
		return nil, nil, err
	}
	for id, sh := range n.shards { // the movers take the shards they own
		if slices.Contains(ids, sh.Owner) {
			delete(n.shards, id)
		}
	}
	var moves []routing.Move
	for _, id := range ids {
		if n.members[id].Status == StatusActive {
			mv, err := n.deactivate(id)
			if err != nil {
				return nil, nil, err
			}
			moves = append(moves, mv...)
		}
		delete(n.members, id)
	}
	p := n.placer()
	for _, id := range ids {
		p.depart(id)
	}
	p.balance()
	for _, id := range ids {
		mv, err := n.addOrigin(id)
		if err != nil {
			return nil, nil, err
		}
		moves = append(moves, mv...)
	}
	return n, moves, nil
}

func applyAbsorb(s *state, cmd Command, index uint64) (*state, []routing.Move, error) {
	c := cmd.(*AbsorbCommand)
	if c.FromGroup != "" {
		if err := validID("group", c.FromGroup); err != nil {
			return nil, nil, err
		}
	}
	if len(c.Members) == 0 {
		return nil, nil, fmt.Errorf("absorb of no member: %w", ErrInvalidCommand)
	}
	ms := slices.Clone(c.Members)
	for _, m := range ms {
		if err := m.validate(); err != nil {
			return nil, nil, err
		}
	}
	slices.SortFunc(ms, func(a, b Member) int { return strings.Compare(a.ID, b.ID) })
	for i := 1; i < len(ms); i++ {
		if ms[i].ID == ms[i-1].ID {
			return nil, nil, fmt.Errorf("absorb lists %q twice: %w", ms[i].ID, ErrInvalidCommand)
		}
	}
	js := make([]joiner, len(ms))
	for i, m := range ms {
		js[i].m = m
		if c.Shards != nil {
			js[i].shards = []string{} // not listed: none
		}
	}
	listed := make(map[string]bool, len(c.Shards))
	for _, o := range c.Shards {
		i, ok := slices.BinarySearchFunc(ms, o.Member, func(m Member, id string) int { return strings.Compare(m.ID, id) })
		if !ok {
			return nil, nil, fmt.Errorf("absorb: shards of %q, not absorbed: %w", o.Member, ErrInvalidCommand)
		}
		if listed[o.Member] {
			return nil, nil, fmt.Errorf("absorb: shards of %q listed twice: %w", o.Member, ErrInvalidCommand)
		}
		listed[o.Member] = true
		js[i].shards = append([]string{}, o.Shards...)
	}
	return s.addMembers(js, index)
}
