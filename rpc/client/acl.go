package client

import (
	"context"

	"github.com/ghba/ghba/rpc"
)

// Client methods of the ACL API (docs/design.md, "Security"; the methods
// and their types are in package rpc, acl.go).

// ACLBootstrap creates the cluster's first management token (for the user
// root, uid 0) and returns it. It works once per cluster.
func (c *Client) ACLBootstrap(ctx context.Context) (*rpc.ACLTokenResponse, error) {
	resp := new(rpc.ACLTokenResponse)
	return resp, c.callAny(ctx, "", rpc.MethodACLBootstrap, false, &rpc.ACLBootstrapRequest{}, resp)
}

// ACLLogin exchanges a user name and password for a token.
func (c *Client) ACLLogin(ctx context.Context, user, password string) (*rpc.ACLTokenResponse, error) {
	resp := new(rpc.ACLTokenResponse)
	return resp, c.callAny(ctx, "", rpc.MethodACLLogin, false, &rpc.ACLLoginRequest{User: user, Password: password}, resp)
}

// ACLUser runs a user change: method is rpc.MethodACLUserAdd,
// MethodACLUserPasswd or rpc.MethodACLUserRemove.
func (c *Client) ACLUser(ctx context.Context, method string, req *rpc.ACLUserRequest) (*rpc.ACLUserResponse, error) {
	resp := new(rpc.ACLUserResponse)
	return resp, c.callAny(ctx, "", method, false, req, resp)
}

// ACLUsers lists the users.
func (c *Client) ACLUsers(ctx context.Context) (*rpc.ACLUserListResponse, error) {
	resp := new(rpc.ACLUserListResponse)
	return resp, c.callAny(ctx, "", rpc.MethodACLUserList, true, &rpc.ACLUserListRequest{}, resp)
}

// ACLTokens lists the tokens.
func (c *Client) ACLTokens(ctx context.Context) (*rpc.ACLTokenListResponse, error) {
	resp := new(rpc.ACLTokenListResponse)
	return resp, c.callAny(ctx, "", rpc.MethodACLTokenList, true, &rpc.ACLTokenListRequest{}, resp)
}

// ACLRevoke revokes a token given by its secret or accessor.
func (c *Client) ACLRevoke(ctx context.Context, token string) (*rpc.ACLTokenRevokeResponse, error) {
	resp := new(rpc.ACLTokenRevokeResponse)
	return resp, c.callAny(ctx, "", rpc.MethodACLTokenRevoke, true, &rpc.ACLTokenRevokeRequest{Token: token}, resp)
}

// ACLWhoAmI returns the user the client's token belongs to.
func (c *Client) ACLWhoAmI(ctx context.Context) (*rpc.ACLUser, error) {
	resp := new(rpc.ACLUser)
	return resp, c.callAny(ctx, "", rpc.MethodACLWhoAmI, true, &rpc.ACLWhoAmIRequest{}, resp)
}
