# agents.sh — shell functions shared by the scripts that run agent processes
# (demo.sh, groups-bench.sh). Source it; it defines functions only.

# stop_agent_pids sends SIGTERM to every pid in the array PIDS, waits up to
# STOP_WAIT seconds (default 30) for each, SIGKILLs stragglers, and returns
# non-zero if any agent did not exit with status 0. NAMES[i], when set,
# names PIDS[i] in its messages.
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
		if ((status != 0)); then
			echo "$name (pid $pid) exited with status $status" >&2
			rc=1
		fi
	done
	return $rc
}
