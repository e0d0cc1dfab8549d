# Fault checks of tests/rdmacm/run (sourced: uses its on, on_bg, ok, bad,
# wanted, server_listens, PORT, LOGS, URDMA and addresses).
#
# - A listener killed between REQ and REP: the server program is stopped
#   before the client connects, so the NIC's CM holds the REQ for it, then
#   killed. Its NIC rejects the request (REJ reason 28, as Linux's CM does
#   for a destroyed ID), and the client hears REJECTED 28 at once rather
#   than after the CM's minute of retries.
# - A peer restarted at once with the same address: the client's NIC (an
#   agent of its own) is killed with SIGKILL in the middle of a
#   connection and started again on the same address; a new connection
#   from it is accepted by the same persistent server and carries data
#   (the restarted NIC uses a new communication ID and QP number, so the
#   server's CM has no reason to refuse it as stale; a REQ that does
#   reuse a QP still connected is refused with REJ 10, which the CM's
#   unit tests check).

# The PID of the program whose command line is exactly $*.
pid_of() { pgrep -x -f "$*" | head -1; }

# Wait (at most 5 s) until an agent listens on the socket named $1.
agent_up() {
    local i
    for i in $(seq 100); do
        grep -q "@$1" /proc/net/unix && return 0
        sleep 0.05
    done
}

listener_killed() {
    wanted listener_killed || return 0
    PORT=$((PORT + 1))
    local slog=$LOGS/killed.server.log clog=$LOGS/killed.client.log
    # In a subshell: the shell reports no job killed by a signal.
    (on "$SERVER_ADDR" "$slog" rping -s -a "$SERVER_ADDR" -p "$PORT") 2>/dev/null &
    local spid=$! rpid=
    # Listening before it stops: a REQ too early would meet no listener.
    server_listens listener_killed "$spid" "TCP port $PORT" "$slog" || return
    rpid=$(pid_of rping -s -a "$SERVER_ADDR" -p "$PORT")
    if [ -z "$rpid" ]; then
        bad "listener killed between REQ and REP (no server)" "$slog"
        return
    fi
    kill -STOP "$rpid"
    local t0=$SECONDS
    on_bg "$CLIENT_ADDR" "$clog" rping -c -a "$SERVER_ADDR" -p "$PORT" -C 1 -v
    local cpid=$!
    # The REQ reaches the NIC, whose program does not answer.
    sleep 2
    kill -KILL "$rpid"
    wait "$cpid"
    local crc=$? took=$((SECONDS - t0))
    wait "$spid" 2>/dev/null
    if [ $crc -ne 0 ] && grep -q "RDMA_CM_EVENT_REJECTED, error 28" "$clog" && [ $took -lt 15 ]; then
        ok "listener killed between REQ and REP: REJECTED 28 after ${took}s"
    else
        bad "listener killed between REQ and REP (client exit $crc after ${took}s)" "$clog" "$slog"
    fi
}
listener_killed

peer_restarted() {
    wanted peer_restarted || return 0
    PORT=$((PORT + 1))
    local slog=$LOGS/restart.server.log alog=$LOGS/restart.agent.log
    local c1=$LOGS/restart.client1.log c2=$LOGS/restart.client2.log
    local sock=urdma-rdmacm-peer-$$
    on_bg "$SERVER_ADDR" "$slog" rping -s -P -a "$SERVER_ADDR" -p "$PORT"
    local spid=$!
    URDMA_NIC_SOCKET=$sock "$URDMA" agent --persist 2>>"$alog" &
    local apid=$!
    if ! server_listens peer_restarted "$spid" "TCP port $PORT" "$slog"; then
        kill "$apid" 2>/dev/null
        wait "$apid" 2>/dev/null
        return
    fi
    agent_up "$sock"
    URDMA_NIC_SOCKET=$sock on_bg "$CLIENT_ADDR" "$c1" rping -c -a "$SERVER_ADDR" -p "$PORT" -C 1000000 -v
    local c1pid=$!
    sleep 2
    local pinged=no
    grep -q "ping data" "$c1" && pinged=yes
    kill -KILL "$apid"
    wait "$apid" 2>/dev/null
    URDMA_NIC_SOCKET=$sock "$URDMA" agent --persist 2>>"$alog" &
    apid=$!
    agent_up "$sock"
    kill "$c1pid" 2>/dev/null
    wait "$c1pid" 2>/dev/null
    URDMA_NIC_SOCKET=$sock on "$CLIENT_ADDR" "$c2" rping -c -a "$SERVER_ADDR" -p "$PORT" -C 10 -v
    local crc=$?
    kill "$apid" 2>/dev/null
    wait "$apid" 2>/dev/null
    local alive=no
    kill -0 "$spid" 2>/dev/null && alive=yes
    kill "$spid" 2>/dev/null
    wait "$spid" 2>/dev/null
    if [ $pinged = yes ] && [ $crc -eq 0 ] && grep -q "ping data: rdma-ping-9" "$c2" && [ $alive = yes ]; then
        ok "peer restarted with the same address: it connects again to the same server"
    else
        bad "peer restarted with the same address (first client pinged: $pinged; second: exit $crc; server alive: $alive)" "$c2" "$c1" "$slog" "$alog"
    fi
}
peer_restarted
