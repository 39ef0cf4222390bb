"""The Triton kernels of `triton.py`, imported on first use only (so TRITON_INTERPRET is read then).

Row layout: one program handles BLOCK_T positions of one (batch, KV head); each source tensor is found
through a table row [pointer, stride_b, stride_h, stride_t] (last dimension contiguous). Each table's tensors
share one element type (SK_DTYPE, K_DTYPE, V_DTYPE), which may differ between tables and from the query's (under
autocast the normed queries and keys are float32, the values bfloat16); every output is stored in its own
pointer's element type.
"""

import triton
import triton.language as tl


@triton.jit
def _load_rows(table, j, b, h, offs_t, offs_d, mask, DTYPE: tl.constexpr):
    # table row j: [pointer, stride_b, stride_h, stride_t] of source j; its last dim has stride 1
    entry = table + j * 4
    ptr = tl.load(entry).to(tl.pointer_type(DTYPE))
    sb, sh, st = tl.load(entry + 1), tl.load(entry + 2), tl.load(entry + 3)
    return tl.load(ptr + b * sb + h * sh + offs_t[:, None] * st + offs_d[None, :], mask=mask, other=0.0)

@triton.jit
def forward_kernel(
    q_ptr, q_sb, q_sh, q_st,
    sk_table, k_table, v_table,  # (n, 4) int64 tables: score keys, keys to mix, values to mix
    out_k_ptr, out_v_ptr,  # (B, Hkv, T, d) contiguous
    w_ptr,  # (B, Hkv, T, n) contiguous, ACC dtype
    n, T, Hkv, scale_ptr,  # scale_ptr: [scaling / G] in the ACC dtype
    G: tl.constexpr, D: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_T: tl.constexpr,
    SOFTMAX: tl.constexpr, MIX_K: tl.constexpr, MIX_V: tl.constexpr,
    SK_DTYPE: tl.constexpr, K_DTYPE: tl.constexpr, V_DTYPE: tl.constexpr, ACC: tl.constexpr,
):
    pid_t, pid_bh = tl.program_id(0), tl.program_id(1)
    b, h = pid_bh // Hkv, pid_bh % Hkv
    offs_t = pid_t * BLOCK_T + tl.arange(0, BLOCK_T)
    offs_d = tl.arange(0, BLOCK_D)
    mask_t = offs_t < T
    mask = mask_t[:, None] & (offs_d[None, :] < D)
    row = (pid_bh * T + offs_t)  # row index into (B*Hkv*T)

    if SOFTMAX:
        qbar = tl.zeros([BLOCK_T, BLOCK_D], dtype=ACC)
        for g in tl.static_range(G):
            qp = q_ptr + b * q_sb + (h * G + g) * q_sh + offs_t[:, None] * q_st + offs_d[None, :]
            qbar += tl.load(qp, mask=mask, other=0.0).to(ACC)
        qbar = qbar * tl.load(scale_ptr)
        m = tl.full([BLOCK_T], float("-inf"), dtype=ACC)
    else:
        m = tl.zeros([BLOCK_T], dtype=ACC)
    denom = tl.zeros([BLOCK_T], dtype=ACC)
    acc_k = tl.zeros([BLOCK_T, BLOCK_D], dtype=ACC)
    acc_v = tl.zeros([BLOCK_T, BLOCK_D], dtype=ACC)
    for j in range(n):
        if SOFTMAX:
            sk = _load_rows(sk_table, j, b, h, offs_t, offs_d, mask, SK_DTYPE).to(ACC)
            s = tl.sum(qbar * sk, axis=1)  # type: ignore[possibly-undefined]  # SOFTMAX: a constexpr, set above
            tl.store(w_ptr + row * n + j, s, mask=mask_t)  # raw score; normalised below
            m_new = tl.maximum(m, s)
            alpha = tl.exp(m - m_new)
            p = tl.exp(s - m_new)
            m = m_new
        else:
            alpha = tl.full([BLOCK_T], 1.0, dtype=ACC)
            p = tl.full([BLOCK_T], 1.0, dtype=ACC)
        denom = denom * alpha + p
        if MIX_V:
            v = _load_rows(v_table, j, b, h, offs_t, offs_d, mask, V_DTYPE).to(ACC)
            acc_v = acc_v * alpha[:, None] + p[:, None] * v
        if MIX_K:
            k = _load_rows(k_table, j, b, h, offs_t, offs_d, mask, K_DTYPE).to(ACC)
            acc_k = acc_k * alpha[:, None] + p[:, None] * k
    out_offs = row[:, None] * D + offs_d[None, :]
    tl.debug_barrier()  # the raw scores stored above are read back below, maybe by other threads
    if MIX_V:
        tl.store(out_v_ptr + out_offs, (acc_v / denom[:, None]).to(out_v_ptr.dtype.element_ty), mask=mask)
    if MIX_K:
        tl.store(out_k_ptr + out_offs, (acc_k / denom[:, None]).to(out_k_ptr.dtype.element_ty), mask=mask)
    for j in range(n):
        if SOFTMAX:
            s = tl.load(w_ptr + row * n + j, mask=mask_t, other=0.0)
            w = tl.exp(s - m) / denom
        else:
            w = 1.0 / denom
        tl.store(w_ptr + row * n + j, w, mask=mask_t)

@triton.jit
def backward_kernel(
    q_ptr, q_sb, q_sh, q_st,
    sk_table, k_table, v_table,
    w_ptr, dw_ptr,  # saved weights and the weights' incoming gradient (B, Hkv, T, n), ACC dtype
    dout_k_ptr, dout_v_ptr,  # incoming gradients of the mixed key / value, (B, Hkv, T, d) contiguous
    dq_ptr,  # (B, Hq, T, d) contiguous, every element written here
    dsk_ptr, dk_ptr, dv_ptr,  # (n, B, Hkv, T, d) contiguous gradients of the sources
    scratch_ptr,  # (B, Hkv, T, n) ACC dtype: dL/dw per source
    n, T, Hkv, scale_ptr, BHTD,
    G: tl.constexpr, D: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_T: tl.constexpr,
    SOFTMAX: tl.constexpr, MIX_K: tl.constexpr, MIX_V: tl.constexpr, HAS_DW: tl.constexpr,
    SK_DTYPE: tl.constexpr, K_DTYPE: tl.constexpr, V_DTYPE: tl.constexpr, ACC: tl.constexpr,
):
    pid_t, pid_bh = tl.program_id(0), tl.program_id(1)
    b, h = pid_bh // Hkv, pid_bh % Hkv
    offs_t = pid_t * BLOCK_T + tl.arange(0, BLOCK_T)
    offs_d = tl.arange(0, BLOCK_D)
    mask_t = offs_t < T
    mask = mask_t[:, None] & (offs_d[None, :] < D)
    row = (pid_bh * T + offs_t)
    out_offs = row[:, None] * D + offs_d[None, :]
    if MIX_V:
        dov = tl.load(dout_v_ptr + out_offs, mask=mask, other=0.0).to(ACC)
    if MIX_K:
        dok = tl.load(dout_k_ptr + out_offs, mask=mask, other=0.0).to(ACC)

    # pass 1: gradients of the mixed states' inputs, dL/dw_j and sum_j w_j dL/dw_j
    total = tl.zeros([BLOCK_T], dtype=ACC)
    for j in range(n):
        w = tl.load(w_ptr + row * n + j, mask=mask_t, other=0.0)
        dw = tl.zeros([BLOCK_T], dtype=ACC)
        if HAS_DW:
            dw += tl.load(dw_ptr + row * n + j, mask=mask_t, other=0.0)
        if MIX_V:
            v = _load_rows(v_table, j, b, h, offs_t, offs_d, mask, V_DTYPE).to(ACC)
            dw += tl.sum(dov * v, axis=1)  # type: ignore[possibly-undefined]  # MIX_V: a constexpr, set above
            tl.store(dv_ptr + tl.cast(j, tl.int64) * BHTD + out_offs, (w[:, None] * dov).to(dv_ptr.dtype.element_ty),
                     mask=mask)
        if MIX_K:
            k = _load_rows(k_table, j, b, h, offs_t, offs_d, mask, K_DTYPE).to(ACC)
            dw += tl.sum(dok * k, axis=1)  # type: ignore[possibly-undefined]  # MIX_K: a constexpr, set above
            tl.store(dk_ptr + tl.cast(j, tl.int64) * BHTD + out_offs, (w[:, None] * dok).to(dk_ptr.dtype.element_ty),
                     mask=mask)
        if SOFTMAX:
            tl.store(scratch_ptr + row * n + j, dw, mask=mask_t)
            total += w * dw

    # pass 2 (softmax): through the softmax into the scores, the group-mean query and the score keys
    if SOFTMAX:
        tl.debug_barrier()  # dL/dw stored in pass 1 is read back here, maybe by other threads
        qbar = tl.zeros([BLOCK_T, BLOCK_D], dtype=ACC)
        for g in tl.static_range(G):
            qp = q_ptr + b * q_sb + (h * G + g) * q_sh + offs_t[:, None] * q_st + offs_d[None, :]
            qbar += tl.load(qp, mask=mask, other=0.0).to(ACC)
        scale = tl.load(scale_ptr)
        qbar = qbar * scale  # d score_j / d sk_j
        dqbar = tl.zeros([BLOCK_T, BLOCK_D], dtype=ACC)
        for j in range(n):
            w = tl.load(w_ptr + row * n + j, mask=mask_t, other=0.0)
            dw = tl.load(scratch_ptr + row * n + j, mask=mask_t, other=0.0)
            ds = w * (dw - total)
            sk = _load_rows(sk_table, j, b, h, offs_t, offs_d, mask, SK_DTYPE).to(ACC)
            dqbar += ds[:, None] * sk
            tl.store(dsk_ptr + tl.cast(j, tl.int64) * BHTD + out_offs,
                     (ds[:, None] * qbar).to(dsk_ptr.dtype.element_ty), mask=mask)
        dq = (dqbar * scale).to(dq_ptr.dtype.element_ty)
        for g in tl.static_range(G):
            dq_offs = ((b * Hkv + h) * G + g) * T * D + offs_t[:, None] * D + offs_d[None, :]
            tl.store(dq_ptr + dq_offs, dq, mask=mask)
