#!/bin/bash
# Guest test: unmodified rdma_cm programs on urdma's librdmacm.so.1 (no
# kernel module: `urdma run`) against the same programs on Linux's rdma_cm
# over Soft-RoCE. rxe is in the root namespace at one end of a veth, urdma
# in a namespace of its own at the other; each program runs with urdma as
# server and rxe as client, then the other way round: rping, ucmatose
# (4 connections) and ib_write_bw -R.
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
  pkill -9 -x ib_write_bw 2>/dev/null
  rxe_veth_down
  rm -rf "$W"
}
trap cleanup EXIT
rxe_veth_up || exit 1

# urdma_run LOG CMD...: CMD on urdma in the namespace (urdma run).
urdma_run() {
  local log=$1
  shift
  timeout -k 5 "$T" ip netns exec $NS "$U" run --addr $IP_U -- "$@" >"$log" 2>&1
}

# rxe_run LOG CMD...: CMD on rxe (the system's librdmacm, the kernel's CM).
rxe_run() {
  local log=$1
  shift
  timeout -k 5 "$T" "$@" >"$log" 2>&1
}

# urdma_listening: the NIC agent of the namespace has UDP 4791 (the
# device is open), and a moment for the program to listen.
urdma_listening() {
  local i
  for i in $(seq 1 100); do
    ip netns exec $NS cat /proc/net/udp | awk '$2 ~ /:12B7$/ { f = 1 } END { exit !f }' && break
    sleep 0.2
  done
  sleep 1
}

# rxe_listening PORT: rxe's rdma_cm listens on PORT.
rxe_listening() {
  local i
  for i in $(seq 1 100); do
    rdma resource show cm_id 2>/dev/null | grep -q "state LISTEN.*:$1 " && return 0
    sleep 0.2
  done
  return 1
}

# both NAME EXPECT PORT SERVER... -- CLIENT...: SERVER listens on PORT and
# CLIENT (whose output must contain EXPECT) connects to it, first urdma
# serving and rxe connecting, then the other way round. {ip} in a command
# is the server's address, {port} the port.
both() {
  local name=$1 expect=$2 port=$3
  shift 3
  local server=() client=()
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do server+=("$1"); shift; done
  shift
  client=("$@")
  local dir srv_ip spid crc src s c
  for dir in urdma-serves rxe-serves; do
    port=$((port + 1))
    case $dir in urdma-serves) srv_ip=$IP_U ;; *) srv_ip=$IP_R ;; esac
    s=(); for a in "${server[@]}"; do a=${a//\{ip\}/$srv_ip}; s+=("${a//\{port\}/$port}"); done
    c=(); for a in "${client[@]}"; do a=${a//\{ip\}/$srv_ip}; c+=("${a//\{port\}/$port}"); done
    if [ $dir = urdma-serves ]; then
      urdma_run "$W/$name.s" "${s[@]}" &
      spid=$!
      urdma_listening
      rxe_run "$W/$name.c" "${c[@]}"
      crc=$?
    else
      rxe_run "$W/$name.s" "${s[@]}" &
      spid=$!
      rxe_listening "$port" || echo "    # $name: rxe did not show as listening on $port"
      urdma_run "$W/$name.c" "${c[@]}"
      crc=$?
    fi
    if [ $crc != 0 ]; then
      sleep 2
      kill "$spid" 2>/dev/null
    fi
    wait "$spid"
    src=$?
    if [ $crc = 0 ] && [ $src = 0 ] && grep -qF -- "$expect" "$W/$name.c"; then
      ok "$name, $dir: $(grep -F -- "$expect" "$W/$name.c" | tail -1 | tr -s ' \t' ' ')"
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
both ib_write_bw_cm " 65536      1000 " 7620 \
  ib_write_bw -R -p {port} -n 1000 -- ib_write_bw -R -p {port} -n 1000 {ip}
