"""Trajectory encoders: students' logs -> per-step states and one encoding per student.

# N students, B batch, L steps, S steps kept per bank sequence, D state dim
An encoder maps a `Batch` to per-step states [B, L, D]. A student's log is cut into chunks of
`window` (the model's `max_len`) steps, each encoded like a training window; its encoding is the
mean of its states over the COMPLETE log, and its bank sequence holds the states of every step
at the step's own position in the log, S = the longest log rounded up to whole windows (at least
one window). A current window starting at step a of its log is compared with bank positions
a .. a + window - 1 (`kt_lib.heads.inter.base.BaseSimilarityHead.trajectory_similarity`), so
step a + t of the current student meets step a + t of the historical ones.
- `heuristic` (seed 000): state_t = E_q[q_t] + E_r[r_t] with fixed, seeded random embedding
  tables, so the encoding is the mean of question + response embeddings. Model-independent.
- `block2`: the model's own Block 2 (interaction self-attention) states, mean-pooled; they change
  with training, so SimAKT rebuilds its banks every `update_frequency` epochs.
The same encoder gives the current student's states at forward time, so position-weighted
similarity compares states of one space.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

import numpy as np
import torch
from torch import nn

from ..data.dataset import Batch, KTDataset, Window, chunk, collate
from ..registry import Registry

StatesFn = Callable[[Batch], torch.Tensor]  # Batch [B, L] -> states [B, L, D]
ENCODERS: Registry = Registry("trajectory encoder")


class TrajectoryEncoder(nn.Module):
    """Maps a batch to per-step states; `model` is the SimAKT model for encoders that reuse it."""

    def states(self, batch: Batch, model: nn.Module) -> torch.Tensor:
        raise NotImplementedError


@ENCODERS.register("heuristic")
class EmbeddingMeanEncoder(TrajectoryEncoder):
    """Seed 000's heuristic: fixed random question and response embeddings, summed per step."""

    def __init__(self, num_c: int, K: int, d: int, seed: int = 0):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.register_buffer("q_table", torch.randn(num_c, d, generator=g))
        self.register_buffer("r_table", torch.randn(K, d, generator=g))

    def states(self, batch: Batch, model: nn.Module | None = None) -> torch.Tensor:
        return self.q_table[batch.q] + self.r_table[batch.r]


@ENCODERS.register("block2")
class Block2Encoder(TrajectoryEncoder):
    """The model's own interaction states (Block 2 of DTransformer/SimAKT)."""

    def __init__(self, num_c: int, K: int, d: int, seed: int = 0):
        super().__init__()

    def states(self, batch: Batch, model: nn.Module) -> torch.Tensor:
        return model.interaction_states(batch)


def _batches(
    dataset: KTDataset, windows: list[Window], batch_size: int, pad_to: int | None, device
) -> Iterator[tuple[int, Batch]]:
    for i in range(0, len(windows), batch_size):
        yield i, collate(dataset, windows[i : i + batch_size], pad_to).to(device)


def bank_steps(longest: int, window: int) -> int:
    """S: the bank positions kept per sequence, the longest log rounded up to whole windows."""
    return max(1, -(-longest // window)) * window


@dataclass
class EncodedSet:
    """Students with their encodings, and their per-step states on demand."""

    dataset: KTDataset  # the students, in encoding order
    encodings: torch.Tensor  # [N, D] mean state over each complete log
    states_fn: StatesFn
    window: int  # chunk length states are computed over (the model's max_len)
    batch_size: int  # windows per forward pass
    device: torch.device | str = "cpu"

    @property
    def uids(self) -> torch.Tensor:
        return torch.as_tensor(self.dataset.uids, dtype=torch.long)

    @property
    def lengths(self) -> torch.Tensor:
        return torch.as_tensor([len(s) for s in self.dataset.students], dtype=torch.long)

    @property
    def seq_len(self) -> int:
        """S: bank positions per sequence (every step of the longest log, whole windows)."""
        longest = max((len(s) for s in self.dataset.students), default=0)
        return bank_steps(longest, self.window)

    def subset(self, index) -> EncodedSet:
        index = np.asarray(index, dtype=np.int64)
        return replace(
            self,
            dataset=self.dataset.subset(index),
            encodings=self.encodings[torch.as_tensor(index)],
        )

    def _groups(self, index: np.ndarray) -> Iterator[np.ndarray]:
        """Runs of `index` whose chunks fill about one forward pass (one student at least)."""
        W, group, windows = self.window, [], 0
        for i in index:
            n = -(-len(self.dataset.students[int(i)]) // W)
            if group and windows + n > self.batch_size:
                yield np.asarray(group)
                group, windows = [], 0
            group.append(int(i))
            windows += n
        if group:
            yield np.asarray(group)

    def iter_states(self, index=None) -> Iterator[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
        """Batches of (positions [b] into this set, states [b, S, D], valid [b, S]): each
        student's states at every step of its log, computed chunk by chunk."""
        index = np.arange(len(self.dataset)) if index is None else np.asarray(index)
        S, W, D = self.seq_len, self.window, self.encodings.shape[-1]
        for group in self._groups(index):
            windows, rows = [], []
            for row, i in enumerate(group):
                n = len(self.dataset.students[i])
                windows += [Window(int(i), a, min(a + W, n)) for a in range(0, n, W)]
                rows += [row] * len(range(0, n, W))
            out = torch.zeros(len(group), S, D)
            valid = torch.zeros(len(group), S, dtype=torch.bool)
            if not windows:  # empty logs only: no step, no state
                yield torch.as_tensor(group), out, valid
                continue
            batch = collate(self.dataset, windows, W)
            chunk_states = self.states_fn(batch.to(self.device)).float().cpu()  # [w, W, D]
            real = batch.mask  # [w, W]: each chunk's steps, placed at start + offset
            pos = batch.start.unsqueeze(1) + torch.arange(W)
            at = torch.as_tensor(rows).unsqueeze(1).expand_as(pos)
            out[at[real], pos[real]] = chunk_states[real]
            valid[at[real], pos[real]] = True
            yield torch.as_tensor(group), out, valid

    def states(self, index) -> tuple[torch.Tensor, torch.Tensor]:
        """(states [n, S, D], valid [n, S]) of the students at `index`, in that order."""
        parts = list(self.iter_states(np.asarray(index)))
        return torch.cat([p[1] for p in parts]), torch.cat([p[2] for p in parts])

    def group_mean_states(
        self, labels: torch.Tensor, n_groups: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(per-group mean state at each step [G, S, D], members with that step [G, S])."""
        sums = torch.zeros(n_groups, self.seq_len, self.encodings.shape[-1])
        counts = torch.zeros(n_groups, self.seq_len)
        for pos, st, valid in self.iter_states():
            g = labels[pos]
            sums.index_add_(0, g, st * valid.unsqueeze(-1))
            counts.index_add_(0, g, valid.float())
        return sums / counts.clamp(min=1).unsqueeze(-1), counts


def encode_dataset(
    states_fn: StatesFn,
    dataset: KTDataset,
    max_len: int,
    batch_size: int = 128,
    device="cpu",
) -> EncodedSet:
    """Encode every student's complete log (all chunks of `max_len`) as its mean state."""
    windows = chunk(dataset, max_len)
    owner = torch.as_tensor([w.student for w in windows], dtype=torch.long)
    sums = None
    for start, batch in _batches(dataset, windows, batch_size, None, device):
        st = states_fn(batch).float()
        part = (st * batch.mask.unsqueeze(-1)).sum(1).cpu()  # [b, D] per window
        if sums is None:
            sums = torch.zeros(len(dataset), part.shape[-1])
        sums.index_add_(0, owner[start : start + len(part)], part)
    lengths = torch.as_tensor([len(s) for s in dataset.students], dtype=torch.float32)
    return EncodedSet(
        dataset, sums / lengths.clamp(min=1).unsqueeze(1), states_fn, max_len, batch_size, device
    )


def build_encoder(name: str, num_c: int, K: int, d: int, seed: int = 0) -> TrajectoryEncoder:
    """A registered trajectory encoder ('heuristic', 'block2')."""
    return ENCODERS[name](num_c, K, d, seed)
