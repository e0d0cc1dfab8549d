# libfabric's fabtests (1.17, built at test time against Debian's
# libfabric 1.17) on its verbs provider over urdma, with default settings:
# MSG endpoints (`-p verbs`), RDM endpoints through ofi_rxm
# (`-p "verbs;ofi_rxm"`), RMA, atomics, CQ data and multi-receive, data
# checked where the test offers it (-v; fabtests' own exclusions for the
# verbs provider apply: no multi-receive on MSG endpoints, in
# test_configs/verbs/verbs.exclude), each as a server in NS_A started
# without an address (as one starts fabtests by hand) or with one (as
# scripts/runfabtests.sh does) and a client in NS_B given the server's
# address; fi_rdm_tagged_bw with 1 MiB messages runs several times (its
# endpoints' teardown). Figures beside the same tests over libfabric's
# tcp provider on the same veth.
#
# Only across the namespaces (root): libfabric's verbs provider offers
# MSG (and so ofi_rxm) endpoints only on devices whose address is on a
# network interface that is not a loopback one (prov/verbs/src/
# verbs_info.c, vrb_getifaddrs skips IFF_LOOPBACK interfaces), so with
# urdma devices on 127.0.0.x it offers none, as with Linux's rxe on lo.
#
# The build (configure --with-libfabric=/usr, out of tree) is cached in
# target/fabtests-1.17.0 and redone only when the source or libfabric
# changes; a cold build takes about 30 s on two idle CPUs (75 s on busy
# ones).
# Sourced by tests/middleware/run.

# The unmodified upstream source sits beside the project's checkout, in
# ../shared/third-party (URDMA_FABTESTS_SRC names another place).
FT_SRC=${URDMA_FABTESTS_SRC:-}
if [ -z "$FT_SRC" ]; then
    for d in "$ROOT/../shared/third-party/fabtests-1.17.0" /work/shared/third-party/fabtests-1.17.0; do
        [ -d "$d" ] && { FT_SRC=$d; break; }
    done
    FT_SRC=${FT_SRC:-$ROOT/../shared/third-party/fabtests-1.17.0}
fi
FT_CACHE=$ROOT/target/fabtests-1.17.0
FT_BIN=$FT_CACHE/inst/bin
FT_LIMIT=${URDMA_FABTESTS_TIMEOUT:-40}
FT_PORT=$((9300 + RANDOM % 500))
# Where the server and the client run: their namespaces (empty: this
# host's) and addresses, set by fabtests_cases.
FT_SNS= FT_CNS= FT_SADDR= FT_CADDR=

# ft_in NS CMD...: CMD in namespace NS, or here when NS is empty.
ft_in() {
    local ns=$1
    shift
    if [ -n "$ns" ]; then in_ns "$ns" "$@"; else "$@"; fi
}

# ft_build: fabtests in FT_CACHE, unless already built from this source
# against this libfabric.
ft_build() {
    local stamp want
    want="$FT_SRC $(dpkg-query -W -f '${Version}' libfabric-dev 2>/dev/null)"
    stamp=$FT_CACHE/built-from
    if [ -x "$FT_BIN/fi_msg" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
        return 0
    fi
    [ -x "$FT_SRC/configure" ] || {
        echo "no fabtests source at $FT_SRC (URDMA_FABTESTS_SRC)"
        return 1
    }
    rm -rf "$FT_CACHE" && mkdir -p "$FT_CACHE/build" || return 1
    local t0=$SECONDS
    (cd "$FT_CACHE/build" &&
        "$FT_SRC/configure" --with-libfabric=/usr --prefix="$FT_CACHE/inst" &&
        make -j"$(nproc)" && make install) || return 1
    echo "$want" >"$stamp"
    echo "fabtests built in $((SECONDS - t0)) s"
}

# ft_listening PROV PORT: wait (at most 15 s) until the server listens on
# PORT (urdma's rdma_cm port, or a TCP socket for tcp or for the
# out-of-band exchange of tests that have one: PROV "oob").
ft_listening() {
    local i
    for i in $(seq 150); do
        case $1 in
        verbs*)
            ft_in "$FT_SNS" "$URDMA" stat 2>/dev/null | sed '/^last counters/,$d' |
                grep -Eq "listens on.*rdma_cm TCP port $2(,|$)" && return 0
            ;;
        *) [ -n "$(ft_in "$FT_SNS" ss -ltnH "sport = :$2" 2>/dev/null)" ] && return 0 ;;
        esac
        sleep 0.1
    done
    return 1
}

# ft_pair NAME STYLE PROV PROG ARGS...: PROG -p PROV ARGS as a server
# (FT_SNS, FT_SADDR) and a client (FT_CNS, FT_CADDR) given the server's
# address, on urdma for a verbs provider, else plainly
# (tcp). STYLE "bare": the server names no address; "named": both name
# theirs (-s), as runfabtests.sh starts them. Logs: $LOGS/NAME.{server,
# client}.log; returns 0 when both exit 0.
ft_pair() {
    local name=$1 style=$2 prov=$3 prog=$4
    shift 4
    FT_PORT=$((FT_PORT + 1))
    local slog=$LOGS/$name.server.log clog=$LOGS/$name.client.log
    local sargs=(-p "$prov" -B "$FT_PORT" "$@") cargs=(-p "$prov" -P "$FT_PORT" "$@")
    if [ "$style" = named ]; then
        sargs+=(-s "$FT_SADDR")
        cargs+=(-s "$FT_CADDR")
    fi
    # Tests that exchange addresses out of band first (fi_multi_recv)
    # listen on a TCP port before their endpoint: given as -E=PORT.
    local wait_prov=$prov wait_port=$FT_PORT a
    for a in "$@"; do
        [[ $a == -E=* ]] && wait_prov=oob wait_port=${a#-E=}
    done
    local srun=() crun=()
    case $prov in
    verbs*)
        srun=("$URDMA" run --addr "$FT_SADDR" --)
        crun=("$URDMA" run --addr "$FT_CADDR" --)
        ;;
    esac
    ft_in "$FT_SNS" timeout -k 5 "$FT_LIMIT" "${srun[@]}" "$FT_BIN/$prog" "${sargs[@]}" \
        >"$slog" 2>&1 &
    local spid=$!
    if ! ft_listening "$wait_prov" "$wait_port"; then
        echo "the server does not listen on $wait_port after 15 s" >>"$slog"
        kill "$spid" 2>/dev/null
        wait "$spid" 2>/dev/null
        return 1
    fi
    ft_in "$FT_CNS" timeout -k 5 "$FT_LIMIT" "${crun[@]}" "$FT_BIN/$prog" "${cargs[@]}" \
        "$FT_SADDR" >"$clog" 2>&1
    local crc=$?
    [ $crc -ne 0 ] && sleep 2 && kill "$spid" 2>/dev/null
    wait "$spid"
    local src=$?
    echo "exit: server $src, client $crc" >>"$clog"
    [ $src -eq 0 ] && [ $crc -eq 0 ]
}

# ft_case NAME EXPECT STYLE PROV PROG ARGS...: ft_pair, passed when both
# exit 0 and their output has a line matching EXPECT (an extended regex:
# the test's own success line, or its result row).
ft_case() {
    local name=$1 expect=$2
    shift 2
    local what="fabtests $name ($2 $3"
    local t0=$SECONDS
    if ! ft_pair "$name" "$@"; then
        bad "$what)" "$LOGS/$name.server.log" "$LOGS/$name.client.log"
    elif ! cat "$LOGS/$name.server.log" "$LOGS/$name.client.log" | grep -Eq -- "$expect"; then
        bad "$what): no \"$expect\"" "$LOGS/$name.server.log" "$LOGS/$name.client.log"
    else
        ok "$what, $((SECONDS - t0)) s)"
    fi
}

# ft_row NAME SIZE COLUMN: a column of the client's result row for SIZE
# (fabtests' table: bytes iters total time MB/sec usec/xfer Mxfers/sec).
ft_row() {
    awk -v s="$2" -v c="$3" '$1 == s && NF >= 7 { print $c; exit }' "$LOGS/$1.client.log"
}

# ft_figures PROV TAG: a 64-byte ping-pong (fi_msg_pingpong; usec/xfer
# is half a round trip) and a 1 MiB RMA write stream (fi_rma_bw) on PROV.
ft_figures() {
    local prov=$1 tag=$2 v
    if ft_pair "fig_pp_$tag" bare "$prov" fi_msg_pingpong -S 64 -I 500; then
        v=$(ft_row "fig_pp_$tag" 64 6)
        figure "fabtests ($prov)" "fi_msg_pingpong 64 B, half RTT" "${v:-?}" us
    else
        figure "fabtests ($prov)" "fi_msg_pingpong 64 B" "failed" "(fig_pp_$tag logs)"
    fi
    if ft_pair "fig_bw_$tag" bare "$prov" fi_rma_bw -e msg -o write -S 1048576 -I 50; then
        v=$(ft_row "fig_bw_$tag" 1m 5)
        figure "fabtests ($prov)" "fi_rma_bw write 1 MiB" "${v:-?}" MB/s
    else
        figure "fabtests ($prov)" "fi_rma_bw write 1 MiB" "failed" "(fig_bw_$tag logs)"
    fi
}

# Across the veth: the server in NS_A, the client in NS_B.
fabtests_cases() {
    FT_SNS=$NS_A FT_CNS=$NS_B FT_SADDR=$NS_A_ADDR FT_CADDR=$NS_B_ADDR
    local msg=verbs rdm="verbs;ofi_rxm" row='^[0-9]+[km]? +[0-9]+k? +'
    local checked="Data check OK" atomic='^FI_[A-Za-z0-9_]+_lat +[0-9]+ +5 '
    local oob=-E=$((FT_PORT + 200))
    # MSG endpoints.
    ft_case msg "$checked" bare $msg fi_msg
    ft_case msg_named "$checked" named $msg fi_msg
    ft_case msg_pingpong "$row" bare $msg fi_msg_pingpong -I 10 -v
    ft_case msg_bw "$row" bare $msg fi_msg_bw -I 10 -v
    ft_case msg_epoll "$checked" bare $msg fi_msg_epoll
    ft_case cm_data "exceeding maximum" bare $msg fi_cm_data
    ft_case cq_data_msg "remote_cq_data: success" bare $msg fi_cq_data -e msg
    local op
    for op in write read writedata; do
        ft_case "rma_bw_msg_$op" "$row" bare $msg fi_rma_bw -e msg -o $op -I 10
    done
    # RDM endpoints through ofi_rxm.
    ft_case rdm "$checked" bare "$rdm" fi_rdm
    ft_case rdm_named "$checked" named "$rdm" fi_rdm
    ft_case rdm_tagged_pingpong "$row" bare "$rdm" fi_rdm_tagged_pingpong -I 10 -v
    ft_case rdm_tagged_bw "$row" named "$rdm" fi_rdm_tagged_bw -I 10 -v
    ft_case rma_bw_rdm_write "$row" bare "$rdm" fi_rma_bw -e rdm -o write -I 10
    ft_case rdm_atomic "$atomic" bare "$rdm" fi_rdm_atomic -I 5 -o all
    ft_case cq_data_rdm "remote_cq_data: success" bare "$rdm" fi_cq_data -e rdm
    ft_case multi_recv_rdm "$row" bare "$rdm" fi_multi_recv -e rdm -I 5 "$oob"
    # 1 MiB messages, several times: each run tears its endpoints down.
    local i
    for i in 1 2 3; do
        ft_case "rdm_tagged_bw_1m_$i" '^1m +' bare "$rdm" fi_rdm_tagged_bw -S 1048576 -I 10 -v
    done
    ft_figures verbs urdma
    ft_figures tcp tcp
}

if ! ft_build >"$LOGS/fabtests-build.log" 2>&1; then
    bad "fabtests: build" "$LOGS/fabtests-build.log"
else
    grep -h "fabtests built" "$LOGS/fabtests-build.log"
    if [ "$HAVE_NETNS" = 1 ]; then
        fabtests_cases
    else
        bad "fabtests: needs root for the namespaces"
    fi
fi
