#!/usr/bin/env bash
# 2x H200 (2026-11-29, fourth session, call 5): the shipped 2x table's broadcast curves
# measured again (the shipped CSV without its broadcast rows, resumed with the table's own
# command), then `mcr-tune check` of the new table. Two checks (third session, call 4) found
# NCCL at 8 MiB broadcast 38-67% slower than the fastest, also by each backend's best round,
# where the tune had NCCL 43.8 us against sdma 49.8. Prediction: NCCL's 8 MiB time moves
# between runs; the new rule may keep NCCL there (then the check's loss stays) or give 6-16 MiB
# to sdma (then broadcast's worst falls under 8%).
set -u
T0=$(date +%s); DEADLINE=${DEADLINE:-420}
. lab/scripts/parts.sh
packed_call
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 MCR_STALL_S=10
STEM=$OUT/tune/nvidia-h200_np2; mkdir -p $OUT/tune
python3 - tuning_tables/nvidia-h200_np2.csv $STEM.partial.csv <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
with open(sys.argv[2], "w", newline="") as f:
    w = csv.DictWriter(f, fieldnames=list(rows[0]))
    w.writeheader()
    w.writerows(r for r in rows if r["op"] != "broadcast")
print(f"kept {sum(r['op'] != 'broadcast' for r in rows)} of {len(rows)} rows")
PY
run tune 250 python3 -m tuner -d cuda -t bfloat16 -m 4:1GiB --batch 5 \
    --backend nccl,sdma,sdma_pipe,symm --symm sdma --profiles standalone,overlap \
    --interconnect NVLink --out $STEM
grep -h "replayed\|wrote\|Error" $OUT/tune.log | tail -3 >> $OUT/summary.txt
grep -h -A3 "^    broadcast:\|broadcast symmetric, median" $STEM.yaml | head -4 >> $OUT/summary.txt
[ -f $STEM.yaml ] && run check 120 python3 -m tuner check $STEM.yaml -d cuda -t bfloat16 \
    -m 4:1GiB --batch 5 --backend nccl,sdma,sdma_pipe,symm --symm sdma
grep -h "^# re-measured\|^# op" -A16 $OUT/check.log | grep -v "mcr-tune check:" >> $OUT/summary.txt
cat $OUT/summary.txt
