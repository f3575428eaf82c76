// mcr's low-latency collectives for small messages (ll.py compiles this with NVRTC):
// all-reduce, all-gather, reduce-scatter, broadcast and equal-split all-to-all of a block of n
// bytes per rank (ll_call), and all-to-all with split sizes (mcr_ll_a2av, at the end).
//
// Each rank pushes its data into every peer's receive region as 16-byte lines that carry 8 bytes
// of data and the call's sequence number twice (one per 8-byte half, each written whole). A
// receiver polls its own memory until both halves of a line carry this call's number: the data
// and the signal arrive in one write, so the call needs no barrier and costs one one-way NVLink
// trip. Regions alternate by the number's parity: a rank writes the region of call k+2 only after
// it received every peer's data of call k+1, which each peer sent after it had read call k's
// (so every op here has every rank send to and receive from every peer: in a broadcast, where
// only the root has data, every other rank sends each peer one token line per block).
//
// Word i of a block is always handled by block (i / 512) % 64 of the grid, whatever the call's
// size or op, so each line is written with one block's counter, whose numbers only grow.
//
// Every rank sums the ranks' values in rank order in fp32, so all ranks hold the same bits.

typedef unsigned int u32;
typedef unsigned long long u64;

__device__ __forceinline__ u64 now_ns() {
  u64 t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__device__ __forceinline__ void put_line(u64 addr, uint2 w, u32 flag) {
  asm volatile("st.volatile.global.v4.u32 [%0], {%1, %2, %3, %4};"
               :: "l"(addr), "r"(w.x), "r"(flag), "r"(w.y), "r"(flag) : "memory");
}

// Wait for the line's two halves to carry `flag`; past timeout_ns, say who was missing and trap
// (a kernel that never ends would hang every later call on this GPU without a word).
__device__ __forceinline__ uint2 get_line(u64 addr, u32 flag, u64 timeout_ns, int rank, int src) {
  u32 d0, f0, d1, f1;
  u64 start = 0;
  for (u32 spins = 0;; ++spins) {
    asm volatile("ld.volatile.global.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(d0), "=r"(f0), "=r"(d1), "=r"(f1) : "l"(addr) : "memory");
    if (f0 == flag && f1 == flag) return make_uint2(d0, d1);
    if ((spins & 1023) == 1023) {
      if (start == 0) {
        start = now_ns();
      } else if (now_ns() - start > timeout_ns) {
        printf("mcr symm_ll: rank %d waited %llu s for rank %d's data of call %u "
               "(MCR_TIMEOUT_S); trapping\n", rank, timeout_ns / 1000000000ull, src, flag);
        __trap();
      }
    }
  }
}

// 8 bytes of a block: vector access where aligned and whole, else byte by byte (any dtype, any
// offset); bytes past the end read as zero.
__device__ __forceinline__ uint2 load_word(const unsigned char* p, u64 i, u64 nbytes) {
  if (((u64)p & 7) == 0 && (i + 1) * 8 <= nbytes)
    return *reinterpret_cast<const uint2*>(p + i * 8);
  uint2 w = make_uint2(0, 0);
  unsigned char* b = reinterpret_cast<unsigned char*>(&w);
  for (int k = 0; k < 8 && i * 8 + k < nbytes; ++k) b[k] = p[i * 8 + k];
  return w;
}

__device__ __forceinline__ void store_word(unsigned char* p, u64 i, u64 nbytes, uint2 w) {
  if (((u64)p & 7) == 0 && (i + 1) * 8 <= nbytes) {
    *reinterpret_cast<uint2*>(p + i * 8) = w;
    return;
  }
  const unsigned char* b = reinterpret_cast<const unsigned char*>(&w);
  for (int k = 0; k < 8 && i * 8 + k < nbytes; ++k) p[i * 8 + k] = b[k];
}

__device__ __forceinline__ float bf16_to_f(u32 h) { return __uint_as_float(h << 16); }

__device__ __forceinline__ u32 f_to_bf16(float f) {  // round to nearest even, as torch does
  u32 u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0u;
  return (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
}

// The word's elements as floats: 2 fp32 or 4 bf16.
template <bool BF16> struct Acc {
  float v[BF16 ? 4 : 2];
  __device__ __forceinline__ void set(uint2 w) {
    if (BF16) {
      v[0] = bf16_to_f(w.x & 0xffffu); v[1] = bf16_to_f(w.x >> 16);
      v[2] = bf16_to_f(w.y & 0xffffu); v[3] = bf16_to_f(w.y >> 16);
    } else {
      v[0] = __uint_as_float(w.x); v[1] = __uint_as_float(w.y);
    }
  }
  __device__ __forceinline__ void add(uint2 w) {
    Acc o; o.set(w);
#pragma unroll
    for (int k = 0; k < (BF16 ? 4 : 2); ++k) v[k] += o.v[k];
  }
  __device__ __forceinline__ uint2 get(int avg, int world) {
    if (avg) {
#pragma unroll
      for (int k = 0; k < (BF16 ? 4 : 2); ++k) v[k] = v[k] / (float)world;
    }
    if (BF16)
      return make_uint2(f_to_bf16(v[0]) | (f_to_bf16(v[1]) << 16),
                        f_to_bf16(v[2]) | (f_to_bf16(v[3]) << 16));
    return make_uint2(__float_as_uint(v[0]), __float_as_uint(v[1]));
  }
};

enum { ALL_REDUCE = 0, ALL_GATHER = 1, REDUCE_SCATTER = 2, BROADCAST = 3, ALL_TO_ALL = 4 };

// Broadcast of n bytes from root, in place (src == dst). The root pushes its lines to every
// peer; every other rank pushes one token line per block (at the block's first word, in its
// own slot) to every peer and waits for the tokens of the others: without them the root would
// hear from no peer, and could write call k+2's lines before a peer has read call k's.
__device__ __forceinline__ void ll_broadcast(int root, unsigned char* data, u64 n, u64 nwords,
                                             const u64* regions, int rank, int world, u64 cap,
                                             u64 area, u32 seq, u64 first, u64 stride,
                                             u64 timeout_ns) {
  const u64 token = (u64)blockIdx.x * blockDim.x;
  if (rank == root) {
    for (u64 i = first; i < nwords; i += stride) {
      const uint2 w = load_word(data, i, n);
      for (int q = 1; q < world; ++q) {
        const int peer = (rank + q) % world;
        put_line(regions[peer] + ((area + rank) * cap + i) * 16, w, seq);
      }
    }
  } else if (threadIdx.x == 0) {
    for (int q = 1; q < world; ++q) {
      const int peer = (rank + q) % world;
      put_line(regions[peer] + ((area + rank) * cap + token) * 16, make_uint2(0, 0), seq);
    }
  }
  const u64 mine = regions[rank];
  if (rank != root)
    for (u64 i = first; i < nwords; i += stride)
      store_word(data, i, n,
                 get_line(mine + ((area + root) * cap + i) * 16, seq, timeout_ns, rank, root));
  if (threadIdx.x == 0)
    for (int s = 0; s < world; ++s)
      if (s != rank && s != root)
        get_line(mine + ((area + s) * cap + token) * 16, seq, timeout_ns, rank, s);
}

// The block's number for this call (one past its last). Launched early (programmatic dependent
// launch, MCR_SYMM_PDL) the kernel is resident while the kernel before it drains; it waits here
// until that one's writes are visible. Launched plainly the wait returns at once.
__device__ __forceinline__ u32 begin_call(const u32* seqs) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
  __shared__ u32 s_seq;
  if (threadIdx.x == 0) s_seq = seqs[blockIdx.x] + 1;
  __syncthreads();
  return s_seq;
}

// One call of `op` on blocks of n bytes. all-reduce and broadcast (from root): src == dst, n
// bytes; all-gather: src n bytes, dst world x n; reduce-scatter: src world x n, dst n.
// regions: world addresses, each rank's receive area (2 parities x world sources x cap lines of
// 16 bytes); seqs: one call counter per block, advanced by the block itself so that a replayed
// CUDA graph numbers its calls right.
template <bool BF16>
__device__ __forceinline__ void ll_call(int op, int root, u64 src, u64 dst, u64 n,
                                        const u64* regions, int rank, int world, u32* seqs,
                                        u64 cap, int avg, u64 timeout_ns) {
  const u32 seq = begin_call(seqs);
  const unsigned char* in = reinterpret_cast<const unsigned char*>(src);
  unsigned char* out = reinterpret_cast<unsigned char*>(dst);
  const u64 nwords = (n + 7) / 8;
  const u64 area = (u64)(seq & 1) * world;
  const u64 stride = (u64)gridDim.x * blockDim.x;
  const u64 first = (u64)blockIdx.x * blockDim.x + threadIdx.x;
  if (op == BROADCAST) {
    ll_broadcast(root, out, n, nwords, regions, rank, world, cap, area, seq, first, stride,
                 timeout_ns);
    if (threadIdx.x == 0) seqs[blockIdx.x] = seq;
    return;
  }
  const bool blocks_out = op == REDUCE_SCATTER || op == ALL_TO_ALL;   // block p goes to p
  for (u64 i = first; i < nwords; i += stride) {
    const uint2 w = blocks_out ? make_uint2(0, 0) : load_word(in, i, n);
    for (int q = 1; q < world; ++q) {
      const int peer = (rank + q) % world;
      put_line(regions[peer] + ((area + rank) * cap + i) * 16,
               blocks_out ? load_word(in + peer * n, i, n) : w, seq);
    }
    if (op == ALL_GATHER) store_word(out + rank * n, i, n, w);
    if (op == ALL_TO_ALL) store_word(out + rank * n, i, n, load_word(in + rank * n, i, n));
  }
  const u64 mine = regions[rank];
  for (u64 i = first; i < nwords; i += stride) {
    if (op == ALL_GATHER || op == ALL_TO_ALL) {
      for (int s = 0; s < world; ++s)
        if (s != rank)
          store_word(out + s * n, i, n,
                     get_line(mine + ((area + s) * cap + i) * 16, seq, timeout_ns, rank, s));
      continue;
    }
    const unsigned char* own = op == REDUCE_SCATTER ? in + rank * n : in;
    Acc<BF16> acc;
    for (int s = 0; s < world; ++s) {
      const uint2 w = s == rank ? load_word(own, i, n)
                                : get_line(mine + ((area + s) * cap + i) * 16, seq, timeout_ns,
                                           rank, s);
      if (s == 0) acc.set(w); else acc.add(w);
    }
    store_word(out, i, n, acc.get(avg, world));
  }
  if (threadIdx.x == 0) seqs[blockIdx.x] = seq;
}

// The fp32 form also serves all-gathers, broadcasts and all-to-alls of any dtype: they move
// bytes only.
extern "C" __global__ void __launch_bounds__(512)
mcr_ll_f32(int op, int root, u64 src, u64 dst, u64 n, const u64* regions, int rank, int world,
           u32* seqs, u64 cap, int avg, u64 timeout_ns) {
  ll_call<false>(op, root, src, dst, n, regions, rank, world, seqs, cap, avg, timeout_ns);
}

extern "C" __global__ void __launch_bounds__(512)
mcr_ll_bf16(int op, int root, u64 src, u64 dst, u64 n, const u64* regions, int rank, int world,
            u32* seqs, u64 cap, int avg, u64 timeout_ns) {
  ll_call<true>(op, root, src, dst, n, regions, rank, world, seqs, cap, avg, timeout_ns);
}

// An all-to-all with split sizes (MCR_SYMM_OPS all_to_all_uneven): this rank's bytes to each
// peer and from each peer, with their offsets in src and dst (the ranks agreed on them before
// the call). Each block hears from every peer every call, as the parity argument needs, whatever
// the splits: thread 0 sends each peer a token line at the block's first line where its data
// does not reach that far, and waits for each peer's likewise (a broadcast's tokens, for every
// pair). The grid is the group's largest (ll.py's LLGroup.uneven_grid), the same on every rank
// whatever the splits, so the per-block call numbers stay in step; word i is still handled by
// block (i / 512) % 64.
struct Splits {
  u64 send_off[8], send_n[8], recv_off[8], recv_n[8];
};

extern "C" __global__ void __launch_bounds__(512)
mcr_ll_a2av(u64 src, u64 dst, const u64* regions, int rank, int world, u32* seqs, u64 cap,
            u64 timeout_ns, Splits sp) {
  const u32 seq = begin_call(seqs);
  const unsigned char* in = reinterpret_cast<const unsigned char*>(src);
  unsigned char* out = reinterpret_cast<unsigned char*>(dst);
  const u64 area = (u64)(seq & 1) * world;
  const u64 stride = (u64)gridDim.x * blockDim.x;
  const u64 first = (u64)blockIdx.x * blockDim.x + threadIdx.x;
  const u64 token = (u64)blockIdx.x * blockDim.x;
  for (int q = 1; q < world; ++q) {
    const int peer = (rank + q) % world;
    const u64 n = sp.send_n[peer], nwords = (n + 7) / 8;
    const unsigned char* blk = in + sp.send_off[peer];
    const u64 base = regions[peer] + (area + rank) * cap * 16;
    for (u64 i = first; i < nwords; i += stride) put_line(base + i * 16, load_word(blk, i, n), seq);
    if (threadIdx.x == 0 && token >= nwords) put_line(base + token * 16, make_uint2(0, 0), seq);
  }
  {
    const u64 n = sp.send_n[rank], nwords = (n + 7) / 8;
    for (u64 i = first; i < nwords; i += stride)
      store_word(out + sp.recv_off[rank], i, n, load_word(in + sp.send_off[rank], i, n));
  }
  const u64 mine = regions[rank];
  for (int s = 0; s < world; ++s) {
    if (s == rank) continue;
    const u64 n = sp.recv_n[s], nwords = (n + 7) / 8;
    const u64 base = mine + (area + s) * cap * 16;
    for (u64 i = first; i < nwords; i += stride)
      store_word(out + sp.recv_off[s], i, n, get_line(base + i * 16, seq, timeout_ns, rank, s));
    if (threadIdx.x == 0 && token >= nwords) get_line(base + token * 16, seq, timeout_ns, rank, s);
  }
  if (threadIdx.x == 0) seqs[blockIdx.x] = seq;
}
