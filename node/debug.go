package node

import (
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"net/http/pprof"
	"strings"

	"github.com/ghba/ghba/rpc"
)

// debugMethod names /debug/pprof/ among the RPC methods for the ACL check
// (a management token).
const debugMethod = "http.debug"

// debugHandler serves Go's runtime profiles (net/http/pprof) under
// /debug/pprof/ (config enable_debug), for example
//
//	go tool pprof http://127.0.0.1:7413/debug/pprof/profile?seconds=10
//
// With ACLs on, a request needs "Authorization: Bearer TOKEN" with a
// management token or the server token: profiles show the node's paths
// and memory.
func (n *Node) debugHandler() http.Handler {
	mux := ProfilesHandler()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := n.authorizeDebug(r); err != nil {
			code := http.StatusServiceUnavailable // the token could not be read
			switch {
			case errors.Is(err, rpc.ErrUnauthenticated):
				code = http.StatusUnauthorized
			case errors.Is(err, fs.ErrPermission):
				code = http.StatusForbidden
			}
			http.Error(w, err.Error(), code)
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// ProfilesHandler serves Go's runtime profiles (net/http/pprof) under
// /debug/pprof/, with no authorization of its own: the node's HTTP server
// checks tokens first (debugHandler), ghba mount --pprof serves it on an
// address of the operator's choice.
func ProfilesHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}

// authorizeDebug lets a request to /debug/pprof/ through when ACLs are off
// or its bearer token has the management role.
func (n *Node) authorizeDebug(r *http.Request) error {
	if !n.cfg.ACL.Enabled {
		return nil
	}
	token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || token == "" {
		return fmt.Errorf("%w: /debug/pprof/ needs \"Authorization: Bearer TOKEN\" with a management token", rpc.ErrUnauthenticated)
	}
	_, err := n.acl.authenticate(r.Context(), debugMethod, token)
	return err
}
