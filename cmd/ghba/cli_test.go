package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/ghba/ghba/rpc"
	"github.com/ghba/ghba/rpc/rpctest"
)

func TestExitCode(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want int
	}{
		{"nil", nil, 0},
		{"other", errors.New("boom"), 1},
		{"usage", usageErrorf("bad flag"), 2},
		{"wrapped usage", fmt.Errorf("x: %w", usageErrorf("bad")), 2},
		{"invalid path", fmt.Errorf("stat: %w", rpc.ErrInvalidPath), 2},
		{"remote invalid path", rpc.CodeInvalidPath.Err("bad path"), 2},
		{"not exist", fmt.Errorf("stat /a: %w", fs.ErrNotExist), 3},
		{"remote not exist", rpc.CodeNotExist.Err("no such file"), 3},
		{"path error", &fs.PathError{Op: "stat", Path: "/a", Err: fs.ErrNotExist}, 3},
		{"exist", fmt.Errorf("create: %w", fs.ErrExist), 4},
		{"remote exist", rpc.CodeExist.Err("exists"), 4},
		{"unavailable", fmt.Errorf("stat: %w", rpc.ErrUnavailable), 5},
		{"remote unavailable", rpc.CodeUnavailable.Err("home down"), 5},
		{"shutting down", rpc.CodeShuttingDown.Err("bye"), 5},
		{"deadline", fmt.Errorf("stat: %w", context.DeadlineExceeded), 5},
		{"unavailable and not exist", fmt.Errorf("%w: %w", rpc.ErrUnavailable, fs.ErrNotExist), 5},
		{"not empty", rpc.CodeNotEmpty.Err("not empty"), 1},
		{"version mismatch", rpc.CodeVersionMismatch.Err("version 3, not 2"), 1},
		{"joined first not found", errors.Join(errors.New("x"), fs.ErrNotExist), 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := exitCode(tt.err); got != tt.want {
				t.Errorf("exitCode(%v) = %d, want %d", tt.err, got, tt.want)
			}
		})
	}
}

// walkCommands calls fn for every command below root (not root itself),
// skipping cobra's generated help and completion commands.
func walkCommands(c *cobra.Command, fn func(*cobra.Command)) {
	for _, sub := range c.Commands() {
		if sub.Name() == "help" || sub.Name() == "completion" {
			continue
		}
		fn(sub)
		walkCommands(sub, fn)
	}
}

func TestEveryCommandHasExample(t *testing.T) {
	var names []string
	walkCommands(newRootCmd(), func(c *cobra.Command) { names = append(names, c.CommandPath()) })
	for _, want := range []string{"ghba agent", "ghba join", "ghba leave", "ghba members", "ghba groups",
		"ghba stat", "ghba lookup", "ghba create", "ghba mkdir", "ghba ls", "ghba rm", "ghba mv",
		"ghba chmod", "ghba chown", "ghba bench"} {
		if !slices.Contains(names, want) {
			t.Errorf("command %q missing (have %v)", want, names)
		}
	}
	for _, name := range append([]string{"ghba"}, names...) {
		args := append(strings.Fields(name)[1:], "--help")
		t.Run(name, func(t *testing.T) {
			out, _, code := runCLI(t, args...)
			if code != 0 {
				t.Fatalf("%s --help: exit %d", name, code)
			}
			if !strings.Contains(out, "Example") {
				t.Errorf("%s --help has no Example:\n%s", name, out)
			}
		})
	}
}

func TestUsageErrors(t *testing.T) {
	f := startFake(t)
	tests := [][]string{
		{"bogus"},
		{"stat"},
		{"stat", "/a", "/b"},
		{"stat", "--bogus-flag", "/a"},
		{"lookup"},
		{"mv", "/a"},
		{"chmod", "999", "/a"},
		{"chmod", "rwx", "/a"},
		{"chmod", "10000", "/a"},
		{"chown", "alice:staff", "/a"},
		{"chown", ":", "/a"},
		{"chown", "1:2:3", "/a"},
		{"create", "relative/path"},
		{"mkdir", "--mode", "8", "/a"},
		{"ls", "/a", "/b"},
		{"rm"},
		{"rm", "-r", "/"},
		{"join"},
		{"join", "not-an-address"},
		{"members", "extra"},
		{"--addr", "nocolon", "members"},
		{"--addr", " , ", "members"},
		{"--timeout", "0s", "members"},
		{"leave", "--wait", "0s"},
		{"bench", "--paths", "0"},
		{"bench", "--phases", "write"},
		{"agent", "extra-arg"},
	}
	for _, args := range tests {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			_, errOut, code := runCLI(t, append([]string{"--addr", f.Addr()}, args...)...)
			if code != exitUsage {
				t.Errorf("exit %d, want %d (stderr %q)", code, exitUsage, errOut)
			}
			if !strings.Contains(errOut, "ghba:") {
				t.Errorf("no error message on stderr: %q", errOut)
			}
		})
	}
	// No RPC was sent for any of them.
	if calls := f.Calls(); len(calls) != 0 {
		t.Errorf("usage errors sent RPCs: %v", calls)
	}
}

func TestExitCodesThroughServer(t *testing.T) {
	f := startFake(t)
	f.Put("/a", rpc.TypeDir)
	f.Put("/a/f", rpc.TypeFile)
	f.Put("/a/down", rpc.TypeFile)
	f.SetHomeDown("/a/down", true)
	dead := rpctest.DeadAddr(t)
	tests := []struct {
		args []string
		want int
	}{
		{[]string{"stat", "/a/f"}, 0},
		{[]string{"stat", "/nope"}, exitNotFound},
		{[]string{"lookup", "/nope"}, exitNotFound},
		{[]string{"ls", "/nope"}, exitNotFound},
		{[]string{"stat", "/a/down"}, exitUnavail},
		{[]string{"create", "/a/down"}, exitUnavail},
		{[]string{"create", "/a/f"}, exitExists},
		{[]string{"mkdir", "/a"}, exitExists},
		{[]string{"mkdir", "-p", "/a"}, 0},
		{[]string{"create", "/nope/f"}, exitNotFound},
		{[]string{"mv", "/a/f", "/a"}, exitExists},
		{[]string{"mv", "/nope", "/x"}, exitNotFound},
		{[]string{"rm", "/nope"}, exitNotFound},
		{[]string{"rm", "-f", "/nope"}, 0},
		{[]string{"rm", "/a"}, exitError},
		{[]string{"chmod", "600", "/nope"}, exitNotFound},
		{[]string{"--addr", dead, "stat", "/a"}, exitUnavail},
		{[]string{"--addr", dead, "members"}, exitUnavail},
		{[]string{"groups", "--wait", "--timeout", "1s"}, exitUnavail}, // g2 never settles
		{[]string{"--addr", dead + "," + dead, "ls", "/"}, exitUnavail},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			args := tt.args
			if args[0] != "--addr" {
				args = append([]string{"--addr", f.Addr()}, args...)
			}
			_, errOut, code := runCLI(t, args...)
			if code != tt.want {
				t.Errorf("exit %d, want %d (stderr %q)", code, tt.want, errOut)
			}
		})
	}
}

func TestAddrFromEnv(t *testing.T) {
	f := startFake(t)
	t.Setenv(envAddr, f.Addr())
	if _, errOut, code := runCLI(t, "members"); code != 0 {
		t.Fatalf("members with %s=%s: exit %d: %s", envAddr, f.Addr(), code, errOut)
	}
	// --addr wins over the environment.
	if _, _, code := runCLI(t, "--addr", rpctest.DeadAddr(t), "members"); code != exitUnavail {
		t.Fatalf("--addr dead: exit %d, want %d", code, exitUnavail)
	}
}

// decodeJSON decodes out as exactly one JSON value into a generic value.
func decodeJSON(t *testing.T, out string) any {
	t.Helper()
	var v any
	dec := json.NewDecoder(strings.NewReader(out))
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	if dec.More() {
		t.Fatalf("more than one JSON value:\n%s", out)
	}
	return v
}

func hasKeys(t *testing.T, what string, v any, keys ...string) map[string]any {
	t.Helper()
	m, ok := v.(map[string]any)
	if !ok {
		t.Fatalf("%s: want an object, got %T: %v", what, v, v)
	}
	for _, k := range keys {
		if _, ok := m[k]; !ok {
			t.Errorf("%s: field %q missing in %v", what, k, m)
		}
	}
	return m
}

func array(t *testing.T, what string, v any) []any {
	t.Helper()
	a, ok := v.([]any)
	if !ok {
		t.Fatalf("%s: want an array, got %T: %v", what, v, v)
	}
	return a
}

func TestJSONContracts(t *testing.T) {
	f := startFake(t)
	run := func(args ...string) any {
		t.Helper()
		out, errOut, code := runCLI(t, append([]string{"--addr", f.Addr(), "--json"}, args...)...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, errOut)
		}
		return decodeJSON(t, out)
	}
	run("mkdir", "-p", "/home/alice")
	run("create", "--mode", "640", "--uid", "1000", "--gid", "100", "/home/alice/notes.txt")
	run("create", "/home/alice/b")
	run("mkdir", "/home/alice/c")

	st := hasKeys(t, "stat", run("stat", "/home/alice/notes.txt"),
		"path", "id", "type", "mode", "uid", "gid", "size", "mtime", "home", "level", "hops")
	if st["path"] != "/home/alice/notes.txt" || st["type"] != "file" || st["mode"] != float64(0o640) ||
		st["uid"] != float64(1000) || st["gid"] != float64(100) || st["home"] != "node2" ||
		st["level"] != "L2" || st["hops"] != float64(1) || st["mtime"] != float64(1_700_000_000_123_456_789) {
		t.Errorf("stat --json = %v", st)
	}
	if d := hasKeys(t, "stat dir", run("stat", "/home/alice"), "type"); d["type"] != "dir" {
		t.Errorf("stat dir type = %v", d["type"])
	}

	lk := hasKeys(t, "lookup", run("lookup", "/home/alice/notes.txt"), "path", "home", "level", "hops")
	if lk["path"] != "/home/alice/notes.txt" || lk["home"] != "node2" || lk["level"] != "L1" || lk["hops"] != float64(0) {
		t.Errorf("lookup --json = %v", lk)
	}

	ls := array(t, "ls", run("ls", "/home/alice"))
	var names []string
	for _, e := range ls {
		m := hasKeys(t, "ls entry", e, "name", "type", "id")
		names = append(names, m["name"].(string)+":"+m["type"].(string))
	}
	// Three entries over two pages of the fake: all pages were fetched.
	if want := []string{"b:file", "c:dir", "notes.txt:file"}; !slices.Equal(names, want) {
		t.Errorf("ls --json names = %v, want %v", names, want)
	}
	if empty := array(t, "ls empty", run("ls", "/home/alice/c")); len(empty) != 0 {
		t.Errorf("ls of empty dir = %v", empty)
	}

	ms := array(t, "members", run("members"))
	if len(ms) != 2 {
		t.Fatalf("members: %v", ms)
	}
	m0 := hasKeys(t, "member", ms[0], "id", "group", "status", "rpc_addr", "raft_role", "files", "replicas_held")
	m1 := hasKeys(t, "member", ms[1], "id", "replicas_held")
	if m0["id"] != "node1" || m0["status"] != "alive" || m0["raft_role"] != "leader" || m0["files"] != float64(10) || m1["replicas_held"] != float64(2) {
		t.Errorf("members --json = %v", ms)
	}

	gs := array(t, "groups", run("groups"))
	if len(gs) != 2 {
		t.Fatalf("groups: %v", gs)
	}
	g0 := hasKeys(t, "group", gs[0], "group", "members", "leader", "settled")
	if g0["group"] != "g1" || g0["leader"] != "node1" || len(array(t, "group members", g0["members"])) != 2 || g0["settled"] != true {
		t.Errorf("groups --json = %v", gs)
	}
	g1 := hasKeys(t, "group", gs[1], "group", "members", "leader", "settled", "unsettled")
	if g1["settled"] != false || g1["unsettled"] == "" {
		t.Errorf("unsettled group = %v", g1)
	}
	if mem := array(t, "empty group members", g1["members"]); len(mem) != 0 {
		t.Errorf("empty group's members = %v, want []", mem)
	}

	mv := hasKeys(t, "mv", run("mv", "/home/alice", "/home/bob"), "src", "dst", "rekeyed")
	if mv["rekeyed"] != float64(3) {
		t.Errorf("mv --json = %v", mv)
	}
	hasKeys(t, "chmod", run("chmod", "0600", "/home/bob/b"), "path", "mode")
	hasKeys(t, "join", run("join", "127.0.0.1:7412"), "joined")
	if got := f.LastJoin(); !slices.Equal(got, []string{"127.0.0.1:7412"}) {
		t.Errorf("join sent %v", got)
	}
	hasKeys(t, "leave", run("leave", "--node-id", "node1"), "moved_shard_replicas", "handed_shards", "handed_replicas")
	if req, ok := f.LastLeave(); !ok || req.NodeID != "node1" {
		t.Errorf("leave sent %+v (%v)", req, ok)
	}
}

func TestHumanOutput(t *testing.T) {
	f := startFake(t)
	run := func(args ...string) string {
		t.Helper()
		out, errOut, code := runCLI(t, append([]string{"--addr", f.Addr()}, args...)...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, errOut)
		}
		return out
	}
	run("mkdir", "-p", "/d/e")
	run("create", "/d/file")
	for _, tt := range []struct {
		args []string
		want []string
	}{
		{[]string{"members"}, []string{"ID", "RAFT ROLE", "REPLICAS", "node1", "leader", "failed"}},
		{[]string{"groups"}, []string{"GROUP", "LEADER", "MAX", "SETTLED", "g1", "auto:4", "node1,node2", "node1=1 node2=2", "yes",
			"group g1: max_group_size auto, M 4 (model's optimum 5 of 3..64): N 9", "measured: servers, p_lru", "M=4 1.5 M=5 1.6",
			"no: node3: 0 of 2 filter replicas loaded", "cluster not settled: group g2: node3"}},
		{[]string{"ls", "/d"}, []string{"NAME", "e/", "file"}},
		{[]string{"stat", "/d/file"}, []string{"path", "/d/file", "0644 (-rw-r--r--)", "level", "L2", "id"}},
		{[]string{"lookup", "/d/file"}, []string{"HOME", "LEVEL", "node2", "L1"}},
		{[]string{"join", "127.0.0.1:1", "127.0.0.1:2"}, []string{"contacted 2 of 2"}},
		{[]string{"leave"}, []string{"moved 12 shard replica(s)", "node1", "3 filter replica(s)"}},
	} {
		out := run(tt.args...)
		for _, w := range tt.want {
			if !strings.Contains(out, w) {
				t.Errorf("%v output lacks %q:\n%s", tt.args, w, out)
			}
		}
	}
	// Tables are aligned: the header's second column starts where the
	// rows' second column does.
	out := run("members")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	col := strings.Index(lines[0], "GROUP")
	for _, l := range lines[1:] {
		if l[col-2:col] != "  " || l[col] == ' ' {
			t.Errorf("misaligned table:\n%s", out)
		}
	}
}

func TestMutations(t *testing.T) {
	f := startFake(t)
	run := func(args ...string) {
		t.Helper()
		if _, errOut, code := runCLI(t, append([]string{"--addr", f.Addr()}, args...)...); code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, errOut)
		}
	}
	run("mkdir", "-p", "/t/a/b")
	run("create", "-p", "/t/x/y/z")
	for i := range 5 {
		run("create", fmt.Sprintf("/t/a/b/f%d", i))
		run("create", fmt.Sprintf("/t/a/g%d", i))
	}
	run("chown", "12:34", "/t/a/g1")
	if sa, _ := f.LastSetAttr(); sa.UID == nil || *sa.UID != 12 || sa.GID == nil || *sa.GID != 34 || sa.Mode != nil {
		t.Errorf("chown sent %+v", sa)
	}
	run("chown", ":7", "/t/a/g1")
	if sa, _ := f.LastSetAttr(); sa.UID != nil || sa.GID == nil || *sa.GID != 7 {
		t.Errorf("chown :7 sent %+v", sa)
	}
	run("chmod", "2755", "/t/a")
	if sa, _ := f.LastSetAttr(); sa.Mode == nil || *sa.Mode != 0o2755 || sa.UID != nil {
		t.Errorf("chmod sent %+v", sa)
	}
	run("mv", "/t/a", "/t/moved")
	run("rm", "/t/moved/g0")
	run("rm", "-r", "/t/moved", "/t/x")
	if got, want := f.Paths(), []string{"/", "/t"}; !slices.Equal(got, want) {
		t.Errorf("after rm -r: %v, want %v", got, want)
	}
}

func TestRmDirectoryNeedsRecursive(t *testing.T) {
	f := startFake(t)
	f.Put("/d", rpc.TypeDir)
	_, errOut, code := runCLI(t, "--addr", f.Addr(), "rm", "/d")
	if code != exitError || !strings.Contains(errOut, "-r") {
		t.Errorf("rm of a directory without -r: exit %d, stderr %q", code, errOut)
	}
	if !slices.Contains(f.Paths(), "/d") {
		t.Error("directory removed without -r")
	}
}

// TestMvNoClobber: mv sends NoReplace only with -n (--no-clobber); an
// existing destination is exit code 4.
func TestMvNoClobber(t *testing.T) {
	f := startFake(t)
	f.Put("/a", rpc.TypeFile)
	f.Put("/b", rpc.TypeFile)
	for _, tc := range []struct {
		args      []string
		code      int
		noReplace bool
	}{
		{[]string{"mv", "/a", "/c"}, 0, false},
		{[]string{"mv", "-n", "/c", "/d"}, 0, true},
		{[]string{"mv", "--no-clobber", "/d", "/b"}, exitExists, true},
	} {
		_, errOut, code := runCLI(t, append([]string{"--addr", f.Addr()}, tc.args...)...)
		if code != tc.code {
			t.Errorf("%v: exit %d, want %d (%s)", tc.args, code, tc.code, errOut)
		}
		if r, ok := f.LastRename(); !ok || r.NoReplace != tc.noReplace {
			t.Errorf("%v sent %+v, want NoReplace %v", tc.args, r, tc.noReplace)
		}
	}
}

// TestDataStoreCommands: data-store show and set, their exit codes and
// their --json contracts.
func TestDataStoreCommands(t *testing.T) {
	f := startFake(t)
	run := func(want int, args ...string) (string, string) {
		t.Helper()
		out, errOut, code := runCLI(t, append([]string{"--addr", f.Addr()}, args...)...)
		if code != want {
			t.Fatalf("%v: exit %d, want %d (stderr %s)", args, code, want, errOut)
		}
		return out, errOut
	}
	if out, _ := run(0, "data-store", "show"); !strings.Contains(out, "no data store is set") {
		t.Errorf("show without a store: %q", out)
	}
	if ds := hasKeys(t, "show --json", decodeJSON(t, first(run(0, "--json", "data-store", "show"))), "url"); ds["url"] != "" {
		t.Errorf("show --json without a store: %v", ds)
	}
	run(exitUsage, "data-store", "set", "http://example.com/x")
	run(exitUsage, "data-store", "set", "file://relative")
	run(exitUsage, "data-store", "set")
	if out, _ := run(0, "data-store", "set", "file:///srv/one"); !strings.Contains(out, "data store set to file:///srv/one") {
		t.Errorf("set: %q", out)
	}
	if out, _ := run(0, "data-store", "set", "file:///srv/one"); !strings.Contains(out, "already") {
		t.Errorf("set again: %q", out)
	}
	if _, errOut := run(exitExists, "data-store", "set", "s3://bucket"); !strings.Contains(errOut, "--force") {
		t.Errorf("another URL without --force: %q", errOut)
	}
	set := hasKeys(t, "set --json", decodeJSON(t, first(run(0, "--json", "data-store", "set", "--force", "s3://bucket"))), "url", "set", "changed")
	if set["url"] != "s3://bucket" || set["changed"] != true {
		t.Errorf("set --force --json: %v", set)
	}
	if out, _ := run(0, "data-store", "show"); !strings.Contains(out, "s3://bucket") {
		t.Errorf("show: %q", out)
	}
}

func first(a, _ string) string { return a }
