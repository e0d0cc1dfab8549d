#!/bin/bash
# Guest test: unmodified rdma_cm programs on urdma's librdmacm.so.1 (no
# kernel module: `urdma run`) against the same programs on Linux's rdma_cm
# over Soft-RoCE. rxe is in the root namespace at one end of a veth, urdma
# in a namespace of its own at the other; each program runs with urdma as
# server and rxe as client, then the other way round: rping, ucmatose
# (4 connections), udaddy (UD through SIDR) and ib_write_bw -R. Then a
# listener killed between REQ and REP, each side in turn: the server is
# stopped before the client's REQ comes and killed while it holds it; its
# CM rejects the request (REJ 28) and the client hears REJECTED 28. Last,
# urdma's NIC is killed and restarted under a client of rxe's rping.
#
# Prints "ok - rdmacm: NAME" / "FAIL - rdmacm: NAME" per check.
# Environment: URDMA (the urdma binary), CM_TIMEOUT (seconds per program,
# default 120).
set -u
U=${URDMA:?URDMA names the urdma binary}
T=${CM_TIMEOUT:-120}
NS=urdma-rdmacm
IP_R=169.254.75.1
IP_U=169.254.75.2
DEV_R=rcmv-r
DEV_U=rcmv-u
RXE=rxercm
W=$(mktemp -d)
ok() { echo "ok - rdmacm: $*"; }
fail() { echo "FAIL - rdmacm: $*"; }
. "$(dirname "$0")/lib/rxe-veth.sh"

cleanup() {
  pkill -9 -x rping 2>/dev/null
  pkill -9 -x ucmatose 2>/dev/null
  pkill -9 -x udaddy 2>/dev/null
  pkill -9 -x ib_write_bw 2>/dev/null
  rxe_veth_down
  rm -rf "$W"
}
trap cleanup EXIT
rxe_veth_up || exit 1

# The commands that run a program on urdma in the namespace (urdma run)
# and on rxe (the system's librdmacm, the kernel's CM).
ON_URDMA=(timeout -k 5 "$T" ip netns exec $NS "$U" run --addr $IP_U --)
ON_RXE=(timeout -k 5 "$T")

# both NAME EXPECT PORT SERVER... -- CLIENT...: SERVER listens on PORT and
# CLIENT (a line of whose output must match the extended regex EXPECT)
# connects to it, first urdma
# serving and rxe connecting, then the other way round. {ip} in a command
# is the server's address, {port} the port.
# PORT "=N" is N both ways (a program with a fixed port).
both() {
  local name=$1 expect=$2 port=$3 step=1
  shift 3
  case $port in =*) port=${port#=}; step=0 ;; esac
  local server=() client=()
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do server+=("$1"); shift; done
  shift
  client=("$@")
  local dir srv_ip spid crc src s c
  for dir in urdma-serves rxe-serves; do
    port=$((port + step))
    case $dir in urdma-serves) srv_ip=$IP_U ;; *) srv_ip=$IP_R ;; esac
    s=(); for a in "${server[@]}"; do a=${a//\{ip\}/$srv_ip}; s+=("${a//\{port\}/$port}"); done
    c=(); for a in "${client[@]}"; do a=${a//\{ip\}/$srv_ip}; c+=("${a//\{port\}/$port}"); done
    if [ $dir = urdma-serves ]; then
      "${ON_URDMA[@]}" "${s[@]}" >"$W/$name.s" 2>&1 &
      spid=$!
      urdma_device_up || echo "    # $name: the urdma device did not come up"
      # rdma_cm listeners show nowhere: a moment for the program to listen.
      sleep 1
      "${ON_RXE[@]}" "${c[@]}" >"$W/$name.c" 2>&1
      crc=$?
    else
      "${ON_RXE[@]}" "${s[@]}" >"$W/$name.s" 2>&1 &
      spid=$!
      rxe_listening "$port" || echo "    # $name: rxe did not show as listening on $port"
      "${ON_URDMA[@]}" "${c[@]}" >"$W/$name.c" 2>&1
      crc=$?
    fi
    if [ $crc != 0 ]; then
      sleep 2
      kill "$spid" 2>/dev/null
    fi
    wait "$spid"
    src=$?
    if [ $crc = 0 ] && [ $src = 0 ] && grep -Eq -- "$expect" "$W/$name.c"; then
      ok "$name, $dir: $(grep -E -- "$expect" "$W/$name.c" | tail -1 | tr -s ' \t' ' ')"
    else
      fail "$name, $dir: server status $src, client status $crc"
      show "$W/$name.s" "$W/$name.c"
    fi
  done
}

both rping "ping data: rdma-ping-9" 7600 \
  rping -s -a {ip} -p {port} -C 10 -- rping -c -a {ip} -p {port} -C 10 -v
both ucmatose "data transfers complete" 7610 \
  ucmatose -b {ip} -p {port} -c 4 -- ucmatose -s {ip} -p {port} -c 4
both ib_write_bw_cm '^ *65536 +1000 +[0-9.]+ +[0-9.]+' 7620 \
  ib_write_bw -R -p {port} -n 1000 -- ib_write_bw -R -p {port} -n 1000 {ip}
both udaddy "data transfers complete" =7174 \
  udaddy -b {ip} -C 10 -- udaddy -s {ip} -C 10

# killed_listener PORT: rping's server stopped, the client's REQ held, the
# server killed; the client must hear REJECTED 28, well before the CM's
# retries would end (about a minute).
killed_listener() {
  local port=$1 dir srv_ip rpid cpid crc t0 took
  for dir in urdma-serves rxe-serves; do
    port=$((port + 1))
    if [ $dir = urdma-serves ]; then
      srv_ip=$IP_U
      # In a subshell: the shell reports no job killed by a signal.
      ("${ON_URDMA[@]}" rping -s -a $srv_ip -p $port >"$W/killed.s" 2>&1) 2>/dev/null &
      urdma_device_up || echo "    # killed listener: the urdma device did not come up"
      sleep 1
    else
      srv_ip=$IP_R
      ("${ON_RXE[@]}" rping -s -a $srv_ip -p $port >"$W/killed.s" 2>&1) 2>/dev/null &
      rxe_listening "$port" || echo "    # killed listener: rxe did not show as listening on $port"
    fi
    rpid=$(pgrep -x -f "rping -s -a $srv_ip -p $port" | head -1)
    if [ -z "$rpid" ]; then
      fail "listener killed between REQ and REP, $dir: no server"
      continue
    fi
    kill -STOP "$rpid"
    t0=$SECONDS
    if [ $dir = urdma-serves ]; then
      "${ON_RXE[@]}" rping -c -a $srv_ip -p $port -C 1 -v >"$W/killed.c" 2>&1 &
    else
      "${ON_URDMA[@]}" rping -c -a $srv_ip -p $port -C 1 -v >"$W/killed.c" 2>&1 &
    fi
    cpid=$!
    sleep 3
    kill -KILL "$rpid"
    wait "$cpid"
    crc=$?
    took=$((SECONDS - t0))
    wait 2>/dev/null
    if [ $crc != 0 ] && grep -q "RDMA_CM_EVENT_REJECTED, error 28" "$W/killed.c" && [ $took -lt 30 ]; then
      ok "listener killed between REQ and REP, $dir: REJECTED 28 after ${took}s"
    else
      fail "listener killed between REQ and REP, $dir: client status $crc after ${took}s"
      show "$W/killed.s" "$W/killed.c"
    fi
  done
}
killed_listener 7630

# restarted_peer PORT: a persistent rping server on rxe; a urdma client
# connects, its NIC agent is killed (SIGKILL) in the middle of the run
# and started again at once on the same address by the next program. The
# new client must connect to the same server: Linux's CM takes its REQ (a
# new communication ID and QP number, so no stale-connection REJ) and
# data flows.
restarted_peer() {
  local port=$(($1 + 1)) crc alive=no pinged=no
  ("${ON_RXE[@]}" rping -s -P -a $IP_R -p $port >"$W/restart.s" 2>&1) 2>/dev/null &
  rxe_listening "$port" || echo "    # restarted peer: rxe did not show as listening on $port"
  ("${ON_URDMA[@]}" rping -c -a $IP_R -p $port -C 1000000 -v >"$W/restart.c1" 2>&1) 2>/dev/null &
  sleep 3
  grep -q "ping data" "$W/restart.c1" && pinged=yes
  pkill -KILL -f "urdma agent"
  sleep 1
  pkill -KILL -x -f "rping -c -a $IP_R -p $port -C 1000000 -v"
  "${ON_URDMA[@]}" rping -c -a $IP_R -p $port -C 10 -v >"$W/restart.c2" 2>&1
  crc=$?
  pgrep -x -f "rping -s -P -a $IP_R -p $port" >/dev/null && alive=yes
  pkill -KILL -x -f "rping -s -P -a $IP_R -p $port"
  wait 2>/dev/null
  if [ $pinged = yes ] && [ $crc = 0 ] && grep -q "ping data: rdma-ping-9" "$W/restart.c2" && [ $alive = yes ]; then
    ok "urdma's NIC restarted on the same address: it connects again to rxe's server"
  else
    fail "urdma's NIC restarted on the same address: first client pinged: $pinged; second: status $crc; server alive: $alive"
    show "$W/restart.s" "$W/restart.c1" "$W/restart.c2"
  fi
}
restarted_peer 7640
