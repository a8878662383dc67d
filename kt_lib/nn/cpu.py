"""The `cpu` backend: cache-blocked attention kernels, fused by hand for CPU speed.

# B batch, H heads, L query steps, S key steps, Dh head dim
The arithmetic is tiny; memory traffic is what costs on CPU. Both kernels work per block of query
rows (a block skips keys none of its queries may read: ~40% of the [L, S] work under a causal
mask at L = 200) and, inside a block, per chunk of batch rows (the elementwise chain stays in
cache), with [B, H, L, S] scratch tensors recycled by a buffer pool. `whole=True` runs the same
arithmetic as one block and one chunk, with no host synchronisation: the `cuda` backend's AKT
attention (kt_lib.nn.cuda). Both equal kt_lib.nn.reference (tests/test_attention.py).
"""

from __future__ import annotations

import functools
import math

import torch
import torch.nn.functional as F

from .dropout import draw_keep, keep_scale
from .native.akt import backward_chain, forward_chain
from .pool import POOL, clear_buffer_pool  # noqa: F401 (clear_buffer_pool: kt_lib.nn.cpu API)
from .reference import DECAY_MAX, DECAY_MIN, safe_mask

CHUNK_ELEMS = 1 << 19  # ~2 MB of float32 per chunk: the elementwise chain stays in cache
QUERY_BLOCK = 64  # query rows per block; a block skips keys that none of its queries may read


def without_autocast(fn):
    """Run an autograd Function's forward or backward with autocast off: backward is called
    from `.backward()`, often inside the caller's autocast block, which would turn the
    kernel's float32 products into bfloat16 ones (and mismatch its buffers' dtypes)."""

    @functools.wraps(fn)
    def run(ctx, first, *rest):
        with torch.autocast(first.device.type, enabled=False):
            return fn(ctx, first, *rest)

    return run


def _masked_bias(mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Additive mask: 0 where visible, a large finite negative where masked (no inf, no NaN)."""
    neg = torch.finfo(dtype).min / 2  # finite after adding any score below finfo.max / 2
    return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill_(~mask, neg)


def _query_blocks(mask: torch.Tensor) -> list[tuple[int, int, int]]:
    """(l0, l1, s1) per block of query rows: keys >= s1 are masked for every query in l0:l1.

    With a causal mask the late blocks read all keys and the early ones few: about 40% of the
    [L, S] work disappears at L = 200 with no change to any weight (masked weights are 0).
    """
    L, S = mask.shape[-2:]
    visible = mask.reshape(-1, L, S).any(0)  # [L, S]
    n = max(1, -(-L // QUERY_BLOCK))
    edges = [round(i * L / n) for i in range(n + 1)]
    blocks = []
    for l0, l1 in zip(edges[:-1], edges[1:], strict=True):
        cols = visible[l0:l1].any(0).nonzero()
        blocks.append((l0, l1, int(cols.max()) + 1 if len(cols) else 0))
    return blocks


def _rows(t: torch.Tensor, b0: int, b1: int) -> torch.Tensor:
    """Batch rows b0:b1 of a tensor that may broadcast over the batch (size-1 batch dim)."""
    return t if t.shape[0] == 1 else t[b0:b1]


def fold_heads(t: torch.Tensor) -> torch.Tensor:
    """[n, H, L, X] -> [n * H, L, X] view (a slice of contiguous heads folds its batch dims)."""
    return t.flatten(0, 1)


def step_major(t: torch.Tensor) -> bool:
    """Whether heads [B, H, L, Dh] lie in [B, L, H, Dh] memory (`split_heads` of a contiguous
    [B, L, D]): then outputs and gradients are allocated that way, so that `merge_heads` and
    the backward of `split_heads` are views instead of copies."""
    return t.dim() == 4 and t.transpose(1, 2).is_contiguous()


def new_heads(like: torch.Tensor, shape, step_major_layout: bool, zeros: bool = True):
    """[B, H, L, D] = `shape` like `like` (dtype, device), in [B, L, H, D] memory when
    `step_major_layout`, else contiguous: zeros, or uninitialised with `zeros=False` (for a
    buffer the caller writes whole: see `_widest_first`)."""
    B, H, L, D = shape
    new = like.new_zeros if zeros else like.new_empty
    if step_major_layout:
        return new(B, L, H, D).transpose(1, 2)
    return new(B, H, L, D)


def _widest_first(blocks: list[tuple[int, int, int]]) -> list[tuple[int, int, int, int]]:
    """(index, l0, l1, s1) of the blocks that read keys, the one reading the most first.

    The backward visits them in this order so that its first writes of the key-indexed
    gradients (keys :s1 of the widest block, every batch row) are assignments: no gradient
    buffer is zero-filled beforehand, only the parts no block writes are (`_zero_unwritten`).
    """
    live = [(i, *b) for i, b in enumerate(blocks) if b[2] > 0]
    return sorted(live, key=lambda b: -b[3])


def _zero_unwritten(blocks, by_query=(), by_key=()) -> None:
    """Zero what a blocked kernel never writes in its uninitialised [B, H, L|S, .] buffers:
    in those indexed by query (`by_query`) the rows of blocks that read no key, in those
    indexed by key (`by_key`) the keys past the widest block's last readable one."""
    s_max = max([0, *(s1 for _, _, s1 in blocks)])  # (dynamo refuses max's default=)
    for t in by_key:
        t[:, :, s_max:] = 0
    for l0, l1, s1 in blocks:
        if s1 == 0:
            for t in by_query:
                t[:, :, l0:l1] = 0


def write_grad(dst: torch.Tensor, value: torch.Tensor, first: bool) -> None:
    """dst = value on the first write of a gradient's part (`_widest_first`), else dst += value."""
    (dst.copy_ if first else dst.add_)(value)


def _chunks(B: int, per_row: int):
    rows = max(1, min(B, CHUNK_ELEMS // max(1, per_row)))
    return rows, [(b0, min(B, b0 + rows)) for b0 in range(0, B, rows)]


class _MonotonicCore(torch.autograd.Function):
    """Scores -> context distance -> decay -> masked softmax -> dropout -> weighted values.

    A hand-fused version of AKT's attention for CPU speed (the arithmetic is tiny, memory
    traffic is what costs):
    - query blocks: each block of query rows only computes the keys some of its queries see;
    - batch chunks: inside a block, a few batch rows at a time go through the whole chain -
      score matmul, elementwise ops in place (`out=`), value matmul - while in cache;
    - per block, backward keeps the weights W, the dropped weights P = W * keep / (1 - p)
      (the keep mask's buffer, multiplied in place), the decay and s3 * (-y) (decayed scores
      times -theta * dist, zero where the decay clamp is active: it carries the gradient of
      theta), taken from `POOL`; backward recomputes the rest per chunk. With dropout,
      dW = dP * keep / (1 - p), so ds = P * dP - W * sum_j(P * dP);
    - in float32 on CPU each chunk's elementwise chain, forward and backward, runs in C
      (kt_lib/nn/native/akt_chain.c: a few vectorised loops a row instead of about fourteen
      passes over the chunk); the torch lines are the same chain, taken in float64, when the
      weights are asked for, or where no compiler builds the C (tests/test_native.py).
    Forward and gradients match the plain autograd formula (tests/test_akt_idkt.py).
    """

    @staticmethod
    @without_autocast
    def forward(ctx, q, k, v, theta, bias, pos, has_key, p: float, need_weights: bool, whole):
        # q [B, H, L, Dh] k/v [B, H, S, Dh] theta [H] bias [B|1, H|1, L, S] pos [L, S]
        B, H, L, Dh = q.shape
        S = k.shape[2]
        ctx.layout = [step_major(t) for t in (q, k, v)]
        # contiguous heads: every chunk slice below is then a strided view bmm reads in place
        qs = torch.mul(q, Dh**-0.5, out=q.new_empty(q.shape))  # contiguous
        k, v = k.contiguous(), v.contiguous()
        th = theta.detach().to(q.dtype)
        pos_theta2 = pos * th.view(H, 1, 1).square()  # [H, L, S]: (theta |t - tau|)^2
        neg_y_max = math.log(DECAY_MIN)  # exp(-y) < DECAY_MIN below this: the clamp is active
        if whole:  # one block: no host-side look at the mask
            blocks = [(0, L, S)]
        else:
            blocks = _query_blocks(bias > torch.finfo(q.dtype).min / 4)
        out = new_heads(qs, (B, H, L, v.shape[-1]), ctx.layout[0], zeros=False)
        _zero_unwritten(blocks, by_query=(out,))
        full_w = q.new_zeros(B, H, L, S) if need_weights else None
        full_u = q.new_zeros(B, H, L, S) if need_weights else None
        keep_grad = any(ctx.needs_input_grad)
        saved: list[torch.Tensor] = []
        for l0, l1, s1 in blocks:
            shape = (B, H, l1 - l0, s1)
            if s1 == 0:  # no query of the block sees a key: zero output
                saved += [qs.new_empty(0)] * 4
                continue
            W, D, AY = (POOL.take(shape, q) for _ in range(3))
            keep = POOL.take(shape, q) if p > 0 else None  # 1 keep, 0 drop
            bias_b, neg_pos_b = bias[..., l0:l1, :s1], -pos_theta2[:, l0:l1, :s1]
            rows, chunks = (B, [(0, B)]) if whole else _chunks(B, H * (l1 - l0) * s1)
            work = [POOL.take((rows, *shape[1:]), q) for _ in range(3)]
            for b0, b1 in chunks:
                n = b1 - b0
                a, w, m = (x[:n] for x in work)
                torch.bmm(
                    fold_heads(qs[b0:b1, :, l0:l1]),
                    fold_heads(k[b0:b1, :, :s1]).mT,
                    out=fold_heads(a),
                )
                keep_c = None
                if keep is not None:  # drawn first: the same draws on either path
                    scale = draw_keep(keep[b0:b1], p)
                    keep_c = keep[b0:b1]
                chunk = (W[b0:b1], D[b0:b1], AY[b0:b1])
                if full_u is None and forward_chain(
                    a, _rows(bias_b, b0, b1), neg_pos_b, keep_c, scale if p > 0 else 1.0, *chunk
                ):  # the chain below in C (kt_lib/nn/native/akt_chain.c)
                    out[b0:b1, :, l0:l1] = (keep_c if p > 0 else W[b0:b1]) @ v[b0:b1, :, :s1]
                    continue
                a.add_(_rows(bias_b, b0, b1))  # masked keys: a large finite negative
                torch.softmax(a, -1, out=w)  # undecayed masked softmax
                if full_u is not None:
                    full_u[b0:b1, :, l0:l1, :s1] = w
                # cumsum accumulates in double: the rounded running sums never pass the row
                # total (their last entry), so the remainder is >= 0 without a clamp
                torch.cumsum(w, -1, out=w)
                total = w[..., -1:].clone()  # row mass
                # (running sum - total) * -(theta |t - tau|)^2 = (mass after key j) * ...
                w.sub_(total).mul_(neg_pos_b).sqrt_().neg_()  # -y = -theta * dist, no gradient
                torch.threshold(w, neg_y_max, 0.0, out=m)  # 0 where the clamp will be active
                w.exp_()
                d = D[b0:b1]
                torch.clamp(w, DECAY_MIN, DECAY_MAX, out=d)  # decay
                a.mul_(d)  # decayed scores s3 (masked keys stay hugely negative)
                torch.mul(a, m, out=AY[b0:b1])
                wts = W[b0:b1]
                torch.softmax(a, -1, out=wts)
                if keep is not None:  # the keep mask's buffer becomes P, kept for backward
                    wts = keep_c.mul_(wts).mul_(scale)  # P
                out[b0:b1, :, l0:l1] = wts @ v[b0:b1, :, :s1]
            POOL.give(*work)
            if full_w is not None:
                full_w[:, :, l0:l1, :s1] = W
            saved += [W, D, AY, keep if keep is not None else W.new_empty(0)]
        out.mul_(has_key)
        if keep_grad:
            ctx.save_for_backward(qs, k, v, theta, has_key, *saved)
            ctx.blocks, ctx.p, ctx.whole = blocks, p, whole
            ctx.scale = keep_scale(p)
        else:
            POOL.give(*saved)
        if full_w is None:
            return out, None, None
        return out, full_w.mul_(has_key), full_u.mul_(has_key)

    @staticmethod
    @without_autocast
    def backward(ctx, g_out, _gw, _gu):
        if getattr(ctx, "done", False):  # its buffers went back to the pool after the first
            raise RuntimeError(
                "monotonic attention supports one backward per forward "
                "(no retain_graph=True second pass)"
            )
        ctx.done = True
        qs, k, v, theta, has_key, *saved = ctx.saved_tensors
        p = ctx.p
        B, H, L, Dh = qs.shape
        g_out = torch.mul(g_out, has_key, out=g_out.new_empty(g_out.shape))  # contiguous heads
        gq, gk, gv = (
            new_heads(t, t.shape, sm, zeros=False)
            for t, sm in zip((qs, k, v), ctx.layout, strict=True)
        )
        _zero_unwritten(ctx.blocks, by_query=(gq,), by_key=(gk, gv))
        g_y = torch.zeros(H, dtype=torch.float64, device=qs.device)  # sum of ds * s3 * (-y)
        for n_block, (i, l0, l1, s1) in enumerate(_widest_first(ctx.blocks)):
            W, D, AY, P = saved[4 * i : 4 * i + 4]
            shape = W.shape
            rows, chunks = (B, [(0, B)]) if ctx.whole else _chunks(B, H * (l1 - l0) * s1)
            work = [POOL.take((rows, *shape[1:]), W) for _ in range(2)]
            for b0, b1 in chunks:
                n = b1 - b0
                g, w = (x[:n] for x in work)
                go, kc, vc = g_out[b0:b1, :, l0:l1], k[b0:b1, :, :s1], v[b0:b1, :, :s1]
                torch.bmm(fold_heads(go), fold_heads(vc).mT, out=fold_heads(g))  # d loss / d P
                wts = W[b0:b1]
                pw = P[b0:b1] if p > 0 else wts
                write_grad(gv[b0:b1, :, :s1], pw.transpose(-2, -1) @ go, n_block == 0)
                part = backward_chain(pw, wts, D[b0:b1], AY[b0:b1], g)  # the lines below, in C
                if part is not None:
                    g_y += part
                else:
                    torch.mul(pw, g, out=w)
                    rowsum = w.sum(-1, keepdim=True)
                    torch.addcmul(w, wts, rowsum, value=-1.0, out=g)  # softmax+dropout backward
                    torch.mul(g, AY[b0:b1], out=w)
                    g_y += w.sum((0, 2, 3), dtype=torch.float64)
                    g.mul_(D[b0:b1])  # d loss / d raw scores
                gq[b0:b1, :, l0:l1] = g @ kc
                g_k = g.transpose(-2, -1) @ qs[b0:b1, :, l0:l1]
                write_grad(gk[b0:b1, :, :s1], g_k, n_block == 0)
            POOL.give(*work)
        POOL.give(*saved)
        # s3 = s * exp(-theta dist): d s3 / d theta = -s3 dist = s3 (-y) / theta
        g_theta = (g_y / theta.detach().double()).to(theta.dtype)
        return gq.mul_(Dh**-0.5), gk, gv, g_theta, None, None, None, None, None, None


class DotScores:
    """The score of plain attention, q_i . k_j / sqrt(Dh), as a plug-in of `_ScoredAttention`.

    A scorer has `prepare(*inputs) -> saved` (the tensors its chunks read, kept for backward),
    `scores(saved, where, work) -> [n, H, l, s]` (a chunk's scores, in `work` or a new tensor),
    `backward(saved, grads, d, where, work, first)` (writes a chunk's share of the inputs'
    gradients from d = d loss / d scores) and `finish(saved, grads) -> grads`; `where` = (b0,
    b1, l0, l1, s1): batch rows, query steps, readable keys. `grads` are uninitialised buffers
    in the inputs' shapes and layouts [B, H, L|S, .]: a gradient indexed by query (dim 2 = L)
    is assigned, each query row belonging to one block; one indexed by key (`by_key`: the
    inputs' positions) is assigned on the `first` block (the widest, every batch row) and added
    to after; the kernel zeroes what no block writes. `backward_work`: whether `backward`
    needs a chunk-sized scratch tensor."""

    backward_work = False
    by_key = (1,)  # k

    def prepare(self, q, k):
        return torch.mul(q, q.shape[-1] ** -0.5, out=q.new_empty(q.shape)), k.contiguous()

    def scores(self, saved, where, work):
        (qs, k), (b0, b1, l0, l1, s1) = saved, where
        torch.bmm(
            fold_heads(qs[b0:b1, :, l0:l1]), fold_heads(k[b0:b1, :, :s1]).mT, out=fold_heads(work)
        )
        return work

    def backward(self, saved, grads, d, where, work, first):
        (qs, k), (g_q, g_k), (b0, b1, l0, l1, s1) = saved, grads, where
        g_q[b0:b1, :, l0:l1] = d @ k[b0:b1, :, :s1]
        write_grad(g_k[b0:b1, :, :s1], d.mT @ qs[b0:b1, :, l0:l1], first)

    def finish(self, saved, grads):
        grads[0].mul_(saved[0].shape[-1] ** -0.5)
        return grads


class _ScoredAttention(torch.autograd.Function):
    """softmax(scores, masked) -> dropout -> @ v, fused by hand for training on CPU; the
    scores come from a plug-in (`DotScores`: plain attention; stableKT's penumbral heads:
    kt_lib.nn.penumbral), the chain after them is this one definition.

    SDPA's fused CPU kernel has no dropout (it falls back to a bernoulli_-based path), and
    autograd on the plain chain makes ~17 passes over the [B, H, L, S] weights. This one:
    - query blocks (`_query_blocks`, as AKT's kernel): each block of query rows only computes
      the keys some of its queries may read, so a causal mask skips ~40% of the work at L = 200;
    - batch chunks inside a block keep the elementwise passes in cache;
    - keeps the weights W and the dropped weights P = W * keep per block (scratch from the
      buffer pool; P is the keep mask's buffer, multiplied in place); the dropout scale
      1 / (1 - p) is applied to the [L, Dh] output, not to [L, S] tensors;
    - the softmax backward's row sums are g . out (a dot over Dh, not a pass over [L, S]), and
      d scores = W (keep dW - g . out) = P (g v^T) - W (g . out) goes to the scorer's backward;
    - the output and the gradients of v and of the scorer's inputs come back in the inputs'
      own layout (`new_heads`).
    Masked keys get a large finite negative score; a row without any readable key outputs zeros
    (its uniform weights are computed, then zeroed with the dropout scale in one pass, and its
    gradient is zeroed likewise). `extra`: a fixed additive score bias (no gradient). One
    backward per forward.
    `select` (sparseKT): a function (weights [n, H, l, s], readable [n|1, H|1, l, s]) -> kept
    (bool); each chunk's weights are then renormalised over the kept keys (the softmax over
    them), and the backward above holds unchanged, weights outside the kept set being 0.
    With p = 0 no keep mask is drawn (inference, or attention without dropout).
    """

    @staticmethod
    @without_autocast
    def forward(ctx, v, scorer, mask, p: float, extra, select, *inputs):
        # inputs [B, H, L|S, .] (the scorer's); v [B, H, S, Dv]; mask None or bool
        # broadcastable to [B, H, L, S]; extra None or broadcastable to [B, H, L, S]
        B, H, L = inputs[0].shape[:3]
        S = v.shape[-2]
        ctx.layout = [(t.shape, step_major(t)) for t in (v, *inputs)]
        saved_in = scorer.prepare(*inputs)
        v = v.contiguous()
        if mask is None and select is not None:  # the selection reads which keys are readable
            mask = torch.ones(L, S, dtype=torch.bool, device=v.device)
        if mask is None:
            blocks, bias, has_key = [(0, L, S)], None, None
        else:
            mask = mask.reshape((1,) * (4 - mask.dim()) + tuple(mask.shape))
            blocks, bias = _query_blocks(mask), _masked_bias(mask, v.dtype)
            has_key = mask.any(-1, keepdim=True).to(v.dtype)  # [B|1, H|1, L, 1]
        if extra is not None:
            extra = extra.to(v.dtype)
            extra = extra.reshape((1,) * (4 - extra.dim()) + tuple(extra.shape))
        out = new_heads(v, (B, H, L, v.shape[-1]), ctx.layout[1][1], zeros=False)
        _zero_unwritten(blocks, by_query=(out,))
        saved: list[torch.Tensor] = []
        scale = 1.0
        for l0, l1, s1 in blocks:
            shape = (B, H, l1 - l0, s1)
            if s1 == 0:  # no query of the block reads a key: zero output
                saved += [v.new_empty(0)] * 2
                continue
            W = POOL.take(shape, v)
            P = POOL.take(shape, v) if p > 0 else None  # the keep mask, then the dropped W
            if P is not None:
                scale = draw_keep(P, p)  # 0/1; the scale goes onto the output
            rows, chunks = _chunks(B, H * (l1 - l0) * s1)
            work = POOL.take((rows, *shape[1:]), v)
            for b0, b1 in chunks:
                a = scorer.scores(saved_in, (b0, b1, l0, l1, s1), work[: b1 - b0])
                if bias is not None:
                    a.add_(_rows(bias, b0, b1)[..., l0:l1, :s1])
                if extra is not None:
                    a.add_(_rows(extra, b0, b1)[..., l0:l1, :s1])
                w = torch.softmax(a, -1, out=W[b0:b1])
                if select is not None:  # renormalised over the kept keys
                    w.mul_(select(w, _rows(mask, b0, b1)[..., l0:l1, :s1]))
                    w.div_(w.sum(-1, keepdim=True).clamp_min_(torch.finfo(w.dtype).tiny))
                if P is not None:
                    w = P[b0:b1].mul_(w)  # dropped weights (unscaled), kept for backward
                out[b0:b1, :, l0:l1] = w @ v[b0:b1, :, :s1]
            POOL.give(work)
            saved += [W, P if P is not None else W.new_empty(0)]
        # the dropout scale, and zeros on rows without a readable key (one pass)
        row_scale = v.new_full((1,) * 4, scale) if has_key is None else has_key * scale
        out.mul_(row_scale)
        if any(ctx.needs_input_grad):
            ctx.save_for_backward(v, out, row_scale, *saved_in, *saved)
            ctx.blocks, ctx.scorer, ctx.n_in = blocks, scorer, len(saved_in)
        else:
            POOL.give(*saved)
        return out

    @staticmethod
    @without_autocast
    def backward(ctx, g):
        if getattr(ctx, "done", False):  # its buffers went back to the pool after the first
            raise RuntimeError("attention dropout supports one backward per forward")
        ctx.done = True
        v, out, row_scale, *rest = ctx.saved_tensors
        saved_in, saved = rest[: ctx.n_in], rest[ctx.n_in :]
        # softmax backward needs sum_j dW_j W_j = sum_j (gs . v_j) keep_j W_j = g . out
        dot = (g * out).sum(-1, keepdim=True)
        gs = torch.mul(g, row_scale, out=g.new_empty(g.shape))  # contiguous heads, scaled
        g_v, *grads = (new_heads(v, shape, sm, zeros=False) for shape, sm in ctx.layout)
        keyed = ctx.scorer.by_key
        _zero_unwritten(
            ctx.blocks,
            by_query=[g for i, g in enumerate(grads) if i not in keyed],
            by_key=[g_v] + [grads[i] for i in keyed],
        )
        for n_block, (i, l0, l1, s1) in enumerate(_widest_first(ctx.blocks)):
            W, P = saved[2 * i : 2 * i + 2]
            rows, chunks = _chunks(v.shape[0], W[0].numel())
            t_buf = POOL.take((rows, *W.shape[1:]), W)
            work = POOL.take((rows, *W.shape[1:]), W) if ctx.scorer.backward_work else None
            for b0, b1 in chunks:
                t = t_buf[: b1 - b0]
                go, vc = gs[b0:b1, :, l0:l1], v[b0:b1, :, :s1]
                pw = P[b0:b1] if P.numel() else W[b0:b1]  # dropped weights (W: no dropout)
                write_grad(g_v[b0:b1, :, :s1], pw.mT @ go, n_block == 0)
                torch.bmm(
                    fold_heads(go), fold_heads(vc).mT, out=fold_heads(t)
                )  # d loss / d dropped weights
                # -> scores: W (keep t - dot) = P t - W dot
                t.mul_(pw).addcmul_(W[b0:b1], dot[b0:b1, :, l0:l1], value=-1.0)
                part = None if work is None else work[: b1 - b0]
                ctx.scorer.backward(saved_in, grads, t, (b0, b1, l0, l1, s1), part, n_block == 0)
            POOL.give(t_buf, work)
        POOL.give(*saved)
        grads = ctx.scorer.finish(saved_in, grads)
        return g_v, None, None, None, None, None, *grads


def scored_attention(scorer, inputs, v, mask, dropout: float, extra=None, select=None):
    """`_ScoredAttention` with `scorer`'s scores of `inputs` (see `DotScores`)."""
    return _ScoredAttention.apply(v, scorer, mask, float(dropout), extra, select, *inputs)


def score_bias(mask: torch.Tensor | None, bias: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """SDPA's float `attn_mask` for a bool mask and a fixed additive score bias: the bias where a
    key is readable, a large finite negative elsewhere (a row with no readable key comes out
    finite, and the caller zeroes it)."""
    bias = bias.to(dtype)
    return bias if mask is None else bias + _masked_bias(mask, dtype)


def zero_empty_rows(out: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """`out` with zeros on the rows of queries that may read no key."""
    return out if mask is None else out * mask.any(-1, keepdim=True).to(out.dtype)


def attention(q, k, v, mask, dropout: float, bias=None):
    """Plain attention without weights: the fused kernel in training with dropout, else SDPA's
    fused CPU kernel (it has no dropout of its own: it would fall back to `bernoulli_`); `bias`:
    a fixed additive score bias (ALiBi's), or None. Rows without a readable key output zeros."""
    if dropout > 0:
        return scored_attention(DotScores(), (q, k), v, mask, dropout, bias)
    attn_mask = safe_mask(mask) if bias is None else score_bias(mask, bias, q.dtype)
    return zero_empty_rows(F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask), mask)


def sparse_attention(q, k, v, mask, dropout: float, select):
    """k-sparse attention without weights (sparseKT): the fused kernel, each chunk's softmax
    weights kept where `select(weights, readable)` says and renormalised over those keys (=
    reference.sparse_attention with reweight "renormalise"); dropout only when > 0. Rows
    without a readable key output zeros."""
    return scored_attention(DotScores(), (q, k), v, mask, dropout, None, select)


def monotonic(q, k, v, theta, mask, dropout: float, need_weights: bool, whole: bool = False):
    """AKT attention -> (out, decayed, undecayed); mask [B|1, H|1, L, S] bool, theta [H] > 0."""
    L, S = q.shape[2], k.shape[2]
    has_key = mask.any(-1, keepdim=True).to(q.dtype)  # [.., L, 1]
    bias = _masked_bias(mask, q.dtype)
    i = torch.arange(L, device=q.device, dtype=q.dtype).unsqueeze(1)
    j = torch.arange(S, device=q.device, dtype=q.dtype).unsqueeze(0)
    pos = (i - j).abs_()  # [L, S] |t - tau|
    return _MonotonicCore.apply(
        q, k, v, theta, bias, pos, has_key, float(dropout), need_weights, whole
    )
