// Package chaos is the container fault-injection suite of ghba.
//
// The test (chaos_test.go) builds a container image FROM scratch from the
// static ghba binary of the current source, starts 6–9 nodes in 2–3 fixed
// groups on a private docker network (static IPs, named volumes for the
// data dirs, so a restarted container keeps its address and its data), and
// drives them with concurrent rpc.Client workers from the test process
// while it injects faults through the docker CLI:
//
//   - kill -9 of a random node and of a group's Raft leader, then restart;
//   - docker pause (SIGSTOP of every process) past Serf's failure detection;
//   - a partition of one node (docker network disconnect/connect);
//   - a partition of a whole group from the other groups (iptables DROP
//     rules inside each member's network namespace, entered with nsenter;
//     the group keeps talking to itself and to clients; if nsenter or
//     iptables is missing or a probe fails, every member is disconnected
//     from the network instead);
//   - a rolling restart (SIGTERM, start) of every node;
//   - with GHBA_CHAOS_AUTO=1 (9 nodes with group auto, max_group_size 3,
//     groups read from /v1/status before each fault): an extra auto node
//     forces a split of a full group, the member the split moves is killed
//     -9 within a second and restarted, then the extra node leaves.
//
// Every operation (create, stat, rename, unlink, readdir on a few fixed
// names in a few fixed directories) is recorded with its invocation and
// response times. Afterwards the cluster is healed, the final contents are
// read through every node, and the history is checked:
//
//   - linearizability against a sequential model of one directory
//     (porcupine, one partition per directory; renames stay within a
//     directory); an operation whose outcome is unknown (timeout, broken
//     connection, "unavailable" from a server) may take effect at any time
//     after its invocation, so it gets a return time after the end of the
//     history;
//   - no acknowledged create or rename is lost and no deleted path comes
//     back (the last write of a name that nothing overlapped decides the
//     final state, checked directly for a readable message);
//   - every answer is a correct answer or "unavailable", never another
//     error.
//
// On a failure the history (JSON), porcupine's HTML visualization and every
// node's docker logs are kept in a directory the test prints.
package chaos
