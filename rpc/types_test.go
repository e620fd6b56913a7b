package rpc

import (
	"encoding/json"
	"io/fs"
	"reflect"
	"slices"
	"testing"
)

// allTypes has one value of every message type.
var allTypes = []any{
	&Inode{}, &StatRequest{}, &StatResponse{}, &LookupRequest{}, &LookupResponse{},
	&BatchStatRequest{}, &BatchStatResponse{}, &CreateRequest{}, &CreateResponse{},
	&MkdirRequest{}, &MkdirResponse{}, &ReadDirRequest{}, &ReadDirResponse{},
	&SetAttrRequest{}, &SetAttrResponse{}, &UnlinkRequest{}, &UnlinkResponse{},
	&RmdirRequest{}, &RmdirResponse{}, &RenameRequest{}, &RenameResponse{},
	&MembersRequest{}, &MembersResponse{}, &GroupsRequest{}, &GroupsResponse{},
	&JoinRequest{}, &JoinResponse{}, &LeaveRequest{}, &LeaveResponse{},
	&StatusRequest{}, &StatusResponse{}, &PingRequest{}, &PingResponse{},
	&SourcePutRequest{}, &SourcePutResponse{}, &SourceListRequest{}, &SourceListResponse{},
	&SourceRemoveRequest{}, &SourceRemoveResponse{}, &SourceDiscoverRequest{}, &SourceDiscoverResponse{},
}

// fill sets every field reachable from v to a non-zero value derived from
// seed (slices get two elements, maps one entry, pointers are allocated).
func fill(v reflect.Value, seed *int) {
	*seed++
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			v.Set(reflect.New(v.Type().Elem()))
		}
		fill(v.Elem(), seed)
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fill(v.Field(i), seed)
			}
		}
	case reflect.String:
		v.SetString("s" + string(rune('a'+*seed%26)) + "/x")
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(int64(*seed) * 1_000_003)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(uint64(*seed) * 7)
	case reflect.Float32, reflect.Float64:
		v.SetFloat(float64(*seed) + 0.25)
	case reflect.Slice:
		s := reflect.MakeSlice(v.Type(), 2, 2)
		for i := range 2 {
			fill(s.Index(i), seed)
		}
		v.Set(s)
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		k := reflect.New(v.Type().Key()).Elem()
		e := reflect.New(v.Type().Elem()).Elem()
		fill(k, seed)
		fill(e, seed)
		m.SetMapIndex(k, e)
		v.Set(m)
	default:
		panic("fill: unhandled kind " + v.Kind().String())
	}
}

func TestTypesRoundTrip(t *testing.T) {
	bc := NewCodec()
	for _, proto := range allTypes {
		typ := reflect.TypeOf(proto).Elem()
		t.Run(typ.Name(), func(t *testing.T) {
			in := reflect.New(typ)
			seed := 0
			fill(in, &seed)
			enc := bc.GetEncoder()
			b, err := enc.Encode(in.Interface())
			if err != nil {
				t.Fatal(err)
			}
			out := reflect.New(typ)
			if err := bc.Unmarshal(b, out.Interface()); err != nil {
				t.Fatal(err)
			}
			bc.PutEncoder(enc)
			if !reflect.DeepEqual(in.Interface(), out.Interface()) {
				t.Errorf("round trip mismatch:\n in: %+v\nout: %+v", in.Elem().Interface(), out.Elem().Interface())
			}
			// The zero value round-trips too.
			zero := reflect.New(typ)
			b, err = bc.GetEncoder().Encode(zero.Interface())
			if err != nil {
				t.Fatal(err)
			}
			out = reflect.New(typ)
			if err := bc.Unmarshal(b, out.Interface()); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestJSONContract checks the key names the CLI's --json output relies on
// (issues 3 and 4).
func TestJSONContract(t *testing.T) {
	keys := func(v any) []string {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		var ks []string
		for k := range m {
			ks = append(ks, k)
		}
		return ks
	}
	tests := []struct {
		v    any
		want []string
	}{
		{&StatResponse{}, []string{"path", "type", "mode", "uid", "gid", "size", "mtime", "home", "level", "hops"}},
		{&LookupResponse{}, []string{"path", "home", "level", "hops"}},
		{&DirEntry{}, []string{"name", "type"}},
		{&Member{}, []string{"id", "group", "status", "rpc_addr", "raft_role", "files", "replicas_held"}},
		{&GroupInfo{}, []string{"group", "members", "leader"}},
	}
	for _, tt := range tests {
		got := keys(tt.v)
		for _, k := range tt.want {
			if !slices.Contains(got, k) {
				t.Errorf("%T JSON lacks %q (has %v)", tt.v, k, got)
			}
		}
	}
}

// TestEmbeddedInodeOnTheWire checks that StatResponse's embedded Inode
// travels flattened (same keys as JSON) and survives.
func TestEmbeddedInodeOnTheWire(t *testing.T) {
	bc := NewCodec()
	in := &StatResponse{Inode: Inode{Path: "/a", Type: TypeDir, Mode: 0o755, Home: "n1"}, Level: LevelL2, Hops: 1}
	b, err := bc.GetEncoder().Encode(in)
	if err != nil {
		t.Fatal(err)
	}
	var flat map[string]any
	if err := bc.Unmarshal(b, &flat); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"path", "type", "home", "level"} {
		if _, ok := flat[k]; !ok {
			t.Errorf("wire map lacks %q: %v", k, flat)
		}
	}
	var out StatResponse
	if err := bc.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(in, &out) {
		t.Errorf("got %+v", out)
	}
	if !out.IsDir() || out.FileMode().String() != "drwxr-xr-x" {
		t.Errorf("mode %v", out.FileMode())
	}
}

// TestUnknownFieldsIgnored: a newer peer's extra fields do not break an
// older one.
func TestUnknownFieldsIgnored(t *testing.T) {
	bc := NewCodec()
	type newer struct {
		Path  string `json:"path"`
		Extra []int  `json:"extra"`
	}
	b, err := bc.GetEncoder().Encode(&newer{Path: "/x", Extra: []int{1, 2}})
	if err != nil {
		t.Fatal(err)
	}
	var old StatRequest
	if err := bc.Unmarshal(b, &old); err != nil || old.Path != "/x" {
		t.Errorf("got %+v, %v", old, err)
	}
}

func TestIdempotentTable(t *testing.T) {
	reads := []string{MethodStat, MethodLookup, MethodBatchStat, MethodReadDir, MethodMembers, MethodGroups}
	writes := []string{MethodCreate, MethodMkdir, MethodSetAttr, MethodUnlink, MethodRmdir, MethodRename,
		MethodJoin, MethodLeave, "Txn.CommitChild", "Filter.Push"}
	for _, m := range reads {
		if !Idempotent(m) {
			t.Errorf("%s should be idempotent", m)
		}
	}
	for _, m := range writes {
		if Idempotent(m) {
			t.Errorf("%s should not be idempotent", m)
		}
	}
}

// TestFileModeTypes: every inode type has its own fs.FileMode type bits,
// and TypeOfMode reads them back.
func TestFileModeTypes(t *testing.T) {
	for _, typ := range []string{TypeFile, TypeDir, TypeSymlink, TypeFIFO, TypeSocket, TypeCharDev, TypeBlockDev} {
		in := &Inode{Type: typ, Mode: 0o640}
		m := in.FileMode()
		if got := TypeOfMode(m); got != typ {
			t.Errorf("%s: FileMode %v reads back as %q", typ, m, got)
		}
		if m.Perm() != 0o640 {
			t.Errorf("%s: FileMode %v, want permission bits 0640", typ, m)
		}
	}
	if got := TypeOfMode(fs.ModeIrregular); got != "" {
		t.Errorf("an irregular file reads as %q, want none", got)
	}
}
