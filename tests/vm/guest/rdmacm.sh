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

# The commands that run a program on urdma in the namespace (urdma run)
# and on rxe (the system's librdmacm, the kernel's CM).
ON_URDMA=(timeout -k 5 "$T" ip netns exec $NS "$U" run --addr $IP_U --)
ON_RXE=(timeout -k 5 "$T")

# both NAME EXPECT PORT SERVER... -- CLIENT...: SERVER listens on PORT and
# CLIENT (a line of whose output must match the extended regex EXPECT)
# connects to it, first urdma
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
