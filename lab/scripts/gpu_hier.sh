#!/usr/bin/env bash
# Issue 14's hierarchical all-gather: the GPUs of one host (4 or more, an even number) stand in
# for 2 nodes of N/2. MCR_LOCAL_SIZE=N/2 declares the nodes; NCCL_P2P_DISABLE=1
# NCCL_SHM_DISABLE=1 NCCL_SOCKET_IFNAME=lo put every NCCL connection on the loopback socket, as
# between nodes (flat NCCL and hier's inter-node part alike), while hier's intra-node part runs
# on the copy engines over NVLink (sdma), by the parts table written below. Run from the repo
# root; logs go to $OUT. PART is one or more of (space-separated, in this order):
#   exact    hier all-gather, reduce-scatter and all-reduce against torch's results on GPU
#            tensors (tests/workers/hier_worker.py: random sizes, dtypes, async waits shuffled)
#   osu      OSU all-gather 1 MiB..256 MiB bf16, flat NCCL against hier, interleaved sample by
#            sample in 5 rounds (acceptance: >= 1.2x for >= 8 MiB)
#   overlap  the overlap benchmark (20 GEMMs + 10 x 256 MiB all-gathers): the GEMM slowdown
#            under hier against under flat NCCL (acceptance: hier's <= half of NCCL's)
#   overlap_parts, osu_parts  the overlap benchmark (5 repetitions) and OSU from 8 MiB (3
#            rounds) again under each of KNOBS (default: 16 MiB chunks, 4 MiB chunks with up to
#            16 a call, the copy engines' memops sync, which uses no SM; hier's own default is one
#            chunk a call; an entry sets several variables comma-joined), flat NCCL beside hier
#            each time
# SMOKE=1 narrows the OSU sizes to 1..16 MiB and the overlap to 3 repetitions.
set -uo pipefail
. lab/scripts/gpu_env.sh
W=/tmp/gpu_hier; rm -rf "$W"; mkdir -p "$W"
if (( N < 4 || N % 2 )); then
  echo "gpu_hier.sh needs an even number of GPUs, 4 or more (2 nodes of N/2); this machine has $N"
  exit 2
fi
P=$((N / 2))
export MCR_LOCAL_SIZE=$P NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_SOCKET_IFNAME=lo
export MCR_TUNING_TABLE="$W/hier_parts.yaml"
CLASS=$(system_class)
cat > "$MCR_TUNING_TABLE" <<YAML
# lab/scripts/gpu_hier.sh: hier across the 2 stand-in nodes, sdma inside a node, NCCL between.
schema_version: 1
system: {class: $CLASS, nodes: 2, ranks: $N}
provenance: {tool: lab/scripts/gpu_hier.sh (hand-written parts), date: '$(date +%F)', statistic: none}
device: cuda
groups:
  2x$P:
    all_gather: [{max: inf, backend: hier}]
    reduce_scatter: [{max: inf, backend: hier}]
    all_reduce: [{max: inf, backend: hier}]
  $P:
    all_gather: [{max: inf, backend: sdma}]
    reduce_scatter: [{max: inf, backend: sdma}]
  2x1:
    all_gather: [{max: inf, backend: nccl}]
    reduce_scatter: [{max: inf, backend: nccl}]
    all_reduce: [{max: inf, backend: nccl}]
YAML
RUN="torchrun --standalone --nproc_per_node=$N"
SIZES=$([ "${SMOKE:-0}" = 1 ] && echo 1MiB:16MiB || echo 1MiB:256MiB)
REPS=$([ "${SMOKE:-0}" = 1 ] && echo 3 || echo 7)
PART=" ${PART:-exact osu overlap} "
has() { [[ "$PART" == *" $1 "* ]]; }
{
echo "# device run $(date -Iseconds) on $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1) x$N as 2 nodes x $P, commit ${COMMIT:-?}"
echo "# NCCL on the loopback socket (P2P and SHM off); hier: sdma inside a node, NCCL between"
if has exact; then
  step exact 300 $RUN tests/workers/hier_worker.py --device cuda --flat nccl --ops 200 \
    --expect all_gather=hier,reduce_scatter=hier
fi
if has osu; then
  TAILN=40 step osu_allgather 400 $RUN -m benchmarks.osu_allgather -d cuda -t bfloat16 -c \
    -m "$SIZES" -f 2 -i 10 -x 2 --max-seconds 0.5 --rounds 5 --backend nccl,hier \
    --csv "$W/osu_allgather_hier.csv"
fi
if has overlap; then
  TAILN=12 step overlap 400 $RUN -m benchmarks.overlap --backend nccl,hier --reps "$REPS" \
    --csv "$W/overlap_hier.csv"
fi
KNOBS=${KNOBS:-MCR_HIER_CHUNK_BYTES=16MiB MCR_HIER_CHUNK_BYTES=4MiB,MCR_HIER_MAX_CHUNKS=16 MCR_SDMA_SYNC=memops}
for part in overlap_parts osu_parts; do
  has $part || continue
  for knob in $KNOBS; do
    tag=$(echo "${knob//MCR_/}" | tr 'A-Z=,' 'a-z__')
    if [ $part = overlap_parts ]; then
      ( export ${knob//,/ }; TAILN=4 step "overlap_$tag" 200 $RUN -m benchmarks.overlap \
          --backend nccl,hier --reps 5 --csv "$W/overlap_$tag.csv" )
    else
      ( export ${knob//,/ }; TAILN=12 step "osu_$tag" 200 $RUN -m benchmarks.osu_allgather -d cuda \
          -t bfloat16 -c -m 8MiB:256MiB -f 2 -i 10 -x 2 --max-seconds 0.5 --rounds 3 \
          --backend nccl,hier --csv "$W/osu_$tag.csv" )
    fi
  done
done
} 2>&1 | tee "$OUT/summary.log"
tar -cf "$OUT/results.tar" -C "$W" .
