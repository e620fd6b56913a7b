package rpc

import (
	"context"
	"regexp"
)

var sourceName = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

// ValidSourceName reports whether name may name a source: 1 to 64 of
// A-Z a-z 0-9 . _ -, and not "." or "..".
func ValidSourceName(name string) bool {
	return sourceName.MatchString(name) && name != "." && name != ".."
}

// SourcePut registers a source (create: only if the name is new) or
// replaces its record.
func (c *Client) SourcePut(ctx context.Context, s *Source, create bool) (*SourcePutResponse, error) {
	resp := new(SourcePutResponse)
	return resp, c.callAny(ctx, "", MethodSourcePut, !create, &SourcePutRequest{Source: *s, Create: create}, resp)
}

// Sources lists the registered sources.
func (c *Client) Sources(ctx context.Context) (*SourceListResponse, error) {
	resp := new(SourceListResponse)
	return resp, c.callAny(ctx, "", MethodSourceList, true, &SourceListRequest{}, resp)
}

// SourceRemove removes a source's registration.
func (c *Client) SourceRemove(ctx context.Context, name string) error {
	return c.callAny(ctx, "", MethodSourceRemove, false, &SourceRemoveRequest{Name: name}, &SourceRemoveResponse{})
}
