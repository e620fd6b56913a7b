#!/usr/bin/env bash
# demo.sh — start a 3-node ghba cluster on loopback from testdata/node{1,2,3}.yaml
# as separate processes, load a few thousand paths, look every path up through
# every node, print the lookups resolved per level and the hops, stop the
# cluster cleanly; where FUSE works, mount it (ghba mount) and use it with
# cp, ls, diff, grep, mv, ln and cat. Exits non-zero if anything fails.
#
# Usage: scripts/demo.sh            (from anywhere; builds bin/ghba first)
# Environment:
#   GHBA_BIN=path     use this binary instead of building bin/ghba
#   DEMO_PATHS=N      paths to create (default 3000)
#   DEMO_WAIT=S       seconds to wait for the cluster to form (default 60)
#   DEMO_KEEP=1       keep the temporary directory (data dirs and logs)
set -euo pipefail

cd "$(dirname "$0")/.."
. scripts/agents.sh
PATHS=${DEMO_PATHS:-3000}
WAIT=${DEMO_WAIT:-60}
STOP_WAIT=30
ADDRS=("${TESTDATA_ADDRS[@]}")
ALL=$(IFS=,; echo "${ADDRS[*]}")

say() { printf '\n== %s\n' "$*"; }
fail() { printf '\ndemo: FAILED: %s\n' "$*" >&2; exit 1; }

if [[ -n "${GHBA_BIN:-}" ]]; then
	BIN=$GHBA_BIN
else
	say "building bin/ghba"
	CGO_ENABLED=0 ${GO:-go} build -tags hashicorpmetrics -trimpath -o bin/ghba ./cmd/ghba
	BIN=bin/ghba
fi
[[ -x "$BIN" ]] || fail "$BIN is not an executable"

TMP=$(mktemp -d "${TMPDIR:-/tmp}/ghba-demo.XXXXXX")
PIDS=()
NAMES=()
STOPPED=0

# stop_agents stops every agent (scripts/agents.sh); non-zero if one did not
# exit with status 0.
stop_agents() {
	local rc=0
	stop_agent_pids || rc=1
	STOPPED=1
	return $rc
}

cleanup() {
	local rc=$?
	trap - EXIT INT TERM
	if ((${MOUNTED:-0} == 1)); then
		"$BIN" umount --lazy "$TMP/mnt" || rc=1
	fi
	if ((STOPPED == 0 && ${#PIDS[@]} > 0)); then
		stop_agents || rc=1
	fi
	if ((rc != 0)); then
		for i in 1 2 3; do
			if [[ -f "$TMP/node$i.log" ]]; then
				echo "---- last lines of node$i.log" >&2
				tail -n 15 "$TMP/node$i.log" >&2
			fi
		done
	fi
	if [[ -n "${DEMO_KEEP:-}" ]]; then
		echo "demo: kept $TMP" >&2
	else
		rm -rf "$TMP"
	fi
	exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

ghba() { "$BIN" --timeout 5s "$@"; }

for a in "${ADDRS[@]}"; do
	if ghba --addr "$a" --timeout 1s members >/dev/null 2>&1; then
		fail "something already answers on $a: stop it first (ports 7410-7433 are used)"
	fi
done

say "starting 3 agents (data and logs in $TMP)"
start_testdata_agents "$BIN" "$TMP"

say "waiting up to ${WAIT}s for 3 alive members in one group with a leader"
wait_testdata_agents "$BIN" "$WAIT" || fail "the cluster did not come up (see the logs below)"
ghba --addr "${ADDRS[0]}" members
echo
ghba --addr "${ADDRS[0]}" groups

say "a few CLI commands"
# show prints a command, then runs it.
show() { printf '$ ghba %s\n' "$*"; ghba "$@"; }
show --addr "${ADDRS[0]}" mkdir -p /home/alice/projects
show --addr "${ADDRS[1]}" create /home/alice/notes.txt
show --addr "${ADDRS[2]}" stat /home/alice/notes.txt
show --addr "${ADDRS[2]}" chmod 600 /home/alice/notes.txt
show --addr "${ADDRS[0]}" mv /home/alice/notes.txt /home/alice/projects/notes.txt
show --addr "${ADDRS[1]}" ls /home/alice/projects
show --addr "${ADDRS[0]}" lookup --json /home/alice/projects/notes.txt
if ghba --addr "${ADDRS[1]}" stat /home/alice/notes.txt >/dev/null 2>&1; then
	fail "stat of a renamed path succeeded"
else
	rc=$?
	((rc == 3)) || fail "stat of a renamed path: exit $rc, want 3 (not found)"
	echo "stat of the old name: exit 3 (not found), as expected"
fi

say "importing this repository's tree (with the start of each text file), then searching it by name and by text"
show --addr "$ALL" import . --to /src/ghba --no-progress --no-owners --content
show --addr "$ALL" import . --to /src/ghba --no-progress --no-owners --content
show --addr "$ALL" find /src/ghba --name '*.yaml' --type f --sort
show --addr "$ALL" find /src/ghba --text 'bloom filter' --limit 5

say "creating $PATHS paths, then looking each up through every node"
ghba --addr "$ALL" bench --paths "$PATHS" --prefix /demo --concurrency 16

if [[ -c /dev/fuse ]]; then
	say "mounting the cluster with FUSE (contents in a file:// data store) and using it with ordinary tools"
	MNT=$TMP/mnt
	mkdir -p "$MNT"
	show --addr "$ALL" data-store set "file://$TMP/data-store"
	show --addr "$ALL" mount --background --log-file "$TMP/mount.log" "$MNT"
	MOUNTED=1
	run() { printf '$ %s\n' "$*"; "$@"; }
	run cp -r cmd/ghba/mount "$MNT/home/alice/projects/"
	run ls -l "$MNT/home/alice/projects/mount"
	run diff -r cmd/ghba/mount "$MNT/home/alice/projects/mount"
	echo "diff -r: the copy is identical"
	run sh -c "grep -l 'close-to-open' $MNT/home/alice/projects/mount/*.go"
	run mv "$MNT/home/alice/projects/mount" "$MNT/home/alice/mount-src"
	run ln "$MNT/home/alice/mount-src/node.go" "$MNT/home/alice/node.go"
	run stat -c '%n: %h links, inode %i' "$MNT/home/alice/node.go" "$MNT/home/alice/mount-src/node.go"
	run sh -c "cat $MNT/home/alice/projects/notes.txt; echo 'written through the mount' > $MNT/home/alice/projects/notes.txt"
	show --addr "$ALL" stat /home/alice/projects/notes.txt
	show --addr "$ALL" ls /home/alice/mount-src
	show umount "$MNT"
	MOUNTED=0
else
	say "skipping the mount: this machine has no /dev/fuse"
fi

say "files homed per node"
ghba --addr "${ADDRS[0]}" members

say "stopping the cluster (SIGTERM)"
stop_agents || fail "an agent did not shut down cleanly"
echo "all agents exited with status 0"
say "demo OK"
