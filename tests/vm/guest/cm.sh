#!/bin/bash
# Guest test: urdma's communication manager against Linux's (ib_cm and
# rdma_cm over Soft-RoCE). rdma-core's unmodified rdma_server and
# rdma_client run on rxe in the root namespace; `urdma cm-echo` (the same
# exchange: connect, one 16-byte message each way, disconnect) runs on
# urdma in a namespace of its own at the other end of a veth, as server
# and as client. A port nobody listens on is refused both ways (REJ with
# reason 8, which rdma_cm reports as ECONNREFUSED).
#
# Then, against rdma_server, a lost REQ (urdma resends it after the
# response timeout) and a lost RTU (the first SEND establishes Linux's
# side; the REP it resends is answered by the RTU again), dropped by a tc
# filter on rxe's ingress.
#
# Prints "ok - cm: NAME" / "FAIL - cm: NAME" per check.
# Environment: URDMA (the urdma binary), CM_TIMEOUT (seconds per program,
# default 120).
set -u
U=${URDMA:?URDMA names the urdma binary}
T=${CM_TIMEOUT:-120}
NS=urdma-cm
IP_R=169.254.71.1
IP_U=169.254.71.2
DEV_R=cmv-r
DEV_U=cmv-u
RXE=rxecm
W=$(mktemp -d)
ok() { echo "ok - cm: $*"; }
fail() { echo "FAIL - cm: $*"; }
. "$(dirname "$0")/lib/rxe-veth.sh"

cleanup() {
  pkill -9 -x rdma_server 2>/dev/null
  tc qdisc del dev $DEV_R clsact 2>/dev/null
  rxe_veth_down
  rm -rf "$W"
}
trap cleanup EXIT
rxe_veth_up || exit 1

urdma_side() { ip netns exec $NS "$U" "$@"; }

# drop_first_mad ATTR: on rxe's ingress, drop the first CM MAD with
# attribute ATTR (UD SEND_ONLY, opcode 0x64 at byte 28 of the IPv4
# packet; the MAD after BTH and DETH at byte 48, its attribute ID at 64)
# and let the next one through.
drop_first_mad() {
  tc qdisc del dev $DEV_R clsact 2>/dev/null
  tc qdisc add dev $DEV_R clsact &&
    tc filter add dev $DEV_R ingress protocol ip prio 1 u32 \
      match u8 17 0xff at 9 match u16 4791 0xffff at 22 \
      match u8 0x64 0xff at 28 match u16 "$1" 0xffff at 64 \
      action gact drop random determ pass 2
}
dropped() {
  tc -s filter show dev $DEV_R ingress | sed -n 's/.*(dropped \([0-9]*\).*/\1/p' | head -1
}

# echo_with_loss NAME ATTR PORT: rdma_server on rxe and cm-echo on urdma
# with the first MAD of ATTR from urdma lost.
echo_with_loss() {
  local name=$1 attr=$2 port=$3 start crc src took
  drop_first_mad "$attr" || { fail "$name: tc filter on $DEV_R"; return; }
  timeout -k 5 "$T" rdma_server -s $IP_R -p "$port" >"$W/lserver" 2>&1 &
  local spid=$!
  rxe_listening "$port" || echo "    # rdma_server did not show as listening on $port"
  start=$(date +%s)
  timeout -k 5 "$T" ip netns exec $NS "$U" cm-echo --bind $IP_U $IP_R -p "$port" >"$W/lclient" 2>&1
  crc=$?
  took=$(($(date +%s) - start))
  wait $spid
  src=$?
  local d
  d=$(dropped)
  tc qdisc del dev $DEV_R clsact 2>/dev/null
  if [ $crc = 0 ] && [ $src = 0 ] && [ "$d" = 1 ]; then
    ok "$name: one MAD dropped, connected and echoed in ${took}s"
  else
    fail "$name: dropped ${d:-?}, rdma_server status $src, cm-echo status $crc"
    show "$W/lserver" "$W/lclient"
  fi
}

# 1. rxe serves (rdma_server), urdma connects (cm-echo).
timeout -k 5 "$T" rdma_server -s $IP_R -p 7471 >"$W/server" 2>&1 &
spid=$!
rxe_listening 7471 || echo "    # rdma_server did not show as listening on 7471"
timeout -k 5 "$T" ip netns exec $NS "$U" cm-echo --bind $IP_U $IP_R -p 7471 >"$W/client" 2>&1
crc=$?
wait $spid
src=$?
if [ $crc = 0 ] && [ $src = 0 ] && grep -q "received 16 bytes" "$W/client"; then
  ok "rdma_server on rxe, urdma cm-echo connects: $(cat "$W/client")"
else
  fail "rdma_server on rxe (status $src), urdma cm-echo connects (status $crc)"
  show "$W/server" "$W/client"
fi

# 2. A port nobody listens on at the rxe end: rejected at once.
start=$(date +%s)
timeout -k 5 "$T" ip netns exec $NS "$U" cm-echo --bind $IP_U $IP_R -p 7473 >"$W/refused" 2>&1
crc=$?
took=$(($(date +%s) - start))
if [ $crc != 0 ] && grep -q "connection refused" "$W/refused" && [ $took -lt 30 ]; then
  ok "no listener on rxe: refused in ${took}s ($(tail -1 "$W/refused"))"
else
  fail "no listener on rxe: status $crc after ${took}s"
  show "$W/refused"
fi

# 3. urdma serves (cm-echo), rxe connects (rdma_client); before that, a
# port nobody listens on at the urdma end is refused.
timeout -k 5 "$T" ip netns exec $NS "$U" cm-echo --bind $IP_U -p 7472 >"$W/userver" 2>&1 &
upid=$!
# The NIC agent binds UDP 4791 in the namespace once the device is open.
urdma_device_up
refused=
for i in $(seq 1 50); do
  timeout -k 5 60 rdma_client -s $IP_U -p 7479 >"$W/rrefused" 2>&1
  if grep -qi "refused" "$W/rrefused"; then
    refused=yes
    break
  fi
  # The urdma device may not be up yet: nobody answers the REQ.
  sleep 1
done
if [ -n "$refused" ]; then
  ok "no listener on urdma: rdma_client says $(grep -i refused "$W/rrefused" | head -1)"
else
  fail "no listener on urdma: rdma_client was not refused"
  show "$W/rrefused"
fi
crc=1
for i in $(seq 1 10); do
  timeout -k 5 "$T" rdma_client -s $IP_U -p 7472 >"$W/rclient" 2>&1
  crc=$?
  [ $crc = 0 ] && break
  sleep 1
done
wait $upid
src=$?
if [ $crc = 0 ] && [ $src = 0 ] && grep -q "echoed 16 bytes" "$W/userver"; then
  ok "urdma cm-echo serves, rdma_client on rxe connects: $(cat "$W/userver")"
else
  fail "urdma cm-echo serves (status $src), rdma_client on rxe connects (status $crc)"
  show "$W/userver" "$W/rclient"
fi

# 4. Lost MADs.
echo_with_loss "first REQ lost" 0x0010 7474
echo_with_loss "RTU lost" 0x0014 7475
