package fsm

import (
	"bytes"
	"errors"
	"reflect"
	"slices"
	"testing"

	"github.com/ghba/ghba/routing"
	"github.com/hashicorp/raft"
)

// group3 bootstraps a group (max 4) with members a, b, c and origins o000..o009.
func group3(t testing.TB) *applier {
	a := newApplier(t, Options{})
	a.must(EncodeBootstrap(testConfig("g1", 4)))
	for _, id := range []string{"a", "b", "c"} {
		a.must(EncodeAddMember(mem(id)))
	}
	a.must(EncodeAddOrigins(ids("o", 10)...))
	return a
}

func TestCommands(t *testing.T) {
	bigGeo := testConfig("g1", 4)
	bigGeo.Filter.M *= 2
	otherGroup := testConfig("g2", 4)
	badGeo := testConfig("g1", 4)
	badGeo.IDFilter.K = 0
	hugeID := testConfig("g1", 4)
	hugeID.IDFilter.M = MaxIDFilterBits * 2
	readdr := mem("a")
	readdr.RPCAddr = "elsewhere:1"

	tests := []struct {
		name    string
		fresh   bool   // start from an empty FSM instead of group3
		cmd     []byte // the command under test
		wantErr error  // nil: success
		check   func(t *testing.T, f *FSM, r *ApplyResult)
	}{
		{name: "add before bootstrap", fresh: true, cmd: EncodeAddMember(mem("a")), wantErr: ErrNotBootstrapped},
		{name: "origins before bootstrap", fresh: true, cmd: EncodeAddOrigins("x"), wantErr: ErrNotBootstrapped},
		{name: "bootstrap", fresh: true, cmd: EncodeBootstrap(testConfig("g1", 4)), check: func(t *testing.T, f *FSM, r *ApplyResult) {
			if c, ok := f.Config(); !ok || c != testConfig("g1", 4) {
				t.Fatalf("config %+v %v", c, ok)
			}
			if b, v := f.IDBFA(); b == nil || v != 0 {
				t.Fatalf("idbfa %d bytes v%d", len(b), v)
			}
		}},
		{name: "bootstrap default id filter", fresh: true, cmd: EncodeBootstrap(Config{Group: "g", MaxGroupSize: 3, Filter: testConfig("", 0).Filter, LRU: testConfig("", 0).LRU}),
			check: func(t *testing.T, f *FSM, r *ApplyResult) {
				if c, _ := f.Config(); c.IDFilter != DefaultIDFilter() {
					t.Fatalf("id filter %v", c.IDFilter)
				}
			}},
		{name: "bootstrap invalid geometry", fresh: true, cmd: EncodeBootstrap(badGeo), wantErr: ErrInvalidCommand},
		{name: "bootstrap huge id filter", fresh: true, cmd: EncodeBootstrap(hugeID), wantErr: ErrInvalidCommand},
		{name: "bootstrap zero size", fresh: true, cmd: EncodeBootstrap(testConfig("g1", 0)), wantErr: ErrInvalidCommand},
		{name: "bootstrap no name", fresh: true, cmd: EncodeBootstrap(testConfig("", 3)), wantErr: ErrInvalidCommand},
		{name: "bootstrap again same", cmd: EncodeBootstrap(testConfig("g1", 4)), check: noMoves},
		{name: "bootstrap again geometry", cmd: EncodeBootstrap(bigGeo), wantErr: ErrGeometryChanged},
		{name: "bootstrap again group", cmd: EncodeBootstrap(otherGroup), wantErr: ErrConfigConflict},
		{name: "add member migrates", cmd: EncodeAddMember(mem("d")), check: func(t *testing.T, f *FSM, r *ApplyResult) {
			// 10 origins over 3 members (4,3,3) → 4 members: d gets ⌊10/4⌋ = 2.
			if len(r.Moves) != 2 || f.Load("d") != 2 {
				t.Fatalf("moves %v load %d", r.Moves, f.Load("d"))
			}
			for _, mv := range r.Moves {
				if mv.To != "d" || mv.From == "" {
					t.Fatalf("move %+v", mv)
				}
			}
			m, _ := f.Member("d")
			if m.Status != StatusActive || m.JoinIndex != r.Index || m.RPCAddr != "d:1" {
				t.Fatalf("member %+v", m)
			}
			if f.ReplicasMigrated() != 2 {
				t.Fatalf("migrated %d", f.ReplicasMigrated())
			}
		}},
		{name: "add member again", cmd: EncodeAddMember(mem("a")), check: noMoves},
		{name: "add member new address", cmd: EncodeAddMember(readdr), check: func(t *testing.T, f *FSM, r *ApplyResult) {
			noMoves(t, f, r)
			if m, _ := f.Member("a"); m.RPCAddr != "elsewhere:1" || m.JoinIndex != 2 {
				t.Fatalf("member %+v", m)
			}
		}},
		{name: "add member bad id", cmd: EncodeAddMember(mem("a\x00b")), wantErr: ErrInvalidCommand},
		{name: "add member empty id", cmd: EncodeAddMember(Member{}), wantErr: ErrInvalidCommand},
		{name: "add member that is an origin", cmd: EncodeAddMember(mem("o003")), check: func(t *testing.T, f *FSM, r *ApplyResult) {
			if slices.Contains(f.Origins(), "o003") || f.Load("o003") != 2 {
				t.Fatalf("origins %v load %d", f.Origins(), f.Load("o003"))
			}
			if r.Moves[0].Origin != "o003" || r.Moves[0].To != "" {
				t.Fatalf("first move %+v", r.Moves[0])
			}
		}},
		{name: "remove member", cmd: EncodeRemoveMember("b"), check: func(t *testing.T, f *FSM, r *ApplyResult) {
			if _, ok := f.Member("b"); ok || len(r.Moves) != 3 || f.Load("a")+f.Load("c") != 10 {
				t.Fatalf("moves %v", r.Moves)
			}
		}},
		{name: "remove unknown member", cmd: EncodeRemoveMember("zz"), wantErr: ErrUnknownMember},
		{name: "fail member", cmd: EncodeSetStatus("a", StatusFailed), check: func(t *testing.T, f *FSM, r *ApplyResult) {
			if m, _ := f.Member("a"); m.Status != StatusFailed || f.Load("a") != 0 || f.Size() != 3 {
				t.Fatalf("member %+v load %d", m, f.Load("a"))
			}
			if !slices.Equal(f.ActiveMembers(), []string{"b", "c"}) || len(r.Moves) != 4 {
				t.Fatalf("active %v moves %v", f.ActiveMembers(), r.Moves)
			}
		}},
		{name: "status unchanged", cmd: EncodeSetStatus("a", StatusActive), check: noMoves},
		{name: "status unknown member", cmd: EncodeSetStatus("zz", StatusLeaving), wantErr: ErrUnknownMember},
		{name: "status invalid", cmd: EncodeSetStatus("a", "sleepy"), wantErr: ErrInvalidCommand},
		{name: "origin that is a member", cmd: EncodeAddOrigins("x", "b"), wantErr: ErrOriginIsMember},
		{name: "origin empty id", cmd: EncodeAddOrigins(""), wantErr: ErrInvalidCommand},
		{name: "origin too long", cmd: EncodeAddOrigins(string(make([]byte, MaxIDLen+1))), wantErr: ErrInvalidCommand},
		{name: "origin bad utf8", cmd: EncodeAddOrigins("\xff"), wantErr: ErrInvalidCommand},
		{name: "add existing origins", cmd: EncodeAddOrigins("o001", "o002", "o001"), check: noMoves},
		{name: "add origins", cmd: EncodeAddOrigins("x2", "x1", "x1"), check: func(t *testing.T, f *FSM, r *ApplyResult) {
			want := []routing.Move{{Origin: "x1", To: "b"}, {Origin: "x2", To: "c"}}
			if !reflect.DeepEqual(r.Moves, want) {
				t.Fatalf("moves %v, want %v", r.Moves, want)
			}
		}},
		{name: "remove unknown origin", cmd: EncodeRemoveOrigins("nope", "a"), check: noMoves},
		{name: "remove origins", cmd: EncodeRemoveOrigins("o000", "o001", "o002", "o003"), check: func(t *testing.T, f *FSM, r *ApplyResult) {
			if len(f.Origins()) != 6 {
				t.Fatalf("origins %v", f.Origins())
			}
		}},
		{name: "set origins", cmd: EncodeSetOrigins([]string{"o000", "new"}), check: func(t *testing.T, f *FSM, r *ApplyResult) {
			if !slices.Equal(f.Origins(), []string{"new", "o000"}) {
				t.Fatalf("origins %v", f.Origins())
			}
		}},
		{name: "set origins unchanged", cmd: EncodeSetOrigins(ids("o", 10)), check: noMoves},
		{name: "set origins with member", cmd: EncodeSetOrigins([]string{"a"}), wantErr: ErrOriginIsMember},
		{name: "split", cmd: EncodeSplit([]string{"c", "b"}, "g2"), check: func(t *testing.T, f *FSM, r *ApplyResult) {
			if !slices.Equal(f.ActiveMembers(), []string{"a"}) || f.Load("a") != 12 {
				t.Fatalf("active %v load %d", f.ActiveMembers(), f.Load("a"))
			}
			if !slices.Contains(f.Origins(), "b") || !slices.Contains(f.Origins(), "c") {
				t.Fatalf("origins %v", f.Origins())
			}
		}},
		{name: "split unknown", cmd: EncodeSplit([]string{"b", "zz"}, "g2"), wantErr: ErrUnknownMember},
		{name: "split everyone", cmd: EncodeSplit([]string{"a", "b", "c"}, "g2"), wantErr: ErrInvalidCommand},
		{name: "split nobody", cmd: EncodeSplit(nil, "g2"), wantErr: ErrInvalidCommand},
		{name: "absorb", cmd: EncodeAbsorb([]Member{mem("o001")}, "g2"), check: func(t *testing.T, f *FSM, r *ApplyResult) {
			if f.Size() != 4 || slices.Contains(f.Origins(), "o001") {
				t.Fatalf("size %d origins %v", f.Size(), f.Origins())
			}
		}},
		{name: "absorb too many", cmd: EncodeAbsorb([]Member{mem("x"), mem("y")}, "g2"), wantErr: ErrGroupFull},
		{name: "absorb duplicate", cmd: EncodeAbsorb([]Member{mem("x"), mem("x")}, "g2"), wantErr: ErrInvalidCommand},
		{name: "absorb nobody", cmd: EncodeAbsorb(nil, "g2"), wantErr: ErrInvalidCommand},
		{name: "absorb bad group", cmd: EncodeAbsorb([]Member{mem("x")}, "\x00"), wantErr: ErrInvalidCommand},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a := newApplier(t, Options{})
			if !tc.fresh {
				a = group3(t)
			}
			r := applyCase(t, a, tc.cmd, tc.wantErr)
			if tc.check != nil {
				tc.check(t, a.f, r)
			}
		})
	}
}

func noMoves(t *testing.T, f *FSM, r *ApplyResult) {
	t.Helper()
	if len(r.Moves) != 0 {
		t.Fatalf("moves %v", r.Moves)
	}
}

func TestGroupFull(t *testing.T) {
	a := group3(t)
	a.must(EncodeAddMember(mem("d")))
	if r := a.apply(EncodeAddMember(mem("e"))); !errors.Is(r.Err, ErrGroupFull) {
		t.Fatalf("err %v", r.Err)
	}
	// A failed member still holds its seat …
	a.must(EncodeSetStatus("d", StatusFailed))
	if r := a.apply(EncodeAddMember(mem("e"))); !errors.Is(r.Err, ErrGroupFull) {
		t.Fatalf("err %v", r.Err)
	}
	// … until removed; and it may rejoin (re-activation) while it has one.
	a.must(EncodeSetStatus("d", StatusActive))
	a.must(EncodeRemoveMember("d"))
	a.must(EncodeAddMember(mem("e")))
	checkInvariants(t, a.f)
}

func TestRejoin(t *testing.T) {
	a := group3(t)
	a.must(EncodeSetStatus("b", StatusLeaving))
	a.must(EncodeSetStatus("b", StatusFailed))
	if a.f.Load("b") != 0 {
		t.Fatal("failed member holds replicas")
	}
	r := a.must(EncodeAddMember(mem("b"))) // comes back with its data
	m, _ := a.f.Member("b")
	if m.Status != StatusActive || m.JoinIndex != r.Index || a.f.Load("b") != 3 {
		t.Fatalf("member %+v load %d", m, a.f.Load("b"))
	}
	checkInvariants(t, a.f)
}

func TestBadEntries(t *testing.T) {
	good := EncodeAddOrigins("x")
	entries := map[string][]byte{
		"nil":               nil,
		"one byte":          {byte(MsgAddOrigins)},
		"unknown type":      {100, FormatV1, 0x80},
		"zero type":         {0, FormatV1, 0x80},
		"unknown version":   append([]byte{byte(MsgAddOrigins), 9}, good[2:]...),
		"garbage body":      {byte(MsgAddOrigins), FormatV1, 0xc1, 0xff, 0x00},
		"empty body":        {byte(MsgAddOrigins), FormatV1},
		"truncated body":    good[:len(good)-1],
		"trailing bytes":    append(slices.Clone(good), 0),
		"wrong shape":       append([]byte{byte(MsgAddOrigins), FormatV1}, 0x92, 0x01, 0x02),
		"wrong field types": append([]byte{byte(MsgAddOrigins), FormatV1}, 0x81, 0xa7, 'O', 'r', 'i', 'g', 'i', 'n', 's', 0x05),
		"huge array":        append([]byte{byte(MsgAddOrigins), FormatV1}, 0x81, 0xa7, 'O', 'r', 'i', 'g', 'i', 'n', 's', 0xdd, 0xff, 0xff, 0xff, 0xff),
	}
	for name, e := range entries {
		t.Run(name, func(t *testing.T) {
			a := group3(t)
			before := stateBytes(t, a.f)
			r := a.apply(e)
			if !errorsIsAny(r.Err, ErrMalformedCommand, ErrUnknownCommand, ErrUnsupportedVersion) {
				t.Fatalf("err %v", r.Err)
			}
			if !bytes.Equal(before, stateBytes(t, a.f)) || r.Moves != nil {
				t.Fatal("bad entry changed the state")
			}
		})
	}
	// Each of these halts its FSM (TestUnknownEntries): one FSM each.
	if r := group3(t).apply([]byte{100, 1}); !errors.Is(r.Err, ErrUnknownCommand) {
		t.Fatalf("unknown type: %v", r.Err)
	}
	if r := group3(t).apply(append([]byte{byte(MsgAddOrigins), 2}, good[2:]...)); !errors.Is(r.Err, ErrUnsupportedVersion) {
		t.Fatalf("unknown version: %v", r.Err)
	}
	// Non-command entries are acknowledged and change nothing.
	a := group3(t)
	before := stateBytes(t, a.f)
	resp := a.f.Apply(&raft.Log{Index: 100, Type: raft.LogNoop})
	if r, err := Result(resp); err != nil || r.Index != 100 || !bytes.Equal(before, stateBytes(t, a.f)) {
		t.Fatalf("noop: %v %v", r, err)
	}
	if _, err := Result("nope"); !errors.Is(err, ErrInconsistent) {
		t.Fatalf("Result of a string: %v", err)
	}
}

func TestEncodeDecodeRoundTrip(t *testing.T) {
	cmds := []Command{
		&BootstrapCommand{Config: testConfig("g", 5)},
		&AddMemberCommand{Member: mem("a")},
		&RemoveMemberCommand{ID: "a"},
		&SetStatusCommand{ID: "a", Status: StatusFailed},
		&SetOriginsCommand{Origins: []string{"x", "y"}},
		&AddOriginsCommand{Origins: []string{"x"}},
		&RemoveOriginsCommand{Origins: []string{"y"}},
		&SplitCommand{IDs: []string{"a", "b"}, NewGroup: "g2"},
		&AbsorbCommand{Members: []Member{mem("a"), mem("b")}, FromGroup: "g2"},
		&BootstrapCommand{Config: func() Config { c := testConfig("g", 5); c.Replication = 3; return c }()},
		&AddMemberCommand{Member: mem("a"), Shards: []string{"a", "s"}},
		&AddMemberCommand{Member: mem("a"), Shards: []string{}},
		&AbsorbCommand{Members: []Member{mem("a")}, FromGroup: "g2", Shards: []OwnedShards{{Member: "a", Shards: []string{"a"}}}},
		&RepairMemberCommand{ID: "a"},
	}
	for _, c := range cmds {
		b := Encode(c)
		if v, ok := c.(versioned); b[0] != byte(c.MsgType()) || ok && b[1] != v.version() || !ok && b[1] != FormatV1 {
			t.Fatalf("%s: header % x", c.MsgType(), b[:2])
		}
		got, err := DecodeCommand(b)
		if err != nil {
			t.Fatalf("%s: %v", c.MsgType(), err)
		}
		if !reflect.DeepEqual(got, c) {
			t.Fatalf("%s: decoded %+v, want %+v", c.MsgType(), got, c)
		}
		if c.MsgType().String() == "" || MsgType(0).String() != "msg(0)" {
			t.Fatal("names")
		}
	}
}
