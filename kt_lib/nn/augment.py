"""Sequence augmentations for contrastive knowledge tracing (CL4KT; Lee et al., WWW 2022).

# B batch, L steps, C concepts
Each works on padded batches (`valid` [B, L] bool, True on real steps, real steps first) and
draws from torch's RNG (`generator`, or the global one that `torch.manual_seed` seeds), so a
seeded run augments the same way every time. Padded steps are never changed or moved.
- `mask_tokens`: each real step with probability p: 80% the mask id, 10% a random id, 10% kept
  (BERT's rule, as CL4KT's question masking).
- `flip_responses`: each real response flipped with probability p (CL4KT's hard negatives).
- `replace_by_difficulty`: with probability p a concept answered wrongly becomes a harder one,
  one answered rightly an easier one (tables from the training students).
- `permute_window`: the steps of one random window of floor(f * n) real steps shuffled.
- `crop_window`: one random window of max(1, floor(f * n)) real steps kept, moved to the front.
The last two return gather indices [B, L], so that q, r (and any other field) move together.
"""

from __future__ import annotations

import torch


def _rand(shape, like: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    return torch.rand(shape, generator=generator, device=like.device)


def mask_tokens(
    ids: torch.Tensor,
    valid: torch.Tensor,
    prob: float,
    mask_id: int,
    vocab: int,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """ids [B, L] -> a copy with real steps masked (BERT's 80/10/10 rule) with probability prob;
    random replacements are drawn from [0, vocab)."""
    u = _rand(ids.shape, ids, generator)  # [B, L]
    rand_ids = torch.randint(0, vocab, ids.shape, generator=generator, device=ids.device)
    hit = valid & (u < prob)
    v = u / max(prob, 1e-12)  # uniform in [0, 1) again on the hit steps
    out = torch.where(hit & (v < 0.8), torch.full_like(ids, mask_id), ids)
    return torch.where(hit & (v >= 0.8) & (v < 0.9), rand_ids, out)


def flip_responses(
    r: torch.Tensor, valid: torch.Tensor, prob: float, generator: torch.Generator | None = None
) -> torch.Tensor:
    """Binary responses [B, L] -> a copy with each real response flipped with probability prob."""
    flip = valid & (_rand(r.shape, r, generator) < prob)
    return torch.where(flip, 1 - r, r)


def replace_by_difficulty(
    q: torch.Tensor,
    r: torch.Tensor,
    valid: torch.Tensor,
    prob: float,
    easier: torch.Tensor,
    harder: torch.Tensor,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """q [B, L] concepts -> a copy where each `valid` step, with probability prob, takes
    harder[q] if r = 0, easier[q] if r = 1 (easier/harder [C] long: a concept's neighbour in the
    order of correct rates, itself at the ends). Steps outside `valid` are untouched."""
    hit = valid & (_rand(q.shape, q, generator) < prob)
    safe = q.clamp(0, easier.shape[0] - 1)  # masked ids are not in `valid`; keep the gather legal
    swapped = torch.where(r == 1, easier[safe], harder[safe])
    return torch.where(hit, swapped, q)


def _window_start(n: torch.Tensor, size: torch.Tensor, generator) -> torch.Tensor:
    """Uniform start in [0, n - size] per row (n, size [B] long)."""
    room = (n - size + 1).clamp(min=1).to(torch.float32)
    return (_rand(n.shape, n, generator) * room).long().clamp(max=room.long() - 1)


def permute_window(
    valid: torch.Tensor, fraction: float, generator: torch.Generator | None = None
) -> torch.Tensor:
    """Gather index [B, L]: identity, except one window of floor(fraction * n) real steps per row
    (n its real steps), at a uniform start, whose steps are shuffled."""
    B, L = valid.shape
    n = valid.sum(1)  # [B]
    size = (fraction * n).floor().long()
    start = _window_start(n, size, generator).unsqueeze(1)  # [B, 1]
    pos = torch.arange(L, device=valid.device).expand(B, L)
    inside = (pos >= start) & (pos < start + size.unsqueeze(1))
    # sort keys: the position itself outside the window, start + a uniform [0, size) inside it;
    # outside keys are < start or >= start + size, so only the window's order changes. In
    # float64: in float32, start + u * size can round up to start + size, the key of the step
    # after the window (padding when the window ends the log), and the sort could swap them
    u = _rand((B, L), valid, generator).double()
    keys = torch.where(inside, start + u * size.unsqueeze(1), pos.double())
    return keys.argsort(1)


def crop_window(
    valid: torch.Tensor, fraction: float, generator: torch.Generator | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """(gather index [B, L], new valid [B, L]): one window of max(1, floor(fraction * n)) real
    steps per row, at a uniform start, moved to the front; the rest is padding."""
    B, L = valid.shape
    n = valid.sum(1)
    size = (fraction * n).floor().long().clamp(min=1).minimum(n)
    start = _window_start(n, size, generator).unsqueeze(1)
    pos = torch.arange(L, device=valid.device).expand(B, L)
    index = (start + pos).clamp(max=L - 1)
    return index, pos < size.unsqueeze(1)
