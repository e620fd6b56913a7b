package console

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/ghba/ghba/rpc/client"
)

// session is a logged-in user of the console: the token ACL.Login gave,
// held by the server only (the browser holds the session id), and a client
// that presents it.
type session struct {
	user    string
	csrf    string // the CSRF token of the session's forms
	client  *client.Client
	expires time.Time // the token's expiry, or the session's limit

	mu       sync.Mutex
	lastUsed time.Time
}

// touch records a use at now.
func (s *session) touch(now time.Time) {
	s.mu.Lock()
	s.lastUsed = now
	s.mu.Unlock()
}

// idleSince returns the time of the last use.
func (s *session) idleSince() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lastUsed
}

// sessions holds the sessions of one console by the SHA-256 of their id
// (the cookie's value), so that the map is never searched with a secret.
type sessions struct {
	mu   sync.Mutex
	byID map[[sha256.Size]byte]*session
	max  int
	idle time.Duration
}

func newSessions(maxSessions int, idle time.Duration) *sessions {
	return &sessions{byID: map[[sha256.Size]byte]*session{}, max: maxSessions, idle: idle}
}

// randomToken returns 32 random bytes in URL-safe base64.
func randomToken() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return base64.RawURLEncoding.EncodeToString(b)
}

// add stores s under a new id and returns the id. When the table is full
// the least recently used session is dropped (its client closed).
func (ss *sessions) add(s *session, now time.Time) string {
	id := randomToken()
	s.csrf = randomToken()
	s.lastUsed = now
	ss.mu.Lock()
	var evicted *session
	if len(ss.byID) >= ss.max {
		var oldestKey [sha256.Size]byte
		for k, o := range ss.byID {
			if evicted == nil || o.idleSince().Before(evicted.idleSince()) {
				evicted, oldestKey = o, k
			}
		}
		delete(ss.byID, oldestKey)
	}
	ss.byID[sha256.Sum256([]byte(id))] = s
	ss.mu.Unlock()
	if evicted != nil {
		_ = evicted.client.Close()
	}
	return id
}

// get returns the live session of id, or nil. An expired or idle one is
// removed.
func (ss *sessions) get(id string, now time.Time) *session {
	if id == "" {
		return nil
	}
	key := sha256.Sum256([]byte(id))
	ss.mu.Lock()
	s := ss.byID[key]
	if s != nil && ss.dead(s, now) {
		delete(ss.byID, key)
		ss.mu.Unlock()
		_ = s.client.Close()
		return nil
	}
	ss.mu.Unlock()
	if s != nil {
		s.touch(now)
	}
	return s
}

// dead reports whether s has expired or been idle too long.
func (ss *sessions) dead(s *session, now time.Time) bool {
	return !now.Before(s.expires) || now.Sub(s.idleSince()) > ss.idle
}

// remove ends the session of id (logout).
func (ss *sessions) remove(id string) {
	key := sha256.Sum256([]byte(id))
	ss.mu.Lock()
	s := ss.byID[key]
	delete(ss.byID, key)
	ss.mu.Unlock()
	if s != nil {
		_ = s.client.Close()
	}
}

// sweep removes the expired and idle sessions.
func (ss *sessions) sweep(now time.Time) {
	var gone []*session
	ss.mu.Lock()
	for k, s := range ss.byID {
		if ss.dead(s, now) {
			delete(ss.byID, k)
			gone = append(gone, s)
		}
	}
	ss.mu.Unlock()
	for _, s := range gone {
		_ = s.client.Close()
	}
}

// closeAll ends every session.
func (ss *sessions) closeAll() {
	ss.mu.Lock()
	all := ss.byID
	ss.byID = map[[sha256.Size]byte]*session{}
	ss.mu.Unlock()
	for _, s := range all {
		_ = s.client.Close()
	}
}

// len returns the number of sessions held.
func (ss *sessions) len() int {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return len(ss.byID)
}

// checkCSRF reports whether the form's CSRF token is the session's.
func checkCSRF(s *session, r *http.Request) bool {
	got := r.PostFormValue(csrfField)
	return got != "" && subtle.ConstantTimeCompare([]byte(got), []byte(s.csrf)) == 1
}

// sameOrigin reports whether a state-changing request comes from the
// console's own pages: its Origin (or, without one, its Referer) names the
// request's host, and the browser does not call it cross-site. Requests
// without either header (not from a browser) pass; the CSRF token still
// guards every change of a session.
func sameOrigin(r *http.Request) bool {
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" && site != "same-origin" && site != "none" {
		return false
	}
	origin := r.Header.Get("Origin")
	if origin == "" {
		origin = r.Header.Get("Referer")
	}
	if origin == "" {
		return true
	}
	u, err := url.Parse(origin)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host == r.Host
}
