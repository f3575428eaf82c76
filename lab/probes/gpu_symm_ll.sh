#!/usr/bin/env bash
# symm's low-latency kernel (symm_ll.cu) on this machine's GPUs. PARTS (default "test osu small"):
# test: fast_worker --symm-only (every size form against NCCL, graph replays, two streams;
# all-gather and reduce-scatter on the low-latency kernel too);
# ar: the same with symm serving all-reduce alone (MCR_SYMM_OPS=all_reduce);
# bcast: the same with broadcast on the low-latency kernel too (MCR_SYMM_OPS names all four),
# then probe_symm_ll.py --op broadcast;
# fast: fast_worker --quick (every fast path, sub-groups: at 4 GPUs symm on a group of 3);
# osu: OSU all-reduce 4 B to 1 MiB, NCCL and symm, with MCR_SYMM_LL_BYTES=0 (torch's kernels) and
# 1MiB (the low-latency kernel to 1 MiB) alternated ROUNDS times (default 2);
# small: issue 18's point, NCCL against the tuned dispatcher (lab/scripts/gpu_small_ar.sh);
# probe: lab/probes/probe_symm_ll.py (both kernels and NCCL in one process, interleaved; host and GPU
# time per call).
# Logs under $OUT. Run from the repo root on a GPU machine.
set -uo pipefail
. lab/scripts/gpu_env.sh
W=$OUT/symm_ll; mkdir -p "$W"
echo "# $(date -Iseconds) $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1) x$N, tree ${COMMIT:-?}"
MPI="mpirun --allow-run-as-root --oversubscribe -np $N $X -x MCR_SYMM_LL_BYTES"
for part in ${PARTS:-test osu small}; do
  case $part in
  test) TAILN=4 step test 240 $MPI python3 tests/workers/fast_worker.py --symm-only ;;
  ar) MCR_SYMM_OPS=all_reduce TAILN=4 step ar 240 $MPI -x MCR_SYMM_OPS python3 tests/workers/fast_worker.py --symm-only ;;
  bcast)
    export MCR_SYMM_OPS=all_reduce,all_gather,reduce_scatter,broadcast
    TAILN=4 step bcast 240 $MPI -x MCR_SYMM_OPS python3 tests/workers/fast_worker.py --symm-only
    TAILN=20 step bcast_probe 200 torchrun --standalone --nproc_per_node="$N" \
      lab/probes/probe_symm_ll.py --rounds "${PROBE_ROUNDS:-15}" --op broadcast
    unset MCR_SYMM_OPS ;;
  fast) TAILN=4 step fast 300 $MPI python3 tests/workers/fast_worker.py --quick ;;
  osu)
    for r in $(seq "${ROUNDS:-2}"); do
      for ll in 0 1MiB; do
        export MCR_SYMM_LL_BYTES=$ll
        timeout 100 $MPI python3 -m benchmarks.osu_allreduce -d cuda -t bfloat16 -c -m 4:1MiB -f 4 \
          --backend nccl,symm --batch 5 -i 24 -x 2 --max-seconds 0.3 --rounds 3 \
          --csv "$W/osu_ll_$ll.csv" > "$W/osu_r${r}_ll_$ll.log" 2>&1
        echo "round $r MCR_SYMM_LL_BYTES=$ll rc=$?"
        grep -a "^ *[0-9]\+ \+\(symm\|nccl\)" "$W/osu_r${r}_ll_$ll.log"
      done
    done
    unset MCR_SYMM_LL_BYTES ;;
  small) RUNS=${RUNS:-2} bash lab/scripts/gpu_small_ar.sh ;;
  probe) TAILN=40 step probe 200 torchrun --standalone --nproc_per_node="$N" lab/probes/probe_symm_ll.py \
           --rounds "${PROBE_ROUNDS:-30}" ;;
  esac
  tar -cf "$OUT/results.tar" -C "$W" . 2>/dev/null
done
