"""What mcr's CUDA backends (sdma, symm, nccl_ce) share: the driver calls, CUDA graphs of
repeated calls, torch symmetric memory and its rendezvous turns. No backend lives here."""
