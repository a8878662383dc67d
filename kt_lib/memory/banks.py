"""Memory banks of historical (training) students for SimAKT's inter-student heads.

# N students, M bank entries, C clusters (or concepts for the graph), S steps kept per sequence,
# D encoding dim, F cross-fitting folds
Banks are built from the complete trajectories of TRAINING students only:
- `ClusterBank`: scikit-learn KMeans (seeded) over trajectory encodings; stores the centroids (the
  exact mean of each cluster's members), the labels and, for position weighting, the per-cluster
  mean state at every step (mean over the members that have that step).
- `KNNBank`: M students chosen by a registered sampler (`SAMPLERS`: `farthest_first`, max-min
  diversity, or `random`, both seeded); stores their encodings and their per-step states.
- `GraphBank`: a skill graph estimated from consecutive practice in the members' logs.

Self-exclusion, by cross-fitting (`FoldAssignment`). Training students are split into F folds by
uid (seeded, content-blind) and bank f is built from the students of the OTHER folds; a training
student reads the bank of its own fold, so neither its entry nor anything derived from it (the
KMeans partition, the centroids, which students farthest-first picked, the graph counts) can
reach it. Excluding the student's row by uid alone would not be enough: its encoding moves the
other centroids and changes which neighbours get selected, so a student whose future changed
would see a different bank. Students outside the training set (valid/test) read bank `uid % F`.
The price is that each bank holds (F-1)/F of the training students (half with the default F=2).
KNN heads additionally mask entries whose uid equals the reader's (a no-op under cross-fitting,
kept as a guard).

Banks save to `<path>.pt` (tensors, loaded with weights_only=True) + `<path>.json` (kind, stats),
without pickle.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, fields
from pathlib import Path
from typing import ClassVar, Protocol

import numpy as np
import torch
from sklearn.cluster import KMeans

from ..data.dataset import KTDataset
from ..fileio import load_json, load_tensors, save_json, save_tensors
from ..registry import Registry

BANKS: Registry = Registry("memory bank")
SAMPLERS: Registry = Registry("bank sampler")  # (encodings [N, D], k, seed) -> indices [k]
KMEANS_N_INIT = 10  # KMeans restarts: the seed's KMeans(n_init=10)
DEFAULT_SAMPLER = "farthest_first"  # the seed's diversity-based KNN bank


class StateSource(Protocol):
    """What bank builders need from the encoded members (`kt_lib.memory.encoders.EncodedSet`)."""

    dataset: KTDataset
    encodings: torch.Tensor  # [N, D]

    @property
    def uids(self) -> torch.Tensor: ...

    @property
    def lengths(self) -> torch.Tensor: ...

    def states(self, index: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]: ...

    def group_mean_states(
        self, labels: torch.Tensor, n_groups: int
    ) -> tuple[torch.Tensor, torch.Tensor]: ...


def farthest_first(
    x: torch.Tensor, k: int, first: int | None = None, seed: int = 0
) -> torch.Tensor:
    """Indices [k] of a max-min diverse subset of the rows of x [N, D].

    Starts at `first` (default: a seeded random row) and repeatedly adds the row farthest from
    everything selected so far. The min-distance vector is updated incrementally with one
    matrix-vector product per pick (|x|^2 - 2 x.c + |c|^2, squared distances order like
    distances), so the cost is k vector operations over N rows, with no loop over rows.
    """
    N = x.shape[0]
    if not 1 <= k <= N:
        raise ValueError(f"farthest_first: k must be in [1, {N}] (rows available), got {k}")
    if first is None:
        first = int(torch.randint(N, (1,), generator=torch.Generator().manual_seed(seed)))
    x = x.float()
    sq = x.pow(2).sum(1)  # [N]
    selected = torch.empty(k, dtype=torch.long, device=x.device)
    idx = torch.tensor(first, device=x.device)
    selected[0] = idx
    min_d = torch.addmv(sq, x, x[idx], alpha=-2) + sq[idx]  # [N] squared distance to the set
    min_d[idx] = -torch.inf
    for j in range(1, k):
        idx = min_d.argmax()
        selected[j] = idx
        torch.minimum(min_d, torch.addmv(sq, x, x[idx], alpha=-2) + sq[idx], out=min_d)
        min_d[idx] = -torch.inf  # never picked twice, even among duplicate rows
    return selected


@SAMPLERS.register("farthest_first")
def farthest_first_sample(x: torch.Tensor, k: int, seed: int = 0) -> torch.Tensor:
    """`farthest_first` from a seeded random first row (the seed's diversity sampling)."""
    return farthest_first(x, k, seed=seed)


@SAMPLERS.register("random")
def random_sample(x: torch.Tensor, k: int, seed: int = 0) -> torch.Tensor:
    """Indices [k] of a seeded uniform sample of the rows of x [N, D] (the seed's randperm)."""
    N = x.shape[0]
    if not 1 <= k <= N:
        raise ValueError(f"random_sample: k must be in [1, {N}] (rows available), got {k}")
    return torch.randperm(N, generator=torch.Generator().manual_seed(seed))[:k].to(x.device)


@dataclass
class FoldAssignment:
    """Cross-fitting folds of the training students: bank f is built without fold f."""

    uids: torch.Tensor  # [N] sorted training uids
    folds: torch.Tensor  # [N] fold of each
    n_folds: int

    @classmethod
    def make(cls, uids, n_folds: int, seed: int = 0) -> FoldAssignment:
        """Balanced, seeded assignment that depends on the uids only (never on responses)."""
        uids = torch.as_tensor(np.asarray(uids), dtype=torch.long).unique()  # sorted
        if n_folds < 2:
            raise ValueError(f"cross-fitting needs at least 2 folds, got {n_folds}")
        if len(uids) < n_folds:
            raise ValueError(f"{len(uids)} training students cannot fill {n_folds} bank folds")
        order = torch.randperm(len(uids), generator=torch.Generator().manual_seed(seed))
        folds = torch.empty(len(uids), dtype=torch.long)
        folds[order] = torch.arange(len(uids)) % n_folds
        return cls(uids, folds, n_folds)

    def fold_of(self, uid: torch.Tensor) -> torch.Tensor:
        """Fold [B] whose bank each uid reads: its own fold if training, else uid % F."""
        uids, folds = self.uids.to(uid.device), self.folds.to(uid.device)
        pos = torch.searchsorted(uids, uid).clamp(max=len(uids) - 1)
        known = uids[pos] == uid
        return torch.where(known, folds[pos], uid.remainder(self.n_folds))

    def bank_members(self, f: int) -> np.ndarray:
        """Boolean mask over `uids`: the students bank f is built from (all folds but f)."""
        return (self.folds != f).numpy()

    def to_tensors(self) -> dict[str, torch.Tensor]:
        return {"uids": self.uids, "folds": self.folds, "n_folds": torch.tensor(self.n_folds)}

    @classmethod
    def from_tensors(cls, t: dict[str, torch.Tensor]) -> FoldAssignment:
        return cls(t["uids"].long().cpu(), t["folds"].long().cpu(), int(t["n_folds"]))


class Bank:
    """Common save/load/statistics plumbing of the bank dataclasses (tensor fields only)."""

    kind: ClassVar[str] = ""

    def to_tensors(self) -> dict[str, torch.Tensor]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_tensors(cls, tensors: dict[str, torch.Tensor]):
        missing = [f.name for f in fields(cls) if f.name not in tensors]
        if missing:
            raise KeyError(f"{cls.__name__}: saved state lacks {missing}")
        return cls(**{f.name: tensors[f.name].cpu() for f in fields(cls)})

    def stats(self) -> dict[str, float]:
        raise NotImplementedError

    def save(self, path: str | Path) -> None:
        """Write `<path>.pt` (tensors) and `<path>.json` (kind and statistics), atomically."""
        path = Path(path)
        save_tensors(path.with_suffix(".pt"), self.to_tensors())
        save_json(path.with_suffix(".json"), {"kind": self.kind, "stats": self.stats()})

    @staticmethod
    def load(path: str | Path) -> Bank:
        """Read a bank written by `save` (its class comes from the JSON `kind`)."""
        path = Path(path)
        meta = load_json(path.with_suffix(".json"))
        return BANKS[meta["kind"]].from_tensors(load_tensors(path.with_suffix(".pt")))


def _length_stats(lengths: torch.Tensor) -> dict[str, float]:
    lengths = lengths.float()
    return {
        "length_min": float(lengths.min()),
        "length_max": float(lengths.max()),
        "length_mean": float(lengths.mean()),
    }


def _pairwise_stats(x: torch.Tensor, prefix: str) -> dict[str, float]:
    if len(x) < 2:
        return {f"{prefix}_min": 0.0, f"{prefix}_max": 0.0, f"{prefix}_mean": 0.0}
    d = torch.cdist(x.float(), x.float())
    off = d[~torch.eye(len(x), dtype=torch.bool)]
    return {
        f"{prefix}_min": float(off.min()),
        f"{prefix}_max": float(off.max()),
        f"{prefix}_mean": float(off.mean()),
    }


def _check_size(what: str, wanted: int, available: int, hint: str) -> None:
    if wanted > available:
        raise ValueError(
            f"{what}={wanted} is larger than the bank: only {available} training "
            f"students are available to this bank fold ({hint})"
        )


@BANKS.register("cluster")
@dataclass
class ClusterBank(Bank):
    """K-means clusters of complete training trajectories, with per-step mean sequences."""

    kind: ClassVar[str] = "cluster"

    centroids: torch.Tensor  # [C, D] mean encoding of each cluster's members
    sequences: torch.Tensor  # [C, S, D] per-step mean state of the members
    seq_counts: torch.Tensor  # [C, S] members that have each step
    labels: torch.Tensor  # [N] cluster of each member
    uids: torch.Tensor  # [N] member uids
    lengths: torch.Tensor  # [N] member trajectory lengths
    variance: torch.Tensor  # [C] mean squared deviation of members from their centroid

    @classmethod
    def build(
        cls, members: StateSource, n_clusters: int, seed: int = 0, n_init: int = KMEANS_N_INIT
    ) -> ClusterBank:
        """KMeans (seeded) on the members' encodings, then exact centroids and mean sequences."""
        N = len(members.encodings)
        _check_size("n_clusters", n_clusters, N, "lower n_clusters or use more students")
        x = members.encodings.float().cpu()
        km = KMeans(n_clusters=n_clusters, random_state=seed, n_init=n_init)
        labels = torch.as_tensor(km.fit_predict(x.numpy()), dtype=torch.long)
        sizes = torch.bincount(labels, minlength=n_clusters)
        sums = torch.zeros(n_clusters, x.shape[1]).index_add_(0, labels, x)
        centroids = sums / sizes.clamp(min=1).unsqueeze(1)
        dev = (x - centroids[labels]).pow(2).mean(1)  # [N]
        variance = torch.zeros(n_clusters).index_add_(0, labels, dev) / sizes.clamp(min=1)
        sequences, counts = members.group_mean_states(labels, n_clusters)
        return cls(
            centroids,
            sequences.cpu(),
            counts.cpu(),
            labels,
            members.uids.cpu(),
            members.lengths.cpu(),
            variance,
        )

    @property
    def sizes(self) -> torch.Tensor:
        """Members per cluster [C]."""
        return torch.bincount(self.labels, minlength=len(self.centroids))

    @property
    def seq_valid(self) -> torch.Tensor:
        return self.seq_counts > 0

    def stats(self) -> dict[str, float]:
        sizes = self.sizes.float()
        return {
            "clusters": len(self.centroids),
            "students": len(self.labels),
            "size_min": float(sizes.min()),
            "size_max": float(sizes.max()),
            "size_mean": float(sizes.mean()),
            "empty_clusters": int((sizes == 0).sum()),
            "variance_mean": float(self.variance[sizes > 0].mean()),
            **_pairwise_stats(self.centroids, "centroid_distance"),
            **_length_stats(self.lengths),
        }


@BANKS.register("knn")
@dataclass
class KNNBank(Bank):
    """A sample (farthest-first by default) of complete training trajectories."""

    kind: ClassVar[str] = "knn"

    encodings: torch.Tensor  # [M, D]
    sequences: torch.Tensor  # [M, S, D] per-step states (S = 0 when built without sequences)
    seq_valid: torch.Tensor  # [M, S] bool
    uids: torch.Tensor  # [M] uid of each entry
    lengths: torch.Tensor  # [M] trajectory length of each entry
    pool: torch.Tensor  # [] number of students the entries were selected from

    @classmethod
    def build(
        cls,
        members: StateSource,
        memory_size: int,
        seed: int = 0,
        with_sequences: bool = True,
        sampling: str = DEFAULT_SAMPLER,
    ) -> KNNBank:
        """Pick `memory_size` members with the `sampling` sampler (see `SAMPLERS`)."""
        N = len(members.encodings)
        if memory_size > N:  # the seed keeps min(memory_size, students) as well
            warnings.warn(
                f"memory_size={memory_size} but only {N} training students are "
                f"available to this bank fold: the bank keeps all {N}",
                UserWarning,
                stacklevel=2,
            )
            memory_size = N
        index = SAMPLERS[sampling](members.encodings, memory_size, seed).cpu()
        if with_sequences:
            seqs, valid = members.states(index)
        else:
            seqs = torch.zeros(memory_size, 0, members.encodings.shape[1])
            valid = torch.zeros(memory_size, 0, dtype=torch.bool)
        return cls(
            members.encodings[index].float().cpu(),
            seqs.cpu(),
            valid.cpu(),
            members.uids[index].cpu(),
            members.lengths[index].cpu(),
            torch.tensor(N),
        )

    def stats(self) -> dict[str, float]:
        return {
            "entries": len(self.encodings),
            "students": int(self.pool),
            **_pairwise_stats(self.encodings, "pairwise_distance"),
            **_length_stats(self.lengths),
        }


@BANKS.register("graph")
@dataclass
class GraphBank(Bank):
    """Skill graph from consecutive practice: log edge weights and per-skill statistics."""

    kind: ClassVar[str] = "graph"

    log_adj: torch.Tensor  # [C, C] log weight of edge i -> j (row i: the skill practised now)
    node_stats: torch.Tensor  # [C, 2] mean correctness, log count scaled to [0, 1]
    transitions: torch.Tensor  # [C, C] raw counts of consecutive (i, j) practice
    uids: torch.Tensor  # [N] member uids

    @classmethod
    def build(
        cls, members: StateSource, graph_type: str = "knowledge_dependency", smoothing: float = 1.0
    ) -> GraphBank:
        """Edges from consecutive steps of each member (vectorised with bincount).

        transition:           w_ij = P(next skill j | skill i), add-`smoothing`
        knowledge_dependency: w_ij = P(j | i) * lift_ij, lift_ij = P(correct on j | i just
                              answered correctly, then j) / P(correct on j), smoothed towards 1
        """
        data = members.dataset
        C = data.num_c
        q = np.concatenate([s.q for s in data.students]).astype(np.int64)
        r = (np.concatenate([s.r for s in data.students]) > 0).astype(np.float64)
        starts = np.cumsum([0] + [len(s) for s in data.students])[:-1]
        nxt = np.ones(len(q), dtype=bool)
        nxt[starts[starts < len(q)]] = False  # k has a predecessor k-1 in the same student
        # (a zero-length student has no position: its start may lie past the end)
        prev_q, next_q = q[np.flatnonzero(nxt) - 1], q[nxt]
        prev_r, next_r = r[np.flatnonzero(nxt) - 1], r[nxt]
        pair = prev_q * C + next_q
        n = np.bincount(pair, minlength=C * C).reshape(C, C)
        count = np.bincount(q, minlength=C)
        p_skill = (np.bincount(q, weights=r, minlength=C) + smoothing * r.mean()) / (
            count + smoothing
        )
        log_adj = np.log((n + smoothing) / (n.sum(1, keepdims=True) + smoothing * C))
        if graph_type == "knowledge_dependency":
            after_ok = np.bincount(pair, weights=prev_r, minlength=C * C).reshape(C, C)
            both_ok = np.bincount(pair, weights=prev_r * next_r, minlength=C * C).reshape(C, C)
            p_after = (both_ok + smoothing * p_skill[None, :]) / (after_ok + smoothing)
            log_adj = log_adj + np.log(p_after / p_skill[None, :])
        elif graph_type != "transition":
            raise ValueError(
                f"unknown graph_type {graph_type!r}; valid: knowledge_dependency, transition"
            )
        freq = np.log1p(count) / max(np.log1p(count.max()), 1e-12)
        stats = np.stack([p_skill, freq], axis=1)
        return cls(
            torch.as_tensor(log_adj, dtype=torch.float32),
            torch.as_tensor(stats, dtype=torch.float32),
            torch.as_tensor(n, dtype=torch.float32),
            members.uids.cpu(),
        )

    def stats(self) -> dict[str, float]:
        observed = self.transitions > 0
        return {
            "skills": len(self.log_adj),
            "students": len(self.uids),
            "observed_edges": int(observed.sum()),
            "density": float(observed.float().mean()),
            "transitions": float(self.transitions.sum()),
        }


def bank_table(banks: dict[str, Bank]) -> list[dict]:
    """Rows of statistics, one per named bank (for a DataFrame)."""
    return [{"bank": name, "kind": bank.kind, **bank.stats()} for name, bank in banks.items()]
