import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def route_kernel(idx_ptr, pos_ptr, offs_ptr, S, E, BLOCK_E: tl.constexpr, BLOCK_S: tl.constexpr):
    # A stable counting sort of the S = tokens * top_k choices by expert, in one program (no atomics): the experts'
    # end offsets (what the grouped GEMM takes) and each choice's row among the sorted rows.
    e = tl.arange(0, BLOCK_E)
    counts = tl.zeros([BLOCK_E], dtype=tl.int32)
    for s0 in range(0, S, BLOCK_S):
        s = s0 + tl.arange(0, BLOCK_S)
        ex = tl.load(idx_ptr + s, mask=s < S, other=-1)
        counts += tl.sum((ex[:, None] == e[None, :]).to(tl.int32), axis=0)
    ends = tl.cumsum(counts, axis=0)
    tl.store(offs_ptr + e, ends, mask=e < E)
    base = ends - counts
    for s0 in range(0, S, BLOCK_S):
        s = s0 + tl.arange(0, BLOCK_S)
        ex = tl.load(idx_ptr + s, mask=s < S, other=-1)
        hit = (ex[:, None] == e[None, :]).to(tl.int32)
        rank = tl.cumsum(hit, axis=0)  # 1 + earlier choices of the same expert in this block
        tl.store(pos_ptr + s, tl.sum(hit * (base[None, :] + rank - 1), axis=1), mask=s < S)
        base += tl.sum(hit, axis=0)


@triton.jit
def gather_kernel(x_ptr, pos_ptr, xs_ptr, H, TOP_K: tl.constexpr, BLOCK: tl.constexpr):
    # sorted row pos[s] = the token row of choice s (token s // TOP_K)
    s = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    m = cols < H
    dst = tl.load(pos_ptr + s).to(tl.int64)
    row = tl.load(x_ptr + (s // TOP_K).to(tl.int64) * H + cols, mask=m, other=0.0)
    tl.store(xs_ptr + dst * H + cols, row, mask=m)


@triton.jit
def swiglu_kernel(gu_ptr, h_ptr, N, stride_gu, stride_h, BLOCK: tl.constexpr):
    # h = silu(gate) * up with gate, up the two halves of one row of the first grouped GEMM's output
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    m = cols < N
    g = tl.load(gu_ptr + row * stride_gu + cols, mask=m, other=0.0).to(tl.float32)
    u = tl.load(gu_ptr + row * stride_gu + N + cols, mask=m, other=0.0).to(tl.float32)
    dt = (
        h_ptr.dtype.element_ty
    )  # silu(gate) rounded to the input's dtype before the product, as the module's ops round it
    a = (g / (1.0 + tl.exp(-g))).to(dt).to(tl.float32)
    tl.store(h_ptr + row * stride_h + cols, (a * u).to(dt), mask=m)


@triton.jit
def combine_kernel(y_ptr, pos_ptr, w_ptr, out_ptr, H, TOP_K: tl.constexpr, BLOCK: tl.constexpr):
    # out[token] = sum over its top_k choices of routing weight * expert output row, in fp32 (no scatter, no atomics)
    n = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    m = cols < H
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for k in range(TOP_K):
        p = tl.load(pos_ptr + n * TOP_K + k).to(tl.int64)
        w = tl.load(w_ptr + n * TOP_K + k).to(tl.float32)
        acc += w * tl.load(y_ptr + p * H + cols, mask=m, other=0.0).to(tl.float32)
    tl.store(out_ptr + n * H + cols, acc.to(out_ptr.dtype.element_ty), mask=m)


def _block(n):
    return min(1024, triton.next_power_of_2(n))


def route(idx, experts):
    """(pos, offs): each choice's row among the choices sorted by expert, and the experts' end offsets (int32)."""
    s = idx.numel()
    pos = torch.empty((s,), device=idx.device, dtype=torch.int32)
    offs = torch.empty((experts,), device=idx.device, dtype=torch.int32)
    block_e = triton.next_power_of_2(experts)
    route_kernel[(1,)](idx, pos, offs, s, experts, BLOCK_E=block_e, BLOCK_S=max(16, 8192 // block_e))
    return pos, offs


def gather(x, pos, top_k):
    """x's rows in sorted order: row pos[s] is token s // top_k."""
    s, h = pos.numel(), x.shape[1]
    xs = torch.empty((s, h), device=x.device, dtype=x.dtype)
    gather_kernel[(s, triton.cdiv(h, _block(h)))](x, pos, xs, h, TOP_K=top_k, BLOCK=_block(h))
    return xs


def swiglu_halves(gu):
    """silu(gate) * up of [S, 2I] rows holding gate then up."""
    s, inter = gu.shape[0], gu.shape[1] // 2
    act = torch.empty((s, inter), device=gu.device, dtype=gu.dtype)
    swiglu_kernel[(s, triton.cdiv(inter, _block(inter)))](
        gu, act, inter, gu.stride(0), act.stride(0), BLOCK=_block(inter)
    )
    return act


def combine(y, pos, weights, n, top_k, dtype):
    """out[token] = sum over its choices of weight * y[pos[choice]]."""
    h = y.shape[1]
    out = torch.empty((n, h), device=y.device, dtype=dtype)
    combine_kernel[(n, triton.cdiv(h, _block(h)))](y, pos, weights, out, h, TOP_K=top_k, BLOCK=_block(h))
    return out


class ModelNew(nn.Module):
    """Mixture-of-experts experts (Qwen3-MoE's, Mixtral's: transformers' 3D expert weights): the routed choices sorted
    by expert (a counting sort in Triton), the two projections as torch's grouped GEMM (CUTLASS on the GPU), the
    SwiGLU between them and the routing-weighted combine in Triton. Forward only."""

    def __init__(self, weights: str):
        super().__init__()
        w = torch.load(weights, map_location="cpu", weights_only=True)
        self.gate_up_proj = nn.Parameter(w["gate_up_proj"])  # [E, 2I, H]
        self.down_proj = nn.Parameter(w["down_proj"])  # [E, H, I]

    def forward(self, hidden_states, top_k_index, top_k_weights):
        n = hidden_states.shape[0]
        top_k = top_k_index.shape[-1]
        pos, offs = route(top_k_index.reshape(-1).contiguous(), self.gate_up_proj.shape[0])
        xs = gather(hidden_states.contiguous(), pos, top_k)
        act = swiglu_halves(torch._grouped_mm(xs, self.gate_up_proj.transpose(-2, -1), offs=offs))
        y = torch._grouped_mm(act, self.down_proj.transpose(-2, -1), offs=offs)
        return combine(y, pos, top_k_weights.reshape(-1).contiguous(), n, top_k, hidden_states.dtype)
