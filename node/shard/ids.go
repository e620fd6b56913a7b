package shard

import "strings"

// A replica's Raft server id names the node and the incarnation of the
// node's data directory: "<node>@<incarnation>". A node whose data
// directory was wiped comes back with a new incarnation, so its replicas
// are new servers to their shards: they join as non-voters and catch up
// before they vote, and the lost incarnation is removed. Reusing the old
// id would let an empty replica vote (and grant votes it had forgotten
// granting), which can lose committed entries.

// ReplicaID returns the Raft server id of node's replicas in incarnation
// inc (node alone when inc is empty).
func ReplicaID(node, inc string) string {
	if inc == "" {
		return node
	}
	return node + "@" + inc
}

// NodeOf returns the node id of a replica's Raft server id.
func NodeOf(id string) string {
	node, _, _ := strings.Cut(id, "@")
	return node
}
