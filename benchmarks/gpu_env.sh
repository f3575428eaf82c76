# Sourced by the GPU session scripts: the environment every GPU run keeps (NVLink multicast off),
# $OUT, the GPU count $N, and the mpirun -x list $X that carries that environment to the ranks.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 MCR_TIMEOUT_S=120
OUT=${OUT:-gpu_out}; mkdir -p "$OUT"
N=$(python3 -c 'import torch; print(torch.cuda.device_count())')
X="-x PYTHONPATH -x NCCL_NVLS_ENABLE -x TORCH_SYMM_MEM_DISABLE_MULTICAST -x NVSHMEM_DISABLE_NVLS -x MCR_TIMEOUT_S -x PYTHONUNBUFFERED"
