package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ghba/ghba/rpc"
	"github.com/ghba/ghba/rpc/rpctest"
)

// aclHome points the user's configuration directory (where ghba login
// saves the token) at a temporary directory, clears GHBA_TOKEN and
// returns the token file's path.
func aclHome(t *testing.T) string {
	t.Helper()
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("XDG_CONFIG_HOME", filepath.Join(home, ".config"))
	t.Setenv(envToken, "")
	p, err := tokenFile()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// fakeACL is an in-process server of the ACL methods that records the
// requests and the tokens they carried.
type fakeACL struct {
	addr string

	mu     sync.Mutex
	calls  []string // method
	tokens []string // the token of each call
	users  []rpc.ACLUserRequest
	revoke []string
}

func (f *fakeACL) record(method, token string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, method)
	f.tokens = append(f.tokens, token)
}

// last returns the last method called and the token it carried.
func (f *fakeACL) last() (method, token string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.calls) == 0 {
		return "", ""
	}
	return f.calls[len(f.calls)-1], f.tokens[len(f.tokens)-1]
}

func (f *fakeACL) numCalls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.calls)
}

type fakeTokenKey struct{}

// startFakeACL starts a fakeACL: the bootstrap token is "ROOTSECRET" (a
// second bootstrap fails with fs.ErrExist), alice's password is
// "alice-password" (her token "ALICESECRET"), whoami needs a token.
func startFakeACL(t *testing.T) *fakeACL {
	t.Helper()
	f := &fakeACL{}
	srv := rpc.NewServer(rpc.ServerOptions{Logger: rpctest.Logger(t, "fake-acl", "node1"),
		Authenticate: func(ctx context.Context, method, token string) (context.Context, error) {
			f.record(method, token)
			return context.WithValue(ctx, fakeTokenKey{}, token), nil
		}})
	booted := false
	rpc.Register(srv, rpc.MethodACLBootstrap, func(_ context.Context, _ *rpc.ACLBootstrapRequest) (*rpc.ACLTokenResponse, error) {
		f.mu.Lock()
		defer f.mu.Unlock()
		if booted {
			return nil, fmt.Errorf("acl bootstrap: %w: bootstrapped already", fs.ErrExist)
		}
		booted = true
		return &rpc.ACLTokenResponse{Token: "ROOTSECRET", Accessor: "0123456789ab", User: "root"}, nil
	})
	rpc.Register(srv, rpc.MethodACLLogin, func(_ context.Context, r *rpc.ACLLoginRequest) (*rpc.ACLTokenResponse, error) {
		if r.User != "alice" || r.Password != "alice-password" {
			return nil, fmt.Errorf("login: %w: wrong user name or password", rpc.ErrUnauthenticated)
		}
		return &rpc.ACLTokenResponse{Token: "ALICESECRET", Accessor: "aaaaaaaaaaaa", User: "alice", Expires: time.Now().Add(time.Hour).UnixNano()}, nil
	})
	user := func(method string) func(context.Context, *rpc.ACLUserRequest) (*rpc.ACLUserResponse, error) {
		return func(_ context.Context, r *rpc.ACLUserRequest) (*rpc.ACLUserResponse, error) {
			f.mu.Lock()
			f.users = append(f.users, *r)
			f.mu.Unlock()
			resp := &rpc.ACLUserResponse{User: r.ACLUser}
			if method == rpc.MethodACLUserRemove {
				resp.Revoked = 2
			}
			return resp, nil
		}
	}
	for _, m := range []string{rpc.MethodACLUserAdd, rpc.MethodACLUserPasswd, rpc.MethodACLUserRemove} {
		rpc.Register(srv, m, user(m))
	}
	rpc.Register(srv, rpc.MethodACLUserList, func(_ context.Context, _ *rpc.ACLUserListRequest) (*rpc.ACLUserListResponse, error) {
		return &rpc.ACLUserListResponse{Users: []rpc.ACLUser{
			{Name: "alice", UID: 1000, GID: 1000, Groups: []uint32{10, 20}},
			{Name: "root", Management: true},
		}}, nil
	})
	rpc.Register(srv, rpc.MethodACLTokenList, func(_ context.Context, _ *rpc.ACLTokenListRequest) (*rpc.ACLTokenListResponse, error) {
		return &rpc.ACLTokenListResponse{Tokens: []rpc.ACLTokenInfo{
			{Accessor: "0123456789ab", User: "root", Management: true, Description: "bootstrap", Created: 1},
			{Accessor: "aaaaaaaaaaaa", User: "alice", Description: "login", Created: 2, Expires: 3, Expired: true},
		}}, nil
	})
	rpc.Register(srv, rpc.MethodACLTokenRevoke, func(_ context.Context, r *rpc.ACLTokenRevokeRequest) (*rpc.ACLTokenRevokeResponse, error) {
		f.mu.Lock()
		f.revoke = append(f.revoke, r.Token)
		f.mu.Unlock()
		if r.Token == "nope" {
			return nil, fmt.Errorf("token revoke: %w: no such token", fs.ErrNotExist)
		}
		return &rpc.ACLTokenRevokeResponse{Accessor: "aaaaaaaaaaaa"}, nil
	})
	rpc.Register(srv, rpc.MethodACLWhoAmI, func(ctx context.Context, _ *rpc.ACLWhoAmIRequest) (*rpc.ACLUser, error) {
		token, _ := ctx.Value(fakeTokenKey{}).(string)
		switch token {
		case "ALICESECRET":
			return &rpc.ACLUser{Name: "alice", UID: 1000, GID: 1000, Groups: []uint32{10}}, nil
		case "ROOTSECRET":
			return &rpc.ACLUser{Name: "root", Management: true}, nil
		}
		return nil, fmt.Errorf("%w: unknown or revoked token", rpc.ErrUnauthenticated)
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f.addr = ln.Addr().String()
	served := make(chan error, 1)
	go func() { served <- srv.Serve(context.Background(), ln) }()
	t.Cleanup(func() {
		srv.Close()
		if err := <-served; err != nil && !errors.Is(err, rpc.ErrServerClosed) {
			t.Errorf("Serve: %v", err)
		}
	})
	return f
}

func TestACLUsageErrors(t *testing.T) {
	aclHome(t)
	f := startFakeACL(t)
	tests := []struct {
		stdin string
		args  []string
	}{
		{"pw\n", []string{"login", "--user", "alice"}},  // no --password-stdin
		{"pw\n", []string{"login", "--password-stdin"}}, // no --user
		{"", []string{"login", "--user", "alice", "--password-stdin"}},
		{"\n", []string{"login", "--user", "alice", "--password-stdin"}},
		{"\r\nsecond line\n", []string{"login", "--user", "alice", "--password-stdin"}},
		{"pw\n", []string{"login", "--user", "-x", "--password-stdin"}},
		{"pw\n", []string{"login", "--user", "alice", "--password-stdin", "extra"}},
		{"pw\n", []string{"login", "--user", "alice", "--password", "pw"}}, // no such flag
		{"", []string{"logout", "extra"}},
		{"", []string{"acl", "bootstap"}},
		{"", []string{"acl", "bootstrap", "extra"}},
		{"", []string{"user", "add", "alice", "--gid", "1"}},
		{"", []string{"user", "add", "alice", "--uid", "1"}},
		{"", []string{"user", "add", "alice", "--uid", "-1", "--gid", "1"}},
		{"", []string{"user", "add", "alice", "--uid", "1", "--gid", "1", "--groups", "a,b"}},
		{"", []string{"user", "add", "al/ice", "--uid", "1", "--gid", "1"}},
		{"", []string{"user", "add", "--uid", "1", "--gid", "1"}},
		{"", []string{"user", "add", "alice", "--uid", "1", "--gid", "1", "--password-stdin"}},
		{"pw\n", []string{"user", "passwd", "alice"}},
		{"", []string{"user", "passwd", "alice", "--password-stdin"}},
		{"", []string{"user", "rm"}},
		{"", []string{"user", "rm", ".hidden"}},
		{"", []string{"user", "list", "extra"}},
		{"", []string{"user", "bogus"}},
		{"", []string{"token", "revoke"}},
		{"", []string{"token", "revoke", " "}},
		{"\n", []string{"token", "revoke", "-"}},
		{"", []string{"token", "list", "extra"}},
		{"", []string{"whoami", "extra"}},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			_, errOut, code := runCLIIn(t, tt.stdin, append([]string{"--addr", f.addr}, tt.args...)...)
			if code != exitUsage {
				t.Errorf("exit %d, want %d (stderr %q)", code, exitUsage, errOut)
			}
			if !strings.Contains(errOut, "ghba:") {
				t.Errorf("no error message on stderr: %q", errOut)
			}
		})
	}
	// "ghba acl", "ghba user" and "ghba token" alone print their help.
	for _, group := range []string{"acl", "user", "token"} {
		if out, _, code := runCLIIn(t, "", "--addr", f.addr, group); code != 0 || !strings.Contains(out, "Example") {
			t.Errorf("ghba %s: exit %d:\n%s", group, code, out)
		}
	}
	if n := f.numCalls(); n != 0 {
		t.Errorf("usage errors sent %d RPCs: %v", n, f.calls)
	}
}

func TestACLLoginLogout(t *testing.T) {
	path := aclHome(t)
	f := startFakeACL(t)
	run := func(stdin string, args ...string) (string, string, int) {
		t.Helper()
		return runCLIIn(t, stdin, append([]string{"--addr", f.addr}, args...)...)
	}

	if _, errOut, code := run("wrong-password\n", "login", "--user", "alice", "--password-stdin"); code != exitAuth {
		t.Fatalf("login with a wrong password: exit %d, want %d: %s", code, exitAuth, errOut)
	}
	if _, err := os.Stat(path); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a failed login left %s: %v", path, err)
	}
	// The first line only, without its CRLF.
	out, errOut, code := run("alice-password\r\nignored\n", "login", "--user", "alice", "--password-stdin")
	if code != 0 || out != "" {
		t.Fatalf("login: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("token file mode %v, want 0600", fi.Mode().Perm())
	}
	if di, err := os.Stat(filepath.Dir(path)); err != nil || di.Mode().Perm() != 0o700 {
		t.Errorf("token directory: %v (%v), want mode 0700", di.Mode().Perm(), err)
	}
	if b, _ := os.ReadFile(path); string(b) != "ALICESECRET\n" {
		t.Errorf("token file holds %q", b)
	}
	// No password at the end of stdin: also fine.
	if _, errOut, code := run("alice-password", "login", "--user", "alice", "--password-stdin"); code != 0 {
		t.Fatalf("login with a password without a newline: exit %d: %s", code, errOut)
	}
	ents, _ := os.ReadDir(filepath.Dir(path))
	if len(ents) != 1 {
		t.Errorf("token directory holds %d entries, want only the token (no temporary files)", len(ents))
	}

	// The saved token is presented; GHBA_TOKEN and --token win over it.
	if out, _, code := run("", "whoami"); code != 0 || !strings.Contains(out, "alice") {
		t.Errorf("whoami with the saved token: exit %d:\n%s", code, out)
	}
	if _, tok := f.last(); tok != "ALICESECRET" {
		t.Errorf("whoami presented %q, want the saved token", tok)
	}
	t.Setenv(envToken, "ROOTSECRET")
	if out, _, code := run("", "whoami"); code != 0 || !strings.Contains(out, "root") {
		t.Errorf("whoami with GHBA_TOKEN: exit %d:\n%s", code, out)
	}
	if _, _, code := run("", "--token", "BOGUS", "whoami"); code != exitAuth {
		t.Errorf("whoami --token BOGUS: exit %d, want %d", code, exitAuth)
	}
	t.Setenv(envToken, "")

	for range 2 { // no error when there is nothing to forget
		if out, errOut, code := run("", "logout"); code != 0 || out != "" {
			t.Fatalf("logout: exit %d, stdout %q, stderr %q", code, out, errOut)
		}
		if _, err := os.Stat(path); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("token file after logout: %v", err)
		}
	}
	if _, _, code := run("", "whoami"); code != exitAuth {
		t.Errorf("whoami after logout: exit %d, want %d", code, exitAuth)
	}
}

func TestACLCommandsOutput(t *testing.T) {
	aclHome(t)
	t.Setenv(envToken, "ROOTSECRET")
	f := startFakeACL(t)
	run := func(stdin string, args ...string) string {
		t.Helper()
		out, errOut, code := runCLIIn(t, stdin, append([]string{"--addr", f.addr}, args...)...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, errOut)
		}
		return out
	}

	if out := run("", "acl", "bootstrap"); out != "ROOTSECRET\n" {
		t.Errorf("acl bootstrap printed %q, want only the token and a newline", out)
	}
	_, errOut, code := runCLIIn(t, "", "--addr", f.addr, "acl", "bootstrap")
	if code != exitExists || strings.Count(errOut, "acl bootstrap:") != 1 {
		t.Errorf("second bootstrap: exit %d, want %d; stderr %q (the prefix once)", code, exitExists, errOut)
	}

	out := run("pw-of-bob\n", "user", "add", "bob", "--uid", "1001", "--gid", "1002", "--groups", "10, 20,", "--management", "--password-stdin")
	for _, w := range []string{"bob", "1001", "1002", "10,20", "yes"} {
		if !strings.Contains(out, w) {
			t.Errorf("user add output lacks %q:\n%s", w, out)
		}
	}
	run("", "user", "add", "carol", "--uid", "0", "--gid", "0")
	run("new-pw\n", "user", "passwd", "bob", "--password-stdin")
	if out := run("", "user", "rm", "bob"); !strings.Contains(out, "revoked 2 token(s)") {
		t.Errorf("user rm printed %q", out)
	}
	f.mu.Lock()
	users := slices.Clone(f.users)
	f.mu.Unlock()
	want := []rpc.ACLUserRequest{
		{ACLUser: rpc.ACLUser{Name: "bob", UID: 1001, GID: 1002, Groups: []uint32{10, 20}, Management: true}, Password: "pw-of-bob"},
		{ACLUser: rpc.ACLUser{Name: "carol"}},
		{ACLUser: rpc.ACLUser{Name: "bob"}, Password: "new-pw"},
		{ACLUser: rpc.ACLUser{Name: "bob"}},
	}
	if fmt.Sprint(users) != fmt.Sprint(want) {
		t.Errorf("user requests:\n got %+v\nwant %+v", users, want)
	}

	out = run("", "user", "list")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "NAME") || !strings.Contains(lines[0], "MANAGEMENT") ||
		!strings.Contains(lines[1], "10,20") || !strings.HasSuffix(lines[2], "yes") {
		t.Errorf("user list:\n%s", out)
	}
	us := array(t, "user list --json", decodeJSON(t, run("", "--json", "user", "list")))
	if len(us) != 2 {
		t.Errorf("user list --json: %v", us)
	}
	hasKeys(t, "user", us[0], "name", "uid", "gid", "groups")

	out = run("", "token", "list")
	for _, w := range []string{"ACCESSOR", "USER", "MANAGEMENT", "DESCRIPTION", "CREATED", "EXPIRES", "0123456789ab", "never", "(expired)"} {
		if !strings.Contains(out, w) {
			t.Errorf("token list lacks %q:\n%s", w, out)
		}
	}
	ts := array(t, "token list --json", decodeJSON(t, run("", "--json", "token", "list")))
	if len(ts) != 2 {
		t.Fatalf("token list --json: %v", ts)
	}
	hasKeys(t, "token", ts[1], "accessor", "user", "created", "expires", "expired")

	if out := run("", "token", "revoke", "ALICESECRET"); out != "revoked aaaaaaaaaaaa\n" {
		t.Errorf("token revoke printed %q", out)
	}
	run("ALICESECRET\n", "token", "revoke", "-")
	if _, errOut, code := runCLIIn(t, "", "--addr", f.addr, "token", "revoke", "nope"); code != exitNotFound {
		t.Errorf("revoke of an unknown token: exit %d, want %d: %s", code, exitNotFound, errOut)
	}
	f.mu.Lock()
	if got := f.revoke; !slices.Equal(got, []string{"ALICESECRET", "ALICESECRET", "nope"}) {
		t.Errorf("revoke requests %v", got)
	}
	f.mu.Unlock()

	w := hasKeys(t, "whoami --json", decodeJSON(t, run("", "--json", "whoami")), "name", "uid", "gid")
	if w["name"] != "root" {
		t.Errorf("whoami --json = %v", w)
	}
	if out := run("", "whoami"); !strings.Contains(out, "management") || !strings.Contains(out, "yes") {
		t.Errorf("whoami:\n%s", out)
	}
	// Every call presented the GHBA_TOKEN.
	f.mu.Lock()
	for i, tok := range f.tokens {
		if tok != "ROOTSECRET" {
			t.Errorf("call %d (%s) presented %q", i, f.calls[i], tok)
		}
	}
	f.mu.Unlock()
}

func TestACLExitCodes(t *testing.T) {
	for _, tt := range []struct {
		err  error
		want int
	}{
		{fmt.Errorf("login: %w", rpc.CodeUnauthenticated.Err("unauthenticated: wrong user name or password")), exitAuth},
		{aclError("leave", fmt.Errorf("x: %w", fs.ErrPermission)), exitDenied},
		{aclError("acl bootstrap", rpc.CodeExist.Err("acl bootstrap: file already exists")), exitExists},
	} {
		if got := exitCode(tt.err); got != tt.want {
			t.Errorf("exitCode(%v) = %d, want %d", tt.err, got, tt.want)
		}
	}
	if got := aclError("acl bootstrap", errors.New("acl bootstrap: done already")).Error(); got != "acl bootstrap: done already" {
		t.Errorf("aclError repeated the prefix: %q", got)
	}
}
