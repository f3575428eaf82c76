"""GPU time a call of symm's low-latency all-to-alls on one GPU, 2 ranks as streams: the
equal-split kernel, and the uneven kernel (equal counts) with its grid at the group's largest
(ll_bytes 1 MiB: 64 blocks) and at the call's own size. Each rank's 200 calls captured in a CUDA
graph, the ranks' graphs replayed together; ms over calls, median of 7 replays. One GPU's L2
stands in for NVLink, so only the differences between the forms mean anything.
Run: python lab/probes/ll_streams_time.py"""

import statistics
import time

import torch

from mcr.backends.symm import ll as LL

W, CALLS = 2, 200


def ranks(ll_bytes: int) -> list:
    """W ranks' kernel state on this GPU, regions for calls up to ll_bytes."""
    bufs = [torch.zeros(LL.region_bytes(ll_bytes, W), dtype=torch.uint8, device="cuda")
            for _ in range(W)]
    gs = [LL.LLGroup(bufs[r], 0, [b.data_ptr() for b in bufs], r, ll_bytes, 10.0)
          for r in range(W)]
    for g in gs:
        g.keep = bufs
    return gs


def timed(gs: list, n: int, form: str) -> float:
    """Median us a call of `form` with n bytes a peer (results checked)."""
    src = [torch.randn(W * n // 4, device="cuda") for _ in range(W)]
    dst = [torch.empty_like(s) for s in src]
    counts = [n // 4] * W
    streams = [torch.cuda.Stream() for _ in range(W)]
    graphs = []
    for r in range(W):
        g = torch.cuda.CUDAGraph()
        with torch.cuda.stream(streams[r]):
            g.capture_begin(capture_error_mode="thread_local")
            for _ in range(CALLS):
                if form == "equal":
                    gs[r].issue(LL.ALL_TO_ALL, src[r], dst[r], n, False)
                else:
                    gs[r].issue_uneven(src[r], dst[r], counts, counts)
            g.capture_end()
        graphs.append(g)
    out = []
    for _ in range(8):
        torch.cuda.synchronize()
        t = time.perf_counter()
        for r in range(W):
            with torch.cuda.stream(streams[r]):
                graphs[r].replay()
        torch.cuda.synchronize()
        out.append((time.perf_counter() - t) / CALLS * 1e6)
    assert all(torch.equal(dst[r][s * n // 4:(s + 1) * n // 4], src[s][r * n // 4:(r + 1) * n // 4])
               for r in range(W) for s in range(W))
    return statistics.median(out[1:])


big = ranks(1 << 20)
print(f"{'bytes/peer':>10} {'equal':>8} {'uneven g64':>11} {'uneven own':>11}  us a call")
for n in (64, 4096, 65536, 262144):
    own = ranks(n)
    print(f"{n:>10} {timed(big, n, 'equal'):8.2f} {timed(big, n, 'uneven'):11.2f} "
          f"{timed(own, n, 'uneven'):11.2f}   (grid {LL.grid(n)} vs {big[0].uneven_grid})",
          flush=True)
