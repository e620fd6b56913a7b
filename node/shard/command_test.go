package shard_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/ghba/ghba/node/shard"
	"github.com/ghba/ghba/node/store"
	"github.com/ghba/ghba/rpc"
	"github.com/ghba/ghba/rpc/rpctest"
)

// entry returns the log entry of a batch.
func entry(t testing.TB, b *store.Batch) []byte {
	t.Helper()
	data, err := shard.EncodeBatch(b)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// TestEntriesThatDoNotDecode applies entries the state machine refuses or
// skips, on a three-replica shard: an entry of a known type whose body does
// not decode fails alone (ErrMalformedCommand) and the replicas go on; an
// unknown type marked ignorable is skipped with the state unchanged.
func TestEntriesThatDoNotDecode(t *testing.T) {
	noLeaks(t)
	c := newCluster(t, 3)
	c.mustApply(mkdir("/d"))
	good := entry(t, create("/d/a"))
	tests := []struct {
		name      string
		data      []byte
		malformed bool // else skipped
	}{
		{"empty", nil, true},
		{"type only", []byte{shard.CmdBatch}, true},
		{"batch body cut", good[:len(good)-3], true},
		{"batch trailing bytes", append(append([]byte(nil), good...), 0), true},
		{"batch of garbage", []byte{shard.CmdBatch, shard.FormatV1, 1, 0xff, 0xff, 0xff}, true},
		{"rekey prefix cut", shard.EncodeRekey("/d", "/e", nil)[:5], true},
		{"rekey trailing bytes", append(shard.EncodeRekey("/d", "/e", nil), 'x'), true},
		{"rekey chain cut", shard.EncodeRekey("/d", "/e/f", []store.AncestorCode{{Depth: 1, UID: 300}})[:11], true},
		{"recode root cut", shard.EncodeRecode("/d", nil)[:3], true},
		{"recode with two codes", append(append([]byte{shard.CmdRecode, shard.FormatV1, 2, '/', 'd'}, 2), 0, 0, 0, 0, 1, 0, 0, 0), true},
		{"rekey prefix too long", append([]byte{shard.CmdRekey, shard.FormatV1}, 0xff, 0xff, 0x03), true},
		{"ignorable unknown type", []byte{shard.IgnorableFlag | 0x11, shard.FormatV1, 1, 2, 3}, false},
		{"ignorable unknown type and version", []byte{0xff, 0x7f}, false},
		{"ignorable type, a batch's body", append([]byte{shard.IgnorableFlag | shard.CmdBatch}, good[1:]...), false},
	}
	for _, tc := range tests {
		before := c.converged()
		err := shard.ApplyRaw(ctxFor(t, waitFor), c.waitLeader().rep, tc.data)
		switch {
		case tc.malformed && !errors.Is(err, shard.ErrMalformedCommand):
			t.Errorf("%s: %v, want ErrMalformedCommand", tc.name, err)
		case !tc.malformed && err != nil:
			t.Errorf("%s: %v, want it skipped", tc.name, err)
		}
		if errors.Is(err, rpc.ErrUnavailable) || errors.Is(err, shard.ErrHalted) {
			t.Errorf("%s: %v", tc.name, err)
		}
		c.unchanged(tc.name, before, false)
	}
	// The replicas go on.
	if err := shard.ApplyRaw(ctxFor(t, waitFor), c.waitLeader().rep, good); err != nil {
		t.Fatalf("a good entry after them: %v", err)
	}
	s := c.converged()
	if _, ok := s.Inodes["/d/a"]; !ok {
		t.Error("the good entry was not applied")
	}
	for _, r := range c.reps {
		if err := r.rep.Halted(); err != nil || len(r.fatal()) != 0 {
			t.Errorf("%s halted: %v %v", r.id(), err, r.fatal())
		}
	}
}

// TestUnknownCommandHalts applies an entry this build does not know (and
// that is not marked ignorable): every replica halts on it, says so once
// through OnFatal, refuses every later entry and every snapshot, and
// halts again on it when reopened; the store keeps the state before it.
func TestUnknownCommandHalts(t *testing.T) {
	good := func(t testing.TB) []byte { return entry(t, create("/d/a")) }
	tests := []struct {
		name     string
		replicas int
		data     func(t testing.TB) []byte
	}{
		{"unknown type", 3, func(testing.TB) []byte { return []byte{0x7f, shard.FormatV1, 1, 2} }},
		{"unknown version of a batch", 1, func(t testing.TB) []byte {
			d := good(t)
			d[1] = shard.FormatV1 + 1
			return d
		}},
		{"unknown version of a rekey", 1, func(testing.TB) []byte {
			d := shard.EncodeRekey("/d", "/e", nil)
			d[1] = 9
			return d
		}},
		{"batch of an unknown store format", 1, func(t testing.TB) []byte {
			d := good(t)
			d[2] = 0x42 // the store batch's format version
			return d
		}},
	}
	noLeaks(t) // (for the parallel subtests: when they are all done)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := newCluster(t, tc.replicas)
			c.mustApply(mkdir("/d"))
			before := c.converged()
			l := c.waitLeader()
			err := shard.ApplyRaw(ctxFor(t, waitFor), l.rep, tc.data(t))
			if !errors.Is(err, shard.ErrHalted) {
				t.Errorf("the unknown entry: %v, want ErrHalted", err)
			}
			for _, r := range c.reps {
				rpctest.Eventually(t, waitFor, r.id()+" halted", func() error {
					if err := r.rep.Halted(); !errors.Is(err, shard.ErrHalted) || !errors.Is(err, shard.ErrUnknownCommand) && !errors.Is(err, store.ErrUnknownVersion) {
						return fmt.Errorf("Halted() = %v", err)
					}
					return nil
				})
			}
			// Later entries are refused; nothing more is applied.
			for i := range 3 {
				if err := l.rep.Apply(ctxFor(t, waitFor), create(fmt.Sprintf("/d/later%d", i))); !errors.Is(err, shard.ErrHalted) {
					t.Errorf("Apply after halting: %v, want ErrHalted", err)
				}
			}
			if err := shard.TakeSnapshot(l.rep); err == nil {
				t.Error("a halted replica took a snapshot")
			}
			for _, r := range c.reps {
				s, err := stateOf(r)
				if err != nil {
					t.Fatal(err)
				}
				if d := before.diff(s); d != "" {
					t.Errorf("%s: the state changed: %s", r.id(), d)
				}
				if f := r.fatal(); len(f) != 1 || !errors.Is(f[0], shard.ErrHalted) {
					t.Errorf("%s: OnFatal called with %v, want once with ErrHalted", r.id(), f)
				}
			}
			// Reopened, the replica replays the entry and halts again.
			r := c.reps[len(c.reps)-1]
			r.reopen()
			rpctest.Eventually(t, waitFor, "halted again after reopening", func() error {
				if err := r.rep.Halted(); !errors.Is(err, shard.ErrHalted) {
					return fmt.Errorf("Halted() = %v", err)
				}
				return nil
			})
			if s, err := stateOf(r); err != nil || before.diff(s) != "" {
				t.Errorf("after reopening: %v %s", err, before.diff(s))
			}
		})
	}
}

// FuzzDecodeCommand checks that any entry decodes to a command, to
// ErrMalformedCommand or to ErrUnknownCommand, without panicking, and that
// encoded commands decode.
func FuzzDecodeCommand(f *testing.F) {
	b, err := shard.EncodeBatch(create("/d/a"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Add(shard.EncodeRekey("/d", "/e", nil))
	f.Add([]byte{shard.IgnorableFlag | 3, shard.FormatV1})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		typ, err := shard.DecodeCommand(data)
		switch {
		case err == nil:
			if typ != shard.CmdBatch && typ != shard.CmdRekey {
				t.Fatalf("type %d decoded", typ)
			}
		case errors.Is(err, shard.ErrMalformedCommand) != errors.Is(err, shard.ErrUnknownCommand):
		default:
			t.Fatalf("%x: %v", data, err)
		}
		if len(data) >= 2 && len(data) <= 8000 { // prefixes within the limit
			rk := shard.EncodeRekey(string(data[:len(data)/2]), string(data[len(data)/2:]), nil)
			if typ, err := shard.DecodeCommand(rk); err != nil || typ != shard.CmdRekey {
				t.Fatalf("rekey %x: type %d, %v", rk, typ, err)
			}
		}
	})
}

// TestBatchFormatGate checks the two sides of the shard log's format gate
// (docs/design.md, "Upgrades and unknown commands"): a leader that may
// write batch format 1 only writes entries a replica pinned to format 1
// applies, without the ids; an entry in format 2 is an unknown command to
// that replica (it halts), and a known one to this build.
func TestBatchFormatGate(t *testing.T) {
	var b store.Batch
	b.PutInode("/f", store.Inode{Type: store.TypeFile, ID: 7})
	b.PutEntry("/", store.Entry{Name: "f", Type: store.TypeFile, Home: "n1", ID: 7})
	old, err := shard.EncodeBatchFormat(&b, store.BatchFormatV1)
	if err != nil {
		t.Fatal(err)
	}
	if typ, err := shard.DecodeCommandMax(old, store.BatchFormatV1); err != nil || typ != shard.CmdBatch {
		t.Fatalf("format 1 entry on a replica pinned to 1: type %d, %v", typ, err)
	}
	cur, err := shard.EncodeBatchFormat(&b, store.MaxBatchFormat)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := shard.DecodeCommandMax(cur, store.BatchFormatV1); !errors.Is(err, shard.ErrUnknownCommand) {
		t.Fatalf("format 2 entry on a replica pinned to 1: %v, want ErrUnknownCommand", err)
	}
	if _, err := shard.DecodeCommand(cur); err != nil {
		t.Fatalf("format 2 entry on this build: %v", err)
	}

	// A special file needs format 3: a leader that may write only 2
	// refuses it, and a replica pinned to 2 halts at it.
	var sb store.Batch
	sb.PutInode("/p", store.Inode{Type: store.TypeFIFO, ID: 8})
	sb.PutEntry("/", store.Entry{Name: "p", Type: store.TypeFIFO, Home: "n1", ID: 8})
	if _, err := shard.EncodeBatchFormat(&sb, store.BatchFormatV2); !errors.Is(err, store.ErrFormatTooOld) {
		t.Fatalf("special file in format 2: %v, want ErrFormatTooOld", err)
	}
	v3, err := shard.EncodeBatchFormat(&sb, store.BatchFormatV3)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := shard.DecodeCommandMax(v3, store.BatchFormatV2); !errors.Is(err, shard.ErrUnknownCommand) {
		t.Fatalf("format 3 entry on a replica pinned to 2: %v, want ErrUnknownCommand", err)
	}
	if _, err := shard.DecodeCommand(v3); err != nil {
		t.Fatalf("format 3 entry on this build: %v", err)
	}
}
