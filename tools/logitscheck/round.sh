#!/usr/bin/env bash
# One device round of the carried build/logitscheck (no extension build): the
# steps of a steps file (one logitscheck command line per line, an optional
# "T=seconds " prefix; "!" runs the rest as a shell command), each under a
# hard time limit; output in $OUT/logitscheck.log. tools/v3check/round.sh's loop.
B=build/logitscheck LOG=logitscheck.log exec bash "$(dirname "${BASH_SOURCE[0]}")/../v3check/round.sh" "${1:?steps file}"
