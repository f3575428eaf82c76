"""Expert parallelism by hand with mcr.comm: a top-1 mixture-of-experts layer whose experts are
spread over the ranks. Tokens go to their expert's rank in one all-to-all (dispatch) and come
back in another (combine), with uneven splits: each rank sends as many tokens to a peer as its
router picked that peer's experts. mcr checks the ranks' split sizes against each other (a
disagreement is an error on every rank, not stale output) and sends each all-to-all to the
library its table picks for the largest block.

    torchrun --nproc_per_node=2 examples/moe.py
    mpirun -np 2 python examples/moe.py

Each rank checks its output against the same layer run on one rank with every expert.
"""

import torch

import mcr.comm as dist

dist.init_distributed()
rank, world = dist.get_rank(), dist.get_world_size()
device = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() \
    else torch.device("cpu")
torch.manual_seed(0)                       # every rank draws the same router and experts
hidden, ffn, experts = 256, 512, 4 * world
router = torch.randn(hidden, experts) / hidden ** 0.5
w_up = torch.randn(experts, hidden, ffn) / hidden ** 0.5
w_down = torch.randn(experts, ffn, hidden) / ffn ** 0.5
mine = range(rank * experts // world, (rank + 1) * experts // world)   # this rank's experts
up, down = w_up[mine.start:mine.stop].to(device), w_down[mine.start:mine.stop].to(device)


def expert(e: torch.Tensor, x: torch.Tensor, ups: torch.Tensor, downs: torch.Tensor
           ) -> torch.Tensor:
    """Expert e's MLP on the rows of x (e indexes ups and downs)."""
    return torch.relu(x @ ups[e]) @ downs[e]


for tokens in (8, 64, 512):
    torch.manual_seed(1 + rank)             # each rank has its own tokens
    x = torch.randn(tokens, hidden)
    choice = (x @ router).argmax(dim=1)     # top-1: one expert a token
    order = torch.argsort(choice, stable=True)
    owner = choice[order] * world // experts            # the rank holding each token's expert
    send = torch.bincount(owner, minlength=world)       # tokens this rank sends each peer
    recv = torch.empty(world, dtype=torch.long, device=device)
    dist.all_to_all_single(recv, send.to(device))      # how many each peer sends here
    send_l, recv_l = send.tolist(), recv.cpu().tolist()
    # Dispatch: the tokens, and which expert each one wants, to the expert's rank.
    got = torch.empty(sum(recv_l), hidden, device=device)
    dist.all_to_all_single(got, x[order].to(device), recv_l, send_l)
    got_e = torch.empty(sum(recv_l), dtype=torch.long, device=device)
    dist.all_to_all_single(got_e, choice[order].to(device), recv_l, send_l)
    y_local = torch.empty_like(got)
    for e in range(len(mine)):
        rows = got_e == mine.start + e
        y_local[rows] = expert(e, got[rows], up, down)
    # Combine: the results back to the tokens' ranks, in the order they were sent.
    back = torch.empty(tokens, hidden, device=device)
    dist.all_to_all_single(back, y_local, send_l, recv_l)
    y = torch.empty_like(back)
    y[order.to(device)] = back
    want = torch.stack([expert(c, x[i:i + 1], w_up, w_down)[0] for i, c in enumerate(choice)])
    err = ((y.cpu() - want).norm() / want.norm()).item()
    assert err < 1e-5, f"rank {rank}: {tokens} tokens differ from the one-rank layer by {err:.1e}"
    if rank == 0:
        print(f"{tokens} tokens a rank: sent {send_l}, received {recv_l}; matches the one-rank "
              f"layer", flush=True)
dist.log_summary()                 # rank 0: which library served the dispatch and combine
dist.destroy_process_group()
