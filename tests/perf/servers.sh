#!/usr/bin/env bash
# servers.sh: start and stop the simulator and the proxies under test for overhead.sh; source it after procfs.sh.
# Expects BIN, PROXY_BIN, TMP, PIDS, SIM_PORT, TC_PORT, TC_METRICS, NGINX_PORT,
# NGINX_H2_PORT; sets PROXY_PID, PROXY_URL and H2_URL.

# start_sim: the simulator on core 0, on 127.0.0.1:SIM_PORT.
start_sim() {
    "$BIN" sim --help >/dev/null 2>&1 || die "'tokenclock sim' is not in $BIN (is the simulator merged?)"
    port_free "$SIM_PORT" || die "port $SIM_PORT is busy; set SIM_PORT"
    taskset -c 0 "$BIN" sim --listen "127.0.0.1:$SIM_PORT" --max-batch 100000 --seed 1 \
        >"$TMP/sim.log" 2>&1 &
    PIDS+=($!)
    wait_for_line "$TMP/sim.log" "Simulator listening." 10 || die "the simulator did not start"
}

# start_proxy VIA: a fresh proxy (tokenclock or nginx) on core 1, or nothing for direct.
start_proxy() {
    PROXY_PID=""
    case "$1" in
        direct) PROXY_URL="http://$SIM_ADDR" H2_URL="http://$SIM_ADDR" ;;
        tokenclock) start_tokenclock ;;
        nginx) start_nginx ;;
    esac
}

start_tokenclock() {
    port_free "$TC_PORT" || die "port $TC_PORT is busy; set TC_PORT"
    : >"$TMP/tokenclock.log"
    taskset -c 1 "$PROXY_BIN" serve --upstream "http://$SIM_ADDR" --listen "127.0.0.1:$TC_PORT" \
        --metrics-listen "127.0.0.1:$TC_METRICS" --worker-threads 1 "${TC_EXTRA[@]}" \
        >>"$TMP/tokenclock.log" 2>&1 &
    PROXY_PID=$!
    PIDS+=("$PROXY_PID")
    PROXY_URL="http://127.0.0.1:$TC_PORT" H2_URL="http://127.0.0.1:$TC_PORT"
    wait_for_line "$TMP/tokenclock.log" "Proxy listening." 10 || die "tokenclock did not start"
}

# nginx_conf: the config the brief fixes: one worker, no buffering, HTTP/1.1
# keep-alive to the upstream (64 idle connections), everything inside TMP;
# HTTP/2 clients (h2c, prior knowledge) on NGINX_H2_PORT, as tokenclock takes
# them on its one port.
nginx_conf() {
    cat <<CONF
worker_processes 1;
daemon off;
pid $TMP/nginx.pid;
error_log $TMP/nginx-error.log warn;
worker_rlimit_nofile 65536;
events { worker_connections 16384; }
http {
    access_log off;
    client_body_temp_path $TMP/nginx-client-body;
    proxy_temp_path $TMP/nginx-proxy;
    fastcgi_temp_path $TMP/nginx-fastcgi;
    uwsgi_temp_path $TMP/nginx-uwsgi;
    scgi_temp_path $TMP/nginx-scgi;
    upstream sim {
        server $SIM_ADDR;
        keepalive 64;
    }
    server {
        listen 127.0.0.1:$NGINX_PORT;
        listen 127.0.0.1:$NGINX_H2_PORT http2;
        client_max_body_size 16m;
        location / {
            proxy_pass http://sim;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
            proxy_read_timeout 3600s;
        }
    }
}
CONF
}

start_nginx() {
    port_free "$NGINX_PORT" || die "port $NGINX_PORT is busy; set NGINX_PORT"
    port_free "$NGINX_H2_PORT" || die "port $NGINX_H2_PORT is busy; set NGINX_H2_PORT"
    nginx_conf >"$TMP/nginx.conf"
    : >"$TMP/nginx-error.log"
    taskset -c 1 nginx -p "$TMP/" -c "$TMP/nginx.conf" -e "$TMP/nginx-error.log" \
        >"$TMP/nginx.log" 2>&1 &
    PROXY_PID=$!
    PIDS+=("$PROXY_PID")
    PROXY_URL="http://127.0.0.1:$NGINX_PORT"
    H2_URL="http://127.0.0.1:$NGINX_H2_PORT"
    await_port "$NGINX_PORT" 10 nginx "$TMP/nginx.log" "$TMP/nginx-error.log"
}

# await_port PORT SECONDS WHAT LOG...: waits until PROXY_PID accepts on
# 127.0.0.1:PORT; dies with the LOGs' tails when it exits or the time runs out.
await_port() {
    local port=$1 tries=$(( $2 * 10 )) what=$3
    shift 3
    until ! port_free "$port"; do
        (( tries-- > 0 )) || { tail -n 5 "$@" >&2; die "$what did not start"; }
        kill -0 "$PROXY_PID" 2>/dev/null || { tail -n 5 "$@" >&2; die "$what exited"; }
        sleep 0.1
    done
}

# start_counted VIA OUT: the proxy (tokenclock or nginx) on core 1 under
# valgrind's callgrind, counting nothing until told to (callgrind_control
# -i on); nginx as one process (master_process off). Each dump is written
# to OUT.N. Slow to start: valgrind translates the binary first.
start_counted() {
    local out=$2 port
    case "$1" in
        tokenclock) port=$TC_PORT ;;
        nginx) port=$NGINX_PORT ;;
    esac
    port_free "$port" || die "port $port is busy"
    case "$1" in
        tokenclock)
            taskset -c 1 valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$out" \
                "$PROXY_BIN" serve --upstream "http://$SIM_ADDR" --listen "127.0.0.1:$TC_PORT" \
                --metrics-listen "127.0.0.1:$TC_METRICS" --worker-threads 1 "${TC_EXTRA[@]}" >"$TMP/counted.log" 2>&1 &
            ;;
        nginx)
            nginx_conf | sed 's/^daemon off;$/daemon off;\nmaster_process off;/' >"$TMP/nginx-counted.conf"
            taskset -c 1 valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$out" \
                nginx -p "$TMP/" -c "$TMP/nginx-counted.conf" -e "$TMP/nginx-error.log" >"$TMP/counted.log" 2>&1 &
            ;;
    esac
    PROXY_PID=$!
    PIDS+=("$PROXY_PID")
    PROXY_URL="http://127.0.0.1:$port"
    await_port "$port" 60 "$1 under callgrind" "$TMP/counted.log"
}

# stop_proxy: stops the proxy (and its workers) and waits for it; bounded.
stop_proxy() {
    [[ -n $PROXY_PID ]] || return 0
    local tree tries=100
    tree=$(proxy_pids)
    kill "$PROXY_PID" 2>/dev/null || true
    while kill -0 "$PROXY_PID" 2>/dev/null && (( tries-- > 0 )); do sleep 0.1; done
    # shellcheck disable=SC2086 # one pid per word
    kill -KILL $tree 2>/dev/null || true
    wait "$PROXY_PID" 2>/dev/null || true
    forget "$PROXY_PID"
    PROXY_PID=""
}

# proxy_pids: the proxy's processes (nginx: master and worker), one per line.
proxy_pids() {
    if [[ -n $PROXY_PID ]]; then proc_tree "$PROXY_PID"; fi
}

# forget PID: drops PID from PIDS once it has been waited for, so cleanup never signals a reused pid.
forget() {
    local keep=() pid
    for pid in "${PIDS[@]}"; do
        [[ $pid == "$1" ]] || keep+=("$pid")
    done
    PIDS=("${keep[@]}")
}
