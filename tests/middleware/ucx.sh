# UCX (Debian's 1.13: ucx_info, ucx_perftest) over urdma with default
# settings: `urdma run`'s device view lets UCX find urdma0 as it finds a
# kernel RDMA device (docs/urdma-run.md, "The device view").
#   - `ucx_info -d` lists urdma0:1 with rc_verbs and ud_verbs, and the
#     rdmacm connection manager;
#   - ucx_perftest tag_lat, tag_bw, ucp_put_bw and ucp_get over rc
#     (UCX_TLS=rc_v) and ud (UCX_TLS=ud_v), beside the same test over
#     UCX's tcp transport, and tag_bw once with UCX's defaults (what they
#     select is printed), between 127.0.0.2 and 127.0.0.1 and, as root,
#     across the veth namespaces; there also tag_lat and tag_bw with
#     UCX's defaults between two hosts as UCX tells hosts apart (each
#     side with its own host name and IPC namespace), where they must
#     choose urdma alone;
#   - as an unprivileged user made for the test, the same tests on rc and
#     ud: the view in a user namespace, with root's NIC agent.
# Sourced by tests/middleware/run (its helpers: ok, bad, figure, on,
# in_ns, bounded, $URDMA, $LOGS, $NS_A, $NS_B).

UCX_ITERS=1000
UCX_PORT=13400
UCX_USER=urdma-mw-ucx
UCX_MADE_USER=0
# Each side of one ucx_perftest may take this long.
UCX_LIMIT=60

# ucx_side WHERE ROLE CMD...: CMD on one side of path WHERE (ROLE server
# or client), under `urdma run` with that side's one device.
ucx_side() {
    local where=$1 role=$2
    shift 2
    local a=127.0.0.1 ns=
    [ "$role" = server ] && a=127.0.0.2
    case $where in
    veth | hosts)
        local host=ucx-a hosts=()
        ns=$NS_A a=$NS_A_ADDR
        [ "$role" = server ] && ns=$NS_B a=$NS_B_ADDR host=ucx-b
        # Two hosts as UCX tells them apart: their own host name and
        # System V IPC, so that no shared-memory transport joins them.
        [ "$where" = hosts ] &&
            hosts=(unshare --ipc --uts sh -c 'hostname "$0" && exec "$@"' "$host")
        timeout -k 5 "$UCX_LIMIT" ip netns exec "$ns" "${hosts[@]}" "$URDMA" run --addr "$a" -- "$@"
        ;;
    user)
        timeout -k 5 "$UCX_LIMIT" su "$UCX_USER" -s /bin/bash -c \
            "cd /tmp && exec $UCX_BIN/urdma run --addr $a -- $(printf '%q ' "$@")"
        ;;
    *) timeout -k 5 "$UCX_LIMIT" "$URDMA" run --addr "$a" -- "$@" ;;
    esac
}

# ucx_listening WHERE PORT: wait until the server of path WHERE listens.
ucx_listening() {
    local i ss=(ss)
    [ "$1" != local ] && [ "$1" != user ] && ss=(ip netns exec "$NS_B" ss)
    for i in $(seq 200); do
        [ -n "$("${ss[@]}" -Hltn "sport = :$2" 2>/dev/null)" ] && return 0
        sleep 0.05
    done
    return 1
}

# ucx_pair WHERE TEST TLS: ucx_perftest TEST between the two sides of
# WHERE with UCX_TLS=TLS (`default`: UCX's own choice); checks that both
# end well with their results, and prints the figure.
ucx_pair() {
    local where=$1 test=$2 tls=$3
    local name="ucx $where $test $tls"
    UCX_PORT=$((UCX_PORT + 1))
    local tag=$where-$test-$tls
    local slog=$LOGS/ucx-$tag-server.log clog=$LOGS/ucx-$tag-client.log
    local env=(env)
    [ "$tls" = default ] && env+=(UCX_LOG_LEVEL=info) || env+=(UCX_TLS="$tls")
    local args=(-p "$UCX_PORT" -t "$test" -n "$UCX_ITERS" -w 100)
    case $test in *bw | ucp_get) args+=(-s 65536) ;; esac
    local saddr=127.0.0.2
    [ "$where" = veth ] || [ "$where" = hosts ] && saddr=$NS_B_ADDR
    ucx_side "$where" server "${env[@]}" ucx_perftest "${args[@]}" >"$slog" 2>&1 &
    local spid=$!
    if ! ucx_listening "$where" "$UCX_PORT"; then
        kill "$spid" 2>/dev/null
        wait "$spid" 2>/dev/null
        bad "$name: the server never listened" "$slog"
        return
    fi
    ucx_side "$where" client "${env[@]}" ucx_perftest "$saddr" "${args[@]}" >"$clog" 2>&1
    local crc=$?
    wait "$spid"
    local src=$?
    local final
    final=$(grep -E '^Final:' "$clog" | tail -n 1)
    if [ "$crc" != 0 ] || [ "$src" != 0 ] || [ -z "$final" ]; then
        bad "$name (client exit $crc, server exit $src)" "$clog" "$slog"
        return
    fi
    # Final: iterations, latency 50%/average/overall (us), bandwidth
    # average/overall (MB/s), message rate average/overall.
    local what value unit
    case $test in
    *lat) what="$test avg latency" value=$(awk '{print $4}' <<<"$final") unit=us ;;
    *) what="$test 64K bandwidth" value=$(awk '{print $7}' <<<"$final") unit=MB/s ;;
    esac
    if [ "$tls" = default ]; then
        local cfg
        cfg=$(grep -oE 'ep_cfg\[[0-9]+\]: .*' "$clog" | head -n 1)
        echo "      UCX's default choice ($where): ${cfg:-none printed}"
        if [[ $cfg != *urdma0* ]] || { [ "$where" = hosts ] && [[ $cfg == *memory* ]]; }; then
            bad "$name: UCX's defaults chose $cfg" "$clog"
            return
        fi
    fi
    ok "$name: $value $unit"
    figure "ucx $where" "$what $tls" "$value" "$unit"
}

# ucx_info_lists WHERE: ucx_info -d on one side lists urdma0:1 with
# rc_verbs and ud_verbs, and the rdmacm connection manager.
ucx_info_lists() {
    local where=$1 log=$LOGS/ucx-info-$1.log
    ucx_side "$where" client ucx_info -d >"$log" 2>&1
    local rc=$? tl missing=
    for tl in rc_verbs ud_verbs; do
        awk -v tl="$tl" '$0 ~ "Transport: "tl"$" {t = 1; next}
            t && /Device:/ {if ($3 == "urdma0:1") f = 1; t = 0}
            END {exit !f}' "$log" || missing+=" $tl"
    done
    grep -q '^# Connection manager: rdmacm$' "$log" || missing+=" rdmacm"
    if [ "$rc" = 0 ] && [ -z "$missing" ]; then
        ok "ucx $where: ucx_info -d lists urdma0:1 (rc_verbs, ud_verbs) and rdmacm"
    else
        bad "ucx $where: ucx_info -d (exit $rc) lacks urdma0:1 for:$missing" "$log"
    fi
}

# ucx_path WHERE: every test of the path.
ucx_path() {
    local where=$1 test tls
    ucx_info_lists "$where"
    for test in tag_lat tag_bw ucp_put_bw ucp_get; do
        for tls in rc_v ud_v tcp; do
            ucx_pair "$where" "$test" "$tls"
        done
    done
    ucx_pair "$where" tag_bw default
}

ucx_user_up() {
    [ "$(id -u)" = 0 ] || return 1
    if ! id "$UCX_USER" >/dev/null 2>&1; then
        useradd -M -r -s /bin/bash "$UCX_USER" || return 1
        UCX_MADE_USER=1
    fi
    # Programs the user can reach (the checkout may be root's alone).
    UCX_BIN=$LOGS/ucx-bin
    mkdir -p "$UCX_BIN" &&
        cp "$URDMA" "$ROOT"/target/release/libibverbs.so "$ROOT"/target/release/librdmacm.so \
            "$UCX_BIN/" &&
        ln -sf libibverbs.so "$UCX_BIN/libibverbs.so.1" &&
        ln -sf librdmacm.so "$UCX_BIN/librdmacm.so.1" &&
        chmod 755 "$UCX_BIN"
}

ucx_user_down() {
    local p
    for p in $(pgrep -u "$UCX_USER" 2>/dev/null); do kill "$p" 2>/dev/null; done
    [ "$UCX_MADE_USER" = 1 ] && userdel "$UCX_USER" 2>/dev/null
    UCX_MADE_USER=0
}

if ! command -v ucx_perftest >/dev/null; then
    bad "ucx: ucx_perftest is not installed (ucx-utils)"
else
    ucx_path local
    if [ "$HAVE_NETNS" = 1 ]; then
        ucx_path veth
        # With UCX's defaults alone, as between two hosts.
        ucx_pair hosts tag_lat default
        ucx_pair hosts tag_bw default
        ucx_pair hosts tag_lat tcp
    fi
    if ucx_user_up; then
        # The user goes even if the suite is stopped.
        trap 'ucx_user_down; cleanup' EXIT
        ucx_info_lists user
        for test in tag_lat ucp_put_bw; do
            ucx_pair user "$test" rc_v
            ucx_pair user "$test" ud_v
        done
        ucx_user_down
        trap cleanup EXIT
    elif [ "$(id -u)" = 0 ]; then
        bad "ucx: cannot make the unprivileged user $UCX_USER"
    fi
fi
