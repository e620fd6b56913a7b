package node

import (
	"context"
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"log/slog"
	"strconv"
	"strings"
	"testing"

	"github.com/ghba/ghba/node/acl"
	"github.com/ghba/ghba/node/namespace"
	"github.com/ghba/ghba/rpc"
)

// methodHomeCreateForTest is a node-to-node method of the namespace.
const methodHomeCreateForTest = "Home.Create"

// TestAuthenticateClasses checks who may call what with ACLs on, for the
// cases that need no token lookup (tokens of users are covered by the
// multi-process test cmd/ghba TestProcessACL).
func TestAuthenticateClasses(t *testing.T) {
	const server = "0123456789abcdef-server"
	noNS := func() *namespace.Namespace { return nil }
	tests := []struct {
		name    string
		cfg     acl.Config
		method  string
		token   string
		wantErr error  // nil: let through
		wantUID uint32 // of the identity in the context, when one is expected
		wantID  bool
	}{
		{"acl off: anything", acl.Config{}, methodHomeCreateForTest, "", nil, 0, false},
		{"public without token", acl.Config{Enabled: true}, rpc.MethodACLLogin, "", nil, 0, false},
		{"user method without token", acl.Config{Enabled: true}, rpc.MethodStat, "", rpc.ErrUnauthenticated, 0, false},
		{"management without token", acl.Config{Enabled: true}, rpc.MethodLeave, "", rpc.ErrUnauthenticated, 0, false},
		{"default allow: nobody", acl.Config{Enabled: true, DefaultPolicy: acl.PolicyAllow}, rpc.MethodStat, "", nil, acl.Nobody, true},
		{"default allow is not management", acl.Config{Enabled: true, DefaultPolicy: acl.PolicyAllow}, rpc.MethodLeave, "", rpc.ErrUnauthenticated, 0, false},
		{"internal without server token configured", acl.Config{Enabled: true}, methodHomeCreateForTest, "", nil, 0, false},
		{"internal needs the server token", acl.Config{Enabled: true, ServerToken: server}, methodHomeCreateForTest, "", rpc.ErrUnauthenticated, 0, false},
		{"internal with the server token", acl.Config{Enabled: true, ServerToken: server}, methodHomeCreateForTest, server, nil, 0, true},
		{"server token is management", acl.Config{Enabled: true, ServerToken: server}, rpc.MethodLeave, server, nil, 0, true},
		{"nobody cannot call internal", acl.Config{Enabled: true, DefaultPolicy: acl.PolicyAllow, ServerToken: server}, methodHomeCreateForTest, "", rpc.ErrUnauthenticated, 0, false},
		{"any user reads the data store", acl.Config{Enabled: true, DefaultPolicy: acl.PolicyAllow}, rpc.MethodDataStoreGet, "", nil, acl.Nobody, true},
		{"setting the data store is management", acl.Config{Enabled: true, DefaultPolicy: acl.PolicyAllow}, rpc.MethodDataStoreSet, "", rpc.ErrUnauthenticated, 0, false},
		{"the id counter is node-to-node", acl.Config{Enabled: true, ServerToken: server}, "Home.AllocIDs", "", rpc.ErrUnauthenticated, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := newACLService(tt.cfg, noNS, slog.New(slog.DiscardHandler))
			ctx, err := a.authenticate(context.Background(), tt.method, tt.token)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("err %v, want %v", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("refused: %v", err)
			}
			id, ok := acl.FromContext(ctx)
			if ok != tt.wantID || (ok && !id.Server && id.UID != tt.wantUID) {
				t.Errorf("identity %+v (%v), want one: %v, uid %d", id, ok, tt.wantID, tt.wantUID)
			}
		})
	}
	// A known method of the management class refuses a user identity
	// without the role: the check after the token's resolution.
	a := newACLService(acl.Config{Enabled: true, DefaultPolicy: acl.PolicyAllow}, noNS, slog.New(slog.DiscardHandler))
	if _, err := a.authenticate(context.Background(), rpc.MethodACLUserAdd, ""); !errors.Is(err, rpc.ErrUnauthenticated) && !errors.Is(err, fs.ErrPermission) {
		t.Errorf("user add as nobody: %v", err)
	}
}

// TestEveryClientMethodClassified: every method rpc declares (its Method*
// constants) has a class, so that none is refused to clients as
// node-to-node by omission.
func TestEveryClientMethodClassified(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "../rpc/types.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, spec := range g.Specs {
			vs := spec.(*ast.ValueSpec)
			for i, name := range vs.Names {
				if !strings.HasPrefix(name.Name, "Method") || i >= len(vs.Values) {
					continue
				}
				lit, ok := vs.Values[i].(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					continue
				}
				m, _ := strconv.Unquote(lit.Value)
				n++
				if _, ok := methodClasses[m]; !ok {
					t.Errorf("rpc.%s (%q) has no class in methodClasses: with ACLs on, clients could not call it", name.Name, m)
				}
			}
		}
	}
	if n < 30 {
		t.Fatalf("found %d methods in rpc/types.go: the parse missed them", n)
	}
}
