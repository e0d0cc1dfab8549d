#!/bin/bash
# Guest test: `urdma check` between two network namespaces joined by a veth
# pair, under netem faults applied on both ends, then a peer killed in the
# middle of a transfer. Run by tests/vm/run as root in the guest, with
# $URDMA naming the urdma binary. Prints "ok - NAME" or "FAIL - NAME" per
# test; exits non-zero if any failed.
#
# Only link-local addresses are used (169.254.0.0/16), inside namespaces
# this script creates and deletes.
#
# Environment (for experiments): NETEM_TESTS (any of "defaults", "faults",
# "dead-peer"; all by default), CHECK_SECONDS, CHECK_TIMEOUT, DP_TIMEOUT, DP_RETRY,
# DP_QPS.
set -u
U=${URDMA:?URDMA names the urdma binary}
. "$(dirname "$0")/lib/netns.sh"

# Each fault profile: a check of CHECK_SECONDS on 4 QPs, path MTU 1024 (the
# veth MTU is 1500), bounded by CHECK_BOUND seconds. The QPs' ACK timeout
# is code 16 (268 ms): the guest CPU is emulated, and on a loaded host its
# threads can stall for tens of milliseconds, which with the default 67 ms
# timeout turns into spurious retransmissions and retry exhaustion.
CHECK_SECONDS=${CHECK_SECONDS:-5}
CHECK_TIMEOUT=${CHECK_TIMEOUT:-16}
CHECK_BOUND=60

# Dead peer: ACK timeout code DP_TIMEOUT (14: 4.096 us * 2^14 = 67 ms) and
# DP_RETRY retries, so a request to a dead peer must fail after DP_RETRY + 1
# timeouts at the latest (retry exceeded; the dead program's NIC tells its
# peers first, which flushes them sooner). Smaller timeouts fail
# spontaneously under emulation. Checked:
# (1) the client's own measure, from the failing QP's last completion to
# the failure, is within 1.5 x that time + 100 ms (timer granularity,
# emulated CPU); (2) from SIGKILL to the client's exit, within that time +
# 1 s (it also includes the client's exit).
DP_TIMEOUT=${DP_TIMEOUT:-14}
DP_RETRY=${DP_RETRY:-3}
DP_QPS=${DP_QPS:-2}

T=$(mktemp -d)
failures=0
ok() { echo "ok - $*"; }
fail() { echo "FAIL - $*"; failures=$((failures + 1)); }
indent() { sed "s/^/    $1/" "$2"; }

cleanup() {
  netns_cleanup
  rm -rf "$T"
}
trap cleanup EXIT

# check NAME NETEM-SPEC...: one `urdma check` under that profile.
check() {
  local name=$1
  shift
  if ! netem "$@"; then
    fail "netem $name: cannot set the qdisc ($*)"
    return
  fi
  local t0=$EPOCHREALTIME
  ip netns exec $NS_S timeout "$CHECK_BOUND" "$U" check --server --once --bind $IP_S \
    > "$T/srv" 2>&1 &
  local sp=$!
  ip netns exec $NS_C timeout "$CHECK_BOUND" "$U" check $IP_S --bind $IP_C \
    --seconds "$CHECK_SECONDS" --qps 4 --mtu 1024 --timeout "$CHECK_TIMEOUT" > "$T/cli" 2>&1
  local crc=$?
  wait $sp
  local src=$?
  local ms summary
  ms=$(ms_since "$t0")
  summary=$(grep '^check: ' "$T/cli")
  indent "" "$T/cli"
  if [ $crc = 0 ] && [ $src = 0 ] && [[ $summary =~ ,\ 0\ errors$ ]]; then
    ok "netem $name ($*): $summary; $ms ms"
  else
    indent "server: " "$T/srv"
    fail "netem $name ($*): client exit status $crc, server $src: ${summary:-no summary}"
  fi
}

# A long check; its server is killed with SIGKILL in the middle of it.
# The client must fail with a retry-exceeded completion, promptly.
dead_peer() {
  netem none
  # `ip netns exec` execs the command: $! is the server's own pid.
  ip netns exec $NS_S "$U" check --server --bind $IP_S > "$T/srv" 2>&1 &
  local sp=$!
  ip netns exec $NS_C timeout 120 "$U" check $IP_S --bind $IP_C --seconds 100 \
    --qps "$DP_QPS" --mtu 1024 --timeout "$DP_TIMEOUT" --retry-cnt "$DP_RETRY" > "$T/cli" 2>&1 &
  local cp=$!
  local i=0
  until grep -q ': running$' "$T/cli"; do
    sleep 0.1
    i=$((i + 1))
    if [ $i -gt 300 ] || ! kill -0 $cp 2>/dev/null; then
      indent "" "$T/cli"
      indent "server: " "$T/srv"
      fail "dead peer: the check did not start"
      kill -9 $sp 2>/dev/null
      return
    fi
  done
  sleep 1 # transfers under way on every QP
  if ! kill -0 $cp 2>/dev/null; then
    indent "" "$T/cli"
    fail "dead peer: the client ended before the server was killed"
    kill -9 $sp 2>/dev/null
    return
  fi
  local t0=$EPOCHREALTIME
  kill -9 $sp
  wait $cp
  local crc=$?
  local ms
  ms=$(ms_since "$t0")
  wait $sp 2>/dev/null
  indent "" "$T/cli"
  local step implied what idle
  step=$(awk -v t="$DP_TIMEOUT" 'BEGIN { printf "%.1f", 4.096e-3 * 2^t }')
  implied=$(awk -v s="$step" -v r="$DP_RETRY" 'BEGIN { printf "%.0f", s * (r + 1) }')
  what="timeout $DP_TIMEOUT, retry_cnt $DP_RETRY: $((DP_RETRY + 1)) x $step ms = $implied ms"
  # The first failing QP's own measure: "... N ms after the last completion".
  # Retry exceeded, or a flush once the dead program's NIC told its peers.
  idle=$(grep -oE '(RETRY_EXC_ERR|WR_FLUSH_ERR) \([^)]*\) [0-9.]* ms after the last completion' "$T/cli" |
    head -1 | awk '{ printf "%.0f", $(NF - 5) }')
  if [ $crc = 124 ] || [ $crc = 137 ]; then
    fail "dead peer: the client hung (ended by timeout); $what"
  elif [ $crc = 0 ]; then
    fail "dead peer: the client succeeded although its server was killed"
  elif [ -z "$idle" ]; then
    fail "dead peer: the client failed without a retry-exceeded or flush completion; $what"
  elif [ "$idle" -gt $((implied * 3 / 2 + 100)) ]; then
    fail "dead peer: the error $idle ms after the QP's last completion, beyond $((implied * 3 / 2 + 100)) ms ($what)"
  elif [ "$ms" -gt $((implied + 1000)) ]; then
    fail "dead peer: the client exited $ms ms after the kill, beyond $((implied + 1000)) ms ($what)"
  else
    ok "dead peer: an error completion $idle ms after the QP's last completion, client exit $ms ms after SIGKILL ($what)"
  fi
}

# defaults CMD ARGS...: `urdma CMD` between the namespaces with default
# options (above all the path MTU each end takes by itself: the veth's 1500
# bytes give 1024 on both ports), as a user with two hosts would run it;
# ARGS only bound its length.
defaults() {
  netem none
  ip netns exec $NS_S timeout 300 "$U" "$1" --server --once --bind $IP_S > "$T/srv" 2>&1 &
  local sp=$!
  local i=0
  while ! grep -q listening "$T/srv" && [ $i -lt 100 ]; do sleep 0.2; i=$((i + 1)); done
  ip netns exec $NS_C timeout 300 "$U" "$@" $IP_S --bind $IP_C > "$T/cli" 2>&1
  local crc=$?
  wait $sp
  local src=$?
  indent "" "$T/cli" | tail -12
  if [ $crc = 0 ] && [ $src = 0 ] && ! grep -qE 'Err|[1-9][0-9]* errors' "$T/cli"; then
    ok "urdma $1 with default options across the veth (MTU 1500)"
  else
    indent "server: " "$T/srv" | tail -12
    fail "urdma $1 with default options across the veth: client exit status $crc, server $src"
  fi
}

if ! netns_setup; then
  fail "netem: cannot create the namespaces and the veth pair"
  exit 1
fi
tests=" ${NETEM_TESTS:-defaults faults dead-peer} "
if [[ $tests == *" defaults "* ]]; then
  defaults check
  defaults bench --sizes 2,4096,65536
fi
if [[ $tests == *" faults "* ]]; then
  check none none
  check loss-1% loss 1%
  check loss-5% loss 5%
  check reorder delay 10ms reorder 25% 50%
  check duplicate-5% duplicate 5%
  check corrupt-1% corrupt 1%
fi
if [[ $tests == *" dead-peer "* ]]; then
  dead_peer
fi
[ $failures = 0 ]
