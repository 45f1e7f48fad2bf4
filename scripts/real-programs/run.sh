#!/usr/bin/env bash
# Run each real program plainly and under `memtrack record`, on the CPU: exit codes and
# stdout (losses) must match; then summary, modules, plot and PyTorch's MemoryTracker.load
# on each file. Needs torchvision, transformers and accelerate on PYTHONPATH (README.md).
#
#   scripts/real-programs/run.sh [OUT_DIR]      (MEMTRACK, PYTHON override the defaults)
#
# With COMPARE_OBSERVERS=1 each program is also recorded with `--observer python` and
# compare_observers.py says whether the two files' peaks and module tables are equal.
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
out=${1:-/tmp/memtrack-real-programs}
memtrack=${MEMTRACK:-$root/target/release/memtrack}
py=${PYTHON:-$HOME/.cache/memtrack/venv/bin/python}
mkdir -p "$out"
status=0
while read -r name args; do
    [ -z "$name" ] && continue
    d="$out/$name"; rm -rf "$d"; mkdir -p "$d"
    # shellcheck disable=SC2086
    (cd "$d" && "$py" "$here"/$args >plain.out 2>plain.err); plain_rc=$?
    # shellcheck disable=SC2086
    (cd "$d" && "$memtrack" record -o run.pkl -- "$py" "$here"/$args >rec.out 2>rec.err); rec_rc=$?
    verdict=ok
    [ "$plain_rc" = "$rec_rc" ] || verdict="exit $plain_rc plain, $rec_rc recorded"
    cmp -s "$d/plain.out" "$d/rec.out" || verdict="$verdict; stdout differs"
    "$memtrack" summary "$d/run.pkl" >"$d/summary.txt" 2>&1 || verdict="$verdict; summary failed"
    "$memtrack" modules "$d/run.pkl" --depth 3 >"$d/modules.txt" 2>&1 || verdict="$verdict; modules failed"
    "$memtrack" plot "$d/run.pkl" -o "$d/run.svg" >/dev/null 2>&1 || verdict="$verdict; plot failed"
    "$py" "$root/tests/py/check_memory_tracker.py" "$d/run.pkl" >"$d/memory_tracker.txt" 2>&1 \
        || verdict="$verdict; MemoryTracker.load failed"
    if [ -n "${COMPARE_OBSERVERS:-}" ]; then
        # shellcheck disable=SC2086
        (cd "$d" && "$memtrack" record --observer python -o mode.pkl -- "$py" "$here"/$args >/dev/null 2>&1)
        "$py" "$here/compare_observers.py" "$memtrack" "$d/mode.pkl" "$d/run.pkl" >"$d/observers.txt" 2>&1 \
            || verdict="$verdict; observers differ"
        cat "$d/observers.txt"
    fi
    echo "$name: $verdict ($(tail -1 "$d/rec.err"))"
    [ "$verdict" = ok ] || status=1
done <<'PROGRAMS'
resnet18      resnet18_sgd.py
gpt2          gpt2_adamw.py
gpt2-ckpt     gpt2_adamw.py --checkpointing
gpt2-bf16     gpt2_adamw.py --bf16
trainer       hf_trainer.py
autocast      autocast_bf16.py
ckpt          checkpoint_mlp.py
ckpt-reentr   checkpoint_mlp.py --reentrant
dataloader    dataloader_workers.py
compile       compile_convnet.py
compile-meth  compile_convnet.py --how method
compile-rn18  compile_models.py resnet18
compile-gpt2  compile_models.py gpt2
t5-generate   t5_generate.py
bert-mlm      bert_mlm.py
PROGRAMS
exit $status
