# Sourced by the GPU session scripts: the environment every GPU run keeps (NVLink multicast off),
# $OUT, the GPU count $N, and the mpirun -x list $X that carries that environment to the ranks.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 MCR_TIMEOUT_S=120
OUT=${OUT:-gpu_out}; mkdir -p "$OUT"
N=$(python3 -c 'import torch; print(torch.cuda.device_count())')
# The machine's system class, the name mcr looks GPU tables up by (nvidia-h200).
system_class() { python3 -c 'from mcr.config import from_env; from mcr.runtime import system_class
print(system_class(from_env(), True))'; }
X="-x PYTHONPATH -x NCCL_NVLS_ENABLE -x TORCH_SYMM_MEM_DISABLE_MULTICAST -x NVSHMEM_DISABLE_NVLS -x MCR_TIMEOUT_S -x PYTHONUNBUFFERED"
# step NAME LIMIT CMD...: run CMD under a time limit with its log in $W/NAME.log ($W: the
# script's work folder); print its exit status, time and the lines step_lines picks (a script
# may redefine it), and refresh $OUT/results.tar so a run cut short still brings back its logs.
step() { local name=$1 limit=$2; shift 2; echo "== $name: $*"; local t0=$SECONDS
  timeout "$limit" "$@" > "$W/$name.log" 2>&1; local rc=$?
  echo "   rc=$rc in $((SECONDS - t0)) s"
  step_lines "$W/$name.log" | tail -"${TAILN:-8}"
  tar -cf "$OUT/results.tar" -C "$W" . ; }
step_lines() { grep -aE "OK|Error|error|^#|^  |pair |ratio|passed|failed|wrote|^block " "$1" \
  | grep -v "return func\|deprecat\|Warn\|warn("; }
