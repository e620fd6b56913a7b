#!/usr/bin/env bash
# mount-bench.sh — ghba mount against the Go client, and against the local disk,
# in one sitting on this machine (docs/benchmarks.md, "The mount").
#
# Starts the 3 agents of testdata/ (R=3, placement colocate), a file:// data store
# and a mount, then:
#   1. metadata: ROUNDS rounds, each the Go client's bench (mkdir, create, stat,
#      unlink; CONC goroutines, PATHS paths) then the same through the mount
#      (ghba bench --dir), each phase a bench run of its own so that the
#      whole machine's CPU time per operation (/proc/stat, every process: agents,
#      mount, bench) is measured per phase;
#   2. contents: a 1 GiB file written (dd bs=1M, then fsync) and read back (after
#      dropping the page cache) through the mount and on the local disk, alternated;
#   3. memory: the mount process's resident memory at rest, and its peak while cp -r
#      copies a tree of FILES files into it.
# Then the FUSE floor: the same phases on a tmpfs and through go-fuse's own
# example loopback file system over that tmpfs (it passes each call on and does
# nothing else), alternated: what FUSE alone costs per operation on this machine.
# With MDTEST=1, between 1 and 2: mdtest's phases (ghba bench --phases mdtest,
# CONC tasks of MDTEST_ITEMS items each, MDTEST_ITERATIONS iterations) through
# the Go client and through the mount in one run, and mdtest's summary;
# MDTEST_ARGS are more bench options (e.g. --unique-dir --depth 1 --branch 4).
# Prints one table per part. Needs root (FUSE, drop_caches) and the ports of
# testdata/ (741x-743x) free.
#
# Environment: GHBA_BIN (default: build bin/ghba), ROUNDS (2), CONC (16),
# PATHS (20000), SIZE_MB (1024), FILES (100000), MDTEST (unset: no mdtest
# phases), MDTEST_ITEMS (1000), MDTEST_ITERATIONS (2), MDTEST_ARGS (none),
# KEEP=1 keeps the temporary dir.
set -euo pipefail

cd "$(dirname "$0")/.."
. scripts/agents.sh
ROUNDS=${ROUNDS:-2}
CONC=${CONC:-16}
PATHS=${PATHS:-20000}
SIZE_MB=${SIZE_MB:-1024}
FILES=${FILES:-100000}
MDTEST=${MDTEST:-}
MDTEST_ITEMS=${MDTEST_ITEMS:-1000}
MDTEST_ITERATIONS=${MDTEST_ITERATIONS:-2}
read -ra MDTEST_ARGS <<<"${MDTEST_ARGS:-}"
STOP_WAIT=30
ALL=$(IFS=,; echo "${TESTDATA_ADDRS[*]}")

say() { printf '\n== %s\n' "$*" >&2; }
fail() { printf '\nmount-bench: FAILED: %s\n' "$*" >&2; exit 1; }

if [[ -n "${GHBA_BIN:-}" ]]; then
	BIN=$GHBA_BIN
else
	say "building bin/ghba"
	CGO_ENABLED=0 ${GO:-go} build -tags hashicorpmetrics -trimpath -o bin/ghba ./cmd/ghba
	BIN=bin/ghba
fi
[[ $(id -u) -eq 0 ]] || fail "run as root (FUSE mount, drop_caches)"
[[ -c /dev/fuse ]] || fail "no /dev/fuse"

TMP=$(mktemp -d "${TMPDIR:-/tmp}/ghba-mount-bench.XXXXXX")
MNT=$TMP/mnt
PIDS=()
NAMES=()
cleanup() {
	local rc=$?
	trap - EXIT INT TERM
	if grep -qs " $MNT " /proc/mounts; then "$BIN" umount --lazy "$MNT" || true; fi
	for m in "$TMP/loop" "$TMP/tmpfs"; do
		if grep -qs " $m " /proc/mounts; then umount -l "$m" || true; fi
	done
	stop_agent_pids || true
	[[ -n "${KEEP:-}" ]] && echo "kept $TMP" >&2 || rm -rf "$TMP"
	exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

ghba() { "$BIN" --addr "$ALL" --timeout 30s "$@"; }
# busy_ticks prints the whole machine's busy CPU time so far (user, nice,
# system, irq, softirq, steal; clock ticks).
busy_ticks() { awk '/^cpu /{ print $2 + $3 + $4 + $7 + $8 + $9 }' /proc/stat; }
tick_hz=$(getconf CLK_TCK)

say "starting 3 agents and a mount (in $TMP)"
start_testdata_agents "$BIN" "$TMP" >&2
wait_testdata_agents "$BIN" 120 >&2 || fail "the cluster did not come up"
ghba data-store set "file://$TMP/data" >&2
mkdir -p "$MNT"
ghba mount --background --log-file "$TMP/mount.log" "$MNT" >&2
MOUNT_PID=$(pgrep -f -- "mount --log-file $TMP/mount.log" | head -1)
[[ -n "$MOUNT_PID" ]] || fail "no mount process"
rss() { awk '/^VmRSS/ { print $2 }' "/proc/$MOUNT_PID/status"; }
REST_FRESH=$(rss)

# phase_run LABEL ROUND PHASE BENCH-ARGS... runs one bench phase, printing a row:
# label, round, phase, ops/s, p50 ms, CPU µs per operation (whole machine).
phase_run() {
	local label=$1 round=$2 phase=$3; shift 3
	local t0 t1 out ops rate p50
	t0=$(busy_ticks)
	out=$(ghba --json bench --paths "$PATHS" -c "$CONC" --phases "$phase" "$@")
	t1=$(busy_ticks)
	ops=$(jq -r '.phases[0].ops' <<<"$out")
	rate=$(jq -r '.phases[0].ops_per_sec' <<<"$out")
	p50=$(jq -r '.phases[0].p50_ms' <<<"$out")
	printf '%-7s %5s %-7s %10.0f %8.2f %10.0f\n' "$label" "$round" "$phase" "$rate" "$p50" \
		"$(echo "($t1 - $t0) * 1000000 / $tick_hz / $ops" | bc -l)"
}

command -v jq >/dev/null || fail "jq is needed (apt-get install jq)"
say "metadata: the Go client against the mount, $ROUNDS rounds, $PATHS paths, $CONC at a time; load $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-7s %5s %-7s %10s %8s %10s\n' via round phase ops/s p50-ms cpu-us/op
for r in $(seq 1 "$ROUNDS"); do
	for phase in mkdir create stat unlink; do
		phase_run client "$r" "$phase" --prefix "/client-$r"
		phase_run mount "$r" "$phase" --prefix "/mount-$r" --dir "$MNT"
	done
done

say "the FUSE floor: tmpfs against go-fuse's loopback example over it, $ROUNDS rounds"
${GO:-go} build -o "$TMP/loopback" github.com/hanwen/go-fuse/v2/example/loopback
mkdir -p "$TMP/tmpfs" "$TMP/loop"
mount -t tmpfs ghba-bench "$TMP/tmpfs"
mkdir -p "$TMP/tmpfs/direct" "$TMP/tmpfs/under"
"$TMP/loopback" -q "$TMP/loop" "$TMP/tmpfs/under" &
LOOP_PID=$!
for _ in $(seq 1 50); do grep -qs " $TMP/loop " /proc/mounts && break; sleep 0.1; done
grep -qs " $TMP/loop " /proc/mounts || fail "the loopback file system did not mount"
printf '%-7s %5s %-7s %10s %8s %10s\n' via round phase ops/s p50-ms cpu-us/op
for r in $(seq 1 "$ROUNDS"); do
	for phase in mkdir create stat unlink; do
		phase_run tmpfs "$r" "$phase" --prefix "/f-$r" --dir "$TMP/tmpfs/direct"
		phase_run loop "$r" "$phase" --prefix "/f-$r" --dir "$TMP/loop"
	done
done
fusermount3 -u "$TMP/loop" || umount -l "$TMP/loop"
wait "$LOOP_PID" || true
umount "$TMP/tmpfs"

if [[ -n "$MDTEST" ]]; then
	say "mdtest phases: the Go client and the mount, $CONC tasks of $MDTEST_ITEMS items, $MDTEST_ITERATIONS iterations ${MDTEST_ARGS[*]+${MDTEST_ARGS[*]}}; load $(cut -d' ' -f1-3 /proc/loadavg)"
	ghba bench --phases mdtest --prefix /mdtest -c "$CONC" -n "$MDTEST_ITEMS" \
		--iterations "$MDTEST_ITERATIONS" --via "client,mount:$MNT" ${MDTEST_ARGS[@]+"${MDTEST_ARGS[@]}"} </dev/null
fi

say "contents: ${SIZE_MB} MiB sequential write (dd bs=1M conv=fsync) and cold read, the mount against the local disk"
printf '%-7s %-6s %10s\n' where op MB/s
ddrate() { # prints MB/s from dd's summary line on stdin
	awk '/bytes/ { for (i = 1; i <= NF; i++) if ($i ~ /^[0-9.]+$/ && $(i + 1) ~ /^s,?$/) s = $i; b = $1 } END { printf "%.0f\n", b / s / 1e6 }'
}
for where in local mount local mount; do
	f=$TMP/big; [[ $where == mount ]] && f=$MNT/big
	w=$(dd if=/dev/zero of="$f" bs=1M count="$SIZE_MB" conv=fsync 2>&1 | ddrate)
	sync; echo 3 >/proc/sys/vm/drop_caches
	rd=$(dd if="$f" of=/dev/null bs=1M 2>&1 | ddrate)
	rm -f "$f"
	printf '%-7s %-6s %10s\n' "$where" write "$w" "$where" read "$rd"
done

say "memory of the mount process: at rest, and while cp -r copies $FILES files into it"
mkdir -p "$TMP/tree"
for d in $(seq 1 100); do
	mkdir -p "$TMP/tree/d$d"
	for f in $(seq 1 $((FILES / 100))); do echo "file $d/$f" >"$TMP/tree/d$d/f$f"; done
done
rest=$(rss)
peak=$rest
start=$SECONDS
cp -r "$TMP/tree" "$MNT/tree" &
cp_pid=$!
while kill -0 "$cp_pid" 2>/dev/null; do
	now=$(rss); ((now > peak)) && peak=$now
	sleep 0.5
done
wait "$cp_pid" || fail "cp -r into the mount failed"
copy_s=$((SECONDS - start))
diff -rq "$TMP/tree" "$MNT/tree" >/dev/null || fail "the copied tree differs"
printf 'at rest: %d MiB just mounted, %d MiB after the runs above (its block cache full)\n' $((REST_FRESH / 1024)) $((rest / 1024))
printf 'copying %d files: peak %d MiB (VmHWM %d MiB), %d s, %.0f files/s (cp copies one file at a time)\n' \
	"$FILES" $((peak / 1024)) $(($(awk '/^VmHWM/ { print $2 }' "/proc/$MOUNT_PID/status") / 1024)) \
	"$copy_s" "$(echo "$FILES / ($copy_s + 0.001)" | bc -l)"
say "mount-bench OK (load $(cut -d' ' -f1-3 /proc/loadavg))"
