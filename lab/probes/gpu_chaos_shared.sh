# The chaos worker on GPU tensors, 4 ranks sharing the GPUs of a one- or two-GPU host as 2 nodes x 2:
# host-staged libraries only (NCCL refuses two ranks on one GPU), hier over them; dtypes MPI
# reduces (others would fall to the default NCCL). Logs under $OUT.
#   bash lab/probes/gpu_chaos_shared.sh
source lab/scripts/gpu_env.sh 2>/dev/null; export PYTHONPATH=$PWD OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
for s in 1 2 3 4 5 6; do
  MCR_LOCAL_SIZE=2 MCR_TUNING_TABLE=tests/data/hier_parts_cuda.yaml MCR_MPI_CUDA_AWARE=0 MCR_TIMEOUT_S=90 timeout 200 mpiexec --allow-run-as-root -n 4 -x MCR_LOCAL_SIZE -x MCR_TUNING_TABLE -x MCR_MPI_CUDA_AWARE -x MCR_TIMEOUT_S -x PYTHONPATH python3 tests/workers/chaos_worker.py --device cuda --ops 300 --seed $s --backends mpi,mpi_lanes2,gloo_lanes2,hier --dtypes float32,float64,int32,int64,uint8 > $OUT/chaos_cuda_$s.log 2>&1
  echo "seed $s rc=$? $(grep -ao 'rank [0-9]: CHAOS OK' $OUT/chaos_cuda_$s.log | wc -l)/4 $(grep -a 'Error:' $OUT/chaos_cuda_$s.log | head -2)"
done
