#!/bin/bash
# Guest test: rsockets between urdma and rdma-core's own. Unmodified
# rstream on urdma's librdmacm.so.1 (`urdma run`, in a namespace of its
# own at one end of a veth) against rstream on the system's librdmacm
# over Linux Soft-RoCE (the root namespace, the other end): each case
# with urdma serving and rxe connecting, then the other way round, with
# rstream's own data verification (-T v) where it moves data: small
# transfers, 1 MiB blocking ones, non-blocking ones, and poll-driven
# round trips. Then iperf3 through rdma-core's preload library
# (librspreload.so), rxe's iperf3 connecting to urdma's: the other way
# round is not run, as iperf3's server under Debian 12's preload library
# stalls on rdma-core's own rsockets (rxe to rxe too): the library's
# select reports a ready rsocket under the rsocket's number when that is
# below the program's descriptor for it, and iperf3 never reads.
#
# Prints "ok - rsockets: NAME" / "FAIL - rsockets: NAME" per check.
# Environment: URDMA (the urdma binary), RS_TIMEOUT (seconds per
# program, default 120).
set -u
U=${URDMA:?URDMA names the urdma binary}
T=${RS_TIMEOUT:-120}
NS=urdma-rsockets
IP_R=169.254.103.1
IP_U=169.254.103.2
DEV_R=rsv-r
DEV_U=rsv-u
RXE=rxers
W=$(mktemp -d)
PRELOAD=/usr/lib/x86_64-linux-gnu/rsocket/librspreload.so
ok() { echo "ok - rsockets: $*"; }
fail() { echo "FAIL - rsockets: $*"; }
. "$(dirname "$0")/lib/rxe-veth.sh"

cleanup() {
  pkill -9 -x rstream 2>/dev/null
  pkill -9 -x iperf3 2>/dev/null
  rxe_veth_down
  rm -rf "$W"
}
trap cleanup EXIT
command -v rstream >/dev/null || { fail "rstream (rdmacm-utils) not installed"; exit 1; }
rxe_veth_up || exit 1

ON_URDMA=(timeout -k 5 "$T" ip netns exec $NS "$U" run --addr $IP_U --)
ON_RXE=(timeout -k 5 "$T")

# both NAME EXPECT PORT SERVER... -- CLIENT...: as rdmacm.sh's: SERVER
# listens on PORT, CLIENT connects, a line of the client's output must
# match EXPECT; urdma serving first, then rxe. {ip} is the server's
# address, {port} the port. DIRS, if set, names the directions run.
both() {
  local name=$1 expect=$2 port=$3
  shift 3
  local server=() client=()
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do server+=("$1"); shift; done
  shift
  client=("$@")
  local dir srv_ip spid crc src s c a
  for dir in ${DIRS:-urdma-serves rxe-serves}; do
    port=$((port + 1))
    case $dir in urdma-serves) srv_ip=$IP_U ;; *) srv_ip=$IP_R ;; esac
    s=(); for a in "${server[@]}"; do a=${a//\{ip\}/$srv_ip}; s+=("${a//\{port\}/$port}"); done
    c=(); for a in "${client[@]}"; do a=${a//\{ip\}/$srv_ip}; c+=("${a//\{port\}/$port}"); done
    if [ $dir = urdma-serves ]; then
      "${ON_URDMA[@]}" "${s[@]}" >"$W/$name.s" 2>&1 &
      spid=$!
      urdma_device_up || echo "    # $name: the urdma device did not come up"
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

RESULT='^(custom|[0-9a-z_]+) +[0-9]'
both rstream-4k-verify "$RESULT" 7700 \
  rstream -b {ip} -p {port} -S 4096 -C 1000 -T v -- rstream -s {ip} -p {port} -S 4096 -C 1000 -T v
both rstream-1m-blocking-verify "$RESULT" 7710 \
  rstream -b {ip} -p {port} -S 1048576 -C 20 -T b -T v -- \
  rstream -s {ip} -p {port} -S 1048576 -C 20 -T b -T v
both rstream-64k-nonblocking-verify "$RESULT" 7720 \
  rstream -b {ip} -p {port} -S 65536 -C 100 -T n -T v -- \
  rstream -s {ip} -p {port} -S 65536 -C 100 -T n -T v
both rstream-64-poll "$RESULT" 7730 \
  rstream -b {ip} -p {port} -S 64 -C 1 -I 200 -T a -- rstream -s {ip} -p {port} -S 64 -C 1 -I 200 -T a

# iperf3 with every socket an rsocket (the preload library), 2 s.
if command -v iperf3 >/dev/null && [ -f $PRELOAD ]; then
  DIRS=urdma-serves both iperf3-librspreload 'receiver$' 7740 \
    env LD_PRELOAD=$PRELOAD iperf3 -s -1 -B {ip} -p {port} -- \
    env LD_PRELOAD=$PRELOAD iperf3 -c {ip} -p {port} -t 2
else
  echo "    # iperf3 or librspreload.so absent: iperf3 not run"
fi
