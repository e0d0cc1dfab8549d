#!/bin/bash
# Guest test: urdma and Linux Soft-RoCE (rdma_rxe) as RoCEv2 peers, with
# Debian's unmodified verbs programs on both ends, each end as server and
# as client. rxe binds UDP 4791 in the root namespace only, so rxe runs on
# one end of a veth pair in the root namespace and urdma (`urdma run
# --addr`) in a namespace of its own on the other end; link-local
# addresses only (169.254.0.0/16), in a namespace this script creates and
# deletes. The veth MTU is 1500, so both ports run at MTU 1024.
#
# The project's program tests/verbs/remote (built by tests/vm/run into
# /share/remote, else here with gcc) adds what those programs never
# provoke, each end as requester: RNR NAKs (case rnr), remote access
# errors (access) and one of every operation with a packet dropped by a
# tc filter for a sequence NAK (golden).
#
# Last, rdma-core's pyverbs suite runs on rxe0 alone (case pyverbs), the
# reference for the counts urdma's drop-in library gets (tests/pyverbs/run).
#
# Prints "ok - rxe: NAME" / "FAIL - rxe: NAME" per run and, as information
# (not pass/fail), "# figure:" lines with each pair's bandwidth or latency
# and the pyverbs counts on rxe.
#
# Environment: URDMA (the urdma binary), RXE_TIMEOUT (seconds per program,
# default 180), RXE_CASES (a subset of the case names below, for experiments),
# RXE_REMOTE (the remote program, default /share/remote), RXE_GOLDEN=1
# (capture the UDP port 4791 traffic on the veth while the cases run, by
# default golden and access, and print it as a pcap file in base64 between
# "=== rxe-golden.pcap begin" and "=== rxe-golden.pcap end": see
# crates/urdma-wire/tools/rxe_golden.sh).
set -u
U=${URDMA:?URDMA names the urdma binary}
T=${RXE_TIMEOUT:-180}
NS=urdma-rxe
IP_R=169.254.70.1
IP_U=169.254.70.2
DEV_R=rxv-r
DEV_U=rxv-u
W=$(mktemp -d)
failures=0
ok() { echo "ok - rxe: $*"; }
fail() { echo "FAIL - rxe: $*"; failures=$((failures + 1)); }

cleanup() {
  local p
  [ -n "${TCPDUMP:-}" ] && kill "$TCPDUMP" 2>/dev/null
  for p in $(ip netns pids $NS 2>/dev/null) $(ip netns pids urdma-rxe2 2>/dev/null); do
    kill -9 "$p" 2>/dev/null
  done
  rdma link delete rxe0 2>/dev/null
  rdma link delete rxelo 2>/dev/null
  ip link del $DEV_R 2>/dev/null
  ip netns del $NS 2>/dev/null
  ip netns del urdma-rxe2 2>/dev/null
  rm -rf "$W"
}
trap cleanup EXIT

modprobe veth && modprobe rdma_rxe || { fail "modules veth and rdma_rxe load"; exit 1; }
ip netns add $NS &&
  ip link add $DEV_R type veth peer name $DEV_U netns $NS &&
  ip addr add $IP_R/24 dev $DEV_R && ip link set $DEV_R up &&
  ip -n $NS addr add $IP_U/24 dev $DEV_U && ip -n $NS link set $DEV_U up &&
  ip -n $NS link set lo up || { fail "veth between the root namespace and $NS"; exit 1; }
rdma link add rxe0 type rxe netdev $DEV_R || { fail "rdma link add rxe0"; exit 1; }

# rxe's GID table starts with the IPv6 link-local GID: find the RoCE v2 GID
# of its IPv4 address.
GR=
for f in /sys/class/infiniband/rxe0/ports/1/gids/*; do
  i=${f##*/}
  if [ "$(cat "$f" 2>/dev/null)" = "0000:0000:0000:0000:0000:ffff:a9fe:4601" ] &&
    [ "$(cat /sys/class/infiniband/rxe0/ports/1/gid_attrs/types/$i 2>/dev/null)" = "RoCE v2" ]; then
    GR=$i
    break
  fi
done
[ -n "$GR" ] && ok "rxe0 on $DEV_R, RoCE v2 GID index $GR" || { fail "rxe0 has the RoCE v2 GID of $IP_R"; exit 1; }
busybox ping -c 1 -W 5 $IP_U >/dev/null 2>&1 || fail "ping $IP_U from the root namespace"

# end SIDE KIND PROGRAM ARGS...: sets CMD to the command line of PROGRAM
# on SIDE: rxe in the root namespace, or urdma in $NS. KIND is the GID
# index option (-g for ibv_*, -x for perftest).
end() {
  local side=$1 kind=$2
  shift 2
  if [ "$side" = rxe ]; then
    CMD=("$@" -d rxe0 "$kind" "$GR")
  else
    # urdma's device on the veth has rxe's layout: the link-local IPv6
    # GID at 0, the IPv4 one (the family rxe's $GR names) at 1.
    CMD=(ip netns exec $NS "$U" run --addr $IP_U -- "$@" -d urdma0 "$kind" 1)
  fi
}

# wait_listen NS PORT: until a TCP port listens in NS ("" = root namespace).
wait_listen() {
  local i=0
  local hex
  hex=$(printf '%04X' "$2")
  # A socket in state 0A (LISTEN) on that port, in the namespace's table.
  while ! ${1:+ip netns exec $1} cat /proc/net/tcp /proc/net/tcp6 2>/dev/null |
    awk -v p=":$hex" '$2 ~ p"$" && $4 == "0A" { f = 1 } END { exit !f }'; do
    sleep 0.2
    i=$((i + 1))
    [ $i -gt 100 ] && return 1
  done
  return 0
}

# run_pair NAME DIRECTION KIND PROGRAM ARGS...: the server on one end and
# the client on the other (DIRECTION rxe-urdma: rxe serves, urdma
# connects; urdma-rxe: the reverse). KIND is -g (ibv_*) or -x (perftest).
run_pair() {
  local name=$1 dir=$2 kind=$3
  shift 3
  local srv cli srv_ns peer
  if [ "$dir" = rxe-urdma ]; then
    srv=rxe cli=urdma srv_ns= peer=$IP_R
  else
    srv=urdma cli=rxe srv_ns=$NS peer=$IP_U
  fi
  end $srv "$kind" "$@"
  timeout -k 5 "$T" "${CMD[@]}" >"$W/srv" 2>&1 &
  local spid=$!
  wait_listen "$srv_ns" 18515 || echo "    # $name, $dir: the server did not listen on 18515 within 20 s"
  end $cli "$kind" "$@" "$peer"
  timeout -k 5 "$T" "${CMD[@]}" >"$W/cli" 2>&1
  local crc=$?
  wait $spid
  local src=$?
  local label="$name, $dir (server $(echo "$dir" | cut -d- -f1))"
  # Under loss a ping-pong end that got every message exits while the
  # ACK of the other end's last message may still be lost: the other end
  # then cannot finish, whatever the two do (its retries meet a QP that is
  # gone). Run such a pair once more, either way round.
  if [ -n "${ONCE_MORE_IF_LAST_ACK_LOST:-}" ]; then
    local finished=
    if [ $crc = 0 ] && [ $src != 0 ] && grep -q "iters in" "$W/cli"; then
      finished="the client finished, the server did not (status $src)"
    elif [ $src = 0 ] && [ $crc != 0 ] && grep -q "iters in" "$W/srv"; then
      finished="the server finished, the client did not (status $crc)"
    fi
    if [ -n "$finished" ]; then
      echo "    # $label: $finished: once more"
      ONCE_MORE_IF_LAST_ACK_LOST= run_pair "$name" "$dir" "$kind" "$@"
      return
    fi
  fi
  if [ $crc = 0 ] && [ $src = 0 ]; then
    ok "$label"
    figure "$name" "$dir"
  else
    fail "$label: server status $src, client status $crc"
    sed 's/^/    server: /' "$W/srv" | tail -12
    sed 's/^/    client: /' "$W/cli" | tail -12
  fi
}

# figure NAME DIRECTION: the client's result line, as information.
figure() {
  local line=
  case $1 in
    ibv_*) line=$(grep -E 'bytes in .* seconds' "$W/cli" | tail -1) ;;
    # perftest's result rows: bytes, iterations, then figures (the last
    # row: the largest size of -a).
    ib_*) line=$(awk '$1 ~ /^[0-9]+$/ && $2 ~ /^[0-9]+$/ && $3 ~ /^[0-9.]+$/ && NF >= 5 { l = $0 } END { print l }' "$W/cli") ;;
  esac
  [ -n "$line" ] && echo "    # figure: $1 $2: $(echo "$line" | tr -s ' ')"
}

# netem SPEC...: the same netem qdisc on both ends of the veth ("none":
# no qdisc).
netem() {
  tc qdisc del dev $DEV_R root 2>/dev/null
  tc -n $NS qdisc del dev $DEV_U root 2>/dev/null
  [ "$1" = none ] && return 0
  tc qdisc add dev $DEV_R root netem "$@" limit 100000 &&
    tc -n $NS qdisc add dev $DEV_U root netem "$@" limit 100000
}

# faulty NAME SPEC...: the RC transfers under a netem profile, both ways,
# data checked by the programs themselves (pingpong -c) where they can.
faulty() {
  local name=$1
  shift
  modprobe sch_netem
  if ! netem "$@"; then
    fail "netem $name: cannot set the qdisc ($*)"
    return
  fi
  for dir in rxe-urdma urdma-rxe; do
    ONCE_MORE_IF_LAST_ACK_LOST=1 run_pair "ibv_rc_pingpong -c -s 65536, $name" $dir -g ibv_rc_pingpong -c -s 65536 -n 20
    run_pair "ib_write_bw 64 KiB, $name" $dir -x ib_write_bw -s 65536 -n 50 -m 1024 -F
    run_pair "ib_read_bw 64 KiB, $name" $dir -x ib_read_bw -s 65536 -n 50 -m 1024 -F
  done
  netem none
}

# capture: interop traffic seen twice, by tcpdump on rxe's veth end and by
# urdma's own capture (URDMA_PCAP), both read by tshark: no malformed
# packet in either, and the same packets by opcode in both.
capture() {
  local ts=/project/tests/capture/tshark-roce
  tcpdump -i $DEV_R -w "$W/wire.pcap" -U udp port 4791 >/dev/null 2>&1 &
  local td=$!
  sleep 1
  export URDMA_PCAP=$W/urdma-%p.pcap
  # One datagram per packet (no UDP GSO, whose runs of packets cross the
  # veth as one and so reach tcpdump), from an agent of their own.
  export URDMA_GSO=0 URDMA_NIC_SOCKET=urdma-rxe-no-gso
  run_pair "ibv_rc_pingpong (captured)" urdma-rxe -g ibv_rc_pingpong -n 20
  run_pair "ib_read_bw (captured)" rxe-urdma -x ib_read_bw -s 4096 -n 20 -m 1024 -F
  run_pair "ib_atomic_bw (captured)" urdma-rxe -x ib_atomic_bw -n 20 -F
  run_pair "ibv_ud_pingpong (captured)" rxe-urdma -g ibv_ud_pingpong -s 512 -n 20
  unset URDMA_PCAP URDMA_GSO URDMA_NIC_SOCKET
  sleep 1
  kill -INT $td
  wait $td
  # One pass of tshark per file (it starts slowly here): per packet its
  # sender, BTH opcode (empty if not RoCEv2) and malformed mark.
  local f n bad roce
  for f in "$W/wire.pcap" "$W"/urdma-*.pcap; do
    $ts -r "$f" -T fields -E separator=, -e ip.src -e infiniband.bth.opcode -e _ws.malformed >"$f.txt"
    n=$(wc -l <"$f.txt")
    roce=$(awk -F, '$2 != ""' "$f.txt" | wc -l)
    bad=$(awk -F, '$3 != ""' "$f.txt" | wc -l)
    if [ "$n" -gt 0 ] && [ "$roce" = "$n" ] && [ "$bad" = 0 ]; then
      ok "capture $(basename "$f"): $n packets, all RoCEv2, none malformed"
    else
      fail "capture $(basename "$f"): $n packets, $roce RoCEv2, $bad malformed"
    fi
  done
  # The same packets, by sender and opcode, in the wire's capture and in
  # the captures urdma's processes wrote.
  awk -F, '{ print $1, $2 }' "$W/wire.pcap.txt" | sort | uniq -c >"$W/wire.ops"
  cat "$W"/urdma-*.pcap.txt | awk -F, '{ print $1, $2 }' | sort | uniq -c >"$W/urdma.ops"
  if [ -s "$W/wire.ops" ] && cmp -s "$W/wire.ops" "$W/urdma.ops"; then
    ok "urdma's capture holds the packets on the wire: $(awk '{ n += $1 } END { print n }' "$W/wire.ops") packets, $(wc -l <"$W/wire.ops") (sender, opcode) kinds"
  else
    fail "urdma's capture and the wire's differ (count, sender, opcode)"
    diff "$W/wire.ops" "$W/urdma.ops" | head -20 | sed 's/^/    /'
  fi
}

# figures: one program's figure for each pair of stacks, side by side, as
# information: urdma to urdma (across a second veth, between $NS and
# $NS2), urdma to rxe and back (the veth above), urdma over its own
# loopback (one NIC, 127.0.0.1 to 127.0.0.2 in $NS2; with
# RXE_FIGURES_MORE=1, which also adds 1 MiB WRITEs and WRITE latency) and
# rxe over its own loopback device.
NS2=urdma-rxe2
figures() {
  ip netns add $NS2 &&
    ip link add rxv-a netns $NS type veth peer name rxv-b netns $NS2 &&
    ip -n $NS addr add 169.254.71.1/24 dev rxv-a && ip -n $NS link set rxv-a up &&
    ip -n $NS2 addr add 169.254.71.2/24 dev rxv-b && ip -n $NS2 link set rxv-b up &&
    ip -n $NS2 link set lo up || { fail "figures: a second veth for urdma to urdma"; return; }
  rdma link add rxelo type rxe netdev lo || { fail "figures: rxe on lo"; return; }
  local gl=
  for f in /sys/class/infiniband/rxelo/ports/1/gids/*; do
    [ "$(cat "$f" 2>/dev/null)" = "0000:0000:0000:0000:0000:ffff:7f00:0001" ] && { gl=${f##*/}; break; }
  done
  local prog args row pair out
  local progs=("ib_write_bw -s 65536 -n 500" "ib_read_bw -s 65536 -n 500" "ib_send_lat -s 2 -n 500" "ib_read_lat -s 2 -n 500")
  [ -n "${RXE_FIGURES_MORE:-}" ] && progs+=("ib_write_bw -s 1048576 -n 100" "ib_write_lat -s 2 -n 500")
  for prog in "${progs[@]}"; do
    row=
    for pair in urdma-urdma urdma-rxe rxe-urdma ${RXE_FIGURES_MORE:+urdma-lo} rxe-lo; do
      set -- $prog
      case $pair in
        urdma-urdma)
          timeout 120 ip netns exec $NS2 "$U" run --addr 169.254.71.2 -- "$@" -d urdma0 -x 0 -F >"$W/srv" 2>&1 &
          wait_listen $NS2 18515
          timeout 120 ip netns exec $NS "$U" run --addr 169.254.71.1 -- "$@" -d urdma0 -x 0 -F 169.254.71.2 >"$W/cli" 2>&1 ;;
        urdma-rxe|rxe-urdma)
          local s=${pair%-*} c
          [ "$s" = urdma ] && c=rxe || c=urdma
          local sns= peer=$IP_R
          [ "$s" = urdma ] && { sns=$NS; peer=$IP_U; }
          end $s -x "$@" -F
          timeout 120 "${CMD[@]}" >"$W/srv" 2>&1 &
          wait_listen "$sns" 18515
          end $c -x "$@" -F "$peer"
          timeout 120 "${CMD[@]}" >"$W/cli" 2>&1 ;;
        urdma-lo)
          timeout 120 ip netns exec $NS2 "$U" run --addr 127.0.0.2 -- "$@" -d urdma0 -x 0 -F >"$W/srv" 2>&1 &
          wait_listen $NS2 18515
          timeout 120 ip netns exec $NS2 "$U" run --addr 127.0.0.1 -- "$@" -d urdma0 -x 0 -F 127.0.0.2 >"$W/cli" 2>&1 ;;
        rxe-lo)
          timeout 120 "$@" -d rxelo -x "$gl" -F >"$W/srv" 2>&1 &
          wait_listen "" 18515
          timeout 120 "$@" -d rxelo -x "$gl" -F 127.0.0.1 >"$W/cli" 2>&1 ;;
      esac
      wait
      # Bandwidth: BW average (MB/s); latency: t_typical (us).
      out=$(awk '$1 ~ /^[0-9]+$/ && $2 ~ /^[0-9]+$/ && NF >= 5 { v = (NF == 5) ? $4 : $5 } END { print v }' "$W/cli")
      row="$row $pair ${out:-failed}"
    done
    echo "    # figure: $prog (bw: MB/s average; lat: us typical):$row"
  done
  rdma link delete rxelo
}

# rxe's counters (hw_counters in sysfs), for what verbs do not show.
counter() { cat /sys/class/infiniband/rxe0/ports/1/hw_counters/$1 2>/dev/null || echo 0; }

# The remote program: built on the host by tests/vm/run, else here.
REMOTE=${RXE_REMOTE:-/share/remote}
remote_program() {
  [ -x "$REMOTE" ] && return 0
  REMOTE=$W/remote
  gcc -O1 -Wall -o "$REMOTE" /project/tests/verbs/remote/*.c -libverbs >"$W/gcc" 2>&1 && return 0
  fail "tests/verbs/remote builds"
  sed 's/^/    /' "$W/gcc"
  return 1
}

# drop_marked DEV [NS]: on DEV's ingress, drop the first RC SEND_MIDDLE
# packet (opcode 0x01 at byte 28 of the IPv4 packet) whose payload starts
# with DE AD BE EF (byte 40) and let the next one through (gact determ:
# every 2nd match passes). The golden case sends one such packet. On the
# receiving end, as a loss on the wire: rxe resends at once a packet its
# own egress refuses.
drop_marked() {
  local n=${2:+ip netns exec $2}
  $n tc qdisc del dev "$1" clsact 2>/dev/null
  $n tc qdisc add dev "$1" clsact &&
    $n tc filter add dev "$1" ingress protocol ip prio 1 u32 \
      match u8 17 0xff at 9 match u16 4791 0xffff at 22 \
      match u8 0x01 0xff at 28 match u32 0xdeadbeef 0xffffffff at 40 \
      action gact drop random determ pass 2
}
# dropped DEV [NS]: how many packets the filter dropped.
dropped() {
  ${2:+ip netns exec $2} tc -s filter show dev "$1" ingress |
    sed -n 's/.*(dropped \([0-9]*\).*/\1/p' | head -1
}

# run_remote CASE DIRECTION: the remote program, the server (responder)
# on the first end of DIRECTION; its "#" lines as information, and
# rxe's counters for what the requester cannot see.
run_remote() {
  local c=$1 dir=$2 resp_dev resp_ns
  local rnr_s rnr_r seq_s seq_r
  remote_program || return
  if [ "$dir" = rxe-urdma ]; then resp_dev=$DEV_R resp_ns=; else resp_dev=$DEV_U resp_ns=$NS; fi
  if [ "$c" = golden ]; then
    drop_marked "$resp_dev" $resp_ns || fail "remote golden, $dir: tc filter on $resp_dev"
  fi
  rnr_s=$(counter send_rnr_err) rnr_r=$(counter rcvd_rnr_err)
  seq_s=$(counter out_of_seq_request) seq_r=$(counter rcvd_seq_err)
  run_pair "remote $c" "$dir" -g "$REMOTE" "$c"
  grep -h '^#' "$W/srv" "$W/cli" | sed 's/^/    /'
  rnr_s=$(($(counter send_rnr_err) - rnr_s)) rnr_r=$(($(counter rcvd_rnr_err) - rnr_r))
  seq_s=$(($(counter out_of_seq_request) - seq_s)) seq_r=$(($(counter rcvd_seq_err) - seq_r))
  case $c in rnr|golden)
    # rxe as responder sends the RNR NAKs, as requester receives them.
    if [ "$dir" = rxe-urdma ]; then
      [ $rnr_s -gt 0 ] && ok "remote $c, $dir: rxe sent $rnr_s RNR NAKs" ||
        fail "remote $c, $dir: rxe sent no RNR NAK"
    else
      [ $rnr_r -gt 0 ] && ok "remote $c, $dir: rxe received $rnr_r RNR NAKs" ||
        fail "remote $c, $dir: rxe received no RNR NAK"
    fi ;;
  esac
  if [ "$c" = golden ]; then
    local d
    d=$(dropped "$resp_dev" $resp_ns)
    ${resp_ns:+ip netns exec $resp_ns} tc qdisc del dev "$resp_dev" clsact
    if [ "$dir" = rxe-urdma ]; then
      [ "$d" = 1 ] && [ $seq_s -gt 0 ] &&
        ok "remote $c, $dir: urdma's packet dropped once, rxe saw $seq_s out-of-sequence requests" ||
        fail "remote $c, $dir: dropped ${d:-?} of urdma's packets, rxe saw $seq_s out-of-sequence requests"
    else
      [ "$d" = 1 ] && [ $seq_r -gt 0 ] &&
        ok "remote $c, $dir: rxe's packet dropped once, rxe received $seq_r sequence NAKs" ||
        fail "remote $c, $dir: dropped ${d:-?} of rxe's packets, rxe received $seq_r sequence NAKs"
    fi
  fi
}

# killed: an ibv_rc_pingpong server on urdma is killed mid-run; its client
# on rxe must fail within KILLED_BOUND_MS (the dead program's NIC tells its
# RC peers; an rxe client that only waits for the next message would else
# wait forever).
KILLED_BOUND_MS=${KILLED_BOUND_MS:-5000}
killed() {
  end urdma -g ibv_rc_pingpong -n 100000000
  timeout -k 5 60 "${CMD[@]}" >"$W/srv" 2>&1 &
  local spid=$!
  wait_listen "$NS" 18515 || echo "    # killed: the server did not listen on 18515 within 20 s"
  end rxe -g ibv_rc_pingpong -n 100000000 "$IP_U"
  timeout -k 5 60 "${CMD[@]}" >"$W/cli" 2>&1 &
  local cpid=$!
  sleep 3
  local t0=$EPOCHREALTIME
  pkill -9 -f "ibv_rc_pingpong -n 100000000 -d urdma0"
  wait $cpid
  local crc=$?
  local ms
  ms=$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.0f", (b - a) * 1000 }')
  wait $spid 2>/dev/null
  if [ $crc != 0 ] && [ $crc != 124 ] && [ "$ms" -le "$KILLED_BOUND_MS" ]; then
    ok "killed urdma server: its rxe client failed $ms ms after SIGKILL (status $crc)"
    grep -m1 -iE "failed|status" "$W/cli" | sed 's/^/    # /'
  else
    fail "killed urdma server: its rxe client ended with status $crc $ms ms after SIGKILL (bound $KILLED_BOUND_MS ms)"
    sed 's/^/    client: /' "$W/cli" | tail -8
  fi
}

ALL_CASES="killed rc uc ud srq write_bw read_bw send_bw atomic_bw write_lat read_lat send_lat rnr access golden capture loss reorder figures"
if [ -n "${RXE_GOLDEN:-}" ]; then
  CASES=${RXE_CASES:-"golden access"}
  command -v tcpdump >/dev/null || { fail "tcpdump for RXE_GOLDEN=1 (install tcpdump)"; exit 1; }
  tcpdump -i $DEV_R -Z root -s 0 -U -w "$W/golden.pcap" udp port 4791 2>"$W/tcpdump" &
  TCPDUMP=$!
  sleep 1
else
  CASES=${RXE_CASES:-$ALL_CASES}
fi
for c in $CASES; do
  case $c in
    loss) faulty "1% loss" loss 1%; continue ;;
    reorder) faulty "reordering" delay 5ms reorder 25% 50%; continue ;;
    figures) figures; continue ;;
    capture) capture; continue ;;
    killed) killed; continue ;;
  esac
  for dir in rxe-urdma urdma-rxe; do
    case $c in
      rc) run_pair ibv_rc_pingpong $dir -g ibv_rc_pingpong -n 100 ;;
      uc) run_pair ibv_uc_pingpong $dir -g ibv_uc_pingpong -n 100 ;;
      ud) run_pair ibv_ud_pingpong $dir -g ibv_ud_pingpong -n 100 -s 512 ;;
      srq) run_pair ibv_srq_pingpong $dir -g ibv_srq_pingpong -n 100 ;;
      write_bw) run_pair "ib_write_bw -a" $dir -x ib_write_bw -a -n 5 -m 1024 -F ;;
      read_bw) run_pair "ib_read_bw -a" $dir -x ib_read_bw -a -n 5 -m 1024 -F ;;
      send_bw) run_pair "ib_send_bw -a" $dir -x ib_send_bw -a -n 5 -m 1024 -F ;;
      atomic_bw) run_pair ib_atomic_bw $dir -x ib_atomic_bw -n 200 -F ;;
      write_lat) run_pair ib_write_lat $dir -x ib_write_lat -n 200 -F ;;
      read_lat) run_pair ib_read_lat $dir -x ib_read_lat -n 200 -F ;;
      send_lat) run_pair ib_send_lat $dir -x ib_send_lat -n 200 -F ;;
      rnr|access) run_remote $c $dir ;;
      # The tc filter drops one packet as the veth carries it: one datagram
      # per packet (no UDP GSO), from an agent of their own.
      golden) URDMA_GSO=0 URDMA_NIC_SOCKET=urdma-rxe-no-gso run_remote $c $dir ;;
      *) fail "unknown case $c" ;;
    esac
  done
done

if [ -n "${RXE_GOLDEN:-}" ]; then
  sleep 1
  kill -INT $TCPDUMP
  wait $TCPDUMP
  echo "    # capture: $(tail -2 "$W/tcpdump" | tr '\n' ' ')"
  echo "=== rxe-golden.pcap begin"
  base64 -w 76 "$W/golden.pcap"
  echo "=== rxe-golden.pcap end"
fi

# rdma-core's pyverbs suite on rxe0 (its RoCE v2 GID): the reference for
# the counts of urdma's drop-in library (tests/pyverbs/run). The counts are
# information; the check is that the suite ran.
pyverbs_on_rxe() {
  local out=$W/pyverbs-rxe.out
  rm -rf "$W/pyverbs" && cp -r /usr/share/doc/rdma-core/tests "$W/pyverbs" && gunzip -f "$W"/pyverbs/*.gz
  (cd "$W" && timeout -k 5 600 python3 pyverbs/run_tests.py --dev rxe0 --gid "$GR" -v >"$out" 2>&1)
  local ran oks errs skips
  ran=$(grep -oE '^Ran [0-9]+' "$out" | grep -oE '[0-9]+')
  oks=$(grep -cE '\.\.\. ok$' "$out")
  errs=$(grep -cE '^(ERROR|FAIL): ' "$out")
  skips=$(grep -cE '\.\.\. skipped ' "$out")
  if [ -n "$ran" ]; then
    ok "pyverbs suite on rxe0 ran"
    echo "    # figure: pyverbs on rxe0: $ran run, $oks ok, $skips skipped, $errs errors or failures$(grep -E '^(ERROR|FAIL): ' "$out" | sed -E 's/^(ERROR|FAIL): ([^ ]*).*/ \2/' | tr -d '\n')"
  else
    fail "pyverbs suite on rxe0 ran"
    tail -n 20 "$out" | sed 's/^/    /'
  fi
}
case " ${RXE_CASES:-pyverbs} " in *" pyverbs "*) pyverbs_on_rxe ;; esac

dmesg | grep -E "WARNING|BUG:|Oops|Call Trace" >"$W/dmesg" && { fail "kernel log clean"; cat "$W/dmesg"; } || ok "kernel log clean"
trap - EXIT
cleanup
[ $failures -eq 0 ]
