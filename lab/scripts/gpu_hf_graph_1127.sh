#!/usr/bin/env bash
# 2026-11-27 (fourth session): HF tp_plan decode through the mcr backend, captured in CUDA
# graphs, mcr vs NCCL vs no communication in one process (lab/probes/hf_tp_graph.py); host
# cost before (29e1737, lab/tmp_old, not committed) and after the hot-path trims, alternated;
# GPU correctness workers; changing sizes on the host's CPUs.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
N=$(python3 -c 'import torch; print(torch.cuda.device_count())')
nvidia-smi -L | tee -a $OUT/summary.txt
R="python3 -m torch.distributed.run --standalone --nproc_per_node=$N"
R2="python3 -m torch.distributed.run --standalone --nproc_per_node=2"
M="mpirun -n $N --oversubscribe --allow-run-as-root"
M2="mpirun -n 2 --oversubscribe --allow-run-as-root"
run() { local name=$1 lim=$2; shift 2; local t0=$(date +%s); timeout $lim "$@" >> $OUT/$name.log 2>&1
        echo "$name rc=$? $(( $(date +%s) - t0 )) s" | tee -a $OUT/summary.txt; }
export PYTHONPATH=$PWD
CK=/tmp/hf8b
[ -d $CK ] || run hf_graph 120 python3 lab/probes/hf_tp_graph.py make $CK 8
run hf_graph 240 $R lab/probes/hf_tp_graph.py $CK --batches 1,16 --rounds 7 --reps 30
[ -n "${ONLY_HF:-}" ] && { cat $OUT/summary.txt; exit 0; }
run fast 120 $M python3 tests/workers/fast_worker.py --quick
run special_gpu 90 $M python3 tests/workers/special_worker.py --device cuda \
    --backends nccl,mpi,sdma,symm,auto
run changing 60 $M2 python3 -m benchmarks.dispatch_overhead --changing 3000 --rounds 5
run changing 60 $M2 python3 -m benchmarks.dispatch_overhead --changing 500 --step 1024 --rounds 5
for v in old new new old; do
  if [ $v = old ]; then P=$PWD/lab/tmp_old; else P=$PWD; fi
  echo "== $v" | tee -a $OUT/overhead.log >> $OUT/overhead_cpu.log
  run overhead 60 env PYTHONPATH=$P $R -m benchmarks.dispatch_overhead -d cuda --rounds 30
  run overhead_cpu 60 env PYTHONPATH=$P $R2 -m benchmarks.dispatch_overhead --rounds 60
done
grep -h "OK\|EXPECTED\|Error\|FAILED" $OUT/*.log | cut -c1-300 | sort | uniq -c | sort -rn | head -40 > $OUT/digest.txt
cat $OUT/summary.txt
