#!/usr/bin/env bash
# pjdfstest.sh — the POSIX conformance suite pjdfstest (the one FreeBSD, ZFS and
# JuiceFS test with) through a ghba mount of the 3-agent cluster of testdata/
# (R=3), as root. Builds pjdfstest from the source archive in PJDFSTEST_TOOLS
# (default: ../shared/tools/pjdfstest beside the repository; CI cannot fetch it),
# starts the agents, a file:// data store and a mount, runs every test file
# (or those matching ONLY, a regular expression on tests/<dir>/<n>.t) in a fresh
# directory of the mount, each under a timeout, and prints one line per file
# (ok / FAIL with the failed test numbers, and its time) and a summary per
# directory of the suite. The files KNOWN_FAIL names (none today) fail for
# a gap the README lists: they show as XFAIL, and as XPASS, which fails the
# run so that the list stays true, once they pass. Exit status 0 only if
# every other file run passed.
#
# QUICK=1 (what `make test` runs) leaves out the known failures and the
# slowest files, which take two thirds of the suite's time on 2 cores:
# chown/00 (84 s of `sleep 1` between its ctime checks), rename/09 and
# rename/10 (thousands of sticky-bit combinations, 75–86 s each) and the 14
# */03.t files (paths of PATH_MAX bytes, 8–9 s each).
#
# Environment: GHBA_BIN (default: build bin/ghba), PJDFSTEST_TOOLS, ONLY (a
# regex; default every file), QUICK, FILE_TIMEOUT (seconds per file, 300),
# OUT (a file to write the per-file results to), KEEP=1 keeps the temporary
# dir, MISSING_OK=1 skips the run (exit 0) when a prerequisite is missing
# unless GHBA_REQUIRE_PJDFSTEST is set.
# Needs: root, /dev/fuse, fusermount3, autoconf, automake, gcc, make, perl.
set -euo pipefail

cd "$(dirname "$0")/.."
. scripts/agents.sh
PJDFSTEST_TOOLS=${PJDFSTEST_TOOLS:-$(cd .. && pwd)/shared/tools/pjdfstest}
ONLY=${ONLY:-}
FILE_TIMEOUT=${FILE_TIMEOUT:-300}
QUICK=${QUICK:-}
# A regular expression on tests/<dir>/<n>.t for a gap the README lists;
# empty: every file is expected to pass.
KNOWN_FAIL=''
SLOW='^tests/(chown/00|rename/09|rename/10|[a-z_]+/03)\.t$'
STOP_WAIT=30
ALL=$(IFS=,; echo "${TESTDATA_ADDRS[*]}")

say() { printf '\n== %s\n' "$*" >&2; }
fail() { printf '\npjdfstest: FAILED: %s\n' "$*" >&2; exit 1; }
missing() {
	if [[ -n "${MISSING_OK:-}" && -z "${GHBA_REQUIRE_PJDFSTEST:-}" ]]; then
		printf 'pjdfstest: skipped: %s (GHBA_REQUIRE_PJDFSTEST=1 makes this an error)\n' "$*" >&2
		exit 0
	fi
	fail "$*"
}

[[ $(id -u) -eq 0 ]] || missing "run as root (FUSE mount; the suite changes owners)"
[[ -c /dev/fuse ]] || missing "no /dev/fuse"
command -v fusermount3 >/dev/null || missing "fusermount3 is needed (apt-get install fuse3)"
[[ -x "$PJDFSTEST_TOOLS/build.sh" ]] || missing "no $PJDFSTEST_TOOLS/build.sh (set PJDFSTEST_TOOLS)"
command -v prove >/dev/null || missing "prove (perl) is needed"
command -v autoreconf >/dev/null || missing "autoconf and automake are needed to build pjdfstest (apt-get install autoconf automake)"
if [[ -n "${GHBA_BIN:-}" ]]; then
	BIN=$GHBA_BIN
else
	say "building bin/ghba"
	CGO_ENABLED=0 ${GO:-go} build -tags hashicorpmetrics -trimpath -o bin/ghba ./cmd/ghba
	BIN=bin/ghba
fi
BIN=$(realpath "$BIN") # the test files run in directories of the mount

TMP=$(mktemp -d "${TMPDIR:-/tmp}/ghba-pjdfstest.XXXXXX")
MNT=$TMP/mnt
PIDS=()
NAMES=()
cleanup() {
	local rc=$?
	trap - EXIT INT TERM
	cd /
	if grep -qs " $MNT " /proc/mounts; then "$BIN" umount --lazy "$MNT" || true; fi
	stop_agent_pids || true
	if ((rc != 0)); then print_log_tails "$TMP/mount.log" "$TMP/node1.log"; fi
	[[ -n "${KEEP:-}" ]] && echo "kept $TMP" >&2 || rm -rf "$TMP"
	exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

say "building pjdfstest from $PJDFSTEST_TOOLS"
SUITE=$("$PJDFSTEST_TOOLS/build.sh" "$TMP/pjdfstest-build")
[[ -x "$SUITE/pjdfstest" ]] || fail "the build did not produce $SUITE/pjdfstest"

say "starting 3 agents and a mount (in $TMP)"
start_testdata_agents "$BIN" "$TMP" >&2
wait_testdata_agents "$BIN" 120 >&2 || fail "the cluster did not come up"
"$BIN" --addr "$ALL" --timeout 30s data-store set "file://$TMP/data" >&2
mkdir -p "$MNT"
# --allow-other: the suite runs calls as other users (-u, -g)
"$BIN" --addr "$ALL" mount --allow-other --background --log-file "$TMP/mount.log" "$MNT" >&2

mapfile -t files < <(cd "$SUITE" && find tests -name '*.t' | sort -V)
if [[ -n "$ONLY" ]]; then
	mapfile -t files < <(printf '%s\n' "${files[@]}" | grep -E -- "$ONLY" || true)
fi
if [[ -n "$QUICK" ]]; then
	mapfile -t files < <(printf '%s\n' "${files[@]}" | grep -Ev -- "${KNOWN_FAIL:+$KNOWN_FAIL|}$SLOW" || true)
fi
((${#files[@]} > 0)) || fail "no test file matches ONLY=$ONLY"
say "running ${#files[@]} test files through the mount ($FILE_TIMEOUT s each at most)"
results=$TMP/results
: >"$results"
i=0
for f in "${files[@]}"; do
	i=$((i + 1))
	dir=$MNT/run-$i
	mkdir "$dir"
	out=$TMP/out-$i
	t0=$EPOCHREALTIME
	# The suite's scripts find the binary relative to themselves and create
	# their files in the current directory.
	if (cd "$dir" && timeout --kill-after=10 "$FILE_TIMEOUT" prove -f "$SUITE/$f") >"$out" 2>&1; then
		status=ok
	else
		rc=$?
		status=FAIL
		((rc == 124 || rc == 137)) && status=TIMEOUT
	fi
	if [[ -n $KNOWN_FAIL && $f =~ $KNOWN_FAIL ]]; then
		[[ $status == ok ]] && status=XPASS || status=XFAIL
	fi
	secs=$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1fs", b - a }')
	failed=$(awk '/^not ok/ { printf "%s%s", sep, $3; sep = "," }' "$out")
	printf '%-28s %-7s %7s %s\n' "$f" "$status" "$secs" "$failed" | tee -a "$results" >&2
	rm -rf "$dir" 2>/dev/null || true
	[[ -n "${KEEP:-}" ]] || rm -f "$out"
done

say "summary per directory (files passed / run)"
awk '{ split($1, p, "/"); d = p[2]; n[d]++; if ($2 == "ok") ok[d]++; t++; if ($2 == "ok") tok++; if ($2 == "XFAIL") x++ }
	END { for (d in n) printf "%-12s %3d / %3d\n", d, ok[d], n[d] | "sort"; close("sort");
	      printf "%-12s %3d / %3d%s\n", "all", tok, t, x ? sprintf(" (%d known to fail)", x) : "" }' "$results"
[[ -n "${OUT:-}" ]] && cp "$results" "$OUT"
! grep -Ev ' (ok|XFAIL) ' "$results" >/dev/null
