// Package acl holds what a ghba cluster knows about who is asking: users,
// tokens and the identity a request runs with, and the POSIX permission
// test (docs/design.md, "Security").
//
// A user has a name, a uid, a primary gid, supplementary groups, a
// password kept only as a bcrypt hash (golang.org/x/crypto/bcrypt) and
// possibly the management role. A token is a random secret
// (crypto/rand.Text, 128 bits) that carries a user's identity until it
// expires or is revoked; the cluster stores only its SHA-256 (SecretHash),
// so a copy of the records gives no working token. The node package keeps
// both records in the cluster's replicated namespace and resolves a token
// on every request (node/acl.go); this package has no state.
package acl

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"golang.org/x/crypto/bcrypt"
)

// Errors of the package, checkable with errors.Is.
var (
	// ErrBadPassword reports a password that does not match the user's.
	ErrBadPassword = errors.New("wrong user name or password")
	// ErrWeakPassword reports a password shorter than MinPasswordLen.
	ErrWeakPassword = errors.New("password too short")
	// ErrBadName reports a user name that is not allowed.
	ErrBadName = errors.New("invalid user name")
)

// MinPasswordLen is the shortest password a user may set.
const MinPasswordLen = 8

// bcryptCost is the work factor of password hashes (2^10 rounds, about
// 50–100 ms on one core: slow for a guesser, bearable for a login).
const bcryptCost = 10

// Identity is who a request runs as: the user a token belongs to, or the
// cluster's own nodes (Server).
type Identity struct {
	// User is the user name ("" for a node).
	User string `json:"user"`
	// UID is the user id; 0 is root, which passes every permission check.
	UID uint32 `json:"uid"`
	// GID is the primary group id.
	GID uint32 `json:"gid"`
	// Groups are the supplementary group ids.
	Groups []uint32 `json:"groups,omitempty"`
	// Management allows cluster changes (join, leave, keyring) and the
	// administration of users and tokens.
	Management bool `json:"management,omitempty"`
	// Server marks a request from another node of the cluster, which
	// forwards its own client's identity where it matters.
	Server bool `json:"server,omitempty"`
}

// InGroup reports whether the identity is a member of group gid.
func (id *Identity) InGroup(gid uint32) bool {
	return id.GID == gid || slices.Contains(id.Groups, gid)
}

// Permission bits asked of a file or directory (the low three bits of a
// POSIX mode, for one class).
const (
	Read    uint32 = 4
	Write   uint32 = 2
	Execute uint32 = 1 // search, for a directory
)

// Allowed reports whether id may access a file of the given mode, owner
// and group with every bit of want (a combination of Read, Write and
// Execute), with POSIX semantics: the owner class if id is the owner,
// else the group class if id is in the file's group, else the other
// class; root (uid 0) and nodes pass.
func (id *Identity) Allowed(mode, uid, gid, want uint32) bool {
	if id.Server || id.UID == 0 {
		return true
	}
	var bits uint32
	switch {
	case id.UID == uid:
		bits = mode >> 6
	case id.InGroup(gid):
		bits = mode >> 3
	default:
		bits = mode
	}
	return bits&want == want
}

type identityKey struct{}

// WithIdentity returns ctx carrying id.
func WithIdentity(ctx context.Context, id *Identity) context.Context {
	return context.WithValue(ctx, identityKey{}, id)
}

// FromContext returns the identity ctx carries, if any. A context without
// one is a request from inside the node (or from a cluster with ACLs off).
func FromContext(ctx context.Context) (*Identity, bool) {
	id, ok := ctx.Value(identityKey{}).(*Identity)
	return id, ok && id != nil
}

// User is a user record, as stored in the cluster.
type User struct {
	// Name is the login name.
	Name string `json:"name"`
	// UID, GID and Groups are the user's ids (see Identity).
	UID    uint32   `json:"uid"`
	GID    uint32   `json:"gid"`
	Groups []uint32 `json:"groups,omitempty"`
	// Management gives the user's tokens the management role.
	Management bool `json:"management,omitempty"`
	// PasswordHash is the bcrypt hash of the password ("" when none is
	// set: the user cannot log in).
	PasswordHash string `json:"password_hash,omitempty"`
}

// Identity returns the identity the user's tokens carry.
func (u *User) Identity() Identity {
	return Identity{User: u.Name, UID: u.UID, GID: u.GID, Groups: slices.Clone(u.Groups), Management: u.Management}
}

// ValidName checks a user name: 1 to 64 letters, digits, '.', '_' or '-',
// not starting with '.' or '-'.
func ValidName(name string) error {
	if name == "" || len(name) > 64 || name[0] == '.' || name[0] == '-' {
		return fmt.Errorf("%w: %q (1 to 64 of a-z A-Z 0-9 . _ -, not starting with . or -)", ErrBadName, name)
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
			return fmt.Errorf("%w: %q (1 to 64 of a-z A-Z 0-9 . _ -, not starting with . or -)", ErrBadName, name)
		}
	}
	return nil
}

// SetPassword stores the bcrypt hash of password in u.
func (u *User) SetPassword(password string) error {
	if len(password) < MinPasswordLen {
		return fmt.Errorf("%w: at least %d characters", ErrWeakPassword, MinPasswordLen)
	}
	if len(password) > 72 { // bcrypt's limit: refuse rather than truncate
		return fmt.Errorf("%w: a password has at most 72 bytes", ErrWeakPassword)
	}
	h, err := bcrypt.GenerateFromPassword([]byte(password), bcryptCost)
	if err != nil {
		return fmt.Errorf("hashing the password: %w", err)
	}
	u.PasswordHash = string(h)
	return nil
}

// CheckPassword reports ErrBadPassword unless password is u's.
func (u *User) CheckPassword(password string) error {
	if u.PasswordHash == "" || bcrypt.CompareHashAndPassword([]byte(u.PasswordHash), []byte(password)) != nil {
		return ErrBadPassword
	}
	return nil
}

// Token is a token record, as stored in the cluster (under its
// SecretHash; the secret itself is never stored).
type Token struct {
	// Identity is who the token's requests run as.
	Identity
	// Description says what the token is for ("login", "bootstrap").
	Description string `json:"description,omitempty"`
	// Created and Expires are Unix nanoseconds; Expires 0 never expires.
	Created int64 `json:"created"`
	Expires int64 `json:"expires,omitempty"`
}

// Expired reports whether the token has expired at now.
func (t *Token) Expired(now time.Time) bool {
	return t.Expires != 0 && now.UnixNano() >= t.Expires
}

// NewSecret returns a new random token secret (128 bits, base32) and the
// hash it is stored under.
func NewSecret() (secret, hash string) {
	secret = rand.Text()
	return secret, SecretHash(secret)
}

// SecretHash returns the hex SHA-256 of a token secret: the name the
// token's record is stored under.
func SecretHash(secret string) string {
	h := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(h[:])
}

// AccessorLen is the length of a token's accessor: the prefix of its
// SecretHash that lists and revocations show and accept.
const AccessorLen = 12

// Accessor returns the accessor of a token stored under hash.
func Accessor(hash string) string {
	if len(hash) > AccessorLen {
		return hash[:AccessorLen]
	}
	return hash
}

// LooksLikeAccessor reports whether s may be an accessor (or a longer
// prefix of a secret hash) rather than a secret.
func LooksLikeAccessor(s string) bool {
	if len(s) < 8 || len(s) > sha256.Size*2 {
		return false
	}
	return strings.Trim(s, "0123456789abcdef") == ""
}

// ReservedDir is the directory of the namespace that holds the cluster's
// users and tokens. Clients can neither see nor touch it; only the nodes
// read and write it.
const ReservedDir = "/.ghba"

// Reserved reports whether the clean absolute path p is ReservedDir or
// inside it.
func Reserved(p string) bool {
	return p == ReservedDir || strings.HasPrefix(p, ReservedDir+"/")
}

// Default policies (Config.DefaultPolicy) for a request without a token.
const (
	PolicyDeny  = "deny"
	PolicyAllow = "allow"
)

// Config is the `acl` section of a node's configuration.
type Config struct {
	// Enabled turns ACLs on: requests need a token (see DefaultPolicy),
	// owners come from the token, cluster changes need the management role.
	Enabled bool `mapstructure:"enabled"`
	// DefaultPolicy decides a request without a token: "deny" (the
	// default) refuses it, "allow" runs it as the user nobody (uid and gid
	// 65534), subject to the permission checks.
	DefaultPolicy string `mapstructure:"default_policy"`
	// TokenTTL is the lifetime of a login token (default 24h).
	TokenTTL time.Duration `mapstructure:"token_ttl"`
	// ServerToken is the secret the nodes present to each other (the same
	// on every node; ghba keygen makes one). When it is set, only a
	// request carrying it may call the node-to-node methods; when it is
	// not, those methods are not authenticated (a warning at start).
	ServerToken string `mapstructure:"server_token"`
}

// Nobody is the uid and gid of a request without a token under the
// "allow" default policy.
const Nobody = 65534

// WithDefaults fills in the defaults of unset fields.
func (c Config) WithDefaults() Config {
	if c.DefaultPolicy == "" {
		c.DefaultPolicy = PolicyDeny
	}
	if c.TokenTTL == 0 {
		c.TokenTTL = 24 * time.Hour
	}
	return c
}

// Validate checks the section.
func (c Config) Validate() error {
	switch c.DefaultPolicy {
	case "", PolicyDeny, PolicyAllow:
	default:
		return fmt.Errorf("default_policy %q must be deny or allow", c.DefaultPolicy)
	}
	if c.TokenTTL < 0 {
		return fmt.Errorf("token_ttl %v must not be negative", c.TokenTTL)
	}
	if c.ServerToken != "" && len(c.ServerToken) < 16 {
		return fmt.Errorf("server_token has %d characters; use at least 16 (ghba keygen makes one)", len(c.ServerToken))
	}
	return nil
}
