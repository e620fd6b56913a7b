package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ghba/ghba/node/acl"
	"github.com/ghba/ghba/rpc"
)

// procACLServerToken is the acl.server_token of TestProcessACL's nodes.
const procACLServerToken = "process-test-server-token-0123456789"

// procACLRevokeWithin bounds how long a revoked token may still work on a
// node (each node caches a token for a second).
const procACLRevokeWithin = 5 * time.Second

// procShell runs the CLI as one user: its own HOME and XDG_CONFIG_HOME
// (where ghba login saves the token) and, if set, GHBA_TOKEN.
type procShell struct {
	c     *procCluster
	name  string
	home  string
	token string // GHBA_TOKEN ("": none; the saved token, if any, is used)
}

// shell returns a procShell with a fresh home directory.
func (c *procCluster) shell(name, token string) *procShell {
	c.t.Helper()
	home := filepath.Join(c.dir, "home-"+name)
	if err := os.MkdirAll(home, 0o700); err != nil {
		c.t.Fatal(err)
	}
	return &procShell{c: c, name: name, home: home, token: token}
}

// tokenFile is where ghba login saves the shell's token.
func (s *procShell) tokenFile() string { return filepath.Join(s.home, ".config", "ghba", "token") }

// run runs "ghba --addr n --timeout 10s args..." with stdin and returns
// stdout, stderr and the exit code.
func (s *procShell) run(n *procNode, stdin string, args ...string) (string, string, int) {
	t := s.c.t
	t.Helper()
	args = append([]string{"--addr", n.rpcAddr(), "--timeout", "10s"}, args...)
	env := []string{"HOME=" + s.home, "XDG_CONFIG_HOME=" + filepath.Join(s.home, ".config")}
	return s.c.runCLI(s.name+": ", env, stdin, s.token, args...)
}

// expect runs args and fails the test unless the exit code is want; it
// returns stdout.
func (s *procShell) expect(want int, n *procNode, stdin string, args ...string) string {
	s.c.t.Helper()
	out, errOut, code := s.run(n, stdin, args...)
	if code != want {
		s.c.t.Fatalf("%s via %s: ghba %s: exit %d, want %d\nstdout: %s\nstderr: %s",
			s.name, n.id, strings.Join(args, " "), code, want, out, errOut)
	}
	return out
}

// savedToken returns the token ghba login saved for the shell.
func (s *procShell) savedToken() string {
	s.c.t.Helper()
	b, err := os.ReadFile(s.tokenFile())
	if err != nil {
		s.c.t.Fatalf("%s: saved token: %v", s.name, err)
	}
	return strings.TrimSpace(string(b))
}

// waitRefused polls "whoami" on every node until each refuses the shell's
// token (exit 7), failing the test if one still accepts it
// procACLRevokeWithin after since.
func (s *procShell) waitRefused(what string, since time.Time, nodes ...*procNode) {
	t := s.c.t
	t.Helper()
	deadline := since.Add(procACLRevokeWithin)
	for _, n := range nodes {
		for {
			out, errOut, code := s.run(n, "", "whoami")
			if code == exitAuth {
				break
			}
			if code != 0 {
				t.Fatalf("%s: whoami as %s via %s: exit %d, want 0 or %d: %s", what, s.name, n.id, code, exitAuth, errOut)
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: %s's token still accepted by %s %v later: %s", what, s.name, n.id, procACLRevokeWithin, out)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	t.Logf("%s: %s's token refused by every node after %v", what, s.name, time.Since(since).Round(time.Millisecond))
}

// waitServing polls n's /v1/health until it answers 200 (the node serves
// every request it accepts).
func (c *procCluster) waitServing(n *procNode) {
	c.t.Helper()
	hc := &http.Client{Timeout: 5 * time.Second}
	c.waitFor(n.id+" serving", procReadyTimeout, func() { c.checkRunning(n) }, func() (bool, string) {
		resp, err := hc.Get("http://127.0.0.1:" + strconv.Itoa(n.http) + "/v1/health")
		if err != nil {
			return false, err.Error()
		}
		defer resp.Body.Close()
		var b bytes.Buffer
		_, _ = b.ReadFrom(resp.Body)
		return resp.StatusCode == http.StatusOK, resp.Status + ": " + b.String()
	})
}

// TestProcessACL: 3 agents with ACLs on (default policy deny, a server
// token for the nodes' own requests), driven through the CLI as the
// users root (the bootstrap token), alice, bob and bob2, each with its own
// home directory.
//
//   - Before the bootstrap a request without a token exits 7; acl
//     bootstrap prints only the management token; a second one exits 4.
//   - root adds alice and bob; a wrong password exits 7; login prints
//     nothing and saves the token (mode 0600); whoami shows alice.
//   - alice cannot add to root's / (6); the owner of her new directory and
//     file in root's world-writable /home is alice (1000:1000) even when
//     create asks for another --uid/--gid; alice cannot chown (6), bob
//     cannot chmod alice's file (6), alice can, root can chown.
//   - under bob's 0700 directory alice can stat, list or create nothing,
//     however deep, and a missing path there exits 6, not 3; with 0711
//     she can stat and list below it, and once alice owns it (root's
//     chown) too; after chmod 700 and chown back every node refuses her
//     again; root can always stat.
//   - alice cannot make a node leave (6) nor adopt a discovered share
//     (6; root can), does not see /.ghba in ls /, and
//     stat /.ghba exits 6; alice cannot list tokens (6).
//   - A revoked token, and the token of a removed user, is refused (7) by
//     every node within a few seconds.
//   - After 4 wrong passwords even the right one is refused ("try again").
func TestProcessACL(t *testing.T) {
	start := time.Now()
	c := newProcCluster(t, 0)
	c.aclConfig = fmt.Sprintf("acl:\n  enabled: true\n  server_token: %q\n", procACLServerToken)
	for range 3 {
		c.addNode()
	}
	n1, n2, n3 := c.nodes[0], c.nodes[1], c.nodes[2]
	all := c.nodes

	// ---- bootstrap, on node1 alone ----
	c.start(n1)
	c.waitServing(n1)
	anon := c.shell("anonymous", "")
	if _, errOut, code := anon.run(n1, "", "ls", "/"); code != exitAuth {
		t.Fatalf("ls / without a token before the bootstrap: exit %d, want %d: %s", code, exitAuth, errOut)
	}
	out := anon.expect(0, n1, "", "acl", "bootstrap")
	rootToken := strings.TrimSuffix(out, "\n")
	if rootToken == "" || strings.ContainsAny(rootToken, " \t\r\n") {
		t.Fatalf("acl bootstrap printed %q, want only the token and a newline", out)
	}
	if _, errOut, code := anon.run(n1, "", "acl", "bootstrap"); code != exitExists {
		t.Fatalf("second acl bootstrap: exit %d, want %d: %s", code, exitExists, errOut)
	}
	if _, errOut, code := anon.run(n1, "", "ls", "/"); code != exitAuth {
		t.Fatalf("ls / without a token after the bootstrap: exit %d, want %d: %s", code, exitAuth, errOut)
	}
	c.token = rootToken // the harness's own checks run as root from now on
	c.waitReady(n1.id+" leads the group", n1)
	c.start(n2)
	c.start(n3)
	c.waitReady("3 nodes ready", all...)
	t.Logf("cluster with ACLs ready after %v", time.Since(start).Round(time.Millisecond))

	// ---- users ----
	root := c.shell("root", rootToken)
	if w := root.expect(0, n2, "", "whoami"); !strings.Contains(w, "root") {
		t.Errorf("whoami with the bootstrap token:\n%s", w)
	}
	root.expect(0, n1, "alice-password\n", "user", "add", "alice", "--uid", "1000", "--gid", "1000", "--password-stdin")
	root.expect(0, n2, "bob-password\n", "user", "add", "bob", "--uid", "1001", "--gid", "1001", "--password-stdin")
	root.expect(exitExists, n3, "", "user", "add", "bob", "--uid", "1001", "--gid", "1001")
	var users []rpc.ACLUser
	if err := json.Unmarshal([]byte(root.expect(0, n3, "", "--json", "user", "list")), &users); err != nil {
		t.Fatalf("user list --json: %v", err)
	}
	got := map[string]rpc.ACLUser{}
	for _, u := range users {
		got[u.Name] = u
	}
	if a, b, r := got["alice"], got["bob"], got["root"]; a.UID != 1000 || a.GID != 1000 || b.UID != 1001 || b.GID != 1001 || r.UID != 0 || !r.Management || len(users) != 3 {
		t.Errorf("user list --json = %+v", users)
	}

	// ---- login ----
	alice := c.shell("alice", "")
	if _, errOut, code := alice.run(n1, "wrong-password\n", "login", "--user", "alice", "--password-stdin"); code != exitAuth {
		t.Fatalf("login with a wrong password: exit %d, want %d: %s", code, exitAuth, errOut)
	}
	if _, err := os.Stat(alice.tokenFile()); err == nil {
		t.Fatal("a failed login saved a token")
	}
	if out := alice.expect(0, n1, "alice-password\n", "login", "--user", "alice", "--password-stdin"); out != "" {
		t.Errorf("login printed %q, want nothing", out)
	}
	if fi, err := os.Stat(alice.tokenFile()); err != nil {
		t.Fatalf("token file after login: %v", err)
	} else if fi.Mode().Perm() != 0o600 {
		t.Errorf("token file mode %v, want 0600", fi.Mode().Perm())
	}
	if fi, err := os.Stat(filepath.Dir(alice.tokenFile())); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("token directory: %v, %v; want mode 0700", fi.Mode().Perm(), err)
	}
	if ents, _ := os.ReadDir(filepath.Dir(alice.tokenFile())); len(ents) != 1 {
		t.Errorf("token directory holds %d entries, want only the token", len(ents))
	}
	aliceToken := alice.savedToken()
	if w := alice.expect(0, n2, "", "whoami"); !strings.Contains(w, "alice") || !strings.Contains(w, "1000") {
		t.Errorf("whoami as alice:\n%s", w)
	}
	var me rpc.ACLUser
	if err := json.Unmarshal([]byte(alice.expect(0, n3, "", "--json", "whoami")), &me); err != nil || me.Name != "alice" || me.UID != 1000 || me.GID != 1000 || me.Management {
		t.Errorf("whoami --json as alice = %+v (%v)", me, err)
	}
	bob := c.shell("bob", "")
	bob.expect(0, n2, "bob-password\n", "login", "--user", "bob", "--password-stdin")

	// ---- ownership from the token, chown and chmod ----
	// / is root's (0755): alice may not add to it, but to a directory
	// everyone may write.
	alice.expect(exitDenied, n1, "", "mkdir", "/a")
	root.expect(0, n1, "", "mkdir", "--mode", "777", "/home")
	alice.expect(0, n1, "", "mkdir", "/home/a")
	alice.expect(0, n2, "", "create", "--uid", "0", "--gid", "0", "/home/a/f")
	stat := func(sh *procShell, n *procNode, p string) rpc.StatResponse {
		t.Helper()
		var st rpc.StatResponse
		if err := json.Unmarshal([]byte(sh.expect(0, n, "", "--json", "stat", p)), &st); err != nil {
			t.Fatalf("stat --json %s: %v", p, err)
		}
		return st
	}
	for _, p := range []string{"/home/a", "/home/a/f"} {
		if st := stat(alice, n3, p); st.UID != 1000 || st.GID != 1000 {
			t.Errorf("%s made by alice: owner %d:%d, want 1000:1000", p, st.UID, st.GID)
		}
	}
	alice.expect(exitDenied, n3, "", "chown", "1001:1001", "/home/a/f")
	bob.expect(exitDenied, n1, "", "chmod", "700", "/home/a/f")
	alice.expect(0, n1, "", "chmod", "640", "/home/a/f") // the owner may
	root.expect(0, n2, "", "chown", "1001:1001", "/home/a/f")
	if st := stat(bob, n1, "/home/a/f"); st.UID != 1001 || st.GID != 1001 || st.Mode&0o777 != 0o640 {
		t.Errorf("/home/a/f after chmod 640 by alice and chown 1001:1001 by root: %d:%d mode %o", st.UID, st.GID, st.Mode)
	}

	// ---- alice's private directory: bob can neither list it nor
	// create in, delete from or rename out of it; root can ----
	alice.expect(0, n1, "", "mkdir", "--mode", "700", "/home/p")
	alice.expect(0, n2, "", "create", "/home/p/secret")
	alice.expect(0, n3, "", "mkdir", "/home/p/sub")
	bob.expect(exitDenied, n1, "", "ls", "/home/p")
	bob.expect(exitDenied, n2, "", "create", "/home/p/bobs")
	bob.expect(exitDenied, n3, "", "mkdir", "/home/p/bobsdir")
	bob.expect(exitDenied, n1, "", "rm", "/home/p/secret")
	bob.expect(exitDenied, n2, "", "rm", "-r", "/home/p/sub")
	bob.expect(exitDenied, n3, "", "mv", "/home/p/secret", "/home/stolen")
	bob.expect(0, n1, "", "create", "/home/bobf")
	bob.expect(exitDenied, n2, "", "mv", "/home/bobf", "/home/p/planted") // into it
	if ls := root.expect(0, n2, "", "ls", "/home/p"); !strings.Contains(ls, "secret") || !strings.Contains(ls, "sub/") {
		t.Errorf("ls /home/p as root after bob's attempts:\n%s", ls)
	}
	// find shows a user what it could stat: bob cannot search /home/p.
	if out := alice.expect(0, n3, "", "find", "/home", "--name", "secret"); strings.TrimSpace(out) != "/home/p/secret" {
		t.Errorf("find as alice: %q", out)
	}
	bob.expect(exitNotFound, n3, "", "find", "/home", "--name", "secret")
	// import (batched creates) with a user's token, owned by the user.
	tree := filepath.Join(c.dir, "alice-tree")
	if err := os.MkdirAll(filepath.Join(tree, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(tree, "d", "f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	alice.expect(0, n1, "", "import", tree, "--to", "/home/p/imp", "--no-owners", "--no-progress")
	if st := alice.expect(0, n2, "", "--json", "stat", "/home/p/imp/d/f"); !strings.Contains(st, `"uid": 1000`) {
		t.Errorf("imported file as alice: %s", st)
	}
	bob.expect(exitDenied, n1, "", "import", tree, "--to", "/home/p/bobs", "--no-owners", "--no-progress")
	root.expect(0, n3, "", "mv", "/home/p/secret", "/home/p/kept")
	alice.expect(0, n1, "", "rm", "/home/p/kept")

	// ---- a sticky directory (as /tmp): only an entry's owner removes
	// or renames it ----
	root.expect(0, n1, "", "mkdir", "--mode", "1777", "/tmp")
	alice.expect(0, n2, "", "create", "/tmp/af")
	alice.expect(0, n3, "", "mkdir", "/tmp/ad")
	bob.expect(exitDenied, n1, "", "rm", "/tmp/af")
	bob.expect(exitDenied, n2, "", "mv", "/tmp/af", "/tmp/bf")
	bob.expect(exitDenied, n3, "", "mv", "/tmp/ad", "/tmp/bd")
	bob.expect(0, n1, "", "create", "/tmp/bf")
	bob.expect(exitDenied, n2, "", "mv", "/tmp/bf", "/tmp/af") // over alice's file
	bob.expect(0, n3, "", "rm", "/tmp/bf")
	alice.expect(0, n1, "", "mv", "/tmp/af", "/tmp/af2")
	alice.expect(0, n2, "", "rm", "/tmp/af2")
	root.expect(0, n3, "", "rm", "-r", "/tmp/ad")

	// ---- ancestor codes: alice may reach nothing under bob's 0700
	// directory, however deep, nor learn what is missing there ----
	bob.expect(0, n1, "", "mkdir", "/home/b")
	bob.expect(0, n2, "", "mkdir", "/home/b/sub")
	bob.expect(0, n3, "", "create", "/home/b/sub/f")
	bob.expect(0, n1, "", "chmod", "700", "/home/b")
	stat(alice, n2, "/home/b") // / and /home let her search
	alice.expect(exitDenied, n3, "", "stat", "/home/b/sub/f")
	alice.expect(exitDenied, n1, "", "ls", "/home/b/sub")
	alice.expect(exitDenied, n2, "", "create", "/home/b/sub/g")
	alice.expect(exitDenied, n3, "", "stat", "/home/b/sub/missing")
	alice.expect(exitDenied, n1, "", "stat", "/home/b/missing")
	if st, want := stat(root, n2, "/home/b/sub/f"), []rpc.AncestorCode{{Depth: 2, Mode: 0o100, UID: 1001, GID: 1001}}; !slices.Equal(st.Ancestors, want) {
		t.Errorf("stat --json /home/b/sub/f: ancestors %+v, want %+v", st.Ancestors, want)
	}
	bob.expect(0, n2, "", "chmod", "711", "/home/b") // search for all, no listing
	stat(alice, n3, "/home/b/sub/f")
	alice.expect(0, n1, "", "ls", "/home/b/sub")
	alice.expect(exitDenied, n2, "", "ls", "/home/b")
	alice.expect(exitNotFound, n3, "", "stat", "/home/b/sub/missing")
	bob.expect(0, n3, "", "chmod", "700", "/home/b")
	root.expect(0, n1, "", "chown", "1000:1000", "/home/b") // alice owns it now
	stat(alice, n2, "/home/b/sub/f")
	root.expect(0, n3, "", "chown", "1001:1001", "/home/b")
	for _, n := range all {
		alice.expect(exitDenied, n, "", "stat", "/home/b/sub/f")
		stat(root, n, "/home/b/sub/f")
	}

	// ---- what a user without the management role cannot do ----
	alice.expect(exitDenied, n3, "", "leave")
	share := c.startShareAgent(n1, rootToken, "--machine", "ws1", "--no-scan", "docs=/srv/docs")
	c.waitDiscovered(n2, "ws1", "docs")
	alice.expect(exitDenied, n2, "", "source", "adopt", "ws1", "docs")
	root.expect(0, n3, "", "source", "adopt", "ws1", "docs")
	share.stop(t)
	alice.expect(exitDenied, n1, "", "token", "list")
	alice.expect(exitDenied, n1, "x-password\n", "user", "add", "mallory", "--uid", "0", "--gid", "0", "--password-stdin")
	if ls := alice.expect(0, n2, "", "ls", "/"); strings.Contains(ls, ".ghba") || !strings.Contains(ls, "home/") {
		t.Errorf("ls / as alice:\n%s", ls)
	}
	if ls := root.expect(0, n2, "", "--json", "ls", "/"); strings.Contains(ls, ".ghba") {
		t.Errorf("ls / as root shows the reserved directory:\n%s", ls)
	}
	alice.expect(exitDenied, n1, "", "stat", "/.ghba")
	alice.expect(exitDenied, n2, "", "ls", "/.ghba/acl/tokens")
	c.checkRunning(all...)

	// ---- revocation: alice's token ----
	for _, n := range all { // every node has alice's token in its cache
		alice.expect(0, n, "", "whoami")
	}
	var tokens []rpc.ACLTokenInfo
	if err := json.Unmarshal([]byte(root.expect(0, n1, "", "--json", "token", "list")), &tokens); err != nil {
		t.Fatalf("token list --json: %v", err)
	}
	accessor := acl.Accessor(acl.SecretHash(aliceToken))
	if !strings.Contains(root.expect(0, n1, "", "token", "list"), accessor) {
		t.Errorf("token list lacks alice's accessor %s: %+v", accessor, tokens)
	}
	revoked := time.Now()
	if out := root.expect(0, n1, "", "token", "revoke", aliceToken); out != "revoked "+accessor+"\n" {
		t.Errorf("token revoke printed %q, want %q", out, "revoked "+accessor+"\n")
	}
	alice.waitRefused("token revoke", revoked, all...)
	root.expect(exitNotFound, n2, "", "token", "revoke", aliceToken)

	// ---- user rm: bob's token ----
	for _, n := range all {
		bob.expect(0, n, "", "whoami")
	}
	removed := time.Now()
	if out := root.expect(0, n2, "", "user", "rm", "bob"); !strings.Contains(out, "revoked 1 token") {
		t.Errorf("user rm bob printed %q, want the one token revoked", out)
	}
	bob.waitRefused("user rm", removed, all...)
	bob.expect(exitAuth, n3, "bob-password\n", "login", "--user", "bob", "--password-stdin")

	// ---- logout ----
	alice.expect(0, n1, "", "logout")
	if _, err := os.Stat(alice.tokenFile()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("token file after logout: %v", err)
	}
	alice.expect(0, n1, "", "logout")
	alice.expect(exitAuth, n1, "", "whoami")

	// ---- login back-off (at one node: each node counts its own) ----
	root.expect(0, n1, "bob2-password\n", "user", "add", "bob2", "--uid", "1002", "--gid", "1002", "--password-stdin")
	bob2 := c.shell("bob2", "")
	var last time.Time
	for i := range 4 {
		if _, errOut, code := bob2.run(n3, "not-the-password\n", "login", "--user", "bob2", "--password-stdin"); code != exitAuth {
			t.Fatalf("wrong password #%d: exit %d, want %d: %s", i+1, code, exitAuth, errOut)
		}
		last = time.Now()
	}
	_, errOut, code := bob2.run(n3, "bob2-password\n", "login", "--user", "bob2", "--password-stdin")
	if code != exitAuth || !strings.Contains(errOut, "try again") {
		t.Errorf("right password right after 4 wrong ones (%v later): exit %d, want %d with \"try again\": %s",
			time.Since(last).Round(time.Millisecond), code, exitAuth, errOut)
	}
	if _, err := os.Stat(bob2.tokenFile()); err == nil {
		t.Error("a login refused by the back-off saved a token")
	}
	c.checkRunning(all...)
	t.Logf("TestProcessACL: %v in all", time.Since(start).Round(time.Millisecond))
}

// TestProcessACLTokenExpiry: with token_ttl 3s a login token works, then,
// once expired, is refused (exit 7, "expired") within a second or two of
// its expiry; a new login works again.
func TestProcessACLTokenExpiry(t *testing.T) {
	const ttl = 3 * time.Second
	c := newProcCluster(t, 0)
	c.aclConfig = fmt.Sprintf("acl:\n  enabled: true\n  token_ttl: %s\n  server_token: %q\n", ttl, procACLServerToken)
	n := c.addNode()
	c.start(n)
	c.waitServing(n)
	anon := c.shell("anonymous", "")
	root := c.shell("root", strings.TrimSpace(anon.expect(0, n, "", "acl", "bootstrap")))
	root.expect(0, n, "carol-password\n", "user", "add", "carol", "--uid", "1002", "--gid", "1002", "--password-stdin")
	carol := c.shell("carol", "")
	loggedIn := time.Now()
	carol.expect(0, n, "carol-password\n", "login", "--user", "carol", "--password-stdin")
	if w := carol.expect(0, n, "", "whoami"); !strings.Contains(w, "carol") {
		t.Fatalf("whoami right after login:\n%s", w)
	}
	deadline := loggedIn.Add(ttl + procACLRevokeWithin)
	for {
		_, errOut, code := carol.run(n, "", "whoami")
		if code == exitAuth {
			if !strings.Contains(errOut, "expired") {
				t.Errorf("refused token: %q does not say it expired", errOut)
			}
			if since := time.Since(loggedIn); since < ttl {
				t.Errorf("token refused %v after the login, before its ttl %v", since, ttl)
			}
			break
		}
		if code != 0 {
			t.Fatalf("whoami: exit %d: %s", code, errOut)
		}
		if time.Now().After(deadline) {
			t.Fatalf("token still accepted %v after the login (ttl %v)", time.Since(loggedIn).Round(time.Millisecond), ttl)
		}
		time.Sleep(100 * time.Millisecond)
	}
	carol.expect(0, n, "carol-password\n", "login", "--user", "carol", "--password-stdin")
	carol.expect(0, n, "", "whoami")
}
