#!/usr/bin/env bash
# groups-bench.sh — measure G-HBA against HBA on real loopback clusters.
#
# For each N in GB_NODES (default "3 6 9 12") it runs three clusters of N
# agent processes, one after the other:
#   ghba:        scheme ghba, fixed groups of 3 (g1 = node1-3, g2 = node4-6,
#                ...), max_group_size 3, filter_memory_mb 0: each node holds
#                its G-HBA segment alone, as in the paper;
#   ghba-budget: the same with filter_memory_mb GB_FILTER_MEMORY_MB: each node
#                also holds its group-mates' and then other nodes' filters as
#                far as that memory goes (docs/design.md, "Filters");
#   hba:         scheme hba, one group g1 of all N nodes, max_group_size N.
# Each cluster: start the agents, wait until every node is alive in its
# group, every group has a leader and every node answers "stat /"; run
# "ghba bench --each-node --json" (create GB_PATHS paths, stat them, look
# every path up through every node); read each node's /v1/status; stop the
# agents with SIGTERM. Then it prints one row per (N, scheme):
#   L1%..L4%   share of the lookup phase's lookups resolved at each level
#              (summed over the lookups entered at every node)
#   hops       mean server-to-server RPCs per lookup (lookup phase)
#   lookups/s  lookups per second through one node at a time (mean)
#   filterKB   mean filter_bytes per node (/v1/status), KiB: the local and
#              LRU filters and the L1 and L2 arrays as allocated. The arrays
#              are bit-sliced: each bit position takes the next power of two
#              of the member count in bits (1, 2, 4, … 64, then whole words).
#   replicaKB  mean l2_members × filter_capacity × bits_per_file / 8 bytes
#              per node, KiB: the replicas' memory counted as in the papers
#              (one m-bit filter per replica)
#   replicas   mean l2_members per node (/v1/status): the replicas in L2
#   held       mean replicas_held per node (/v1/status, from the FSM)
#   mcast      L3 multicasts per node (/v1/status, whole run)
#   bcast      L4 broadcasts per node (/v1/status, whole run)
#
# Usage: scripts/groups-bench.sh      (from anywhere; builds bin/ghba first)
# Environment:
#   GHBA_BIN=path            use this binary instead of building bin/ghba
#   GB_NODES="3 6 9 12"      cluster sizes
#   GB_PATHS=3000            paths per run
#   GB_LRU=100               lru_entries of every node (both schemes)
#   GB_FILTER_CAPACITY=100000  filter_capacity of every node (both schemes)
#   GB_FILTER_MEMORY_MB=256  filter_memory_mb of the ghba-budget clusters
#   GB_CONCURRENCY=16        bench client goroutines
#   GB_BASE_PORT=7500        node i uses ports BASE+4(i-1) .. BASE+4(i-1)+3
#   GB_WAIT=120              seconds to wait for a cluster to form
#   GB_KEEP=1                keep the temporary directory (configs, logs, JSON)
# Needs jq and curl.
set -euo pipefail

cd "$(dirname "$0")/.."
. scripts/agents.sh
NODES=${GB_NODES:-"3 6 9 12"}
PATHS=${GB_PATHS:-3000}
LRU=${GB_LRU:-100}
FCAP=${GB_FILTER_CAPACITY:-100000}
FMEM=${GB_FILTER_MEMORY_MB:-256}
CONC=${GB_CONCURRENCY:-16}
BASE=${GB_BASE_PORT:-7500}
WAIT=${GB_WAIT:-120}
GROUP_SIZE=3
STOP_WAIT=30

say() { printf '== %s\n' "$*" >&2; }
fail() { printf '\ngroups-bench: FAILED: %s\n' "$*" >&2; exit 1; }

for tool in jq curl; do
	command -v "$tool" >/dev/null || fail "$tool is required"
done

if [[ -n "${GHBA_BIN:-}" ]]; then
	BIN=$GHBA_BIN
else
	say "building bin/ghba"
	CGO_ENABLED=0 ${GO:-go} build -tags hashicorpmetrics -trimpath -o bin/ghba ./cmd/ghba
	BIN=bin/ghba
fi
[[ -x "$BIN" ]] || fail "$BIN is not an executable"
BIN=$(cd "$(dirname "$BIN")" && pwd)/$(basename "$BIN")
# GHBA_* variables would override the generated configs and --addr.
while read -r v; do unset "$v"; done < <(compgen -e | grep '^GHBA_' || true)

TMP=$(mktemp -d "${TMPDIR:-/tmp}/ghba-groups-bench.XXXXXX")
PIDS=()
LOGS=()

# stop_agents stops every agent of the current cluster (scripts/agents.sh);
# non-zero if one did not exit with status 0.
stop_agents() {
	local rc=0
	NAMES=("${LOGS[@]}")
	stop_agent_pids || rc=1
	PIDS=()
	return $rc
}

cleanup() {
	local rc=$?
	trap - EXIT INT TERM
	if ((${#PIDS[@]} > 0)); then
		stop_agents || rc=1
	fi
	if ((rc != 0)); then
		print_log_tails "${LOGS[@]}"
	fi
	if [[ -n "${GB_KEEP:-}" ]]; then
		echo "groups-bench: kept $TMP" >&2
	else
		rm -rf "$TMP"
	fi
	exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

ghba() { "$BIN" --timeout 10s "$@"; }
port() { echo $((BASE + 4 * ($1 - 1) + $2)); } # port NODE KIND(0 rpc, 1 raft, 2 serf, 3 http)
rpc_addr() { echo "127.0.0.1:$(port "$1" 0)"; }

# group_of SCHEME N I prints node I's group; founder SCHEME I succeeds if
# node I bootstraps its group.
group_of() {
	if [[ $1 == hba ]]; then echo g1; else echo "g$((($3 - 1) / GROUP_SIZE + 1))"; fi
}
founder() {
	if [[ $1 == hba ]]; then ((${2} == 1)); else ((($2 - 1) % GROUP_SIZE == 0)); fi
}

# write_config DIR SCHEME N I writes node I's config to DIR/nodeI.yaml.
write_config() {
	local dir=$1 run=$2 n=$3 i=$4 boot=false join="" maxg=$GROUP_SIZE scheme=ghba fmem=0
	founder "$run" "$i" && boot=true
	((i > 1)) && join="\"127.0.0.1:$(port 1 2)\""
	[[ $run == hba ]] && maxg=$n scheme=hba
	[[ $run == ghba-budget ]] && fmem=$FMEM
	cat >"$dir/node$i.yaml" <<EOF
node_id: node$i
data_dir: $dir/node$i
bind_addr: 127.0.0.1
ports:
  rpc: $(port "$i" 0)
  raft: $(port "$i" 1)
  serf: $(port "$i" 2)
  http: $(port "$i" 3)
group: $(group_of "$run" "$n" "$i")
bootstrap: $boot
retry_join: [$join]
max_group_size: $maxg
scheme: $scheme
bits_per_file: 8
filter_capacity: $FCAP
filter_memory_mb: $fmem
lru_entries: $LRU
lru_bits_per_file: 20
propagate_threshold: 0.01
propagate_interval: 500ms
placement: balanced
log_level: info
EOF
}

# start_node DIR I starts node I in the background.
start_node() {
	"$BIN" agent --config "$1/node$2.yaml" >"$1/node$2.log" 2>&1 &
	PIDS+=($!)
	LOGS+=("$1/node$2.log")
}

# wait_ready N NGROUPS NODE... waits until node1 lists the given nodes alive
# with a Raft role, NGROUPS groups each with a leader, and every given node
# answers "stat /".
wait_ready() {
	local want=$1 groups=$2 deadline=$((SECONDS + WAIT)) alive led ready i pid
	shift 2
	while :; do
		for pid in "${PIDS[@]}"; do
			kill -0 "$pid" 2>/dev/null || fail "an agent exited during startup"
		done
		alive=$(ghba --addr "$(rpc_addr 1)" --json members 2>/dev/null |
			jq '[.[] | select(.status == "alive" and (.raft_role == "leader" or .raft_role == "follower"))] | length' 2>/dev/null || echo 0)
		led=$(ghba --addr "$(rpc_addr 1)" --json groups 2>/dev/null |
			jq '[.[] | select(.leader != "")] | length' 2>/dev/null || echo 0)
		ready=0
		for i in "$@"; do
			if ghba --addr "$(rpc_addr "$i")" stat / >/dev/null 2>&1; then ready=$((ready + 1)); fi
		done
		if ((alive >= want && led == groups && ready == $#)); then
			return 0
		fi
		((SECONDS < deadline)) || fail "cluster not ready after ${WAIT}s: $alive alive in a group, $led groups with a leader (want $groups), $ready of $# nodes answer stat /"
		sleep 0.5
	done
}

# run_cluster SCHEME N runs one cluster and prints its table row.
run_cluster() {
	local scheme=$1 n=$2 dir="$TMP/$1-$2" i ngroups all=() founders=() rest=() addrs
	mkdir -p "$dir"
	LOGS=()
	for ((i = 1; i <= n; i++)); do
		write_config "$dir" "$scheme" "$n" "$i"
		all+=("$i")
		if ((i > 1)) && founder "$scheme" "$i"; then founders+=("$i"); elif ((i > 1)); then rest+=("$i"); fi
	done
	ngroups=$((${#founders[@]} + 1))
	say "$scheme, N=$n: starting $n agents in $ngroups group(s) ($dir)"
	start_node "$dir" 1
	wait_ready 1 1 1
	for i in "${founders[@]}"; do start_node "$dir" "$i"; done
	wait_ready $((${#founders[@]} + 1)) "$ngroups" 1 "${founders[@]}"
	for i in "${rest[@]}"; do start_node "$dir" "$i"; done
	wait_ready "$n" "$ngroups" "${all[@]}"
	say "$scheme, N=$n: ready; bench --paths $PATHS"
	addrs=$(for i in "${all[@]}"; do rpc_addr "$i"; done | paste -sd,)
	"$BIN" --timeout 30s --addr "$addrs" --json bench --each-node --paths "$PATHS" \
		--concurrency "$CONC" --prefix /gb >"$dir/bench.json" || fail "$scheme N=$n: bench failed (see $dir/bench.json)"
	for i in "${all[@]}"; do
		curl -fsS "http://127.0.0.1:$(port "$i" 3)/v1/status" >"$dir/status$i.json" || fail "$scheme N=$n: /v1/status of node$i"
	done
	stop_agents || fail "$scheme N=$n: an agent did not shut down cleanly"
	jq -n -r --arg scheme "$scheme" --argjson n "$n" --argjson fcap "$FCAP" \
		--slurpfile bench "$dir/bench.json" \
		--slurpfile st <(cat "$dir"/status*.json) '
		def pct(x; t): if t > 0 then (1000 * x / t | round) / 10 else 0 end;
		def r2(x): (100 * x | round) / 100;
		($bench[0].phases | map(select(.phase == "lookup"))) as $lk
		| ($lk | map(.ops - .errors) | add) as $ok
		| [ "L1", "L2", "L3", "L4" ] as $lv
		| ($lv | map(. as $l | $lk | map(.levels[$l] // 0) | add)) as $cnt
		| ($cnt | add) as $tot
		| ($lk | map(.mean_hops * (.ops - .errors)) | add) as $hops
		| ($st | length) as $nn
		| [ $n, $scheme ]
		+ ($cnt | map(pct(.; $tot)))
		+ [ r2($hops / $ok),
		    ($lk | map(.ops_per_sec) | add / length | round),
		    ($st | map(.filter_bytes) | add / $nn / 1024 | round),
		    ($st | map(.l2_members) | add / $nn * $fcap / 1024 | round),
		    r2($st | map(.l2_members) | add / $nn),
		    r2($st | map(.replicas_held) | add / $nn),
		    r2($st | map(.multicasts) | add / $nn),
		    r2($st | map(.broadcasts) | add / $nn),
		    ($lk | map(.errors) | add) ]
		| @tsv'
}

MAXN=0
for n in $NODES; do ((n > MAXN)) && MAXN=$n; done
for i in $(seq 1 "$MAXN"); do
	if ghba --addr "$(rpc_addr "$i")" --timeout 1s members >/dev/null 2>&1; then
		fail "something already answers on $(rpc_addr "$i"): stop it first (ports from $BASE are used)"
	fi
done

say "paths $PATHS, lru_entries $LRU, filter_capacity $FCAP, bench concurrency $CONC; ghba groups of $GROUP_SIZE"
ROWS="$TMP/rows.tsv"
: >"$ROWS"
for n in $NODES; do
	for scheme in ghba ghba-budget hba; do
		run_cluster "$scheme" "$n" >>"$ROWS" # not in a pipeline: it must run in this shell
		tail -n 1 "$ROWS" >&2
	done
done

printf '\nG-HBA (groups of %d) vs HBA: %s paths, lru_entries %s, filter_capacity %s; levels, hops and lookups/s from the bench lookup phase (every path through every node), the rest from /v1/status after the run\n\n' \
	"$GROUP_SIZE" "$PATHS" "$LRU" "$FCAP"
{
	printf 'N\tscheme\tL1%%\tL2%%\tL3%%\tL4%%\thops\tlookups/s\tfilterKB\treplicaKB\treplicas\theld\tmcast\tbcast\terrors\n'
	cat "$ROWS"
} | column -t -s $'\t'
