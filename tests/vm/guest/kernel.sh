#!/bin/bash
# Guest test: the urdma kernel device. Loads urdma.ko ($URDMA_KO), creates
# devices with `rdma link add` on lo and on a dummy interface with a
# link-local address, checks what the RDMA core, sysfs and uverbs show,
# follows carrier changes and the NIC agent (the port is ACTIVE while an
# agent serves the device), deletes the devices and unloads the module,
# then checks the kernel log. Prints "ok - NAME" / "FAIL - NAME" per check.
set -u
KO=${URDMA_KO:-/share/urdma.ko}
failures=0
ok() { echo "ok - kernel: $*"; }
fail() { echo "FAIL - kernel: $*"; failures=$((failures + 1)); }
# check NAME COMMAND...: passes if COMMAND succeeds.
check() {
  local name=$1
  shift
  if out=$("$@" 2>&1); then ok "$name"; else fail "$name"; echo "$out" | sed 's/^/    /'; fi
}
# expect NAME REGEX COMMAND...: passes if COMMAND's output matches REGEX.
expect() {
  local name=$1 re=$2
  shift 2
  out=$("$@" 2>&1)
  if echo "$out" | grep -Eq -- "$re"; then ok "$name"; else fail "$name (/$re/ not in output)"; echo "$out" | sed 's/^/    /'; fi
}
cleanup() {
  [ -n "${AGENT:-}" ] && kill "$AGENT" 2>/dev/null && wait "$AGENT" 2>/dev/null
  rdma link delete urdma0 2>/dev/null
  rdma link delete urdma1 2>/dev/null
  ip link del urdmad0 2>/dev/null
  rmmod urdma 2>/dev/null
}
trap cleanup EXIT

dmesg -C 2>/dev/null
modprobe ib_core && modprobe ib_uverbs || fail "RDMA core modules load"
check "module loads" insmod "$KO"
check "rdma link add on lo" rdma link add urdma0 type urdma netdev lo
ip link add urdmad0 type dummy && ip addr add 169.254.61.1/16 dev urdmad0 && ip link set urdmad0 up
check "rdma link add on a dummy netdev" rdma link add urdma1 type urdma netdev urdmad0
# The port is ACTIVE once a NIC (the agent) serves the device.
expect "rdma link show: urdma0 DOWN (no NIC), link up" 'link urdma0/1 state DOWN physical_state LINK_UP netdev lo' rdma link show
U=${URDMA:?URDMA names the urdma binary}
"$U" agent --persist --open-all >/tmp/kernel-agent.log 2>&1 &
AGENT=$!
for _ in $(seq 1 100); do
  [ "$(dmesg | grep -c "a NIC attached")" -ge 2 ] && break
  sleep 0.1
done
expect "rdma link show: urdma0 ACTIVE on lo" 'link urdma0/1 state ACTIVE physical_state LINK_UP netdev lo' rdma link show
expect "rdma link show: urdma1 ACTIVE on urdmad0" 'link urdma1/1 state ACTIVE physical_state LINK_UP netdev urdmad0' rdma link show
S=/sys/class/infiniband/urdma0
expect "sysfs node_desc" '^urdma' cat $S/node_desc
expect "sysfs port state" '^4: ACTIVE$' cat $S/ports/1/state
expect "sysfs phys_state" '^5: LinkUp$' cat $S/ports/1/phys_state
expect "sysfs link_layer" '^Ethernet$' cat $S/ports/1/link_layer
gids() { for f in /sys/class/infiniband/$1/ports/1/gids/*; do i=${f##*/}; echo "$(cat $f) $(cat /sys/class/infiniband/$1/ports/1/gid_attrs/types/$i 2>/dev/null)"; done; }
expect "GID of 127.0.0.1 is RoCE v2" '^0000:0000:0000:0000:0000:ffff:7f00:0001 RoCE v2$' gids urdma0
expect "GID of 169.254.61.1 is RoCE v2" '^0000:0000:0000:0000:0000:ffff:a9fe:3d01 RoCE v2$' gids urdma1
expect "node GUID from the MAC" '^[0-9a-f]{4}:[0-9a-f]{4}:[0-9a-f]{4}:[0-9a-f]{4}$' cat /sys/class/infiniband/urdma1/node_guid
expect "uverbs nodes" 'uverbs0.*uverbs1|uverbs1.*uverbs0' sh -c 'ls /dev/infiniband | tr "\n" " "'
expect "uverbs ibdev" '^urdma[01]$' cat /sys/class/infiniband_verbs/uverbs0/ibdev
ip link set urdmad0 down
expect "port DOWN when the netdev is down" '^1: DOWN$' cat /sys/class/infiniband/urdma1/ports/1/state
ip link set urdmad0 up
expect "port ACTIVE when the netdev is up again" '^4: ACTIVE$' cat /sys/class/infiniband/urdma1/ports/1/state
# The NIC goes (the agent dies): the ports go DOWN; another agent: ACTIVE.
kill -9 $AGENT; wait $AGENT 2>/dev/null
sleep 0.5
expect "port DOWN when the agent is gone" '^1: DOWN$' cat /sys/class/infiniband/urdma1/ports/1/state
"$U" agent --persist --open-all >>/tmp/kernel-agent.log 2>&1 &
AGENT=$!
for _ in $(seq 1 100); do
  [ "$(dmesg | grep -c "a NIC attached")" -ge 4 ] && break
  sleep 0.1
done
expect "port ACTIVE again with a new agent" '^4: ACTIVE$' cat /sys/class/infiniband/urdma1/ports/1/state
kill $AGENT; wait $AGENT 2>/dev/null
# The channel refuses what it cannot take, and a NIC that attaches brings
# the port up: attach errors, reads and writes of bad messages.
expect "/dev/urdma channel: attach, bad messages refused" \
  '^urdma1 EBUSY ENODEV EINVAL 4: ACTIVE MR1:fe EAGAIN ENOTCONN EFAULT ENOENT EINVAL EINVAL ENOTCONN EINVAL EINVAL EINVAL 24 ENOTCONN$' python3 -c '
import ctypes, errno, fcntl, os, socket, struct
ATTACH = (3 << 30) | (72 << 16) | (0xb5 << 8) | 3
def attach(f, ifindex, reserved=0):
    buf = bytearray(struct.pack("II64s", ifindex, reserved, b""))
    fcntl.ioctl(f, ATTACH, buf)
    return buf[8:].split(b"\0")[0].decode()
def err(fn):
    try:
        r = fn()
        return str(r)
    except OSError as e:
        return errno.errorcode[e.errno]
idx = socket.if_nametoindex("urdmad0")
a = os.open("/dev/urdma", os.O_RDWR | os.O_NONBLOCK)
b = os.open("/dev/urdma", os.O_RDWR)
out = [attach(a, idx), err(lambda: attach(b, idx)), err(lambda: attach(b, 999999)),
       err(lambda: attach(b, idx, 1)),
       open("/sys/class/infiniband/urdma1/ports/1/state").read().strip()]
# An attached NIC first learns of the kernel MRs (the DMA MR of each PD).
m, at, kinds, dmakey = os.read(a, 4096), 0, set(), 0
while at < len(m):
    t, n = struct.unpack_from("=HH", m, at)
    op, key = struct.unpack_from("=II", m, at + 8)
    kinds.add("MR%d:%x" % (op, key >> 24) if t == 8 else "type%d" % t)
    dmakey = key if t == 8 and op == 1 else dmakey
    at += n
out += [",".join(sorted(kinds)), err(lambda: os.read(a, 4096)), err(lambda: os.read(b, 4096))]
# Its access to kernel MRs is checked: not kernel memory, no such key,
# a reserved field, too long, an unattached file.
DMA = (1 << 30) | (32 << 16) | (0xb5 << 8) | 4
cbuf = ctypes.create_string_buffer(64)
def dma(f, key, iova, n, reserved=0):
    fcntl.ioctl(f, DMA, struct.pack("QQIIII", iova, ctypes.addressof(cbuf), n, key, 0, reserved))
out += [err(lambda: dma(a, dmakey, 0x1000, 8)), err(lambda: dma(a, 0x12345600, 0, 8)),
        err(lambda: dma(a, dmakey, 0, 8, 1)), err(lambda: dma(a, dmakey, 0, 2 << 20)),
        err(lambda: dma(b, dmakey, 0, 8))]
hdr = lambda t, n, qpn=1: struct.pack("=HHI", t, n, qpn)
out.append(err(lambda: os.write(a, hdr(2, 13) + bytes(16))))
out.append(err(lambda: os.write(a, hdr(9, 24) + bytes(16))))
recv = hdr(3, 80) + bytes(40) + struct.pack("=IIHHIII", 1, 2, 0, 0, 0, 5000, 0x80010000) + bytes(8)
out.append(err(lambda: os.write(a, recv)))
out.append(err(lambda: os.write(a, hdr(2, 24) + struct.pack("=QII", 12345, 0, 0))))
out.append(err(lambda: os.write(b, hdr(2, 24) + bytes(16))))
print(" ".join(out))'
expect "second device on the same netdev refused" 'exist|File exists|rc=[1-9]' sh -c 'rdma link add urdma9 type urdma netdev lo; echo rc=$?'
check "rdma link delete" rdma link delete urdma0
expect "deleted device is gone" '^$' sh -c 'rdma link show | grep urdma0'
ip link del urdmad0
expect "device goes with its netdev" '^$' sh -c 'rdma link show | grep urdma1'
check "re-add after delete" rdma link add urdma0 type urdma netdev lo
check "rmmod with a device present" rmmod urdma
expect "no device left" '^$' sh -c 'ls /sys/class/infiniband 2>/dev/null | grep urdma'
expect "kernel log clean" '^clean$' sh -c 'dmesg | grep -E "WARNING|BUG:|Oops|Call Trace|refcount|leak" || echo clean'
trap - EXIT
cleanup
[ $failures -eq 0 ]
