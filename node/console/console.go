// Package console is the web console served on a node's HTTP port: a
// login form backed by the ACL users and tokens, a search box, a file
// browser and cluster pages with charts of the node's recent activity.
//
// The console acts as the logged-in user: every page is built from RPCs
// to the node's own RPC port made by a client that presents the token
// ACL.Login gave for the session, so the ACL checks apply exactly as for
// the CLI. The token stays on the server; the browser holds a random
// session id in an HttpOnly, SameSite=Strict cookie (Secure when the HTTP
// port serves TLS), and every form that changes state carries a CSRF
// token bound to the session. With ACLs off the console is open and says
// so.
//
// Pages are rendered on the server (html/template) with inline SVG charts;
// the stylesheet is embedded, and no page loads anything from elsewhere.
package console

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/ghba/ghba/rpc"
	"github.com/ghba/ghba/rpc/client"
)

// Defaults of Options.
const (
	DefaultSampleInterval = 5 * time.Second
	DefaultHistory        = time.Hour
	DefaultSessionIdle    = time.Hour
	DefaultMaxSessions    = 1000
	DefaultCallTimeout    = 10 * time.Second
	// maxSessionLife bounds a session whose token never expires (the
	// bootstrap token).
	maxSessionLife = 24 * time.Hour
)

// Node is what the console needs from the node it is served by, beyond
// its RPC port.
type Node interface {
	// Counters returns the node's cumulative counters; the console samples
	// them every Options.SampleInterval for its charts.
	Counters() Counters
}

// Options configure a Server.
type Options struct {
	// NodeID names the node in titles and in the session cookie's name
	// (cookies do not tell ports apart, and nodes may share a host).
	NodeID string
	// RPCAddr is the node's own RPC address (host:port), which the console
	// calls as the logged-in user.
	RPCAddr string
	// Dial connects to RPCAddr (TLS when the node uses it); nil: plain
	// TCP.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// ACLEnabled makes the console ask for a login; without it every
	// visitor uses the console without a token, and a banner says so.
	ACLEnabled bool
	// Secure marks the session cookie Secure: set it when the HTTP port
	// serves TLS.
	Secure bool
	// SampleInterval is how often the charts' counters are sampled
	// (default DefaultSampleInterval); History how far back the charts
	// go (default DefaultHistory).
	SampleInterval, History time.Duration
	// SessionIdle ends a session unused this long (default
	// DefaultSessionIdle); MaxSessions bounds the sessions held (default
	// DefaultMaxSessions; beyond it the least recently used one ends).
	SessionIdle time.Duration
	MaxSessions int
	// CallTimeout bounds the RPCs of one page (default
	// DefaultCallTimeout).
	CallTimeout time.Duration
	// Logger receives the console's log lines; nil discards them.
	Logger *slog.Logger
}

func (o Options) withDefaults() Options {
	orDefault(&o.SampleInterval, DefaultSampleInterval)
	orDefault(&o.History, DefaultHistory)
	orDefault(&o.SessionIdle, DefaultSessionIdle)
	orDefault(&o.MaxSessions, DefaultMaxSessions)
	orDefault(&o.CallTimeout, DefaultCallTimeout)
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o
}

// orDefault sets *v to def unless *v is positive.
func orDefault[T int | time.Duration](v *T, def T) {
	if *v <= 0 {
		*v = def
	}
}

//go:embed web
var webFS embed.FS

// Server is the web console of one node. Create it with New, serve
// Handler, run Run until the node stops, then Close it.
type Server struct {
	opts  Options
	node  Node
	log   *slog.Logger
	hist  *History
	sess  *sessions
	pages map[string]*template.Template
	mux   *http.ServeMux
	// open is the client of every visitor while ACLs are off (no token).
	open *client.Client
	now  func() time.Time
}

// New returns the console of node n.
func New(n Node, opts Options) (*Server, error) {
	o := opts.withDefaults()
	if o.RPCAddr == "" {
		return nil, errors.New("console: no RPC address")
	}
	s := &Server{
		opts: o,
		node: n,
		log:  o.Logger,
		hist: NewHistory(int(o.History/o.SampleInterval) + 1),
		sess: newSessions(o.MaxSessions, o.SessionIdle),
		now:  time.Now,
	}
	var err error
	if s.pages, err = parsePages(); err != nil {
		return nil, err
	}
	if !o.ACLEnabled {
		s.open = s.newClient("")
	}
	s.routes()
	return s, nil
}

// newClient returns a client of the node's RPC port presenting token.
func (s *Server) newClient(token string) *client.Client {
	return client.New(client.Options{
		Addrs: []string{s.opts.RPCAddr}, Dial: s.opts.Dial, Token: token,
		Timeout: s.opts.CallTimeout, HomeCacheSize: 256,
		Logger: s.log.With("component", "console-client"),
	})
}

// Handler returns the console's HTTP handler: mount it at / of the node's
// HTTP server (it answers 404 for paths it does not serve).
func (s *Server) Handler() http.Handler { return securityHeaders(s.mux) }

// Run samples the node's counters every SampleInterval into the history
// and ends idle sessions, until ctx is done.
func (s *Server) Run(ctx context.Context) {
	t := time.NewTicker(s.opts.SampleInterval)
	defer t.Stop()
	s.sample()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.sample()
			s.sess.sweep(s.now())
		}
	}
}

// sample adds one sample of the node's counters to the history.
func (s *Server) sample() {
	s.hist.Add(Sample{At: s.now(), Counters: s.node.Counters()})
}

// Close ends every session and closes the console's clients.
func (s *Server) Close() error {
	s.sess.closeAll()
	if s.open != nil {
		return s.open.Close()
	}
	return nil
}

// History returns the console's samples, oldest first.
func (s *Server) History() []Sample { return s.hist.Samples() }

// cookieName is the session cookie of this node's console.
func (s *Server) cookieName() string { return "ghba_session_" + s.opts.NodeID }

// securityHeaders sets the headers every console answer carries: no
// framing, no sniffing, a policy that allows nothing but the console's own
// stylesheet, forms posting to itself, and no caching of pages.
func securityHeaders(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hd := w.Header()
		hd.Set("Content-Security-Policy", "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
		hd.Set("X-Frame-Options", "DENY")
		hd.Set("X-Content-Type-Options", "nosniff")
		hd.Set("Referrer-Policy", "same-origin")
		h.ServeHTTP(w, r)
	})
}

// routes builds the console's mux.
func (s *Server) routes() {
	m := http.NewServeMux()
	static, _ := fs.Sub(webFS, "web/static") // cannot fail: the directory is embedded
	m.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(static)))
	m.HandleFunc("GET /login", s.serveLoginForm)
	m.HandleFunc("POST /login", s.serveLogin)
	m.HandleFunc("POST /logout", s.serveLogout)
	m.HandleFunc("GET /{$}", s.withView(s.serveCluster))
	m.HandleFunc("GET /search", s.withView(s.serveSearch))
	m.HandleFunc("GET /browse", s.withView(s.serveBrowse))
	s.mux = m
}

// view is what a page handler gets: the visitor's client and the fields
// every page shows.
type view struct {
	client *client.Client
	sid    string // the session id ("" with ACLs off)
	page   page
}

// page is the data of the layout template; Data is the page's own.
type page struct {
	Title  string
	Nav    string
	NodeID string
	// User is the logged-in user ("" with ACLs off); CSRF the session's
	// token for the logout form.
	User, CSRF string
	ACLOff     bool
	Error      string
	Refresh    int // seconds between reloads of the page (0: none)
	Data       any
}

// withView resolves the visitor's session and calls h with its client; a
// visitor without a session is sent to the login page, which sends it
// back here.
func (s *Server) withView(h func(w http.ResponseWriter, r *http.Request, v *view)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		v := &view{page: page{NodeID: s.opts.NodeID}}
		if !s.opts.ACLEnabled {
			v.client, v.page.ACLOff = s.open, true
			h(w, r, v)
			return
		}
		ss, sid := s.session(r)
		if ss == nil {
			http.Redirect(w, r, "/login?next="+urlQueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
			return
		}
		v.client, v.sid, v.page.User, v.page.CSRF = ss.client, sid, ss.user, ss.csrf
		h(w, r, v)
	}
}

// session returns the request's live session and its id, or nil.
func (s *Server) session(r *http.Request) (*session, string) {
	c, err := r.Cookie(s.cookieName())
	if err != nil {
		return nil, ""
	}
	ss := s.sess.get(c.Value, s.now())
	if ss == nil {
		return nil, ""
	}
	return ss, c.Value
}

// callFailed handles an RPC error of a page: a token the cluster no
// longer accepts (expired, revoked, user removed) ends the session and
// sends the visitor to the login page (true); otherwise the error is shown
// on the page (false).
func (s *Server) callFailed(w http.ResponseWriter, r *http.Request, v *view, err error) bool {
	if s.opts.ACLEnabled && errors.Is(err, rpc.ErrUnauthenticated) {
		s.sess.remove(v.sid)
		http.SetCookie(w, s.cookie("", -1))
		http.Redirect(w, r, "/login?next="+urlQueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
		return true
	}
	if v.page.Error == "" {
		v.page.Error = err.Error()
	}
	return false
}

// cookie returns the session cookie with value (maxAge < 0: delete it).
func (s *Server) cookie(value string, maxAge int) *http.Cookie {
	return &http.Cookie{
		Name: s.cookieName(), Value: value, Path: "/", MaxAge: maxAge,
		HttpOnly: true, Secure: s.opts.Secure, SameSite: http.SameSiteStrictMode,
	}
}

// render writes page name with code.
func (s *Server) render(w http.ResponseWriter, code int, name string, p *page) {
	t := s.pages[name]
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	if err := t.ExecuteTemplate(w, "layout", p); err != nil {
		s.log.Debug("console: writing a page", "page", name, "err", err)
	}
}

// parsePages parses every page with the layout.
func parsePages() (map[string]*template.Template, error) {
	layout, err := template.New("").Funcs(funcs).ParseFS(webFS, "web/layout.html")
	if err != nil {
		return nil, fmt.Errorf("console: parsing the layout: %w", err)
	}
	pages := map[string]*template.Template{}
	for _, name := range []string{"login", "cluster", "search", "browse"} {
		t, err := template.Must(layout.Clone()).ParseFS(webFS, "web/"+name+".html")
		if err != nil {
			return nil, fmt.Errorf("console: parsing page %s: %w", name, err)
		}
		pages[name] = t
	}
	return pages, nil
}

// funcs are the templates' helpers.
var funcs = template.FuncMap{
	"bytes": formatBytes,
	"since": func(ns int64) string { return time.Since(time.Unix(0, ns)).Truncate(time.Second).String() },
	"time":  func(ns int64) string { return time.Unix(0, ns).UTC().Format("2006-01-02 15:04:05") },
	"mode":  func(m uint32) string { return fmt.Sprintf("%04o", m) },
	"child": childPath,
}

// formatBytes prints b in B, KiB, MiB or GiB.
func formatBytes(b int64) string {
	switch {
	case b >= 1<<30:
		return strconv.FormatFloat(float64(b)/(1<<30), 'f', 1, 64) + " GiB"
	case b >= 1<<20:
		return strconv.FormatFloat(float64(b)/(1<<20), 'f', 1, 64) + " MiB"
	case b >= 1<<10:
		return strconv.FormatFloat(float64(b)/(1<<10), 'f', 1, 64) + " KiB"
	}
	return strconv.FormatInt(b, 10) + " B"
}
