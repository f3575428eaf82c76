#!/usr/bin/env bash
# GPU session for the integrations (issue 11) and the hot path (issue 12), on every GPU of the
# lent machine. Run from the repo root with the git-ignored .whl folder carried (DeepSpeed 0.19.8
# and its pure-Python dependencies, built as the README says); logs go to $OUT.
# PART is one or more of (space-separated, in this order):
#   train  the tuner's table for this GPU count, then benchmarks/train_step.py for DeepSpeed
#          ZeRO-3 and FSDP2 at both shapes, plain NCCL vs mcr (alternated in one process)
#   hot    the gpu-marked pytest suite, mcr's host cost per call, and OSU-style mcr vs NCCL at
#          every size with no table for this GPU count (the 4-GPU table alone in force);
#          `tests` is its first two, `notable` its OSU part (each fits one run call)
#   diag   the small shape again with a second plain copy (the loss yardstick) and, for FSDP2,
#          mcr without the symmetric buffer ring
#   steps  train_step for both frameworks and shapes with the shipped table: plain, a second plain
#          copy (the noise and loss yardstick), mcr, mcr forced to NCCL; PAIRS rounds (default 8)
#          in balanced orders; SHAPES="small" (default "large small") for one shape,
#          FRAMEWORKS="fsdp" (default "fsdp deepspeed") for one framework, PROFILE_STEPS
#          (default 2) profiled steps per configuration for the breakdown; CONFIGS
#          (default plain,plain2,mcr,mcr-nccl) for fewer configurations on a short lease
#   sync   FSDP2 and ZeRO-3, large shape, plain against mcr with sdma's barrier kernel (the
#          default) and with MCR_SDMA_SYNC=memops (no SM use), one process each, alternated
#          kernel memops kernel memops for FSDP2, kernel memops for ZeRO-3: whether the
#          spinning barrier kernel slows the compute beside it (NOTES, "FSDP2 large: where
#          mcr's hidden communication went")
#   profile  MCR_PROFILE=auto against the standalone profile (mcr-standalone): ZeRO-3 large and
#          small and FSDP2 large, plain, mcr, mcr-standalone, 8 rounds in balanced orders
#          (NOTES, "Overlap rules for calls on side streams")
#   keys   do ZeRO-3's all-gather and reduce-scatter addresses repeat step to step (sdma's graph
#          cache), and how do its all-gather outputs behave in torch's symmetric MemPool
#          (lab/probes/probe_zero3_pool.py; on one GPU two ranks share it); on 2+ GPUs also ZeRO-3
#          large plain vs mcr with MCR_SDMA_GRAPHS 64 and 256 (graph captures, drops, replays)
#   host   what mcr's FSDP2 hook costs the host per call: dispatch_overhead --fsdp (FSDP2's own
#          comm objects against mcr's, on one rank)
#   floor  the step with no communication at all: train_step on one GPU (FSDP2 and DeepSpeed
#          skip their collectives in a world of one), both frameworks, SHAPES (default "small
#          large"), plain and plain2, PAIRS rounds (default 4); on an N-GPU machine it runs
#          on GPU 0 of the same host. Not a bound on the N-GPU step: the one rank steps the
#          whole optimizer state (1.2-1.4x a 2-GPU rank's compute on 2x H100, NOTES.md)
# $OUT keeps summary.log (what each step printed last) and results.tar (every file, refreshed
# after each step, so a run cut short still brings back what it made).
set -uo pipefail
. lab/scripts/gpu_env.sh
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=$PWD:/tmp/site
W=/tmp/gpu_work; rm -rf "$W"; mkdir -p "$W"
MPI="mpirun --allow-run-as-root --oversubscribe -np $N $X"
RUN="torchrun --standalone --nproc_per_node=$N"
PART=" ${PART:-train} "
has() { [[ "$PART" == *" $1 "* ]]; }
{
echo "# device run $(date -Iseconds) on $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1) x$N, commit ${COMMIT:-$(git rev-parse --short HEAD 2>/dev/null)}"
python3 -c 'import torch, deepspeed, transformers; print("torch", torch.__version__, "nccl", torch.cuda.nccl.version(), "deepspeed", deepspeed.__version__, "transformers", transformers.__version__)'
if has train; then
TAILN=4 step tuner 200 $MPI python3 -m mcr.tuner -d cuda -t bfloat16 -m 4KiB:1GiB -f 4 -i 20 -x 3 \
  --batch 5 --max-seconds 0.25 --backend nccl,sdma,sdma_pipe,symm --symm sdma --interconnect "NVLink" \
  --out "$W/nvidia-h200_np$N"
[ -f "$W/nvidia-h200_np$N.yaml" ] && export MCR_TUNING_TABLE="$W/nvidia-h200_np$N.yaml"
for shape in small large; do
  for fw in deepspeed fsdp; do
    TAILN=12 step "train_${fw}_$shape" 150 $RUN benchmarks/train_step.py --framework $fw \
      --shape $shape --pairs 5 --steps 5 --warmup 2 --out "$W"
  done
done
fi
if has hot || has tests; then
TAILN=6 step gpu_tests 330 python3 -m pytest -q -m gpu -p no:cacheprovider tests
TAILN=12 step dispatch_overhead_gpu 100 $MPI python3 -m benchmarks.dispatch_overhead -d cuda --rounds 100
fi
if has hot || has notable; then
B="-d cuda -t bfloat16 -c --csv $W/osu_notable.csv -i 24 -x 2 --batch 5 --max-seconds 0.3 --rounds 5"
for op in osu_allreduce osu_allgather osu_reducescatter osu_bcast osu_alltoall; do
  MCR_TUNING_TABLE=mcr/tuning_tables/nvidia-h200_np4.yaml TAILN=30 step "${op}_notable" 160 \
    $MPI -x MCR_TUNING_TABLE python3 -m benchmarks.$op $B -m 4:1GiB -f 4 --backend nccl,auto
done
fi
if has diag; then
TAILN=14 step diag_fsdp_small 150 $RUN benchmarks/train_step.py --framework fsdp --shape small \
  --configs plain,plain2,mcr,mcr-nccl,mcr-plainbuf --pairs 5 --steps 5 --warmup 2 --out "$W"
TAILN=14 step diag_deepspeed_small 150 $RUN benchmarks/train_step.py --framework deepspeed \
  --shape small --configs plain,plain2,mcr --pairs 5 --steps 5 --warmup 2 --out "$W"
fi
if has steps; then
PAIRS=${PAIRS:-8}
for shape in ${SHAPES:-large small}; do
  for fw in ${FRAMEWORKS:-fsdp deepspeed}; do
    TAILN=3 step "steps_${fw}_$shape" $((50 + 11 * PAIRS)) $RUN benchmarks/train_step.py \
      --framework $fw --shape $shape --configs "${CONFIGS:-plain,plain2,mcr,mcr-nccl}" --pairs $PAIRS \
      --steps 3 --warmup 2 --profile-steps "${PROFILE_STEPS:-2}" --out "$W"
  done
done
fi
if has sync; then
for run in "fsdp kernel 1" "fsdp memops 1" "fsdp kernel 2" "fsdp memops 2" "deepspeed kernel 1" \
           "deepspeed memops 1"; do
  set -- $run
  MCR_SDMA_SYNC=$2 TAILN=3 step "sync_$1_$2_$3" 150 $RUN benchmarks/train_step.py --framework $1 \
    --shape large --configs plain,mcr --pairs 6 --steps 3 --warmup 2 --out "$W/sync_$2_$3"
  grep -a '"ratio_median"\|"compute_ms"\|"comm_exposed_ms"' "$W/sync_$1_$2_$3.log" | tr -d ' ,' \
    | paste -sd' '
done
fi
if has profile; then
for run in "deepspeed large" "deepspeed small" "fsdp large"; do
  set -- $run
  TAILN=3 step "profile_$1_$2" 150 $RUN benchmarks/train_step.py --framework $1 --shape $2 \
    --configs plain,mcr,mcr-standalone --pairs 8 --steps 3 --warmup 2 --out "$W/profile"
  grep -a '"ratio_median"\|"ratio_min"\|"ratio_max"' "$W/profile_$1_$2.log" | tr -d ' ,' \
    | paste -sd' '
  grep -a "^all_gather\|^reduce_scatter" "$W/profile_$1_$2.log"
done
fi
if has keys; then
if [ "$N" -ge 2 ]; then
TAILN=8 step zero3_pool 150 $RUN -m lab.probes.probe_zero3_pool --rendezvous --blocks 2 --steps 2 \
  --dump "$W/zero3_keys_np$N.json"
for g in 64 256; do
  MCR_SDMA_GRAPHS=$g TAILN=3 step "steps_deepspeed_large_g$g" 190 $RUN benchmarks/train_step.py \
    --framework deepspeed --shape large --configs plain,mcr --pairs 4 --steps 3 --warmup 2 \
    --out "$W/g$g"
  grep -a "sdma, group" "$W/steps_deepspeed_large_g$g.log"
done
else
# DeepSpeed skips all-gathers in a world of one: two ranks share GPU 0, over mcr's staged MPI.
MCR_BACKEND=mpi MCR_MPI_CUDA_AWARE=0 TAILN=40 step zero3_keys 420 mpirun --allow-run-as-root \
  --oversubscribe -np 2 $X -x MCR_BACKEND -x MCR_MPI_CUDA_AWARE python3 -m lab.probes.probe_zero3_pool \
  --backend gloo --mcr --dtype float32 --shape large --blocks 3 --steps 2 --dump "$W/zero3_keys.json"
fi
fi
if has host; then
TAILN=12 step dispatch_overhead_fsdp 150 $RUN benchmarks/dispatch_overhead.py --fsdp -d cuda \
  --rounds 150
fi
if has floor; then
for shape in ${SHAPES:-small large}; do
  for fw in fsdp deepspeed; do
    CUDA_VISIBLE_DEVICES=0 TAILN=3 step "floor_${fw}_$shape" $((60 + 20 * ${PAIRS:-4})) \
      torchrun --standalone --nproc_per_node=1 benchmarks/train_step.py --framework $fw \
      --shape $shape --configs plain,plain2 --pairs "${PAIRS:-4}" --steps 3 --warmup 2 \
      --out "$W/floor"
  done
done
fi
} 2>&1 | tee "$OUT/summary.log"
tar -cf "$OUT/results.tar" -C "$W" .
