"""The key-value memory of DKVMN (Zhang et al. 2017), shared by DKVMN, Deep-IRT and SKVMN.

# B batch, L steps, M memory slots, Dk key dim, Dv value dim, Dw write-input dim
    w_t     = softmax(k_t M^k^T)                          [B, M]   static keys M^k [M, Dk]
    r_t     = w_t M^v_t                                   [B, Dv]  read before the write at t
    e_t     = sigmoid(E v_t), a_t = tanh(A v_t)           [B, Dv]  erase and add signals
    M^v_t+1 = M^v_t * (1 - w_t e_t^T) + w_t a_t^T         [B, M, Dv]
M^v_0 is a learned [M, Dv] matrix, the same for every student. The recurrence over steps is
inherent (each write reads the memory the previous one left); everything that does not depend on
the memory (w, e, a for all steps) is computed before the loop. Padded steps write nothing.
`read_write` runs the whole recurrence as one autograd node (states in one preallocated tensor,
a hand-written backward); `read`/`write` are the single steps, for models whose write input
depends on the read (SKVMN).
"""

from __future__ import annotations

import torch
from torch import nn


class KeyValueMemory(nn.Module):
    """Static key matrix, per-student value memory written by erase/add, read by key weights."""

    def __init__(self, M: int, d_k: int, d_v: int, d_write: int | None = None):
        super().__init__()
        self.keys = nn.Parameter(torch.empty(M, d_k))  # M^k
        self.init_value = nn.Parameter(torch.empty(M, d_v))  # M^v_0
        # kaiming normal as pyKT (std sqrt(2 / D)); the authors drew N(0, 0.1^2)
        nn.init.kaiming_normal_(self.keys)
        nn.init.kaiming_normal_(self.init_value)
        d_write = d_v if d_write is None else d_write
        self.erase = nn.Linear(d_write, d_v)  # E
        self.add = nn.Linear(d_write, d_v)  # A

    def address(self, k: torch.Tensor) -> torch.Tensor:
        """Read/write weights w = softmax(k M^k^T) over the slots: [..., Dk] -> [..., M]."""
        return torch.softmax(k @ self.keys.T, dim=-1)

    def signals(self, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Erase and add signals of write inputs v: [..., Dw] -> ([..., Dv], [..., Dv])."""
        return torch.sigmoid(self.erase(v)), torch.tanh(self.add(v))

    def initial(self, B: int) -> torch.Tensor:
        """M^v_0 for B students: [B, M, Dv] (an expanded view; writes allocate a new tensor)."""
        return self.init_value.unsqueeze(0).expand(B, -1, -1)

    @staticmethod
    def read(mv: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        """r = w M^v: [B, M, Dv], [B, M] -> [B, Dv]."""
        return torch.bmm(w.unsqueeze(1), mv).squeeze(1)

    @staticmethod
    def write(mv: torch.Tensor, w: torch.Tensor, e: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
        """M^v * (1 - w e^T) + w a^T: [B, M, Dv], [B, M], [B, Dv], [B, Dv] -> [B, M, Dv]."""
        dt = mv.dtype
        return _Write.apply(mv, w.to(dt), e.to(dt), a.to(dt))

    def read_write(
        self, w: torch.Tensor, e: torch.Tensor, a: torch.Tensor, mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Reads r_t of every step, each taken before the write of step t.

        w [B, L, M], e and a [B, L, Dv], mask [B, L] (False: padding, writes nothing) ->
        r [B, L, Dv]. r_0 reads M^v_0; r_t reads the memory after the writes of steps < t.
        Runs in the memory's dtype (float32 under bf16 autocast: the recurrence accumulates).
        """
        dt = self.init_value.dtype
        ww = w if mask is None else w * mask.unsqueeze(-1).to(w.dtype)  # padding writes nothing
        mv0 = self.initial(w.shape[0])
        return _ReadWrite.apply(mv0, w.to(dt), ww.to(dt), e.to(dt), a.to(dt))


def _write(mv: torch.Tensor, w: torch.Tensor, e: torch.Tensor, a: torch.Tensor, out=None):
    """M^v * (1 - w e^T) + w a^T with one temporary."""
    w = w.unsqueeze(-1)  # [B, M, 1]
    keep = torch.mul(w, e.unsqueeze(1)).neg_().add_(1)  # 1 - w e^T
    return torch.mul(mv, keep, out=out).addcmul_(w, a.unsqueeze(1))


def _write_grads(G: torch.Tensor, mv: torch.Tensor, w: torch.Tensor, e: torch.Tensor, a):
    """Gradients of one write from G = dLoss/dM^v_t+1: (dM^v_t, dw, de, da)."""
    GM = G * mv  # [B, M, Dv]
    d_a = torch.bmm(w.unsqueeze(1), G).squeeze(1)  # w^T G
    d_e = -torch.bmm(w.unsqueeze(1), GM).squeeze(1)
    # sums over Dv by broadcast (a bmm with one output column is slow on CPU)
    d_w = (G * a.unsqueeze(1)).sum(-1) - (GM * e.unsqueeze(1)).sum(-1)
    d_mv = G * torch.mul(w.unsqueeze(-1), e.unsqueeze(1)).neg_().add_(1)
    return d_mv, d_w, d_e, d_a


class _Write(torch.autograd.Function):
    """One write as one autograd node: saves only its inputs (autograd over the expression would
    also keep 1 - w e^T, a second [B, M, Dv] tensor per step)."""

    @staticmethod
    def forward(ctx, mv, w, e, a):
        ctx.save_for_backward(mv, w, e, a)
        with torch.autocast(mv.device.type, enabled=False):
            return _write(mv, w, e, a)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, g):
        with torch.autocast(g.device.type, enabled=False):
            return _write_grads(g, *ctx.saved_tensors)


CHUNK = 32  # steps per batched pass in `_ReadWrite.backward` (bounds its [C, B, M, Dv] scratch)


def _keep(w: torch.Tensor, e: torch.Tensor, one: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """K = 1 - w e^T: [B, M], [B, Dv] -> out [B, M, Dv]. One kernel on a GPU (launch-bound);
    on CPU three vectorised passes over a cache-resident tensor, faster there than the one
    broadcast three-input kernel (measured: 150 against 250 us at [64, 20, 200])."""
    if out.device.type == "cpu":
        return torch.mul(w.unsqueeze(-1), e.unsqueeze(1), out=out).neg_().add_(1)
    return torch.addcmul(one, w.unsqueeze(-1), e.unsqueeze(1), value=-1, out=out)


def _outer(u: torch.Tensor, v: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """u_t v_t^T for every step at once: [B, n, M], [B, n, Dv] -> out [n, B, M, Dv]."""
    return torch.mul(u.transpose(0, 1).unsqueeze(-1), v.transpose(0, 1).unsqueeze(-2), out=out)


class _ReadWrite(torch.autograd.Function):
    """The whole recurrence as one autograd node: the states M^v_t go to one preallocated
    [L, B, M, Dv] tensor, the reads are one batched product after the loop, and the backward
    walks the steps in reverse (autograd over the loop would keep two [B, M, Dv] tensors and a
    dozen nodes per step). On a GPU a step of the forward loop is three kernels (K_t = 1 - w_t
    e_t^T, the product with M^v_t, the add term w_t a_t^T) and a step of the backward two (K_t,
    one multiply-add); the backward's read terms w_t g_t^T and the gradients of w, e and a are
    batched over chunks of CHUNK steps: the step is launch-bound there, and a kernel per step
    costs more than the work in it. (K_t takes three vectorised passes on CPU: `_keep`.)
    Tested against a per-student loop, outputs and gradients."""

    @staticmethod
    def forward(ctx, mv0, w, ww, e, a):
        with torch.autocast(w.device.type, enabled=False):
            B, L, M = w.shape
            mv = mv0.new_empty(L, B, M, e.shape[-1])  # M^v_t, t = 0 .. L-1
            mv[0] = mv0
            one, keep = mv0.new_ones(()), torch.empty_like(mv[0])
            for t in range(L - 1):  # M^v_t+1 = M^v_t * K_t + w_t a_t^T, three kernels
                torch.mul(mv[t], _keep(ww[:, t], e[:, t], one, keep), out=mv[t + 1])
                mv[t + 1].addcmul_(ww[:, t].unsqueeze(-1), a[:, t].unsqueeze(1))
            flat = mv.view(L * B, M, -1)  # one bmm over (step, student); einsum would permute mv
            reads = torch.bmm(w.transpose(0, 1).reshape(L * B, 1, M), flat)  # r_t = w_t M^v_t
            reads = reads.view(L, B, -1).transpose(0, 1)  # [B, L, Dv]
        ctx.save_for_backward(w, ww, e, a, mv)
        return reads

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, g):
        w, ww, e, a, mv = ctx.saved_tensors
        with torch.autocast(w.device.type, enabled=False):
            g = g.to(mv.dtype)
            L, B, M, Dv = mv.shape
            # the reads' share of dw, g_t M^v_t^T, as a row times a transposed view (a bmm with
            # one output column is slow on CPU)
            g_row = g.transpose(0, 1).reshape(L * B, 1, Dv)
            d_w = torch.bmm(g_row, mv.view(L * B, M, Dv).transpose(1, 2))  # [L * B, 1, M]
            d_w = d_w.view(L, B, M).transpose(0, 1)
            d_ww, d_e, d_a = torch.zeros_like(ww), torch.zeros_like(e), torch.zeros_like(a)
            # G_t = dLoss/dM^v_t = w_t g_t^T + G_t+1 * K_t (G_L = 0). Chunk [t0, t1) of steps:
            # buf[i] holds G_t0+i, buf[t1 - t0] the G_t1 carried from the chunk after it.
            C = min(CHUNK, L)
            buf = mv.new_zeros(C + 1, B, M, Dv)
            one, keep = mv.new_ones(()), torch.empty_like(mv[0])
            t1 = L
            while t1 > 0:
                t0 = max(0, t1 - C)
                n = t1 - t0
                if t1 < L:
                    buf[n].copy_(buf[0])  # G_t1, computed by the chunk after this one
                _outer(w[:, t0:t1], g[:, t0:t1], out=buf[:n])  # the read terms
                for t in range(t1 - 1, t0 - 1, -1):
                    if t + 1 < L:  # the write of step t carries G_t+1 back
                        i = t - t0
                        buf[i].addcmul_(buf[i + 1], _keep(ww[:, t], e[:, t], one, keep))
                # the writes t0 .. min(t1, L - 1) - 1, with H_t = G_t+1 = buf[t - t0 + 1]
                m = min(t1, L - 1) - t0
                if m > 0:
                    _write_grads_batched(buf[1 : m + 1], mv[t0 : t0 + m], ww[:, t0 : t0 + m],
                                         e[:, t0 : t0 + m], a[:, t0 : t0 + m], d_ww[:, t0 : t0 + m],
                                         d_e[:, t0 : t0 + m], d_a[:, t0 : t0 + m])  # fmt: skip
                t1 = t0
            G = buf[0]  # G_0 = dLoss/dM^v_0
        return G, d_w, d_ww, d_e, d_a


def _write_grads_batched(H, S, w, e, a, d_w, d_e, d_a) -> None:
    """The gradients of m writes at once, from H_t = dLoss/dM^v_t+1 and S_t = M^v_t ([m, B, M, Dv]
    each; H is overwritten): into d_w [B, m, M], d_e and d_a [B, m, Dv].
        d_a_t = w_t^T H_t,   d_e_t = -w_t^T (H_t * S_t),   d_w_t = (H_t (a_t - S_t * e_t)) 1
    """
    m, B, M, Dv = H.shape
    rows = w.transpose(0, 1).reshape(m * B, 1, M)  # w_t as rows, (step, student) order
    d_a.copy_(torch.bmm(rows, H.view(m * B, M, Dv)).view(m, B, Dv).transpose(0, 1))
    a_t, e_t = a.transpose(0, 1).unsqueeze(2), e.transpose(0, 1).unsqueeze(2)  # [m, B, 1, Dv]
    scratch = torch.mul(H, a_t)  # H a^T terms
    d_w.copy_(scratch.sum(-1).transpose(0, 1))
    H.mul_(S)  # H * S
    d_e.copy_(torch.bmm(rows, H.view(m * B, M, Dv)).view(m, B, Dv).transpose(0, 1).neg())
    torch.mul(H, e_t, out=scratch)
    d_w.sub_(scratch.sum(-1).transpose(0, 1))
