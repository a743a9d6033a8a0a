#!/usr/bin/env bash
# check.sh: the floor programs (tests/perf/floor, built by `cargo test
# --release` or `cargo build --release --examples`) relay what they are
# measured on: the same streamed requests, paced and piled up, through each
# of them as direct to the simulator, every request answered and every event
# counted by `tokenclock load`. Fails naming the floor and the figure that
# differs.
#
# Usage: bash tests/perf/floor/check.sh [PROFILE]   (default release)
set -euo pipefail
cd "$(dirname "$0")/../../.."
PROFILE=${1:-release}
BIN=target/$PROFILE/tokenclock
EXAMPLES=target/$PROFILE/examples
SIM_PORT=${SIM_PORT:-18451} FLOOR_PORT=${FLOOR_PORT:-18452}

# shellcheck source=tests/perf/procfs.sh
source tests/perf/procfs.sh
die() { echo "floor/check: $*" >&2; exit 1; }

for program in "$BIN" "$EXAMPLES"/floor_{tcp,h1,hyper}; do
    [[ -x $program ]] || die "no $program: build with cargo build --profile $PROFILE --bin tokenclock --examples"
done
for port in "$SIM_PORT" "$FLOOR_PORT"; do
    port_free "$port" || die "port $port is busy; set SIM_PORT or FLOOR_PORT"
done

TMP=$(mktemp -d)
PIDS=()
cleanup() {
    stop_pids
    rm -rf "$TMP"
}
trap cleanup EXIT

"$BIN" sim --listen "127.0.0.1:$SIM_PORT" --seed 1 >"$TMP/sim.log" 2>&1 &
PIDS+=($!)
wait_for_line "$TMP/sim.log" "Simulator listening." 10 || die "the simulator did not start"

# totals URL: "requests ok errors events" of two loads through URL, one
# paced and one piled up (several events in one read), each stream on a
# keep-alive connection that carries two requests.
totals() {
    local schedule n=0 out
    for schedule in "ttft_ms=5,gap_ms=2,tokens=12" "ttft_ms=0,gap_ms=0,tokens=200"; do
        n=$(( n + 1 ))
        out=$TMP/load-$n.json
        timeout 30 "$BIN" load --target "$1" --concurrency 4 --requests 8 --schedule "$schedule" \
            --format json >"$out" 2>>"$TMP/load.log" || die "load through $1 failed: $(tail -3 "$TMP/load.log")"
    done
    python3 - "$TMP"/load-{1,2}.json <<'PY'
import json, sys
t = [json.load(open(p))["total"] for p in sys.argv[1:]]
print(sum(x["requests"] for x in t), sum(x["ok"] for x in t), sum(x["errors"] for x in t), sum(x["events"] for x in t))
PY
}

direct=$(totals "http://127.0.0.1:$SIM_PORT")
read -r requests ok errors events <<<"$direct"
(( ok == requests && errors == 0 && events > 0 )) || die "direct: $direct (requests ok errors events)"
for floor in floor_tcp floor_h1 floor_hyper; do
    "$EXAMPLES/$floor" serve --upstream "http://127.0.0.1:$SIM_PORT" --listen "127.0.0.1:$FLOOR_PORT" \
        --worker-threads 1 >"$TMP/$floor.log" 2>&1 &
    pid=$!
    PIDS+=("$pid")
    wait_for_line "$TMP/$floor.log" "Proxy listening." 10 || die "$floor did not start"
    via=$(totals "http://127.0.0.1:$FLOOR_PORT")
    [[ $via == "$direct" ]] || die "$floor: $via, direct: $direct (requests ok errors events)"
    echo "floor/check: $floor relays as direct: $via (requests ok errors events)"
    kill "$pid"
    wait "$pid" 2>/dev/null || true
done
