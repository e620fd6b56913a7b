// Package client is the Go client of ghba's metadata service: a Client
// that speaks the protocol of package rpc to the nodes of a cluster, with
// typed methods for the namespace, cluster, ACL and source operations
// (namespace.go, acl.go, sources.go) and Call and CallAny for any method.
// It is safe for concurrent use; create it with New and Close it when
// done. Requests, responses and errors are package rpc's types, so
//
//	c := client.New(client.Options{Addrs: []string{"10.0.0.1:7400"}})
//	defer c.Close()
//	_, err := c.Stat(ctx, "/a/b")
//	if errors.Is(err, fs.ErrNotExist) { ... }
//
// works across the network (rpc.RemoteError).
//
// # Connections
//
// The client keeps a pool of connections per address (client.go, conn.go):
// dialed lazily, at most Options.MaxConnsPerAddr of them, closed when idle
// (Options.IdleTimeout). Calls are pipelined: one connection carries many
// at once, each matched to its response by sequence number, and a second
// connection is dialed only while every one is busy. A call whose context
// ends sends a cancel frame; a call whose context has no deadline gets
// Options.Timeout, carried to the server as the time left. With
// Options.Token, every new connection presents the token in an auth frame
// before its first request.
//
// # Retries
//
// Call sends to one address and never retries elsewhere. CallAny and the
// typed methods choose a node (the path's cached home, else the node the
// shards' filters name, else random) and move to another node only when
// that is safe: when the request certainly was not executed (the dial
// failed, the pooled connection was already broken, the server refused it
// while shutting down), or, for rpc.Idempotent methods, also when a
// connection broke after the request was sent. A non-idempotent call whose
// connection broke after sending returns an error matching both
// rpc.ErrUnavailable and rpc.ErrOutcomeUnknown: it may have been applied.
// An answer from a server, even an error, is never retried. An address
// whose dial failed is tried after the others for Options.DownBackoff.
//
// # Home cache
//
// Any node answers any path, forwarding to the path's home; the client
// saves that hop by remembering the homes that replies name (homecache.go,
// Options.HomeCacheSize): a request about a path goes to its cached home,
// a change of a directory's entries to the directory's home. The cache is
// kept by directory (a directory's files usually live in its shard), with
// an entry for a path only where its home differs. A stale entry costs a
// hop, never a wrong answer.
//
// # Metadata cache
//
// With Options.Cache, Stat answers from a cache of inodes (metacache.go)
// held under leases the homes grant (rpc.StatResponse.Lease, and leases on
// a path's absence): before any change of a cached inode is applied, its
// home notifies the client (notify.go), which drops the entry before it
// acknowledges, so a cached answer is never older than what a
// linearizable stat could return. On a miss, the cache may prefetch the
// paths a Predictor expects next (PrefetchNexus, with package nexus's
// relationship graph), and ReadDir may prefetch a listing's entries
// (CacheOptions.ListPrefetch). CacheStats counts what it did.
//
// # Routing by filters
//
// With Options.RouteRefresh, the client also holds a copy of every shard's
// Bloom filter, fetched from the node that leads it and refreshed that
// often (router.go, package routing's FilterArray), and sends a request
// for a path no cache names to the node whose shard's filter alone reports
// it: a hint like a cached home, which saves the entry node's forward.
package client
