#!/usr/bin/env bash
# soak.sh: a long run of streamed requests through tokenclock against the simulator (tokenclock sim), then checks that nothing leaked and every request was counted once.
#
# Usage: bash tests/perf/soak.sh [--requests N | --duration D] [--concurrency N] [--http2] [--out FILE] [--no-build] [--rss-warn-only]
#
# Defaults: 1,000,000 requests at concurrency 256. --duration D (e.g. 60s)
# runs for about D instead: the warm-up's rate sets the request count, so
# the load still ends by its count and cancels nothing (a request cancelled
# before it reached the proxy could not be accounted for).
#
# Traffic: `tokenclock load` with the chat and summaries workloads sent to
# fifteen API families of the simulator (OpenAI chat, completions, Responses,
# Anthropic Messages, Ollama chat and generate: SSE and NDJSON; SGLang's
# native /generate, which the proxy tells from TGI's by the answer; TGI's
# native /generate_stream; llama.cpp's native /completion; speech to
# text's /v1/audio/transcriptions, a form with an audio file; embeddings'
# /v1/embeddings, Ollama's /api/embed, reranks' /v1/rerank and vLLM's
# /classify, whole answers read by their ends; TEI's /embed, read from its
# head), each also
# with faults (aborted streams, 500s, 429s, a malformed event, a stall),
# 16 events per stream as fast as the connection takes them. --http2: the
# load speaks h2c (one connection per 100 streams), as an HTTP/2 gateway in
# front of the sidecar: the same checks hold for HTTP/2 clients' streams,
# reset by the client or cut by the upstream mid-stream included.
#
# Order: simulator, tokenclock (default config), a warm-up load (5 % of
# the requests, at least 20,000; 10 s in --duration mode), then the
# proxy's RSS, open fds and metrics are sampled with no load running and
# its upstream pool idle-closed (pool_idle_timeout is 4 s); the soak load;
# the same samples again. It fails (exit 1) unless:
#   - the load generator finished every request it sent, none cancelled;
#   - tokenclock_requests_total grew by exactly that count, in total, per
#     endpoint (so none counted twice or under another family), and its
#     ok outcomes and 429/500 codes match what the client saw;
#   - tokenclock_request_duration_seconds_count (E2E) grew by the same;
#   - no request is left in flight;
#   - no request failed without its response head (the simulator fails
#     streams only after their heads);
#   - RSS at the end is at most 10 % above RSS after the warm-up (it may
#     fall: the allocator hands back pages);
#   - no more open fds at the end than after the warm-up.
# --rss-warn-only reports the RSS check without failing on it (tests/run.sh:
# a 60 s run's warm-up is too short for a settled RSS baseline).
# Writes the figures and each check as JSON (default target/perf/soak.json).
# Everything listens on 127.0.0.1 and is killed on exit.
set -euo pipefail

REQUESTS=1000000 DURATION="" CONCURRENCY=256 OUT=target/perf/soak.json BUILD=1 RSS=fail HTTP2=()
while [[ $# -gt 0 ]]; do
    case "$1" in
        --requests) REQUESTS="$2"; shift ;;
        --duration) DURATION="$2"; shift ;;
        --concurrency) CONCURRENCY="$2"; shift ;;
        --http2) HTTP2=(--http2) ;;
        --out) OUT="$2"; shift ;;
        --no-build) BUILD=0 ;;
        --rss-warn-only) RSS=warn ;;
        *) echo "soak.sh: unknown argument $1" >&2; exit 2 ;;
    esac
    shift
done
[[ $REQUESTS =~ ^[1-9][0-9]*$ ]] || { echo "soak.sh: --requests takes a positive count" >&2; exit 2; }
[[ -z $DURATION || $DURATION =~ ^[1-9][0-9]*s$ ]] || { echo "soak.sh: --duration takes seconds, e.g. 60s" >&2; exit 2; }

PERF_DIR=$(cd "$(dirname "$0")" && pwd)
cd "$PERF_DIR/../.."
SIM_PORT=${SIM_PORT:-18441} TC_PORT=${TC_PORT:-18442} TC_METRICS=${TC_METRICS:-18443}
BIN=target/release/tokenclock

log() { echo "soak: $*" >&2; }
die() { log "$*"; exit 1; }

TMP=$(mktemp -d)
PIDS=()
cleanup() {
    stop_pids
    rm -rf "$TMP"
}
trap cleanup EXIT

# shellcheck source=tests/perf/procfs.sh
source "$PERF_DIR/procfs.sh"

command -v python3 >/dev/null || die "python3 is needed for the checks"
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
if [[ $BUILD == 1 ]]; then
    log "building the release binary"
    cargo build --release --quiet
fi
[[ -x $BIN ]] || die "no $BIN: run without --no-build"
for port in "$SIM_PORT" "$TC_PORT" "$TC_METRICS"; do
    port_free "$port" || die "port $port is busy; set SIM_PORT, TC_PORT or TC_METRICS"
done

"$BIN" sim --listen "127.0.0.1:$SIM_PORT" --max-batch 100000 --seed 1 >"$TMP/sim.log" 2>&1 &
PIDS+=($!)
wait_for_line "$TMP/sim.log" "Simulator listening." 10 || die "the simulator did not start"
"$BIN" serve --upstream "http://127.0.0.1:$SIM_PORT" --listen "127.0.0.1:$TC_PORT" \
    --metrics-listen "127.0.0.1:$TC_METRICS" >"$TMP/tokenclock.log" 2>&1 &
PROXY_PID=$!
PIDS+=("$PROXY_PID")
wait_for_line "$TMP/tokenclock.log" "Proxy listening." 10 || die "tokenclock did not start"

PATHS=(/v1/chat/completions /v1/completions /v1/responses /v1/messages /api/chat /api/generate /generate /generate_stream /completion /v1/audio/transcriptions /v1/embeddings /api/embed /v1/rerank /classify /embed)
FAULTS=("abort=4,rate=0.2" "status=500,rate=0.1" "status=429,rate=0.1" "malformed,rate=0.2" "stall=20,rate=0.1")
LOAD_ARGS=(--target "http://127.0.0.1:$TC_PORT" --concurrency "$CONCURRENCY" --format json
    "${HTTP2[@]}" --workload chat --workload summaries --schedule "ttft_ms=0,gap_ms=0,tokens=16"
    --request-timeout 60s)
for p in "${PATHS[@]}"; do LOAD_ARGS+=(--path "$p"); done
for f in "${FAULTS[@]}"; do LOAD_ARGS+=(--fault "$f"); done

# load NAME ARGS...: one load run; its JSON summary into TMP/NAME.json.
load() {
    local name=$1
    shift
    "$BIN" load "${LOAD_ARGS[@]}" "$@" >"$TMP/$name.json" 2>"$TMP/$name.log" ||
        die "the $name load failed: $(tail -3 "$TMP/$name.log")"
}

fd_count() { find "/proc/$PROXY_PID/fd" -mindepth 1 -maxdepth 1 | wc -l; }

# sample NAME: with no load running and the upstream pool idle-closed, the
# proxy's RSS, open fds and metrics into TMP/NAME.*.
sample() {
    # hyper-util's pool reaper runs every pool_idle_timeout (4 s), so an idle
    # upstream connection closes 4 to 8 s after its last request: wait past
    # that, then until the fd count holds still for a second (10 s at most).
    sleep 9
    local before after
    after=$(fd_count)
    for _ in $(seq 10); do
        before=$after
        sleep 1
        after=$(fd_count)
        [[ $after == "$before" ]] && break
    done
    python3 "$PERF_DIR/soak_check.py" scrape "http://127.0.0.1:$TC_METRICS/metrics" "$TMP/$1.metrics"
    rss_kib "$PROXY_PID" >"$TMP/$1.rss"
    fd_count >"$TMP/$1.fds"
    kill -0 "$PROXY_PID" 2>/dev/null || die "tokenclock exited: $(tail -3 "$TMP/tokenclock.log")"
}

if [[ -n $DURATION ]]; then
    log "warm-up: 10 s at concurrency $CONCURRENCY"
    load warmup --duration 10s --seed 1
    REQUESTS=$(python3 -c 'import json, sys; s = json.load(open(sys.argv[1])); print(max(1000, int(s["requests_per_s"] * int(sys.argv[2]))))' \
        "$TMP/warmup.json" "${DURATION%s}")
else
    warm=$(( REQUESTS / 20 > 20000 ? REQUESTS / 20 : 20000 ))
    log "warm-up: $warm requests at concurrency $CONCURRENCY"
    load warmup --requests "$warm" --seed 1
fi
sample warm
log "soak: $REQUESTS requests at concurrency $CONCURRENCY (progress in the load's log)"
started=$(date +%s)
load soak --requests "$REQUESTS" --seed 2
log "soak load done in $(( $(date +%s) - started )) s"
sample end

mkdir -p "$(dirname "$OUT")"
python3 "$PERF_DIR/soak_check.py" check "$TMP" "$REQUESTS" "$CONCURRENCY" "$OUT" "$RSS"
