"""Causality audit: no information from step >= t may reach the prediction at step t.

For each audited step t the batch is perturbed (responses at steps >= t, questions and problems
at steps > t replaced at random) and the predictions at steps <= t must not move. A `rebuild`
callback lets models with external state (memory banks built from students' logs) rebuild it
from the perturbed data, so the audit also covers leaks through that state.

Per-fold banks (SimAKT's cross-fitting): a student reads the bank built from the OTHER folds'
students, complete logs included. A perturbed student of fold A legitimately moves the past
predictions of a student of fold B (B's bank holds A's whole log: collaborative information, not
a leak), so with `rebuild` a batch that mixes folds is audited one fold at a time: a model that
says which bank each row reads (`model.bank_folds(batch) -> [B]`) has each fold's rows perturbed
and compared on their own, which still catches a student reading its own log.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from .data.dataset import Batch
from .models.base import KTModel


@dataclass
class AuditResult:
    """Outcome of `audit_causality`; truthy when the model passed."""

    passed: bool
    max_diff: float  # largest change seen at a position that must not move
    worst_step: int  # the audited t where it happened
    steps: list[int] = field(default_factory=list)  # audited steps

    def __bool__(self) -> bool:
        return self.passed

    def __str__(self) -> str:
        verdict = "PASS" if self.passed else "LEAK"
        return (
            f"causality audit {verdict}: max change {self.max_diff:.2e} at t={self.worst_step} "
            f"over {len(self.steps)} audited steps"
        )


def random_batch(
    num_c: int,
    B: int = 4,
    L: int = 20,
    num_pid: int = 0,
    K: int = 2,
    seed: int = 0,
    ragged: bool = True,
) -> Batch:
    """A random padded batch for tests and audits (some rows shorter when `ragged`)."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.full((B,), L)
    if ragged and B > 1:
        lengths[1:] = torch.randint(max(1, L // 2), L + 1, (B - 1,), generator=g)
    mask = torch.arange(L).unsqueeze(0) < lengths.unsqueeze(1)
    q = torch.randint(0, num_c, (B, L), generator=g) * mask
    r = torch.randint(0, K, (B, L), generator=g) * mask
    pid = torch.randint(0, num_pid, (B, L), generator=g) * mask if num_pid else None
    return Batch(q=q, r=r, mask=mask, pid=pid, uid=torch.arange(B), start=torch.zeros(B).long())


def _shift(x: torch.Tensor, n: int, generator: torch.Generator) -> torch.Tensor:
    """Each id of `x` moved to another of 0..n-1, at random (never itself when n > 1)."""
    if n < 2:
        return x
    step = torch.randint(1, n, x.shape, generator=generator).to(x.device)
    return (x + step) % n


def perturb_future(
    batch: Batch, t: int, num_c: int, num_pid: int, K: int, generator: torch.Generator
) -> Batch:
    """Copy of `batch` with every r[:, t:], q[:, t+1:] and pid[:, t+1:] changed to another
    value at random (a redraw would keep a cell with probability 1/K and could miss a leak
    confined to one cell)."""
    b = batch.clone()
    b.r[:, t:] = _shift(b.r[:, t:], K, generator)
    if t + 1 < b.q.shape[1]:
        b.q[:, t + 1 :] = _shift(b.q[:, t + 1 :], num_c, generator)
        if b.pid is not None and num_pid:
            b.pid[:, t + 1 :] = _shift(b.pid[:, t + 1 :], num_pid, generator)
    return b


def truncate_after(batch: Batch, t: int) -> Batch:
    """Copy of `batch` whose logs end at step t (later steps padding): the prediction at t may
    not depend on how many steps follow it."""
    b = batch.clone()
    b.mask[:, t + 1 :] = False
    for x in (b.q, b.r, b.pid):
        if x is not None:
            x[:, t + 1 :] = 0
    return b


def _moved(out: torch.Tensor, base: torch.Tensor, t: int, keep: torch.Tensor) -> float:
    """The largest change of the predictions at steps <= t over the real steps `keep`; a
    prediction that turns NaN or infinite (or stops being) counts as an infinite change, one
    that is the same infinity or NaN in both passes as none."""
    a, b = out[:, : t + 1].detach(), base[:, : t + 1].detach()
    same = (a == b) | (a.isnan() & b.isnan())  # the same infinity (or NaN) twice did not move
    diff = (a - b).abs().nan_to_num(nan=float("inf")).masked_fill(same, 0.0)
    if diff.dim() == 3:
        diff = diff.amax(-1)
    return float(diff[keep].max()) if keep.any() else 0.0


def audit_causality(
    model: KTModel,
    batch: Batch,
    steps: list[int] | None = None,
    trials: int = 2,
    atol: float = 1e-5,
    seed: int = 0,
    rebuild: Callable[[KTModel, Batch], None] | None = None,
    mode: str = "eval",
) -> AuditResult:
    """Perturb the future at each audited step and measure how far past predictions move.

    `mode="train"` audits the training forward (dropout, key hiding, training-only paths) with
    the same random draws for every pass (the RNG is reseeded before each one), so leaks that
    exist only in training are caught too. For leaks below the default `atol`, audit a
    float64 copy of the model (`model.double()`) with a tight tolerance such as 1e-10.
    With `rebuild`, rows reading different bank folds are audited separately (`fold_parts`, see
    the module docstring): moving one fold's students moves the others' banks by design.

    In eval mode each audited t also cuts the logs after t (`truncate_after`): the predictions
    at steps <= t may not depend on how long the log goes on. Not in training mode: there the
    dropout draws a step receives depend on the padding (kernels draw for the real keys only;
    DTransformer's key hiding draws from the whole row), which moves the predictions with no
    information in it (every model of the registry passes the cut in training at dropout 0).
    The training forward runs with gradients on (checkpointed and autograd-only paths are what
    training runs), and the model's parameters and buffers (batch-norm statistics) are put back
    after.
    """
    if mode not in ("eval", "train"):
        raise ValueError(f"mode must be 'eval' or 'train', got {mode!r}")
    was_training = model.training
    saved = {k: v.detach().clone() for k, v in model.state_dict().items()}
    model.train(mode == "train")
    lengths = mode == "eval"

    def forward(b: Batch) -> torch.Tensor:
        cuda = [b.q.device.index or 0] if b.q.is_cuda else []
        with torch.random.fork_rng(devices=cuda), torch.set_grad_enabled(mode == "train"):
            torch.manual_seed(seed)  # the same dropout draws in every pass
            return model(b).logits.detach()

    c = model.config
    L = batch.q.shape[1]
    if steps is None:
        steps = sorted({0, 1, L // 3, L // 2, L - 2, L - 1} & set(range(L)))
    g = torch.Generator().manual_seed(seed)
    if rebuild is not None:
        rebuild(model, batch)
    index = fold_index(model, batch) if rebuild is not None else [None]
    parts = [batch if i is None else rows_of(batch, i) for i in index]
    bases = [forward(part) for part in parts]
    worst, worst_t = 0.0, steps[0]
    for t in steps:
        for trial in range(trials + lengths):  # the last pass: the logs cut after t
            for i, part, base in zip(index, parts, bases, strict=True):
                if trial < trials:
                    pert = perturb_future(part, t, c.num_c, getattr(c, "num_pid", 0), c.K, g)
                else:
                    pert = truncate_after(part, t)
                if rebuild is not None:  # the other folds' rows stay as the bases saw them
                    rebuild(model, pert if i is None else with_rows(batch, i, pert))
                d = _moved(forward(pert), base, t, part.mask[:, : t + 1])
                if d > worst:
                    worst, worst_t = d, t
    if rebuild is not None:
        rebuild(model, batch)
    model.load_state_dict(saved)
    model.train(was_training)
    return AuditResult(worst <= atol, worst, worst_t, list(steps))


def rows_of(batch: Batch, index: torch.Tensor) -> Batch:
    """The rows `index` of `batch` (extras indexed where they have one row per student)."""
    B = batch.q.shape[0]

    def pick(t):
        return t[index] if isinstance(t, torch.Tensor) and t.dim() and len(t) == B else t

    return Batch(
        q=batch.q[index],
        r=batch.r[index],
        mask=batch.mask[index],
        pid=None if batch.pid is None else batch.pid[index],
        uid=None if batch.uid is None else batch.uid[index],
        start=None if batch.start is None else batch.start[index],
        extras={k: pick(v) for k, v in batch.extras.items()},
    )


def with_rows(batch: Batch, index: torch.Tensor, rows: Batch) -> Batch:
    """Copy of `batch` whose rows `index` are those of `rows` (a perturbed part): a rebuild
    from it changes that part's students alone. (Rebuilding from the part alone put the other
    parts' students back to their stored logs, which moved the banks the part reads: a false
    leak wherever a batch's rows differ from the stored logs of their uids.)"""
    b = batch.clone()
    for name in ("q", "r", "mask", "pid"):
        x = getattr(b, name)
        if x is not None:
            x[index] = getattr(rows, name)
    return b


def fold_index(model: KTModel, batch: Batch) -> list[torch.Tensor | None]:
    """The rows of each bank fold the batch reads (`model.bank_folds`); [None] (the whole
    batch) for a model without per-fold banks or a batch of one fold."""
    bank_folds = getattr(model, "bank_folds", None)
    folds = bank_folds(batch) if bank_folds is not None else None
    if folds is None or folds.unique().numel() < 2:
        return [None]
    return [(folds == f).nonzero(as_tuple=True)[0] for f in folds.unique()]


def fold_parts(model: KTModel, batch: Batch) -> list[Batch]:
    """`batch` split by the bank fold each row reads (`model.bank_folds`); one part for a model
    without per-fold banks or a batch of one fold."""
    return [batch if i is None else rows_of(batch, i) for i in fold_index(model, batch)]


@dataclass
class AlignmentResult:
    """Outcome of `audit_alignment`; truthy when the prediction at every audited t read q_t."""

    passed: bool
    unmoved: list[int]  # audited steps whose predictions did not move when q_t changed
    min_change: float  # the smallest largest-change over the audited steps
    unread: list[int] = field(default_factory=list)  # steps t whose prediction ignored r_{t-1}
    responses_checked: bool = True  # False: an item-only model (reads_responses = False)

    def __bool__(self) -> bool:
        return self.passed

    def __str__(self) -> str:
        if self.passed:
            said = (
                f"alignment PASS: changing q_t moves the prediction at t (>= {self.min_change:.2e})"
            )
            if not self.responses_checked:
                return said + "; responses not checked (an item-only model)"
            ignored = f" (not at {len(self.unread)} of them)" if self.unread else ""
            return said + f"; so does changing r_(t-1) at most audited steps{ignored}"
        parts = [f"ignores q_t at steps {self.unmoved}"] if self.unmoved else []
        parts += [f"ignores r_(t-1) at steps {self.unread}"] if self.unread else []
        return f"alignment FAIL: the prediction at t {'; '.join(parts)}"


@torch.no_grad()
def audit_alignment(
    model: KTModel, batch: Batch, steps: list[int] | None = None, atol: float = 1e-6
) -> AlignmentResult:
    """The companion of the causality audit (GUIDE section 9, prediction alignment): the logit at
    t must be the prediction of r_t made after seeing q_t. For each audited t, q_t (and pid_t)
    alone is changed to another id; the prediction at t must move in some row. A model whose
    step-t output never reads q_t (it predicts "the next answer to an unknown question") fails.
    And for t >= 1 the response just before, r_{t-1}, alone is changed: the prediction at t
    must move in some row at no fewer than half of those steps (a model that reads responses
    only up to t-2 is one step late and moves at none; a top-k selection such as sparseKT's
    may leave r_{t-1} out at some steps), unless the model declares `reads_responses = False`.
    Eval mode; the model's mode is restored."""
    was_training = model.training
    model.eval()
    c = model.config
    L = batch.q.shape[1]
    if steps is None:
        steps = sorted({0, 1, L // 3, L // 2, L - 1} & set(range(L)))
    base = model(batch).logits
    unmoved, smallest = [], float("inf")
    for t in steps:
        b = batch.clone()
        b.q[:, t] = (b.q[:, t] + 1) % c.num_c
        if b.pid is not None and getattr(c, "num_pid", 0) > 1:
            b.pid[:, t] = (b.pid[:, t] + 1) % c.num_pid
        diff = (model(b).logits[:, t] - base[:, t]).abs()
        if diff.dim() == 2:
            diff = diff.amax(-1)
        rows = batch.mask[:, t]
        moved = float(diff[rows].max()) if rows.any() else float("inf")
        smallest = min(smallest, moved)
        if moved <= atol:
            unmoved.append(t)
    unread, asked = [], [t for t in steps if t >= 1 and bool(batch.mask[:, t].any())]
    if getattr(model, "reads_responses", True):
        for t in asked:
            b = batch.clone()
            b.r[:, t - 1] = (b.r[:, t - 1] + 1) % c.K
            diff = (model(b).logits[:, t] - base[:, t]).abs().nan_to_num(nan=float("inf"))
            if diff.dim() == 2:
                diff = diff.amax(-1)
            rows = batch.mask[:, t]
            if rows.any() and float(diff[rows].max()) <= atol:
                unread.append(t)
    model.train(was_training)
    late = len(unread) * 2 > len(asked)  # sparse selection (sparseKT's top-k) may drop r_{t-1}
    checked = bool(getattr(model, "reads_responses", True))
    return AlignmentResult(not unmoved and not late, unmoved, smallest, unread, checked)


def assert_causal(model: KTModel, batch: Batch, **kw) -> AuditResult:
    """Run the audit and raise AssertionError with the details on a leak."""
    result = audit_causality(model, batch, **kw)
    if not result:
        raise AssertionError(str(result))
    return result
