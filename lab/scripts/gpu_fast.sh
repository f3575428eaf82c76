#!/usr/bin/env bash
# GPU session for the fast paths (issue 3): correctness against NCCL, then OSU sweeps and the
# overlap benchmark, side by side with NCCL. Run from the repo root on the lent machine; logs go
# to $OUT (or ./gpu_out). PART=test|bench|all (default all), or final: the test at 4 GPUs, the
# issue's target numbers and the tuner's table in one lease; check: tests and overlap after a change;
# overlap: the overlap benchmark alone, under both sync modes; ceiling: probe_ceiling.py and the
# GPU dispatch overhead; sync: those again, the API/random/fast tests and the eager all-reduce;
# tune: tests, host cost, the tuner with symmetric-output rules and auto against the libraries;
# confirm: repeated symmetric all-gather sweeps and the overlap benchmark; verify: the tests at the
# final code, small symmetric all-gathers and host cost.
set -uo pipefail
. lab/scripts/gpu_env.sh
MPI="mpirun --allow-run-as-root --oversubscribe -np $N $X"
MPI2="mpirun --allow-run-as-root --oversubscribe -np 2 $X"
step() { local name=$1 limit=$2; shift 2; echo "== $name: $*"; local t0=$SECONDS
  timeout "$limit" "$@" > "$OUT/$name.log" 2>&1; local rc=$?
  echo "   rc=$rc in $((SECONDS - t0)) s"
  grep -E "OK|Error|error|^#|^  |fast backends" "$OUT/$name.log" | grep -v "return func\|deprecat\|Warn\|_new_process" | tail -"${TAILN:-8}"; }
PART=${PART:-all}
{
echo "# device run $(date -Iseconds) on $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1) x$N"
python3 -c 'import torch; print("torch", torch.__version__, "nccl", torch.cuda.nccl.version())'
if [ "$PART" = final ]; then
# One lease: the 4-GPU test, the numbers the issue's targets name, and the tuning table.
step fast_x$N 200 $MPI python3 tests/workers/fast_worker.py --big 1GiB
B="-d cuda -t bfloat16 -c --csv $OUT/osu.csv"
AG="python3 -m benchmarks.osu_allgather $B -m 64KiB:1GiB -f 4 -i 20 -x 3 --batch 5 --max-seconds 0.5 --backend nccl,sdma --symm sdma"
TAILN=14 step osu_allgather_symm 80 $MPI $AG
TAILN=14 step osu_allgather_symm_graph 80 $MPI $AG --graph
AR="python3 -m benchmarks.osu_allreduce $B -m 256:1MiB -f 4 -i 200 -x 20 --batch 20 --max-seconds 0.2 --backend nccl,symm"
TAILN=12 step osu_allreduce 60 $MPI $AR
TAILN=12 step osu_allreduce_graph 60 $MPI $AR --graph
MCR_SYMM_TWO_SHOT_BYTES=4MiB TAILN=12 step osu_allreduce_graph_oneshot 60 $MPI -x MCR_SYMM_TWO_SHOT_BYTES $AR --graph
TAILN=8 step overlap 90 $MPI python3 -m benchmarks.overlap --backend nccl,sdma+symm --reps 7 --csv $OUT/overlap.csv
TAILN=4 step tuner 240 $MPI python3 -m mcr.tuner -d cuda -t bfloat16 -m 4KiB:1GiB -f 4 -i 20 -x 3 --batch 5 --max-seconds 0.25 --backend nccl,sdma,symm --interconnect "NVLink NV18 mesh" --out $OUT/nvidia-h200_np$N
fi
if [ "$PART" = check ]; then
# After a refactor: the tests again (4 GPUs; 2 GPUs chunked), and the overlap benchmark under
# both sync modes (does the barrier kernel's SM cost show in the GEMM?).
step fast_x$N 150 $MPI python3 tests/workers/fast_worker.py --big 256MiB
MCR_SDMA_MAX_BYTES=1MiB MCR_BACKEND=sdma step fast_x2_chunked 100 \
  $MPI2 -x MCR_SDMA_MAX_BYTES -x MCR_BACKEND python3 tests/workers/fast_worker.py --quick
TAILN=6 step overlap_kernel 80 $MPI python3 -m benchmarks.overlap --backend sdma+symm,nccl --reps 9 --csv $OUT/overlap.csv
MCR_SDMA_SYNC=memops TAILN=6 step overlap_memops 80 $MPI -x MCR_SDMA_SYNC python3 -m benchmarks.overlap --backend sdma+symm --reps 9 --csv $OUT/overlap.csv
fi
if [ "$PART" = overlap ]; then
# The overlap benchmark with paired repetitions, both sync modes.
TAILN=6 step overlap_kernel 90 $MPI python3 -m benchmarks.overlap --backend sdma+symm,nccl --reps 15 --csv $OUT/overlap.csv
MCR_SDMA_SYNC=memops TAILN=6 step overlap_memops 90 $MPI -x MCR_SDMA_SYNC python3 -m benchmarks.overlap --backend sdma+symm,nccl --reps 15 --csv $OUT/overlap_memops.csv
fi
if [ "$PART" = ceiling ]; then
# The 400 GB/s question (NOTES.md v9): one pair alone by copy engine and SM kernel, and all-gather
# schedules at 1 GiB; then mcr's host cost per small GPU call against the bare library calls.
TAILN=16 step ceiling 150 $MPI python3 lab/probes/probe_ceiling.py
TAILN=8 step dispatch_overhead_gpu 120 $MPI python3 -m benchmarks.dispatch_overhead -d cuda --rounds 100
fi
if [ "$PART" = sync ]; then
# After synchronous calls went to torch's own synchronous path (NOTES.md v9): the ceiling probe,
# mcr's host cost per call, every op through NCCL sync/async mixed with MPI, the fast tests, and
# the eager small all-reduce sweep.
TAILN=18 step ceiling 150 $MPI python3 lab/probes/probe_ceiling.py
TAILN=12 step dispatch_overhead_gpu 120 $MPI python3 -m benchmarks.dispatch_overhead -d cuda --rounds 100
TAILN=3 step api_gpu 150 $MPI python3 tests/workers/api_worker.py --device cuda --backends nccl,auto --big 16MiB
TAILN=3 step random_gpu 150 $MPI python3 tests/workers/random_worker.py --device cuda --backends nccl,mpi --ops 1500
TAILN=4 step fast_x$N 200 $MPI python3 tests/workers/fast_worker.py --big 256MiB
MCR_SDMA_MAX_BYTES=1MiB MCR_BACKEND=sdma TAILN=4 step fast_x2_chunked 100 \
  $MPI2 -x MCR_SDMA_MAX_BYTES -x MCR_BACKEND python3 tests/workers/fast_worker.py --quick
AR="python3 -m benchmarks.osu_allreduce -d cuda -t bfloat16 -c --csv $OUT/osu.csv -m 256:1MiB -f 4 -i 200 -x 20 --batch 20 --max-seconds 0.2 --backend nccl,symm,auto"
TAILN=24 step osu_allreduce 80 $MPI $AR
fi
if [ "$PART" = tune ]; then
# Symmetric-output rules (NOTES.md v10): the fast tests after the StreamDone change, mcr's host
# cost with a profile, the tuner with a symmetric pass; then, with that table in force, auto
# against nccl and sdma for symmetric and plain all-gather outputs, and the eager all-reduce.
TAILN=4 step fast_x$N 200 $MPI python3 tests/workers/fast_worker.py --big 256MiB
TAILN=12 step dispatch_overhead_gpu 150 $MPI python3 -m benchmarks.dispatch_overhead -d cuda --rounds 100 --profile
TAILN=4 step tuner 300 $MPI python3 -m mcr.tuner -d cuda -t bfloat16 -m 4KiB:1GiB -f 4 -i 20 -x 3 --batch 5 --max-seconds 0.25 --backend nccl,sdma,symm --symm sdma --interconnect "NVLink NV18 mesh" --out $OUT/nvidia-h200_np$N
cp $OUT/nvidia-h200_np$N.yaml mcr/tuning_tables/ && grep -c backend mcr/tuning_tables/nvidia-h200_np$N.yaml
B="-d cuda -t bfloat16 -c --csv $OUT/osu.csv --batch 5 --max-seconds 0.5 -i 20 -x 3"
TAILN=24 step osu_allgather_symm 120 $MPI python3 -m benchmarks.osu_allgather $B -m 64KiB:1GiB -f 4 --backend auto,nccl,sdma --symm sdma
TAILN=14 step osu_allgather 120 $MPI python3 -m benchmarks.osu_allgather $B -m 64KiB:64MiB -f 4 --backend auto,nccl
AR="python3 -m benchmarks.osu_allreduce -d cuda -t bfloat16 -c --csv $OUT/osu.csv -m 256:1MiB -f 4 -i 200 -x 20 --batch 20 --max-seconds 0.2 --backend nccl,symm,auto"
TAILN=24 step osu_allreduce 80 $MPI $AR
fi
if [ "$PART" = confirm ]; then
# The 1.15x margin at 64 MiB across repeated sweeps, and the overlap benchmark at the final commit.
B="-d cuda -t bfloat16 -c --csv $OUT/osu.csv --batch 5 --max-seconds 1 -i 40 -x 3"
for k in 1 2 3; do
TAILN=12 step osu_allgather_symm_$k 120 $MPI python3 -m benchmarks.osu_allgather $B -m 16MiB:1GiB -f 4 --backend nccl,sdma,auto --symm sdma
done
TAILN=6 step overlap 120 $MPI python3 -m benchmarks.overlap --backend sdma+symm,nccl --reps 9 --csv $OUT/overlap.csv
fi
if [ "$PART" = verify ]; then
# The final code: the tests to 1 GiB, memops sync, 2 GPUs chunked; small symmetric all-gathers
# eager (the engine issues by stream id now) and mcr's host cost per call.
TAILN=4 step fast_x$N 300 $MPI python3 tests/workers/fast_worker.py --big 1GiB
MCR_SDMA_SYNC=memops TAILN=4 step fast_x${N}_memops 200 $MPI -x MCR_SDMA_SYNC python3 tests/workers/fast_worker.py --quick
MCR_SDMA_MAX_BYTES=1MiB MCR_BACKEND=sdma TAILN=3 step fast_x2_chunked 100 \
  $MPI2 -x MCR_SDMA_MAX_BYTES -x MCR_BACKEND python3 tests/workers/fast_worker.py --quick
B="-d cuda -t bfloat16 -c --csv $OUT/osu.csv --batch 5 --max-seconds 0.5 -i 40 -x 3"
TAILN=24 step osu_allgather_symm 120 $MPI python3 -m benchmarks.osu_allgather $B -m 4KiB:16MiB -f 4 --backend auto,nccl,sdma --symm sdma
TAILN=12 step dispatch_overhead_gpu 150 $MPI python3 -m benchmarks.dispatch_overhead -d cuda --rounds 100
fi
if [ "$PART" = test ] || [ "$PART" = all ]; then
step fast_x$N 360 $MPI python3 tests/workers/fast_worker.py --big 1GiB
MCR_SDMA_SYNC=memops step fast_x${N}_memops 200 $MPI -x MCR_SDMA_SYNC python3 tests/workers/fast_worker.py --quick
MCR_SDMA_MAX_BYTES=1MiB MCR_BACKEND=sdma step fast_x2_chunked 200 \
  $MPI2 -x MCR_SDMA_MAX_BYTES -x MCR_BACKEND python3 tests/workers/fast_worker.py --quick
TAILN=80 step probe 200 $MPI python3 lab/probes/probe_ce.py
fi
if [ "$PART" = bench ] || [ "$PART" = all ]; then
B="-d cuda -t bfloat16 -c --csv $OUT/osu.csv"
AG="python3 -m benchmarks.osu_allgather $B -m 64KiB:1GiB -f 4 -i 20 -x 3 --batch 5 --max-seconds 0.5 --backend nccl,sdma"
TAILN=14 step osu_allgather 150 $MPI $AG
TAILN=14 step osu_allgather_symm 150 $MPI $AG --symm sdma
TAILN=14 step osu_allgather_symm_graph 150 $MPI $AG --symm sdma --graph
AR="python3 -m benchmarks.osu_allreduce $B -m 256:1MiB -f 4 -i 300 -x 30 --batch 20 --max-seconds 0.3 --backend nccl,symm"
TAILN=16 step osu_allreduce 100 $MPI $AR
TAILN=16 step osu_allreduce_graph 100 $MPI $AR --graph
MCR_SYMM_TWO_SHOT_BYTES=4MiB TAILN=16 step osu_allreduce_graph_oneshot 100 $MPI -x MCR_SYMM_TWO_SHOT_BYTES $AR --graph
TAILN=8 step overlap 200 $MPI python3 -m benchmarks.overlap --backend nccl,sdma,sdma+symm --reps 5 --csv $OUT/overlap.csv
O="$B -m 1MiB:256MiB -f 16 -i 20 -x 3 --batch 5 --max-seconds 0.3 --backend nccl,sdma"
TAILN=8 step osu_reducescatter 100 $MPI python3 -m benchmarks.osu_reducescatter $O
TAILN=8 step osu_alltoall 100 $MPI python3 -m benchmarks.osu_alltoall $O
TAILN=8 step osu_bcast 100 $MPI python3 -m benchmarks.osu_bcast $O
fi
} 2>&1 | tee "$OUT/summary.log"
# $OUT returns at most 8 files: the step logs travel as one archive.
tar czf "$OUT/logs_$PART.tgz" -C "$OUT" $(cd "$OUT" && ls *.log | grep -v summary) && \
  (cd "$OUT" && ls *.log | grep -v summary | xargs rm -f)
