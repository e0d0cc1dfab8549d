#!/bin/bash
# Benchmark, not a test (tests/vm/run bench-rxe.sh, or bench/run): only the
# figures of rxe.sh, the same perftest commands between urdma and urdma
# (two namespaces), urdma and rxe both ways, urdma over its own loopback
# (one NIC, two addresses) and rxe over its own loopback.
RXE_CASES=figures RXE_FIGURES_MORE=1 exec bash "$(dirname "$0")/rxe.sh"
