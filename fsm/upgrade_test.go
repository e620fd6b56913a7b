package fsm

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"io"
	"slices"
	"testing"

	"github.com/hashicorp/raft"
)

// watched is an applier whose FSM records its OnFatal, OnSkip and OnChange
// calls.
type watched struct {
	*applier
	fatal   []error
	skips   []SkippedEntry
	changes int
}

func newWatched(t testing.TB) *watched {
	w := &watched{}
	w.applier = newApplier(t, Options{
		OnFatal:  func(err error) { w.fatal = append(w.fatal, err) },
		OnSkip:   func(s SkippedEntry) { w.skips = append(w.skips, s) },
		OnChange: func(Event) { w.changes++ },
	})
	return w
}

// watchedGroup3 is group3 with callbacks recorded from the start.
func watchedGroup3(t testing.TB) *watched {
	w := newWatched(t)
	w.must(EncodeBootstrap(testConfig("g1", 4)))
	for _, id := range []string{"a", "b", "c"} {
		w.must(EncodeAddMember(mem(id)))
	}
	w.must(EncodeAddOrigins(ids("o", 10)...))
	w.changes = 0
	return w
}

// TestUnknownEntries checks the upgrade policy for log entries: apply what
// is known, refuse a garbage body of a known type, skip an unknown entry
// marked ignorable, halt on any other unknown entry.
func TestUnknownEntries(t *testing.T) {
	good := EncodeAddOrigins("x")
	ignorable := MsgType(IgnorableFlag | 3)
	tests := []struct {
		name    string
		entry   []byte
		wantErr []error // nil: Err must be nil
		skipped bool    // skipped as ignorable
		halts   bool
		changes bool // the state changes
	}{
		{name: "known", entry: good, changes: true},
		{name: "unknown type", entry: []byte{100, FormatV1, 0x80}, wantErr: []error{ErrHalted, ErrUnknownCommand}, halts: true},
		{name: "zero type", entry: []byte{0, FormatV1, 0x80}, wantErr: []error{ErrHalted, ErrUnknownCommand}, halts: true},
		{name: "unknown type with the ignorable flag", entry: []byte{byte(ignorable), FormatV1, 0x80}, skipped: true},
		{name: "unknown ignorable type, unknown version", entry: []byte{0xff, 7, 0xc1}, skipped: true},
		{name: "unknown version", entry: append([]byte{byte(MsgAddOrigins), 2}, good[2:]...), wantErr: []error{ErrHalted, ErrUnsupportedVersion}, halts: true},
		{name: "version zero", entry: append([]byte{byte(MsgAddOrigins), 0}, good[2:]...), wantErr: []error{ErrHalted, ErrUnsupportedVersion}, halts: true},
		{name: "garbage body", entry: []byte{byte(MsgAddOrigins), FormatV1, 0xc1, 0xff, 0x00}, wantErr: []error{ErrMalformedCommand}},
		{name: "truncated entry", entry: []byte{100}, wantErr: []error{ErrMalformedCommand}},
		{name: "refused command", entry: EncodeRemoveMember("nobody"), wantErr: []error{ErrUnknownMember}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := watchedGroup3(t)
			before, beforeIndex := stateBytes(t, w.f), w.f.AppliedIndex()
			r := w.apply(tc.entry)
			for _, want := range tc.wantErr {
				if !errors.Is(r.Err, want) {
					t.Errorf("err %v, want it to match %v", r.Err, want)
				}
			}
			if tc.wantErr == nil && r.Err != nil {
				t.Errorf("err %v", r.Err)
			}
			if r.Skipped != tc.skipped || r.Type != MsgType(tc.entry[0]) {
				t.Errorf("skipped %v type %v", r.Skipped, r.Type)
			}
			if changed := !bytes.Equal(before, stateBytes(t, w.f)); changed != tc.changes || (w.changes > 0) != tc.changes {
				t.Errorf("state changed %v, %d OnChange calls, want %v", changed, w.changes, tc.changes)
			}
			checkInvariants(t, w.f)

			// OnSkip and Skipped report a skipped entry with its index.
			n, last := w.f.Skipped()
			if tc.skipped {
				want := SkippedEntry{Index: r.Index, Type: MsgType(tc.entry[0]), Version: tc.entry[1]}
				if n != 1 || last != want || !slices.Equal(w.skips, []SkippedEntry{want}) {
					t.Errorf("Skipped() = %d, %+v; OnSkip got %+v; want %+v", n, last, w.skips, want)
				}
			} else if n != 0 || len(w.skips) != 0 {
				t.Errorf("Skipped() = %d, OnSkip got %+v", n, w.skips)
			}

			// OnFatal is called once, with the error of the halting entry.
			halted := w.f.Halted()
			wantFatal := 0
			if tc.halts {
				wantFatal = 1
			}
			if (halted != nil) != tc.halts || len(w.fatal) != wantFatal {
				t.Fatalf("Halted() = %v, OnFatal calls %v, want halted %v", halted, w.fatal, tc.halts)
			}
			if !tc.halts {
				if w.f.AppliedIndex() != r.Index {
					t.Errorf("applied index %d, want %d", w.f.AppliedIndex(), r.Index)
				}
				return
			}
			if w.fatal[0] != r.Err || halted != r.Err || !errors.Is(halted, ErrHalted) {
				t.Errorf("OnFatal(%v), Halted() = %v, result %v", w.fatal[0], halted, r.Err)
			}
			// A halted FSM refuses everything after: entries (known ones
			// too), snapshots and restores; its state stays frozen at the
			// entry before the one that halted it.
			snap, err := New(Options{}).Snapshot()
			if err != nil {
				t.Fatal(err)
			}
			goodSnap := persist(t, snap)
			for _, e := range [][]byte{good, EncodeAddMember(mem("d")), tc.entry, {byte(ignorable), FormatV1, 0x80}} {
				r2 := w.apply(e)
				if !errors.Is(r2.Err, ErrHalted) || r2.Moves != nil || r2.Skipped || r2.Type != MsgType(e[0]) {
					t.Errorf("after halting: %+v", r2)
				}
				if errors.Is(r2.Err, ErrUnknownCommand) || errors.Is(r2.Err, ErrUnsupportedVersion) {
					t.Errorf("a later entry's error matches the cause: %v", r2.Err)
				}
			}
			if r2 := w.f.Apply(&raft.Log{Index: w.index + 1, Type: raft.LogNoop}); !errors.Is(r2.(*ApplyResult).Err, ErrHalted) {
				t.Errorf("noop after halting: %+v", r2)
			}
			if _, err := w.f.Snapshot(); !errors.Is(err, ErrHalted) {
				t.Errorf("Snapshot after halting: %v", err)
			}
			if err := w.f.Restore(io.NopCloser(bytes.NewReader(goodSnap))); !errors.Is(err, ErrHalted) {
				t.Errorf("Restore after halting: %v", err)
			}
			if !bytes.Equal(before, stateBytes(t, w.f)) || w.f.AppliedIndex() != beforeIndex || w.changes != 0 {
				t.Errorf("halted FSM changed: applied %d (want %d), %d OnChange calls", w.f.AppliedIndex(), beforeIndex, w.changes)
			}
			if len(w.fatal) != 1 {
				t.Errorf("OnFatal called %d times", len(w.fatal))
			}
		})
	}
}

// TestHaltWithoutCallbacks: the policy holds without OnFatal and OnSkip.
func TestHaltWithoutCallbacks(t *testing.T) {
	a := group3(t)
	if r := a.apply([]byte{0xc0, FormatV1}); r.Err != nil || !r.Skipped {
		t.Fatalf("ignorable: %+v", r)
	}
	if n, last := a.f.Skipped(); n != 1 || last.Index != a.index {
		t.Fatalf("Skipped() = %d, %+v", n, last)
	}
	if r := a.apply([]byte{0x40, FormatV1}); !errors.Is(r.Err, ErrHalted) {
		t.Fatalf("unknown: %+v", r)
	}
	if r := a.apply(EncodeAddOrigins("x")); !errors.Is(r.Err, ErrHalted) {
		t.Fatalf("after halting: %+v", r)
	}
}

// TestConcurrentHalt: however many goroutines meet unknown entries at once,
// OnFatal is called exactly once.
func TestConcurrentHalt(t *testing.T) {
	calls := make(chan error, 100)
	f := New(Options{OnFatal: func(err error) { calls <- err }})
	done := make(chan struct{})
	for i := range 20 {
		go func() {
			defer func() { done <- struct{}{} }()
			f.Apply(&raft.Log{Index: uint64(i + 1), Type: raft.LogCommand, Data: []byte{100, FormatV1}})
		}()
	}
	for range 20 {
		<-done
	}
	close(calls)
	n := 0
	for err := range calls {
		n++
		if !errors.Is(err, ErrHalted) || !errors.Is(err, ErrUnknownCommand) {
			t.Errorf("OnFatal(%v)", err)
		}
	}
	if n != 1 {
		t.Fatalf("OnFatal called %d times", n)
	}
}

// withRecord returns snapshot b with a record of kind t and body (a msgpack
// value) inserted before the end record, with the end record recomputed.
func withRecord(t testing.TB, b []byte, kind uint8, body []byte) []byte {
	t.Helper()
	off, records := 5, uint64(0)
	for b[off] != recEnd {
		l, n := binary.Uvarint(b[off+1:])
		if n <= 0 {
			t.Fatal("bad snapshot")
		}
		off += 1 + n + int(l)
		records++
	}
	out := append(slices.Clone(b[:off]), kind)
	out = binary.AppendUvarint(out, uint64(len(body)))
	out = append(out, body...)
	var end bytes.Buffer
	crc := crc32.Checksum(out, crc32.MakeTable(crc32.Castagnoli))
	if err := writeRecord(&end, recEnd, snapEnd{Records: records + 1, CRC: crc}); err != nil {
		t.Fatal(err)
	}
	return append(out, end.Bytes()...)
}

// TestUnknownSnapshotRecords checks the same policy for snapshots: an
// unknown record kind marked ignorable is skipped, any other unknown kind
// or format halts the FSM, and a damaged snapshot is only corrupt.
func TestUnknownSnapshotRecords(t *testing.T) {
	src := group3(t)
	snap, _ := src.f.Snapshot()
	good := persist(t, snap)
	body := []byte{0x81, 0xa1, 'X', 0x01} // {"X": 1}
	const kind = 100                      // a kind no build knows yet
	unknown := withRecord(t, good, kind, body)
	damaged := slices.Clone(unknown)
	rec := bytes.Index(damaged, append([]byte{kind, byte(len(body))}, body...))
	damaged[rec+2+len(body)-1] ^= 0x01 // the unknown record's body: only the CRC sees it
	tests := []struct {
		name    string
		snap    []byte
		wantErr []error
		halts   bool
		skipped []uint8
	}{
		{name: "known", snap: good},
		{name: "ignorable unknown record", snap: withRecord(t, good, recIgnorable|7, body), skipped: []uint8{recIgnorable | 7}},
		{name: "ignorable record kind 254", snap: withRecord(t, good, 254, body), skipped: []uint8{254}},
		{name: "unknown record", snap: unknown, wantErr: []error{ErrHalted, ErrUnsupportedSnapshot, ErrCorruptSnapshot}, halts: true},
		{name: "unknown format", snap: append(append([]byte("GHBS"), 3), good[5:]...), wantErr: []error{ErrHalted, ErrUnsupportedSnapshot, ErrCorruptSnapshot}, halts: true},
		{name: "unknown record, damaged", snap: damaged, wantErr: []error{ErrCorruptSnapshot}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := newWatched(t)
			w.must(EncodeBootstrap(testConfig("other", 9)))
			before := stateBytes(t, w.f)
			err := w.f.Restore(io.NopCloser(bytes.NewReader(tc.snap)))
			for _, want := range tc.wantErr {
				if !errors.Is(err, want) {
					t.Errorf("err %v, want it to match %v", err, want)
				}
			}
			if tc.wantErr == nil {
				if err != nil {
					t.Fatalf("restore: %v", err)
				}
				sameState(t, src.f, w.f, "restored")
			} else if !bytes.Equal(before, stateBytes(t, w.f)) {
				t.Error("failed restore changed the state")
			}
			if tc.halts && (w.f.Halted() != err || len(w.fatal) != 1 || w.fatal[0] != err) {
				t.Errorf("Halted() = %v, OnFatal calls %v, restore error %v", w.f.Halted(), w.fatal, err)
			}
			if !tc.halts && (w.f.Halted() != nil || len(w.fatal) != 0) {
				t.Errorf("halted: %v", w.f.Halted())
			}
			var wantSkips []SkippedEntry
			for _, k := range tc.skipped {
				wantSkips = append(wantSkips, SkippedEntry{Index: src.index, Record: k})
			}
			if !slices.Equal(w.skips, wantSkips) {
				t.Errorf("OnSkip got %+v, want %+v", w.skips, wantSkips)
			}
			if n, _ := w.f.Skipped(); n != uint64(len(wantSkips)) {
				t.Errorf("Skipped() = %d", n)
			}
		})
	}
}

func TestSkippedEntryString(t *testing.T) {
	for _, tc := range []struct {
		s    SkippedEntry
		want string
	}{
		{SkippedEntry{Index: 9, Type: 0x83, Version: 1}, "entry 9 of unknown type msg(131) version 1"},
		{SkippedEntry{Index: 9, Record: 0x87}, "snapshot record of unknown kind 135 (snapshot at index 9)"},
	} {
		if got := tc.s.String(); got != tc.want {
			t.Errorf("%+v: %q, want %q", tc.s, got, tc.want)
		}
	}
	if MsgAddOrigins.Ignorable() || !(IgnorableFlag | MsgAddOrigins).Ignorable() {
		t.Error("Ignorable")
	}
}
