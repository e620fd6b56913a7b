package fsm

import (
	"bytes"
	"testing"
)

func FuzzDecodeCommand(f *testing.F) {
	for _, e := range [][]byte{
		EncodeBootstrap(testConfig("g", 3)),
		EncodeAddMember(mem("d")),
		EncodeRemoveMember("a"),
		EncodeSetStatus("b", StatusFailed),
		EncodeSetOrigins([]string{"o001", "y"}),
		EncodeAddOrigins("y", "z"),
		EncodeRemoveOrigins("o002"),
		EncodeSplit([]string{"c"}, "g2"),
		EncodeAbsorb([]Member{mem("o004")}, "g2"),
		EncodeAddMemberShards(mem("d"), []string{"d", "a"}),
		EncodeAddMemberShards(mem("d"), nil),
		EncodeAbsorbShards([]Member{mem("x"), mem("y")}, "g2", []OwnedShards{{Member: "x", Shards: []string{"x"}}}),
		EncodeRepairMember("b"),
		EncodeBootstrap(func() Config { c := testConfig("g1", 4); c.Replication = 2; return c }()),
		{}, {1}, {2, 1, 0xc0}, {200, 1, 0x80},
	} {
		f.Add(e)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		cmd, err := DecodeCommand(data)
		if err == nil {
			again, err := DecodeCommand(Encode(cmd))
			if err != nil || !bytes.Equal(Encode(again), Encode(cmd)) {
				t.Fatalf("re-encoding %+v: %v", cmd, err)
			}
		}
		a := group3(t)
		before := stateBytes(t, a.f)
		r := a.apply(data)
		if (r.Err != nil || r.Skipped) && !bytes.Equal(before, stateBytes(t, a.f)) {
			t.Fatalf("refused or skipped entry changed the state: %v", r.Err)
		}
		if err != nil && r.Err == nil && !r.Skipped {
			t.Fatalf("undecodable entry applied")
		}
		if r.Skipped && (err == nil || !MsgType(data[0]).Ignorable()) {
			t.Fatalf("entry skipped: decode error %v, type %d", err, data[0])
		}
		if halted := a.f.Halted(); (halted != nil) != (fromNewerBuild(err) && !MsgType(data[0]).Ignorable()) {
			t.Fatalf("halted = %v for decode error %v", halted, err)
		}
		checkInvariants(t, a.f)
	})
}

func FuzzRestore(f *testing.F) {
	for _, seed := range []uint64{1, 2} {
		a := newApplier(f, Options{})
		for _, e := range genLog(f, seed, 40, 4) {
			a.apply(e)
		}
		snap, _ := a.f.Snapshot()
		f.Add(persist(f, snap))
	}
	f.Add([]byte("GHBS\x01"))
	f.Fuzz(func(t *testing.T, data []byte) {
		st, idx, _, err := readSnapshot(bytes.NewReader(data))
		if err != nil {
			return
		}
		var b bytes.Buffer
		if err := writeSnapshot(&b, st, idx); err != nil {
			t.Fatal(err)
		}
		st2, idx2, _, err := readSnapshot(bytes.NewReader(b.Bytes()))
		if err != nil || idx2 != idx {
			t.Fatalf("re-reading a restored snapshot: %v", err)
		}
		var b2 bytes.Buffer
		if err := writeSnapshot(&b2, st2, idx2); err != nil || !bytes.Equal(b.Bytes(), b2.Bytes()) {
			t.Fatalf("snapshot encoding not stable: %v", err)
		}
	})
}
