"""OSU-style microbenchmarks for mcr (one shared harness, one small file per op)."""
