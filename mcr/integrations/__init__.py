"""Adapters that put mcr under a training framework: DeepSpeed (deepspeed.py) and FSDP2
(fsdp.py). They adapt calls and decide nothing: every call goes through mcr's dispatcher."""
