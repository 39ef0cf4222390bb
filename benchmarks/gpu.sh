#!/usr/bin/env bash
# The GPU checks in one go, for a machine with a CUDA GPU and torch + triton installed (run from the repository
# root), most wanted first: the GPU tests, the benchmark size (decoding at batch 1, then at batch 16), serving
# (where transformers' serving extra is installed), the paper's 1.5B shape, compiled training and decoding
# steps, eager decoding at the 1.5B shape with each depth-mixing implementation, the baselines' training steps
# with the field's kernels (fla-core, Liger-Kernel) against ours, the ladder's smoke study, the
# decoding profile and compiled decoding at the 1.5B shape. Each step has a time limit, and a step that would not
# fit in the time left (GPU_BUDGET_S, default 560 s) is skipped, so the earlier results always come back.
# GPU_STEPS (comma-separated step names) runs those steps alone, in this file's order.
#
#   benchmarks/gpu.sh OUT_DIR   -> OUT_DIR/log.txt,
#                                  OUT_DIR/{bench-size,decode16,b15,compiled,decode-impls,library-kernels,
#                                  library-kernels-compiled,b15-compiled-decode}/
#                                  benchmark.{json,md}, OUT_DIR/serving/serving.{json,md},
#                                  OUT_DIR/ladder-smoke/cells.tar.gz,
#                                  OUT_DIR/profile/{profile.md,profile.json,trace-*.json.gz}
#
# Wheels in .whl/ are installed first (carried to a machine that cannot fetch them): transformers at the project's
# minimum or newer where the machine's is older, and the baselines' kernel libraries, fla-core and liger-kernel.
set -u
out=${1:?usage: benchmarks/gpu.sh OUT_DIR}
budget=${GPU_BUDGET_S:-560}
mkdir -p "$out"
export PYTHONPATH="$PWD/src:$PWD" PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
exec > >(tee "$out/log.txt") 2>&1

if ls .whl/*.whl >/dev/null 2>&1; then  # packages the machine lacks (fla-core, liger-kernel, a newer transformers)
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
        && export PYTHONPATH="/tmp/site:$PYTHONPATH"
fi
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm --format=csv
python3 -c 'import torch, triton, transformers; print("torch", torch.__version__, "triton", triton.__version__,
"transformers", transformers.__version__, torch.cuda.get_device_name())'
python3 -c 'import importlib.metadata as m
for name in ("fla-core", "liger-kernel"):
    try: print(name, m.version(name))
    except m.PackageNotFoundError: print(name, "not installed: its kernels'"'"' tests and candidates skip or fail")'

step() {  # step NAME LIMIT_S COMMAND...: run COMMAND under LIMIT_S seconds if that fits in the budget left
    local name=$1 limit=$2; shift 2
    [[ -z ${GPU_STEPS:-} || ",$GPU_STEPS," == *",$name,"* ]] || return 0
    if (( SECONDS + limit > budget )); then
        echo "== $name: skipped, ${limit} s would not fit in the $((budget - SECONDS)) s left"
        return
    fi
    echo "== $name (at ${SECONDS} s, limit ${limit} s)"
    timeout "$limit" "$@"
    echo "== $name: exit $? at ${SECONDS} s"
}

parallel=$(python3 -c 'import xdist' 2>/dev/null && echo "-n 8")
step tests 150 python3 -m pytest -p no:cacheprovider -q -rs $parallel tests/ops tests/model
# the benchmark size (launch-bound on a GPU at batch 1): ~30 s
step bench-size 90 python3 -m benchmarks --reps 5 --decode-tokens 16 \
    --methods qwen3,vanilla,depth_attention,depth_attention:reference --out "$out/bench-size"
# decoding at batch 16, where the mixing's rows are no longer a handful: ~20 s
step decode16 60 python3 -m benchmarks --phases decode --decode-batch 16 --reps 5 --decode-tokens 16 \
    --methods vanilla,depth_attention --out "$out/decode16"
# depthattn serve under 1, 4 and 16 clients, Depth-Attention against vanilla (needs fastapi and uvicorn)
if python3 -c 'import fastapi, uvicorn' 2>/dev/null; then
    step serving 150 python3 -m benchmarks.serving --device cuda --rounds 3 --out "$out/serving"
else
    echo "== serving: skipped, transformers' serving extra (fastapi, uvicorn) is not installed"
fi
# the paper's 1.5B shape (stride 24 is the default D/2), batch 4 x 2048 tokens: ~50 s on an H200
step b15 120 python3 -m benchmarks --layers 48 --hidden 1536 --intermediate 4096 --heads 24 --kv-heads 6 \
    --seq 2048 --batch 4 --context 2048 --reps 5 --decode-tokens 16 --methods qwen3,vanilla,depth_attention \
    --out "$out/b15"
# inductor-compiled training steps at the benchmark size, batch 8 x 2048 (~120 s, mostly compilation),
# and compiled decoding steps into a StaticCache at context 2048
step compiled 240 python3 -m benchmarks --seq 2048 --batch 8 --phases train,decode,memory --reps 10 --compile \
    --methods qwen3,vanilla,depth_attention --out "$out/compiled"
# eager decoding at the 1.5B shape with each depth-mixing implementation, interleaved: ~50 s
b15_decode=(--layers 48 --hidden 1536 --intermediate 4096 --heads 24 --kv-heads 6 --context 2048)
step decode-impls 100 python3 -m benchmarks "${b15_decode[@]}" --phases decode --reps 5 --decode-tokens 16 \
    --methods qwen3,vanilla,depth_attention,depth_attention:triton,depth_attention:reference \
    --out "$out/decode-impls"
# the baselines against the field's kernels (fla-core's and Liger-Kernel's, from .whl/; the tests step compares their
# outputs with the references'): training steps at the 1.5B shape, batch 2 x 2048, bf16, eager (~60 s), then the
# references compiled (~200 s, mostly compilation)
b15_train=(--layers 48 --hidden 1536 --intermediate 4096 --heads 24 --kv-heads 6 --seq 2048 --batch 2 --phases train)
step library-kernels 150 python3 -m benchmarks "${b15_train[@]}" --reps 5 \
    --methods vanilla,attnres_paper:reference,attnres_paper:fla,attnres_paper:liger,mhc:reference,mhc:liger \
    --out "$out/library-kernels"
step library-kernels-compiled 300 python3 -m benchmarks "${b15_train[@]}" --reps 5 --compile \
    --methods vanilla,attnres_paper:reference,mhc:reference --out "$out/library-kernels-compiled"
# the ladder's smoke study (configs/study/ladder_smoke.toml), three cells at a time on the one GPU (~7 min: MoDA at
# 12 x 512 takes ~1 s a step beside two others); the cells it writes (docs/results/study/cells) come back as one
# archive, also when the time limit stopped it
start_mark=$(mktemp)
step ladder-smoke 420 python3 -m depthattn study configs/study/ladder_smoke.toml --workers 3 --threads 4
if [[ -z ${GPU_STEPS:-} || ",$GPU_STEPS," == *",ladder-smoke,"* ]]; then
    mkdir -p "$out/ladder-smoke"
    find docs/results/study/cells -type f -newer "$start_mark" -print0 \
        | tar -czf "$out/ladder-smoke/cells.tar.gz" --null -T -
fi
# where a decoding step's time goes at the 1.5B shape (torch.profiler): ~80 s
step profile 120 python3 -m benchmarks.profile_decode "${b15_decode[@]}" --decode-tokens 8 \
    --methods vanilla,depth_attention,depth_attention:triton,depth_attention:reference --out "$out/profile"
# compiled decoding steps (inductor, a StaticCache) at the 1.5B shape: what eager decoding's host time leaves out
step b15-compiled-decode 300 python3 -m benchmarks "${b15_decode[@]}" --phases decode --compile --reps 5 \
    --decode-tokens 16 --methods vanilla,depth_attention --out "$out/b15-compiled-decode"
for f in "$out"/*/benchmark.md "$out"/serving/serving.md "$out"/profile/profile.md; do [ -f "$f" ] && { echo "== $f"; cat "$f"; }; done
