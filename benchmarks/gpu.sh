#!/usr/bin/env bash
# mcr's benchmarks on this machine's GPUs (one rank per GPU), each part's log and results in
# its own folder under $OUT (default results/<date>_<gpu>x<count>).
#
#   bash benchmarks/gpu.sh                      # PARTS="osu decode"
#   PARTS="osu decode overlap train" bash benchmarks/gpu.sh
#
# Parts:
#   osu      OSU-style sweeps of every collective, mcr's choice (auto) beside plain NCCL, bf16,
#            4 B to 256 MiB, eager calls and replays of a CUDA graph (GRAPH=0: eager only)
#   decode   tensor-parallel decode (benchmarks/decode.py), 8B-like and 70B-slice shapes,
#            BATCHES (default 1,16,64), eager and in a CUDA graph; DeepSpeed AutoTP eager too
#            where DeepSpeed imports
#   overlap  the standard overlap benchmark: GEMMs beside 256 MiB all-gathers
#   train    FSDP2 and DeepSpeed ZeRO-3 training steps, the large shape (benchmarks/train_step.py)
#   moe      DeepSpeed-MoE expert parallelism (benchmarks/moe.py), the large shape: decode-size
#            forwards (64, 256 tokens a rank) and training steps (512, 4096), top-2, capacity
#            1.0 and drop-less with uneven splits (needs DeepSpeed)
#   overhead host time mcr adds per call (benchmarks/dispatch_overhead.py: NCCL and symm calls)
#            and its torch.distributed backend (benchmarks/backend_overhead.py)
# NVLink multicast stays off (shared hosts): NCCL_NVLS_ENABLE=0 and the like are set here.
set -euo pipefail
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
PY=${PYTHON:-python3}
N=$("$PY" -c 'import torch; print(torch.cuda.device_count() if torch.cuda.is_available() else 0)')
if [ "$N" -lt 2 ]; then
  echo "benchmarks/gpu.sh: needs 2 or more GPUs on this machine, found $N" >&2
  exit 2
fi
GPU=$("$PY" -c 'import torch, re; print(re.sub(r"[^a-z0-9]+", "", torch.cuda.get_device_name(0).lower().replace("nvidia", "")))')
OUT=${OUT:-results/$(date +%F)_${GPU}x$N}
PARTS=${PARTS:-osu decode}
BATCHES=${BATCHES:-1,16,64}
RUN=("$PY" -m torch.distributed.run --standalone --nproc_per_node="$N")
mkdir -p "$OUT"
echo "mcr benchmarks: $N x $GPU, parts: $PARTS, results in $OUT"

part() {   # part NAME COMMAND...: run it, log to $OUT/NAME/log.txt, say how it went
  local name=$1; shift
  mkdir -p "$OUT/$name"
  local t0=$SECONDS
  if "$@" > "$OUT/$name/log.txt" 2>&1; then
    echo "  $name: done in $((SECONDS - t0)) s ($OUT/$name/log.txt)"
  else
    echo "  $name: FAILED after $((SECONDS - t0)) s; last lines of $OUT/$name/log.txt:"
    tail -15 "$OUT/$name/log.txt" | sed 's/^/    /'
  fi
}

osu() {
  for op in allreduce allgather reducescatter alltoall bcast; do
    "${RUN[@]}" -m benchmarks.osu_$op -d cuda -t bfloat16 -m 4:256MiB -f 4 -i 50 -x 5 -c \
      --backend auto,nccl --rounds 3 --max-seconds 0.5 --csv "$OUT/osu/osu.csv"
    if [ "${GRAPH:-1}" = 1 ] && [ "$op" = allreduce ]; then
      "${RUN[@]}" -m benchmarks.osu_$op -d cuda -t bfloat16 -m 1KiB:4MiB -f 4 -i 20 -x 3 \
        --backend auto,nccl --rounds 3 --batch 50 --graph --csv "$OUT/osu/osu_graph.csv"
    fi
  done
}

decode() {
  for shape in 8b 70b; do
    "${RUN[@]}" -m benchmarks.decode --shape $shape --batch "$BATCHES" --mode graph,eager \
      --out "$OUT/decode"
  done
  if "$PY" -c 'import deepspeed' 2>/dev/null; then
    "${RUN[@]}" -m benchmarks.decode --impl deepspeed --shape 8b --batch 1,16 --mode eager \
      --steps 16 --out "$OUT/decode"
  else
    echo "DeepSpeed is not installed: its AutoTP decode is left out"
  fi
}

overhead() {
  "${RUN[@]}" -m benchmarks.dispatch_overhead -d cuda --rounds 100
  "${RUN[@]}" -m benchmarks.backend_overhead -d cuda
}

for p in $PARTS; do
  case $p in
    osu) part osu osu ;;
    decode) part decode decode ;;
    overlap) part overlap "${RUN[@]}" -m benchmarks.overlap --backend nccl,auto,auto+symm ;;
    train)
      part train "${RUN[@]}" -m benchmarks.train_step --framework fsdp --shape large \
        --out "$OUT/train"
      part train_zero3 "${RUN[@]}" -m benchmarks.train_step --framework deepspeed \
        --shape large --out "$OUT/train" ;;
    moe)
      part moe_decode "${RUN[@]}" -m benchmarks.moe --shape large --tokens 64,256 --k 2 \
        --capacity 1.0,uneven --step decode --out "$OUT/moe_decode"
      part moe_train "${RUN[@]}" -m benchmarks.moe --shape large --tokens 512,4096 --k 2 \
        --capacity 1.0,uneven --step train --out "$OUT/moe_train" ;;
    overhead) part overhead overhead ;;
    *) echo "benchmarks/gpu.sh: unknown part '$p' (osu, decode, overlap, train, moe, overhead)" >&2
       exit 2 ;;
  esac
done
grep -h "mcr .*x \[" "$OUT"/decode/log.txt "$OUT"/moe_*/log.txt 2>/dev/null | sed 's/^/  /' \
  || true
