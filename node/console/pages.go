package console

import (
	"context"
	"errors"
	"io/fs"
	"net/http"
	"net/url"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/ghba/ghba/node/search"
	"github.com/ghba/ghba/rpc"
)

// csrfField is the form field of the CSRF token.
const csrfField = "csrf"

// searchLimit bounds the results a search page shows; browsePage the
// entries of one page of a directory.
const (
	searchLimit = 200
	browsePage  = 100
)

func urlQueryEscape(s string) string { return url.QueryEscape(s) }

// safeNext returns where to go after the login: a local path of the
// console, "/" for anything else (an open redirect otherwise).
func safeNext(next string) string {
	if !strings.HasPrefix(next, "/") || strings.HasPrefix(next, "//") || strings.HasPrefix(next, "/\\") {
		return "/"
	}
	return next
}

// loginData is the login page's data.
type loginData struct {
	Next string
	User string
}

// serveLoginForm shows the login form (ACLs off, or already logged in:
// the console itself).
func (s *Server) serveLoginForm(w http.ResponseWriter, r *http.Request) {
	next := safeNext(r.URL.Query().Get("next"))
	if !s.opts.ACLEnabled {
		http.Redirect(w, r, next, http.StatusSeeOther)
		return
	}
	if ss, _ := s.session(r); ss != nil {
		http.Redirect(w, r, next, http.StatusSeeOther)
		return
	}
	s.render(w, http.StatusOK, "login", &page{Title: "Log in", NodeID: s.opts.NodeID, Data: loginData{Next: next}})
}

// serveLogin exchanges the form's user name and password for a token
// (ACL.Login, which rate-limits failures) and starts a session.
func (s *Server) serveLogin(w http.ResponseWriter, r *http.Request) {
	if !s.opts.ACLEnabled {
		http.Redirect(w, r, "/", http.StatusSeeOther)
		return
	}
	if !sameOrigin(r) {
		http.Error(w, "cross-site login refused", http.StatusForbidden)
		return
	}
	user, password := r.PostFormValue("user"), r.PostFormValue("password")
	next := safeNext(r.PostFormValue("next"))
	fail := func(code int, msg string) {
		s.render(w, code, "login", &page{Title: "Log in", NodeID: s.opts.NodeID, Error: msg,
			Data: loginData{Next: next, User: user}})
	}
	if user == "" || password == "" {
		fail(http.StatusBadRequest, "Enter a user name and a password.")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.opts.CallTimeout)
	defer cancel()
	anon := s.newClient("")
	tok, err := anon.ACLLogin(ctx, user, password)
	_ = anon.Close()
	if err != nil {
		switch {
		case errors.Is(err, rpc.ErrUnauthenticated) && strings.Contains(err.Error(), "try again"):
			fail(http.StatusTooManyRequests, "Too many failed logins for this user: try again later.")
		case errors.Is(err, rpc.ErrUnauthenticated):
			s.log.Info("console: failed login", "user", user, "remote", r.RemoteAddr)
			fail(http.StatusUnauthorized, "Wrong user name or password.")
		default:
			s.log.Warn("console: login failed", "user", user, "err", err)
			fail(http.StatusServiceUnavailable, "Login failed: "+err.Error())
		}
		return
	}
	now := s.now()
	expires := now.Add(maxSessionLife)
	if t := time.Unix(0, tok.Expires); tok.Expires != 0 && t.Before(expires) {
		expires = t
	}
	sid := s.sess.add(&session{user: tok.User, client: s.newClient(tok.Token), expires: expires}, now)
	s.log.Info("console: login", "user", tok.User, "remote", r.RemoteAddr)
	http.SetCookie(w, s.cookie(sid, 0))
	http.Redirect(w, r, next, http.StatusSeeOther)
}

// serveLogout ends the session: a POST with the session's CSRF token.
func (s *Server) serveLogout(w http.ResponseWriter, r *http.Request) {
	if !s.opts.ACLEnabled {
		http.Redirect(w, r, "/", http.StatusSeeOther)
		return
	}
	ss, sid := s.session(r)
	if ss == nil {
		http.Redirect(w, r, "/login", http.StatusSeeOther)
		return
	}
	if !sameOrigin(r) || !checkCSRF(ss, r) {
		s.log.Warn("console: logout without a valid CSRF token refused", "user", ss.user, "remote", r.RemoteAddr)
		http.Error(w, "invalid or missing CSRF token", http.StatusForbidden)
		return
	}
	s.sess.remove(sid)
	s.log.Info("console: logout", "user", ss.user)
	http.SetCookie(w, s.cookie("", -1))
	http.Redirect(w, r, "/login", http.StatusSeeOther)
}

// clusterData is the cluster page's data.
type clusterData struct {
	Self    *rpc.StatusResponse
	Members []rpc.Member
	Groups  *rpc.GroupsResponse
	Shards  []rpc.ShardInfo
	Sources []rpc.Source
	// Discovered are the machines that announce shares (ghba share-agent).
	Discovered []rpc.DiscoveredMachine
	Charts     []Chart
	// Interval is the sample interval of the charts.
	Interval time.Duration
}

// pageCall hands the result of one of a page's calls to use, or records
// its error on the page; it reports whether the page must stop
// (callFailed: the session ended).
func pageCall[T any](s *Server, w http.ResponseWriter, r *http.Request, v *view, res T, err error, use func(T)) bool {
	if err != nil {
		return s.callFailed(w, r, v, err)
	}
	use(res)
	return false
}

// serveCluster shows this node's status, the members, groups, shards,
// sources (the trees "ghba scan" keeps imported) and the shares machines
// announce (ghba share-agent), and the charts of the
// recent samples.
func (s *Server) serveCluster(w http.ResponseWriter, r *http.Request, v *view) {
	ctx, cancel := context.WithTimeout(r.Context(), s.opts.CallTimeout)
	defer cancel()
	d := clusterData{Charts: Charts(s.hist.Samples()), Interval: s.opts.SampleInterval, Groups: &rpc.GroupsResponse{}}
	var err error
	if d.Self, err = v.client.Status(ctx, s.opts.RPCAddr); err != nil && s.callFailed(w, r, v, err) {
		return
	}
	mr, err := v.client.Members(ctx)
	if pageCall(s, w, r, v, mr, err, func(m *rpc.MembersResponse) { d.Members = m.Members }) {
		return
	}
	gr, err := v.client.Groups(ctx)
	if pageCall(s, w, r, v, gr, err, func(g *rpc.GroupsResponse) { d.Groups = g }) {
		return
	}
	sr, err := v.client.Shards(ctx)
	if pageCall(s, w, r, v, sr, err, func(sh *rpc.ShardsResponse) { d.Shards = sh.Shards }) {
		return
	}
	sl, err := v.client.Sources(ctx)
	if pageCall(s, w, r, v, sl, err, func(so *rpc.SourceListResponse) { d.Sources = so.Sources }) {
		return
	}
	ds, err := v.client.DiscoverShares(ctx)
	if pageCall(s, w, r, v, ds, err, func(dr *rpc.SourceDiscoverResponse) { d.Discovered = dr.Machines }) {
		return
	}
	v.page.Title, v.page.Nav, v.page.Data = "Cluster", "cluster", d
	v.page.Refresh = 10
	if r.URL.Query().Get("refresh") == "0" {
		v.page.Refresh = 0
	}
	s.render(w, http.StatusOK, "cluster", &v.page)
}

// searchResult is one match on the search page.
type searchResult struct {
	rpc.Inode
	Stage string
}

// searchData is the search page's data.
type searchData struct {
	Query   string
	Results []searchResult
	// Searched is set once a query ran; More when it stopped at Limit.
	Searched, More bool
	Limit          int
}

// errSearchFull stops a search at searchLimit.
var errSearchFull = errors.New("console: search limit reached")

// serveSearch runs a plain query as "ghba find QUERY" does (rpc
// Client.Find: exact names, then related ones, then text) and lists the
// matches by stage, then path (text matches best first).
func (s *Server) serveSearch(w http.ResponseWriter, r *http.Request, v *view) {
	d := searchData{Query: strings.TrimSpace(r.URL.Query().Get("q")), Limit: searchLimit}
	v.page.Title, v.page.Nav = "Search", "search"
	if d.Query != "" {
		ctx, cancel := context.WithTimeout(r.Context(), s.opts.CallTimeout)
		defer cancel()
		d.Searched = true
		err := v.client.Find(ctx, rpc.FindRequest{Root: "/", Query: d.Query}, func(in *rpc.Inode, stage string) error {
			if len(d.Results) == searchLimit {
				d.More = true
				return errSearchFull
			}
			d.Results = append(d.Results, searchResult{Inode: *in, Stage: stage})
			return nil
		})
		if err != nil && !errors.Is(err, errSearchFull) {
			if s.callFailed(w, r, v, err) {
				return
			}
			d.Searched = false // say what failed, not that nothing matched
		}
		slices.SortStableFunc(d.Results, func(a, b searchResult) int {
			if c := search.StageRank(a.Stage) - search.StageRank(b.Stage); c != 0 || a.Stage == search.StageText {
				return c
			}
			return strings.Compare(a.Path, b.Path)
		})
	}
	v.page.Data = d
	s.render(w, http.StatusOK, "search", &v.page)
}

// crumb is one link of the breadcrumbs.
type crumb struct {
	Name, Path string
}

// browseData is the browser page's data.
type browseData struct {
	Path    string
	Crumbs  []crumb
	Stat    *rpc.StatResponse
	Entries []rpc.DirEntry
	// After is this page's cursor, Next the next page's ("" on the last).
	After, Next string
}

// breadcrumbs returns the links of p's ancestors and p itself.
func breadcrumbs(p string) []crumb {
	out := []crumb{{Name: "/", Path: "/"}}
	if p == "/" {
		return out
	}
	cur := ""
	for part := range strings.SplitSeq(strings.TrimPrefix(p, "/"), "/") {
		cur += "/" + part
		out = append(out, crumb{Name: part, Path: cur})
	}
	return out
}

// childPath joins a directory and an entry name.
func childPath(dir, name string) string { return path.Join(dir, name) }

// serveBrowse stats ?path= and, for a directory, lists one page of it
// from ?after=.
func (s *Server) serveBrowse(w http.ResponseWriter, r *http.Request, v *view) {
	q := r.URL.Query()
	p := q.Get("path")
	if p == "" {
		p = "/"
	}
	if !strings.HasPrefix(p, "/") {
		p = "/" + p
	}
	p = path.Clean(p)
	d := browseData{Path: p, Crumbs: breadcrumbs(p), After: q.Get("after")}
	v.page.Title, v.page.Nav = p, "browse"
	ctx, cancel := context.WithTimeout(r.Context(), s.opts.CallTimeout)
	defer cancel()
	st, err := v.client.Stat(ctx, p)
	if err != nil {
		if s.callFailed(w, r, v, err) {
			return
		}
		v.page.Data = d
		s.render(w, statusOf(err), "browse", &v.page)
		return
	}
	d.Stat = st
	if st.Type == rpc.TypeDir {
		resp, err := v.client.ReadDir(ctx, &rpc.ReadDirRequest{Path: p, After: d.After, Limit: browsePage})
		if err != nil {
			if s.callFailed(w, r, v, err) {
				return
			}
		} else {
			d.Entries, d.Next = resp.Entries, resp.Next
		}
	}
	v.page.Data = d
	s.render(w, http.StatusOK, "browse", &v.page)
}

// statusOf maps a namespace error to an HTTP status.
func statusOf(err error) int {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return http.StatusNotFound
	case errors.Is(err, fs.ErrPermission):
		return http.StatusForbidden
	case errors.Is(err, rpc.ErrInvalidPath):
		return http.StatusBadRequest
	}
	return http.StatusBadGateway
}
