#!/usr/bin/env bash
# Issue 13 on a one-GPU lease, as a stand-in for "each GPU a node of one": 2 ranks share the one
# GPU, each declared a node of its own (MCR_LOCAL_SIZE=1), so no NCCL or copy-engine path can
# serve them and every call is host-staged. Parts (PARTS, default all):
#   wait  mcr's MPI all-reduce with blocking collectives from MCR_MPI_BLOCKING_BYTES (8 MiB, the default)
#         against all non-blocking (the old path: the threshold at 2 GiB), alternated A B A B on
#         CPU tensors, A B on GPU tensors, each beside bare MPI_Allreduce (probes/probe_mpi_wait.py);
#   osu   the staged MPI path on one core (mpi) against MPI lanes and Gloo lanes, interleaved in
#         rounds inside each run, CPU and GPU tensors;
#   tune  the tuner's pick among them for CPU tensors on this host's cores;
#   hier  the hierarchical collectives bit-exact on GPU tensors (4 ranks as 2 nodes of 2).
# Logs and CSVs go to $OUT.
set -uo pipefail
PARTS=${PARTS:-"wait osu tune hier"}
. benchmarks/gpu_env.sh
# The single-core baseline is MPI's staged path (a CUDA-aware MPI would read device memory).
export MCR_LOCAL_SIZE=1 MCR_MPI_CUDA_AWARE=0
X="$X -x MCR_LOCAL_SIZE -x MCR_MPI_CUDA_AWARE"
MPI="mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2 $X"
LANES=mpi,mpi_lanes2,mpi_lanes4,gloo,gloo_lanes2,gloo_lanes4,gloo_lanes8
echo "# $(date -Iseconds) $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1), $(nproc) cores, commit ${COMMIT:-?}"
python3 -c 'from mpi4py import MPI; print("MPI thread level", MPI.Query_thread(), "of", MPI.THREAD_MULTIPLE, MPI.Get_library_version().splitlines()[0])'
T0=$SECONDS
if [[ $PARTS == *wait* ]]; then
  for ab in "cpu new" "cpu old" "cpu new" "cpu old" "cuda new" "cuda old"; do
    set -- $ab; th=8MiB; [[ $2 == old ]] && th=2GiB
    echo "== $1, MCR_MPI_BLOCKING_BYTES=$th ($2)"
    MCR_BACKEND=mpi MCR_MPI_BLOCKING_BYTES=$th $MPI -x MCR_BACKEND -x MCR_MPI_BLOCKING_BYTES \
      python3 probes/probe_mpi_wait.py --sizes 65536,262144,1048576,4194304,16777216,67108864 \
      --iters 10 --rounds 3 $([[ $1 == cuda ]] && echo --cuda) 2>&1 | grep -av "^mcr:" | tail -7
  done > "$OUT/mpi_wait.log"
  echo "mpi wait rc=$? at $((SECONDS - T0)) s"; cat "$OUT/mpi_wait.log"
fi
for dev in ${DEVS:-cpu cuda}; do
  [[ $PARTS == *osu* ]] || break
  # MCR_BACKEND=mpi: the result check's own all-reduce goes to MPI too (no NCCL: one GPU)
  MCR_BACKEND=mpi $MPI -x MCR_BACKEND python3 -m benchmarks.osu_allreduce -d $dev -t float32 -m 64KiB:64MiB -f 4 -i 20 -x 3 \
    --backend $LANES --rounds 5 --max-seconds 1.5 -c --csv "$OUT/lanes_$dev.csv" > "$OUT/lanes_$dev.log" 2>&1
  echo "osu all_reduce $dev rc=$? at $((SECONDS - T0)) s"; grep -E "^#|^ +[0-9]" "$OUT/lanes_$dev.log" | tail -n 45
done
[[ $PARTS == *tune* ]] && $MPI python3 -m mcr.tuner -d cpu --ops all_reduce -m 4KiB:64MiB -i 10 --rounds 3 \
  --backend gloo,mpi,mpi_lanes2,mpi_lanes4,mpi_lanes8,gloo_lanes2,gloo_lanes4,gloo_lanes8 \
  --out "$OUT/cpu_2x1" > "$OUT/tune.log" 2>&1 && { echo "tune at $((SECONDS - T0)) s"; python3 -m mcr.tuner show "$OUT/cpu_2x1.yaml"; }
[[ $PARTS == *hier* ]] && MCR_LOCAL_SIZE=2 mpirun --allow-run-as-root --oversubscribe --bind-to none -np 4 $X \
  -x MCR_TUNING_TABLE="$PWD/benchmarks/hier_parts_cuda.yaml" -x MCR_HIER_CHUNK_BYTES=256KiB \
  python3 tests/workers/hier_worker.py --device cuda --flat mpi,mpi_lanes2,gloo_lanes2 --ops 200 \
  --expect all_gather=hier,reduce_scatter=hier > "$OUT/hier_cuda.log" 2>&1
echo "hier cuda rc=$? at $((SECONDS - T0)) s"; grep -E "OK|Error" "$OUT/hier_cuda.log" | head -8
