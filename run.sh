#!/usr/bin/env bash
# mcr from a fresh clone.
#   bash run.sh        set up .venv, then the main job: an OSU-style sweep through the dispatcher
#                      (2 local CPU ranks, Gloo and MPI; on a GPU machine, every GPU with NCCL
#                      and MPI), printing which library served each size, then a verdict and a
#                      picture (results/main_job/).
#   bash run.sh test   set up .venv, then ruff and the quick tier of the tests (a few minutes).
#   bash run.sh test all   the same with every test (what CI runs).
set -euo pipefail
cd "$(dirname "$0")"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
# DeepSpeed (a test dependency) installs as pure Python; its ops compile at first use.
export DS_BUILD_OPS=0
# What each command needs: the main job MPI and matplotlib (mcr's `mpi` and `bench` extras),
# the tests also DeepSpeed, transformers and ruff (`test`). Each set is installed once.
EXTRAS=mpi,bench
[ "${1:-}" = "test" ] && EXTRAS=test
# pip with one line a package it fetches; its whole log stays in .venv/pip.log, shown on failure.
pipi() {
  if ! .venv/bin/pip install --progress-bar off "$@" 2>&1 | tee .venv/pip.log \
      | { grep --line-buffered -E '^(Collecting|Successfully installed)' || true; } \
      | sed -u -e 's/^Collecting /  fetching /' -e 's/^Successfully installed .*/  installed/'; then
    echo "run.sh: pip install $* failed; the last lines of .venv/pip.log:"; tail -15 .venv/pip.log
    exit 1
  fi
}
if [ ! -x .venv/bin/python ]; then
  echo "run.sh: creating .venv, then torch 2.13.0 (CPU) into it: a minute or two, once"
  python3 -m venv .venv
  # torch 2.13.0 CPU is what this project's CPU machines install; any torch >= 2.6 works.
  pipi torch==2.13.0
fi
if [ ! -e ".venv/.mcr-$EXTRAS" ]; then
  echo "run.sh: installing mcr with its [$EXTRAS] extras into .venv: a few minutes, once"
  # A regular install (not -e): it ships mcr_autoload.pth, which MCR_DEEPSPEED=1 and MCR_FSDP=1
  # need; the checkout stays first on PYTHONPATH below, so edits take effect without
  # reinstalling. No stale build/ from an older tree: it would ship files since removed.
  rm -rf build
  pipi ".[$EXTRAS]" && touch ".venv/.mcr-$EXTRAS"
fi
# The start-up hook is the one file the checkout cannot override: reinstall when it changed.
PTH=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/mcr_autoload.pth
cmp -s mcr/integrations/mcr_autoload.pth "$PTH" || { rm -rf build; pipi --no-deps .; }
PY=$PWD/.venv/bin/python
export PATH=$PWD/.venv/bin:$PATH PYTHONPATH=$PWD
if [ "${1:-}" = "test" ]; then
  ruff check .
  if [ "${2:-}" = "all" ]; then exec "$PY" -m pytest -q "${@:3}"; fi
  exec "$PY" -m pytest -q -m quick "${@:2}"
fi
GPUS=$("$PY" -c 'import torch; print(torch.cuda.device_count() if torch.cuda.is_available() else 0)')
if [ "$GPUS" -ge 2 ]; then N=$GPUS DEV=cuda BACKENDS=auto,nccl,mpi DT=bfloat16; MAX=256MiB
else N=2 DEV=cpu BACKENDS=auto,gloo,mpi DT=float32; MAX=16MiB; fi
OUT=results/main_job; mkdir -p "$OUT"; rm -f "$OUT/osu.csv"
echo "main job: $N ranks on $DEV, mcr's choice (auto) beside each library forced; every result checked (-c)"
# --rounds 3 interleaves the backends within each size: run one after the other, the first
# measured paid for the previous size's last (auto read 1.4-1.6x slower than the same MPI).
for op in osu_allreduce osu_allgather osu_reducescatter osu_alltoall osu_bcast; do
  mpiexec --oversubscribe -n "$N" "$PY" -m benchmarks.$op -d "$DEV" -t "$DT" -m "4:$MAX" -f 4 \
    -i 50 -x 5 -c --backend "$BACKENDS" --max-seconds 0.5 --rounds 3 --csv "$OUT/osu.csv"
done
echo
"$PY" -m benchmarks.verdict "$OUT/osu.csv" --png "$OUT/verdict.png"
