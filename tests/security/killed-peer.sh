#!/bin/bash
# A killed program's peers are never kept waiting.
#
# - pingpong: `ibv_rc_pingpong` pairs (timeout 14, retry 7, rnr_retry 7:
#   4.096 us x 2^14 x 8 = 0.54 s) between 127.0.0.1 (client) and
#   127.0.0.2 (server), the server killed with SIGKILL in the middle of
#   its run: the client must fail with an error completion within the
#   QP's timeout x (retry + 1) plus a margin, over internal loopback and
#   with URDMA_LOOPBACK=udp, TRIES times each.
# - pairs: four pairs at once, two servers killed: their clients fail in
#   time, the other two pairs finish.
# - no listener: `rping -c` to an address of the NIC that no program
#   holds open is refused (or fails) within seconds, not after a minute.
#
# Self-contained: the `urdma` binary is $URDMA (default
# target/release/urdma); each case runs its own agent on a private socket
# name and UDP port. Prints one "ok"/"FAIL" line per case and
# "killed-peer: N passed, M failed"; exits non-zero if anything failed.
set -u
cd "$(dirname "$0")/../.."
URDMA=${URDMA:-$PWD/target/release/urdma}
TRIES=${KILLED_PEER_TRIES:-5}
# Allowed from the kill to the client's exit, in milliseconds: the QPs'
# 0.54 s of retries, the time a program takes to notice, and scheduling
# on a loaded machine.
LIMIT_MS=${KILLED_PEER_LIMIT_MS:-2500}
SERVER=127.0.0.2
CLIENT=127.0.0.1
W=$(mktemp -d /tmp/urdma-killed-peer.XXXXXX)
passed=0
failed=0
AGENT=

ok() { echo "ok    $1"; passed=$((passed + 1)); }
bad() {
    echo "FAIL  $1"
    shift
    local f
    for f in "$@"; do [ -f "$f" ] && tail -n 8 "$f" | sed 's/^/  | /'; done
    failed=$((failed + 1))
}

stop_agent() {
    if [ -n "$AGENT" ]; then
        kill "$AGENT" 2>/dev/null
        wait "$AGENT" 2>/dev/null
        AGENT=
    fi
}
cleanup() {
    stop_agent
    # Programs of this script still running (each under `timeout`).
    pkill -KILL -P $$ 2>/dev/null
    rm -rf "$W"
}
trap cleanup EXIT

now_ms() { date +%s%3N; }

# Start a private agent; $1: extra environment (e.g. URDMA_LOOPBACK=udp).
start_agent() {
    export URDMA_NIC_SOCKET=urdma-killed-peer-$$-$RANDOM
    export URDMA_PORT=$((20000 + RANDOM % 20000))
    env $1 timeout 600 "$URDMA" agent --persist 2>>"$W/agent.log" &
    AGENT=$!
    local i
    for i in $(seq 100); do
        grep -q "@$URDMA_NIC_SOCKET" /proc/net/unix && return 0
        sleep 0.05
    done
    return 1
}

wait_listen() {
    local i
    for i in $(seq 200); do
        ss -Htln "sport = :$1" 2>/dev/null | grep -q . && return 0
        sleep 0.05
    done
    return 1
}

# The program a `timeout` runs (its child).
child_of() {
    local i c
    for i in $(seq 40); do
        c=$(pgrep -P "$1" | head -1)
        [ -n "$c" ] && { echo "$c"; return 0; }
        sleep 0.05
    done
    return 1
}

# Start pair $1 (TCP port $2): server then client, logs in $W/$1.{s,c}.
# Sets SPID_$1 (the timeout of the server) and CPID_$1 (of the client).
start_pair() {
    local n=$1 port=$2
    timeout 60 "$URDMA" run --addr $SERVER -- ibv_rc_pingpong -g 0 -p "$port" -n 100000000 \
        >"$W/$n.s" 2>&1 &
    eval "SPID_$n=$!"
    wait_listen "$port" || return 1
    timeout 60 "$URDMA" run --addr $CLIENT -- ibv_rc_pingpong -g 0 -p "$port" -n 100000000 $SERVER \
        >"$W/$n.c" 2>&1 &
    eval "CPID_$n=$!"
}

# Kill the servers of the pairs named in $@ at once and time their
# clients' ends: sets MS_<pair> (milliseconds from the kill to the
# client's exit, or -1) and RC_<pair> (its exit status). A client that
# ended while another was waited for is counted late, never early.
kill_and_time() {
    local n sp cp prog t0
    local progs=()
    for n in "$@"; do
        eval "sp=\$SPID_$n"
        prog=$(child_of "$sp") || prog=
        progs+=("$prog")
    done
    t0=$(now_ms)
    for prog in "${progs[@]}"; do
        [ -n "$prog" ] && kill -KILL "$prog"
    done
    for n in "$@"; do
        eval "cp=\$CPID_$n sp=\$SPID_$n"
        wait "$cp" 2>/dev/null
        eval "RC_$n=$? MS_$n=$(($(now_ms) - t0))"
        wait "$sp"
    done 2>/dev/null # the shell's notes of the killed jobs
}

# One try of a single pair: $1 the path's name, $2 the agent's environment.
pingpong_try() {
    local name=$1 envs=$2 try=$3 port=$((18000 + RANDOM % 1000))
    start_agent "$envs" || { bad "$name try $try: no agent" "$W/agent.log"; return; }
    if ! start_pair p "$port"; then
        bad "$name try $try: server did not listen" "$W/p.s"
        stop_agent
        return
    fi
    # Mid-run: the pair exchanges messages for a while first.
    sleep 1.5
    if ! grep -q . /proc/"$CPID_p"/status 2>/dev/null; then
        bad "$name try $try: the client ended before the kill" "$W/p.c" "$W/p.s"
        stop_agent
        return
    fi
    kill_and_time p
    local ms=$MS_p rc=$RC_p
    if [ "$rc" != 0 ] && [ "$rc" != 124 ] && [ "$ms" -ge 0 ] && [ "$ms" -le "$LIMIT_MS" ] &&
        grep -q "Failed status" "$W/p.c"; then
        ok "$name try $try: client failed ${ms} ms after the kill ($(grep -o 'Failed status .* for' "$W/p.c" | head -1 | sed 's/ for$//'))"
    else
        bad "$name try $try: client exit $rc ${ms} ms after the kill" "$W/p.c"
    fi
    stop_agent
}

# Four pairs, the servers of two killed.
pairs() {
    local name=$1 envs=$2 base=$((19000 + RANDOM % 900)) i
    start_agent "$envs" || { bad "$name: no agent" "$W/agent.log"; return; }
    for i in 1 2 3 4; do
        start_pair "q$i" $((base + i)) || { bad "$name: pair $i did not start" "$W/q$i.s"; stop_agent; return; }
    done
    sleep 1.5
    kill_and_time q1 q3
    local m1=$MS_q1 c1=$RC_q1 m2=$MS_q3 c2=$RC_q3
    # The survivors are stopped by hand: they would run 10^8 iterations.
    local alive=0
    for i in 2 4; do
        eval "cp=\$CPID_q$i"
        kill -0 "$cp" 2>/dev/null && alive=$((alive + 1))
    done
    local ok_pairs=1 cp r
    [ "$alive" = 2 ] || ok_pairs=0
    for r in "$c1 $m1" "$c2 $m2"; do
        set -- $r
        [ "$1" != 0 ] && [ "$1" != 124 ] && [ "$2" -ge 0 ] && [ "$2" -le "$LIMIT_MS" ] || ok_pairs=0
    done
    if [ $ok_pairs = 1 ]; then
        ok "$name: both killed servers' clients failed (${m1} and ${m2} ms after the kills), the other pairs run on"
    else
        bad "$name: clients of killed servers: exit $c1 after ${m1} ms, $c2 after ${m2} ms; survivors alive $alive" "$W/q1.c" "$W/q3.c"
    fi
    for i in 1 2 3 4; do
        eval "kill \$SPID_q$i \$CPID_q$i 2>/dev/null; wait \$SPID_q$i \$CPID_q$i 2>/dev/null"
    done
    stop_agent
}

# rping to an address of the NIC that no program holds open.
no_listener() {
    local name=$1 envs=$2 port=$((17000 + RANDOM % 900))
    start_agent "$envs" || { bad "$name: no agent" "$W/agent.log"; return; }
    local t0 rc ms
    t0=$(now_ms)
    timeout 30 "$URDMA" run --addr $SERVER -- rping -c -a $CLIENT -p "$port" -C 1 >"$W/rping.log" 2>&1
    rc=$?
    ms=$(($(now_ms) - t0))
    if [ $rc != 0 ] && [ $rc != 124 ] && [ $ms -le 5000 ]; then
        ok "$name: rping to a device nobody opened ended in ${ms} ms ($(grep -o 'RDMA_CM_EVENT_[A-Z_]*' "$W/rping.log" | head -1))"
    else
        bad "$name: rping to a device nobody opened: exit $rc after ${ms} ms" "$W/rping.log"
    fi
    stop_agent
}

for t in $(seq "$TRIES"); do
    pingpong_try "pingpong internal" "" "$t"
done
for t in $(seq "$TRIES"); do
    pingpong_try "pingpong udp" "URDMA_LOOPBACK=udp" "$t"
done
pairs "pairs internal" ""
pairs "pairs udp" "URDMA_LOOPBACK=udp"
no_listener "no listener internal" ""
no_listener "no listener udp" "URDMA_LOOPBACK=udp"

echo "killed-peer: $passed passed, $failed failed"
[ "$failed" = 0 ]
