#!/usr/bin/env bash
# overhead.sh: tokenclock's end-to-end overhead next to nginx and a direct connection, against the simulator (tokenclock sim).
#
# Usage: bash tests/perf/overhead.sh [--quick] [--reps N] [--only SCENARIOS] [--trace] [--out FILE] [--no-build] [--upstream HOST:PORT]
#
# One run measures, side by side, client -> sim (direct), client -> tokenclock
# -> sim and client -> nginx -> sim:
#   (a) latency: 32 streams x 64 events at 20 ms; the one-way delay of each
#       event (sim_sent_unix_ns to the client), p50 and p99, minus direct's.
#   (y) as (a), the client speaking HTTP/2 (h2c, prior knowledge; nginx
#       takes it on NGINX_H2_PORT): the 32 streams share one connection, as
#       behind an HTTP/2 load balancer or gateway.
#   (b) throughput: 256 streams, events as fast as possible; the proxy's CPU
#       time per event (utime+stime from /proc/PID/stat) and events/s.
#   (w) throughput per write: 256 streams x 200 events back to back, the
#       simulator yielding between events (x-sim-schedule yield=1) so each
#       leaves in its own write, as a token-by-token server writes; short
#       streams, so each request's own cost weighs 10 times (b)'s. CPU per
#       event, events/s, and (if perf can count syscalls) the proxy's reads,
#       writes and readiness waits per event, also taken in (b): they show
#       how many events each wake-up carried.
#   (v) as (w), the client speaking HTTP/2 (h2c, prior knowledge; nginx
#       takes it on NGINX_H2_PORT, default 18435): every request a stream of
#       one connection.
#   (c) idle streams: 2,000 streams held open (first token 10 minutes away);
#       the proxy's RSS per stream (VmRSS from /proc/PID/status), then dropped.
#   (e) as (c), the client speaking h2c: the 2,000 streams on 20 connections
#       (100 each, below nginx's 128 and hyper's 200 per connection).
#   (h) held whole requests: as (c), 2,000 requests for whole (non-streamed)
#       answers 10 minutes from generated, as a batch job's wait: the proxy's
#       RSS per request while each waits for its response head.
#   (f) flowing streams: 2,000 streams at once (F_STREAMS), each 10 events
#       500 ms apart, as issue #14's third scenario; the proxy's peak RSS
#       (sampled every 0.1 s) over its RSS before, per stream.
#   (r) /metrics render, tokenclock only: 32 models on every API path, each
#       ok, failed by the upstream (500, cut, malformed) and left by the
#       client, then 20 scrapes (3 with --quick) timed by the client, and
#       the proxy's CPU per scrape (render.py).
#   (k) 10,000 slow streams (K_STREAMS), tokenclock only, opt-in (--only k):
#       as (c) at the scale of issue #14's target, with max_connections
#       raised to fit; needs 2 fds per stream in the proxy (client and
#       upstream socket) plus pool, metrics and 64 reserved: ulimit -n of
#       2 x K_STREAMS + 400. Its RSS per stream and open fds are logged,
#       and written to k-tokenclock-REP.rss.json; the table leaves it out.
#   (i) instructions, opt-in (--only i; valgrind, installed with apt-get
#       if missing): the proxy's user-space instructions per event and per
#       request, counted by callgrind: the one figure this noisy, shared,
#       counter-less VM cannot move. The proxy runs under callgrind on core
#       1; I_STREAMS (default 32) streams paced as (a)'s (one event per
#       read), then back to back (events piled up, as in (s)); in each, once
#       with I_SHORT (8) and once with I_LONG (128) events per stream, the
#       same requests: per event is the slope between the two. Per request,
#       the slope between two loads of 2 and 8 requests per stream, of
#       whole (non-streamed) answers and of paced I_SHORT-event streams. (What
#       a short load leaves over its events' cost is not a request's cost:
#       a short stream's first and last events share writes and wake-ups
#       that a long stream's do not, so a proxy cheaper per event looked
#       dearer per request.) The kernel's share (the system calls, about
#       the same for both proxies) is not counted.
#   (s) saturation, opt-in (--only s; needs root for a cpu cgroup): (w)'s
#       load with the proxy held to S_SHARE percent of one core (default
#       10) by a cgroup CPU quota, so that the proxy, not the client on core
#       0, is what runs out: the events/s each proxy sustains at that share,
#       the per-core ceiling (events/s / share), and the periods the quota
#       throttled it (more than zero: it was saturated).
# Fairness on 2 cores: sim and client on core 0, the proxy on core 1;
# tokenclock --worker-threads 1, nginx worker_processes 1; a fresh proxy and
# a warm-up per measurement; the vias' order rotated every repetition;
# medians of N repetitions (default 3).
# --only picks scenarios (say --only a for the latency runs alone; default
# aybwvcefhr, i, k and s are opt-in); A_STREAMS in the environment sets the number of
# streams of (a) (default 32).
# --trace adds (t): (a) once more per proxy with its syscalls recorded by
# perf (linux-perf), for each proxy's in-proxy delay per event (in_proxy.py):
# from the wake-up that reported the event to its write, the part of the
# delay that is the proxy's own. Its figures spread more between runs than
# the others, so it has repetitions of its own: T_REPS (default 8, or --reps
# if that is more), each about 20 s.
# Prints one table of medians on stdout, then tokenclock's figures against
# nginx's paired by repetition (median ratio, a 95% interval for it, and
# whether the runs tell the two apart; summarize.py), and writes JSON
# (default target/perf/overhead.json).
# Everything listens on 127.0.0.1 and is killed on exit.
set -euo pipefail

QUICK=0 REPS=3 OUT=target/perf/overhead.json BUILD=1 UPSTREAM="" ONLY=aybwvcefhr TRACE=0
while [[ $# -gt 0 ]]; do
    case "$1" in
        --quick) QUICK=1 REPS=1 ;;
        --reps) REPS="$2"; shift ;;
        --only) ONLY="$2"; shift ;;
        --trace) TRACE=1 ;;
        --out) OUT="$2"; shift ;;
        --no-build) BUILD=0 ;;
        --upstream) UPSTREAM="$2"; shift ;;
        *) echo "overhead.sh: unknown argument $1" >&2; exit 2 ;;
    esac
    shift
done

[[ $ONLY =~ ^[aybwvcefhriks]+$ ]] || { echo "overhead.sh: --only takes letters of aybwvcefhriks, got '$ONLY'" >&2; exit 2; }
(( TRACE == 0 )) || ONLY+=t
# (t)'s repetitions: its in-proxy delay moves by ±50% between runs of one
# build, so it takes more of them than the other scenarios (it is cheap).
T_REPS=${T_REPS:-$(( QUICK == 1 ? 1 : 8 ))}
[[ $T_REPS =~ ^[0-9]+$ ]] && (( T_REPS >= 1 )) || { echo "overhead.sh: T_REPS is a count, 1 or more" >&2; exit 2; }
(( T_REPS >= REPS )) || T_REPS=$REPS

PERF_DIR=$(cd "$(dirname "$0")" && pwd)
cd "$PERF_DIR/../.."
# Sizes: (a) streams, events; (b) and (w) streams, events per stream; (c) and (h) streams, hold time;
# (f) streams, events per stream, ms between events.
if [[ $QUICK == 1 ]]; then
    A_STREAMS=4 A_EVENTS=8 B_STREAMS=16 B_EVENTS=200 W_STREAMS=16 W_EVENTS=50 C_STREAMS=50 C_HOLD=3
    F_STREAMS=50 F_EVENTS=5 F_GAP=200
    I_STREAMS=8 I_SHORT=4 I_LONG=32
else
    A_STREAMS=${A_STREAMS:-32} A_EVENTS=64 B_STREAMS=256 B_EVENTS=2000 W_STREAMS=256 W_EVENTS=200
    C_STREAMS=2000 C_HOLD=12
    F_STREAMS=${F_STREAMS:-2000} F_EVENTS=10 F_GAP=500
    I_STREAMS=${I_STREAMS:-32} I_SHORT=${I_SHORT:-8} I_LONG=${I_LONG:-128}
fi
SIM_PORT=${SIM_PORT:-18431} TC_PORT=${TC_PORT:-18432} TC_METRICS=${TC_METRICS:-18433} NGINX_PORT=${NGINX_PORT:-18434}
NGINX_H2_PORT=${NGINX_H2_PORT:-18435}
# PROFILE: the cargo profile built and measured; `dist` by default, the
# profile that ships (deploy/Dockerfile; Cargo.toml's `[profile.dist]`).
# tests/run.sh's smoke run takes `release`, which the tests built already.
PROFILE=${PROFILE:-dist}
[[ $PROFILE =~ ^[a-z][a-z0-9_-]*$ ]] || { echo "overhead.sh: PROFILE is a cargo profile name" >&2; exit 2; }
BIN=target/$PROFILE/tokenclock
# PGO: 1 (the default with PROFILE=dist) measures as tokenclock the binary
# that ships, the `dist` profile built with profile-guided optimization by
# deploy/pgo.sh (target/pgo/dist/tokenclock; about 7.5 minutes to build on 2
# cores); 0 the plain PROFILE build. The simulator and the load generator
# are BIN either way.
PGO=${PGO:-$([[ $PROFILE == dist ]] && echo 1 || echo 0)}
[[ $PGO == [01] ]] || { echo "overhead.sh: PGO is 0 or 1" >&2; exit 2; }
(( PGO == 0 )) || [[ $PROFILE == dist ]] || { echo "overhead.sh: PGO=1 builds the dist profile; set PROFILE=dist or PGO=0" >&2; exit 2; }
PGO_BIN=target/pgo/dist/tokenclock
# (s): the share of one core the proxy is held to, in percent.
S_SHARE=${S_SHARE:-10}
[[ $S_SHARE =~ ^[0-9]+$ ]] && (( S_SHARE >= 1 && S_SHARE <= 100 )) || { echo "overhead.sh: S_SHARE is a percent, 1 to 100" >&2; exit 2; }
# PROXY_BIN: the tokenclock under test, if not PGO_BIN (PGO=1) or BIN (say,
# an older build for a before/after).
PROXY_BIN=${PROXY_BIN:-$( (( PGO == 1 )) && echo "$PGO_BIN" || echo "$BIN")}
# TC_ARGS: more `tokenclock serve` arguments, split on spaces (say
# TC_ARGS="--log-format json", the Kubernetes sidecar's log format).
read -ra TC_EXTRA <<<"${TC_ARGS:-}"

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
    # (s)'s cgroup, empty once its proxies are gone.
    if [[ -n $CG ]]; then rmdir "$CG" 2>/dev/null || log "could not remove $CG"; fi
    rm -rf "$TMP"
}
CG=""
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
(( TRACE == 0 )) || command -v perf >/dev/null || die "--trace needs perf (Debian's linux-perf)"
if ! command -v nginx >/dev/null; then
    log "installing nginx with apt-get"
    if [[ $(id -u) == 0 ]]; then apt-get install -y -q nginx >&2; else sudo -n apt-get install -y -q nginx >&2; fi
fi
if [[ $ONLY == *i* ]] && ! command -v valgrind >/dev/null; then
    log "installing valgrind with apt-get"
    if [[ $(id -u) == 0 ]]; then apt-get install -y -q valgrind >&2; else sudo -n apt-get install -y -q valgrind >&2; fi
fi
if [[ $BUILD == 1 ]]; then
    log "building the $PROFILE binary"
    cargo build --profile "$PROFILE" --quiet
    if [[ $PGO == 1 && $PROXY_BIN == "$PGO_BIN" ]]; then
        log "building the profile-guided binary (deploy/pgo.sh)"
        bash deploy/pgo.sh >"$TMP/pgo.log" 2>&1 || die "deploy/pgo.sh failed: $(tail -5 "$TMP/pgo.log")"
    fi
fi
[[ -x $BIN ]] || die "no $BIN: run without --no-build"
[[ -x $PROXY_BIN ]] || die "no $PROXY_BIN: run without --no-build"
log "tokenclock under test: $PROXY_BIN"
[[ -n $UPSTREAM ]] || start_sim

# run_load OUT ERR ARGS...: tokenclock load on core 0 against PROXY_URL; JSON summary into OUT, progress into ERR.
run_load() {
    local out=$1 err=$2
    shift 2
    taskset -c 0 "$BIN" load --target "$PROXY_URL" --format json "$@" >"$out" 2>>"$err"
}

# warm_up SCENARIO: a short load at the scenario's concurrency (capped at
# 64), so the proxy's upstream connections exist before the measurement.
warm_up() {
    local streams=4
    case "$1" in
        a | t | y) streams=$A_STREAMS ;;
        b | w | v | s) streams=$(( B_STREAMS < 64 ? B_STREAMS : 64 )) ;;
    esac
    run_load /dev/null "$TMP/load.log" --concurrency "$streams" --requests $(( streams * 2 )) \
        --schedule "ttft_ms=1,gap_ms=1,tokens=16"
}

# a_load OUT [LOAD ARGS]: (a)'s load, a steady 20 ms pace; its summary into OUT.
a_load() {
    local out=$1
    shift
    run_load "$out" "$TMP/load.log" --concurrency "$A_STREAMS" \
        --requests $(( A_STREAMS * 2 )) --schedule "ttft_ms=20,gap_ms=20,tokens=$A_EVENTS" "$@"
}

# (a) one-way delay per event at a steady 20 ms pace.
scenario_a() {
    a_load "$RESULTS/a-$1-$2.json"
}

# (y) (a) with the client on one h2c connection.
scenario_y() {
    PROXY_URL=$H2_URL a_load "$RESULTS/y-$1-$2.json" --http2
}

# (t) scenario (a) again with the proxy's syscalls recorded by perf (its
# own run: tracing slows every syscall, so it stays out of (a)'s figures);
# in_proxy.py turns them into the in-proxy delay per event.
scenario_t() {
    local perf_pid data="$TMP/perf-$1-$2.data"
    perf record -q -o "$data" -e "$TRACE_EVENTS" -p "$(proxy_pids | paste -sd,)" 2>>"$TMP/perf.log" &
    perf_pid=$!
    PIDS+=("$perf_pid")
    sleep 1 # perf attaches
    a_load "$RESULTS/t-$1-$2.json"
    kill -INT "$perf_pid"
    wait "$perf_pid" || true
    forget "$perf_pid"
    perf script --ns -i "$data" -F tid,time,event,trace 2>>"$TMP/perf.log" >"$TMP/perf.txt"
    python3 "$PERF_DIR/in_proxy.py" "$TMP/perf.txt" "$1" "$RESULTS/t-$1-$2.trace.json" >/dev/null
    rm -f "$data" "$TMP/perf.txt"
}

# The syscalls --trace records: waits for readiness, reads and writes.
TRACE_EVENTS=$(printf 'syscalls:sys_%s_%s,' \
    enter epoll_wait exit epoll_wait enter epoll_pwait exit epoll_pwait \
    exit read exit readv exit recvfrom exit recvmsg \
    exit write exit writev exit sendto exit sendmsg)
TRACE_EVENTS=${TRACE_EVENTS%,}

# The syscalls counted around (b) and (w) when perf can count them: the
# proxy's reads, writes and readiness waits per event show how many events
# each wake-up carried.
COUNT_EVENTS=$(printf 'syscalls:sys_enter_%s,' read readv recvfrom recvmsg write writev sendto sendmsg \
    epoll_wait epoll_pwait)
COUNT_EVENTS=${COUNT_EVENTS%,}
COUNT=0
timeout 10 perf stat -x, -e syscalls:sys_enter_read -p $$ -- true >/dev/null 2>&1 && COUNT=1

# throughput NAME VIA REP STREAMS SCHEDULE [LOAD ARGS]: events as fast as
# possible; the proxy's CPU ticks, and its syscalls if perf counts them,
# around the run.
throughput() {
    local pids before after perf_pid="" counts="$TMP/count-$1-$2-$3.csv" calls=""
    pids=$(proxy_pids)
    if (( COUNT == 1 )) && [[ -n $pids ]]; then
        perf stat -x, -o "$counts" -e "$COUNT_EVENTS" -p "$(paste -sd, <<<"$pids")" 2>>"$TMP/perf.log" &
        perf_pid=$!
        PIDS+=("$perf_pid")
        sleep 1 # perf attaches
    fi
    # shellcheck disable=SC2086 # one pid per word
    before=$(cpu_ticks $pids)
    run_load "$RESULTS/$1-$2-$3.json" "$TMP/load.log" --concurrency "$4" --requests "$4" --schedule "$5" "${@:6}"
    # shellcheck disable=SC2086
    after=$(cpu_ticks $pids)
    if [[ -n $perf_pid ]]; then
        kill -INT "$perf_pid"
        wait "$perf_pid" || true
        forget "$perf_pid"
        calls=$(awk -F, '
            $3 ~ /(read|readv|recvfrom|recvmsg)$/ { r += $1 }
            $3 ~ /(write|writev|sendto|sendmsg)$/ { w += $1 }
            $3 ~ /epoll_p?wait$/ { e += $1 }
            END { printf ", \"reads\": %d, \"writes\": %d, \"waits\": %d", r, w, e }' "$counts")
    fi
    echo "{\"cpu_ticks\": $(( after - before )), \"clk_tck\": $(getconf CLK_TCK)$calls}" \
        >"$RESULTS/$1-$2-$3.cpu.json"
}

# (b) events as fast as possible, several to a write when they pile up.
scenario_b() {
    throughput b "$1" "$2" "$B_STREAMS" "ttft_ms=0,gap_ms=0,tokens=$B_EVENTS"
}

# (w) events as fast as possible, each in its own write, short streams.
scenario_w() {
    throughput w "$1" "$2" "$W_STREAMS" "ttft_ms=0,gap_ms=0,tokens=$W_EVENTS,yield=1"
}

# (v) as (w), the client speaking HTTP/2 (h2c): every request a stream of
# one connection, as an HTTP/2 load balancer or gateway in front sends them.
# The proxy's h2c address for the call alone (bash restores PROXY_URL).
scenario_v() {
    PROXY_URL=$H2_URL throughput v "$1" "$2" "$W_STREAMS" "ttft_ms=0,gap_ms=0,tokens=$W_EVENTS,yield=1" --http2
}

# held SCENARIO VIA REP [LOAD ARGS]: C_STREAMS requests held open, each 10
# minutes from its first token: the proxy's RSS before and with them, then
# the load generator's deadline cancels them all.
held() {
    local scenario=$1 via=$2 rep=$3 pids before with n tries=$(( C_HOLD * 10 - 20 )) load_pid
    local progress="$TMP/$1-$2-$3.log"
    shift 3
    pids=$(proxy_pids)
    # shellcheck disable=SC2086
    before=$(rss_kib $pids)
    run_load "$RESULTS/$scenario-$via-$rep.json" "$progress" --concurrency "$C_STREAMS" --requests "$C_STREAMS" \
        --duration "${C_HOLD}s" --schedule "ttft_ms=600000,gap_ms=20,tokens=1" "$@" &
    load_pid=$!
    PIDS+=("$load_pid")
    while (( $(last_in_flight "$progress") < C_STREAMS && tries-- > 0 )); do sleep 0.1; done
    sleep 1
    n=$(last_in_flight "$progress")
    # shellcheck disable=SC2086
    with=$(rss_kib $pids)
    (( n == C_STREAMS )) || log "warning: only $n of $C_STREAMS requests open when sampled"
    echo "{\"rss_before_kib\": $before, \"rss_with_kib\": $with, \"streams\": $n}" >"$RESULTS/$scenario-$via-$rep.rss.json"
    wait "$load_pid" || die "the held-request load ($scenario) failed: $(tail -3 "$progress")"
    forget "$load_pid"
}

# (c) idle streams: each has its response head, and waits for its first
# event.
scenario_c() {
    held c "$1" "$2"
}

# (e) idle streams over h2c: (c) with the client on one h2c connection per
# 100 streams.
scenario_e() {
    PROXY_URL=$H2_URL held e "$1" "$2" --http2
}

# (h) held whole requests: each waits for its response head, which a whole
# answer gets only once generated.
scenario_h() {
    held h "$1" "$2" --no-stream
}

# (f) flowing streams: F_STREAMS at once, F_EVENTS events F_GAP ms apart;
# the proxy's peak RSS over its RSS before, sampled every 0.1 s while they
# run (what a held stream costs while its events flow, not only while it
# waits for its first).
scenario_f() {
    local pids before peak=0 rss load_pid progress="$TMP/f-$1-$2.log"
    pids=$(proxy_pids)
    # shellcheck disable=SC2086
    before=$(rss_kib $pids)
    run_load "$RESULTS/f-$1-$2.json" "$progress" --concurrency "$F_STREAMS" --requests "$F_STREAMS" \
        --schedule "ttft_ms=0,gap_ms=$F_GAP,tokens=$F_EVENTS" &
    load_pid=$!
    PIDS+=("$load_pid")
    while kill -0 "$load_pid" 2>/dev/null; do
        # shellcheck disable=SC2086
        rss=$(rss_kib $pids)
        if (( rss > peak )); then peak=$rss; fi
        sleep 0.1
    done
    wait "$load_pid" || die "the flowing-stream load failed: $(tail -3 "$progress")"
    forget "$load_pid"
    echo "{\"rss_before_kib\": $before, \"rss_with_kib\": $peak, \"streams\": $F_STREAMS}" >"$RESULTS/f-$1-$2.rss.json"
}

# (k) slow streams at scale, through tokenclock alone (nginx's config holds
# 16,384 connections, 8,192 streams): a fresh proxy whose max_connections
# fits K_STREAMS, the streams opened as in (c), and the proxy's RSS sampled
# every second until it stops growing (at this scale the proxy is still
# opening upstream connections well after the client's are all open), with
# the file descriptors it holds. Logs the RSS per stream.
# (r) the /metrics render with 32 models on every endpoint and outcome.
scenario_r() {
    [[ $1 == tokenclock ]] || return 0
    python3 "$PERF_DIR/render.py" "$PROXY_URL" "http://127.0.0.1:$TC_METRICS" "$PROXY_PID" \
        "$RESULTS/r-$1-$2.json" "$(( QUICK == 1 ? 3 : 20 ))"
}

scenario_k() {
    [[ $1 == tokenclock ]] || return 0
    local streams=${K_STREAMS:-10000} hold=${K_HOLD:-60} before with=0 last=-1 fds load_pid
    local progress="$TMP/k-$1-$2.log" tries
    if (( $(ulimit -n) < 2 * streams + 400 )); then
        log "(k) skipped: ulimit -n is $(ulimit -n); $streams streams need $(( 2 * streams + 400 ))"
        return 0
    fi
    stop_proxy
    printf 'max_connections = %d\npool_max_idle_per_host = 64\nmetrics_max_connections = 8\n' \
        "$streams" >"$TMP/k.toml"
    local TOKENCLOCK_CONFIG=$TMP/k.toml
    export TOKENCLOCK_CONFIG
    start_tokenclock
    warm_up k
    before=$(rss_kib "$PROXY_PID") # tokenclock is one process
    run_load "$RESULTS/k-$1-$2.json" "$progress" --concurrency "$streams" --requests "$streams" \
        --duration "${hold}s" --schedule "ttft_ms=600000,gap_ms=20,tokens=1" &
    load_pid=$!
    PIDS+=("$load_pid")
    tries=$(( hold - 10 ))
    while (( $(last_in_flight "$progress") < streams && tries-- > 0 )); do sleep 1; done
    while (( with != last && tries-- > 0 )); do
        last=$with
        sleep 1
        with=$(rss_kib "$PROXY_PID")
    done
    fds=$(find "/proc/$PROXY_PID/fd" -mindepth 1 -maxdepth 1 | wc -l)
    echo "{\"rss_before_kib\": $before, \"rss_with_kib\": $with, \"streams\": $(last_in_flight "$progress"), \"fds\": $fds}" \
        >"$RESULTS/k-$1-$2.rss.json"
    wait "$load_pid" || die "the slow-stream load failed: $(tail -3 "$progress")"
    forget "$load_pid"
    python3 - "$RESULTS/k-$1-$2.rss.json" <<'PY' >&2
import json, sys
r = json.load(open(sys.argv[1]))
per = (r["rss_with_kib"] - r["rss_before_kib"]) / r["streams"]
print(f"overhead: (k) {r['streams']} slow streams: proxy RSS {r['rss_with_kib'] / 1024:.1f} MiB, "
      f"{per:.1f} KiB per stream, {r['fds']} file descriptors open")
PY
}

# (i) the proxy under callgrind, in two regimes: paced as (a) (gap 20 ms:
# each event its own read) and back to back (gap 0: under callgrind the
# proxy is the bottleneck, so events pile up as in (s)). In each, a short
# and a long load with the same requests, each counted alone and dumped.
scenario_i() {
    local via=$1 rep=$2 streams=$I_STREAMS short=$I_SHORT long=$I_LONG counts=$TMP/i-$1-$2.out
    local gap len n=0 args=()
    stop_proxy
    start_counted "$1" "$counts"
    run_load /dev/null "$TMP/load.log" --concurrency "$streams" --requests "$streams" \
        --schedule "ttft_ms=0,gap_ms=20,tokens=$short"
    # counted TAG REQUESTS LOAD_ARGS...: one load counted alone.
    counted() {
        local tag=$1 requests=$2
        shift 2
        n=$(( n + 1 ))
        callgrind_control -i on "$PROXY_PID" >/dev/null 2>&1
        run_load "$RESULTS/i-$via-$rep-$tag.json" "$TMP/load.log" --concurrency "$streams" \
            --requests "$requests" "$@"
        callgrind_control -i off "$PROXY_PID" >/dev/null 2>&1
        callgrind_control -d "$PROXY_PID" >/dev/null 2>&1
        local tries=100
        until grep -qs '^totals:' "$counts.$n"; do
            (( tries-- > 0 )) || die "(i): no callgrind dump $counts.$n"
            sleep 0.1
        done
        args+=("$counts.$n" "$RESULTS/i-$via-$rep-$tag.json")
    }
    for gap in 20 0; do
        for len in "$short" "$long"; do
            counted "$gap-$len" $(( 2 * streams )) --schedule "ttft_ms=0,gap_ms=$gap,tokens=$len"
        done
    done
    counted "20-$short-more" $(( 8 * streams )) --schedule "ttft_ms=0,gap_ms=20,tokens=$short"
    counted whole $(( 2 * streams )) --no-stream --schedule "ttft_ms=0,gap_ms=20,tokens=$short"
    counted whole-more $(( 8 * streams )) --no-stream --schedule "ttft_ms=0,gap_ms=20,tokens=$short"
    cp "$RESULTS/i-$1-$2-20-$long.json" "$RESULTS/i-$1-$2.json"
    python3 - "$RESULTS/i-$1-$2.ir.json" "${args[@]}" <<'PY'
import json, sys
out, files = sys.argv[1], sys.argv[2:]
loads = []
for counts, summary in zip(files[::2], files[1::2]):
    ir = next(int(l.split()[1]) for l in open(counts) if l.startswith("totals:"))
    total = json.load(open(summary))["total"]
    loads.append({"ir": ir, "events": total["events"], "requests": total["requests"]})
result = {}
for regime, (s, l) in (("paced", loads[0:2]), ("piled", loads[2:4])):
    result[regime] = {"short": s, "long": l,
                      "ir_per_event": (l["ir"] - s["ir"]) / (l["events"] - s["events"])}
# Per request: the slope over the number of requests, the same requests.
for kind, (a, b) in (("short_request", (loads[0], loads[4])), ("whole_request", loads[5:7])):
    result[kind] = {"fewer": a, "more": b,
                    "ir_per_request": (b["ir"] - a["ir"]) / (b["requests"] - a["requests"])}
json.dump(result, open(out, "w"))
PY
}

# make_cgroup: CG, a cpu cgroup that holds its processes to S_SHARE% of one
# core (cgroup v1's cpu controller, else v2's cpu.max).
make_cgroup() {
    local quota=$(( S_SHARE * 1000 ))
    if [[ -d /sys/fs/cgroup/cpu && -w /sys/fs/cgroup/cpu ]]; then
        CG=/sys/fs/cgroup/cpu/tokenclock-overhead-$$
        mkdir "$CG" && echo 100000 >"$CG/cpu.cfs_period_us" && echo "$quota" >"$CG/cpu.cfs_quota_us" ||
            die "(s): cannot set up the cpu cgroup $CG"
    elif [[ -w /sys/fs/cgroup/cgroup.subtree_control ]] && grep -qw cpu /sys/fs/cgroup/cgroup.controllers; then
        echo +cpu >/sys/fs/cgroup/cgroup.subtree_control 2>/dev/null || true
        CG=/sys/fs/cgroup/tokenclock-overhead-$$
        mkdir "$CG" && echo "$quota 100000" >"$CG/cpu.max" || die "(s): cannot set up the cpu cgroup $CG"
    else
        die "(s) needs a cpu cgroup it can create (cgroup v1 /sys/fs/cgroup/cpu or v2 with the cpu controller): run as root"
    fi
}

# nr_throttled of CG: the quota periods that ran out.
throttled() {
    awk '$1 == "nr_throttled" { print $2 }' "$CG/cpu.stat"
}

# (s) (w)'s load, the proxy held to S_SHARE% of a core.
scenario_s() {
    [[ -n $CG ]] || make_cgroup
    local pid before
    for pid in $(proxy_pids); do
        echo "$pid" >"$CG/cgroup.procs"
    done
    before=$(throttled)
    throughput s "$1" "$2" "$W_STREAMS" "ttft_ms=0,gap_ms=0,tokens=$W_EVENTS,yield=1"
    echo "{\"share_pct\": $S_SHARE, \"throttled_periods\": $(( $(throttled) - before ))}" \
        >"$RESULTS/s-$1-$2.share.json"
}

# Scenario by scenario, each via in turn, the order of the vias rotated
# every repetition: no via always runs first, or always after the same one
# (what ran just before, on a shared machine, shows in the next p99).
VIAS=(direct tokenclock nginx)
LAST=$REPS
[[ $ONLY != *t* ]] || LAST=$T_REPS
for rep in $(seq 1 "$LAST"); do
    for scenario in a y t b w v c e h f r i k s; do
        [[ $ONLY == *"$scenario"* ]] || continue
        if [[ $scenario == t ]]; then (( rep <= T_REPS )) || continue; else (( rep <= REPS )) || continue; fi
        for i in 0 1 2; do
            via=${VIAS[$(( (i + rep - 1) % 3 ))]}
            [[ $via == direct && $scenario == [cehtfis] ]] && continue
            [[ $via != tokenclock && $scenario == [rk] ]] && continue
            log "rep $rep/$([[ $scenario == t ]] && echo "$T_REPS" || echo "$REPS"): ($scenario) via $via"
            start_proxy "$via"
            warm_up "$scenario"
            "scenario_$scenario" "$via" "$rep"
            stop_proxy
        done
    done
done

mkdir -p "$(dirname "$OUT")"
python3 "$PERF_DIR/summarize.py" "$RESULTS" "$OUT" "$QUICK" "$REPS" "$([[ $ONLY == *t* ]] && echo "$T_REPS" || echo 0)"
log "JSON written to $OUT"
