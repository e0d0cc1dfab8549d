# shellcheck shell=bash
# RoCE v2 over IPv6 between the two namespaces, over their veth's
# link-local addresses (GID index 0 of a device on the veth's IPv4
# address, as on rxe): perftest RC and UD and rping through rdma_cm
# (ibverbs.sh runs the `ibverbs` crate's `loopback` example, which asks
# for GID index 1, the IPv4 entry). Sourced by tests/middleware/run.

# ll NS DEV: the link-local address of DEV in NS, once duplicate address
# detection is over (at most 5 s).
ll() {
    local i a
    for i in $(seq 50); do
        a=$(ip -n "$1" -6 -o addr show dev "$2" scope link 2>/dev/null |
            grep -v tentative | awk '{print $4}' | cut -d/ -f1 | head -n1)
        [ -n "$a" ] && { echo "$a"; return 0; }
        sleep 0.1
    done
    return 1
}

# ipv6_pair NAME SERVER_ARGS -- CLIENT_ARGS: a server in NS_A and its
# client in NS_B under `urdma run`, both bounded; logs NAME.s, NAME.c.
ipv6_pair() {
    local name=$1 srv=() cli=()
    shift
    while [ $# -gt 0 ] && [ "$1" != -- ]; do srv+=("$1"); shift; done
    shift
    cli=("$@")
    in_ns "$NS_A" timeout -k 5 60 "$URDMA" run --addr "$NS_A_ADDR" -- "${srv[@]}" \
        >"$LOGS/$name.s" 2>&1 &
    local spid=$!
    sleep 1.5
    in_ns "$NS_B" timeout -k 5 60 "$URDMA" run --addr "$NS_B_ADDR" -- "${cli[@]}" \
        >"$LOGS/$name.c" 2>&1
    local crc=$?
    wait "$spid"
    local src=$?
    [ "$crc" = 0 ] && [ "$src" = 0 ]
}

# bw_of LOG: the average bandwidth (MB/s) of a perftest report.
bw_of() {
    awk '/^ *[0-9]+ +[0-9]+ +[0-9.]+ +[0-9.]+/ {v=$4} END {print v}' "$1"
}

ipv6_cases() {
    if [ "$HAVE_NETNS" != 1 ]; then
        echo "skip  ipv6 (no network namespaces)"
        return
    fi
    local a_if="mwa$$" b_if="mwb$$" lla llb
    lla=$(ll "$NS_A" "$a_if") && llb=$(ll "$NS_B" "$b_if") || {
        bad ipv6_link_local
        return
    }

    # The table: the link-local GID first, then the IPv4 one, RoCE v2.
    in_ns "$NS_A" timeout 30 "$URDMA" run --addr "$NS_A_ADDR" -- ibv_devinfo -v \
        >"$LOGS/ipv6_devinfo" 2>&1
    if grep -q "GID\[  0\]:.*$lla, RoCE v2" "$LOGS/ipv6_devinfo" &&
        grep -q "GID\[  1\]:.*::ffff:$NS_A_ADDR, RoCE v2" "$LOGS/ipv6_devinfo"; then
        ok ipv6_gid_table
    else
        bad ipv6_gid_table "$LOGS/ipv6_devinfo"
    fi

    # perftest picks the IPv6 GID itself with --ipv6 (index 0).
    local pt=(-d urdma0 -F -D 2)
    if ipv6_pair ipv6_write_bw ib_write_bw "${pt[@]}" --ipv6 -- \
        ib_write_bw "${pt[@]}" --ipv6 "$NS_A_ADDR" &&
        grep -q "GID index *: 0" "$LOGS/ipv6_write_bw.c" &&
        grep -qi "GID: 254:128" "$LOGS/ipv6_write_bw.c"; then
        ok ipv6_write_bw_rc
        figure ipv6 "ib_write_bw RC IPv6 64 KiB" "$(bw_of "$LOGS/ipv6_write_bw.c")" MB/s
    else
        bad ipv6_write_bw_rc "$LOGS/ipv6_write_bw.s" "$LOGS/ipv6_write_bw.c"
    fi

    if ipv6_pair ipv6_send_ud ib_send_bw "${pt[@]}" -c UD -x 0 -- \
        ib_send_bw "${pt[@]}" -c UD -x 0 "$NS_A_ADDR" &&
        grep -qi "GID: 254:128" "$LOGS/ipv6_send_ud.c"; then
        ok ipv6_send_bw_ud
        figure ipv6 "ib_send_bw UD IPv6 1 KiB" "$(bw_of "$LOGS/ipv6_send_ud.c")" MB/s
    else
        bad ipv6_send_bw_ud "$LOGS/ipv6_send_ud.s" "$LOGS/ipv6_send_ud.c"
    fi

    # rdma_cm over IPv6: the client reaches the server's link-local
    # address through its own veth; every ping's data is checked by rping
    # (-V) and counted here.
    if ipv6_pair ipv6_rping rping -s -a "$lla%$a_if" -C 20 -V -- \
        rping -c -a "$lla%$b_if" -C 20 -V -v &&
        [ "$(grep -c '^ping data: rdma-ping-' "$LOGS/ipv6_rping.c")" = 20 ]; then
        ok ipv6_rping
    else
        bad ipv6_rping "$LOGS/ipv6_rping.s" "$LOGS/ipv6_rping.c"
    fi
}

ipv6_cases
