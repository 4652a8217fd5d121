#!/usr/bin/env bash
# The benchmark scenarios of benches/sidecar.rs against the proxies users
# would pick instead: stunnel4, HAProxy and nginx (stream module), each as an
# equivalent mTLS pair (client → server, TLS 1.3 only, ECDSA P-256 certs from
# one CA, client certificate required and verified, server identity checked
# by the client, client identity checked by the server where the peer can),
# plus two plaintext pairs as ceilings of a user-space forwarder: socat, and
# plain-rust (the load generator re-run as two tokio forwarders, 2 workers
# each, TCP_NODELAY, 64 KiB copy buffers, no TLS). Every
# system is measured by the same Rust load generator
# (`cargo bench --bench sidecar -- --external ...`), which also measures
# "direct" (generator → target) in the same run, and one table is printed.
#
#   CARGO_TARGET_DIR=/work/target-bench bash benches/peers.sh
#   BENCH_QUICK=1 bash benches/peers.sh                 # smoke run
#   SYSTEMS="mtls-sidecar haproxy" bash benches/peers.sh
#   SYSTEMS="mtls-sidecar socat plain-rust" bash benches/peers.sh   # the ceilings
#   WORKERS=1 bash benches/peers.sh                     # threads per proxy process
#   SCENARIO=redis bash benches/peers.sh                # redis-benchmark through each pair
#   PREBUILT=/tmp/mtls-peers.X bash benches/peers.sh    # reuse a former run's two binaries
#
# SCENARIO=redis: a real redis-server (no persistence) is the target and
# redis-benchmark the client (GET and SET, 50 connections, plain and
# pipelined -P 16), REDIS_REPS times (default 3) alternating direct and
# each system, so both see the same machine; the median of each is
# reported, GET/SET averaged. Rows go to $WORK/redis.tsv and a table is
# printed; the sidecar pair is the shipped binary started by hand with the
# same PKI as the peers (BENCH_SIDECAR_ARGS added to both sides). Each run
# through a system also gives CPU µs per request (user + system, GET and
# SET runs together): of the pair's processes and their descendants, and
# of redis-server plus redis-benchmark: the box's two cores are shared by
# all four, so the requests/s through a pair follow from the two sums.
#
# Worker threads: the sidecar runs one worker thread per core (2 on the
# 2-core bench machine), at its default `--runtime per-core`; HAProxy gets `nbthread $WORKERS`, nginx
# `worker_processes $WORKERS`. stunnel has no worker setting (one thread
# per connection) and socat forks one process per connection. plain-rust
# always runs 2 tokio workers per process.
#
# The sidecar measured is the shipped binary: scripts/build-release.sh's
# ${CARGO_TARGET_DIR:-target}/dist/mtls-sidecar (static, link-ordered); if
# that script does not produce it, the bench-profile build, with a warning.
#
# Needs root for apt-get (skipped when the tools are already installed).
set -euo pipefail
cd "$(dirname "$0")/.."

WORKERS=${WORKERS:-$(nproc)}
SYSTEMS=${SYSTEMS:-"mtls-sidecar stunnel haproxy nginx socat plain-rust"}
WORK=${WORK:-$(mktemp -d /tmp/mtls-peers.XXXXXX)}
OUT=${OUT:-$WORK/rows.jsonl}
CLIENT_PORT=${CLIENT_PORT:-17001}
SERVER_PORT=${SERVER_PORT:-17002}
TARGET_PORT=${TARGET_PORT:-17003}
# A second pair of each peer with its own session resumption on, for the
# `resumed` scenario (RESUMED=0: none).
RESUMED=${RESUMED:-1}
RCLIENT_PORT=${RCLIENT_PORT:-17004}
RSERVER_PORT=${RSERVER_PORT:-17005}
CONTROLLER=controller.bench.svc
REPLICA=replica-0.bench.svc
CL=127.0.0.1:$CLIENT_PORT
SV=127.0.0.1:$SERVER_PORT
TG=127.0.0.1:$TARGET_PORT
RCL=127.0.0.1:$RCLIENT_PORT
RSV=127.0.0.1:$RSERVER_PORT

log() { echo "# $*" >&2; }

# ------------------------------------------------------------------ install
need=()
command -v stunnel4 >/dev/null || need+=(stunnel4)
command -v haproxy >/dev/null || need+=(haproxy)
command -v nginx >/dev/null || need+=(nginx)
[ -e /usr/lib/nginx/modules/ngx_stream_module.so ] || need+=(libnginx-mod-stream)
command -v socat >/dev/null || need+=(socat)
command -v openssl >/dev/null || need+=(openssl)
if [ ${#need[@]} -gt 0 ]; then
    log "installing ${need[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi
# Debian starts the packaged daemons on install where it can; they listen
# on other ports and are left alone.

ulimit -n "$(ulimit -Hn)"

# ------------------------------------------------------------------ certs
# ECDSA P-256 CA and leaves with role SANs, as `mtls-sidecar certs` mints.
mkdir -p "$WORK/pki"
(
    cd "$WORK/pki"
    openssl ecparam -name prime256v1 -genkey -noout -out ca.key 2>/dev/null
    openssl req -x509 -new -key ca.key -sha256 -days 30 -subj "/CN=bench peers CA" \
        -addext "basicConstraints=critical,CA:TRUE" \
        -addext "keyUsage=critical,keyCertSign,cRLSign,digitalSignature" -out ca.crt 2>/dev/null
    leaf() { # name eku
        openssl ecparam -name prime256v1 -genkey -noout -out "$1.ec" 2>/dev/null
        openssl pkcs8 -topk8 -nocrypt -in "$1.ec" -out "$1.key"
        openssl req -new -key "$1.key" -subj "/CN=$2" -out "$1.csr" 2>/dev/null
        printf 'subjectAltName=DNS:%s\nextendedKeyUsage=%s\nkeyUsage=critical,digitalSignature\nbasicConstraints=CA:FALSE\n' \
            "$2" "$3" >"$1.ext"
        openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 30 \
            -sha256 -extfile "$1.ext" -out "$1.crt" 2>/dev/null
        cat "$1.crt" "$1.key" >"$1.pem"
        mkdir -p "$1.dir"
        cp "$1.crt" "$1.dir/tls.crt"
        cp "$1.key" "$1.dir/tls.key"
        cp ca.crt "$1.dir/ca.crt"
    }
    leaf server "$REPLICA" serverAuth
    leaf client "$CONTROLLER" clientAuth
    chmod 600 ./*.key ./*/tls.key
)
P=$WORK/pki

# ------------------------------------------------------------------ runner
PIDS=()
stop_all() {
    local p
    for p in "${PIDS[@]:-}"; do
        [ -n "$p" ] && kill "$p" 2>/dev/null || true
    done
    for p in "${PIDS[@]:-}"; do
        [ -n "$p" ] && wait "$p" 2>/dev/null || true
    done
    PIDS=()
}
trap stop_all EXIT

# Build once and run the executables directly, so a source edit in the
# checkout during the run rebuilds nothing mid-table.
SIDECAR_BUILD=
build() {
    if [ -n "${PREBUILT:-}" ]; then
        # PREBUILT=DIR: a former run's work dir (its mtls-sidecar and
        # loadgen), so interleaved runs measure one build without rebuilding.
        cp "$PREBUILT/mtls-sidecar" "$PREBUILT/loadgen" "$WORK/"
        SIDECAR_BUILD="$(cat "$PREBUILT/sidecar-build" 2>/dev/null || echo "?"), from $PREBUILT"
        export MTLS_SIDECAR_BIN=$WORK/mtls-sidecar
        return
    fi
    local dist=${CARGO_TARGET_DIR:-target}/dist/mtls-sidecar
    log "building the shipped binary (scripts/build-release.sh → $dist)"
    touch "$WORK/build-start"
    if bash scripts/build-release.sh >"$WORK/build-release.log" 2>&1 &&
        [ -x "$dist" ] && [ "$dist" -nt "$WORK/build-start" ]; then
        cp "$dist" "$WORK/mtls-sidecar"
        SIDECAR_BUILD="shipped build ($dist)"
    else
        tail -n 20 "$WORK/build-release.log" >&2
        log "WARNING: scripts/build-release.sh did not produce $dist;" \
            "measuring the bench-profile mtls-sidecar instead"
    fi
    log "building the load generator"
    local exe
    exe=$(cargo bench --bench sidecar --no-run --message-format=json 2>"$WORK/build.log" |
        python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "sidecar" and m.get("executable"):
        print(m["executable"])') || { cat "$WORK/build.log" >&2; exit 1; }
    [ -n "$exe" ] || { cat "$WORK/build.log" >&2; exit 1; }
    cp "$exe" "$WORK/loadgen"
    if [ -z "$SIDECAR_BUILD" ]; then
        local bin
        bin=$(dirname "$(dirname "$exe")")/mtls-sidecar
        cp "$bin" "$WORK/mtls-sidecar"
        SIDECAR_BUILD="bench-profile build ($bin), NOT the shipped binary"
    fi
    log "sidecar binary: $SIDECAR_BUILD"
    echo "$SIDECAR_BUILD" >"$WORK/sidecar-build"
    export MTLS_SIDECAR_BIN=$WORK/mtls-sidecar
}

bench() { # args for the load generator
    "$WORK/loadgen" "$@" --out "$OUT"
}

SCENARIO=${SCENARIO:-loadgen}
REDIS_REPS=${REDIS_REPS:-3}
REDIS_REQUESTS=${REDIS_REQUESTS:-200000}

wait_port() { # port: until something accepts there (10 s)
    python3 - "$1" <<'PY'
import socket, sys, time
end = time.time() + 10
while True:
    try:
        socket.create_connection(("127.0.0.1", int(sys.argv[1])), 1).close()
        break
    except OSError:
        if time.time() > end:
            sys.exit("nothing listens on port %s" % sys.argv[1])
        time.sleep(0.05)
PY
}

redis_rps() { # port pipeline [pids]: "GET SET" requests/s, then with pids
    # (comma-separated: the proxies) the CPU µs per request of those
    # processes and their descendants, and of redis-server and the
    # benchmark together, over the whole run (both commands).
    python3 - "$1" "$2" "$REDIS_REQUESTS" "${3:-}" "${REDIS_PID:-}" <<'PY'
import csv, os, resource, subprocess, sys
port, pipeline, requests, pids, server = sys.argv[1:6]
def tree(roots):
    kids = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                ppid = int(open("/proc/%s/stat" % d).read().rsplit(")", 1)[1].split()[1])
            except OSError:
                continue
            kids.setdefault(ppid, []).append(int(d))
    out, todo = [], [int(r) for r in roots if r]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(kids.get(p, []))
    return out
def ticks(roots):
    t = 0
    for p in tree(roots):
        try:
            f = open("/proc/%d/stat" % p).read().rsplit(")", 1)[1].split()
            t += int(f[11]) + int(f[12])
        except OSError:
            pass
    return t
proxies, srv = pids.split(",") if pids else [], [server]
before = (ticks(proxies), ticks(srv), resource.getrusage(resource.RUSAGE_CHILDREN))
out = subprocess.run(["redis-benchmark", "-h", "127.0.0.1", "-p", port, "-t", "get,set",
                      "-n", requests, "-c", "50", "-P", pipeline, "--csv"],
                     capture_output=True, text=True).stdout
after = (ticks(proxies), ticks(srv), resource.getrusage(resource.RUSAGE_CHILDREN))
r = {row[0]: float(row[1]) for row in csv.reader(out.splitlines()) if len(row) > 1 and row[0] in ("GET", "SET")}
if not r.get("GET") or not r.get("SET"):
    sys.exit("redis-benchmark gave no GET/SET figure")
line = "%s %s" % (r["GET"], r["SET"])
if pids:
    hz = os.sysconf("SC_CLK_TCK")
    n = 2 * int(requests)
    bench = (after[2].ru_utime + after[2].ru_stime) - (before[2].ru_utime + before[2].ru_stime)
    line += " %.2f %.2f" % ((after[0] - before[0]) / hz * 1e6 / n,
                            ((after[1] - before[1]) / hz + bench) * 1e6 / n)
print(line)
PY
}

redis_external() { # name npids: REDIS_REPS alternations of direct and the system
    local name=$1 n=$2 rep p d v pids
    pids=$(IFS=,; echo "${PIDS[*]:0:$n}")
    wait_port "$CLIENT_PORT"
    for rep in $(seq "$REDIS_REPS"); do
        for p in 1 16; do
            d=$(redis_rps "$TARGET_PORT" "$p" "") || exit 1
            v=$(redis_rps "$CLIENT_PORT" "$p" "$pids") || exit 1
            echo "direct-for-$name $p $d" >>"$WORK/redis.tsv"
            echo "$name $p $v" >>"$WORK/redis.tsv"
        done
    done
}

# Whether to start a peer's second pair, with its session resumption on.
resumed_pair() { [ "$RESUMED" != 0 ] && [ "$SCENARIO" != redis ]; }

external() { # name npids [extra key=value]: the first npids of PIDS are the measured pair's
    local name=$1 n=$2
    if [ "$SCENARIO" = redis ]; then
        redis_external "$name" "$n"
        return
    fi
    shift 2
    local pids rpids extra=
    pids=$(IFS=,; echo "${PIDS[*]:0:$n}")
    if [ "${#PIDS[@]}" -gt "$n" ]; then
        rpids=$(IFS=,; echo "${PIDS[*]:$n}")
        wait_port "$RCLIENT_PORT"
        extra=",resumed=$RCL,rpids=$rpids"
    fi
    bench --external "name=$name,listen=$CL,target=$TG,pids=$pids${1:+,$1}$extra"
    resumed_count "$WORK/$name-resumed"
}

# How many connections the resuming pair's server side saw resumed, from
# its own log (HAProxy: resumed=0|1 lines; nginx: "r" or "."; stunnel at
# debug = info: "previous session reused" / "new session negotiated").
resumed_count() { # dir
    local d=$1 yes=0 all=0
    if [ -f "$d/reused.log" ]; then
        yes=$(grep -c -E '^(r|resumed=1)$' "$d/reused.log" || true)
        all=$(grep -c -E '^(r|\.|resumed=[01])$' "$d/reused.log" || true)
    elif [ -f "$d/server.log" ]; then
        yes=$(grep -c "previous session reused" "$d/server.log" || true)
        all=$((yes + $(grep -c "new session negotiated" "$d/server.log" || true)))
    else
        return 0
    fi
    log "$(basename "$d"): $yes of $all connections resumed (its server side's log)"
}

run_sidecar() {
    # The sidecar spawns its own pair (ECDSA P-256 from the in-process dev
    # PKI, --allow-san and the client's expected SAN pinned).
    if [ "$SCENARIO" != redis ]; then
        bench --name mtls-sidecar
        return
    fi
    # shellcheck disable=SC2086
    "$WORK/mtls-sidecar" server --listen "$SV" --target "$TG" --tls-dir "$P/server.dir" \
        --allow-san "$CONTROLLER" ${BENCH_SIDECAR_ARGS:-} 2>"$WORK/sidecar-server.log" &
    PIDS+=($!)
    wait_port "$SERVER_PORT"
    # shellcheck disable=SC2086
    "$WORK/mtls-sidecar" client --listen "$CL" --target "$SV" --server-name "$REPLICA" \
        --tls-dir "$P/client.dir" ${BENCH_SIDECAR_ARGS:-} 2>"$WORK/sidecar-client.log" &
    PIDS+=($!)
    external mtls-sidecar 2
    stop_all
}

stunnel_pair() { # dir client-listen server-listen resume(yes|no)
    local d=$1 cl=$2 sv=$3 resume=$4 noresume= level=3
    mkdir -p "$d"
    [ "$resume" = no ] && noresume=$'sessionResume = no\noptions = NO_TICKET'
    # The resuming pair's server logs at info, which names each
    # handshake "previous session reused" or "new session negotiated".
    [ "$resume" = yes ] && level=info
    # checkHost verifies the peer certificate's SAN/CN on both sides;
    # verifyChain + CAfile require a client certificate from the CA.
    cat >"$d/server.conf" <<EOF
foreground = yes
syslog = no
debug = $level
pid =
[server]
accept = $sv
connect = $TG
cert = $P/server.crt
key = $P/server.key
CAfile = $P/ca.crt
verifyChain = yes
requireCert = yes
checkHost = $CONTROLLER
sslVersionMin = TLSv1.3
$noresume
socket = l:TCP_NODELAY=1
socket = r:TCP_NODELAY=1
EOF
    cat >"$d/client.conf" <<EOF
foreground = yes
syslog = no
debug = 3
pid =
[client]
client = yes
accept = $cl
connect = $sv
cert = $P/client.crt
key = $P/client.key
CAfile = $P/ca.crt
verifyChain = yes
checkHost = $REPLICA
sni = $REPLICA
sslVersionMin = TLSv1.3
sessionResume = $resume
socket = l:TCP_NODELAY=1
socket = r:TCP_NODELAY=1
EOF
    stunnel4 "$d/server.conf" 2>"$d/server.log" &
    PIDS+=($!)
    stunnel4 "$d/client.conf" 2>"$d/client.log" &
    PIDS+=($!)
}

run_stunnel() {
    stunnel_pair "$WORK/stunnel" "$CL" "$SV" no
    if resumed_pair; then stunnel_pair "$WORK/stunnel-resumed" "$RCL" "$RSV" yes; fi
    external stunnel 2
    stop_all
}

haproxy_pair() { # dir client-listen server-listen resume(yes|no)
    local d=$1 cl=$2 sv=$3 resume=$4 tickets=" no-tls-tickets" reuse=" no-ssl-reuse" glog= flog=
    mkdir -p "$d"
    if [ "$resume" = yes ]; then
        tickets= reuse=
        # One line per connection on stdout: 1 when the session was resumed.
        glog="    log stdout format raw local0"
        flog=$'    log global\n    log-format "resumed=%[ssl_fc_is_resumed]"'
    fi
    # HAProxy 2.6 has no fetch for the client certificate's SAN: the server
    # side pins the subject CN (the minted leaves carry the same name in
    # both). The client side checks the server SAN with verifyhost.
    cat >"$d/server.cfg" <<EOF
global
    nbthread $WORKERS
    maxconn 9000
    ssl-default-bind-options ssl-min-ver TLSv1.3$tickets
$glog
defaults
    mode tcp
    timeout connect 5s
    timeout client 1h
    timeout server 1h
frontend server_in
    bind $sv ssl crt $P/server.pem ca-file $P/ca.crt verify required
    tcp-request session reject unless { ssl_c_s_dn(CN) -m str $CONTROLLER }
$flog
    default_backend target
backend target
    server t $TG
EOF
    cat >"$d/client.cfg" <<EOF
global
    nbthread $WORKERS
    maxconn 9000
    ssl-default-server-options ssl-min-ver TLSv1.3
defaults
    mode tcp
    timeout connect 5s
    timeout client 1h
    timeout server 1h
frontend client_in
    bind $cl
    default_backend to_server
backend to_server
    server s $sv ssl crt $P/client.pem ca-file $P/ca.crt verify required verifyhost $REPLICA sni str($REPLICA)$reuse
EOF
    haproxy -db -f "$d/server.cfg" >"$d/reused.log" 2>"$d/server.log" &
    PIDS+=($!)
    haproxy -db -f "$d/client.cfg" 2>"$d/client.log" &
    PIDS+=($!)
}

run_haproxy() {
    haproxy_pair "$WORK/haproxy" "$CL" "$SV" no
    if resumed_pair; then haproxy_pair "$WORK/haproxy-resumed" "$RCL" "$RSV" yes; fi
    external haproxy 2
    stop_all
}

nginx_pair() { # dir client-listen server-listen resume(on|off)
    local d=$1 cl=$2 sv=$3 resume=$4 cache=off log="access_log off;"
    mkdir -p "$d"
    if [ "$resume" = on ]; then
        cache="shared:SSL:1m"
        # One line per connection: "r" when the session was resumed.
        log="log_format reused '\$ssl_session_reused'; access_log $d/reused.log reused;"
    fi
    local mod=/usr/lib/nginx/modules/ngx_stream_module.so
    # nginx's stream module checks no client SAN either: a map on the
    # verified subject DN sends any other identity to a closed port (the
    # handshake succeeds, the connection is then closed unforwarded). The
    # client side checks the server SAN (proxy_ssl_verify + proxy_ssl_name).
    cat >"$d/server.conf" <<EOF
load_module $mod;
worker_processes $WORKERS;
worker_rlimit_nofile 20000;
pid $d/server.pid;
error_log $d/server.err warn;
events { worker_connections 20000; }
stream {
    map \$ssl_client_s_dn \$upstream {
        "~(^|,)CN=${CONTROLLER//./\\.}(,|\$)" $TG;
        default 127.0.0.1:9;
    }
    $log
    server {
        listen $sv ssl;
        ssl_certificate $P/server.crt;
        ssl_certificate_key $P/server.key;
        ssl_client_certificate $P/ca.crt;
        ssl_verify_client on;
        ssl_verify_depth 2;
        ssl_protocols TLSv1.3;
        ssl_session_tickets $resume;
        ssl_session_cache $cache;
        proxy_pass \$upstream;
        proxy_timeout 1h;
    }
}
EOF
    cat >"$d/client.conf" <<EOF
load_module $mod;
worker_processes $WORKERS;
worker_rlimit_nofile 20000;
pid $d/client.pid;
error_log $d/client.err warn;
events { worker_connections 20000; }
stream {
    server {
        listen $cl;
        proxy_pass $sv;
        proxy_ssl on;
        proxy_ssl_certificate $P/client.crt;
        proxy_ssl_certificate_key $P/client.key;
        proxy_ssl_trusted_certificate $P/ca.crt;
        proxy_ssl_verify on;
        proxy_ssl_verify_depth 2;
        proxy_ssl_name $REPLICA;
        proxy_ssl_server_name on;
        proxy_ssl_protocols TLSv1.3;
        proxy_ssl_session_reuse $resume;
        proxy_timeout 1h;
    }
}
EOF
    nginx -e stderr -c "$d/server.conf" -g 'daemon off;' 2>"$d/server.log" &
    PIDS+=($!)
    nginx -e stderr -c "$d/client.conf" -g 'daemon off;' 2>"$d/client.log" &
    PIDS+=($!)
}

run_nginx() {
    nginx_pair "$WORK/nginx" "$CL" "$SV" off
    if resumed_pair; then nginx_pair "$WORK/nginx-resumed" "$RCL" "$RSV" on; fi
    external nginx 2
    stop_all
}

run_socat() {
    # Plaintext both hops: the ceiling of a user-space forwarder without
    # crypto. socat forks per connection, so no idle-memory figure.
    socat -b 131072 "TCP4-LISTEN:$SERVER_PORT,bind=127.0.0.1,reuseaddr,fork,nodelay,backlog=4096" \
        "TCP4:$TG,nodelay" &
    PIDS+=($!)
    socat -b 131072 "TCP4-LISTEN:$CLIENT_PORT,bind=127.0.0.1,reuseaddr,fork,nodelay,backlog=4096" \
        "TCP4:$SV,nodelay" &
    PIDS+=($!)
    external socat-plaintext 2 idle=0
    stop_all
}

run_plain_rust() {
    # Plaintext both hops, in Rust: the load generator re-runs itself as a
    # forwarder pair (client side → server side → target). No memory or
    # rotation figures: the processes are the generator's binary.
    if [ "$SCENARIO" != redis ]; then
        bench --system plain-rust
        return
    fi
    # A forwarder runs until its stdin closes: a FIFO this script holds
    # open (fd 7) keeps them up until they are killed or the script ends.
    [ -p "$WORK/hold" ] || mkfifo "$WORK/hold"
    exec 7<>"$WORK/hold"
    # 7>&-: a forwarder holding the FIFO's write end would never see EOF.
    "$WORK/loadgen" --plain-forward "$SV" "$TG" <"$WORK/hold" >/dev/null 7>&- &
    PIDS+=($!)
    "$WORK/loadgen" --plain-forward "$CL" "$SV" <"$WORK/hold" >/dev/null 7>&- &
    PIDS+=($!)
    external plain-rust 2
    stop_all
}

redis_table() {
    python3 - "$WORK/redis.tsv" <<'PY'
import statistics, sys
rows = {}
cpu = {}
for line in open(sys.argv[1]):
    if line.startswith("#"):
        continue
    name, p, get, set_, *more = line.split()
    rows.setdefault((name, p), []).append((float(get) + float(set_)) / 2)
    if more:
        cpu.setdefault((name, p), []).append(tuple(map(float, more)))
med = {k: statistics.median(v) for k, v in rows.items()}
def cpu_cell(k):
    if k not in cpu:
        return "-"
    return "%.1f / %.1f" % tuple(statistics.median(c[i] for c in cpu[k]) for i in (0, 1))
names = [n for n, p in med if p == "1" and not n.startswith("direct-for-")]
peers = [n for n in names if n not in ("mtls-sidecar", "socat-plaintext", "plain-rust")]
print("| system | GET/SET rps, plain (x its direct) | -P 16 (x its direct) | CPU µs/request, proxies / redis-server + benchmark, plain | -P 16 | reps |")
print("|---|---|---|---|---|---|")
for n in names:
    cells = []
    for p in ("1", "16"):
        v, d = med[(n, p)], med[("direct-for-" + n, p)]
        cells.append("%.0f (%.2fx)" % (v, v / d))
    print("| %s | %s | %s | %s | %s | %d |" % (n, cells[0], cells[1], cpu_cell((n, "1")), cpu_cell((n, "16")), len(rows[(n, "1")])))
if "mtls-sidecar" in names and peers:
    for p in ("1", "16"):
        best = max(peers, key=lambda n: med[(n, p)])
        print("sidecar / best peer (%s), -P %s: %.2fx" % (best, p, med[("mtls-sidecar", p)] / med[(best, p)]))
PY
}

log "work dir $WORK; rows in $OUT; $WORKERS worker threads per proxy process; load $(cut -d' ' -f1-3 /proc/loadavg)"
build
if [ "$SCENARIO" = redis ]; then
    command -v redis-server >/dev/null || {
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null
    }
    redis-server --port "$TARGET_PORT" --bind 127.0.0.1 --save "" --appendonly no \
        --daemonize no >"$WORK/redis-server.log" 2>&1 &
    REDIS_PID=$!
    trap 'stop_all; kill $REDIS_PID 2>/dev/null || true' EXIT
    wait_port "$TARGET_PORT"
fi
log "load after the build $(cut -d' ' -f1-3 /proc/loadavg)"
for s in $SYSTEMS; do
    log "=== $s"
    case $s in
        mtls-sidecar) run_sidecar ;;
        stunnel) run_stunnel ;;
        haproxy) run_haproxy ;;
        nginx) run_nginx ;;
        socat) run_socat ;;
        plain-rust) run_plain_rust ;;
        *) log "unknown system $s" ;;
    esac
done
echo
echo "## $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) cores, $WORKERS workers per proxy process${BENCH_QUICK:+, QUICK}; sidecar: $SIDECAR_BUILD${BENCH_SIDECAR_ARGS:+ $BENCH_SIDECAR_ARGS}"
if [ "$SCENARIO" = redis ]; then
    redis_table
else
    "$WORK/loadgen" --table "$OUT"
fi
