# agents.sh — shell functions shared by the scripts that run agent processes
# (demo.sh, groups-bench.sh, compare-etcd.sh). Source it; it defines functions
# and the TESTDATA_ADDRS array only.

# The rpc addresses of the 3-node loopback cluster in testdata/node{1,2,3}.yaml.
TESTDATA_ADDRS=(127.0.0.1:7410 127.0.0.1:7420 127.0.0.1:7430)

# stop_agent_pids sends SIGTERM to every pid in the array PIDS, waits up to
# STOP_WAIT seconds (default 30) for each, SIGKILLs stragglers, and returns
# non-zero if any process did not exit with a status in STOP_OK (default
# "0"; other programs than ghba agents may die by the signal, status 143).
# NAMES[i], when set, names PIDS[i] in its messages.
stop_agent_pids() {
	local rc=0 i pid status deadline name
	for pid in "${PIDS[@]}"; do
		kill -TERM "$pid" 2>/dev/null || true
	done
	for i in "${!PIDS[@]}"; do
		pid=${PIDS[$i]}
		name=${NAMES[$i]:-agent $((i + 1))}
		deadline=$((SECONDS + ${STOP_WAIT:-30}))
		while kill -0 "$pid" 2>/dev/null && ((SECONDS < deadline)); do
			sleep 0.2
		done
		if kill -0 "$pid" 2>/dev/null; then
			echo "$name (pid $pid) did not stop within ${STOP_WAIT:-30}s: killing it" >&2
			kill -KILL "$pid" 2>/dev/null || true
			rc=1
		fi
		if wait "$pid"; then status=0; else status=$?; fi
		if [[ " ${STOP_OK:-0} " != *" $status "* ]]; then
			echo "$name (pid $pid) exited with status $status" >&2
			rc=1
		fi
	done
	return $rc
}

# print_log_tails FILE... prints the last 10 lines of each FILE that exists
# on stderr (what a script shows of its processes' logs when it fails).
print_log_tails() {
	local log
	for log in "$@"; do
		if [[ -f "$log" ]]; then
			echo "---- last lines of $log" >&2
			tail -n 10 "$log" >&2
		fi
	done
}

# start_testdata_agents BIN DIR starts the 3 agents of testdata/node{1,2,3}.yaml
# (run from the repository's root) in the background, node I with its data in
# DIR/nodeI and its log in DIR/nodeI.log; appends their pids to PIDS and
# "nodeI" to NAMES. The array AGENT_ENV, when set, holds extra "GHBA_KEY=value"
# settings of every agent (they override the config files' keys).
start_testdata_agents() {
	local bin=$1 dir=$2 i
	for i in 1 2 3; do
		env ${AGENT_ENV[@]+"${AGENT_ENV[@]}"} GHBA_DATA_DIR="$dir/node$i" "$bin" agent --config "testdata/node$i.yaml" >"$dir/node$i.log" 2>&1 &
		PIDS+=($!)
		NAMES+=("node$i")
		echo "node$i: pid $! rpc ${TESTDATA_ADDRS[$((i - 1))]}"
	done
}

# wait_testdata_agents BIN SECONDS waits until the testdata cluster has 3
# alive (serving) members in one group with a leader, every node answers
# "stat /", and each of the 3 shards is led by its owner with no replica
# still catching up (leaderships move back to their owners after a start,
# and a benchmark that began before would measure the moves).
# Returns non-zero, saying why on stderr, if an agent in PIDS exits or the
# cluster is not ready in time; prints the seconds it took.
wait_testdata_agents() {
	local bin=$1 wait=$2 start=$SECONDS alive grouped ready settled a pid
	while :; do
		for pid in "${PIDS[@]}"; do
			if ! kill -0 "$pid" 2>/dev/null; then
				echo "agent pid $pid exited during startup" >&2
				return 1
			fi
		done
		alive=$("$bin" --timeout 5s --addr "${TESTDATA_ADDRS[0]}" members 2>/dev/null | awk 'NR > 1 && $3 == "alive"' | wc -l || true)
		grouped=$("$bin" --timeout 5s --addr "${TESTDATA_ADDRS[0]}" groups 2>/dev/null | awk 'NR > 1 && $2 != "-" { n += $3 } END { print n + 0 }' || true)
		ready=0
		for a in "${TESTDATA_ADDRS[@]}"; do
			if "$bin" --timeout 5s --addr "$a" stat / >/dev/null 2>&1; then ready=$((ready + 1)); fi
		done
		settled=$("$bin" --timeout 5s --addr "${TESTDATA_ADDRS[0]}" shards 2>/dev/null | awk 'NR > 1 && $3 != "-" && $3 == $4 && $0 !~ / \+/' | wc -l || true)
		if [[ "$alive" -eq 3 && "$grouped" -eq 3 && "$ready" -eq 3 && "$settled" -eq 3 ]]; then
			echo "ready after $((SECONDS - start))s"
			return 0
		fi
		if ((SECONDS - start >= wait)); then
			echo "cluster not ready after ${wait}s: $alive alive, $grouped in a group with a leader, $ready nodes answer stat /, $settled shards led by their owners" >&2
			return 1
		fi
		sleep 0.5
	done
}
