# rsockets over urdma's librdmacm: rdma-core's unmodified rstream
# (rdmacm-utils), server on 127.0.0.2, client on 127.0.0.1, its own data
# verification (-T v) with blocking, non-blocking and poll-driven calls;
# figures beside rstream's own TCP mode (-T s) on the same path; as root,
# the same across the veth namespaces.
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

if command -v rstream >/dev/null; then
    rs_cases lo 127.0.0.2 127.0.0.1 "" ""
    if [ "$HAVE_NETNS" = 1 ]; then
        rs_cases veth "$NS_A_ADDR" "$NS_B_ADDR" "in_ns $NS_A" "in_ns $NS_B"
    fi
else
    bad "rstream (rdmacm-utils) not installed"
fi
