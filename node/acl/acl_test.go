package acl

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestAllowed(t *testing.T) {
	alice := &Identity{User: "alice", UID: 1000, GID: 1000, Groups: []uint32{50}}
	tests := []struct {
		name           string
		id             *Identity
		mode, uid, gid uint32
		want           uint32
		ok             bool
	}{
		{"owner rwx", alice, 0o700, 1000, 1, Read | Write | Execute, true},
		{"owner class decides, not other", alice, 0o077, 1000, 1000, Read, false},
		{"group by primary gid", alice, 0o070, 1, 1000, Write, true},
		{"group by supplementary gid", alice, 0o050, 1, 50, Read | Execute, true},
		{"group lacks write", alice, 0o050, 1, 50, Write, false},
		{"other", alice, 0o001, 1, 1, Execute, true},
		{"other denied", alice, 0o700, 1, 1, Execute, false},
		{"root passes", &Identity{UID: 0}, 0o000, 1, 1, Read | Write | Execute, true},
		{"node passes", &Identity{UID: 5, Server: true}, 0o000, 1, 1, Write, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.id.Allowed(tt.mode, tt.uid, tt.gid, tt.want); got != tt.ok {
				t.Errorf("Allowed(%#o, uid %d, gid %d, %b) = %v, want %v", tt.mode, tt.uid, tt.gid, tt.want, got, tt.ok)
			}
		})
	}
}

func TestPassword(t *testing.T) {
	var u User
	if err := u.SetPassword("short"); !errors.Is(err, ErrWeakPassword) {
		t.Fatalf("short password: %v, want ErrWeakPassword", err)
	}
	if err := u.CheckPassword(""); !errors.Is(err, ErrBadPassword) {
		t.Fatalf("user without a password: %v, want ErrBadPassword", err)
	}
	if err := u.SetPassword("correct horse"); err != nil {
		t.Fatal(err)
	}
	if u.PasswordHash == "" || u.PasswordHash == "correct horse" {
		t.Fatalf("hash %q", u.PasswordHash)
	}
	if err := u.CheckPassword("correct horse"); err != nil {
		t.Errorf("right password: %v", err)
	}
	if err := u.CheckPassword("correct horsE"); !errors.Is(err, ErrBadPassword) {
		t.Errorf("wrong password: %v, want ErrBadPassword", err)
	}
}

func TestValidName(t *testing.T) {
	for name, ok := range map[string]bool{
		"alice": true, "a.b_c-1": true, "": false, ".hidden": false, "-x": false,
		"a/b": false, "a b": false, "é": false, string(make([]byte, 65)): false,
	} {
		if err := ValidName(name); (err == nil) != ok {
			t.Errorf("ValidName(%q) = %v, want ok %v", name, err, ok)
		}
	}
}

func TestSecretsAndTokens(t *testing.T) {
	s1, h1 := NewSecret()
	s2, h2 := NewSecret()
	if s1 == s2 || h1 == h2 || SecretHash(s1) != h1 || len(h1) != 64 {
		t.Fatalf("secrets %q %q, hashes %q %q", s1, s2, h1, h2)
	}
	if LooksLikeAccessor(s1) || !LooksLikeAccessor(Accessor(h1)) || !LooksLikeAccessor(h1) {
		t.Errorf("a secret must not look like an accessor, an accessor must: %q %q", s1, Accessor(h1))
	}
	now := time.Now()
	tok := Token{Expires: now.Add(time.Minute).UnixNano()}
	if tok.Expired(now) || !tok.Expired(now.Add(time.Minute)) || (&Token{}).Expired(now) {
		t.Error("Expired")
	}
}

func TestContextAndReserved(t *testing.T) {
	if _, ok := FromContext(context.Background()); ok {
		t.Error("identity in an empty context")
	}
	id := &Identity{User: "bob"}
	if got, ok := FromContext(WithIdentity(context.Background(), id)); !ok || got != id {
		t.Errorf("FromContext = %v, %v", got, ok)
	}
	for p, want := range map[string]bool{"/.ghba": true, "/.ghba/acl/users/x": true, "/.ghbax": false, "/a/.ghba": false, "/": false} {
		if Reserved(p) != want {
			t.Errorf("Reserved(%q) = %v", p, !want)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	for _, tt := range []struct {
		c  Config
		ok bool
	}{
		{Config{}, true},
		{Config{Enabled: true}.WithDefaults(), true},
		{Config{DefaultPolicy: "maybe"}, false},
		{Config{TokenTTL: -time.Second}, false},
		{Config{ServerToken: "short"}, false},
		{Config{ServerToken: "0123456789abcdef"}, true},
	} {
		if err := tt.c.Validate(); (err == nil) != tt.ok {
			t.Errorf("%+v: Validate() = %v, want ok %v", tt.c, err, tt.ok)
		}
	}
	if d := (Config{}).WithDefaults(); d.DefaultPolicy != PolicyDeny || d.TokenTTL != 24*time.Hour {
		t.Errorf("defaults %+v", d)
	}
}
