#!/bin/bash
# Benchmark, not a test (tests/vm/run bench-rxe.sh, or bench/run): only the
# figures of rxe.sh, the same perftest commands between urdma and urdma
# (two namespaces), urdma and rxe both ways, and rxe over its own loopback.
RXE_CASES=figures exec bash "$(dirname "$0")/rxe.sh"
