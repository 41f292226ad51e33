"""[judge, reference worker, one-shot child] The Triton kernels of fused.py: each walks its tensors once, in float64,
and writes one row of partial results per program (fused.py merges them). Imported only when a large output on a
GPU is compared; Triton reads TRITON_INTERPRET when this module is first imported."""

import triton
import triton.language as tl


@triton.jit
def shift(x_ptr, base, n, BLOCK: tl.constexpr):
    """The mean of the finite values among the program's first BLOCK: what its moments are taken about
    (sums of deviations from a value near the mean keep their precision)."""
    offs = base + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0.0).to(tl.float64)
    fin = (offs < n) & (x == x) & (tl.abs(x) != float("inf"))
    return tl.sum(tl.where(fin, x, 0.0), axis=0) / tl.maximum(tl.sum(fin.to(tl.float64), axis=0), 1.0)


@triton.jit
def pair(r_ptr, o_ptr, out_ptr, n, p_ptr, BLOCK: tl.constexpr, ITERS: tl.constexpr, COLS: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)
    atol = tl.load(p_ptr)  # float64 from a tensor: a Python float argument would arrive as float32
    rtol = tl.load(p_ptr + 1)
    base = pid * (BLOCK * ITERS)
    lane = tl.arange(0, BLOCK)
    SENT = BLOCK * ITERS
    inf = float("inf")
    k = shift(r_ptr, base, n, BLOCK)
    n_bad = tl.zeros([BLOCK], tl.int32)
    n_nf = tl.zeros([BLOCK], tl.int32)
    nan_r = tl.zeros([BLOCK], tl.int32)
    nonzero = tl.zeros([BLOCK], tl.int32)
    first_nf = tl.full([BLOCK], SENT, tl.int32)
    mx = tl.full([BLOCK], -1.0, tl.float64)
    mx_at = tl.full([BLOCK], SENT, tl.int32)
    ex = tl.full([BLOCK], -inf, tl.float64)
    ex_at = tl.full([BLOCK], SENT, tl.int32)
    relmax = tl.full([BLOCK], -1.0, tl.float64)
    cnt = tl.zeros([BLOCK], tl.float64)
    s1 = tl.zeros([BLOCK], tl.float64)
    s2 = tl.zeros([BLOCK], tl.float64)
    sq_err = tl.zeros([BLOCK], tl.float64)
    sq_ref = tl.zeros([BLOCK], tl.float64)
    absmax = tl.zeros([BLOCK], tl.float64)
    lo = tl.full([BLOCK], inf, tl.float64)
    hi = tl.full([BLOCK], -inf, tl.float64)
    for it in range(ITERS):
        loc = it * BLOCK + lane
        offs = base + loc
        valid = offs < n
        r = tl.load(r_ptr + offs, mask=valid, other=0.0).to(tl.float64)
        o = tl.load(o_ptr + offs, mask=valid, other=0.0).to(tl.float64)
        r_nan, o_nan = r != r, o != o
        r_inf, o_inf = tl.abs(r) == inf, tl.abs(o) == inf
        r_fin, o_fin = ~(r_nan | r_inf), ~(o_nan | o_inf)
        both = valid & r_fin & o_fin
        new_nf = valid & r_fin & ~o_fin
        # compare._values' float64 arithmetic, element by element
        diff = tl.abs(o - r)
        diff = tl.where((r_nan & o_nan) | (r_inf & (r == o)), 0.0, diff)
        diff = tl.where(diff != diff, inf, diff)
        absr = tl.abs(r)
        tol = atol + rtol * tl.where(r_nan | r_inf, 0.0, absr)
        bad = ((diff > tol) | new_nf) & valid
        fdiff = tl.where(both, diff, 0.0)
        n_bad += bad.to(tl.int32)
        n_nf += new_nf.to(tl.int32)
        first_nf = tl.where(new_nf & (first_nf == SENT), loc, first_nf)
        up = valid & (fdiff > mx)  # strictly greater: a lane keeps its first index of its maximum
        mx = tl.where(up, fdiff, mx)
        mx_at = tl.where(up, loc, mx_at)
        relmax = tl.maximum(relmax, tl.where(valid & ~r_nan, fdiff / (absr + atol), -1.0))
        nan_r += (valid & r_nan).to(tl.int32)
        e = diff - tol
        up = bad & (e > ex)
        ex = tl.where(up, e, ex)
        ex_at = tl.where(up, loc, ex_at)
        # ErrorNorm's sums over the positions finite in both
        dk = tl.where(both, r - k, 0.0)
        d = tl.where(both, o - r, 0.0)
        rb = tl.where(both, r, 0.0)
        cnt += both.to(tl.float64)
        s1 += dk
        s2 += dk * dk
        sq_err += d * d
        sq_ref += rb * rb
        absmax = tl.maximum(absmax, tl.where(both, absr, 0.0))
        nonzero += (both & (r != 0.0)).to(tl.int32)
        lo = tl.minimum(lo, tl.where(both, r, inf))
        hi = tl.maximum(hi, tl.where(both, r, -inf))
    row = out_ptr + pid * COLS
    m = tl.max(mx, axis=0)
    e_best = tl.max(ex, axis=0)
    nb = tl.sum(cnt, axis=0)
    t1 = tl.sum(s1, axis=0)
    tl.store(row + 0, tl.sum(n_bad, axis=0).to(tl.float64))
    tl.store(row + 1, tl.sum(n_nf, axis=0).to(tl.float64))
    tl.store(row + 2, tl.min(first_nf, axis=0).to(tl.float64))
    tl.store(row + 3, m)
    tl.store(row + 4, tl.min(tl.where(mx == m, mx_at, SENT), axis=0).to(tl.float64))
    tl.store(row + 5, tl.max(relmax, axis=0))
    tl.store(row + 6, tl.sum(nan_r, axis=0).to(tl.float64))
    tl.store(row + 7, e_best)
    tl.store(row + 8, tl.min(tl.where(ex == e_best, ex_at, SENT), axis=0).to(tl.float64))
    tl.store(row + 9, nb)
    tl.store(row + 10, k + t1 / tl.maximum(nb, 1.0))
    tl.store(row + 11, tl.maximum(tl.sum(s2, axis=0) - t1 * t1 / tl.maximum(nb, 1.0), 0.0))
    tl.store(row + 12, tl.sum(sq_err, axis=0))
    tl.store(row + 13, tl.sum(sq_ref, axis=0))
    tl.store(row + 14, tl.max(absmax, axis=0))
    tl.store(row + 15, tl.sum(nonzero, axis=0).to(tl.float64))
    tl.store(row + 16, tl.min(lo, axis=0))
    tl.store(row + 17, tl.max(hi, axis=0))


@triton.jit
def truth(r_ptr, t_ptr, o_ptr, out_ptr, n, p_ptr, BLOCK: tl.constexpr, ITERS: tl.constexpr, COLS: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)
    base = pid * (BLOCK * ITERS)
    lane = tl.arange(0, BLOCK)
    inf = float("inf")
    k = shift(t_ptr, base, n, BLOCK)
    nf = tl.zeros([BLOCK], tl.int32)
    e_max = tl.zeros([BLOCK], tl.float64)
    r_max = tl.zeros([BLOCK], tl.float64)
    sq_e = tl.zeros([BLOCK], tl.float64)
    sq_r = tl.zeros([BLOCK], tl.float64)
    cnt = tl.zeros([BLOCK], tl.float64)
    s1 = tl.zeros([BLOCK], tl.float64)
    s2 = tl.zeros([BLOCK], tl.float64)
    lo = tl.full([BLOCK], inf, tl.float64)
    hi = tl.full([BLOCK], -inf, tl.float64)
    for it in range(ITERS):
        offs = base + it * BLOCK + lane
        valid = offs < n
        r = tl.load(r_ptr + offs, mask=valid, other=0.0).to(tl.float64)
        t = tl.load(t_ptr + offs, mask=valid, other=0.0).to(tl.float64)
        o = tl.load(o_ptr + offs, mask=valid, other=0.0).to(tl.float64)
        t_fin = valid & (t == t) & (tl.abs(t) != inf)
        o_fin = (o == o) & (tl.abs(o) != inf)
        both = t_fin & o_fin & (r == r) & (tl.abs(r) != inf)
        de = tl.where(both, tl.abs(o - t), 0.0)
        dr = tl.where(both, tl.abs(r - t), 0.0)
        nf += (t_fin & ~o_fin).to(tl.int32)
        e_max = tl.maximum(e_max, de)
        r_max = tl.maximum(r_max, dr)
        sq_e += de * de
        sq_r += dr * dr
        dk = tl.where(t_fin, t - k, 0.0)
        cnt += t_fin.to(tl.float64)
        s1 += dk
        s2 += dk * dk
        lo = tl.minimum(lo, tl.where(t_fin, t, inf))
        hi = tl.maximum(hi, tl.where(t_fin, t, -inf))
    row = out_ptr + pid * COLS
    nb = tl.sum(cnt, axis=0)
    t1 = tl.sum(s1, axis=0)
    tl.store(row + 0, tl.sum(nf, axis=0).to(tl.float64))
    tl.store(row + 1, tl.max(e_max, axis=0))
    tl.store(row + 2, tl.max(r_max, axis=0))
    tl.store(row + 3, tl.sum(sq_e, axis=0))
    tl.store(row + 4, tl.sum(sq_r, axis=0))
    tl.store(row + 5, nb)
    tl.store(row + 6, k + t1 / tl.maximum(nb, 1.0))
    tl.store(row + 7, tl.maximum(tl.sum(s2, axis=0) - t1 * t1 / tl.maximum(nb, 1.0), 0.0))
    tl.store(row + 8, tl.min(lo, axis=0))
    tl.store(row + 9, tl.max(hi, axis=0))


@triton.jit
def vacuous(x_ptr, out_ptr, n, p_ptr, BLOCK: tl.constexpr, ITERS: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)
    a = tl.load(p_ptr)
    rt = tl.load(p_ptr + 1)
    mean = tl.load(p_ptr + 2)
    base = pid * (BLOCK * ITERS)
    lane = tl.arange(0, BLOCK)
    zeros_out = tl.zeros([BLOCK], tl.int32)
    mean_out = tl.zeros([BLOCK], tl.int32)
    for it in range(ITERS):
        offs = base + it * BLOCK + lane
        valid = offs < n
        x = tl.load(x_ptr + offs, mask=valid, other=0.0).to(tl.float64)
        fin = valid & (x == x) & (tl.abs(x) != float("inf"))
        tol = a + rt * tl.abs(x)
        zeros_out += (fin & ~(tl.abs(x) <= tol)).to(tl.int32)
        mean_out += (fin & ~(tl.abs(x - mean) <= tol)).to(tl.int32)
    tl.store(out_ptr + pid * 2, tl.sum(zeros_out, axis=0).to(tl.float64))
    tl.store(out_ptr + pid * 2 + 1, tl.sum(mean_out, axis=0).to(tl.float64))


@triton.jit
def vary_affine(x_ptr, y_ptr, n, p_ptr, SHIFT: tl.constexpr, BLOCK: tl.constexpr):
    """input_variants' "scaled" (SHIFT=False: x * c) or "shifted" (x - c) in float64, rounded once into y's dtype:
    the torch loop's ``y.copy_(x.double() * c)`` element by element."""
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    valid = offs < n
    x = tl.load(x_ptr + offs, mask=valid, other=0.0).to(tl.float64)
    c = tl.load(p_ptr)
    if SHIFT:
        y = x - c
    else:
        y = x * c
    tl.store(y_ptr + offs, y.to(y_ptr.dtype.element_ty), mask=valid)


@triton.jit
def vary_student(z_ptr, s_ptr, y_ptr, n, p_ptr, BLOCK: tl.constexpr):
    """input_variants' "heavy_tailed" past torch's draws: mean + std * z / sqrt(chi2 / dof), each step rounded in
    float64 as torch's own CUDA kernels round it (no fused multiply-add), then once into y's dtype. torch divides
    by a Python number as a product with its reciprocal (``div_true_kernel_cuda``), so ``inv_dof`` is 1 / dof."""
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    valid = offs < n
    z = tl.load(z_ptr + offs, mask=valid, other=0.0)
    s = tl.load(s_ptr + offs, mask=valid, other=1.0)
    mean = tl.load(p_ptr)
    std = tl.load(p_ptr + 1)
    inv_dof = tl.load(p_ptr + 2)
    t = z / tl.sqrt(s * inv_dof)
    y = mean + std * t
    tl.store(y_ptr + offs, y.to(y_ptr.dtype.element_ty), mask=valid)
