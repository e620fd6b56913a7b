#!/usr/bin/env bash
# compare-etcd.sh — measure ghba and a 3-member etcd side by side on this
# machine, in one run, one system after the other (never both at once).
#
# Per round (CMP_ROUNDS, default 1):
#   etcd: start 3 members on loopback (temporary data dirs, etcd's default
#         tuning), wait until every member reports healthy, run
#         scripts/etcdbench (put, serializable get, linearizable get of the
#         paths of ghba bench's tree as flat keys, CMP_VALUE_SIZE-byte values),
#         stop the members;
#   ghba: start the 3 agents of testdata/node{1,2,3}.yaml (scripts/agents.sh),
#         wait until they form one group, run
#         "ghba bench --phases mkdir,create,stat" with the same -c and --paths,
#         then, once the filter replicas hold the new paths (5 s: twice the
#         default propagate_interval), "--phases stat-uncached,stat-routed":
#         every stat through a client without the home cache, routed by the
#         cluster, then through one that routes by the shards' filters,
#         stop the agents.
# Then it prints one table (operation, etcd ops/s p50 p99, ghba ops/s p50 p99,
# ratio ghba/etcd), the machine (nproc, load averages before and after each
# system) and the exact commands it ran. The figures depend on what else the
# machine is doing: compare the load averages before trusting them.
#
# Installs Debian's etcd-server (apt-get) if there is no etcd on the PATH.
# Fails before starting anything if one of the ports is in use: etcd member i
# uses CMP_ETCD_PORT+10(i-1) (client) and +1 (peer); ghba uses the ports of
# testdata/node*.yaml (7410-7433).
#
# Usage: scripts/compare-etcd.sh      (from anywhere; builds bin/ghba first)
# Environment:
#   GHBA_BIN=path         use this binary instead of running make build
#   CMP_CONCURRENCY=16    client goroutines (both benchmarks)
#   CMP_PATHS=20000       paths / keys (both benchmarks)
#   CMP_VALUE_SIZE=128    etcd value bytes
#   CMP_ROUNDS=1          rounds (etcd then ghba in each)
#   CMP_GHBA_CONFIGS="replication=1 replication=3"
#                         ghba clusters to run in each round, one after the
#                         other: space-separated, each a comma-separated list
#                         of config keys (key=value) set on all 3 agents over
#                         testdata/'s (as GHBA_KEY environment variables);
#                         tls=on adds TLS on every port and gossip
#                         encryption (files made with ghba tls and keygen)
#   CMP_ETCD_PORT=22379   first etcd client port
#   CMP_WAIT=60           seconds to wait for a cluster to be ready
#   CMP_KEEP=1            keep the temporary directory (data, logs, JSON)
# Needs go, jq and curl.
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$(pwd)
. scripts/agents.sh
CONC=${CMP_CONCURRENCY:-16}
PATHS=${CMP_PATHS:-20000}
VSIZE=${CMP_VALUE_SIZE:-128}
ROUNDS=${CMP_ROUNDS:-1}
read -r -a CONFIGS <<<"${CMP_GHBA_CONFIGS:-replication=1 replication=3}"
EPORT=${CMP_ETCD_PORT:-22379}
WAIT=${CMP_WAIT:-60}
STOP_WAIT=30

say() { printf '== %s\n' "$*" >&2; }
fail() { printf '\ncompare-etcd: FAILED: %s\n' "$*" >&2; exit 1; }

for tool in ${GO:-go} jq curl; do
	command -v "$tool" >/dev/null || fail "$tool is required"
done

TMP=$(mktemp -d "${TMPDIR:-/tmp}/ghba-compare-etcd.XXXXXX")
PIDS=()
NAMES=()
LOGS=()
COMMANDS=()
ROUND=0

# stop_all [STATUSES] stops whatever runs in PIDS (scripts/agents.sh); non-zero
# if a process did not exit with one of STATUSES (default "0"; etcd members die
# by the SIGTERM they get: 143).
stop_all() {
	local rc=0
	STOP_OK=${1:-0} stop_agent_pids || rc=1
	PIDS=()
	NAMES=()
	return $rc
}

cleanup() {
	local rc=$?
	trap - EXIT INT TERM
	if ((${#PIDS[@]} > 0)); then
		stop_all "0 143" || rc=1
	fi
	if ((rc != 0)); then
		print_log_tails "${LOGS[@]}"
	fi
	if [[ -n "${CMP_KEEP:-}" ]]; then
		echo "compare-etcd: kept $TMP" >&2
	else
		rm -rf "$TMP"
	fi
	exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# record adds a command line to the report (round 1's only).
record() {
	((ROUND == 1)) && COMMANDS+=("$*")
	return 0
}
# quote prints its arguments as a shell command line (quoting only those that need it).
quote() {
	local a out=()
	for a in "$@"; do
		if [[ $a =~ ^[A-Za-z0-9_./:=,@%+-]+$ ]]; then out+=("$a"); else out+=("$(printf '%q' "$a")"); fi
	done
	echo "${out[*]}"
}
# run records a command line, then runs it.
run() {
	record "$(quote "$@")"
	"$@"
}
loadavg() { cut -d' ' -f1-3 /proc/loadavg; }

# port_taken PORT succeeds if something listens on PORT (TCP or UDP).
port_taken() {
	if command -v ss >/dev/null; then
		[[ -n "$(ss -Htuln "sport = :$1" 2>/dev/null)" ]]
	else
		(exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
	fi
}
cport() { echo $((EPORT + 10 * ($1 - 1))); }    # etcd member I's client port
pport() { echo $((EPORT + 10 * ($1 - 1) + 1)); } # etcd member I's peer port
GHBA_PORTS=$(awk '$1 ~ /^(rpc|raft|serf|http):$/ { print $2 }' testdata/node1.yaml testdata/node2.yaml testdata/node3.yaml)
# check_ports etcd|ghba fails if one of that system's ports is taken.
check_ports() {
	local p
	if [[ $1 == etcd ]]; then
		for p in $(cport 1) $(pport 1) $(cport 2) $(pport 2) $(cport 3) $(pport 3); do
			if port_taken "$p"; then
				fail "etcd's port $p is in use (ss -tulnp 'sport = :$p' shows by what): stop it, or choose other ports with CMP_ETCD_PORT"
			fi
		done
	else
		for p in $GHBA_PORTS; do
			if port_taken "$p"; then
				fail "ghba's port $p (testdata/node*.yaml) is in use (ss -tulnp 'sport = :$p' shows by what): stop it first"
			fi
		done
	fi
}
check_ports etcd
check_ports ghba

# etcd: Debian 12's etcd-server is 3.4.
if ! command -v etcd >/dev/null; then
	command -v apt-get >/dev/null || fail "etcd is not installed and there is no apt-get: install etcd 3.4 or later"
	SUDO=
	((EUID == 0)) || SUDO=sudo
	say "installing etcd-server (apt-get)"
	$SUDO apt-get update -q >&2 || fail "apt-get update"
	$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends etcd-server >&2 ||
		fail "apt-get install etcd-server"
	command -v etcd >/dev/null || fail "etcd-server installed but no etcd on the PATH"
fi
ETCD_VERSION=$(etcd --version | awk '/etcd Version:/ { print $3 }')
[[ -n "$ETCD_VERSION" ]] || fail "etcd --version printed no version"
# ETCD_* variables would override the flags below.
while read -r v; do unset "$v"; done < <(compgen -e | grep '^ETCD_' || true)
# etcd 3.4 refuses to start on arm64 without ETCD_UNSUPPORTED_ARCH; amd64 needs nothing.
if [[ $(uname -m) == aarch64 && $ETCD_VERSION == 3.4.* ]]; then
	export ETCD_UNSUPPORTED_ARCH=arm64
fi

say "building scripts/etcdbench"
(cd scripts/etcdbench && CGO_ENABLED=0 ${GO:-go} build -trimpath -o "$TMP/etcdbench" .) || fail "building scripts/etcdbench"
if [[ -n "${GHBA_BIN:-}" ]]; then
	BIN=$GHBA_BIN
else
	say "building bin/ghba (make build)"
	${MAKE:-make} --no-print-directory build >&2 || fail "make build"
	BIN=bin/ghba
fi
[[ -x "$BIN" ]] || fail "$BIN is not an executable"
BIN=$(cd "$(dirname "$BIN")" && pwd)/$(basename "$BIN")
# GHBA_* variables would override the testdata configs and --addr.
while read -r v; do unset "$v"; done < <(compgen -e | grep '^GHBA_' || true)

# run_etcd R runs round R's etcd cluster and benchmark ($TMP/etcd-R.json).
run_etcd() {
	local r=$1 dir="$TMP/etcd-$1" i cluster="" endpoints="" deadline healthy
	mkdir -p "$dir"
	check_ports etcd
	for i in 1 2 3; do
		cluster+="${cluster:+,}e$i=http://127.0.0.1:$(pport "$i")"
		endpoints+="${endpoints:+,}127.0.0.1:$(cport "$i")"
	done
	say "round $r: etcd $ETCD_VERSION, 3 members ($dir)"
	for i in 1 2 3; do
		LOGS+=("$dir/e$i.log")
		set -- etcd --name "e$i" --data-dir "$dir/e$i" --logger zap --log-outputs stderr \
			--listen-client-urls "http://127.0.0.1:$(cport "$i")" \
			--advertise-client-urls "http://127.0.0.1:$(cport "$i")" \
			--listen-peer-urls "http://127.0.0.1:$(pport "$i")" \
			--initial-advertise-peer-urls "http://127.0.0.1:$(pport "$i")" \
			--initial-cluster "$cluster" --initial-cluster-state new \
			--initial-cluster-token "ghba-compare-$$-$r"
		record "$(quote "$@")"
		"$@" >"$dir/e$i.log" 2>&1 &
		PIDS+=($!)
		NAMES+=("etcd e$i")
	done
	deadline=$((SECONDS + WAIT))
	while :; do
		for i in "${!PIDS[@]}"; do
			kill -0 "${PIDS[$i]}" 2>/dev/null || fail "${NAMES[$i]} exited during startup"
		done
		healthy=0
		for i in 1 2 3; do
			if curl -fsS --max-time 2 "http://127.0.0.1:$(cport "$i")/health" 2>/dev/null | grep -q '"health":"true"'; then
				healthy=$((healthy + 1))
			fi
		done
		((healthy == 3)) && break
		((SECONDS < deadline)) || fail "etcd not healthy after ${WAIT}s: $healthy of 3 members report healthy"
		sleep 0.5
	done
	LOAD_BEFORE_ETCD[r]=$(loadavg)
	say "round $r: etcd healthy; load $(loadavg); etcdbench -c $CONC --paths $PATHS"
	run "$TMP/etcdbench" --endpoints "$endpoints" -c "$CONC" --paths "$PATHS" --value-size "$VSIZE" \
		--prefix /cmp --json >"$dir.json" || fail "round $r: etcdbench failed"
	LOAD_AFTER_ETCD[r]=$(loadavg)
	stop_all "0 143" || fail "round $r: an etcd member did not stop cleanly"
}

# make_pki makes, once, a CA, a server and a client certificate and a
# gossip key in $TMP/pki with the binary (ghba tls, ghba keygen), for the
# configs with tls=on.
make_pki() {
	[[ -f $TMP/pki/gossip.key ]] && return 0
	"$BIN" tls ca create --dir "$TMP/pki" >/dev/null &&
		"$BIN" tls cert create --server --dir "$TMP/pki" >/dev/null &&
		"$BIN" tls cert create --client --dir "$TMP/pki" >/dev/null &&
		"$BIN" keygen >"$TMP/pki/gossip.key"
}

# config_env CONFIG prints config CONFIG ("k1=v1,k2=v2") as GHBA_K1=v1 GHBA_K2=v2.
# The pseudo-key tls=on stands for TLS on every port (verify_incoming,
# verify_server_hostname) and gossip encryption, with make_pki's files.
config_env() {
	local kv out=()
	IFS=, read -r -a kvs <<<"$1"
	for kv in "${kvs[@]}"; do
		[[ $kv == *=* ]] || fail "CMP_GHBA_CONFIGS: $kv is not key=value"
		if [[ $kv == tls=on ]]; then
			out+=("GHBA_TLS_CA_FILE=$TMP/pki/ghba-agent-ca.pem" "GHBA_TLS_CERT_FILE=$TMP/pki/server-ghba-0.pem"
				"GHBA_TLS_KEY_FILE=$TMP/pki/server-ghba-0-key.pem" GHBA_TLS_VERIFY_INCOMING=true
				GHBA_TLS_VERIFY_SERVER_HOSTNAME=true "GHBA_ENCRYPT=$(cat "$TMP/pki/gossip.key")")
			continue
		fi
		out+=("GHBA_$(echo "${kv%%=*}" | tr 'a-z' 'A-Z')=${kv#*=}")
	done
	echo "${out[*]}"
}

# run_ghba R V runs round R's ghba cluster with config number V and its
# benchmark ($TMP/ghba-R-V.json).
run_ghba() {
	local r=$1 v=$2 dir="$TMP/ghba-$1-$2" all
	mkdir -p "$dir"
	check_ports ghba
	if [[ ,${CONFIGS[$v]}, == *,tls=on,* ]]; then
		make_pki || fail "making the TLS files with $BIN tls"
		# The CLI (readiness checks, bench) talks TLS with the client certificate.
		export GHBA_CACERT=$TMP/pki/ghba-agent-ca.pem GHBA_CLIENT_CERT=$TMP/pki/client-ghba-0.pem GHBA_CLIENT_KEY=$TMP/pki/client-ghba-0-key.pem
	fi
	read -r -a AGENT_ENV <<<"$(config_env "${CONFIGS[$v]}")"
	say "round $r: ghba ${CONFIGS[$v]}, 3 agents from testdata/ ($dir)"
	LOGS+=("$dir/node1.log" "$dir/node2.log" "$dir/node3.log")
	start_testdata_agents "$BIN" "$dir" >&2
	record "${AGENT_ENV[*]} GHBA_DATA_DIR=$dir/nodeI $BIN agent --config testdata/nodeI.yaml   # I = 1, 2, 3 (scripts/agents.sh)"
	wait_testdata_agents "$BIN" "$WAIT" >&2 || fail "round $r: the ghba cluster (${CONFIGS[$v]}) did not come up"
	all=$(IFS=,; echo "${TESTDATA_ADDRS[*]}")
	local before
	before=$(loadavg)
	say "round $r: ghba ready; load $(loadavg); ghba bench -c $CONC --paths $PATHS"
	run "$BIN" --timeout 30s --addr "$all" --json bench --phases mkdir,create,stat \
		-c "$CONC" --paths "$PATHS" --prefix /cmp >"$dir.json" || fail "round $r: ghba bench failed (${CONFIGS[$v]})"
	# A sweep of an existing tree: the replicas have had the propagation
	# interval to take the paths just created.
	sleep 5
	run "$BIN" --timeout 30s --addr "$all" --json bench --phases stat-uncached,stat-routed \
		-c "$CONC" --paths "$PATHS" --prefix /cmp >"$dir-uncached.json" || fail "round $r: ghba bench stat-uncached failed (${CONFIGS[$v]})"
	LOAD_GHBA[r]+="${LOAD_GHBA[r]:+, }ghba ${CONFIGS[$v]} bench $before -> $(loadavg)"
	stop_all || fail "round $r: an agent did not stop cleanly"
	AGENT_ENV=()
	unset GHBA_CACERT GHBA_CLIENT_CERT GHBA_CLIENT_KEY
}

declare -a LOAD_BEFORE_ETCD LOAD_AFTER_ETCD LOAD_GHBA
LOAD_START=$(loadavg)
say "load before the run: $LOAD_START"
for ((ROUND = 1; ROUND <= ROUNDS; ROUND++)); do
	run_etcd "$ROUND"
	for v in "${!CONFIGS[@]}"; do
		run_ghba "$ROUND" "$v"
	done
done
LOAD_END=$(loadavg)

# The table: per round, each ghba operation next to its etcd counterpart.
{
	printf 'round\tghba config\toperation\tetcd ops/s\tetcd p50\tetcd p99\tghba ops/s\tghba p50\tghba p99\tghba hops\tghba/etcd\n'
	for ((r = 1; r <= ROUNDS; r++)); do
		for v in "${!CONFIGS[@]}"; do
			jq -n -r --argjson r "$r" --arg c "${CONFIGS[$v]}" --slurpfile e "$TMP/etcd-$r.json" --slurpfile g "$TMP/ghba-$r-$v.json" --slurpfile u "$TMP/ghba-$r-$v-uncached.json" '
				def ph(x; n): x[0].phases | map(select(.phase == n)) | .[0];
				def f2(x): (x * 100 | round) as $n | "\($n / 100 | floor).\($n % 100 | tostring | if length < 2 then "0" + . else . end)";
				def ms(x): "\(f2(x))ms";
				def row(op; e; g):
					[ $r, $c, op ]
					+ (if e then [ (e.ops_per_sec | round), ms(e.p50_ms), ms(e.p99_ms) ] else [ "-", "-", "-" ] end)
					+ [ (g.ops_per_sec | round), ms(g.p50_ms), ms(g.p99_ms), f2(g.mean_hops) ]
					+ [ if e then "\(f2(g.ops_per_sec / e.ops_per_sec))x" else "-" end ];
				row("create / put"; ph($e; "put"); ph($g; "create")),
				row("stat / serializable get"; ph($e; "get-serializable"); ph($g; "stat")),
				row("stat / linearizable get"; ph($e; "get-linearizable"); ph($g; "stat")),
				row("stat, no client cache / serializable get"; ph($e; "get-serializable"); ph($u; "stat-uncached")),
				row("stat, no client cache, routed by filters / serializable get"; ph($e; "get-serializable"); ph($u; "stat-routed")),
				row("mkdir (ghba only)"; null; ph($g; "mkdir"))
				| @tsv'
		done
	done
} >"$TMP/table.tsv"
ERRORS=$(jq -s '[.[].phases[].errors] | add' "$TMP"/etcd-*.json "$TMP"/ghba-*.json)

printf '\nghba against etcd on this machine, one system at a time: %s paths, %s client goroutines, etcd values %s bytes\n\n' "$PATHS" "$CONC" "$VSIZE"
column -t -s $'\t' "$TMP/table.tsv"
printf '\n(etcd: %s keys put, then got; ghba: create = the %s files of the tree, mkdir = its %s directories, stat = all %s paths; ratio = ghba ops/s / etcd ops/s; errors: %s)\n' \
	"$PATHS" "$(jq .files "$TMP/ghba-1-0.json")" "$(jq .dirs "$TMP/ghba-1-0.json")" "$PATHS" "$ERRORS"
printf '\nmachine: %s, nproc %s, %s; etcd %s (3 members), %s (ghba built from %s)\n' \
	"$(uname -m)" "$(nproc)" "$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)" \
	"$ETCD_VERSION" "$(${GO:-go} version | awk '{ print $3 }')" "$(git -C "$ROOT" describe --always --dirty 2>/dev/null || echo '?')"
printf 'load average (1, 5, 15 min): %s before the run, %s after\n' "$LOAD_START" "$LOAD_END"
for ((r = 1; r <= ROUNDS; r++)); do
	printf '  round %s: etcd bench %s -> %s, %s\n' "$r" \
		"${LOAD_BEFORE_ETCD[r]}" "${LOAD_AFTER_ETCD[r]}" "${LOAD_GHBA[r]}"
done
printf '\ncommands of round 1 (%s is removed on exit unless CMP_KEEP=1; etcdbench is scripts/etcdbench built there):\n' "$TMP"
for c in "${COMMANDS[@]}"; do
	printf '  %s\n' "$c"
done
