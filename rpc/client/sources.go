package client

import (
	"context"

	"github.com/ghba/ghba/rpc"
)

// SourcePut registers a source (create: only if the name is new) or
// replaces its record.
func (c *Client) SourcePut(ctx context.Context, s *rpc.Source, create bool) (*rpc.SourcePutResponse, error) {
	resp := new(rpc.SourcePutResponse)
	return resp, c.callAny(ctx, "", rpc.MethodSourcePut, !create, &rpc.SourcePutRequest{Source: *s, Create: create}, resp)
}

// Sources lists the registered sources.
func (c *Client) Sources(ctx context.Context) (*rpc.SourceListResponse, error) {
	resp := new(rpc.SourceListResponse)
	return resp, c.callAny(ctx, "", rpc.MethodSourceList, true, &rpc.SourceListRequest{}, resp)
}

// SourceRemove removes a source's registration.
func (c *Client) SourceRemove(ctx context.Context, name string) error {
	return c.callAny(ctx, "", rpc.MethodSourceRemove, false, &rpc.SourceRemoveRequest{Name: name}, &rpc.SourceRemoveResponse{})
}

// DiscoverShares lists the machines whose share agents announce folders.
func (c *Client) DiscoverShares(ctx context.Context) (*rpc.SourceDiscoverResponse, error) {
	resp := new(rpc.SourceDiscoverResponse)
	return resp, c.callAny(ctx, "", rpc.MethodSourceDiscover, true, &rpc.SourceDiscoverRequest{}, resp)
}
