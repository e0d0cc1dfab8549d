#!/usr/bin/env python3
"""Generate RoCEv2 ICRC test vectors with scapy's RoCE layer.

The vectors are an independent reference for the urdma-wire ICRC code: the
IP and UDP headers are built by scapy, and the ICRC is computed and appended
by scapy.contrib.roce (BTH.compute_icrc). Extended transport headers that
scapy has no layer for (RETH, DETH, AtomicETH, AtomicAckETH, ImmDt, IETH) are
packed here with struct, big-endian, as IBTA Vol 1 ch. 9 lays them out.

Output: crates/urdma-wire/tests/data/icrc_vectors.txt, one vector a line:

    name expect src_ip src_port dst_ip dst_port datagram_hex

where datagram_hex is the UDP payload (BTH .. ICRC) and expect is "ok" for a
packet sent the way urdma sends (IPv4: identification 0, DF) or "badicrc"
for one whose IPv4 identification/flags differ from that convention, which
urdma's receive side cannot know and must therefore reject.

Usage: pip install scapy && python3 crates/urdma-wire/tools/gen_icrc_vectors.py
"""

import os
import struct
import sys
import zlib

import scapy
from scapy.compat import raw
from scapy.contrib.roce import AETH, BTH
from scapy.layers.inet import IP, UDP
from scapy.layers.inet6 import IPv6
from scapy.packet import Raw

ROCE_PORT = 4791

# Opcodes (IBTA Vol 1, 9.2.1).
RC_SEND_ONLY = 0x04
RC_WRITE_ONLY = 0x0A
RC_READ_REQUEST = 0x0C
RC_READ_RESPONSE_ONLY = 0x10
RC_ACK = 0x11
RC_ATOMIC_ACK = 0x12
RC_COMPARE_SWAP = 0x13
RC_FETCH_ADD = 0x14
RC_SEND_ONLY_INV = 0x17
UC_WRITE_ONLY_IMM = 0x2B
UD_SEND_ONLY = 0x64
UD_SEND_ONLY_IMM = 0x65


def reth(va, rkey, dma_len):
    return struct.pack("!QII", va, rkey, dma_len)


def deth(qkey, src_qp):
    return struct.pack("!IB", qkey, 0) + src_qp.to_bytes(3, "big")


def atomic_eth(va, rkey, swap_add, compare):
    return struct.pack("!QIQQ", va, rkey, swap_add, compare)


def u32(v):
    return struct.pack("!I", v)


def padded(payload):
    """Payload plus zero pad bytes, and the pad count."""
    pad = (4 - len(payload) % 4) % 4
    return payload + b"\x00" * pad, pad


def ipv4(src, dst, **kw):
    # urdma's convention: identification 0 and DF (see icrc.rs).
    kw.setdefault("id", 0)
    kw.setdefault("flags", "DF")
    return IP(src=src, dst=dst, **kw)


def ipv6(src, dst, **kw):
    return IPv6(src=src, dst=dst, **kw)


def vectors():
    """(name, expect, ip layer, sport, bth fields, rest of the packet) tuples."""
    send_payload, send_pad = padded(b"hello")  # 5 bytes: pad 3
    ud_payload, ud_pad = padded(bytes(range(7)))  # 7 bytes: pad 1
    write_payload = bytes(range(0x40, 0x50))

    return [
        ("rc_send_only_pad3_v4", "ok",
         ipv4("192.168.1.10", "192.168.1.20"), 49152,
         dict(opcode=RC_SEND_ONLY, padcount=send_pad, dqpn=0x000011, psn=0, ackreq=1),
         Raw(send_payload)),
        ("rc_write_only_reth_v4_tos_ttl", "ok",
         ipv4("10.1.2.3", "10.4.5.6", tos=0x02, ttl=1), 50001,
         dict(opcode=RC_WRITE_ONLY, dqpn=0xABCDEF, psn=0x123456, solicited=1),
         Raw(reth(0x00007F0012345678, 0xCAFEBABE, len(write_payload)) + write_payload)),
        ("rc_ack_aeth_v4_ecn", "ok",
         ipv4("172.16.0.1", "172.16.0.2", tos=0xB8, ttl=255), 61000,
         dict(opcode=RC_ACK, dqpn=0x000102, psn=0xFFFFFF, fecn=1, becn=1, pkey=0x8001),
         AETH(syndrome=0x1F, msn=0x000042)),
        ("rc_read_request_v6", "ok",
         ipv6("fd00::1", "fd00::2", tc=0x03, fl=0x12345, hlim=64), 49500,
         dict(opcode=RC_READ_REQUEST, dqpn=0x00BEEF, psn=0x000100, ackreq=1),
         Raw(reth(0x1000, 0x01020304, 8192))),
        ("rc_compare_swap_v4", "ok",
         ipv4("192.0.2.1", "198.51.100.7", ttl=17), 4791,
         dict(opcode=RC_COMPARE_SWAP, dqpn=0x000033, psn=0x00ABCD, ackreq=1),
         Raw(atomic_eth(0x7FFF00001000, 0x11223344, 0x5555555555555555, 0xAAAAAAAAAAAAAAAA))),
        ("rc_fetch_add_v6", "ok",
         ipv6("2001:db8::10", "2001:db8:1::20", hlim=1), 33333,
         dict(opcode=RC_FETCH_ADD, dqpn=0x7FFFFF, psn=0x000001, ackreq=1),
         Raw(atomic_eth(0x2000, 0x99, 1, 0))),
        ("rc_atomic_ack_v6", "ok",
         ipv6("2001:db8::20", "2001:db8::10", tc=0xFF, fl=0xFFFFF), 50505,
         dict(opcode=RC_ATOMIC_ACK, dqpn=0x000044, psn=0x00ABCD),
         AETH(syndrome=0x00, msn=0x000007) / Raw(struct.pack("!Q", 0x0123456789ABCDEF))),
        ("rc_read_response_only_v4", "ok",
         ipv4("10.0.0.2", "10.0.0.1"), 52000,
         dict(opcode=RC_READ_RESPONSE_ONLY, dqpn=0x000055, psn=0x000200),
         AETH(syndrome=0x1F, msn=0x000003) / Raw(b"\xEE" * 24)),
        ("rc_ack_nak_v6", "ok",
         ipv6("fe80::1", "fe80::2"), 49153,
         dict(opcode=RC_ACK, dqpn=0x000066, psn=0x000300),
         AETH(syndrome=0x62, msn=0x000009)),
        ("rc_send_only_inv_v4_mapped", "ok",
         ipv4("127.0.0.1", "127.0.0.1"), 40000,
         dict(opcode=RC_SEND_ONLY_INV, dqpn=0x000077, psn=0x000400, solicited=1),
         Raw(u32(0x00C0FFEE) + b"\x01\x02\x03\x04")),
        ("uc_write_only_imm_v6", "ok",
         ipv6("::1", "::1"), 40001,
         dict(opcode=UC_WRITE_ONLY_IMM, dqpn=0x000088, psn=0x000500),
         Raw(reth(0x3000, 0x77, 4) + u32(0xDEADBEEF) + b"\x0A\x0B\x0C\x0D")),
        ("ud_send_only_deth_pad1_v6", "ok",
         ipv6("fd12:3456::a", "fd12:3456::b", tc=0x01), 55555,
         dict(opcode=UD_SEND_ONLY, padcount=ud_pad, dqpn=0x000001, psn=0x000600),
         Raw(deth(0x80010000, 0x000099) + ud_payload)),
        ("ud_send_only_imm_v4", "ok",
         ipv4("192.168.50.1", "192.168.50.255", tos=0x60), 49999,
         dict(opcode=UD_SEND_ONLY_IMM, dqpn=0x000001, psn=0x000700, solicited=1),
         Raw(deth(0x11111111, 0x0000AA) + u32(0x12345678) + b"datagram")),
        # IPv4 identification and flags are covered by the ICRC; a packet
        # sent with values other than urdma's convention does not verify.
        ("rc_send_only_ipv4_id_nonzero", "badicrc",
         ipv4("192.168.1.10", "192.168.1.20", id=0x1234), 49152,
         dict(opcode=RC_SEND_ONLY, padcount=send_pad, dqpn=0x000011, psn=0, ackreq=1),
         Raw(send_payload)),
        ("rc_send_only_ipv4_no_df", "badicrc",
         ipv4("192.168.1.10", "192.168.1.20", flags=0), 49152,
         dict(opcode=RC_SEND_ONLY, padcount=send_pad, dqpn=0x000011, psn=0, ackreq=1),
         Raw(send_payload)),
    ]


def build(ip, sport, bth_fields, rest):
    """Build the packet (scapy appends the ICRC) and dissect it again."""
    wire = raw(ip / UDP(sport=sport, dport=ROCE_PORT) / BTH(**bth_fields) / rest)
    return type(ip)(wire)


def manual_icrc(ip_bytes, udp_bytes, datagram_no_icrc, v6):
    """The ICRC recomputed by hand from the real headers (cross-check)."""
    ip = bytearray(ip_bytes)
    if v6:
        ip[0] = (ip[0] & 0xF0) | 0x0F
        ip[1:4] = b"\xff\xff\xff"
        ip[7] = 0xFF
    else:
        ip[1] = 0xFF
        ip[8] = 0xFF
        ip[10:12] = b"\xff\xff"
    udp = bytearray(udp_bytes)
    udp[6:8] = b"\xff\xff"
    body = bytearray(datagram_no_icrc)
    body[4] = 0xFF
    return zlib.crc32(b"\xff" * 8 + bytes(ip) + bytes(udp) + bytes(body)) & 0xFFFFFFFF


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    out_path = os.path.join(here, "..", "tests", "data", "icrc_vectors.txt")
    lines = [
        "# RoCEv2 ICRC vectors made by tools/gen_icrc_vectors.py with scapy %s." % scapy.VERSION,
        "# Do not edit; rerun the script instead.",
        "# name expect src_ip src_port dst_ip dst_port datagram_hex(BTH..ICRC)",
    ]
    for name, expect, ip, sport, bth_fields, rest in vectors():
        pkt = build(ip, sport, bth_fields, rest)
        v6 = isinstance(pkt, IPv6)
        ip_layer = pkt[IPv6] if v6 else pkt[IP]
        udp = pkt[UDP]
        wire = raw(pkt)
        ip_len = 40 if v6 else 20
        ip_bytes, udp_bytes, datagram = wire[:ip_len], wire[ip_len:ip_len + 8], wire[ip_len + 8:]

        # The IP and UDP headers are what the pseudo-header assumes.
        assert udp.dport == ROCE_PORT and udp.len == 8 + len(datagram), name
        if v6:
            assert ip_layer.plen == 8 + len(datagram) and ip_layer.nh == 17, name
        else:
            assert ip_layer.ihl == 5 and ip_layer.proto == 17, name
            assert ip_layer.len == 28 + len(datagram), name
            if expect == "ok":
                # identification 0, flags DF, fragment offset 0
                assert ip_bytes[4:8] == b"\x00\x00\x40\x00", (name, ip_bytes[4:8].hex())

        # scapy's ICRC: zlib CRC-32 of the masked pseudo packet, sent
        # least significant byte first.
        crc = manual_icrc(ip_bytes, udp_bytes, datagram[:-4], v6)
        assert datagram[-4:] == struct.pack("<I", crc), (name, datagram[-4:].hex(), hex(crc))

        # Masked fields do not change the ICRC: the IP header's TOS/TTL
        # (IPv4) or traffic class/flow label/hop limit (IPv6), and the BTH
        # FECN/BECN bits.
        other = ip_layer.copy()
        if v6:
            other.tc, other.fl, other.hlim = 0x5A, 0xA5A5A, 3
        else:
            other.tos, other.ttl, other.chksum = 0x5A, 3, None
        other[UDP].chksum = None
        other[BTH].icrc = None
        other[BTH].fecn ^= 1
        other[BTH].becn ^= 1
        again = raw(other)[ip_len + 8:]
        assert again[:4] == datagram[:4] and again[5:] == datagram[5:], name
        assert again[4] == datagram[4] ^ 0xC0, name

        src, dst = ip_layer.src, ip_layer.dst
        if name.endswith("_mapped"):
            # The same packet as seen by an IPv6 socket bound to [::].
            src, dst = "::ffff:" + src, "::ffff:" + dst
        lines.append(" ".join([name, expect, src, str(udp.sport), dst, str(udp.dport),
                               datagram.hex()]))

    os.makedirs(os.path.dirname(out_path), exist_ok=True)
    with open(out_path, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("wrote %d vectors to %s" % (len(lines) - 3, os.path.normpath(out_path)), file=sys.stderr)


if __name__ == "__main__":
    main()
