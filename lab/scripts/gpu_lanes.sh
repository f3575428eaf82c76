#!/usr/bin/env bash
# Issue 13 on a one-GPU lease, as a stand-in for "each GPU a node of one": 2 ranks share the one
# GPU, each declared a node of its own (MCR_LOCAL_SIZE=1), so no NCCL or copy-engine path can
# serve them and every call is host-staged. Parts (PARTS, default all):
#   wait  mcr's MPI all-reduce with MCR_MPI_BLOCKING_BYTES at $WAIT_NEW (default 2 MiB, mcr's) against
#         $WAIT_OLD (default 2 GiB: all non-blocking), alternated A B A B on CPU tensors, A B on
#         GPU tensors (x $WAIT_REPS, default 1), each beside bare MPI_Allreduce
#         (lab/probes/probe_mpi_wait.py) at $WAIT_SIZES (default 64 KiB..64 MiB);
#   osu   the staged MPI path on one core (mpi) against MPI lanes and Gloo lanes, interleaved in
#         rounds inside each run, CPU and GPU tensors;
#   tune  the tuner's pick among them on this host's cores (TUNE_DEVS: cpu, cuda or both);
#   hier  the hierarchical collectives bit-exact on GPU tensors (4 ranks as 2 nodes of 2);
#   ab    this tree's $AB_FILE (new; default mcr/backends/gloo_lanes.py) against the file
#         $AB_OLD (a previous version, swapped in for its runs), alternated 3 x A B: OSU
#         all-reduce on $AB_DEV tensors (default cuda) through mpi and $AB_BACKENDS (default
#         the Gloo lanes);
#   test  the `gpu` tests that run on one GPU (host-staged paths against torch);
#   bare  a bare blocking MPI_Allreduce (staged through pinned memory for GPU tensors) beside
#         MPI's non-blocking form, mcr's `mpi` and `mpi_lanesN` (lab/probes/probe_mpi_wait.py), CPU
#         and GPU tensors: the lanes against MPI itself, not only against mcr's path.
# MPI_NET=tcp puts MPI on its TCP transport. Logs and CSVs go to $OUT.
set -uo pipefail
PARTS=${PARTS:-"wait osu tune hier"}
OSU="python3 -m benchmarks.osu_allreduce -t float32 -i 20 -x 3 --max-seconds 1.5 -c"
. lab/scripts/gpu_env.sh
# The single-core baseline is MPI's staged path (a CUDA-aware MPI would read device memory).
export MCR_LOCAL_SIZE=1 MCR_MPI_CUDA_AWARE=0
X="$X -x MCR_LOCAL_SIZE -x MCR_MPI_CUDA_AWARE"
MPI="mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2 $X"
# MPI_NET=tcp: MPI over its TCP transport, as between nodes (the two "nodes" share a host, where
# Open MPI would otherwise take shared memory); Gloo and its lanes always use TCP.
# The environment carries it to the lane helpers mpi_lanesN spawns as well.
[[ ${MPI_NET:-} == tcp ]] && { MPI="$MPI --mca pml ob1 --mca btl self,tcp"; export OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,tcp; }
LANES=mpi,mpi_lanes2,mpi_lanes4,mpi_lanes8,gloo,gloo_lanes2,gloo_lanes4,gloo_lanes8
echo "# $(date -Iseconds) $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1), $(nproc) cores, commit ${COMMIT:-?}, MPI_NET=${MPI_NET:-default}"
python3 -c 'from mpi4py import MPI; print("MPI thread level", MPI.Query_thread(), "of", MPI.THREAD_MULTIPLE, MPI.Get_library_version().splitlines()[0])'
T0=$SECONDS
if [[ $PARTS == *wait* ]]; then
  for ab in $(for _ in $(seq "${WAIT_REPS:-1}"); do echo cpu:new cpu:old cpu:new cpu:old cuda:new cuda:old; done); do
    set -- ${ab/:/ }; th=${WAIT_NEW:-2MiB}; [[ $2 == old ]] && th=${WAIT_OLD:-2GiB}
    echo "== $1, MCR_MPI_BLOCKING_BYTES=$th ($2)"
    MCR_BACKEND=mpi MCR_MPI_BLOCKING_BYTES=$th $MPI -x MCR_BACKEND -x MCR_MPI_BLOCKING_BYTES \
      python3 lab/probes/probe_mpi_wait.py \
      --sizes ${WAIT_SIZES:-65536,262144,1048576,4194304,16777216,67108864} \
      --iters 10 --rounds 3 --variants block,nbwait,mcr,mcrasync \
      $([[ $1 == cuda ]] && echo --cuda) 2>&1 | grep -av "^mcr:" | tail -7
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
if [[ $PARTS == *ab* ]]; then
  AB_FILE=${AB_FILE:-mcr/backends/gloo_lanes.py}
  cp "$AB_FILE" /tmp/ab_new.py
  for v in new old new old new old; do
    if [[ $v == new ]]; then cp /tmp/ab_new.py "$AB_FILE"; else cp "$AB_OLD" "$AB_FILE"; fi
    MCR_BACKEND=mpi $MPI -x MCR_BACKEND $OSU -d ${AB_DEV:-cuda} -m 256KiB:64MiB -f 4 --rounds 3 \
      --backend mpi,${AB_BACKENDS:-gloo_lanes2,gloo_lanes4,gloo_lanes8} 2>&1 | grep -aE "^ +[0-9]" | sed "s/^/$v /"
  done > "$OUT/ab_lanes.log"
  cp /tmp/ab_new.py "$AB_FILE"
  echo "ab rc=$? at $((SECONDS - T0)) s"
  python3 - "$OUT/ab_lanes.log" <<'PY'
import collections, statistics, sys
t = collections.defaultdict(list)
for line in open(sys.argv[1]):
    f = line.split()
    if len(f) > 4 and f[3].replace(".", "").isdigit():
        t[(int(f[1]), f[2], f[0])].append(float(f[4]))   # median latency of each run
for size, be in sorted({(s, b) for s, b, _ in t}):
    new, old = t[(size, be, "new")], t[(size, be, "old")]
    if new and old:
        print(f"{size:>10} {be:>12} new {statistics.median(new):9.1f} us {min(new):9.1f}-{max(new):<9.1f}"
              f" old {statistics.median(old):9.1f} us {min(old):9.1f}-{max(old):<9.1f}"
              f" old/new {statistics.median(old) / statistics.median(new):5.2f}")
PY
fi
if [[ $PARTS == *bare* ]]; then
  for d in "" --cuda; do
    $MPI python3 -m lab.probes.probe_mpi_wait --sizes 262144,1048576,4194304,16777216 --iters 10 \
      --rounds 5 --variants block,nbpoll,mcr,lanes2,lanes4,lanes8 $d 2>&1 | grep -av "^mcr:"
  done > "$OUT/bare_mpi.log"
  echo "bare rc=$? at $((SECONDS - T0)) s"; cat "$OUT/bare_mpi.log"
fi
[[ $PARTS == *test* ]] && { python3 -m pytest -q -m gpu tests/test_hier.py tests/test_errors.py tests/test_lanes.py > "$OUT/gpu_tests.log" 2>&1; echo "gpu tests rc=$?"; tail -3 "$OUT/gpu_tests.log"; }
for dev in ${TUNE_DEVS:-cpu}; do
  [[ $PARTS == *tune* ]] || break
  # gloo declines GPU tensors: the CUDA candidates are the staged MPI path and the lanes
  be=mpi,mpi_lanes2,mpi_lanes4,mpi_lanes8,gloo_lanes2,gloo_lanes4,gloo_lanes8; [[ $dev == cpu ]] && be=gloo,$be
  $MPI python3 -m mcr.tuner -d $dev -t float32 --ops all_reduce -m 4KiB:64MiB -i 10 --rounds 3 \
    --backend $be --out "$OUT/${dev}_2x1" > "$OUT/tune_$dev.log" 2>&1 \
    && { echo "tune $dev at $((SECONDS - T0)) s"; python3 -m mcr.tuner show "$OUT/${dev}_2x1.yaml"; }
done
if [[ $PARTS == *hier* ]]; then
  MCR_LOCAL_SIZE=2 mpirun --allow-run-as-root --oversubscribe --bind-to none -np 4 $X \
    -x MCR_TUNING_TABLE="$PWD/tests/data/hier_parts_cuda.yaml" -x MCR_HIER_CHUNK_BYTES=256KiB \
    python3 tests/workers/hier_worker.py --device cuda --flat mpi,mpi_lanes2,gloo_lanes2 --ops 200 \
    --expect all_gather=hier,reduce_scatter=hier > "$OUT/hier_cuda.log" 2>&1
  echo "hier cuda rc=$? at $((SECONDS - T0)) s"; grep -E "OK|Error" "$OUT/hier_cuda.log" | head -8
fi
# One archive: the device tool brings back only a few files per run.
(cd "$OUT" && tar -cf lanes_results.tar --remove-files -- $(ls | grep -v '^lanes_results.tar$'))
