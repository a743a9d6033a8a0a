#!/usr/bin/env bash
# pgo.sh: build the binary that ships, the `dist` profile optimized with the
# profile of real forwarding (profile-guided optimization;
# tests/perf/RESULTS.md, "Profile-guided build"). deploy/Dockerfile runs it;
# tests/perf/overhead.sh measures what it builds.
#
# Usage: bash deploy/pgo.sh              -> target/pgo/dist/tokenclock
#        bash deploy/pgo.sh --train BIN  only the training traffic, through BIN
#                                        (tests/run.sh runs it on the release build)
#
# 1. An instrumented build (-Cprofile-generate), in target/pgo-generate.
# 2. Training, on 127.0.0.1 only (ports PGO_PORT to PGO_PORT+2, 18531 by
#    default), about 10 s: the instrumented binary runs as the simulator, the
#    proxy and the load generator. Every API family the simulator serves
#    (speech to text's forms, and the whole answers of embeddings, reranks,
#    vLLM's /classify and Ollama's /api/embed among them),
#    with and without reasoning tokens; events paced, piled up and one per write;
#    upstream faults (aborts, 500s, malformed events); records, an SLO,
#    scrapes of /metrics and the health endpoints; text and JSON access logs;
#    HTTP/1.1 and HTTP/2 to the upstream, and from the client (the HTTP/2
#    run's load speaks h2c to the proxy). The code this traffic does not run
#    (TLS, OTLP export) is optimized as
#    before, but laid out as cold. Every unfaulted request
#    must end ok and every family must reach the records, or the build
#    fails: a profile of errors would optimize the wrong code.
# 3. llvm-profdata (rustup's llvm-tools component: the same LLVM as rustc)
#    merges the counts, and the second build (-Cprofile-use) reads them, in
#    target/pgo.
# RUSTFLAGS from the caller are kept and added to.
set -euo pipefail
# BIN as the caller named it, before the cd to the repository's root.
[[ ${1:-} != --train || -z ${2:-} ]] || set -- --train "$(realpath "$2")"
cd "$(dirname "$0")/.."

log() { echo "pgo: $*" >&2; }
die() { log "$*"; exit 1; }

PORT=${PGO_PORT:-18531}
[[ $PORT =~ ^[0-9]+$ ]] && (( PORT >= 1024 && PORT <= 65533 )) || die "PGO_PORT is a port, 1024 to 65533"

# wait_for FILE TEXT: until FILE holds TEXT, 10 s at most.
wait_for() {
    local tries=100
    until grep -qsF "$2" "$1"; do
        (( tries-- > 0 )) || die "no \"$2\" in $1: $(tail -3 "$1")"
        sleep 0.1
    done
}

# get PATH: an HTTP/1.1 GET to the proxy's metrics listener (bash's /dev/tcp:
# the build image has no curl); the response is read and dropped.
get() {
    exec 3<>"/dev/tcp/127.0.0.1/$(( PORT + 2 ))"
    printf 'GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n' "$1" >&3
    cat <&3 >/dev/null
    exec 3<&-
}

# train BIN: the training traffic through BIN (see the header).
train() {
    local bin=$1 tmp sim_pid tc_pid format protocol client=()
    tmp=$(mktemp -d "${TMPDIR:-/tmp}/tokenclock-pgo.XXXXXX")
    # shellcheck disable=SC2064 # tmp is fixed here
    trap "kill \$(jobs -p) 2>/dev/null || true; rm -rf '$tmp'" EXIT
    "$bin" sim --listen "127.0.0.1:$PORT" --max-batch 100000 --seed 1 \
        >"$tmp/sim.log" 2>&1 &
    sim_pid=$!
    wait_for "$tmp/sim.log" "Simulator listening."
    local paths=(--path /v1/chat/completions --path /v1/completions --path /v1/responses
        --path /v1/messages --path /api/chat --path /api/generate --path /generate
        --path /generate_stream --path /completion --path /v1/audio/transcriptions
        --path /v1/embeddings --path /v1/rerank --path /embed --path /classify
        --path /api/embed)
    # load EXPECT_OK ARGS...: the load generator against the proxy; with
    # EXPECT_OK=all every request must end ok.
    load() {
        local expect=$1 summary requests ok
        shift
        summary=$("$bin" load --target "http://127.0.0.1:$(( PORT + 1 ))" --format json "${client[@]}" "$@" \
            2>>"$tmp/load.log") ||
            die "the load generator failed: $(tail -3 "$tmp/load.log")"
        # The summary's "total" up to its first nested object: name,
        # requests, ok, errors, ... (the build image has no JSON tool).
        summary=$(tr -d ' \n' <<<"$summary" | grep -o '"total":{[^{}]*' || true)
        requests=$(grep -o '"requests":[0-9]*' <<<"$summary" | cut -d: -f2 || true)
        ok=$(grep -o '"ok":[0-9]*' <<<"$summary" | cut -d: -f2 || true)
        [[ -n $requests && -n $ok ]] || die "no summary from the load generator"
        [[ $expect != all || $ok == "$requests" ]] ||
            die "$ok of $requests requests ok ($*): $(tail -3 "$tmp/tokenclock.log")"
    }
    for run in text,http1 json,http1 json,http2; do
        format=${run%,*} protocol=${run#*,}
        # The client speaks what the upstream is spoken: h2c in the HTTP/2 run.
        client=()
        [[ $protocol == http1 ]] || client=(--http2)
        cat >"$tmp/tokenclock.toml" <<TOML
listen = "127.0.0.1:$(( PORT + 1 ))"
upstream = "http://127.0.0.1:$PORT"
metrics_listen = "127.0.0.1:$(( PORT + 2 ))"
upstream_protocol = "$protocol"
worker_threads = 1
log_format = "$format"

[[slo]]
name = "interactive"
ttft = "500ms"
tpot = "50ms"

[records]
path = "$tmp/records.jsonl"
TOML
        "$bin" serve --config "$tmp/tokenclock.toml" >"$tmp/tokenclock.log" 2>&1 &
        tc_pid=$!
        wait_for "$tmp/tokenclock.log" "Proxy listening."
        get /readyz
        load all --concurrency 32 --requests 768 "${paths[@]}" --workload chat --workload reasoning \
            --schedule "ttft_ms=2,gap_ms=2,tokens=32,reasoning_ms=20"
        get /metrics
        load all --concurrency 64 --requests 384 "${paths[@]}" --schedule "ttft_ms=0,gap_ms=0,tokens=200"
        load all --concurrency 64 --requests 384 "${paths[@]}" --schedule "ttft_ms=0,gap_ms=0,tokens=50,yield=1"
        load some --concurrency 16 --requests 192 "${paths[@]}" --workload chat --workload summaries \
            --fault "abort=3" --fault "status=500" --fault malformed --schedule "ttft_ms=1,gap_ms=1,tokens=16"
        get /metrics
        get /healthz
        # SIGTERM: the proxy drains and exits, which writes its counts.
        kill -TERM "$tc_pid"
        wait "$tc_pid" || die "the proxy exited with $?: $(tail -3 "$tmp/tokenclock.log")"
    done
    kill -TERM "$sim_pid"
    wait "$sim_pid" 2>/dev/null || true
    local endpoint
    for endpoint in openai_chat openai_completions openai_responses anthropic ollama sglang tgi \
        llamacpp openai_audio openai_embeddings rerank tei pooling ollama_embed; do
        grep -qF "\"endpoint\":\"$endpoint\"" "$tmp/records.jsonl" || die "no $endpoint request in the records"
    done
    local reasoning
    reasoning=$(grep -c '"reasoning":[1-9]' "$tmp/records.jsonl" || true)
    (( reasoning > 0 )) || die "no request with reasoning tokens in the records"
    log "trained: $(wc -l <"$tmp/records.jsonl") requests recorded, $reasoning with reasoning"
}

if [[ ${1:-} == --train ]]; then
    [[ -x ${2:-} ]] || die "usage: pgo.sh --train BIN"
    train "$2"
    exit 0
fi
(( $# == 0 )) || die "usage: pgo.sh [--train BIN]"

# LLVM_PROFDATA: an llvm-profdata of rustc's LLVM version (`rustc -vV`), if
# rustc is not rustup's.
host=$(rustc -vV | sed -n 's/^host: //p')
profdata=${LLVM_PROFDATA:-"$(rustc --print sysroot)/lib/rustlib/$host/bin/llvm-profdata"}
if [[ ! -x $profdata && -z ${LLVM_PROFDATA:-} ]]; then
    command -v rustup >/dev/null ||
        die "no llvm-profdata at $profdata and no rustup to add it: set LLVM_PROFDATA to one of rustc's LLVM ($(rustc -vV | sed -n 's/^LLVM version: //p'))"
    log "adding rustup's llvm-tools component (llvm-profdata)"
    rustup component add llvm-tools >&2
fi
[[ -x $profdata ]] || die "no llvm-profdata at $profdata"

profiles=$PWD/target/pgo-profiles
mkdir -p "$profiles"
log "1/3: the instrumented build"
RUSTFLAGS="${RUSTFLAGS:-} -Cprofile-generate=$profiles" \
    cargo build --profile dist --locked --target-dir target/pgo-generate
log "2/3: training"
# The training's counts alone: the build scripts and proc macros the
# instrumented build ran (instrumented too) wrote theirs here as well.
rm -f "$profiles"/*.profraw "$profiles"/*.profdata
train target/pgo-generate/dist/tokenclock
"$profdata" merge -o "$profiles/merged.profdata" "$profiles"/*.profraw
# Named by its content: cargo does not know the file, so only a new name
# (new RUSTFLAGS) makes it build every crate again with a new profile.
profile="$profiles/$(sha256sum "$profiles/merged.profdata" | cut -c1-16).profdata"
mv "$profiles/merged.profdata" "$profile"
log "3/3: the build with the profile"
RUSTFLAGS="${RUSTFLAGS:-} -Cprofile-use=$profile" \
    cargo build --profile dist --locked --target-dir target/pgo
log "built target/pgo/dist/tokenclock"
