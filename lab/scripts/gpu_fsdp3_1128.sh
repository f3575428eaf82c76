#!/usr/bin/env bash
# 2x GPUs, the 2026-11-28 second session, call 5: gpu_fsdp2_1128.sh with DDP's futures chained
# from torch's NCCL work (no Python stream switch) and more rounds: DDP's losses on mcr against
# plain NCCL, DDP and FSDP2 through the backend against a plain group, no profile.
WORKERS=ddp ROUNDS=13 PROFILE= exec bash lab/scripts/gpu_fsdp2_1128.sh
