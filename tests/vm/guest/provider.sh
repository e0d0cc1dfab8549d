#!/bin/bash
# Guest test: the rdma-core provider. Loads urdma.ko ($URDMA_KO), installs
# liburdma-rdmav34.so ($URDMA_PROVIDER) and urdma.driver into writable
# copies of the provider directory and /etc/libibverbs.d bind-mounted over
# the read-only ones, creates urdma0 on lo (127.0.0.1) and urdma1 on a
# dummy netdev (169.254.62.1), and runs the system's unmodified verbs
# programs between the two devices: ibv_devices, ibv_devinfo,
# ibv_rc_pingpong, ib_write_bw, ib_read_lat, ib_send_bw, completion
# channels (ibv_rc_pingpong -e, ib_send_lat -e, pyverbs test_cq_events),
# rdma-core's pyverbs suite
# and the kernel's view of a program's PDs, MRs, CQs and QPs (rdma resource).
# Prints "ok - NAME" / "FAIL - NAME" per check.
set -u
KO=${URDMA_KO:-/share/urdma.ko}
SO=${URDMA_PROVIDER:-/share/liburdma-rdmav34.so}
DRIVER=/project/crates/urdma-provider/urdma.driver
T=${PROVIDER_TIMEOUT:-120}
failures=0
ok() { echo "ok - provider: $*"; }
fail() { echo "FAIL - provider: $*"; failures=$((failures + 1)); }
expect() {
  local name=$1 re=$2
  shift 2
  out=$("$@" 2>&1)
  if echo "$out" | grep -Eq -- "$re"; then ok "$name"; else fail "$name (/$re/ not in output)"; echo "$out" | sed 's/^/    /'; fi
}
PROVIDERS=/usr/lib/x86_64-linux-gnu/libibverbs
cleanup() {
  rdma link delete urdma0 2>/dev/null
  rdma link delete urdma1 2>/dev/null
  ip link del urdmad1 2>/dev/null
  umount /etc/libibverbs.d 2>/dev/null
  umount $PROVIDERS 2>/dev/null
  # The NIC agent holds /dev/urdma (and so the module) while it runs.
  pkill -f "urdma agent" 2>/dev/null
  for _ in $(seq 50); do pgrep -f "urdma agent" >/dev/null || break; sleep 0.1; done
  rmmod urdma 2>/dev/null
}
trap cleanup EXIT

# The provider, installed where the system libibverbs looks for it.
mkdir -p /tmp/prov /tmp/ibvd
cp -a $PROVIDERS/. /tmp/prov/ && cp "$SO" /tmp/prov/liburdma-rdmav34.so &&
  cp -a /etc/libibverbs.d/. /tmp/ibvd/ && cp "$DRIVER" /tmp/ibvd/urdma.driver &&
  mount --bind /tmp/prov $PROVIDERS && mount --bind /tmp/ibvd /etc/libibverbs.d &&
  ok "provider installed" || fail "provider installed"

modprobe ib_core && modprobe ib_uverbs || fail "RDMA core modules load"
insmod "$KO" || fail "urdma.ko loads"
rdma link add urdma0 type urdma netdev lo || fail "rdma link add urdma0"
ip link add urdmad1 type dummy && ip addr add 169.254.62.1/16 dev urdmad1 && ip link set urdmad1 up
rdma link add urdma1 type urdma netdev urdmad1 || fail "rdma link add urdma1"

# gid_index DEV HEX: the index of DEV's RoCE v2 GID ::ffff:HEX (e.g. 7f00:0001).
gid_index() {
  local f i
  for f in /sys/class/infiniband/$1/ports/1/gids/*; do
    i=${f##*/}
    if [ "$(cat "$f")" = "0000:0000:0000:0000:0000:ffff:$2" ] &&
      [ "$(cat /sys/class/infiniband/$1/ports/1/gid_attrs/types/$i 2>/dev/null)" = "RoCE v2" ]; then
      echo "$i"
      return 0
    fi
  done
  return 1
}
G0=$(gid_index urdma0 7f00:0001) || fail "urdma0 has the RoCE v2 GID of 127.0.0.1"
G1=$(gid_index urdma1 a9fe:3e01) || fail "urdma1 has the RoCE v2 GID of 169.254.62.1"
G0=${G0:-1}
G1=${G1:-1}
echo "# GID indexes: urdma0 $G0, urdma1 $G1"

expect "ibv_devices lists urdma0 and urdma1" 'urdma0.*urdma1|urdma1.*urdma0' sh -c 'ibv_devices | tr "\n" " "'
expect "ibv_devinfo -v: urdma0 PORT_ACTIVE" 'state:[[:space:]]+PORT_ACTIVE' ibv_devinfo -v -d urdma0
expect "ibv_devinfo -v: urdma0 GID of 127.0.0.1" "GID\\[ *$G0\\]:.*(::ffff:127.0.0.1|0000:0000:0000:0000:0000:ffff:7f00:0001)" ibv_devinfo -v -d urdma0
expect "ibv_devinfo: urdma1 PORT_ACTIVE, Ethernet" 'PORT_ACTIVE' ibv_devinfo -d urdma1
expect "ibv_devinfo: transport and link layer" 'link_layer:[[:space:]]+Ethernet' ibv_devinfo -d urdma1

# pair NAME SERVER_CMD -- CLIENT_CMD: the server on urdma1, then the
# client on urdma0; both must exit 0 within $T s.
pair() {
  local name=$1 srv=() cli=()
  shift
  while [ $# -gt 0 ] && [ "$1" != -- ]; do srv+=("$1"); shift; done
  shift
  cli=("$@")
  timeout -k 5 $T "${srv[@]}" > /tmp/srv.out 2> /tmp/srv.err &
  local spid=$!
  sleep 2
  timeout -k 5 $T "${cli[@]}" > /tmp/cli.out 2> /tmp/cli.err
  local crc=$?
  wait $spid
  local src=$?
  if [ $crc = 0 ] && [ $src = 0 ]; then
    ok "$name"
    grep -E '^ *[0-9]+ +[0-9]+|bytes in|iters in' /tmp/cli.out | tail -2 | sed 's/^/    # /'
  else
    fail "$name (server status $src, client status $crc)"
    # Errors go to stderr unbuffered, so they are shown apart from stdout.
    sed 's/^/    server stderr: /' /tmp/srv.err | tail -15
    sed 's/^/    server: /' /tmp/srv.out | tail -8
    sed 's/^/    client stderr: /' /tmp/cli.err | tail -15
    sed 's/^/    client: /' /tmp/cli.out | tail -8
  fi
}
S=169.254.62.1
# perftest's -F: a clock-rate estimate that a busy emulated CPU spoils
# ("Correlation coefficient r^2 < 0.9") does not fail the run.
pair "ibv_rc_pingpong urdma0 -> urdma1" ibv_rc_pingpong -d urdma1 -g "$G1" -n 200 -- \
  ibv_rc_pingpong -d urdma0 -g "$G0" -n 200 $S
pair "ib_write_bw urdma0 -> urdma1" ib_write_bw -d urdma1 -x "$G1" -n 500 -F -- \
  ib_write_bw -d urdma0 -x "$G0" -n 500 -F $S
pair "ib_read_lat urdma0 -> urdma1" ib_read_lat -d urdma1 -x "$G1" -n 500 -F -- \
  ib_read_lat -d urdma0 -x "$G0" -n 500 -F $S
pair "ib_send_bw urdma0 -> urdma1" ib_send_bw -d urdma1 -x "$G1" -n 500 -F -- \
  ib_send_bw -d urdma0 -x "$G0" -n 500 -F $S
# Completion channels: the NIC raises CQ events on the kernel's channel.
pair "ibv_rc_pingpong -e (completion channel) urdma0 -> urdma1" ibv_rc_pingpong -d urdma1 -g "$G1" -n 200 -e -- \
  ibv_rc_pingpong -d urdma0 -g "$G0" -n 200 -e $S
pair "ib_send_lat -e (completion channel) urdma0 -> urdma1" ib_send_lat -d urdma1 -x "$G1" -n 200 -e -F -- \
  ib_send_lat -d urdma0 -x "$G0" -n 200 -e -F $S
# The kernel tracks the CQs of a running program.
timeout -k 5 $T ibv_rc_pingpong -d urdma1 -g "$G1" -n 5 -e > /tmp/srv.out 2>&1 &
spid=$!
sleep 2
expect "rdma resource show cq: the CQ of a running program" 'ibv_rc_pingpong' rdma resource show cq dev urdma1
expect "rdma resource show pd: the PD of a running program" 'ibv_rc_pingpong' rdma resource show pd dev urdma1
expect "rdma resource show qp: the QP of a running program, in INIT" 'type RC state INIT.*ibv_rc_pingpong' rdma resource show qp link urdma1/1
expect "rdma resource show mr: the MR of a running program, with its keys" '(rkey|lkey) 0x[0-9a-f]+.*mrlen 4096.*ibv_rc_pingpong' rdma resource show mr dev urdma1
timeout -k 5 $T ibv_rc_pingpong -d urdma0 -g "$G0" -n 5 -e $S > /tmp/cli.out 2>&1
wait $spid
expect "rdma resource show: no PD, MR, CQ or QP left after the program" '^none$' sh -c "(rdma resource show pd dev urdma1; rdma resource show mr dev urdma1; rdma resource show cq dev urdma1; rdma resource show qp link urdma1/1) 2>&1 | grep -q ibv_rc_pingpong && echo left || echo none"
# rdma-core's own CQ event tests (pyverbs), RC and UD, on urdma0.
rm -rf /tmp/pyverbs-tests && cp -r /usr/share/doc/rdma-core/tests /tmp/pyverbs-tests &&
  gunzip -f /tmp/pyverbs-tests/*.gz
expect "pyverbs test_cq_events (RC and UD completion channels)" '^OK$' sh -c \
  "cd /tmp/pyverbs-tests && timeout -k 5 $T python3 run_tests.py --dev urdma0 --gid $G0 test_cq_events 2>&1 | tail -1"
# The whole suite on urdma0: no error and no failure; the counts are shown.
(cd /tmp/pyverbs-tests && timeout -k 5 $T python3 run_tests.py --dev urdma0 --gid $G0 -v > /tmp/pyverbs.out 2>&1)
unknown=$(grep -E '^(ERROR|FAIL): ' /tmp/pyverbs.out)
summary=$(grep -E '^(Ran|OK|FAILED)' /tmp/pyverbs.out | tr '\n' ' ')
if [ -z "$unknown" ] && grep -q '^Ran ' /tmp/pyverbs.out; then
  ok "pyverbs suite: no error ($summary; $(grep -c '\.\.\. ok$' /tmp/pyverbs.out) ok)"
else
  fail "pyverbs suite: no error ($summary)"
  # Each error with its traceback.
  awk '/^(ERROR|FAIL): /{p=1} /^-{20,}$/{if(p)n++; if(n>=2){p=0;n=0}} p' /tmp/pyverbs.out | head -n 80 | sed 's/^/    /'
fi
# Asynchronous events through the kernel's event file: an SRQ below its
# limit, a WRITE with a wrong R_Key (QP access error, last WQE reached).
expect "async events: SRQ limit, QP access error, last WQE, on the kernel's event file" '^ok$' \
  timeout -k 5 $T /usr/bin/python3 /project/tests/verbs/async_events.py urdma0 "$G0"
# The NIC file refuses what it cannot do: a CQ no such process owns, an
# unknown device, an unknown command.
expect "/dev/urdma: ENOENT, ENODEV, ENOTTY for bad events" '^ENOENT ENODEV ENOTTY$' python3 -c '
import errno, fcntl, struct
f = open("/dev/urdma", "wb", buffering=0)
def call(req, arg):
    try:
        fcntl.ioctl(f, req, arg)
        return "ok"
    except OSError as e:
        return errno.errorcode[e.errno]
ev = (1 << 30) | (72 << 16) | (0xb5 << 8) | 1
print(call(ev, struct.pack("64sII", b"urdma1", 1, 1)),
      call(ev, struct.pack("64sII", b"nosuchdev", 1, 1)),
      call(0xb5ff, b"\0" * 8))'
expect "a GID index that is not the device's address is refused" 'EINVAL|Invalid argument|Failed to modify|failed|rc=[1-9]' \
  sh -c "timeout -k 5 30 ibv_rc_pingpong -d urdma1 -g 0 -n 1 >/dev/null 2>&1 & sleep 1; timeout -k 5 30 ibv_rc_pingpong -d urdma0 -g 0 -n 1 $S; echo rc=\$?; wait"
# While the NIC agent holds /dev/urdma (a program waits on a completion
# channel), the module cannot be unloaded.
timeout -k 5 $T ibv_rc_pingpong -d urdma1 -g "$G1" -n 1 -e > /dev/null 2>&1 &
spid=$!
sleep 2
expect "rmmod urdma is refused while the NIC agent holds /dev/urdma" 'in use|busy' sh -c 'rmmod urdma 2>&1'
kill $spid 2>/dev/null
wait $spid 2>/dev/null
trap - EXIT
cleanup
if lsmod | grep -q "^urdma "; then fail "urdma.ko unloads once the agent is gone"; else ok "urdma.ko unloads once the agent is gone"; fi
expect "kernel log clean (after rmmod)" '^clean$' sh -c 'dmesg | grep -E "WARNING|BUG:|Oops|Call Trace|refcount|leak" || echo clean'
[ $failures -eq 0 ]
