package routing

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"slices"
	"strings"
)

// ErrNotAssigned reports an IDBFA Unassign of an origin that the member's
// ID filter certainly does not hold.
var ErrNotAssigned = errors.New("routing: origin not assigned to member")

var magicIDBFA = [4]byte{'G', 'H', 'B', 'I'}

// IDBFA is the identification Bloom filter array of a G-HBA group (G-HBA
// §2.3, "Updating Replica"): for each member of the group, a counting Bloom
// filter of the ids of the origins (nodes of other groups) whose filter
// replicas that member holds. It is exported to the other groups, so an
// origin can send its filter updates straight to the one member of each
// group that holds its replica: a unique hit in Lookup names it. Several
// hits cost little (a wrongly addressed member drops the update); counting
// filters let a departing member's replicas be reassigned (§2.4).
//
// Every mutation increments Version, so receivers can discard stale
// exports. An IDBFA is not safe for concurrent use; callers serialize
// access.
type IDBFA struct {
	geo     Geometry
	version uint64
	members []idMember // sorted by id
}

type idMember struct {
	id string
	cf *CountingFilter
}

// find returns the position of member in x.members and whether it is there.
func (x *IDBFA) find(member string) (int, bool) {
	return slices.BinarySearchFunc(x.members, member, func(m idMember, id string) int {
		return strings.Compare(m.id, id)
	})
}

// filter returns member's ID filter, or nil.
func (x *IDBFA) filter(member string) *CountingFilter {
	if i, ok := x.find(member); ok {
		return x.members[i].cf
	}
	return nil
}

// NewIDBFA returns an empty IDBFA whose ID filters have geometry g (the
// origin count is small: NewGeometry(originsPerMember, 16, 0, HashXX) is
// ample). It panics if g is invalid.
func NewIDBFA(g Geometry) *IDBFA {
	if err := g.Validate(); err != nil {
		panic(err)
	}
	return &IDBFA{geo: g}
}

// Geometry returns the geometry of the ID filters.
func (x *IDBFA) Geometry() Geometry { return x.geo }

// Version returns the number of mutations since creation, or the version
// the IDBFA was decoded with plus the mutations since.
func (x *IDBFA) Version() uint64 { return x.version }

// Len returns the number of members.
func (x *IDBFA) Len() int { return len(x.members) }

// Members returns the member ids, sorted.
func (x *IDBFA) Members() []string {
	ids := make([]string, len(x.members))
	for i, m := range x.members {
		ids[i] = m.id
	}
	return ids
}

// AddMember adds a member with an empty ID filter. An existing member
// returns ErrDuplicateMember.
func (x *IDBFA) AddMember(member string) error {
	i, ok := x.find(member)
	if ok {
		return fmt.Errorf("idbfa: add %q: %w", member, ErrDuplicateMember)
	}
	x.members = slices.Insert(x.members, i, idMember{id: member, cf: NewCountingFilter(x.geo)})
	x.version++
	return nil
}

// RemoveMember drops a member and its ID filter (G-HBA §2.4: a departing
// member's replicas are first reassigned to the others). An absent member
// returns ErrUnknownMember.
func (x *IDBFA) RemoveMember(member string) error {
	i, ok := x.find(member)
	if !ok {
		return fmt.Errorf("idbfa: remove %q: %w", member, ErrUnknownMember)
	}
	x.members = slices.Delete(x.members, i, i+1)
	x.version++
	return nil
}

// Assign records that member holds origin's replica: origin is inserted
// into member's ID filter. An absent member returns ErrUnknownMember.
// Assigning one origin to several members (or twice) is the caller's
// mistake: Lookup then reports several positives.
func (x *IDBFA) Assign(member, origin string) error {
	cf := x.filter(member)
	if cf == nil {
		return fmt.Errorf("idbfa: assign %q to %q: %w", origin, member, ErrUnknownMember)
	}
	cf.Add(origin)
	x.version++
	return nil
}

// Unassign deletes origin from member's ID filter, for example when the
// replica migrates (G-HBA §2.4: deleted from its original ID filter and
// inserted into the new member's). An absent member returns
// ErrUnknownMember and an origin the filter certainly does not hold
// ErrNotAssigned. Only unassign what was assigned: removing an unassigned
// origin that happens to be a false positive corrupts the counting filter.
func (x *IDBFA) Unassign(member, origin string) error {
	cf := x.filter(member)
	if cf == nil {
		return fmt.Errorf("idbfa: unassign %q from %q: %w", origin, member, ErrUnknownMember)
	}
	if !cf.Remove(origin) {
		return fmt.Errorf("idbfa: unassign %q from %q: %w", origin, member, ErrNotAssigned)
	}
	x.version++
	return nil
}

// Lookup returns the members whose ID filter holds origin under the
// unique-hit rule: Result.Hit() means Result.ID holds origin's replica
// (or, with a small probability, origin is held by no member and this one
// is a false positive). It does not allocate.
func (x *IDBFA) Lookup(origin string) Result {
	return x.LookupKey(HashPath(x.geo.Hash, origin))
}

// LookupKey is Lookup for a pre-hashed origin id.
func (x *IDBFA) LookupKey(k Key) Result {
	var r Result
	for _, m := range x.members {
		if m.cf.TestKey(k) {
			r.Positives++
			r.ID = m.id
		}
	}
	if r.Positives != 1 {
		r.ID = ""
	}
	return r
}

// Positives appends to dst every member whose ID filter holds origin: the
// holder of origin's replica (no false negatives) and any false
// positives. An origin that sends its update to all of them reaches the
// holder; the others drop it.
func (x *IDBFA) Positives(origin string, dst []string) []string {
	k := HashPath(x.geo.Hash, origin)
	for _, m := range x.members {
		if m.cf.TestKey(k) {
			dst = append(dst, m.id)
		}
	}
	return dst
}

// SizeBytes is the memory of the ID filters (counters and plain views)
// plus the member ids.
func (x *IDBFA) SizeBytes() int {
	n := 0
	for _, m := range x.members {
		n += len(m.id) + m.cf.SizeBytes()
	}
	return n
}

// Encoding layout (little-endian), in the style of bloom.go:
//
//	"GHBI" | format u8 | hash u8 | k u8 | 0 u8 | m u64 | version u64 |
//	count uvarint | count × (id length uvarint, id, counters [m/16]u64) |
//	crc32c u32
//
// Members appear in strictly increasing id order. The CRC (Castagnoli)
// covers every byte before it.

// AppendBinary appends the encoding of x (geometry, version, members and
// their ID filters, checksum) to dst.
func (x *IDBFA) AppendBinary(dst []byte) []byte {
	start := len(dst)
	dst = putHeader(dst, magicIDBFA, x.geo, x.version)
	dst = binary.AppendUvarint(dst, uint64(len(x.members)))
	for _, m := range x.members {
		dst = binary.AppendUvarint(dst, uint64(len(m.id)))
		dst = append(dst, m.id...)
		for _, w := range m.cf.counters {
			dst = binary.LittleEndian.AppendUint64(dst, w)
		}
	}
	return binary.LittleEndian.AppendUint32(dst, crc32.Checksum(dst[start:], castagnoli))
}

// MarshalBinary implements encoding.BinaryMarshaler.
func (x *IDBFA) MarshalBinary() ([]byte, error) { return x.AppendBinary(nil), nil }

// UnmarshalBinary implements encoding.BinaryUnmarshaler: it replaces x with
// the decoded IDBFA. Bad input returns an error wrapping ErrCorrupt and
// leaves x unchanged.
func (x *IDBFA) UnmarshalBinary(b []byte) error {
	g, v, body, err := readHeader(b, magicIDBFA)
	if err != nil {
		return fmt.Errorf("idbfa: %w", err)
	}
	n, sz := binary.Uvarint(body)
	if sz <= 0 {
		return fmt.Errorf("idbfa: member count: %w", ErrCorrupt)
	}
	body = body[sz:]
	per := g.M / countersPer * 8 // counter bytes per member
	// Each member takes at least 1 + per bytes; refuse counts the input
	// cannot hold before allocating anything.
	if n > uint64(len(body))/(1+per) {
		return fmt.Errorf("idbfa: %d members in %d bytes: %w", n, len(body), ErrCorrupt)
	}
	nx := NewIDBFA(g)
	nx.version = v
	nx.members = make([]idMember, 0, n)
	for i := uint64(0); i < n; i++ {
		l, sz := binary.Uvarint(body)
		if sz <= 0 || l > uint64(len(body)-sz) || uint64(len(body)-sz)-l < per {
			return fmt.Errorf("idbfa: member %d truncated: %w", i, ErrCorrupt)
		}
		body = body[sz:]
		m := string(body[:l])
		body = body[l:]
		if len(nx.members) > 0 && m <= nx.members[len(nx.members)-1].id {
			return fmt.Errorf("idbfa: member %q out of order: %w", m, ErrCorrupt)
		}
		cf, err := decodeCounters(g, 0, body[:per])
		if err != nil {
			return fmt.Errorf("idbfa: member %q: %w", m, err)
		}
		body = body[per:]
		nx.members = append(nx.members, idMember{id: m, cf: cf})
	}
	if len(body) != 0 {
		return fmt.Errorf("idbfa: %d trailing bytes: %w", len(body), ErrCorrupt)
	}
	*x = *nx
	return nil
}

// DecodeIDBFA decodes an IDBFA encoding.
func DecodeIDBFA(b []byte) (*IDBFA, error) {
	x := new(IDBFA)
	if err := x.UnmarshalBinary(b); err != nil {
		return nil, err
	}
	return x, nil
}
