package node

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/ghba/ghba/node/acl"
	"github.com/ghba/ghba/node/namespace"
	"github.com/ghba/ghba/rpc"
)

// Where the ACL records live in the namespace (acl.ReservedDir): a file per
// user and per token, the record as JSON in the file's layout blob, so that
// they are replicated, routed and recovered like any file's metadata
// (docs/design.md, "Security").
const (
	aclDir        = acl.ReservedDir + "/acl"
	aclUsersDir   = aclDir + "/users"
	aclTokensDir  = aclDir + "/tokens"
	aclBootMarker = aclDir + "/bootstrapped"
)

// tokenCacheTTL is how long a node trusts what it last read of a token: a
// revoked or expired token stops working on every node within it.
const tokenCacheTTL = time.Second

// methodClass says who may call a method when ACLs are on.
type methodClass int

const (
	classInternal   methodClass = iota // nodes only (the server token)
	classPublic                        // anyone, no token needed
	classUser                          // any token (or the default policy)
	classManagement                    // a token with the management role
)

// methodClasses classifies the methods clients call; every other method
// is node-to-node (classInternal).
var methodClasses = map[string]methodClass{
	rpc.MethodACLBootstrap: classPublic,
	rpc.MethodACLLogin:     classPublic,
	rpc.MethodPing:         classPublic,
	rpc.MethodStatus:       classPublic, // what the HTTP status page shows too

	rpc.MethodStat: classUser, rpc.MethodLookup: classUser, rpc.MethodBatchStat: classUser,
	rpc.MethodCreate: classUser, rpc.MethodMkdir: classUser, rpc.MethodReadDir: classUser,
	rpc.MethodSetAttr: classUser, rpc.MethodUnlink: classUser, rpc.MethodRmdir: classUser,
	rpc.MethodRename: classUser, rpc.MethodFilters: classUser, rpc.MethodLink: classUser, rpc.MethodHold: classUser,
	rpc.MethodBatchCreate: classUser, rpc.MethodBatchCreateDirs: classUser, rpc.MethodFind: classUser,
	rpc.MethodMembers: classUser, rpc.MethodGroups: classUser, rpc.MethodShards: classUser,
	rpc.MethodACLWhoAmI: classUser, rpc.MethodSourceList: classUser, rpc.MethodDataStoreGet: classUser,
	rpc.MethodSourceDiscover: classUser,

	rpc.MethodJoin: classManagement, rpc.MethodLeave: classManagement, rpc.MethodKeyring: classManagement,
	rpc.MethodACLUserAdd: classManagement, rpc.MethodACLUserList: classManagement,
	rpc.MethodACLUserPasswd: classManagement, rpc.MethodACLUserRemove: classManagement,
	rpc.MethodACLTokenList: classManagement, rpc.MethodACLTokenRevoke: classManagement,
	rpc.MethodSourcePut: classManagement, rpc.MethodSourceRemove: classManagement, rpc.MethodDataStoreSet: classManagement,
	debugMethod: classManagement,
}

// aclService authenticates requests and keeps the users and tokens.
type aclService struct {
	cfg acl.Config
	ns  func() *namespace.Namespace
	log *slog.Logger
	now func() time.Time

	mu     sync.Mutex
	tokens map[string]cachedToken // by secret hash
	fails  map[string]loginFails  // by user name
}

type cachedToken struct {
	id      *acl.Identity
	expires int64 // Unix nanoseconds, 0: never
	err     error
	at      time.Time
}

type loginFails struct {
	count int
	last  time.Time
}

func newACLService(cfg acl.Config, ns func() *namespace.Namespace, log *slog.Logger) *aclService {
	return &aclService{cfg: cfg.WithDefaults(), ns: ns, log: log, now: time.Now,
		tokens: map[string]cachedToken{}, fails: map[string]loginFails{}}
}

// authenticate is the RPC server's Authenticate hook: it resolves the
// connection's token and lets the request through if its identity may
// call method, with the identity in the returned context.
func (a *aclService) authenticate(ctx context.Context, method, token string) (context.Context, error) {
	if !a.cfg.Enabled {
		return ctx, nil
	}
	class, ok := methodClasses[method]
	if !ok {
		class = classInternal
	}
	if class == classPublic {
		return ctx, nil
	}
	var id *acl.Identity
	switch {
	case token != "" && a.cfg.ServerToken != "" && subtle.ConstantTimeCompare([]byte(token), []byte(a.cfg.ServerToken)) == 1:
		id = &acl.Identity{Server: true, Management: true}
	case token != "":
		var err error
		if id, err = a.resolve(ctx, token); err != nil {
			return nil, fmt.Errorf("%s: %w", method, err)
		}
	case class == classInternal && a.cfg.ServerToken == "":
		return ctx, nil // no server token configured: node-to-node methods are open
	case class == classUser && a.cfg.DefaultPolicy == acl.PolicyAllow:
		id = &acl.Identity{User: "nobody", UID: acl.Nobody, GID: acl.Nobody}
	default:
		return nil, fmt.Errorf("%s: %w: no token (run ghba login, or pass --token or GHBA_TOKEN)", method, rpc.ErrUnauthenticated)
	}
	switch {
	case class == classInternal && !id.Server && a.cfg.ServerToken != "":
		return nil, fmt.Errorf("%s: %w: a node-to-node method", method, fs.ErrPermission)
	case class == classManagement && !id.Management:
		return nil, fmt.Errorf("%s: %w: needs a token with the management role (user %q has none)", method, fs.ErrPermission, id.User)
	}
	return acl.WithIdentity(ctx, id), nil
}

// resolve returns the identity of a token secret, from the cache if it
// was read less than tokenCacheTTL ago.
func (a *aclService) resolve(ctx context.Context, secret string) (*acl.Identity, error) {
	hash := acl.SecretHash(secret)
	now := a.now()
	a.mu.Lock()
	c, ok := a.tokens[hash]
	a.mu.Unlock()
	if !ok || now.Sub(c.at) >= tokenCacheTTL {
		c = cachedToken{at: now}
		var t acl.Token
		err := a.read(ctx, aclTokensDir+"/"+hash, &t)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			c.err = fmt.Errorf("%w: unknown or revoked token", rpc.ErrUnauthenticated)
		case err != nil:
			return nil, err // unavailable: not cached, the next request asks again
		default:
			c.id, c.expires = &t.Identity, t.Expires
		}
		a.mu.Lock()
		if len(a.tokens) >= 100_000 { // bound the cache: start again
			clear(a.tokens)
		}
		a.tokens[hash] = c
		a.mu.Unlock()
	}
	if c.err != nil {
		return nil, c.err
	}
	if c.expires != 0 && now.UnixNano() >= c.expires {
		return nil, fmt.Errorf("%w: token expired at %s (run ghba login again)", rpc.ErrUnauthenticated, time.Unix(0, c.expires).UTC().Format(time.RFC3339))
	}
	return c.id, nil
}

// forget drops a token from this node's cache (after a revocation here;
// other nodes drop it within tokenCacheTTL).
func (a *aclService) forget(hash string) {
	a.mu.Lock()
	delete(a.tokens, hash)
	a.mu.Unlock()
}

// asNode returns ctx running as the node itself: the ACL records are
// read and written with the node's rights, not the caller's.
func asNode(ctx context.Context) context.Context {
	return acl.WithIdentity(ctx, &acl.Identity{Server: true, Management: true})
}

// read decodes the record kept in the file at path.
func (a *aclService) read(ctx context.Context, path string, v any) error {
	st, err := a.ns().Stat(asNode(ctx), path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(st.Layout, v); err != nil {
		return fmt.Errorf("acl record %s: %w", path, err)
	}
	return nil
}

// write creates the file at path holding record v; fs.ErrExist if it is
// there.
func (a *aclService) write(ctx context.Context, path string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = a.ns().Create(asNode(ctx), &rpc.CreateRequest{Path: path, Mode: 0o600, Layout: b})
	return err
}

// list returns the names in an ACL directory.
func (a *aclService) list(ctx context.Context, dir string) ([]string, error) {
	return readDirAll(asNode(ctx), a.ns(), dir)
}

func (a *aclService) enabled() error {
	if !a.cfg.Enabled {
		return fmt.Errorf("%w: ACLs are not enabled on this node (config acl.enabled)", fs.ErrInvalid)
	}
	return nil
}

// bootstrap creates the ACL directories, the user root and its first
// management token, once per cluster.
func (a *aclService) bootstrap(ctx context.Context, _ *rpc.ACLBootstrapRequest) (*rpc.ACLTokenResponse, error) {
	if err := a.enabled(); err != nil {
		return nil, err
	}
	for _, d := range []string{acl.ReservedDir, aclDir, aclUsersDir, aclTokensDir} {
		if _, err := a.ns().Mkdir(asNode(ctx), &rpc.MkdirRequest{Path: d, Mode: 0o700, Parents: true}); err != nil {
			return nil, fmt.Errorf("acl bootstrap: %s: %w", d, err)
		}
	}
	if err := a.write(ctx, aclBootMarker, struct {
		At int64 `json:"at"`
	}{a.now().UnixNano()}); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return nil, fmt.Errorf("acl bootstrap: %w: the cluster's ACLs were bootstrapped already", fs.ErrExist)
		}
		return nil, fmt.Errorf("acl bootstrap: %w", err)
	}
	root := acl.User{Name: "root", Management: true}
	err := a.write(ctx, aclUsersDir+"/root", &root)
	if errors.Is(err, fs.ErrExist) {
		err = nil
	}
	var t *rpc.ACLTokenResponse
	if err == nil {
		t, err = a.issue(ctx, &root, "bootstrap", 0)
	}
	if err != nil {
		// No token was handed out: take the marker back so that the
		// bootstrap can be run again.
		if uerr := a.ns().Unlink(asNode(ctx), aclBootMarker); uerr != nil {
			a.log.Error("acl: bootstrap failed and its marker could not be removed: a new bootstrap will be refused", "err", err, "unlink_err", uerr)
		}
		return nil, fmt.Errorf("acl bootstrap: %w", err)
	}
	a.log.Info("acl: bootstrapped; the first management token was handed out")
	return t, nil
}

// issue creates a token for user u that expires after ttl (0: never).
func (a *aclService) issue(ctx context.Context, u *acl.User, what string, ttl time.Duration) (*rpc.ACLTokenResponse, error) {
	secret, hash := acl.NewSecret()
	now := a.now()
	t := acl.Token{Identity: u.Identity(), Description: what, Created: now.UnixNano()}
	if ttl > 0 {
		t.Expires = now.Add(ttl).UnixNano()
	}
	if err := a.write(ctx, aclTokensDir+"/"+hash, &t); err != nil {
		return nil, fmt.Errorf("acl: storing a %s token: %w", what, err)
	}
	return &rpc.ACLTokenResponse{Token: secret, Accessor: acl.Accessor(hash), User: u.Name, Expires: t.Expires}, nil
}

// Login back-off: after loginFreeFails failures in a row, a user's next
// login at this node waits loginBackoff, doubling with each failure up to
// loginMaxBackoff; a success resets it.
const (
	loginFreeFails  = 3
	loginBackoff    = time.Second
	loginMaxBackoff = time.Minute
)

// login checks a user's password and issues a token.
func (a *aclService) login(ctx context.Context, r *rpc.ACLLoginRequest) (*rpc.ACLTokenResponse, error) {
	if err := a.enabled(); err != nil {
		return nil, err
	}
	if err := acl.ValidName(r.User); err != nil {
		return nil, fmt.Errorf("login: %w: %w", rpc.ErrUnauthenticated, acl.ErrBadPassword)
	}
	if wait := a.loginWait(r.User); wait > 0 {
		return nil, fmt.Errorf("login: %w: too many failed logins for %q; try again in %s", rpc.ErrUnauthenticated, r.User, wait.Round(time.Second))
	}
	var u acl.User
	err := a.read(ctx, aclUsersDir+"/"+r.User, &u)
	if errors.Is(err, fs.ErrNotExist) {
		u = acl.User{} // the same work and answer as a wrong password
		err = nil
	}
	if err != nil {
		return nil, fmt.Errorf("login: %w", err)
	}
	if err := u.CheckPassword(r.Password); err != nil {
		a.loginFailed(r.User)
		a.log.Warn("acl: failed login", "user", r.User)
		return nil, fmt.Errorf("login: %w: %w", rpc.ErrUnauthenticated, err)
	}
	a.mu.Lock()
	delete(a.fails, r.User)
	a.mu.Unlock()
	return a.issue(ctx, &u, "login", a.cfg.TokenTTL)
}

// loginWait returns how long user must still wait before a login.
func (a *aclService) loginWait(user string) time.Duration {
	a.mu.Lock()
	defer a.mu.Unlock()
	f, ok := a.fails[user]
	if !ok || f.count < loginFreeFails {
		return 0
	}
	d := loginBackoff << min(f.count-loginFreeFails, 6)
	return max(min(d, loginMaxBackoff)-a.now().Sub(f.last), 0)
}

func (a *aclService) loginFailed(user string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.fails) >= 10_000 { // bound the table: forget the old ones
		for u, f := range a.fails {
			if a.now().Sub(f.last) > loginMaxBackoff {
				delete(a.fails, u)
			}
		}
	}
	f := a.fails[user]
	f.count++
	f.last = a.now()
	a.fails[user] = f
}

func wireUser(u *acl.User) rpc.ACLUser {
	return rpc.ACLUser{Name: u.Name, UID: u.UID, GID: u.GID, Groups: slices.Clone(u.Groups), Management: u.Management}
}

// userAdd creates a user.
func (a *aclService) userAdd(ctx context.Context, r *rpc.ACLUserRequest) (*rpc.ACLUserResponse, error) {
	if err := acl.ValidName(r.Name); err != nil {
		return nil, fmt.Errorf("user add: %w: %w", fs.ErrInvalid, err)
	}
	u := acl.User{Name: r.Name, UID: r.UID, GID: r.GID, Groups: slices.Clone(r.Groups), Management: r.Management}
	if r.Password != "" {
		if err := u.SetPassword(r.Password); err != nil {
			return nil, fmt.Errorf("user add: %w: %w", fs.ErrInvalid, err)
		}
	}
	if err := a.write(ctx, aclUsersDir+"/"+r.Name, &u); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return nil, fmt.Errorf("user add: %w: user %q exists", fs.ErrExist, r.Name)
		}
		return nil, fmt.Errorf("user add: %w", err)
	}
	return &rpc.ACLUserResponse{User: wireUser(&u)}, nil
}

// userPasswd sets a user's password: the new record is written beside the
// old one and renamed over it (one transaction), so a login sees the old
// or the new password, never no user.
func (a *aclService) userPasswd(ctx context.Context, r *rpc.ACLUserRequest) (*rpc.ACLUserResponse, error) {
	if err := acl.ValidName(r.Name); err != nil {
		return nil, fmt.Errorf("user passwd: %w: %w", fs.ErrInvalid, err)
	}
	var u acl.User
	if err := a.read(ctx, aclUsersDir+"/"+r.Name, &u); err != nil {
		return nil, fmt.Errorf("user passwd: %q: %w", r.Name, err)
	}
	if err := u.SetPassword(r.Password); err != nil {
		return nil, fmt.Errorf("user passwd: %w: %w", fs.ErrInvalid, err)
	}
	_, tmpHash := acl.NewSecret()
	tmp := aclUsersDir + "/.new-" + tmpHash[:16]
	if err := a.write(ctx, tmp, &u); err != nil {
		return nil, fmt.Errorf("user passwd: %w", err)
	}
	if _, err := a.ns().Rename(asNode(ctx), tmp, aclUsersDir+"/"+r.Name); err != nil {
		return nil, fmt.Errorf("user passwd: %w", err)
	}
	return &rpc.ACLUserResponse{User: wireUser(&u)}, nil
}

// userRemove removes a user and revokes its tokens.
func (a *aclService) userRemove(ctx context.Context, r *rpc.ACLUserRequest) (*rpc.ACLUserResponse, error) {
	if err := acl.ValidName(r.Name); err != nil {
		return nil, fmt.Errorf("user rm: %w: %w", fs.ErrInvalid, err)
	}
	var u acl.User
	if err := a.read(ctx, aclUsersDir+"/"+r.Name, &u); err != nil {
		return nil, fmt.Errorf("user rm: %q: %w", r.Name, err)
	}
	if err := a.ns().Unlink(asNode(ctx), aclUsersDir+"/"+r.Name); err != nil {
		return nil, fmt.Errorf("user rm: %w", err)
	}
	hashes, err := a.list(ctx, aclTokensDir)
	if err != nil {
		return nil, fmt.Errorf("user rm: listing tokens: %w", err)
	}
	revoked := 0
	for _, h := range hashes {
		var t acl.Token
		if err := a.read(ctx, aclTokensDir+"/"+h, &t); err != nil || t.User != r.Name {
			continue
		}
		if err := a.ns().Unlink(asNode(ctx), aclTokensDir+"/"+h); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("user rm: revoking a token of %q: %w", r.Name, err)
		}
		a.forget(h)
		revoked++
	}
	return &rpc.ACLUserResponse{User: wireUser(&u), Revoked: revoked}, nil
}

// userList lists the users.
func (a *aclService) userList(ctx context.Context, _ *rpc.ACLUserListRequest) (*rpc.ACLUserListResponse, error) {
	names, err := a.list(ctx, aclUsersDir)
	if err != nil {
		return nil, fmt.Errorf("user list: %w", err)
	}
	out := &rpc.ACLUserListResponse{Users: []rpc.ACLUser{}}
	for _, name := range names {
		if strings.HasPrefix(name, ".") {
			continue // a passwd in progress
		}
		var u acl.User
		if err := a.read(ctx, aclUsersDir+"/"+name, &u); err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			return nil, fmt.Errorf("user list: %w", err)
		}
		out.Users = append(out.Users, wireUser(&u))
	}
	return out, nil
}

// tokenList lists the tokens, oldest first.
func (a *aclService) tokenList(ctx context.Context, _ *rpc.ACLTokenListRequest) (*rpc.ACLTokenListResponse, error) {
	hashes, err := a.list(ctx, aclTokensDir)
	if err != nil {
		return nil, fmt.Errorf("token list: %w", err)
	}
	now := a.now()
	out := &rpc.ACLTokenListResponse{Tokens: []rpc.ACLTokenInfo{}}
	for _, h := range hashes {
		var t acl.Token
		if err := a.read(ctx, aclTokensDir+"/"+h, &t); err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			return nil, fmt.Errorf("token list: %w", err)
		}
		out.Tokens = append(out.Tokens, rpc.ACLTokenInfo{Accessor: acl.Accessor(h), User: t.User, Management: t.Management,
			Description: t.Description, Created: t.Created, Expires: t.Expires, Expired: t.Expired(now)})
	}
	slices.SortStableFunc(out.Tokens, func(x, y rpc.ACLTokenInfo) int { return int(min(max(x.Created-y.Created, -1), 1)) })
	return out, nil
}

// tokenRevoke revokes a token given by its secret or by an accessor
// (a prefix of its hash that names one token).
func (a *aclService) tokenRevoke(ctx context.Context, r *rpc.ACLTokenRevokeRequest) (*rpc.ACLTokenRevokeResponse, error) {
	hash := ""
	if acl.LooksLikeAccessor(r.Token) {
		hashes, err := a.list(ctx, aclTokensDir)
		if err != nil {
			return nil, fmt.Errorf("token revoke: %w", err)
		}
		for _, h := range hashes {
			if strings.HasPrefix(h, r.Token) {
				if hash != "" {
					return nil, fmt.Errorf("token revoke: %w: accessor %q names more than one token; give more of it", fs.ErrInvalid, r.Token)
				}
				hash = h
			}
		}
	}
	if hash == "" {
		hash = acl.SecretHash(r.Token)
	}
	if err := a.ns().Unlink(asNode(ctx), aclTokensDir+"/"+hash); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("token revoke: %w: no such token", fs.ErrNotExist)
		}
		return nil, fmt.Errorf("token revoke: %w", err)
	}
	a.forget(hash)
	a.log.Info("acl: token revoked", "accessor", acl.Accessor(hash))
	return &rpc.ACLTokenRevokeResponse{Accessor: acl.Accessor(hash)}, nil
}

// whoAmI returns the caller's identity.
func (a *aclService) whoAmI(ctx context.Context, _ *rpc.ACLWhoAmIRequest) (*rpc.ACLUser, error) {
	id, ok := acl.FromContext(ctx)
	if !ok {
		return nil, fmt.Errorf("%w: ACLs are not enabled, or the request carried no token", fs.ErrInvalid)
	}
	return &rpc.ACLUser{Name: id.User, UID: id.UID, GID: id.GID, Groups: slices.Clone(id.Groups), Management: id.Management}, nil
}

// register installs the ACL.* methods.
func (a *aclService) register(s *rpc.Server) {
	rpc.Register(s, rpc.MethodACLBootstrap, a.bootstrap)
	rpc.Register(s, rpc.MethodACLLogin, a.login)
	rpc.Register(s, rpc.MethodACLUserAdd, gatedACL(a, a.userAdd))
	rpc.Register(s, rpc.MethodACLUserPasswd, gatedACL(a, a.userPasswd))
	rpc.Register(s, rpc.MethodACLUserRemove, gatedACL(a, a.userRemove))
	rpc.Register(s, rpc.MethodACLUserList, gatedACL(a, a.userList))
	rpc.Register(s, rpc.MethodACLTokenList, gatedACL(a, a.tokenList))
	rpc.Register(s, rpc.MethodACLTokenRevoke, gatedACL(a, a.tokenRevoke))
	rpc.Register(s, rpc.MethodACLWhoAmI, a.whoAmI)
}

// gatedACL refuses an ACL administration call while ACLs are off.
func gatedACL[Req, Resp any](a *aclService, fn func(context.Context, *Req) (*Resp, error)) func(context.Context, *Req) (*Resp, error) {
	return func(ctx context.Context, r *Req) (*Resp, error) {
		if err := a.enabled(); err != nil {
			return nil, err
		}
		return fn(ctx, r)
	}
}
