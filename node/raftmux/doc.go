// Package raftmux serves every Raft group of a node on the node's one raft
// port. A Mux owns the listener; each Raft group (the group Raft, one per
// shard replica) registers a Layer under its id ("group", "shard/n3") and
// runs a raft.NetworkTransport over it. A Layer's Dial connects to the
// peer's mux and writes a short header naming the id; the peer's mux reads
// the header (in a goroutine of its own, within Options.HeaderTimeout) and
// hands the connection to its layer of that id, or closes it. Every group
// keeps its own connection pool, so one group's traffic never waits behind
// another's on a connection.
//
// The header is the 4 bytes "RMUX", a version byte (Version), a length
// byte n (1..MaxIDLen) and the n bytes of the id (printable ASCII). Nothing
// is answered: a connection refused by the peer reads as closed.
//
// A node with its group Raft and one shard replica:
//
//	ln, err := net.Listen("tcp", ":7001")
//	...
//	mux := raftmux.New(ln, advertise, raftmux.Options{Logger: log})
//	go mux.Serve(ctx)
//	defer mux.Close() // after the transports
//
//	gl, err := mux.Layer("group")
//	...
//	gtrans := raftmux.NewTransport(gl, hclogger)
//	graft, err := raft.NewRaft(conf, fsm, logs, stable, snaps, gtrans)
//	...
//	sl, err := mux.Layer("shard/n3")
//	...
//	strans := raftmux.NewTransport(sl, hclogger)
//
// A group whose members can leave it and found or join another under the
// same id (a node's group Raft, replaced by a group switch) registers a
// scoped layer (Mux.ScopedLayer): its headers name the incarnation too
// ("group@g2"), and the mux refuses a connection naming an incarnation the
// node does not serve, so that the old group's leader cannot make the
// node's new Raft follow it.
//
// Closing a transport closes its layer: its id can then be registered
// again (a group Raft replaced by a group switch). Every peer of a group
// dials the same address, the node's advertised raft address; the id in
// the header tells the groups apart.
package raftmux
