package client

import (
	"context"

	"github.com/ghba/ghba/rpc"
)

// DataStore returns the cluster's data store record (rpc.DataStore; an
// empty URL when none is set).
func (c *Client) DataStore(ctx context.Context) (*rpc.DataStoreResponse, error) {
	resp := new(rpc.DataStoreResponse)
	return resp, c.callAny(ctx, "", rpc.MethodDataStoreGet, true, &rpc.DataStoreGetRequest{}, resp)
}

// SetDataStore sets the cluster's data store (rpc.DataStoreSetRequest): a
// different URL already set is refused with an error matching fs.ErrExist
// unless req.Force. Setting a URL is idempotent, so a call whose answer
// was lost is retried at another node.
func (c *Client) SetDataStore(ctx context.Context, req *rpc.DataStoreSetRequest) (*rpc.DataStoreResponse, error) {
	resp := new(rpc.DataStoreResponse)
	return resp, c.callAny(ctx, "", rpc.MethodDataStoreSet, true, req, resp)
}
