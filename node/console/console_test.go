package console

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ghba/ghba/rpc"
	"github.com/ghba/ghba/rpc/client"
)

// Users and tokens of the fake cluster.
const (
	testUser     = "alice"
	testPassword = "alice-password"
	testToken    = "alice-token-0123456789"
)

// fakeNode counts what the console's sampler reads.
type fakeNode struct{ ops atomic.Uint64 }

func (f *fakeNode) Counters() Counters {
	return Counters{Ops: f.ops.Add(10), Levels: [4]uint64{1, 2, 3, 4}}
}

// startFakeCluster serves the RPC methods the console calls, with an
// Authenticate hook that, like a node with ACLs on (aclOn), lets ACL.Login and
// Cluster.Status through and wants testToken for the others.
func startFakeCluster(t *testing.T, aclOn bool) string {
	t.Helper()
	srv := rpc.NewServer(rpc.ServerOptions{Authenticate: func(ctx context.Context, method, token string) (context.Context, error) {
		if !aclOn || method == rpc.MethodACLLogin || method == rpc.MethodStatus || token == testToken {
			return ctx, nil
		}
		return nil, fmt.Errorf("%s: %w: bad token", method, rpc.ErrUnauthenticated)
	}})
	rpc.Register(srv, rpc.MethodACLLogin, func(_ context.Context, r *rpc.ACLLoginRequest) (*rpc.ACLTokenResponse, error) {
		if r.User != testUser || r.Password != testPassword {
			return nil, fmt.Errorf("login: %w: wrong password", rpc.ErrUnauthenticated)
		}
		return &rpc.ACLTokenResponse{Token: testToken, User: testUser, Expires: time.Now().Add(time.Hour).UnixNano()}, nil
	})
	rpc.Register(srv, rpc.MethodStatus, func(context.Context, *rpc.StatusRequest) (*rpc.StatusResponse, error) {
		return &rpc.StatusResponse{NodeID: "n1", Group: "g1", Status: "alive", RaftRole: "leader", Leader: "n1",
			Scheme: "auto", Routing: "hba"}, nil
	})
	rpc.Register(srv, rpc.MethodMembers, func(context.Context, *rpc.MembersRequest) (*rpc.MembersResponse, error) {
		return &rpc.MembersResponse{Members: []rpc.Member{{ID: "n1", Group: "g1", Status: "alive", RaftRole: "leader"}}}, nil
	})
	rpc.Register(srv, rpc.MethodGroups, func(context.Context, *rpc.GroupsRequest) (*rpc.GroupsResponse, error) {
		return &rpc.GroupsResponse{Groups: []rpc.GroupInfo{{Group: "g1", Members: []string{"n1"}, Leader: "n1", Settled: true}}, Settled: true}, nil
	})
	rpc.Register(srv, rpc.MethodShards, func(context.Context, *rpc.ShardsRequest) (*rpc.ShardsResponse, error) {
		return &rpc.ShardsResponse{Shards: []rpc.ShardInfo{{Shard: "n1", Group: "g1", Leader: "n1", Replicas: []string{"n1"}, Files: 3}}}, nil
	})
	rpc.Register(srv, rpc.MethodSourceList, func(context.Context, *rpc.SourceListRequest) (*rpc.SourceListResponse, error) {
		return &rpc.SourceListResponse{Sources: []rpc.Source{{Name: "share", Machine: "ws1", Dir: "/srv/share", Dest: "/sources/share",
			Every: "10m0s", Content: 4096, Entries: 1234, Errors: 1, LastError: "/srv/share/x: permission denied"}}}, nil
	})
	rpc.Register(srv, rpc.MethodSourceDiscover, func(context.Context, *rpc.SourceDiscoverRequest) (*rpc.SourceDiscoverResponse, error) {
		return &rpc.SourceDiscoverResponse{Machines: []rpc.DiscoveredMachine{{Machine: "ws1", Status: "alive", Shares: []rpc.DiscoveredShare{
			{Name: "share", Dir: "/srv/share", Source: "share"}, {Name: "home", Dir: "/home"}}}}}, nil
	})
	rpc.Register(srv, rpc.MethodFind, func(_ context.Context, r *rpc.FindRequest) (*rpc.FindResponse, error) {
		return &rpc.FindResponse{
			Inodes: []rpc.Inode{{Path: "/docs/Report", Type: rpc.TypeFile}, {Path: "/docs/report", Type: rpc.TypeFile}},
			Stages: []string{"related", "exact"},
		}, nil
	})
	rpc.Register(srv, rpc.MethodStat, func(_ context.Context, r *rpc.StatRequest) (*rpc.StatResponse, error) {
		switch r.Path {
		case "/", "/docs":
			return &rpc.StatResponse{Inode: rpc.Inode{Path: r.Path, Type: rpc.TypeDir, Mode: 0o755}, Level: rpc.LevelL1}, nil
		case "/docs/report":
			return &rpc.StatResponse{Inode: rpc.Inode{Path: r.Path, Type: rpc.TypeFile, Size: 42, Mode: 0o644}, Level: rpc.LevelL2}, nil
		}
		return nil, fmt.Errorf("stat %s: %w", r.Path, fs.ErrNotExist)
	})
	rpc.Register(srv, rpc.MethodReadDir, func(_ context.Context, r *rpc.ReadDirRequest) (*rpc.ReadDirResponse, error) {
		if r.Path == "/docs" {
			return &rpc.ReadDirResponse{Entries: []rpc.DirEntry{{Name: "Report", Type: rpc.TypeFile}, {Name: "report", Type: rpc.TypeFile}}}, nil
		}
		return &rpc.ReadDirResponse{Entries: []rpc.DirEntry{{Name: "docs", Type: rpc.TypeDir}}}, nil
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(context.Background(), ln)
	}()
	t.Cleanup(func() {
		_ = srv.Close()
		<-done
	})
	return ln.Addr().String()
}

// newTestConsole starts a console for the fake cluster behind httptest.
func newTestConsole(t *testing.T, aclOn, secure bool) (*Server, *httptest.Server) {
	t.Helper()
	s, err := New(&fakeNode{}, Options{NodeID: "n1", RPCAddr: startFakeCluster(t, aclOn), ACLEnabled: aclOn, Secure: secure,
		SampleInterval: 10 * time.Millisecond, History: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(func() {
		ts.Close()
		_ = s.Close()
	})
	return s, ts
}

// browser is an HTTP client with a cookie jar that does not follow
// redirects, so that tests see them.
func browser(t *testing.T) *http.Client {
	t.Helper()
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	return &http.Client{Jar: jar, Timeout: 10 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error {
		return http.ErrUseLastResponse
	}}
}

// do runs a request and returns the status, the Location and the body.
func do(t *testing.T, c *http.Client, method, u string, form url.Values, hdr map[string]string) (int, string, string, *http.Response) {
	t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, u, body)
	if err != nil {
		t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, u, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Location"), string(b), resp
}

// login posts the login form and returns the answer.
func login(t *testing.T, c *http.Client, base, user, password string) (int, string, string, *http.Response) {
	t.Helper()
	return do(t, c, "POST", base+"/login", url.Values{"user": {user}, "password": {password}, "next": {"/browse?path=/docs"}}, nil)
}

var csrfRe = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

func TestRedirectWithoutSession(t *testing.T) {
	_, ts := newTestConsole(t, true, false)
	c := browser(t)
	for _, p := range []string{"/", "/search?q=report", "/browse?path=/docs"} {
		code, loc, _, _ := do(t, c, "GET", ts.URL+p, nil, nil)
		if code != http.StatusSeeOther || loc != "/login?next="+url.QueryEscape(p) {
			t.Errorf("GET %s without a session: %d to %q, want 303 to the login page", p, code, loc)
		}
	}
	// A cookie that names no session is no session either.
	u, _ := url.Parse(ts.URL)
	c.Jar.SetCookies(u, []*http.Cookie{{Name: "ghba_session_n1", Value: "forged"}})
	if code, loc, _, _ := do(t, c, "GET", ts.URL+"/", nil, nil); code != http.StatusSeeOther || !strings.HasPrefix(loc, "/login") {
		t.Errorf("GET / with a forged cookie: %d to %q", code, loc)
	}
	if code, _, body, _ := do(t, c, "GET", ts.URL+"/login", nil, nil); code != http.StatusOK || !strings.Contains(body, `id="login"`) {
		t.Errorf("GET /login: %d %s", code, body)
	}
}

func TestLogin(t *testing.T) {
	for _, tc := range []struct {
		name, user, password string
		secure               bool
		wantCode             int
		wantError            string
	}{
		{"wrong password", testUser, "nope", false, http.StatusUnauthorized, "Wrong user name or password."},
		{"unknown user", "mallory", testPassword, false, http.StatusUnauthorized, "Wrong user name or password."},
		{"empty password", testUser, "", false, http.StatusBadRequest, "Enter a user name and a password."},
		{"accepted", testUser, testPassword, false, http.StatusSeeOther, ""},
		{"accepted over TLS", testUser, testPassword, true, http.StatusSeeOther, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, ts := newTestConsole(t, true, tc.secure)
			c := browser(t)
			code, loc, body, resp := login(t, c, ts.URL, tc.user, tc.password)
			if code != tc.wantCode {
				t.Fatalf("login: %d, want %d: %s", code, tc.wantCode, body)
			}
			if tc.wantError != "" {
				if !strings.Contains(body, `id="error"`) || !strings.Contains(body, tc.wantError) || !strings.Contains(body, `id="login"`) {
					t.Errorf("refused login page lacks the form or %q: %s", tc.wantError, body)
				}
				if len(resp.Cookies()) != 0 || s.sess.len() != 0 {
					t.Errorf("refused login set cookies %v (%d sessions)", resp.Cookies(), s.sess.len())
				}
				return
			}
			if loc != "/browse?path=/docs" {
				t.Errorf("login redirects to %q, want the page asked for", loc)
			}
			cs := resp.Cookies()
			if len(cs) != 1 {
				t.Fatalf("cookies %v", cs)
			}
			ck := cs[0]
			if ck.Name != "ghba_session_n1" || !ck.HttpOnly || ck.SameSite != http.SameSiteStrictMode || ck.Secure != tc.secure || ck.Path != "/" {
				t.Errorf("session cookie %+v: want HttpOnly, SameSite=Strict, Secure=%v", ck, tc.secure)
			}
			if strings.Contains(ck.Value, testToken) {
				t.Error("the cookie holds the ACL token")
			}
			if tc.secure {
				return // the jar does not send a Secure cookie over http
			}
			code, _, body, _ = do(t, c, "GET", ts.URL+loc, nil, nil)
			if code != http.StatusOK || !strings.Contains(body, `id="whoami">alice<`) || !strings.Contains(body, ">report</a>") {
				t.Errorf("browse after login: %d %s", code, body)
			}
		})
	}
}

func TestLoginNextIsLocal(t *testing.T) {
	for in, want := range map[string]string{"/search?q=a": "/search?q=a", "//evil.example/": "/", "https://evil.example/": "/", "": "/", "/\\evil": "/"} {
		if got := safeNext(in); got != want {
			t.Errorf("safeNext(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestLogoutNeedsCSRF(t *testing.T) {
	s, ts := newTestConsole(t, true, false)
	c := browser(t)
	if code, _, body, _ := login(t, c, ts.URL, testUser, testPassword); code != http.StatusSeeOther {
		t.Fatalf("login: %d %s", code, body)
	}
	_, _, body, _ := do(t, c, "GET", ts.URL+"/", nil, nil)
	m := csrfRe.FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("no CSRF token in the page: %s", body)
	}
	csrf := m[1]
	for _, tc := range []struct {
		name string
		form url.Values
		hdr  map[string]string
	}{
		{"no token", url.Values{}, nil},
		{"wrong token", url.Values{csrfField: {"x" + csrf}}, nil},
		{"cross-site origin", url.Values{csrfField: {csrf}}, map[string]string{"Origin": "http://evil.example"}},
		{"cross-site fetch", url.Values{csrfField: {csrf}}, map[string]string{"Sec-Fetch-Site": "cross-site"}},
	} {
		if code, _, _, _ := do(t, c, "POST", ts.URL+"/logout", tc.form, tc.hdr); code != http.StatusForbidden {
			t.Errorf("logout, %s: %d, want 403", tc.name, code)
		}
	}
	if s.sess.len() != 1 {
		t.Fatalf("%d sessions after refused logouts, want 1", s.sess.len())
	}
	code, loc, _, _ := do(t, c, "POST", ts.URL+"/logout", url.Values{csrfField: {csrf}}, map[string]string{"Origin": ts.URL})
	if code != http.StatusSeeOther || loc != "/login" || s.sess.len() != 0 {
		t.Fatalf("logout: %d to %q, %d sessions", code, loc, s.sess.len())
	}
	if code, loc, _, _ := do(t, c, "GET", ts.URL+"/", nil, nil); code != http.StatusSeeOther || !strings.HasPrefix(loc, "/login") {
		t.Errorf("GET / after logout: %d to %q", code, loc)
	}
}

func TestCrossSiteLoginRefused(t *testing.T) {
	_, ts := newTestConsole(t, true, false)
	code, _, _, _ := do(t, browser(t), "POST", ts.URL+"/login",
		url.Values{"user": {testUser}, "password": {testPassword}}, map[string]string{"Origin": "http://evil.example"})
	if code != http.StatusForbidden {
		t.Errorf("cross-site login: %d, want 403", code)
	}
}

func TestACLsOffIsOpen(t *testing.T) {
	s, ts := newTestConsole(t, false, false)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.Run(ctx)
	}()
	defer func() {
		cancel()
		<-done
	}()
	deadline := time.Now().Add(10 * time.Second)
	for len(s.History()) < 3 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	c := browser(t)
	for _, tc := range []struct{ path, want string }{
		{"/?refresh=0", `class="series"`},
		{"/", `<table id="members">`},
		{"/", `routing <b id="routing">hba</b> (scheme auto)`},
		{"/", `<td>share</td><td>ws1</td><td>/srv/share</td><td><a href="/browse?path=%2fsources%2fshare">/sources/share</a>`},
		{"/", `<td>ws1</td><td>alive</td><td>home</td><td>/home</td>
<td><code>ghba source adopt ws1 home</code></td>`},
		{"/", `<td>1234</td><td>1</td><td>/srv/share/x: permission denied</td>`},
		{"/search?q=report", `class="stage">exact<`},
		{"/browse?path=/docs/report", `<td>42</td>`},
		{"/login", ""},
	} {
		code, loc, body, resp := do(t, c, "GET", ts.URL+tc.path, nil, nil)
		if tc.want == "" {
			if code != http.StatusSeeOther || loc != "/" {
				t.Errorf("GET %s with ACLs off: %d to %q, want 303 to /", tc.path, code, loc)
			}
			continue
		}
		if code != http.StatusOK || !strings.Contains(body, tc.want) || !strings.Contains(body, `id="acl-off"`) {
			t.Errorf("GET %s with ACLs off: %d, want 200 with %q and the banner: %s", tc.path, code, tc.want, body)
		}
		if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") {
			t.Errorf("GET %s: CSP %q", tc.path, csp)
		}
	}
	// The exact match comes before the related one, as in ghba find.
	_, _, body, _ := do(t, c, "GET", ts.URL+"/search?q=report", nil, nil)
	if e, r := strings.Index(body, "/docs/report<"), strings.Index(body, "/docs/Report<"); e < 0 || r < 0 || e > r {
		t.Errorf("search: exact at %d, related at %d: %s", e, r, body)
	}
}

func TestStaticEmbedded(t *testing.T) {
	_, ts := newTestConsole(t, false, false)
	code, _, body, _ := do(t, browser(t), "GET", ts.URL+"/static/console.css", nil, nil)
	if code != http.StatusOK || !strings.Contains(body, "svg.chart") {
		t.Errorf("GET /static/console.css: %d", code)
	}
}

func TestSessionsBounded(t *testing.T) {
	ss := newSessions(2, time.Minute)
	now := time.Now()
	mk := func() *session {
		return &session{client: client.New(client.Options{Addrs: []string{"127.0.0.1:1"}}), expires: now.Add(time.Hour)}
	}
	a := ss.add(mk(), now)
	b := ss.add(mk(), now.Add(time.Second))
	if ss.get(a, now.Add(2*time.Second)) == nil {
		t.Fatal("session a gone")
	}
	c := ss.add(mk(), now.Add(3*time.Second)) // evicts b, the least recently used
	if ss.get(b, now.Add(4*time.Second)) != nil || ss.get(a, now.Add(4*time.Second)) == nil || ss.get(c, now.Add(4*time.Second)) == nil {
		t.Error("eviction did not drop the least recently used session")
	}
	if ss.get(a, now.Add(2*time.Minute)) != nil {
		t.Error("an idle session is still served")
	}
	ss.sweep(now.Add(2 * time.Hour))
	if ss.len() != 0 {
		t.Errorf("%d sessions after the sweep", ss.len())
	}
}
