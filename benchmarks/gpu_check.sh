#!/usr/bin/env bash
# On a machine (or cluster allocation) with GPUs: run an export's MSCCL++ plans through
# `autotaccl bench --runner mscclpp` and its MSCCL XML through nccl-tests with MSCCL loaded, both with
# --check, and print what ran and what matched.
#
#   benchmarks/gpu_check.sh [EXPORT_DIR] [NCCL_TESTS_BUILD_DIR]
#
# EXPORT_DIR defaults to ./autotaccl-demo/export (what `autotaccl demo` writes); NCCL_TESTS_BUILD_DIR
# (nccl-tests' build/ with *_perf built against an MSCCL-enabled NCCL) may also come from $NCCL_TESTS;
# without it the XML is skipped and says so. $HOSTFILE is passed as --hostfile (ranks across nodes),
# $AUTOTACCL the command to run (default: autotaccl on PATH, else .venv/bin/autotaccl).
# Exit status: 0 every file ran and matched, 1 something ran wrong or failed, 2 this machine cannot run it.
set -u
export_dir=${1:-./autotaccl-demo/export}
nccl_tests=${2:-${NCCL_TESTS:-}}
cli=${AUTOTACCL:-$(command -v autotaccl || echo .venv/bin/autotaccl)}
python=$(dirname "$cli")/python
[ -x "$python" ] || python=python3

if [ ! -d "$export_dir" ]; then
    echo "gpu_check: $export_dir: not a directory (an export: autotaccl demo, or autotaccl export)" >&2; exit 2
fi
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
    echo "gpu_check: no GPU on this machine (nvidia-smi is missing or lists none)" >&2; exit 2
fi
if ! "$python" -c 'import mscclpp, cupy, mpi4py' 2>/dev/null; then
    echo "gpu_check: $python cannot import mscclpp, cupy and mpi4py (build MSCCL++'s Python package first)" >&2
    exit 2
fi
hostfile=()
[ -n "${HOSTFILE:-}" ] && hostfile=(--hostfile "$HOSTFILE")

ran=0; matched=0; failed=0; skipped=0
report() {   # report KIND FILE STATUS OUTPUT
    ran=$((ran + 1))
    if [ "$3" -eq 0 ]; then matched=$((matched + 1)); echo "matched  $1 $2"
    else failed=$((failed + 1)); echo "FAILED   $1 $2 (exit $3): $(echo "$4" | tail -n 3 | tr '\n' ' ')"; fi
}

shopt -s nullglob
for plan in "$export_dir"/mscclpp/*.plan.json; do
    read -r ranks sizes < <("$python" - "$plan" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
lo = max(d["min_message_size"], 4096)
hi = max(lo, min(d["max_message_size"], 64 << 20))
print(len(d["gpus"]), f"{lo}:{hi}")
PY
)
    out=$("$cli" bench "$plan" --runner mscclpp --np "$ranks" "${hostfile[@]}" --sizes "$sizes" --check 2>&1)
    status=$?
    echo "$out"
    report mscclpp "$plan" "$status" "$out"
done
for xml in "$export_dir"/msccl/*.xml; do
    if [ -z "$nccl_tests" ]; then
        skipped=$((skipped + 1)); echo "skipped  msccl $xml (no nccl-tests build directory given)"; continue
    fi
    read -r ranks sizes < <("$python" - "$xml" <<'PY'
import re, sys
head = dict(re.findall(r'([A-Za-z_]+)="([^"]*)"', open(sys.argv[1]).read().split(">", 1)[0]))
lo = max(int(head.get("minBytes", 0)), 4096)                   # the band the file selects (0: no limit)
hi = max(lo, min(int(head.get("maxBytes", 0)) or 64 << 20, 64 << 20))
print(head["ngpus"], f"{lo}:{hi}")
PY
)
    out=$("$cli" bench "$xml" --runner nccl-tests --binary "$nccl_tests" --np "$ranks" "${hostfile[@]}" \
          --runtime executor --sizes "$sizes" 2>&1)     # nccl-tests checks every call itself (-c 1)
    status=$?
    echo "$out"
    report msccl "$xml" "$status" "$out"
done
echo "gpu_check: $ran ran, $matched matched, $failed failed, $skipped skipped ($export_dir)"
[ "$ran" -gt 0 ] || { echo "gpu_check: $export_dir has no mscclpp/*.plan.json or msccl/*.xml" >&2; exit 2; }
[ "$failed" -eq 0 ]
