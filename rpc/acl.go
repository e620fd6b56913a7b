package rpc

// ACL methods (docs/design.md, "Security"). Bootstrap and Login need no
// token; the others need one with the management role.
const (
	MethodACLBootstrap   = "ACL.Bootstrap"   // ACLBootstrapRequest → ACLTokenResponse
	MethodACLLogin       = "ACL.Login"       // ACLLoginRequest → ACLTokenResponse
	MethodACLUserAdd     = "ACL.UserAdd"     // ACLUserRequest → ACLUserResponse
	MethodACLUserList    = "ACL.UserList"    // ACLUserListRequest → ACLUserListResponse
	MethodACLUserPasswd  = "ACL.UserPasswd"  // ACLUserRequest → ACLUserResponse
	MethodACLUserRemove  = "ACL.UserRemove"  // ACLUserRequest → ACLUserResponse
	MethodACLTokenList   = "ACL.TokenList"   // ACLTokenListRequest → ACLTokenListResponse
	MethodACLTokenRevoke = "ACL.TokenRevoke" // ACLTokenRevokeRequest → ACLTokenRevokeResponse
	MethodACLWhoAmI      = "ACL.WhoAmI"      // ACLWhoAmIRequest → ACLUser
)

// ACLBootstrapRequest asks for the cluster's first management token. It
// succeeds once per cluster; later calls fail with fs.ErrExist.
type ACLBootstrapRequest struct{}

// ACLTokenResponse carries a new token's secret.
type ACLTokenResponse struct {
	// Token is the secret: present it with client.Options.Token.
	Token string `json:"token"`
	// Accessor names the token in lists and revocations.
	Accessor string `json:"accessor"`
	// User is the user the token belongs to.
	User string `json:"user"`
	// Expires is the expiry in Unix nanoseconds (0: never).
	Expires int64 `json:"expires,omitempty"`
}

// ACLLoginRequest exchanges a user's password for a token.
type ACLLoginRequest struct {
	User     string `json:"user"`
	Password string `json:"password"`
}

// ACLUser describes a user (never with its password).
type ACLUser struct {
	Name       string   `json:"name"`
	UID        uint32   `json:"uid"`
	GID        uint32   `json:"gid"`
	Groups     []uint32 `json:"groups,omitempty"`
	Management bool     `json:"management,omitempty"`
}

// ACLUserRequest adds a user (UserAdd: every field; Password may be empty
// for a user who cannot log in yet), sets a user's password (UserPasswd:
// Name and Password) or removes a user and revokes its tokens
// (UserRemove: Name).
type ACLUserRequest struct {
	ACLUser
	Password string `json:"password,omitempty"`
}

// ACLUserResponse is the user after the change.
type ACLUserResponse struct {
	User ACLUser `json:"user"`
	// Revoked counts the tokens a removal revoked.
	Revoked int `json:"revoked,omitempty"`
}

// ACLUserListRequest lists the users.
type ACLUserListRequest struct{}

// ACLUserListResponse lists the users by name.
type ACLUserListResponse struct {
	Users []ACLUser `json:"users"`
}

// ACLTokenListRequest lists the tokens.
type ACLTokenListRequest struct{}

// ACLTokenInfo describes a token (never its secret).
type ACLTokenInfo struct {
	Accessor    string `json:"accessor"`
	User        string `json:"user"`
	Management  bool   `json:"management,omitempty"`
	Description string `json:"description,omitempty"`
	Created     int64  `json:"created"`
	Expires     int64  `json:"expires,omitempty"`
	Expired     bool   `json:"expired,omitempty"`
}

// ACLTokenListResponse lists the tokens, oldest first.
type ACLTokenListResponse struct {
	Tokens []ACLTokenInfo `json:"tokens"`
}

// ACLTokenRevokeRequest revokes a token given by its secret or its
// accessor.
type ACLTokenRevokeRequest struct {
	Token string `json:"token"`
}

// ACLTokenRevokeResponse names the revoked token.
type ACLTokenRevokeResponse struct {
	Accessor string `json:"accessor"`
}

// ACLWhoAmIRequest asks who the connection's token belongs to.
type ACLWhoAmIRequest struct{}
