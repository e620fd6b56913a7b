// Package chaos is the container fault-injection suite of ghba.
//
// The test (chaos_test.go) builds a container image FROM scratch from the
// static ghba binary of the current source, starts 6–9 nodes in 2–3 fixed
// groups on a private docker network (static IPs, named volumes for the
// data dirs, so a restarted container keeps its address and its data), and
// drives them with concurrent client.Client workers from the test process
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
//   - a rolling restart (SIGTERM, start) of every node: a planned
//     operation (the agent hands its leaderships over before it exits),
//     with no fail-over window;
//   - hand-back: three times, kill -9 of one shard's owner (its preferred
//     leader), a wait for the shard's new leader, 3 s down, a start, and a
//     wait until the shards have settled: the leadership handed back to
//     the owner, a planned move with no window after the start;
//   - rolling-upgrade: the nodes start as an older build (this binary with
//     GHBA_TEST_PIN_LOG_FORMAT=1: shard log format 1 only, halting on a
//     format 2 entry) when the run has this fault; each node in turn is
//     stopped (SIGTERM), its container recreated without the pin, and the
//     cluster must converge; format 1 must stay in use until the last node
//     runs this build, then format 2 (ghba members' log_format_in_use). A
//     planned operation: no window. On upgraded nodes it is a rolling
//     restart by stop and start;
//   - wipe: kill -9 of a random node; once the shards it led have new
//     leaders (/v1/status) and it has been down 15 s (degradedHold, past
//     the fail-over window of the availability check below), its
//     container is replaced by one of the same
//     name, address, node id and group on a new, empty volume (the old
//     container is kept stopped for its logs), which joins through the
//     other nodes instead of bootstrapping; the fault ends when the
//     cluster has converged and every shard is settled again: led by its
//     owner, all its replicas voting, none catching up (bounded by
//     recoverTimeout);
//   - kill-shard-leader-repeat: three times in a row, kill -9 of the
//     leader of one random shard (read from /v1/status), a wait (at most
//     30 s) until another node reports that it leads the shard, 15 s down
//     in all (degradedHold), a start of the killed node and a wait until
//     the cluster has converged (not until the shards have settled: the
//     next round may kill the new leader while the owner catches up);
//     then the shards must settle;
//   - with GHBA_CHAOS_AUTO=1 (9 nodes with group auto, max_group_size 3,
//     groups read from /v1/status before each fault): an extra auto node
//     forces a split of a full group, the member the split moves is killed
//     -9 within a second and restarted, then the extra node leaves;
//   - with GHBA_CHAOS_DOUBLE=1 (the default of make chaos) one fault slot
//     in three overlaps two faults on different nodes, as they overlap in
//     production: a node partition or a kill during a rolling restart, a
//     pause during a leader kill, a kill during a group partition, a pause
//     and a partition, a partition and a leader kill (DoubleFaults).
//
// A fault ends once the cluster has converged (every node joined, knowing
// its group's leader and the root's home, seeing every other node up) and
// its shards have settled (each led by its owner, with min(3, group size)
// replicas voting and none catching up), within recoverTimeout; so does
// each step of a rolling restart. The workload starts once the shards of
// the new cluster have settled.
//
// # The workload and its model
//
// The workers use eight root directories at a time, a generation
// (/chaos0-0 … /chaos0-7); every fault slot begins a new generation of
// fresh roots, so a root sees at most one fault. In each root they use
// two directory slots x and y and three file names a, b, c in each slot:
// create, stat, unlink, rename within a slot and across the two slots (a
// file replaces a file), readdir of a slot and of the root, mkdir (of an
// existing name: "exists"), rmdir (of a non-empty directory: "not
// empty"), and renames of a slot onto the other (a directory replaces an
// empty directory; a non-empty one: "not empty"). Every create and mkdir
// gives its inode a unique UID, its token; a rename keeps it and every
// stat answers it, so a stat names the very operation that created what
// it sees. Half the workers (the odd ones) use a client metadata cache
// (client.Options.Cache): their stats are answered from inodes, and from
// absences, cached under the nodes' leases whenever they can be; each such
// worker stats a path again after a stat that answered it or said it does
// not exist, so that the cache answers; and the checks hold them to the
// same standard.
//
// Every operation is recorded with its invocation and response times.
// An operation whose outcome the client cannot know (timeout, broken
// connection, "unavailable" from a server) is kept: a write may take
// effect at any time after its call. To keep those few, a worker whose
// write had an unknown outcome writes nothing more until it has read back
// the paths that write touches (stats with a fresh deadline, retried with
// backoff up to 90 s, recorded as ordinary operations); and a stat that
// answers the token of an unknown create or mkdir proves that it took
// effect before that stat returned (ResolveByTokens) — never more than
// that: nothing is turned into an acknowledgment.
//
// # The checks
//
// Afterwards the cluster is healed, every root, slot and path is read
// through every node, and the history is checked:
//
//   - linearizability against a sequential model of one root (porcupine),
//     one partition per root: no operation touches two roots, so the roots
//     are checked apart, at most GOMAXPROCS at once, within a time bound
//     and a memory bound (porcupine has none: the model adds up what each
//     step the search accepts costs and past the bound refuses every step,
//     which ends the search). A write with an unknown outcome does not make
//     the search branch: the model's state is the set of possible
//     namespaces, each with the pending writes that may still take effect
//     ("armed"), and before every operation an armed write may fire. The
//     run FAILS unless every partition is Ok: Illegal comes with a
//     counterexample (the longest linearizable prefix, the possible states
//     after it and why each next operation does not fit), Unknown with the
//     bound that stopped it;
//   - no acknowledged create or rename is lost and no deleted path comes
//     back (the last write of a path that nothing overlapped decides the
//     final state, and a create its token, checked directly for a readable
//     message);
//   - every answer is a correct answer or "unavailable", never another
//     error;
//   - availability: no operation answers "unavailable" (an error that
//     matches rpc.ErrUnavailable: a server's "unavailable" or "not the
//     leader", a client that reached no node, a broken connection) outside
//     a fail-over window. Every shard has 3 replicas on the members of its
//     group, so one node out of service leaves every shard a live
//     majority. The faults record each node's outage (down: killed,
//     paused, cut off, stopped; up: started, unpaused, reconnected; back:
//     the cluster seen converged again and its shards settled: each led
//     by its owner, all its replicas voting), and an "unavailable" is accepted
//     only if the operation overlaps failoverWindow (10 s) after a node
//     went down, or the span from its up to failoverWindow after its back.
//     Planned operations open none: any "unavailable" during a rolling
//     restart or upgrade, or after the start of hand-back's node, fails
//     the run.
//     Where a shard may genuinely lack a live majority "unavailable" is
//     the right answer, and the window is the whole outage plus
//     noMajorityWindow (30 s) after its back: a group partition (the
//     group's shards have no majority as the other groups see them), two
//     members of one group out at once (double faults; a node is out from
//     its down until every node sees it running again), and split-kill
//     (the groups change). A stall of the host (the harness's own clock
//     ticking 300 ms late or more: CPU or I/O starvation of the machine
//     that runs every container, which can make every shard leader miss
//     its 500 ms lease at once) counts as an outage of every node
//     (host-stall), with failoverWindow after it. Every other
//     "unavailable" fails the run, with the operations listed (time,
//     operation and path, node asked, error).
//     The faults follow each other closely, so the windows cover most of
//     a run: the check bites where a node stays down past its window (a
//     wipe and each round of kill-shard-leader-repeat hold their node
//     down degradedHold, 15 s; a pause or a partition whose detection
//     takes longer) and where faults are further apart than the windows;
//     each run reports the share of the workload's time it covered.
//
// Each run reports its operations, faults by kind, unknown outcomes
// (count and share; writes resolved by a token, writes left pending), the
// check's verdict, time, partitions and steps, and the "unavailable"
// answers inside and outside the fail-over windows, with the windows and
// the share of the workload's time the availability check covers.
//
// On a failure the history (JSON, with the summary and the check's
// report), counterexample.txt, porcupine's HTML visualization of the
// partitions that failed and every node's docker logs are kept in a
// directory the test prints.
//
// # A broken server
//
// With GHBA_CHAOS_BROKEN=<mode> the image is built with the ghba_broken
// tag and the nodes run with GHBA_STORE_BROKEN=<mode> (node/store's
// broken.go): "stale" serves directory listings up to a second old,
// "early-ack" acknowledges a local file create (a Commit, or a shard
// replica's log entry) 300 ms before it applies it. TestChaos then fails;
// TestChaosBroken (make chaos-broken BROKEN=stale) passes only if the
// check answers Illegal with a counterexample. A broken store may also
// keep the cluster from recovering (a fault that does not heal, final
// reads without an answer): TestChaosBroken logs that, and judges only
// the check's verdict.
package chaos
