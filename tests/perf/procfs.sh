#!/usr/bin/env bash
# procfs.sh: bounded waits, process clean-up and /proc sampling (CPU ticks, RSS) for the scripts under tests/perf; source it.

# wait_for_line FILE PATTERN SECONDS: until FILE has a line matching PATTERN.
wait_for_line() {
    local file=$1 pattern=$2 tries=$(( $3 * 10 ))
    while (( tries-- > 0 )); do
        grep -q -- "$pattern" "$file" 2>/dev/null && return 0
        sleep 0.1
    done
    echo "overhead: no '$pattern' in $file after $3 s:" >&2
    tail -5 "$file" >&2 || true
    return 1
}

# port_free PORT: true when nothing accepts connections on 127.0.0.1:PORT.
port_free() {
    ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# proc_tree PID: PID and all its descendants, one per line.
proc_tree() {
    local pid=$1 stat child
    echo "$pid"
    for stat in /proc/[0-9]*/stat; do
        stat=$(cat "$stat" 2>/dev/null) || continue
        set -- ${stat##*) }
        [[ ${2:-} == "$pid" ]] || continue
        child=${stat%% *}
        proc_tree "$child"
    done
}

# cpu_ticks PID...: utime + stime summed over the processes, in clock ticks (getconf CLK_TCK per second).
cpu_ticks() {
    local pid stat total=0
    for pid in "$@"; do
        stat=$(cat "/proc/$pid/stat" 2>/dev/null) || continue
        # Fields after "(comm) ": state is field 3, utime 14, stime 15.
        set -- ${stat##*) }
        total=$(( total + ${12} + ${13} ))
    done
    echo "$total"
}

# rss_kib PID...: VmRSS summed over the processes, KiB.
rss_kib() {
    local pid total=0 rss
    for pid in "$@"; do
        rss=$(awk '/^VmRSS:/ { print $2 }' "/proc/$pid/status" 2>/dev/null) || continue
        total=$(( total + ${rss:-0} ))
    done
    echo "$total"
}

# last_in_flight FILE: the in_flight=N of the last progress line of `tokenclock load` (0 if none).
last_in_flight() {
    local n
    n=$(grep -o 'in_flight=[0-9]*' "$1" 2>/dev/null | tail -1 | cut -d= -f2)
    echo "${n:-0}"
}

# stop_pids: kills every process in PIDS, then waits for each.
stop_pids() {
    local pid
    for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
    for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
}
