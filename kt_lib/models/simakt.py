"""SimAKT (seed 000): DTransformer whose Block 3 mixes intra- and inter-student heads.

# B batch, L steps, D model dim, H heads (n_intra + n_inter), Dh head dim, F bank folds
Block 3 projects Q = W_Q hq, K = W_K hq, V = W_V hs for all H heads; the first n_intra heads are
DTransformer's own (within the student, inclusive mask), the last n_inter heads are
inter-student heads (`kt_lib.heads.similarity`) that read memory banks of TRAINING students
(`kt_lib.memory`). Outputs are concatenated, then W_O. Blocks 1, 2 and 4 are DTransformer's.

Configurations (`similarity` field: a shipped preset name, a YAML/JSON path, or a mapping):
- Step 2 (modular): `intra_heads` + an `inter_heads` list of {type, influence_weight,
  temporal_config, type-specific fields}.
- Step 1 (legacy): `approach` + `cluster_config` / `knn_config` / `temporal_config`, mapped onto
  Step 2 as (n_heads - 2) intra + 1 cluster + 1 KNN head (6 + 1 + 1 with the seed's 8 heads).
  `approach: none` (or `similarity: None`) builds no inter head: the model is then DTransformer
  exactly (same parameters, same state dict keys, bitwise equal outputs).
- Both may carry `memory:` (encoder, update_frequency, folds, seed, ...), see `MemoryConfig`.
Shipped presets: `list_simakt_presets()`; `build_model("simakt", preset=<name>)` or
`similarity=<name>`.

Causality: an inter head's output at step t feeds Block 4 only at steps > t, so it may use the
current student up to t. Banks hold complete trajectories of other training students: a training
student reads the bank built without its cross-fitting fold (kt_lib.memory.banks explains why
excluding its row alone is not enough); position weighting with future_weight > 0 reads later
steps of those other students only.
"""

from __future__ import annotations

import warnings
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from ..checkpoint import load_json, load_tensors, save_json, save_tensors
from ..config import from_dict, read_mapping, require
from ..data.dataset import Batch, KTDataset, StudentSeq
from ..heads.similarity import BankBuild, HeadContext, HeadSpec, InterStudentHeads, parse_head_spec
from ..memory.banks import Bank, FoldAssignment
from ..memory.encoders import ENCODERS, EncodedSet, build_encoder, encode_dataset
from .base import register
from .dtransformer import DTransformer, DTransformerConfig, ExtraHeads

PRESET_DIR = Path(__file__).resolve().parent.parent / "configs" / "simakt"
STEP1_APPROACHES = ("none", "position_weighted_dual", "dual_similarity")
STEP1_KEYS = {
    "approach",
    "description",
    "inter_heads",
    "intra_heads",
    "total_heads",
    "head_allocation",
    "cluster_config",
    "knn_config",
    "temporal_config",
    "memory",
}
STEP2_KEYS = {"approach", "description", "intra_heads", "inter_heads", "total_heads", "memory"}


@dataclass
class MemoryConfig:
    """How banks are built."""

    encoder: str = "heuristic"  # trajectory encoder: heuristic (seed) | block2 (model's Block 2)
    update_frequency: int = 0  # rebuild banks every n epochs (block2 encoder; 0: once, in prepare)
    folds: int = 2  # cross-fitting folds (>= 2): training students read the bank without theirs
    seed: int = 0  # seeds folds, KMeans and farthest-first
    kmeans_n_init: int = 3  # KMeans restarts
    batch_size: int = 128  # students per encoding batch

    def validate(self) -> None:
        require(
            self.encoder in ENCODERS,
            f"unknown encoder {self.encoder!r}; valid: {', '.join(ENCODERS.names())}",
        )
        require(
            self.update_frequency >= 0,
            f"update_frequency must be >= 0, got {self.update_frequency}",
        )
        require(self.folds >= 2, f"folds must be >= 2 (cross-fitting), got {self.folds}")
        require(self.kmeans_n_init >= 1, f"kmeans_n_init must be >= 1, got {self.kmeans_n_init}")
        require(self.batch_size >= 1, f"batch_size must be >= 1, got {self.batch_size}")


@dataclass
class SimilarityConfig:
    """Block 3's layout in Step 2 form: intra heads plus inter-student head specs."""

    approach: str  # "none", a Step 1 approach, or "modular" (Step 2)
    heads: list[HeadSpec] = field(default_factory=list)
    intra_heads: int | None = None  # None: whatever n_heads leaves (Step 1 and none)
    memory: MemoryConfig = field(default_factory=MemoryConfig)
    description: str = ""
    source: str = ""

    def n_intra(self, n_heads: int) -> int:
        """Intra heads for a model with n_heads heads (head-count mismatch is an error)."""
        intra = n_heads - len(self.heads) if self.intra_heads is None else self.intra_heads
        where = f"{self.source}: " if self.source else ""
        if intra + len(self.heads) != n_heads:
            raise ValueError(
                f"{where}head-count mismatch: {intra} intra + {len(self.heads)} "
                f"inter heads != n_heads={n_heads}"
            )
        if intra < 1:
            raise ValueError(
                f"{where}Block 3 needs at least one intra-student head, got "
                f"{intra} (n_heads={n_heads}, {len(self.heads)} inter heads)"
            )
        return intra


def _memory(raw, where: str, update_frequency: int | None = None) -> MemoryConfig:
    raw = dict(raw or {})
    if update_frequency is not None:
        raw.setdefault("update_frequency", update_frequency)
    return from_dict(MemoryConfig, raw, source=f"{where}memory".rstrip(": "))


def _check_keys(data: dict, allowed: set[str], where: str, kind: str) -> None:
    unknown = sorted(set(data) - allowed)
    if unknown:
        raise ValueError(
            f"{where}unknown field(s) {unknown} in a {kind} similarity config; "
            f"valid: {sorted(allowed)}"
        )


def _check_total(data: dict, intra: int | None, n_inter: int, where: str) -> None:
    total = data.get("total_heads")
    if total is not None and intra is not None and intra + n_inter != total:
        raise ValueError(
            f"{where}head-count mismatch: {intra} intra + {n_inter} inter heads != "
            f"total_heads={total}"
        )


def _name_heads(heads: list[HeadSpec]) -> None:
    seen: dict[str, int] = defaultdict(int)
    for h in heads:
        seen[h.type] += 1
        h.name = h.type if seen[h.type] == 1 else f"{h.type}_{seen[h.type]}"


def _parse_step1(data: dict, where: str, source: str) -> SimilarityConfig:
    _check_keys(data, STEP1_KEYS, where, "Step 1")
    has_heads = "cluster_config" in data or "knn_config" in data
    approach = data.get("approach", "position_weighted_dual" if has_heads else "none")
    if approach not in STEP1_APPROACHES:
        raise ValueError(
            f"{where}unknown approach {approach!r}; Step 1 approaches: "
            f"{', '.join(STEP1_APPROACHES)} (or a Step 2 config with an "
            "inter_heads list)"
        )
    desc = str(data.get("description", ""))
    if approach == "none":
        return SimilarityConfig("none", [], None, _memory(data.get("memory"), where), desc, source)
    n_inter = data.get("inter_heads", 2)
    if n_inter != 2:
        raise ValueError(
            f"{where}Step 1 is the fixed dual layout (1 cluster + 1 KNN head): "
            f"inter_heads must be 2, got {n_inter}"
        )
    cluster = {"type": "cluster", **(data.get("cluster_config") or {})}
    knn = {"type": "knn", **(data.get("knn_config") or {})}
    freq = [c.pop("update_frequency") for c in (cluster, knn) if "update_frequency" in c]
    if data.get("temporal_config"):
        cluster["temporal_config"] = knn["temporal_config"] = data["temporal_config"]
    heads = [
        parse_head_spec(cluster, f"{where}cluster_config", "cluster"),
        parse_head_spec(knn, f"{where}knn_config", "knn"),
    ]
    intra = data.get("intra_heads")
    _check_total(data, intra, 2, where)
    memory = _memory(data.get("memory"), where, min(freq) if freq else None)
    return SimilarityConfig(approach, heads, intra, memory, desc, source)


def _parse_step2(data: dict, where: str, source: str) -> SimilarityConfig:
    _check_keys(data, STEP2_KEYS, where, "Step 2")
    intra = data.get("intra_heads")
    if not isinstance(intra, int) or isinstance(intra, bool):
        raise ValueError(f"{where}a Step 2 config needs intra_heads (an integer), got {intra!r}")
    heads = [
        parse_head_spec(h, f"{where}inter_heads[{i}]") for i, h in enumerate(data["inter_heads"])
    ]
    _name_heads(heads)
    _check_total(data, intra, len(heads), where)
    return SimilarityConfig(
        str(data.get("approach", "modular")),
        heads,
        intra,
        _memory(data.get("memory"), where),
        str(data.get("description", "")),
        source,
    )


def parse_similarity(data: dict | None, source: str = "") -> SimilarityConfig:
    """Validate a Step 1 or Step 2 similarity mapping (None: approach none)."""
    where = f"{source}: " if source else ""
    if data is None:
        return SimilarityConfig("none", source=source)
    if not isinstance(data, dict):
        raise ValueError(f"{where}a similarity config must be a mapping, got {data!r}")
    if set(data) == {"similarity_config"}:  # the seed's wrapper
        data = data["similarity_config"]
    step2 = isinstance(data.get("inter_heads"), list)
    sim = (_parse_step2 if step2 else _parse_step1)(dict(data), where, source)
    if sim.heads and all(h.influence_weight == 0 for h in sim.heads):
        warnings.warn(
            f"{where}every inter-student head has influence_weight 0: inter-student "
            "attention is disabled (those heads output zeros)",
            UserWarning,
            stacklevel=2,
        )
    return sim


def list_simakt_presets() -> list[str]:
    """Names of the shipped SimAKT presets (kt_lib/configs/simakt/*.yaml)."""
    return sorted(p.stem for p in PRESET_DIR.glob("*.yaml"))


def load_simakt_config(spec: str | Path | dict | None) -> SimilarityConfig:
    """A shipped preset by name, a YAML/JSON file, an inline mapping, or None (approach none)."""
    if spec is None or isinstance(spec, dict):
        return parse_similarity(spec, "similarity" if spec is not None else "")
    name = str(spec)
    path = PRESET_DIR / f"{name}.yaml" if name in list_simakt_presets() else Path(name)
    if not path.is_file():
        raise ValueError(
            f"unknown SimAKT preset or config file {name!r}; presets: "
            f"{', '.join(list_simakt_presets())}"
        )
    source = f"simakt preset {name!r}" if path.parent == PRESET_DIR else str(path)
    return parse_similarity(read_mapping(path), source)


TINY_SIMILARITY = {  # small banks (cluster, KNN, graph, cross-student) for tests and smoke runs
    "intra_heads": 4,
    "inter_heads": [
        {"type": "cluster", "n_clusters": 3, "temporal_config": {"future_weight": 0.3}},
        {
            "type": "knn",
            "memory_size": 6,
            "k_neighbors": 3,
            "temporal_config": {"future_weight": 0.3},
        },
        {"type": "graph"},
        {"type": "attention", "n_prototypes": 4},
    ],
    "memory": {"kmeans_n_init": 1},
    "description": "tiny: one head of each registered type",
}


@dataclass
class SimAKTConfig(DTransformerConfig):
    """DTransformer sizes plus Block 3's similarity configuration."""

    similarity: str | dict | None = "position_weighted_dual"  # preset, path, mapping; None = none

    def validate(self) -> None:
        super().validate()
        sim = load_simakt_config(self.similarity)
        sim.n_intra(self.n_heads)

    def similarity_config(self) -> SimilarityConfig:
        with warnings.catch_warnings():  # validate() has already warned
            warnings.simplefilter("ignore", UserWarning)
            return load_simakt_config(self.similarity)

    @classmethod
    def tiny(cls, **kw):
        return super().tiny(**{"similarity": TINY_SIMILARITY, **kw})


def _preset(name: str):
    def factory(cls, **kw):
        return cls(**{"similarity": name, **kw})

    factory.__doc__ = f"Default sizes with the shipped similarity preset {name!r}."
    return classmethod(factory)


for _name in list_simakt_presets():  # build_model("simakt", preset=<name>)
    if not hasattr(SimAKTConfig, _name):
        setattr(SimAKTConfig, _name, _preset(_name))


@register("simakt")
class SimAKT(DTransformer):
    """DTransformer with a configurable Block 3: intra-student + inter-student heads."""

    config_cls = SimAKTConfig

    def __init__(self, config: SimAKTConfig):
        super().__init__(config)
        c = config
        self.similarity = c.similarity_config()
        self.n_intra = self.similarity.n_intra(c.n_heads)
        self.inter = (
            InterStudentHeads(self.similarity.heads, c.d, c.d // c.n_heads, c.num_c)
            if self.similarity.heads
            else None
        )
        mem = self.similarity.memory
        self.traj_encoder = (
            build_encoder(mem.encoder, c.num_c, c.K, c.d, mem.seed)
            if self.inter is not None
            else None
        )
        self.folds: FoldAssignment | None = None

    # -- memory banks ------------------------------------------------------------------------
    def _encoder_states(self, batch: Batch) -> torch.Tensor:
        return self.traj_encoder.states(batch, self)

    def encode_students(self, data: KTDataset) -> EncodedSet:
        """Encodings [N, D] of complete logs (and first-window states on demand), eval mode."""
        if self.traj_encoder is None:
            raise ValueError("this SimAKT has no inter-student head, hence no trajectory encoder")
        mem = self.similarity.memory
        was_training = self.training
        self.eval()
        try:
            with torch.no_grad():
                return encode_dataset(
                    self._encoder_states,
                    data,
                    self.config.max_len,
                    self.config.max_len,
                    mem.batch_size,
                    self.know.device,
                )
        finally:
            self.train(was_training)

    def build_banks(self, train: KTDataset) -> None:
        """(Re)build every active head's banks from the TRAINING students `train`."""
        if self.inter is None:
            return
        mem = self.similarity.memory
        folds = FoldAssignment.make(train.uids, mem.folds, mem.seed)
        heads = self.inter.bank_heads
        if heads:
            encoded = self.encode_students(train)
            own = folds.fold_of(encoded.uids).numpy()
            members = [encoded.subset(np.flatnonzero(own != f)) for f in range(folds.n_folds)]
            was_training = self.training
            self.eval()
            try:
                with torch.no_grad():
                    for head in heads:
                        build = [BankBuild(m, mem.seed, mem.kmeans_n_init) for m in members]
                        head.install([head.build_bank(b) for b in build])
            finally:
                self.train(was_training)
        self.folds = folds

    def prepare(self, train: KTDataset) -> None:
        self.build_banks(train)

    def on_epoch_start(self, epoch: int, train: KTDataset | None = None) -> None:
        mem = self.similarity.memory
        if (
            train is not None
            and self.inter is not None
            and mem.encoder == "block2"
            and mem.update_frequency > 0
            and epoch > 0
            and epoch % mem.update_frequency == 0
        ):
            self.build_banks(train)

    def banks(self) -> dict[str, list[Bank]]:
        """Built banks per head name, one per fold."""
        if self.inter is None:
            return {}
        return {h.spec.name: h.banks for h in self.inter.heads if h.has_banks}

    def bank_stats(self) -> pd.DataFrame:
        """One row of statistics per (head, fold) bank."""
        return pd.DataFrame(
            [
                {"head": name, "fold": f, "kind": b.kind, **b.stats()}
                for name, banks in self.banks().items()
                for f, b in enumerate(banks)
            ]
        )

    def extra_state(self) -> dict[str, torch.Tensor]:
        if self.folds is None:
            return {}
        state = {f"folds.{k}": v for k, v in self.folds.to_tensors().items()}
        for i, head in enumerate(self.inter.heads if self.inter is not None else []):
            if head.has_banks:
                for f, bank in enumerate(head.banks):
                    state.update({f"head{i}.fold{f}.{k}": v for k, v in bank.to_tensors().items()})
        return state

    def load_extra_state(self, state: dict[str, torch.Tensor]) -> None:
        if not state:
            return
        self.folds = FoldAssignment.from_tensors(
            {k.split(".", 1)[1]: v for k, v in state.items() if k.startswith("folds.")}
        )
        for i, head in enumerate(self.inter.heads if self.inter is not None else []):
            per_fold: dict[int, dict] = defaultdict(dict)
            for key, value in state.items():
                if key.startswith(f"head{i}."):
                    _, fold, name = key.split(".", 2)
                    per_fold[int(fold.removeprefix("fold"))][name] = value
            if per_fold:
                head.install([head.bank_cls.from_tensors(per_fold[f]) for f in sorted(per_fold)])

    def save_banks(self, path: str | Path) -> None:
        """Write every bank to `<path>.pt` + `<path>.json` (no pickle)."""
        path = Path(path)
        save_tensors(path.with_suffix(".pt"), self.extra_state())
        save_json(
            path.with_suffix(".json"),
            {
                "similarity": self.config.similarity,
                "banks": self.bank_stats().to_dict(orient="records"),
            },
        )

    def load_banks(self, path: str | Path) -> None:
        """Restore banks written by `save_banks` (the model's config must match)."""
        path = Path(path)
        meta = load_json(path.with_suffix(".json"))
        if meta["similarity"] != self.config.similarity:
            raise ValueError(
                f"{path}: banks were built for similarity={meta['similarity']!r}, "
                f"this model has {self.config.similarity!r}"
            )
        self.load_extra_state(load_tensors(path.with_suffix(".pt")))

    # -- Block 3 -----------------------------------------------------------------------------
    def _folds_for(self, batch: Batch) -> torch.Tensor:
        B = batch.q.shape[0]
        if self.folds is None or not self.inter.bank_heads:
            return torch.zeros(B, dtype=torch.long, device=batch.q.device)
        if batch.uid is None:  # without ids a training student could read its own log
            raise ValueError(
                "SimAKT needs batch.uid (training and evaluation): it keeps every training "
                "student away from the bank built with its own log; set Batch.uid (students "
                "outside the training set may use any id that no training student has)"
            )
        return self.folds.fold_of(batch.uid)

    def _block3_extra(
        self, batch: Batch, hq: torch.Tensor, hs: torch.Tensor, need_weights: bool
    ) -> tuple[ExtraHeads | None, dict]:
        if self.inter is None:
            return None, {}
        states = None
        if self.inter.uses_states:
            states = (
                hs if self.similarity.memory.encoder == "block2" else self._encoder_states(batch)
            )
        ctx = HeadContext(hq, hs, states, batch.q, self._folds_for(batch), batch.uid, need_weights)
        return ExtraHeads(len(self.inter), lambda qh: self.inter(qh, ctx)), {
            "attention": ctx.weights
        }


def bank_rebuilder(train: KTDataset) -> Callable[[SimAKT, Batch], None]:
    """A `rebuild` callback for `audit_causality`: write the (perturbed) batch rows into the
    logs of the training students with the same uid, then rebuild the banks from that copy."""

    def rebuild(model: SimAKT, batch: Batch) -> None:
        students = list(train.students)
        where = {s.uid: i for i, s in enumerate(students)}
        starts = batch.start.tolist() if batch.start is not None else [0] * len(batch.q)
        for b, uid in enumerate(batch.uid.tolist()):
            if uid not in where:
                continue
            s = students[where[uid]]
            n, a = int(batch.mask[b].sum()), int(starts[b])
            q, r = s.q.copy(), s.r.copy()
            q[a : a + n], r[a : a + n] = batch.q[b, :n].cpu().numpy(), batch.r[b, :n].cpu().numpy()
            pid = s.pid
            if pid is not None and batch.pid is not None:
                pid = pid.copy()
                pid[a : a + n] = batch.pid[b, :n].cpu().numpy()
            students[where[uid]] = StudentSeq(uid, q, r, pid, s.fold)
        model.build_banks(replace(train, students=students))

    return rebuild
