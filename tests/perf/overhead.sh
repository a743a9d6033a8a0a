#!/usr/bin/env bash
# overhead.sh: tokenclock's end-to-end overhead next to nginx and a direct connection, against the simulator (tokenclock sim).
#
# Usage: bash tests/perf/overhead.sh [--quick] [--reps N] [--out FILE] [--no-build] [--upstream HOST:PORT]
#
# One run measures, side by side, client -> sim (direct), client -> tokenclock
# -> sim and client -> nginx -> sim:
#   (a) latency: 32 streams x 64 events at 20 ms; the one-way delay of each
#       event (sim_sent_unix_ns to the client), p50 and p99, minus direct's.
#   (b) throughput: 256 streams, events as fast as possible; the proxy's CPU
#       time per event (utime+stime from /proc/PID/stat) and events/s.
#   (c) idle streams: 2,000 streams held open (first token 10 minutes away);
#       the proxy's RSS per stream (VmRSS from /proc/PID/status), then dropped.
# Fairness on 2 cores: sim and client on core 0, the proxy on core 1;
# tokenclock --worker-threads 1, nginx worker_processes 1; a fresh proxy and
# a warm-up per measurement; medians of N repetitions (default 3).
# Prints one table on stdout and writes JSON (default target/perf/overhead.json).
# Everything listens on 127.0.0.1 and is killed on exit.
set -euo pipefail

QUICK=0 REPS=3 OUT=target/perf/overhead.json BUILD=1 UPSTREAM=""
while [[ $# -gt 0 ]]; do
    case "$1" in
        --quick) QUICK=1 REPS=1 ;;
        --reps) REPS="$2"; shift ;;
        --out) OUT="$2"; shift ;;
        --no-build) BUILD=0 ;;
        --upstream) UPSTREAM="$2"; shift ;;
        *) echo "overhead.sh: unknown argument $1" >&2; exit 2 ;;
    esac
    shift
done

PERF_DIR=$(cd "$(dirname "$0")" && pwd)
cd "$PERF_DIR/../.."
# Sizes: (a) streams, events; (b) streams, events per stream; (c) idle streams, hold time.
if [[ $QUICK == 1 ]]; then
    A_STREAMS=4 A_EVENTS=8 B_STREAMS=16 B_EVENTS=200 C_STREAMS=50 C_HOLD=3
else
    A_STREAMS=32 A_EVENTS=64 B_STREAMS=256 B_EVENTS=2000 C_STREAMS=2000 C_HOLD=12
fi
SIM_PORT=${SIM_PORT:-18431} TC_PORT=${TC_PORT:-18432} TC_METRICS=${TC_METRICS:-18433} NGINX_PORT=${NGINX_PORT:-18434}
BIN=target/release/tokenclock

log() { echo "overhead: $*" >&2; }
die() { log "$*"; exit 1; }

TMP=$(mktemp -d)
chmod 755 "$TMP" # nginx workers may run as another user when started by root
PIDS=()
cleanup() {
    local pid
    for pid in "${PIDS[@]}"; do
        kill "$pid" 2>/dev/null || true
    done
    for pid in "${PIDS[@]}"; do
        wait "$pid" 2>/dev/null || true
    done
    rm -rf "$TMP"
}
trap cleanup EXIT

# shellcheck source=tests/perf/procfs.sh
source "$PERF_DIR/procfs.sh"
# shellcheck source=tests/perf/servers.sh
source "$PERF_DIR/servers.sh"

SIM_ADDR=${UPSTREAM:-127.0.0.1:$SIM_PORT}
RESULTS=$TMP/results
mkdir -p "$RESULTS"
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
(( $(ulimit -n) >= 3 * C_STREAMS + 100 )) || log "warning: ulimit -n is $(ulimit -n); $C_STREAMS idle streams may fail"
command -v taskset >/dev/null || die "taskset (util-linux) is needed"
command -v python3 >/dev/null || die "python3 is needed for the summary"
if ! command -v nginx >/dev/null; then
    log "installing nginx with apt-get"
    if [[ $(id -u) == 0 ]]; then apt-get install -y -q nginx >&2; else sudo -n apt-get install -y -q nginx >&2; fi
fi
if [[ $BUILD == 1 ]]; then
    log "building the release binary"
    cargo build --release --quiet
fi
[[ -x $BIN ]] || die "no $BIN: run without --no-build"
[[ -n $UPSTREAM ]] || start_sim

# run_load OUT ERR ARGS...: tokenclock load on core 0 against PROXY_URL; JSON summary into OUT, progress into ERR.
run_load() {
    local out=$1 err=$2
    shift 2
    taskset -c 0 "$BIN" load --target "$PROXY_URL" --format json "$@" >"$out" 2>>"$err"
}

warm_up() {
    run_load /dev/null "$TMP/load.log" --concurrency 4 --requests 16 --schedule "ttft_ms=1,gap_ms=1,tokens=16"
}

# (a) one-way delay per event at a steady 20 ms pace.
scenario_a() {
    run_load "$RESULTS/a-$1-$2.json" "$TMP/load.log" --concurrency "$A_STREAMS" \
        --requests $(( A_STREAMS * 2 )) --schedule "ttft_ms=20,gap_ms=20,tokens=$A_EVENTS"
}

# (b) events as fast as possible; the proxy's CPU ticks around the run.
scenario_b() {
    local pids before after
    pids=$(proxy_pids)
    # shellcheck disable=SC2086 # one pid per word
    before=$(cpu_ticks $pids)
    run_load "$RESULTS/b-$1-$2.json" "$TMP/load.log" --concurrency "$B_STREAMS" \
        --requests "$B_STREAMS" --schedule "ttft_ms=0,gap_ms=0,tokens=$B_EVENTS"
    # shellcheck disable=SC2086
    after=$(cpu_ticks $pids)
    echo "{\"cpu_ticks\": $(( after - before )), \"clk_tck\": $(getconf CLK_TCK)}" >"$RESULTS/b-$1-$2.cpu.json"
}

# (c) idle streams held open: the proxy's RSS before and with them, then the
# load generator's deadline cancels them all.
scenario_c() {
    local pids before with held tries=$(( C_HOLD * 10 - 20 )) load_pid progress="$TMP/c-$1-$2.log"
    pids=$(proxy_pids)
    # shellcheck disable=SC2086
    before=$(rss_kib $pids)
    run_load "$RESULTS/c-$1-$2.json" "$progress" --concurrency "$C_STREAMS" --requests "$C_STREAMS" \
        --duration "${C_HOLD}s" --schedule "ttft_ms=600000,gap_ms=20,tokens=1" &
    load_pid=$!
    PIDS+=("$load_pid")
    while (( $(last_in_flight "$progress") < C_STREAMS && tries-- > 0 )); do sleep 0.1; done
    sleep 1
    held=$(last_in_flight "$progress")
    # shellcheck disable=SC2086
    with=$(rss_kib $pids)
    (( held == C_STREAMS )) || log "warning: only $held of $C_STREAMS streams open when sampled"
    echo "{\"rss_before_kib\": $before, \"rss_with_kib\": $with, \"streams\": $held}" >"$RESULTS/c-$1-$2.rss.json"
    wait "$load_pid" || die "the idle-stream load failed: $(tail -3 "$progress")"
    forget "$load_pid"
}

for rep in $(seq 1 "$REPS"); do
    for via in direct tokenclock nginx; do
        for scenario in a b c; do
            [[ $via == direct && $scenario == c ]] && continue
            log "rep $rep/$REPS: ($scenario) via $via"
            start_proxy "$via"
            warm_up
            "scenario_$scenario" "$via" "$rep"
            stop_proxy
        done
    done
done

mkdir -p "$(dirname "$OUT")"
python3 "$PERF_DIR/summarize.py" "$RESULTS" "$OUT" "$QUICK" "$REPS"
log "JSON written to $OUT"
