package fsm

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"maps"
	"slices"
	"strconv"

	"github.com/ghba/ghba/routing"
	"github.com/hashicorp/raft"
)

// Snapshot layout:
//
//	"GHBS" | format u8 | records… | end record
//	record = type u8 | body length uvarint | msgpack body
//
// Records of the kinds below, in this order: one header, the config (once
// bootstrapped), the members sorted by id, one holding per active member
// sorted by id (the origins it holds), one holding with an empty member
// listing the unassigned origins (only when there is no active member and
// some origins), the IDBFA encoding (once bootstrapped), the placement
// record and one shard record per shard sorted by id (once bootstrapped),
// and the end record with the number of records before it and the CRC-32C
// of every byte before it. The encoding of a state is canonical: equal
// states give equal bytes. A reader skips a record of a kind it does not
// know if the kind has recIgnorable set (a newer build may add such records
// anywhere before the end record); any other unknown kind, and an unknown
// format, halt the FSM (ErrUnsupportedSnapshot).
//
// The placement and shard records (kinds 6 and 7) are not ignorable: a
// build that skipped them would restore a group without its shards and, as
// leader, hand that state on in its own snapshots. A build from before
// shards halts on them instead. A bootstrapped snapshot without a placement
// record was written by such a build: its shards are derived from its
// members (see legacyShards).
//
// Format 2 is format 1 whose shard records may carry a Creator. As for log
// entries, the oldest format that carries the state is written: format 1
// while no shard has a Creator (an older build restores it exactly), format
// 2 otherwise (an older build, whose decoder would silently drop the field,
// halts instead). A format-1 snapshot restores with every Creator empty.
const (
	snapshotFormatV1 uint8 = 1
	snapshotFormatV2 uint8 = 2
)

// snapshotFormat returns the oldest snapshot format that carries s.
func (s *state) snapshotFormat() uint8 {
	for _, sh := range s.shards {
		if sh.Creator != "" {
			return snapshotFormatV2
		}
	}
	return snapshotFormatV1
}

var snapshotMagic = [4]byte{'G', 'H', 'B', 'S'}

// Record types of the snapshot encoding.
const (
	recHeader    uint8 = 1
	recConfig    uint8 = 2
	recMember    uint8 = 3
	recHolding   uint8 = 4
	recIDBFA     uint8 = 5
	recPlacement uint8 = 6
	recShard     uint8 = 7
	recEnd       uint8 = 255

	// recIgnorable marks a record kind (128–254) that a build not knowing
	// it may skip, as IgnorableFlag does for message types.
	recIgnorable uint8 = 0x80
)

// maxRecord bounds one snapshot record (the IDBFA record is the largest:
// at most MaxGroupSizeLimit members × MaxIDFilterBits/2 bytes in theory,
// a few MiB in practice).
const maxRecord = 1 << 30

type snapHeader struct {
	Index        uint64
	Migrated     uint64
	Bootstrapped bool
}

type snapHolding struct {
	Member  string // "" for unassigned origins
	Origins []string
}

type snapIDBFA struct {
	Data []byte
}

// snapPlacement opens the shard records (a Shard each).
type snapPlacement struct {
	Moved uint64 // shard replicas moved
}

type snapEnd struct {
	Records uint64
	CRC     uint32
}

// fsmSnapshot is a point-in-time state: a pointer to an immutable state.
type fsmSnapshot struct {
	st    *state
	index uint64
}

// Snapshot implements raft.FSM. It only captures the current (immutable)
// state; Persist encodes it while Apply goes on. A halted FSM refuses
// (ErrHalted): raft labels a snapshot with its own last applied index,
// which is past the entry the FSM could not apply, and would then compact
// that entry out of the log that a newer build must replay.
func (f *FSM) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.halted != nil {
		return nil, fmt.Errorf("fsm snapshot: %w (%v)", ErrHalted, f.halted)
	}
	return &fsmSnapshot{st: f.st, index: f.applied}, nil
}

// Persist implements raft.FSMSnapshot: it writes the state as typed
// records, then closes the sink (or cancels it on error).
func (sn *fsmSnapshot) Persist(sink raft.SnapshotSink) error {
	if err := writeSnapshot(sink, sn.st, sn.index); err != nil {
		_ = sink.Cancel()
		return fmt.Errorf("fsm snapshot: %w", err)
	}
	if err := sink.Close(); err != nil {
		return fmt.Errorf("fsm snapshot: close: %w", err)
	}
	return nil
}

// Release implements raft.FSMSnapshot; the state needs no release.
func (sn *fsmSnapshot) Release() {}

// Restore implements raft.FSM: it replaces the whole state with the
// snapshot read from rc (raft closes rc). On error the state is unchanged.
// A snapshot from a newer build (ErrUnsupportedSnapshot) halts the FSM; a
// halted FSM refuses to restore (ErrHalted).
func (f *FSM) Restore(rc io.ReadCloser) error {
	if err := f.Halted(); err != nil {
		return fmt.Errorf("fsm restore: %w (%v)", ErrHalted, err)
	}
	st, index, skipped, err := readSnapshot(rc)
	if errors.Is(err, ErrUnsupportedSnapshot) {
		return f.halt(f.AppliedIndex(), fmt.Errorf("%w: restore: %w", ErrHalted, err))
	}
	if err != nil {
		return fmt.Errorf("fsm restore: %w", err)
	}
	skips := make([]SkippedEntry, len(skipped))
	for i, kind := range skipped {
		skips[i] = SkippedEntry{Index: index, Record: kind}
	}
	if err := f.publish(index, st, skips); err != nil {
		return fmt.Errorf("fsm restore: %w", err)
	}
	f.reportSkips(skips)
	if f.onChange != nil {
		f.onChange(Event{Index: index, Restored: true})
	}
	return nil
}

// crcWriter writes through to a buffered writer and hashes what it writes.
type crcWriter struct {
	w *bufio.Writer
	h hash.Hash32
}

func (c *crcWriter) Write(p []byte) (int, error) {
	c.h.Write(p)
	return c.w.Write(p)
}

// writeRecord writes one record.
func writeRecord(w io.Writer, t uint8, v any) error {
	body, err := encodeBody(nil, v)
	if err != nil {
		return fmt.Errorf("record %d: %w", t, err)
	}
	hdr := binary.AppendUvarint([]byte{t}, uint64(len(body)))
	if _, err := w.Write(hdr); err != nil {
		return err
	}
	_, err = w.Write(body)
	return err
}

// writeSnapshot writes the canonical encoding of s, taken at index.
func writeSnapshot(w io.Writer, s *state, index uint64) error {
	bw := bufio.NewWriterSize(w, 64<<10)
	cw := &crcWriter{w: bw, h: crc32.New(crc32.MakeTable(crc32.Castagnoli))}
	if _, err := cw.Write(append(snapshotMagic[:], s.snapshotFormat())); err != nil {
		return err
	}
	n := uint64(0)
	put := func(t uint8, v any) error {
		n++
		return writeRecord(cw, t, v)
	}
	if err := put(recHeader, snapHeader{Index: index, Migrated: s.migrated, Bootstrapped: s.bootstrapped}); err != nil {
		return err
	}
	if s.bootstrapped {
		if err := put(recConfig, s.cfg); err != nil {
			return err
		}
	}
	for _, m := range s.sortedMembers() {
		if err := put(recMember, m); err != nil {
			return err
		}
	}
	active := s.asg.Members()
	for _, m := range active {
		held := s.asg.Held(m)
		if len(held) == 0 {
			held = nil // canonical: a member that held origins and one that never did encode alike
		}
		if err := put(recHolding, snapHolding{Member: m, Origins: held}); err != nil {
			return err
		}
	}
	if len(active) == 0 && s.asg.Len() > 0 {
		if err := put(recHolding, snapHolding{Origins: s.asg.Origins()}); err != nil {
			return err
		}
	}
	if s.idb != nil {
		if err := put(recIDBFA, snapIDBFA{Data: s.idbfaBytes()}); err != nil {
			return err
		}
	}
	if s.bootstrapped {
		if err := put(recPlacement, snapPlacement{Moved: s.shardMoves}); err != nil {
			return err
		}
		for _, id := range slices.Sorted(maps.Keys(s.shards)) {
			if err := put(recShard, s.shards[id]); err != nil {
				return err
			}
		}
	}
	if err := writeRecord(bw, recEnd, snapEnd{Records: n, CRC: cw.h.Sum32()}); err != nil {
		return err
	}
	return bw.Flush()
}

// crcReader reads from a buffered reader and hashes what it consumes.
type crcReader struct {
	r *bufio.Reader
	h hash.Hash32
}

func (c *crcReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.h.Write(p[:n])
	return n, err
}

func (c *crcReader) ReadByte() (byte, error) {
	b, err := c.r.ReadByte()
	if err == nil {
		c.h.Write([]byte{b})
	}
	return b, err
}

// corrupt wraps a snapshot decoding problem.
func corrupt(format string, args ...any) error {
	return fmt.Errorf("%s: %w", fmt.Sprintf(format, args...), ErrCorruptSnapshot)
}

// unsupported wraps a snapshot part a newer build wrote.
func unsupported(format string, args ...any) error {
	return fmt.Errorf("%s: %w: %w", fmt.Sprintf(format, args...), ErrUnsupportedSnapshot, ErrCorruptSnapshot)
}

// readSnapshot decodes and validates a snapshot and rebuilds the state. It
// also returns the kinds of the ignorable records it skipped.
func readSnapshot(r io.Reader) (*state, uint64, []uint8, error) {
	cr := &crcReader{r: bufio.NewReaderSize(r, 64<<10), h: crc32.New(crc32.MakeTable(crc32.Castagnoli))}
	var magic [5]byte
	if _, err := io.ReadFull(cr, magic[:]); err != nil {
		return nil, 0, nil, corrupt("header: %v", err)
	}
	if [4]byte(magic[:4]) != snapshotMagic {
		return nil, 0, nil, corrupt("bad magic %q", magic[:4])
	}
	format := magic[4]
	if format != snapshotFormatV1 && format != snapshotFormatV2 {
		return nil, 0, nil, unsupported("format %d (this build reads %d to %d)", format, snapshotFormatV1, snapshotFormatV2)
	}
	var (
		hdr       *snapHeader
		cfg       *Config
		members   []Member
		holdings  []snapHolding
		idbData   []byte
		haveIDBFA bool
		placement *snapPlacement
		shards    []Shard
		records   uint64
		body      bytes.Buffer
		skipped   []uint8 // kinds of the ignorable records skipped
		unknown   []uint8 // kinds of the other unknown records
	)
	for {
		sum := cr.h.Sum32()
		t, err := cr.ReadByte()
		if err != nil {
			return nil, 0, nil, corrupt("record %d: %v (truncated?)", records, err)
		}
		l, err := binary.ReadUvarint(cr)
		if err != nil || l > maxRecord {
			return nil, 0, nil, corrupt("record %d: length %d: %v", records, l, err)
		}
		body.Reset()
		if n, err := io.CopyN(&body, cr, int64(l)); err != nil {
			return nil, 0, nil, corrupt("record %d: %d of %d bytes: %v", records, n, l, err)
		}
		if t == recEnd {
			var e snapEnd
			if err := decodeBody(body.Bytes(), &e); err != nil {
				return nil, 0, nil, corrupt("end record: %v", err)
			}
			if e.Records != records || e.CRC != sum {
				return nil, 0, nil, corrupt("end record: %d records crc %08x, read %d crc %08x", e.Records, e.CRC, records, sum)
			}
			break
		}
		if records == 0 && t != recHeader {
			return nil, 0, nil, corrupt("first record has type %d", t)
		}
		records++
		var v any
		switch t {
		case recHeader:
			v, err = once(&hdr, "header")
		case recConfig:
			v, err = once(&cfg, "config")
		case recPlacement:
			v, err = once(&placement, "placement")
		case recMember:
			v = grow(&members)
		case recHolding:
			v = grow(&holdings)
		case recShard:
			v = grow(&shards)
		case recIDBFA:
			if haveIDBFA {
				return nil, 0, nil, corrupt("second idbfa")
			}
			haveIDBFA = true
			var x snapIDBFA
			if err := decodeBody(body.Bytes(), &x); err != nil {
				return nil, 0, nil, corrupt("idbfa record: %v", err)
			}
			idbData = x.Data
			continue
		default: // written by a newer build, or corrupt: the CRC decides
			if t&recIgnorable != 0 {
				skipped = append(skipped, t)
			} else {
				unknown = append(unknown, t)
			}
			continue
		}
		if err != nil {
			return nil, 0, nil, err
		}
		if err := decodeBody(body.Bytes(), v); err != nil {
			return nil, 0, nil, corrupt("record %d (type %d): %v", records, t, err)
		}
	}
	if _, err := cr.r.ReadByte(); !errors.Is(err, io.EOF) {
		return nil, 0, nil, corrupt("data after the end record")
	}
	if len(unknown) > 0 {
		return nil, 0, nil, unsupported("records of unknown kinds %v", unknown)
	}
	if hdr == nil {
		return nil, 0, nil, corrupt("no header")
	}
	st, err := buildState(hdr, cfg, members, holdings, idbData, haveIDBFA)
	if err != nil {
		return nil, 0, nil, err
	}
	if format == snapshotFormatV1 {
		for i := range shards { // a field format 1 does not carry
			shards[i].Creator = ""
		}
	}
	if err := st.restoreShards(placement, shards); err != nil {
		return nil, 0, nil, err
	}
	return st, hdr.Index, skipped, nil
}

// once allocates *p for the body of a record that may appear only once;
// what names it in the error when *p was allocated already.
func once[T any](p **T, what string) (*T, error) {
	if *p != nil {
		return nil, corrupt("second %s", what)
	}
	*p = new(T)
	return *p, nil
}

// grow appends a zero T to *xs for the body of a record and returns it.
func grow[T any](xs *[]T) *T {
	*xs = append(*xs, *new(T))
	return &(*xs)[len(*xs)-1]
}

// buildState validates decoded snapshot records and assembles a state.
func buildState(hdr *snapHeader, cfg *Config, members []Member, holdings []snapHolding, idbData []byte, haveIDBFA bool) (*state, error) {
	st := newState()
	st.migrated = hdr.Migrated
	if hdr.Bootstrapped != (cfg != nil) || hdr.Bootstrapped != haveIDBFA {
		return nil, corrupt("bootstrapped=%v with config=%v idbfa=%v", hdr.Bootstrapped, cfg != nil, haveIDBFA)
	}
	if !hdr.Bootstrapped {
		if len(members) > 0 || len(holdings) > 0 {
			return nil, corrupt("members or origins before bootstrap")
		}
		return st, nil
	}
	if err := cfg.Validate(); err != nil {
		return nil, corrupt("config: %v", err)
	}
	st.bootstrapped, st.cfg = true, *cfg
	var active []string
	for i, m := range members {
		if err := m.validate(); err != nil || !m.Status.Valid() {
			return nil, corrupt("member %q: status %q: %v", m.ID, m.Status, err)
		}
		if i > 0 && m.ID <= members[i-1].ID {
			return nil, corrupt("member %q out of order", m.ID)
		}
		st.members[m.ID] = m
		if m.Status == StatusActive {
			active = append(active, m.ID)
		}
	}
	if len(members) > cfg.MaxGroupSize {
		return nil, corrupt("%d members, max %d", len(members), cfg.MaxGroupSize)
	}
	held := make(map[string][]string, len(active))
	var unassigned []string
	seen := make(map[string]bool)
	for i, h := range holdings {
		switch {
		case h.Member == "" && (len(active) > 0 || i != len(holdings)-1):
			return nil, corrupt("unassigned origins with active members")
		case h.Member != "" && (i >= len(active) || active[i] != h.Member):
			return nil, corrupt("holding of %q does not match active member", h.Member)
		}
		for j, o := range h.Origins {
			if err := validID("origin", o); err != nil || seen[o] || st.members[o].ID != "" {
				return nil, corrupt("origin %q: duplicate, member or invalid (%v)", o, err)
			}
			if j > 0 && o <= h.Origins[j-1] {
				return nil, corrupt("origin %q out of order", o)
			}
			seen[o] = true
		}
		if h.Member == "" {
			unassigned = h.Origins
		} else {
			held[h.Member] = h.Origins
		}
	}
	if len(holdings) < len(active) {
		return nil, corrupt("%d holdings for %d active members", len(holdings), len(active))
	}
	asg, err := rebuildAssignment(active, held, unassigned)
	if err != nil {
		return nil, err
	}
	st.asg = asg
	idb, err := routing.DecodeIDBFA(idbData)
	if err != nil {
		return nil, corrupt("idbfa: %v", err)
	}
	if idb.Geometry() != cfg.IDFilter || !slices.Equal(idb.Members(), active) {
		return nil, corrupt("idbfa (%v, members %v) does not match config and active members", idb.Geometry(), idb.Members())
	}
	st.idb = idb
	return st, nil
}

// rebuildAssignment reproduces an assignment from its held sets through the
// routing.Assignment API: members first, then origins one at a time, each
// to the member AddOrigin will pick (the least loaded, smallest id on
// ties), chosen among that member's targets. A target-q member that has
// all its origins while others still need one more gets a placeholder
// origin, removed at the end (without a rebalancing move, since the loads
// then differ by at most one). The result is checked against the targets;
// an unbalanced or otherwise unreproducible input is an error.
func rebuildAssignment(active []string, held map[string][]string, unassigned []string) (*routing.Assignment, error) {
	a := routing.NewAssignment()
	for _, m := range active {
		a.AddMember(m)
	}
	if len(active) == 0 {
		for _, o := range unassigned {
			a.AddOrigin(o)
		}
		return a, nil
	}
	next := make(map[string]int, len(active))
	left := 0
	for _, m := range active {
		left += len(held[m])
	}
	var placeholders []string
	for left > 0 {
		pick, load := "", -1
		for _, m := range active { // sorted: the first minimum is the smallest id
			if n := a.Load(m); load < 0 || n < load {
				pick, load = m, n
			}
		}
		o := ""
		if i := next[pick]; i < len(held[pick]) {
			o = held[pick][i]
			next[pick]++
			left--
		} else {
			if len(placeholders) >= len(active) {
				return nil, corrupt("assignment is not balanced")
			}
			o = "\x00placeholder" + strconv.Itoa(len(placeholders)) // NUL: never a valid id
			placeholders = append(placeholders, o)
		}
		if h := a.AddOrigin(o); h != pick {
			return nil, corrupt("rebuilding assignment: origin %q went to %q, not %q", o, h, pick)
		}
	}
	for _, o := range placeholders {
		if _, mv, _ := a.RemoveOriginMoves(o); len(mv) > 0 {
			return nil, corrupt("assignment is not balanced")
		}
	}
	for _, m := range active {
		if !slices.Equal(a.Held(m), held[m]) {
			return nil, corrupt("rebuilding assignment: member %q differs", m)
		}
	}
	return a, nil
}

// restoreShards validates the decoded placement and shard records and sets
// them in st (built from the other records). Without a placement record, a
// bootstrapped st gets legacyShards.
func (st *state) restoreShards(placement *snapPlacement, shards []Shard) error {
	if placement == nil {
		if len(shards) > 0 {
			return corrupt("shard records without a placement record")
		}
		if st.bootstrapped {
			st.legacyShards()
		}
		return nil
	}
	if !st.bootstrapped {
		return corrupt("shards before bootstrap")
	}
	st.shardMoves = placement.Moved
	p := st.placer()
	for i, sh := range shards {
		if err := validID("shard id", sh.ID); err != nil {
			return corrupt("shard: %v", err)
		}
		if sh.Creator != "" {
			if err := validID("shard creator", sh.Creator); err != nil {
				return corrupt("shard %q: %v", sh.ID, err)
			}
		}
		if i > 0 && sh.ID <= shards[i-1].ID {
			return corrupt("shard %q out of order", sh.ID)
		}
		for j, m := range sh.Replicas {
			if !p.canHost(m) || j > 0 && m <= sh.Replicas[j-1] {
				return corrupt("shard %q: replica %q out of order, duplicate, or not a member that may host", sh.ID, m)
			}
		}
		if (sh.Owner == "") != (len(sh.Replicas) == 0) || sh.Owner != "" && !sh.hosts(sh.Owner) {
			return corrupt("shard %q: owner %q not one of its replicas %v", sh.ID, sh.Owner, sh.Replicas)
		}
		if n := p.target(sh); len(sh.Replicas) != n {
			return corrupt("shard %q: %d replicas, want %d", sh.ID, len(sh.Replicas), n)
		}
		p.set(sh)
	}
	return nil
}

// legacyShards derives the shards of a state restored from a snapshot a
// build from before shards wrote: every member active or failed owns and
// hosts the shard named after it, every leaving member's shard is given
// away, then the group is balanced — the placement replaying that group's
// joins (in id order) and leaves would have made. The shards of members
// that had left the group before the snapshot are not known.
func (st *state) legacyShards() {
	p := st.placer()
	for _, id := range slices.Sorted(maps.Keys(st.members)) {
		if p.canHost(id) {
			p.set(Shard{ID: id, Owner: id, Replicas: []string{id}})
		} else {
			p.set(Shard{ID: id})
		}
	}
	p.balance()
}
