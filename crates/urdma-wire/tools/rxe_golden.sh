#!/bin/bash
# Regenerates tests/data/rxe-golden.pcap: Linux Soft-RoCE (rdma_rxe) and
# urdma exchanging one of every operation, each end as requester in turn.
#
# Boots the VM of tests/vm/run with its guest script rxe.sh in capture
# mode (RXE_GOLDEN=1): tcpdump on rxe's end of the veth pair records the
# UDP port 4791 traffic while tests/verbs/remote runs its golden and
# access cases in both directions; rxe.sh prints the file in base64
# between "=== rxe-golden.pcap begin" and "=== rxe-golden.pcap end" on the
# guest console, from which this script decodes it.
#
# Needs what tests/vm/run and rxe.sh need, and tcpdump. Writes the file
# only if every test of the run passed.
set -euo pipefail
cd "$(dirname "$0")/../../.."
OUT=crates/urdma-wire/tests/data/rxe-golden.pcap
LOG=$(mktemp)
trap 'rm -f "$LOG" "$LOG.pcap"' EXIT

RXE_GOLDEN=1 RXE_CASES="golden access" tests/vm/run --log "$LOG" rxe.sh |
  grep -Ev '^[A-Za-z0-9+/=]{76}|^[A-Za-z0-9+/=]{1,75}.?$' ||
  { echo "rxe_golden.sh: the VM run failed" >&2; exit 1; }
sed -n '/^=== rxe-golden.pcap begin/,/^=== rxe-golden.pcap end/{//!p}' "$LOG" |
  tr -d '\r' | base64 -d > "$LOG.pcap"
[ -s "$LOG.pcap" ] || { echo "rxe_golden.sh: no capture in the console log" >&2; exit 1; }
cp "$LOG.pcap" "$OUT"
echo "rxe_golden.sh: wrote $OUT ($(stat -c %s "$OUT") bytes)"
