#!/usr/bin/env bash
# Issue 13 on a one-GPU lease, as a stand-in for "each GPU a node of one": 2 ranks share the one
# GPU, each declared a node of its own (MCR_LOCAL_SIZE=1), so no NCCL or copy-engine path can
# serve them and every call is host-staged MPI; what is compared is the staged path on one core
# (mpi) against the lanes (mpi_lanes2/4/8), interleaved in rounds inside each run. Then the
# tuner picks the lane count for CPU tensors on this host's cores, and the hierarchical
# collectives run bit-exact on GPU tensors (4 ranks as 2 nodes of 2, parts over MPI staging).
# Logs and CSVs go to $OUT.
set -uo pipefail
PARTS=${PARTS:-"osu tune hier"}
. benchmarks/gpu_env.sh
# The single-core baseline is MPI's staged path (a CUDA-aware MPI would read device memory).
export MCR_LOCAL_SIZE=1 MCR_MPI_CUDA_AWARE=0
X="$X -x MCR_LOCAL_SIZE -x MCR_MPI_CUDA_AWARE"
MPI="mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2 $X"
echo "# $(date -Iseconds) $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1), $(nproc) cores, commit ${COMMIT:-?}"
python3 -c 'from mpi4py import MPI; print("MPI thread level", MPI.Query_thread(), "of", MPI.THREAD_MULTIPLE, MPI.Get_library_version().splitlines()[0])'
T0=$SECONDS
for dev in ${DEVS:-cuda cpu}; do
  [[ $PARTS == *osu* ]] || break
  # MCR_BACKEND=mpi: the result check's own all-reduce goes to MPI too (no NCCL: one GPU)
  MCR_BACKEND=mpi $MPI -x MCR_BACKEND python3 -m benchmarks.osu_allreduce -d $dev -t float32 -m 64KiB:64MiB -f 4 -i 20 -x 3 \
    --backend mpi,mpi_lanes2,mpi_lanes4,mpi_lanes8 --rounds 5 --max-seconds 1.5 -c \
    --csv "$OUT/lanes_$dev.csv" > "$OUT/lanes_$dev.log" 2>&1
  echo "osu all_reduce $dev rc=$? at $((SECONDS - T0)) s"; tail -n 30 "$OUT/lanes_$dev.log"
done
[[ $PARTS == *tune* ]] && $MPI python3 -m mcr.tuner -d cpu --ops all_reduce -m 4KiB:64MiB -i 10 --rounds 3 \
  --backend gloo,mpi,mpi_lanes2,mpi_lanes4,mpi_lanes8 --out "$OUT/cpu_2x1" > "$OUT/tune.log" 2>&1
echo "tune rc=$? at $((SECONDS - T0)) s"; python3 -m mcr.tuner show "$OUT/cpu_2x1.yaml"
[[ $PARTS == *hier* ]] && MCR_LOCAL_SIZE=2 mpirun --allow-run-as-root --oversubscribe --bind-to none -np 4 $X \
  -x MCR_TUNING_TABLE="$PWD/benchmarks/hier_parts_cuda.yaml" -x MCR_HIER_CHUNK_BYTES=256KiB \
  python3 tests/workers/hier_worker.py --device cuda --flat mpi,mpi_lanes2 --ops 200 \
  --expect all_gather=hier,reduce_scatter=hier > "$OUT/hier_cuda.log" 2>&1
echo "hier cuda rc=$? at $((SECONDS - T0)) s"; grep -E "OK|Error" "$OUT/hier_cuda.log" | head -8
