#!/usr/bin/env bash
# The CPU tests of what users meet first (DeepSpeed and FSDP2 configurations, Hugging Face
# Trainer under DeepSpeed's launcher, ranks that leave, bad input) on a lent GPU machine's
# software: torch 2.11, Open MPI 4.1.6, Python 3.12, where the CPU VM has torch 2.13 and Open
# MPI 5. Run from the repo root with the git-ignored .whl folder carried (DeepSpeed 0.19.8 and
# its dependencies; .whl/extra: Accelerate). TESTS overrides the test files. Logs: $OUT.
set -uo pipefail
. lab/scripts/gpu_env.sh
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl .whl/extra/*.whl || exit 1
# mcr itself too: MCR_DEEPSPEED / MCR_FSDP act through a .pth file, which only a site folder runs.
python3 -m pip install -q --no-deps --no-build-isolation --no-cache-dir . || exit 1
export PYTHONPATH=$PWD:/tmp/site OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
{
echo "# $(date -Iseconds) on $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1) x$N, commit ${COMMIT:-$(git rev-parse --short HEAD 2>/dev/null)}"
python3 -c 'import sys, torch, deepspeed, transformers, accelerate; print("python", sys.version.split()[0], "torch", torch.__version__, "deepspeed", deepspeed.__version__, "transformers", transformers.__version__, "accelerate", accelerate.__version__)'
mpirun --version | head -1
python3 -m pytest -v -p no:cacheprovider -rs --durations=15 $(python3 -c 'import pytest_timeout' 2>/dev/null && echo --timeout=240) ${TESTS:-tests/test_errors.py tests/test_integrations.py}
} 2>&1 | tee "$OUT/cputests.log" | grep -av "Warning\|warn" | grep -aE "PASS|FAIL|ERROR|SKIP|^[0-9.]+s |passed|failed|^#|^python|Open MPI" | tail -80
