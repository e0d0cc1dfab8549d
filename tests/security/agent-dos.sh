#!/bin/bash
# The root NIC agent against one unprivileged user: idle connections and
# name squatting. Run as root.
#
# 1. A root agent on a private socket name; an unprivileged user opens
#    20,000 connections and says nothing. The agent stays up, keeps few
#    threads, serves `urdma check` (a driver of root) meanwhile and after,
#    and closes every silent connection within its Hello deadline. An
#    agent capping each user at one session refuses that user's second
#    one with an error the driver prints.
# 2. The unprivileged user's agent holds a name first: a root `urdma
#    agent` on that name exits non-zero naming the holder (uid and pid),
#    and a driver of a third user fails with an error naming it too.
#    With no socket name given, the unprivileged user's agent cannot take
#    the service's socket: a root agent started after it serves the third
#    user.
#
# The `urdma` program is $URDMA or target/release/urdma. Creates the users
# urdma-sec-test and urdma-sec-test2 if absent (and removes those it
# created). Prints one "ok"/"FAIL" line per case, then
# "agent-dos: N passed, M failed"; exits non-zero on any failure.
set -u
cd "$(dirname "$0")/../.."
SRC=${URDMA:-$PWD/target/release/urdma}
CONNS=${AGENT_DOS_CONNS:-20000}
passed=0
failed=0
ok() { echo "ok    $1"; passed=$((passed + 1)); }
bad() {
    echo "FAIL  $1"
    shift
    for f in "$@"; do [ -f "$f" ] && sed 's/^/  | /' "$f" | tail -8; done
    failed=$((failed + 1))
}
finish() {
    echo "agent-dos: $passed passed, $failed failed"
    [ "$failed" -eq 0 ]
    exit
}
if [ "$(id -u)" -ne 0 ]; then
    bad "must run as root"
    finish
fi
if [ ! -x "$SRC" ]; then
    bad "no urdma program at $SRC (build it, or set URDMA)"
    finish
fi
PY=$(command -v /usr/bin/python3 || command -v python3)

# A copy every user can run, in a folder every user can read.
W=$(mktemp -d /tmp/urdma-sec.XXXXXX)
chmod 755 "$W"
U=$W/urdma
cp "$SRC" "$U"
chmod 755 "$U"

made_users=()
pids=()
user() {
    local name=$1
    if ! id -u "$name" >/dev/null 2>&1; then
        useradd -M -r -s /usr/sbin/nologin "$name" && made_users+=("$name")
    fi
}
cleanup() {
    for p in "${pids[@]}"; do
        kill "$p" 2>/dev/null
        wait "$p" 2>/dev/null
    done
    for u in "${made_users[@]}"; do userdel "$u" 2>/dev/null; done
    [ -n "${AGENT_DOS_KEEP:-}" ] || rm -rf "$W"
}
trap cleanup EXIT
user urdma-sec-test
user urdma-sec-test2
A=$(id -u urdma-sec-test)
B=$(id -u urdma-sec-test2)
# Run "$@" as user uid $1.
as() {
    local uid=$1
    shift
    setpriv --reuid="$uid" --regid="$(id -g "$uid")" --clear-groups -- "$@"
}
listening() {
    for _ in $(seq 200); do
        grep -q "@$1\$" /proc/net/unix && return 0
        sleep 0.05
    done
    return 1
}
# Drivers of this script must reach the agent under test, never start one.
export URDMA_AGENT_BIN=/nonexistent/urdma
UDP=4877
# The devices a root agent offers other users (it opens no others for them).
printf '[[device]]\nname = "urdma0"\naddr = "127.0.0.1"\nport = %d\n[[device]]\nname = "urdma1"\naddr = "127.0.0.2"\nport = %d\n' \
    $UDP $UDP >"$W/urdma.toml"
chmod 644 "$W/urdma.toml"
export URDMA_CONFIG=$W/urdma.toml

# 1. Idle connections.
NAME=urdma-sec-dos-$$
URDMA_NIC_SOCKET=$NAME timeout 300 "$U" agent --persist 2>"$W/agent.log" &
AGENT=$!
pids+=("$AGENT")
if ! listening "$NAME"; then
    bad "root agent started" "$W/agent.log"
    finish
fi
AGENT_PID=$(pgrep -P "$AGENT" | head -1)

cat >"$W/idle.py" <<'EOF'
# Open N connections to the abstract socket NAME, say nothing, hold them
# HOLD seconds, then count those the agent closed.
import os, select, socket, sys, time
name, n, hold = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
socks, failed = [], 0
for _ in range(n):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        s.connect("\0" + name)
        socks.append(s)
    except OSError:
        failed += 1
        s.close()
print(f"opened {len(socks)} failed {failed}", flush=True)
time.sleep(hold)
closed = 0
for s in socks:
    try:
        while True:
            if s.recv(4096, socket.MSG_DONTWAIT) == b"":
                closed += 1
                break
    except BlockingIOError:
        pass
    except OSError:
        closed += 1
print(f"closed {closed} of {len(socks)}", flush=True)
EOF
chmod 644 "$W/idle.py"

check() {
    URDMA_NIC_SOCKET=$NAME timeout 90 "$U" check --iterations 20 --qps 2 \
        --udp-port $UDP --ctrl-port "$1" >"$W/check.$1" 2>&1
}
threads() { awk '/^Threads/ {print $2}' "/proc/$AGENT_PID/status" 2>/dev/null; }

# Several processes, each within the descriptor limit.
PROCS=$(( (CONNS + 3999) / 4000 ))
per=$(( (CONNS + PROCS - 1) / PROCS ))
idle=()
for i in $(seq "$PROCS"); do
    (
        ulimit -Sn "$(ulimit -Hn)"
        exec timeout 120 setpriv --reuid="$A" --regid="$(id -g "$A")" --clear-groups -- \
            "$PY" "$W/idle.py" "$NAME" "$per" 12
    ) >"$W/conn.$i" 2>&1 &
    idle+=($!)
    pids+=($!)
done
for _ in $(seq 1200); do
    [ "$(cat "$W"/conn.* | grep -c '^opened')" -eq "$PROCS" ] && break
    sleep 0.05
done
cat "$W"/conn.* >"$W/idle.out"
opened=$(awk '/^opened/ {n += $2} END {print n + 0}' "$W/idle.out")
if [ "$opened" -ge "$CONNS" ]; then
    ok "user $A opened $opened connections"
else
    bad "user $A opened $CONNS connections (opened $opened)" "$W/idle.out"
fi
t=$(threads)
if [ -n "$t" ] && [ "$t" -lt 200 ]; then
    ok "agent keeps $t threads with the connections open"
else
    bad "agent keeps few threads (has ${t:-none})" "$W/agent.log"
fi
if check 18977; then
    ok "urdma check of root passes meanwhile"
else
    bad "urdma check of root passes meanwhile" "$W/check.18977" "$W/agent.log"
fi
wait "${idle[@]}"
cat "$W"/conn.* >"$W/idle.out"
read -r closed held < <(awk '/^closed/ {c += $2; h += $4} END {print c + 0, h + 0}' "$W/idle.out")
if [ "$held" -gt 0 ] && [ "$closed" -eq "$held" ]; then
    ok "agent closed all $held silent connections"
else
    bad "agent closed the silent connections" "$W/idle.out"
fi
if kill -0 "$AGENT_PID" 2>/dev/null && listening "$NAME"; then
    ok "root agent stays up"
else
    bad "root agent stays up" "$W/agent.log"
fi
if check 18978; then
    ok "urdma check of root passes after"
else
    bad "urdma check of root passes after" "$W/check.18978" "$W/agent.log"
fi
kill "$AGENT" 2>/dev/null
wait "$AGENT" 2>/dev/null

# A user beyond its session cap: `urdma check` opens two devices (its
# server's and its client's), one more than the agent allows.
CAP=urdma-sec-cap-$$
URDMA_NIC_SOCKET=$CAP timeout 120 "$U" agent --persist --max-sessions-per-user 1 \
    2>"$W/cap.log" &
pids+=($!)
if listening "$CAP"; then
    URDMA_NIC_SOCKET=$CAP timeout 60 setpriv --reuid="$A" --regid="$(id -g "$A")" \
        --clear-groups -- "$U" check --iterations 1 --qps 1 --udp-port $UDP \
        --ctrl-port 18980 >"$W/cap.out" 2>&1
    rc=$?
    if [ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q "user $A has 1 sessions open" "$W/cap.out"; then
        ok "session beyond the per-user cap refused with a clear error"
    else
        bad "session beyond the per-user cap refused with a clear error (exit $rc)" \
            "$W/cap.out" "$W/cap.log"
    fi
else
    bad "agent with a session cap started" "$W/cap.log"
fi

# 2. Name squatting.
SQ=urdma-sec-squat-$$
URDMA_NIC_SOCKET=$SQ timeout 120 setpriv --reuid="$A" --regid="$(id -g "$A")" \
    --clear-groups -- "$U" agent --persist 2>"$W/squat.log" &
SQUAT=$!
pids+=("$SQUAT")
if ! listening "$SQ"; then
    bad "user $A's agent holds @$SQ" "$W/squat.log"
    finish
fi
HOLDER=$(pgrep -P "$SQUAT" | head -1)
URDMA_NIC_SOCKET=$SQ timeout 20 "$U" agent --persist >"$W/root.out" 2>&1
rc=$?
if [ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q "user $A\b" "$W/root.out" &&
    grep -q "process $HOLDER\b" "$W/root.out"; then
    ok "root agent on a held name fails ($rc), naming user $A and process $HOLDER"
else
    bad "root agent on a held name fails naming the holder (exit $rc)" "$W/root.out"
fi
URDMA_NIC_SOCKET=$SQ timeout 30 setpriv --reuid="$B" --regid="$(id -g "$B")" \
    --clear-groups -- "$U" check --iterations 1 --qps 1 --udp-port $UDP \
    --ctrl-port 18979 >"$W/third.out" 2>&1
rc=$?
if [ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q "user $A\b" "$W/third.out" &&
    grep -q "process $HOLDER\b" "$W/third.out"; then
    ok "driver of user $B fails, naming user $A and process $HOLDER"
else
    bad "driver of user $B fails naming the holder (exit $rc)" "$W/third.out"
fi

# The service's own socket cannot be taken: user A's agent (no socket
# name given) listens elsewhere, and a root agent started after it serves
# user B.
timeout 60 setpriv --reuid="$A" --regid="$(id -g "$A")" --clear-groups -- \
    "$U" agent --persist 2>"$W/own.log" &
pids+=($!)
for _ in $(seq 100); do
    grep -qE "@urdma-nic(-$A)?\$" /proc/net/unix && break
    sleep 0.05
done
timeout 60 "$U" agent --linger 2 >"$W/service.log" 2>&1 &
SERVICE=$!
sleep 0.5
timeout 60 setpriv --reuid="$B" --regid="$(id -g "$B")" --clear-groups -- \
    "$U" check --iterations 5 --qps 1 --udp-port $UDP --ctrl-port 18981 >"$W/service.out" 2>&1
rc=$?
if [ $rc -eq 0 ]; then
    ok "driver of user $B reaches the root agent while user $A runs one"
else
    bad "driver of user $B reaches the root agent while user $A runs one (exit $rc)" \
        "$W/service.out" "$W/service.log"
fi
# Idle, it exits on its own (and removes its socket file).
wait "$SERVICE"
finish
