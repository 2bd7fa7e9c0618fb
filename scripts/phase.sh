#!/usr/bin/env bash
# phase.sh LABEL CMD...: run CMD and print how long the phase took, so slow steps show in CI.
set -u
label=$1; shift
start=$(date +%s%N)
"$@"; rc=$?
ms=$(( ($(date +%s%N) - start) / 1000000 ))
printf '[phase] %-8s %4d.%ds (exit %d)\n' "$label" $((ms / 1000)) $((ms % 1000 / 100)) "$rc"
exit "$rc"
