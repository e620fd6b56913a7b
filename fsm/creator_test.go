package fsm

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"io"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// TestAddMemberFormat3 checks the log format of AddMemberCommand.Incarnation:
// format 3 only when it is set, round trips, entries of the older formats
// (and their bytes) unchanged, and older builds halting on format 3.
func TestAddMemberFormat3(t *testing.T) {
	// v2Body is AddMemberCommand as format 2 had it.
	type v2Body struct {
		Member Member
		Shards []string
	}
	for _, tc := range []struct {
		name    string
		entry   []byte
		version uint8
		want    *AddMemberCommand
	}{
		{"incarnation and shards", EncodeAddMemberIncarnation(mem("a"), []string{"a", "s"}, "inc1"), FormatV3,
			&AddMemberCommand{Member: mem("a"), Shards: []string{"a", "s"}, Incarnation: "inc1"}},
		{"incarnation, no shards", EncodeAddMemberIncarnation(mem("a"), nil, "inc1"), FormatV3,
			&AddMemberCommand{Member: mem("a"), Shards: []string{}, Incarnation: "inc1"}},
		{"incarnation, default shards", Encode(&AddMemberCommand{Member: mem("a"), Incarnation: "inc1"}), FormatV3,
			&AddMemberCommand{Member: mem("a"), Incarnation: "inc1"}},
		{"no incarnation is format 2", EncodeAddMemberIncarnation(mem("a"), []string{"a"}, ""), FormatV2,
			&AddMemberCommand{Member: mem("a"), Shards: []string{"a"}}},
		{"no incarnation, default shards is format 1", EncodeAddMember(mem("a")), FormatV1,
			&AddMemberCommand{Member: mem("a")}},
		// Bodies that no build writes: the fields newer than the entry's
		// format are dropped, as the builds of that format drop them.
		{"format-2 body with an incarnation", oldEntryV(t, MsgAddMember, FormatV2, &AddMemberCommand{Member: mem("a"), Shards: []string{"a"}, Incarnation: "inc1"}), FormatV2,
			&AddMemberCommand{Member: mem("a"), Shards: []string{"a"}}},
		{"format-1 body with both", oldEntryV(t, MsgAddMember, FormatV1, &AddMemberCommand{Member: mem("a"), Shards: []string{"a"}, Incarnation: "inc1"}), FormatV1,
			&AddMemberCommand{Member: mem("a")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.entry[0] != byte(MsgAddMember) || tc.entry[1] != tc.version {
				t.Fatalf("header % x, want format %d", tc.entry[:2], tc.version)
			}
			got, err := DecodeCommand(tc.entry)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("decoded %+v, want %+v", got, tc.want)
			}
			if !bytes.Equal(Encode(got), Encode(tc.want)) {
				t.Fatal("re-encoding differs")
			}
			// A build that knows formats 1 and 2 only reads the older
			// formats and halts on format 3.
			_, err = v2[AddMemberCommand](tc.entry[1], tc.entry[2:])
			if tc.version == FormatV3 && !errors.Is(err, ErrUnsupportedVersion) {
				t.Fatalf("a format-2 build reads format 3: %v", err)
			}
			if tc.version < FormatV3 && err != nil {
				t.Fatalf("a format-2 build refuses format %d: %v", tc.version, err)
			}
		})
	}
	// Without an incarnation the bytes are those older builds wrote: the
	// empty field is left out of the body.
	for _, shards := range [][]string{{"a"}, {}} {
		old := oldEntryV(t, MsgAddMember, FormatV2, v2Body{Member: mem("a"), Shards: shards})
		if e := EncodeAddMemberIncarnation(mem("a"), shards, ""); !bytes.Equal(e, old) || !bytes.Equal(e, EncodeAddMemberShards(mem("a"), shards)) {
			t.Fatalf("shards %v: entry % x, format 2 wrote % x", shards, e, old)
		}
	}
	if e := EncodeAddMember(mem("a")); !bytes.Equal(e, oldEntry(t, MsgAddMember, struct{ Member Member }{mem("a")})) &&
		!bytes.Equal(e, oldEntryV(t, MsgAddMember, FormatV1, v2Body{Member: mem("a")})) {
		t.Fatalf("format-1 entry changed: % x", e)
	}
}

// oldEntryV encodes an entry of type mt and format version with body v.
func oldEntryV(t testing.TB, mt MsgType, version uint8, v any) []byte {
	t.Helper()
	b, err := encodeBody([]byte{byte(mt), version}, v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestShardCreator checks Shard.Creator: set from the AddMember that brings
// a shard new to the group, kept by retries (whatever incarnation they
// carry), adoptions and placement changes, never set by other commands.
func TestShardCreator(t *testing.T) {
	creators := func(f *FSM) map[string]string {
		out := map[string]string{}
		for _, sh := range f.Shards() {
			out[sh.ID] = sh.Creator
		}
		return out
	}
	tests := []struct {
		name    string
		setup   [][]byte // applied to shardGroup(t, 2) (a, b, c, no creators), each must succeed
		cmd     []byte
		wantErr error
		want    map[string]string // every shard's Creator after cmd
	}{
		{name: "a new shard records the incarnation", cmd: EncodeAddMemberIncarnation(mem("d"), []string{"d"}, "i1"),
			want: map[string]string{"a": "", "b": "", "c": "", "d": "i1"}},
		{name: "every new shard of the command", cmd: EncodeAddMemberIncarnation(mem("d"), []string{"s2", "s1"}, "i1"),
			want: map[string]string{"a": "", "b": "", "c": "", "s1": "i1", "s2": "i1"}},
		{name: "default shard", cmd: Encode(&AddMemberCommand{Member: mem("d"), Incarnation: "i1"}),
			want: map[string]string{"a": "", "b": "", "c": "", "d": "i1"}},
		{name: "retry with the same incarnation",
			setup: [][]byte{EncodeAddMemberIncarnation(mem("d"), []string{"d"}, "i1")},
			cmd:   EncodeAddMemberIncarnation(mem("d"), []string{"d"}, "i1"),
			want:  map[string]string{"a": "", "b": "", "c": "", "d": "i1"}},
		{name: "a wiped data directory does not become the creator",
			setup: [][]byte{EncodeAddMemberIncarnation(mem("d"), []string{"d"}, "i1")},
			cmd:   EncodeAddMemberIncarnation(mem("d"), []string{"d"}, "i2"),
			want:  map[string]string{"a": "", "b": "", "c": "", "d": "i1"}},
		{name: "an existing shard without creator gets none",
			cmd:  EncodeAddMemberIncarnation(mem("a"), []string{"a"}, "i9"),
			want: map[string]string{"a": "", "b": "", "c": ""}},
		{name: "placement changes keep the creator",
			setup: [][]byte{EncodeAddMemberIncarnation(mem("d"), []string{"d"}, "i1"), EncodeSetStatus("d", StatusLeaving)},
			cmd:   EncodeRemoveMember("d"),
			want:  map[string]string{"a": "", "b": "", "c": "", "d": "i1"}},
		{name: "an adopted orphan keeps its creator",
			setup: [][]byte{EncodeAddMemberIncarnation(mem("d"), []string{"d"}, "i1"), EncodeRemoveMember("a"), EncodeRemoveMember("b"),
				EncodeRemoveMember("c"), EncodeSetStatus("d", StatusFailed), EncodeRepairMember("d")},
			cmd:  EncodeAddMemberIncarnation(mem("e"), []string{"d"}, "i2"),
			want: map[string]string{"a": "", "b": "", "c": "", "d": "i1"}},
		{name: "a shard back after a split is new again",
			setup: [][]byte{EncodeAddMemberIncarnation(mem("d"), []string{"d"}, "i1"), EncodeSplit([]string{"d"}, "g2")},
			cmd:   EncodeAddMemberIncarnation(mem("d"), []string{"d"}, "i2"),
			want:  map[string]string{"a": "", "b": "", "c": "", "d": "i2"}},
		{name: "absorb records none", cmd: EncodeAbsorbShards([]Member{mem("d")}, "g2", []OwnedShards{{Member: "d", Shards: []string{"d"}}}),
			want: map[string]string{"a": "", "b": "", "c": "", "d": ""}},
		{name: "no incarnation records none", cmd: EncodeAddMemberShards(mem("d"), []string{"d"}),
			want: map[string]string{"a": "", "b": "", "c": "", "d": ""}},
		{name: "incarnation with NUL", cmd: EncodeAddMemberIncarnation(mem("d"), []string{"d"}, "i\x00"), wantErr: ErrInvalidCommand},
		{name: "incarnation too long", cmd: EncodeAddMemberIncarnation(mem("d"), []string{"d"}, strings.Repeat("i", MaxIDLen+1)), wantErr: ErrInvalidCommand},
		{name: "incarnation not UTF-8", cmd: EncodeAddMemberIncarnation(mem("d"), []string{"d"}, "\xff"), wantErr: ErrInvalidCommand},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a := shardGroup(t, 2)
			for _, e := range tc.setup {
				a.must(e)
			}
			r := applyCase(t, a, tc.cmd, tc.wantErr)
			if tc.wantErr != nil {
				if _, ok := a.f.Shard("d"); ok {
					t.Fatal("refused command added a shard")
				}
				return
			}
			if got := creators(a.f); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("creators %v, want %v\n%s", got, tc.want, textDump(a.f))
			}
			for _, c := range r.Shards { // the changes show the shards as they are
				if c.After.ID != "" && c.After.Creator != tc.want[c.ID] {
					t.Fatalf("change %+v", c)
				}
			}
			checkInvariants(t, a.f)
			// Replaying the same entries gives the same state, and so does
			// restoring its snapshot.
			b := shardGroup(t, 2)
			for _, e := range append(slices.Clone(tc.setup), tc.cmd) {
				b.apply(e)
			}
			sameState(t, a.f, b.f, "replay")
			snap, err := a.f.Snapshot()
			if err != nil {
				t.Fatal(err)
			}
			restored := restore(t, persist(t, snap))
			sameState(t, a.f, restored, "restored")
			if got := creators(restored); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("restored creators %v, want %v", got, tc.want)
			}
		})
	}
}

// TestCreatorSnapshots checks the snapshot format of Shard.Creator: format
// 1 while no shard has one (what older builds write and read), format 2
// otherwise, round trips keeping it, a format-1 snapshot restoring without
// it, and a bad one refused as corrupt.
func TestCreatorSnapshots(t *testing.T) {
	plain := shardGroup(t, 2)
	withCreator := shardGroup(t, 2)
	withCreator.must(EncodeAddMemberIncarnation(mem("d"), []string{"d"}, "i1"))
	withoutCreator := shardGroup(t, 2)
	withoutCreator.must(EncodeAddMemberShards(mem("d"), []string{"d"}))

	snapOf := func(a *applier) []byte {
		snap, err := a.f.Snapshot()
		if err != nil {
			t.Fatal(err)
		}
		return persist(t, snap)
	}
	tests := []struct {
		name        string
		snap        []byte
		wantFormat  uint8
		wantErr     error
		wantCreator string   // of shard d
		same        *applier // the state the snapshot must restore to
	}{
		{name: "no creator: format 1", snap: snapOf(plain), wantFormat: snapshotFormatV1, same: plain},
		{name: "creator: format 2", snap: snapOf(withCreator), wantFormat: snapshotFormatV2, wantCreator: "i1", same: withCreator},
		{name: "format 1 carries no creator", snap: reformat(t, snapOf(withCreator), snapshotFormatV1), wantFormat: snapshotFormatV1, same: withoutCreator},
		{name: "format 2 without creators", snap: reformat(t, snapOf(plain), snapshotFormatV2), wantFormat: snapshotFormatV2, same: plain},
		{name: "bad creator", snap: func() []byte {
			st, err := withCreator.f.current().clone()
			if err != nil {
				t.Fatal(err)
			}
			sh := st.shards["d"]
			sh.Creator = "bad\x00"
			st.shards["d"] = sh
			var b bytes.Buffer
			if err := writeSnapshot(&b, st, 9); err != nil {
				t.Fatal(err)
			}
			return b.Bytes()
		}(), wantFormat: snapshotFormatV2, wantErr: ErrCorruptSnapshot},
		{name: "format 3", snap: reformat(t, snapOf(withCreator), 3), wantFormat: 3, wantErr: ErrUnsupportedSnapshot},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.snap[4] != tc.wantFormat {
				t.Fatalf("format %d, want %d", tc.snap[4], tc.wantFormat)
			}
			f := New(Options{})
			err := f.Restore(io.NopCloser(bytes.NewReader(tc.snap)))
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("restore: %v, want %v", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("restore: %v", err)
			}
			sameState(t, tc.same.f, f, "restored")
			if sh, ok := f.Shard("d"); ok && sh.Creator != tc.wantCreator {
				t.Fatalf("shard d %+v", sh)
			}
		})
	}
	// The bytes of a snapshot without creators are those of format 1: the
	// empty field is left out of the shard records.
	if b := snapOf(withoutCreator); bytes.Contains(b, []byte("creator")) {
		t.Fatal("a shard record without creator names the field")
	}
}

// reformat returns snapshot b with its format byte set to format and its
// end record recomputed.
func reformat(t testing.TB, b []byte, format uint8) []byte {
	t.Helper()
	out := slices.Clone(b)
	out[4] = format
	off, records := 5, uint64(0)
	for out[off] != recEnd {
		l, n := binary.Uvarint(out[off+1:])
		if n <= 0 {
			t.Fatal("bad snapshot")
		}
		off += 1 + n + int(l)
		records++
	}
	out = out[:off]
	var end bytes.Buffer
	if err := writeRecord(&end, recEnd, snapEnd{Records: records, CRC: crc32.Checksum(out, crc32.MakeTable(crc32.Castagnoli))}); err != nil {
		t.Fatal(err)
	}
	return append(out, end.Bytes()...)
}

// TestSnapshotEmptyHolding: a member whose last origin left encodes like
// one that never held any (snapshots are canonical), so a state restored
// from its snapshot encodes alike.
func TestSnapshotEmptyHolding(t *testing.T) {
	a := shardGroup(t, 2)
	a.must(EncodeAddMemberShards(mem("d"), []string{"d"}))
	a.must(EncodeSplit([]string{"d"}, "g2")) // d becomes an origin, held by a member …
	a.must(EncodeAddMemberShards(mem("d"), []string{"d"}))
	snap, err := a.f.Snapshot() // … until it is a member again
	if err != nil {
		t.Fatal(err)
	}
	sameState(t, a.f, restore(t, persist(t, snap)), "restored")
}
