# Sourced by the lab's GPU scripts: run NAME LIMIT COMMAND... runs it under timeout, its output
# in $OUT/NAME.log, one line in $OUT/summary.txt; a part that would start within 20 s of
# DEADLINE (seconds after T0) is skipped and said so.
run() { local name=$1 lim=$2; shift 2; local t0 left; t0=$(date +%s); left=$(( DEADLINE - t0 + T0 ))
        if [ $left -lt 20 ]; then echo "$name skipped (deadline)" >> $OUT/summary.txt; return; fi
        [ $lim -gt $left ] && lim=$left
        timeout $lim "$@" >> $OUT/$name.log 2>&1
        echo "$name rc=$? $(( $(date +%s) - t0 )) s" | tee -a $OUT/summary.txt; }
# packed_call: the start of a call whose files come back packed (a call brings back 8 files at
# most): the GPU environment, $OUT/w as the working folder, packed into $OUT/all.tgz with
# summary.txt beside it at exit, N (GPUs), R (torchrun on them), the summary's first line.
packed_call() {
  export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
  export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
  FINAL=$OUT; OUT=$OUT/w; mkdir -p $OUT
  trap 'cp $OUT/summary.txt $FINAL/ 2>/dev/null; tar -czf $FINAL/all.tgz -C $OUT .' EXIT
  N=$(python3 -c 'import torch; print(torch.cuda.device_count())')
  R="python3 -m torch.distributed.run --standalone --nproc_per_node=$N"
  echo "# $(date -Iseconds) $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1) x$N" > $OUT/summary.txt
}
has() { case " ${PARTS:-} " in *" $1 "*) return 0 ;; esac; return 1; }
# deepspeed_wheels: DeepSpeed and its dependencies from the carried .whl folder into /tmp/site,
# on PYTHONPATH (the GPU machines have no DeepSpeed).
deepspeed_wheels() {
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target /tmp/site .whl/*.whl > $OUT/pip.log 2>&1
  export PYTHONPATH=/tmp/site:$PYTHONPATH; }
