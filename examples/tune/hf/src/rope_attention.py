import torch
import torch.nn as nn
import torch.nn.functional as F
import triton
import triton.language as tl


@triton.jit
def _rope_tile(src, cos_ptr, sin_ptr, cofs, m, HALF: tl.constexpr):
    # out1 = x1*c1 - x2*s1, out2 = x2*c2 + x1*s2 (x*cos + rotate_half(x)*sin), fp32 in registers
    c1 = tl.load(cos_ptr + cofs, mask=m, other=0.0).to(tl.float32)
    c2 = tl.load(cos_ptr + cofs + HALF, mask=m, other=0.0).to(tl.float32)
    s1 = tl.load(sin_ptr + cofs, mask=m, other=0.0).to(tl.float32)
    s2 = tl.load(sin_ptr + cofs + HALF, mask=m, other=0.0).to(tl.float32)
    x1 = tl.load(src, mask=m, other=0.0).to(tl.float32)
    x2 = tl.load(src + HALF, mask=m, other=0.0).to(tl.float32)
    # Rounded after each product and the sum as the module's own ops round them (q * cos + rotate_half(q) * sin in
    # the input's dtype): in bfloat16 the result is the module's, bit for bit; in float32 the rounding is a no-op.
    dt = src.dtype.element_ty
    o1 = ((x1 * c1).to(dt).to(tl.float32) + (-x2 * s1).to(dt).to(tl.float32)).to(dt).to(tl.float32)
    o2 = ((x2 * c2).to(dt).to(tl.float32) + (x1 * s2).to(dt).to(tl.float32)).to(dt).to(tl.float32)
    return o1, o2


@triton.jit
def rope_qkv_fwd_kernel(
    q_ptr,
    k_ptr,
    v_ptr,
    cos_ptr,
    sin_ptr,
    qo_ptr,
    ko_ptr,
    vo_ptr,
    ko2_ptr,
    vo2_ptr,
    T,
    n_rows,
    stride_q,
    stride_k,
    stride_v,
    stride_cb,
    stride_ct,
    H: tl.constexpr,
    HKV: tl.constexpr,
    D: tl.constexpr,
    HALF: tl.constexpr,
    BLOCK_R: tl.constexpr,
    BLOCK_HALF: tl.constexpr,
    TWO_KV: tl.constexpr,
):
    # One program: BLOCK_R token rows of one head. Heads [0, H) are q (rotated, written [B, T, H, D]), [H, H+HKV)
    # k (rotated, written [B, HKV, T, D]: the cache's layout), then v (copied to [B, HKV, T, D]). TWO_KV writes k
    # and v a second time (attention's own copies, so autograd never sums two gradients of one tensor).
    hh = tl.program_id(1)
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    d = tl.arange(0, BLOCK_HALF)
    m = (rows < n_rows)[:, None] & (d < HALF)[None, :]
    b = rows // T
    t = rows - b * T
    r64 = rows.to(tl.int64)[:, None]
    cofs = b.to(tl.int64)[:, None] * stride_cb + t[:, None] * stride_ct + d[None, :]
    if hh < H:
        o1, o2 = _rope_tile(q_ptr + r64 * stride_q + hh * D + d[None, :], cos_ptr, sin_ptr, cofs, m, HALF)
        dst = qo_ptr + r64 * (H * D) + hh * D + d[None, :]
        tl.store(dst, o1.to(qo_ptr.dtype.element_ty), mask=m)
        tl.store(dst + HALF, o2.to(qo_ptr.dtype.element_ty), mask=m)
    elif hh < H + HKV:
        kh = hh - H
        o1, o2 = _rope_tile(k_ptr + r64 * stride_k + kh * D + d[None, :], cos_ptr, sin_ptr, cofs, m, HALF)
        ofs = ((b.to(tl.int64)[:, None] * HKV + kh) * T + t[:, None]) * D + d[None, :]
        tl.store(ko_ptr + ofs, o1.to(ko_ptr.dtype.element_ty), mask=m)
        tl.store(ko_ptr + ofs + HALF, o2.to(ko_ptr.dtype.element_ty), mask=m)
        if TWO_KV:
            tl.store(ko2_ptr + ofs, o1.to(ko_ptr.dtype.element_ty), mask=m)
            tl.store(ko2_ptr + ofs + HALF, o2.to(ko_ptr.dtype.element_ty), mask=m)
    else:
        vh = hh - H - HKV
        src = v_ptr + r64 * stride_v + vh * D + d[None, :]
        x1 = tl.load(src, mask=m, other=0.0)
        x2 = tl.load(src + HALF, mask=m, other=0.0)
        ofs = ((b.to(tl.int64)[:, None] * HKV + vh) * T + t[:, None]) * D + d[None, :]
        tl.store(vo_ptr + ofs, x1, mask=m)
        tl.store(vo_ptr + ofs + HALF, x2, mask=m)
        if TWO_KV:
            tl.store(vo2_ptr + ofs, x1, mask=m)
            tl.store(vo2_ptr + ofs + HALF, x2, mask=m)


@triton.jit
def _grad_tile(
    g_ptr,
    sb,
    st,
    sh,
    g2_ptr,
    sb2,
    st2,
    sh2,
    b,
    t,
    h,
    d,
    m,
    HALF: tl.constexpr,
    HAS_G: tl.constexpr,
    HAS_G2: tl.constexpr,
    BLOCK_R: tl.constexpr,
    BLOCK_HALF: tl.constexpr,
):
    # the gradient reaching one head of the rows: the sum of two outputs' gradients (attention's and the cache's)
    g1 = tl.zeros([BLOCK_R, BLOCK_HALF], dtype=tl.float32)
    g2 = tl.zeros([BLOCK_R, BLOCK_HALF], dtype=tl.float32)
    if HAS_G:
        p = g_ptr + b.to(tl.int64)[:, None] * sb + t[:, None].to(tl.int64) * st + h * sh + d[None, :]
        g1 += tl.load(p, mask=m, other=0.0).to(tl.float32)
        g2 += tl.load(p + HALF, mask=m, other=0.0).to(tl.float32)
    if HAS_G2:
        p = g2_ptr + b.to(tl.int64)[:, None] * sb2 + t[:, None].to(tl.int64) * st2 + h * sh2 + d[None, :]
        g1 += tl.load(p, mask=m, other=0.0).to(tl.float32)
        g2 += tl.load(p + HALF, mask=m, other=0.0).to(tl.float32)
    return g1, g2


@triton.jit
def rope_qkv_bwd_kernel(
    dq_ptr,
    dk_ptr,
    dkc_ptr,
    dv_ptr,
    dvc_ptr,
    cos_ptr,
    sin_ptr,
    dql_ptr,
    dkl_ptr,
    dvl_ptr,
    T,
    n_rows,
    sq_b,
    sq_t,
    sq_h,
    sk_b,
    sk_t,
    sk_h,
    skc_b,
    skc_t,
    skc_h,
    sv_b,
    sv_t,
    sv_h,
    svc_b,
    svc_t,
    svc_h,
    stride_cb,
    stride_ct,
    H: tl.constexpr,
    HKV: tl.constexpr,
    D: tl.constexpr,
    HALF: tl.constexpr,
    HAS_DQ: tl.constexpr,
    HAS_DK: tl.constexpr,
    HAS_DKC: tl.constexpr,
    HAS_DV: tl.constexpr,
    HAS_DVC: tl.constexpr,
    BLOCK_R: tl.constexpr,
    BLOCK_HALF: tl.constexpr,
):
    # The rotation's transpose: dx1 = g1*c1 + g2*s2, dx2 = g2*c2 - g1*s1, written as the projections' gradients
    # ([B*T, heads*D], the GEMMs' layout); k's and v's gradients are attention's plus the cache outputs'.
    hh = tl.program_id(1)
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    d = tl.arange(0, BLOCK_HALF)
    m = (rows < n_rows)[:, None] & (d < HALF)[None, :]
    b = rows // T
    t = rows - b * T
    r64 = rows.to(tl.int64)[:, None]
    cofs = b.to(tl.int64)[:, None] * stride_cb + t[:, None] * stride_ct + d[None, :]
    if hh < H + HKV:
        if hh < H:
            g1, g2 = _grad_tile(
                dq_ptr,
                sq_b,
                sq_t,
                sq_h,
                dq_ptr,
                sq_b,
                sq_t,
                sq_h,
                b,
                t,
                hh,
                d,
                m,
                HALF,
                HAS_DQ,
                False,
                BLOCK_R,
                BLOCK_HALF,
            )
            dst = dql_ptr + r64 * (H * D) + hh * D + d[None, :]
        else:
            g1, g2 = _grad_tile(
                dk_ptr,
                sk_b,
                sk_t,
                sk_h,
                dkc_ptr,
                skc_b,
                skc_t,
                skc_h,
                b,
                t,
                hh - H,
                d,
                m,
                HALF,
                HAS_DK,
                HAS_DKC,
                BLOCK_R,
                BLOCK_HALF,
            )
            dst = dkl_ptr + r64 * (HKV * D) + (hh - H) * D + d[None, :]
        c1 = tl.load(cos_ptr + cofs, mask=m, other=0.0).to(tl.float32)
        c2 = tl.load(cos_ptr + cofs + HALF, mask=m, other=0.0).to(tl.float32)
        s1 = tl.load(sin_ptr + cofs, mask=m, other=0.0).to(tl.float32)
        s2 = tl.load(sin_ptr + cofs + HALF, mask=m, other=0.0).to(tl.float32)
        tl.store(dst, (g1 * c1 + g2 * s2).to(dql_ptr.dtype.element_ty), mask=m)
        tl.store(dst + HALF, (g2 * c2 - g1 * s1).to(dql_ptr.dtype.element_ty), mask=m)
    else:
        vh = hh - H - HKV
        g1, g2 = _grad_tile(
            dv_ptr,
            sv_b,
            sv_t,
            sv_h,
            dvc_ptr,
            svc_b,
            svc_t,
            svc_h,
            b,
            t,
            vh,
            d,
            m,
            HALF,
            HAS_DV,
            HAS_DVC,
            BLOCK_R,
            BLOCK_HALF,
        )
        dst = dvl_ptr + r64 * (HKV * D) + vh * D + d[None, :]
        tl.store(dst, g1.to(dvl_ptr.dtype.element_ty), mask=m)
        tl.store(dst + HALF, g2.to(dvl_ptr.dtype.element_ty), mask=m)


@triton.jit
def rope_cos_sin_grad_kernel(
    dq_ptr,
    dk_ptr,
    dkc_ptr,
    ql_ptr,
    kl_ptr,
    dcos_ptr,
    dsin_ptr,
    T,
    NB,
    stride_cb,
    stride_ct,
    sq_b,
    sq_t,
    sq_h,
    sk_b,
    sk_t,
    sk_h,
    skc_b,
    skc_t,
    skc_h,
    H: tl.constexpr,
    HKV: tl.constexpr,
    D: tl.constexpr,
    HALF: tl.constexpr,
    HAS_DQ: tl.constexpr,
    HAS_DK: tl.constexpr,
    HAS_DKC: tl.constexpr,
    BLOCK_R: tl.constexpr,
    BLOCK_HALF: tl.constexpr,
):
    # dcos = sum over batch (of this cos row) and heads of g * x, dsin likewise with rotate_half(x): one program
    # per (cos batch row, block of positions) walks them, so no atomics. Only when cos/sin need a gradient.
    t = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    bc = tl.program_id(1)
    d = tl.arange(0, BLOCK_HALF)
    m = (t < T)[:, None] & (d < HALF)[None, :]
    a1 = tl.zeros([BLOCK_R, BLOCK_HALF], dtype=tl.float32)
    a2 = tl.zeros([BLOCK_R, BLOCK_HALF], dtype=tl.float32)
    b1 = tl.zeros([BLOCK_R, BLOCK_HALF], dtype=tl.float32)
    b2 = tl.zeros([BLOCK_R, BLOCK_HALF], dtype=tl.float32)
    for i in range(NB):
        b = bc + i  # NB = B when cos is shared by the batch (then bc = 0), else 1
        bb = tl.zeros([BLOCK_R], dtype=tl.int32) + b
        r64 = (bb * T + t).to(tl.int64)[:, None]
        for h in range(H):
            g1, g2 = _grad_tile(
                dq_ptr,
                sq_b,
                sq_t,
                sq_h,
                dq_ptr,
                sq_b,
                sq_t,
                sq_h,
                bb,
                t,
                h,
                d,
                m,
                HALF,
                HAS_DQ,
                False,
                BLOCK_R,
                BLOCK_HALF,
            )
            x = ql_ptr + r64 * (H * D) + h * D + d[None, :]
            x1 = tl.load(x, mask=m, other=0.0).to(tl.float32)
            x2 = tl.load(x + HALF, mask=m, other=0.0).to(tl.float32)
            a1 += g1 * x1
            a2 += g2 * x2
            b1 -= g1 * x2
            b2 += g2 * x1
        for h in range(HKV):
            g1, g2 = _grad_tile(
                dk_ptr,
                sk_b,
                sk_t,
                sk_h,
                dkc_ptr,
                skc_b,
                skc_t,
                skc_h,
                bb,
                t,
                h,
                d,
                m,
                HALF,
                HAS_DK,
                HAS_DKC,
                BLOCK_R,
                BLOCK_HALF,
            )
            x = kl_ptr + r64 * (HKV * D) + h * D + d[None, :]
            x1 = tl.load(x, mask=m, other=0.0).to(tl.float32)
            x2 = tl.load(x + HALF, mask=m, other=0.0).to(tl.float32)
            a1 += g1 * x1
            a2 += g2 * x2
            b1 -= g1 * x2
            b2 += g2 * x1
    cofs = bc.to(tl.int64) * stride_cb + t[:, None] * stride_ct + d[None, :]
    tl.store(dcos_ptr + cofs, a1.to(dcos_ptr.dtype.element_ty), mask=m)
    tl.store(dcos_ptr + cofs + HALF, a2.to(dcos_ptr.dtype.element_ty), mask=m)
    tl.store(dsin_ptr + cofs, b1.to(dsin_ptr.dtype.element_ty), mask=m)
    tl.store(dsin_ptr + cofs + HALF, b2.to(dsin_ptr.dtype.element_ty), mask=m)


BLOCK_R = 32


def _cos_strides(cos, B):
    # cos/sin [Bc, T, D] with Bc 1 (shared by the batch) or B; rows contiguous
    return (0 if cos.shape[0] == 1 and B > 1 else cos.stride(0)), cos.stride(1)


def _bthd(g, B, T, heads, D, bhtd):
    """(tensor, b, t, h strides) of a gradient laid out [B, T, heads, D] (or [B, heads, T, D] when bhtd); None stays None."""
    if g is None:
        return None, (0, 0, 0)
    if g.stride(-1) != 1:
        g = g.contiguous()
    return (g, (g.stride(0), g.stride(2), g.stride(1))) if bhtd else (g, (g.stride(0), g.stride(1), g.stride(2)))


def rope_qkv(ql, kl, vl, cos, sin, B, T, H, HKV, D, two_kv):
    """q [B, T, H, D] and k, v [B, HKV, T, D] from the projections [B*T, heads*D]: RoPE on q and k, v moved, one launch."""
    dev, dt = ql.device, ql.dtype
    q = torch.empty((B, T, H, D), device=dev, dtype=dt)
    k = torch.empty((B, HKV, T, D), device=dev, dtype=dt)
    v = torch.empty((B, HKV, T, D), device=dev, dtype=dt)
    k2 = torch.empty_like(k) if two_kv else k
    v2 = torch.empty_like(v) if two_kv else v
    cb, ct = _cos_strides(cos, B)
    half = D // 2
    grid = (triton.cdiv(B * T, BLOCK_R), H + 2 * HKV)
    rope_qkv_fwd_kernel[grid](
        ql,
        kl,
        vl,
        cos,
        sin,
        q,
        k,
        v,
        k2,
        v2,
        T,
        B * T,
        ql.stride(0),
        kl.stride(0),
        vl.stride(0),
        cb,
        ct,
        H=H,
        HKV=HKV,
        D=D,
        HALF=half,
        BLOCK_R=BLOCK_R,
        BLOCK_HALF=triton.next_power_of_2(half),
        TWO_KV=two_kv,
        num_warps=4,
    )
    return q, k, v, k2, v2


def rope_qkv_backward(dq, dk, dv, dkc, dvc, cos, sin, B, T, H, HKV, D, pre=None):
    """The projections' gradients [B*T, heads*D] from those of q, k, v and the cache's k, v (each may be None); with
    pre = (q, k projections), also cos's and sin's."""
    dq, sq = _bthd(dq, B, T, H, D, False)
    dk, sk = _bthd(dk, B, T, HKV, D, True)
    dkc, skc = _bthd(dkc, B, T, HKV, D, True)
    dv, sv = _bthd(dv, B, T, HKV, D, True)
    dvc, svc = _bthd(dvc, B, T, HKV, D, True)
    some = dq
    for g in (dk, dkc, dv, dvc):
        some = g if some is None else some
    dev, dt = some.device, some.dtype
    dql = torch.empty((B * T, H * D), device=dev, dtype=dt)
    dkl = torch.empty((B * T, HKV * D), device=dev, dtype=dt)
    dvl = torch.empty((B * T, HKV * D), device=dev, dtype=dt)
    ptr = [some if g is None else g for g in (dq, dk, dkc, dv, dvc)]  # a None gradient's pointer is never read
    cb, ct = _cos_strides(cos, B)
    half = D // 2
    bh = triton.next_power_of_2(half)
    has = dict(HAS_DQ=dq is not None, HAS_DK=dk is not None, HAS_DKC=dkc is not None)
    rope_qkv_bwd_kernel[(triton.cdiv(B * T, BLOCK_R), H + 2 * HKV)](
        *ptr,
        cos,
        sin,
        dql,
        dkl,
        dvl,
        T,
        B * T,
        *sq,
        *sk,
        *skc,
        *sv,
        *svc,
        cb,
        ct,
        H=H,
        HKV=HKV,
        D=D,
        HALF=half,
        **has,
        HAS_DV=dv is not None,
        HAS_DVC=dvc is not None,
        BLOCK_R=BLOCK_R,
        BLOCK_HALF=bh,
        num_warps=4,
    )
    dcos = dsin = None
    if pre is not None:
        ql, kl = pre
        dcos, dsin = torch.empty_like(cos), torch.empty_like(sin)
        rope_cos_sin_grad_kernel[(triton.cdiv(T, BLOCK_R), cos.shape[0])](
            ptr[0],
            ptr[1],
            ptr[2],
            ql,
            kl,
            dcos,
            dsin,
            T,
            B if cos.shape[0] == 1 else 1,
            cos.stride(0),
            cos.stride(1),
            *sq,
            *sk,
            *skc,
            H=H,
            HKV=HKV,
            D=D,
            HALF=half,
            **has,
            BLOCK_R=BLOCK_R,
            BLOCK_HALF=bh,
            num_warps=4,
        )
    return dql, dkl, dvl, dcos, dsin


def _projections(x2, wq, wk, wv):
    return torch.mm(x2, wq.t()), torch.mm(x2, wk.t()), torch.mm(x2, wv.t())


class RopeQKVFn(torch.autograd.Function):
    """x -> (q, k, v for attention, k and v for the cache): the three projections (cuBLAS) and the RoPE pass."""

    @staticmethod
    def forward(ctx, x2, wq, wk, wv, cos, sin, B, T, H, HKV, D):
        ql, kl, vl = _projections(x2, wq, wk, wv)
        q, kc, vc, k, v = rope_qkv(ql, kl, vl, cos, sin, B, T, H, HKV, D, two_kv=True)
        rope_grad = ctx.needs_input_grad[4] or ctx.needs_input_grad[5]
        ctx.save_for_backward(x2, wq, wk, wv, cos, sin, *((ql, kl) if rope_grad else ()))
        ctx.dims = (B, T, H, HKV, D)
        ctx.set_materialize_grads(False)  # an output nobody used sends None: no zeros to read
        return q, k, v, kc, vc

    @staticmethod
    def backward(ctx, dq, dk, dv, dkc, dvc):
        B, T, H, HKV, D = ctx.dims
        x2, wq, wk, wv, cos, sin, *pre = ctx.saved_tensors
        dql, dkl, dvl, dcos, dsin = rope_qkv_backward(
            dq, dk, dv, dkc, dvc, cos, sin, B, T, H, HKV, D, tuple(pre) if pre else None
        )
        dx = dwq = dwk = dwv = None
        if ctx.needs_input_grad[0]:
            dx = torch.addmm(
                torch.addmm(torch.mm(dql, wq), dkl, wk), dvl, wv
            )  # the three GEMMs sum in cuBLAS's epilogue
        if ctx.needs_input_grad[1]:
            dwq = torch.mm(dql.t(), x2)
        if ctx.needs_input_grad[2]:
            dwk = torch.mm(dkl.t(), x2)
        if ctx.needs_input_grad[3]:
            dwv = torch.mm(dvl.t(), x2)
        return dx, dwq, dwk, dwv, dcos, dsin, None, None, None, None, None


def _attention(q, k, v, D):
    """Causal attention through torch's library kernels. GQA is passed as enable_gqa where a fused kernel takes it
    (flash in half precision on the GPU, and the CPU's); float32 on the GPU has none that does, and would run the math
    fallback's torch ops, so there k and v's heads are repeated first (a copy) for the memory-efficient kernel."""
    H, HKV = q.shape[1], k.shape[1]
    if q.is_cuda and q.dtype == torch.float32 and H != HKV:
        B, _, T, _ = k.shape
        k = k[:, :, None].expand(B, HKV, H // HKV, T, D).reshape(B, H, T, D)
        v = v[:, :, None].expand(B, HKV, H // HKV, T, D).reshape(B, H, T, D)
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=D**-0.5)
    return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=D**-0.5, enable_gqa=True)


class ModelNew(nn.Module):
    """Llama-style attention (GQA, RoPE, causal, the call's KV cache returned): q/k/v/o projections as cuBLAS GEMMs,
    RoPE on q and k and the cache's k/v layout in one Triton pass (and its transpose in backward), attention as the
    library's scaled_dot_product_attention (cuDNN/flash on the GPU), with GQA as the module runs it."""

    def __init__(self, weights: str):
        super().__init__()
        w = torch.load(weights, map_location="cpu", weights_only=True)
        self.q_proj_weight = nn.Parameter(w["q_proj.weight"])
        self.k_proj_weight = nn.Parameter(w["k_proj.weight"])
        self.v_proj_weight = nn.Parameter(w["v_proj.weight"])
        self.o_proj_weight = nn.Parameter(w["o_proj.weight"])

    def forward(self, hidden_states, position_ids, cos, sin):
        B, T, C = hidden_states.shape
        D = cos.shape[-1]
        H = self.q_proj_weight.shape[0] // D
        HKV = self.k_proj_weight.shape[0] // D
        x2 = hidden_states.reshape(B * T, C)
        cos, sin = cos.contiguous(), sin.contiguous()
        ws = (self.q_proj_weight, self.k_proj_weight, self.v_proj_weight)
        grads = (
            x2.requires_grad
            or cos.requires_grad
            or sin.requires_grad
            or ws[0].requires_grad
            or ws[1].requires_grad
            or ws[2].requires_grad
        )
        if torch.is_grad_enabled() and grads:
            q, k, v, kc, vc = RopeQKVFn.apply(x2, *ws, cos, sin, B, T, H, HKV, D)
        else:  # inference: attention reads the cache's k and v themselves
            q, kc, vc, _, _ = rope_qkv(*_projections(x2, *ws), cos, sin, B, T, H, HKV, D, two_kv=False)
            k, v = kc, vc
        o = _attention(q.transpose(1, 2), k, v, D)
        out = F.linear(o.transpose(1, 2).reshape(B * T, H * D), self.o_proj_weight).view(B, T, -1)
        return (out, None), {"kf_state": {"cache_layers_0_keys": kc, "cache_layers_0_values": vc}}
