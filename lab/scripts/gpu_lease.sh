#!/usr/bin/env bash
# A 2-GPU lease in device calls (each under the 600 s a call may run), from the repo root,
# carrying the git-ignored .whl folder for CALL=2. Each part's files go to a
# folder of its own under $OUT (the part scripts each write summary.log / a tar there).
#   CALL=1  the 2-GPU gpu tests of the fast paths (symm's graph replays and two-stream order,
#           the FSDP2 ring's stream order), then issue 18's fresh table, its check and OSU
#           tuned vs NCCL (gpu_tune.sh tune check osu); TESTS=0 leaves the tests out
#   CALL=2  issue 13's lanes on the host's cores over TCP (osu, tune on GPU tensors, bare MPI, hier);
#           issue 11's steps (plain, mcr, mcr forced to NCCL; PAIRS rounds, both shapes) and the
#           step with no communication on GPU 0 (floor, 2 rounds); the fast-path gpu test again
#   CALL=4  CALL=1's fresh table, check and OSU (no tests), then CALL=2's training steps with
#           that table in force (carry .whl; FRAMEWORKS="fsdp" for FSDP2's alone), and
#           lab/probes/probe_reduce_blocks.py (sdma reduce-scatter's local reduction, old and new)
#   CALL=3  NCCL's two latency modes: LAUNCHES (default 10) launches of lab/probes/probe_nccl_modes.py
#           with NCCL_DEBUG=INFO (COMMS new communicators each too, then ROUNDS
#           round-robin rounds over them), every launch's log in modes.tar
set -uo pipefail
O=${OUT:?OUT must name the output folder}
T0=$SECONDS
# issue 11's steps (plain, mcr, mcr forced to NCCL; PAIRS rounds, both shapes) into $O/train;
# MCR_TUNING_TABLE, where set, is the table they run with
steps() {
  OUT=$O/train PART=steps CONFIGS=plain,mcr,mcr-nccl PAIRS=${PAIRS:-5} \
    bash lab/scripts/gpu_train.sh > /dev/null
  grep -av "^bypassed" "$O/train/summary.log"
}
if [ "${CALL:-1}" = 1 ]; then
  mkdir -p "$O/tests"
  [ "${TESTS:-1}" = 0 ] || (. lab/scripts/gpu_env.sh
   timeout 170 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_fast.py \
     tests/test_fsdp_comm.py > "$O/tests/gpu_tests.log" 2>&1
   echo "gpu tests rc=$? at $((SECONDS - T0)) s"; tail -4 "$O/tests/gpu_tests.log")
  OUT=$O/tune PART="tune check osu" bash lab/scripts/gpu_tune.sh > /dev/null
  grep -a "rc=\|^  \|^#" "$O/tune/summary.log" | grep -v "^# device" | tail -60
elif [ "${CALL}" = 4 ]; then
  # A fresh table, its check and OSU, then the training steps with that table (carry .whl)
  OUT=$O/tune PART="tune check osu" bash lab/scripts/gpu_tune.sh > /dev/null
  grep -a "rc=\|^  [a-z]\|counted\|mcr-tune: 0" "$O/tune/summary.log"
  (. lab/scripts/gpu_env.sh; python3 -m lab.probes.probe_reduce_blocks 2>&1 | tee "$O/reduce_blocks.log")
  # gpu_tune.sh writes its table under /tmp/gpu_tune
  MCR_TUNING_TABLE=$(ls /tmp/gpu_tune/*_np*.yaml | head -1) steps
elif [ "${CALL}" = 3 ]; then
  # NCCL's two modes: LAUNCHES launches of plain NCCL calls, each with its NCCL_DEBUG lines
  # a warm machine keeps /tmp: an earlier call's launch logs must not join this call's tar
  rm -rf /tmp/modes; mkdir -p /tmp/modes
  (. lab/scripts/gpu_env.sh
   for i in $(seq "${LAUNCHES:-10}"); do
     NCCL_DEBUG=INFO mpirun --allow-run-as-root --oversubscribe -np "$N" $X -x NCCL_DEBUG \
       python3 -m lab.probes.probe_nccl_modes --comms "${COMMS:-0}" --rounds "${ROUNDS:-0}" > "/tmp/modes/launch_$i.log" 2>&1
     grep -a "^MODE" "/tmp/modes/launch_$i.log" | sed "s/^/launch $i /"
   done)
  tar -cf "$O/modes.tar" -C /tmp/modes .
else
  mkdir -p "$O/tests"
  OUT=$O/lanes MPI_NET=tcp PARTS="osu tune bare hier" DEVS="cpu cuda" TUNE_DEVS=cuda \
    bash lab/scripts/gpu_lanes.sh | tail -50
  steps
  OUT=$O/floor PART=floor PAIRS=2 bash lab/scripts/gpu_train.sh > /dev/null
  grep -av "^bypassed" "$O/floor/summary.log"
  (. lab/scripts/gpu_env.sh; timeout 120 python3 -m pytest -q -m gpu -p no:cacheprovider \
     tests/test_fast.py -k fast_paths > "$O/tests/fast_paths.log" 2>&1; echo "fast paths rc=$?")
fi
echo "lease call ${CALL:-1} done at $((SECONDS - T0)) s"
