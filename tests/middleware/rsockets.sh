# rsockets over urdma's librdmacm: rdma-core's unmodified rstream
# (rdmacm-utils), server on 127.0.0.2, client on 127.0.0.1, its own data
# verification (-T v) with blocking, non-blocking and poll-driven calls;
# figures beside rstream's own TCP mode (-T s) on the same path; as root,
# the same across the veth namespaces. Then unmodified iperf3 through
# rdma-core's preload library (librspreload.so) on urdma's rsockets,
# checked against the bytes urdma's devices carried, beside iperf3 over
# kernel TCP. And rs_longjmp (rsockets/rs_longjmp.c): calls left by a
# signal handler's siglongjmp leave nothing locked.
# Sourced by tests/middleware/run (helpers: ok, bad, figure, on, in_ns).

# rs_pair NAME SERVER_ADDR CLIENT_ADDR PREFIX RSTREAM_ARGS...: one rstream
# server and client; ok if both exit 0 and the client prints its result.
# PREFIX is "" or "in_ns NS_SERVER NS_CLIENT" for the namespaces.
rs_pair() {
    local name=$1 saddr=$2 caddr=$3 sns=$4 cns=$5
    shift 5
    local slog=$LOGS/$name.server.log clog=$LOGS/$name.client.log
    # shellcheck disable=SC2086
    $sns timeout -k 5 60 "$URDMA" run --addr "$saddr" -- rstream -b "$saddr" "$@" >"$slog" 2>&1 &
    local spid=$!
    sleep 0.7
    # shellcheck disable=SC2086
    $cns timeout -k 5 60 "$URDMA" run --addr "$caddr" -- rstream -s "$saddr" "$@" >"$clog" 2>&1
    local crc=$?
    wait "$spid"
    local src=$?
    if [ $crc -eq 0 ] && [ $src -eq 0 ] && grep -qE '^(custom|[0-9a-z_]+) +[0-9]' "$clog"; then
        ok "$name"
        return 0
    fi
    bad "$name (client $crc, server $src)" "$clog" "$slog"
    return 1
}

# The result line's bandwidth (Gb/s) and time per transfer (us).
rs_gbps() { awk '/^custom/ {print $(NF-1)}' "$1" | tail -1; }
rs_usec() { awk '/^custom/ {print $NF}' "$1" | tail -1; }

# rs_tcp NAME SERVER_ADDR SNS CNS ARGS...: the same over kernel TCP.
rs_tcp() {
    local name=$1 saddr=$2 sns=$3 cns=$4
    shift 4
    # shellcheck disable=SC2086
    $sns timeout -k 5 60 rstream -T s -b "$saddr" "$@" >"$LOGS/$name.server.log" 2>&1 &
    local spid=$!
    sleep 0.5
    # shellcheck disable=SC2086
    $cns timeout -k 5 60 rstream -T s -s "$saddr" "$@" >"$LOGS/$name.client.log" 2>&1
    wait "$spid"
}

rs_cases() {
    local tag=$1 saddr=$2 caddr=$3 sns=$4 cns=$5
    rs_pair "rstream-$tag-4k-verify" "$saddr" "$caddr" "$sns" "$cns" -S 4096 -C 2000 -T v
    rs_pair "rstream-$tag-1m-blocking" "$saddr" "$caddr" "$sns" "$cns" -S 1048576 -C 100 -T b -T v
    rs_pair "rstream-$tag-64k-nonblocking" "$saddr" "$caddr" "$sns" "$cns" -S 65536 -C 500 -T n -T v
    rs_pair "rstream-$tag-64-poll-latency" "$saddr" "$caddr" "$sns" "$cns" -S 64 -C 1 -I 1000 -T a
    if rs_pair "rstream-$tag-bw" "$saddr" "$caddr" "$sns" "$cns" -S 65536 -C 2000 -T b; then
        figure "rstream-$tag" "64k bandwidth over urdma (Gb/s)" "$(rs_gbps "$LOGS/rstream-$tag-bw.client.log")" ""
    fi
    rs_tcp "rstream-$tag-bw-tcp" "$saddr" "$sns" "$cns" -S 65536 -C 2000 -T b
    figure "rstream-$tag" "64k bandwidth over TCP (Gb/s)" "$(rs_gbps "$LOGS/rstream-$tag-bw-tcp.client.log")" ""
    if rs_pair "rstream-$tag-lat" "$saddr" "$caddr" "$sns" "$cns" -S 64 -C 1 -I 2000 -T b; then
        figure "rstream-$tag" "64B round trip over urdma (us)" "$(rs_usec "$LOGS/rstream-$tag-lat.client.log")" ""
    fi
    rs_tcp "rstream-$tag-lat-tcp" "$saddr" "$sns" "$cns" -S 64 -C 1 -I 2000 -T b
    figure "rstream-$tag" "64B round trip over TCP (us)" "$(rs_usec "$LOGS/rstream-$tag-lat-tcp.client.log")" ""
}

# rdma-core's preload library: socket calls made rsocket calls.
RSPRELOAD=${RSPRELOAD:-/usr/lib/x86_64-linux-gnu/rsocket/librspreload.so}

# ip_json FILE KEY: a number from iperf3's JSON end summary (sum_received).
ip_json() {
    python3 -c 'import json,sys; print(int(json.load(open(sys.argv[1]))["end"]["sum_received"][sys.argv[2]]))' "$1" "$2" 2>/dev/null
}

# ip_run NAME SERVER_ADDR SNS CNS PORT PRELOAD: one iperf3 server (-1)
# and a 3-second client (JSON), with PRELOAD ("" for kernel TCP) under
# `urdma run`; 0 if both exit 0.
ip_run() {
    local name=$1 saddr=$2 sns=$3 cns=$4 port=$5 pre=$6 caddr=$7
    local srv=() cli=()
    if [ -n "$pre" ]; then
        srv=("$URDMA" run --addr "$saddr" -- env LD_PRELOAD="$pre")
        cli=("$URDMA" run --addr "$caddr" -- env LD_PRELOAD="$pre")
    fi
    # shellcheck disable=SC2086
    $sns timeout -k 5 40 "${srv[@]}" iperf3 -s -1 -B "$saddr" -p "$port" \
        >"$LOGS/$name.server.log" 2>&1 &
    local spid=$!
    sleep 1
    # shellcheck disable=SC2086
    $cns timeout -k 5 30 "${cli[@]}" iperf3 -c "$saddr" -p "$port" -t 3 -J \
        >"$LOGS/$name.client.json" 2>"$LOGS/$name.client.log"
    local crc=$?
    wait "$spid"
    local src=$?
    [ $crc -eq 0 ] && [ $src -eq 0 ]
}

# ip_cases TAG SERVER_ADDR CLIENT_ADDR SNS CNS [NS]: iperf3 over urdma's
# rsockets, its bytes counted on the server's urdma device (in NS), then
# the same over TCP.
ip_cases() {
    local tag=$1 saddr=$2 caddr=$3 sns=$4 cns=$5 ns=${6:-}
    local name=iperf3-$tag t0 before moved got
    t0=$(date +%s)
    before=$(carried "$saddr" "$t0" $ns)
    if ! ip_run "$name" "$saddr" "$sns" "$cns" 5813 "$RSPRELOAD" "$caddr"; then
        bad "$name: iperf3 through librspreload on urdma" "$LOGS/$name.client.log" \
            "$LOGS/$name.client.json" "$LOGS/$name.server.log"
    else
        got=$(ip_json "$LOGS/$name.client.json" bytes)
        moved=$(moved "$saddr" "$t0" "$ns" "$before" "${got:-0}")
        if [ -z "$got" ] || [ "$got" -le 0 ]; then
            bad "$name: iperf3 reported no bytes received" "$LOGS/$name.client.json"
        elif [ "$moved" -lt "$got" ]; then
            bad "$name: iperf3 moved $got bytes, urdma at $saddr carried only $moved" \
                "$LOGS/$name.server.log"
        else
            ok "$name: iperf3 through librspreload, $got bytes, all over urdma ($moved carried)"
            figure "$name" "3 s stream over urdma (Gb/s)" \
                "$(awk -v b="$(ip_json "$LOGS/$name.client.json" bits_per_second)" 'BEGIN {printf "%.2f", b / 1e9}')" ""
        fi
    fi
    if ip_run "$name-tcp" "$saddr" "$sns" "$cns" 5814 "" "$caddr"; then
        figure "$name" "3 s stream over TCP (Gb/s)" \
            "$(awk -v b="$(ip_json "$LOGS/$name-tcp.client.json" bits_per_second)" 'BEGIN {printf "%.2f", b / 1e9}')" ""
    else
        bad "$name-tcp: iperf3 over kernel TCP" "$LOGS/$name-tcp.client.log" "$LOGS/$name-tcp.server.log"
    fi
}

if command -v rstream >/dev/null; then
    rs_cases lo 127.0.0.2 127.0.0.1 "" ""
    if [ "$HAVE_NETNS" = 1 ]; then
        rs_cases veth "$NS_A_ADDR" "$NS_B_ADDR" "in_ns $NS_A" "in_ns $NS_B"
    fi
else
    bad "rstream (rdmacm-utils) not installed"
fi

if ! command -v iperf3 >/dev/null || [ ! -f "$RSPRELOAD" ]; then
    bad "iperf3 or rdma-core's librspreload.so (librdmacm1) not installed"
else
    ip_cases lo 127.0.0.2 127.0.0.1 "" ""
    if [ "$HAVE_NETNS" = 1 ]; then
        ip_cases veth "$NS_A_ADDR" "$NS_B_ADDR" "in_ns $NS_A" "in_ns $NS_B" "$NS_A"
    fi
fi

# rs_longjmp: built against the installed librdmacm, run on urdma's.
if cc -O2 -Wall -o "$LOGS/rs_longjmp" "$HERE/rsockets/rs_longjmp.c" -lrdmacm \
    >"$LOGS/rs_longjmp.build.log" 2>&1; then
    timeout -k 5 30 "$URDMA" run --addr 127.0.0.2 -- "$LOGS/rs_longjmp" server 127.0.0.2 7815 \
        >"$LOGS/rs_longjmp.server.log" 2>&1 &
    rsl_pid=$!
    sleep 1
    timeout -k 5 20 "$URDMA" run --addr 127.0.0.1 -- "$LOGS/rs_longjmp" client 127.0.0.2 7815 \
        >"$LOGS/rs_longjmp.client.log" 2>&1
    rsl_crc=$?
    wait "$rsl_pid"
    rsl_src=$?
    if [ $rsl_crc -eq 0 ] && [ $rsl_src -eq 0 ] &&
        grep -q '^rs_longjmp: client ok' "$LOGS/rs_longjmp.client.log" &&
        grep -q '^rs_longjmp: server ok' "$LOGS/rs_longjmp.server.log"; then
        ok "rs_longjmp: calls left by siglongjmp, then $(grep -o '[0-9]* jumps' "$LOGS/rs_longjmp.client.log" | tail -1), nothing left locked"
    else
        bad "rs_longjmp (client $rsl_crc, server $rsl_src)" "$LOGS/rs_longjmp.client.log" \
            "$LOGS/rs_longjmp.server.log"
    fi
else
    bad "rs_longjmp: build (cc, librdmacm-dev)" "$LOGS/rs_longjmp.build.log"
fi
