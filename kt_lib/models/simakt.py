"""SimAKT (seed 000): DTransformer whose Block 3 mixes intra- and inter-student heads.

# B batch, L steps, D model dim, H heads (n_intra + n_inter), Dh head dim, F bank folds
Block 3 projects Q = W_Q hq, K = W_K hq, V = W_V hs for all H heads; the first n_intra heads are
DTransformer's own (within the student, inclusive mask), the last n_inter heads are
inter-student heads (`kt_lib.heads.inter`) that read memory banks of TRAINING students
(`kt_lib.memory`). Outputs are concatenated, then W_O. Blocks 1, 2 and 4 are DTransformer's.

Configuration: the `similarity` field (a shipped preset name, a YAML/JSON path, 'file:name', a
mapping or a `SimilarityConfig`) is parsed once, by `kt_lib.heads.simakt_config`, which holds
the schema (Step 1 / Step 2, temporal strategies, influence, banks) and every default.
`approach: none` (or `similarity: None`) builds no inter head: the model is then DTransformer
exactly (same parameters, same state dict keys, bitwise equal outputs).
Shipped presets: `list_simakt_presets()`; `build_model("simakt", preset=<name>)` or
`similarity=<name>`.

Causality: an inter head's output at step t feeds Block 4 only at steps > t, so it may use the
current student up to t. Banks hold complete trajectories of other training students: a training
student reads the bank built without its cross-fitting fold (kt_lib.memory.banks explains why
excluding its row alone is not enough); temporal strategies read later steps of those other
students only.
"""

from __future__ import annotations

import copy
import warnings
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from ..data.dataset import Batch, KTDataset, StudentSeq
from ..heads.inter import BankBuild, HeadContext, InterStudentHeads
from ..heads.simakt_config import (
    PRESET_DIR,
    MemoryConfig,
    SimilarityConfig,
    list_simakt_presets,
    load_simakt_config,
    refuse_untrusted_config,
)
from ..memory.bank_files import bank_file, dataset_name, read_banks, write_banks
from ..memory.banks import Bank, FoldAssignment
from ..memory.encoders import EncodedSet, build_encoder, encode_dataset
from ..seed_warnings import quiet
from .base import register
from .dtransformer import DTransformer, DTransformerConfig, ExtraHeads

__all__ = [
    "PRESET_DIR",
    "MemoryConfig",
    "SimAKT",
    "SimAKTConfig",
    "SimilarityConfig",
    "bank_file",
    "bank_rebuilder",
    "dataset_name",
    "list_simakt_presets",
    "load_simakt_config",
]

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

    # a preset name, a YAML/JSON path ('file:name' for one of several), a mapping, a
    # SimilarityConfig (kept as its mapping), or None (approach none)
    similarity: str | dict | SimilarityConfig | None = "position_weighted_dual"

    def __post_init__(self) -> None:
        if isinstance(self.similarity, SimilarityConfig):
            parsed = self.similarity
            self.similarity = parsed.to_mapping()  # plain data: checkpoints stay JSON
            self.__dict__["_parsed"] = (copy.deepcopy(self.similarity), parsed)

    def validate(self) -> None:
        super().validate()
        self.similarity_config().n_intra(self.n_heads)

    def similarity_config(self) -> SimilarityConfig:
        """The parsed similarity configuration (parsed once per config object; parsed again
        when `similarity` is replaced or edited in place)."""
        cached = self.__dict__.get("_parsed")
        if cached is None or cached[0] != self.similarity:
            cached = (copy.deepcopy(self.similarity), load_simakt_config(self.similarity))
            self.__dict__["_parsed"] = cached
        return cached[1]

    # the sizes of DTransformer's presets; each shipped similarity preset is a preset too
    # (default sizes): build_model("simakt", preset="cluster_only")
    PRESETS = {
        **DTransformerConfig.PRESETS,
        "tiny": {**DTransformerConfig.PRESETS["tiny"], "similarity": TINY_SIMILARITY},
        **{name: {"similarity": name} for name in list_simakt_presets()},
    }


class BankSizeWarning(UserWarning):
    """A SimAKT bank size was shrunk to fit the training students available."""


@register("simakt")
class SimAKT(DTransformer):
    """DTransformer with a configurable Block 3: intra-student + inter-student heads."""

    config_cls = SimAKTConfig
    memory_maps = True  # maps over memory slots beside the step maps

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

    # -- influence and learning rates --------------------------------------------------------
    def apply_influence_rule(self, n_students: int) -> None:
        """Set the inter heads' influence weights from the training set's size (Example 4)."""
        rule = self.similarity.influence_rule
        if rule is not None and self.inter is not None:
            self.inter.set_weights(rule.weights_for(self.similarity.heads, n_students))

    def param_groups(self, lr: float) -> list[dict]:
        """Optimizer parameter groups: everything at `lr`; with `lr_scaling: inverse_influence`,
        each inter head at lr / its influence weight (seed 000's training note; heads that are
        off keep lr). Call after `prepare` (an influence rule sets the weights there)."""
        if self.similarity.lr_scaling == "none" or self.inter is None:
            return [{"params": list(self.parameters()), "lr": lr, "name": "model"}]
        heads = {id(p) for h in self.inter.heads for p in h.parameters()}
        groups = [
            {
                "params": [p for p in self.parameters() if id(p) not in heads],
                "lr": lr,
                "name": "model",
            }
        ]
        for h in self.inter.heads:
            params = list(h.parameters())
            if params:
                scale = 1.0 / h.weight if h.weight > 0 else 1.0
                groups.append({"params": params, "lr": lr * scale, "name": h.spec.name})
        return groups

    # -- memory banks ------------------------------------------------------------------------
    def _encoder_states(self, batch: Batch) -> torch.Tensor:
        return self.traj_encoder.states(batch, self)

    def encode_students(self, data: KTDataset) -> EncodedSet:
        """Encodings [N, D] of complete logs (and every step's states on demand), eval mode."""
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
                    mem.batch_size,
                    self.know.device,
                )
        finally:
            self.train(was_training)

    def build_banks(self, train: KTDataset) -> None:
        """(Re)build every active head's banks from the TRAINING students `train` (logs shorter
        than memory.min_length stay out of the banks)."""
        if self.inter is None:
            return
        mem = self.similarity.memory
        folds = FoldAssignment.make(train.uids, mem.folds, mem.seed)
        heads = self.inter.bank_heads
        if heads:
            long_enough = [i for i, s in enumerate(train.students) if len(s) >= mem.min_length]
            encoded = self.encode_students(train.subset(long_enough))
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

    @classmethod
    def fit_to_data(
        cls, config: SimAKTConfig, dataset: KTDataset, fixed: frozenset[str] = frozenset()
    ) -> SimAKTConfig:
        """Bank sizes (n_clusters, memory_size, k_neighbors) larger than a bank fold of
        `dataset` (the students outside one cross-fitting fold) shrink to it, with a one-line
        notice (`BankSizeWarning`): a class of 50 students still trains. A similarity the caller
        set (`fixed`) is built as given (too large a bank is then an error naming the size)."""
        if "similarity" in fixed:
            return config
        parsed = config.similarity_config()
        available = _bank_fold_size(dataset, parsed.memory)
        if available < 1 or not parsed.heads:
            return config
        wanted = {}
        for name in ("n_clusters", "memory_size", "k_neighbors"):
            values = [getattr(h.params, name) for _, h in parsed._takers(name)]
            if values and max(values) > available:
                wanted[name] = available
        shrunk = parsed.shrink(**wanted) if wanted else parsed
        # what shrink changed (it skips the sizes of heads that are off), not what was asked
        said = ", ".join(
            f"{k} -> {v}"
            for k, v in wanted.items()
            if [getattr(h.params, k) for _, h in shrunk._takers(k)]
            != [getattr(h.params, k) for _, h in parsed._takers(k)]
        )
        if not said:
            return config
        warnings.warn(
            f"simakt: {len(dataset)} training students leave {available} per bank fold; "
            f"bank sizes shrink to fit ({said})",
            BankSizeWarning,
            stacklevel=3,
        )
        return replace(config, similarity=shrunk)

    def prepare(self, train: KTDataset) -> None:
        """Influence rule, then the banks: built from `train`, or read from memory.bank_dir."""
        self.apply_influence_rule(len(train))
        bank_dir = self.similarity.memory.bank_dir
        if bank_dir and self.inter is not None:
            self.load_banks(bank_file(bank_dir, dataset_name(train)), train)
        else:
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
        """Built banks per head name (hybrid modules: 'hybrid.cluster'), one per fold."""
        if self.inter is None:
            return {}
        return {
            h.spec.name: h.banks for _, h in self.inter.bank_slots(active_only=False) if h.has_banks
        }

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
        if self.similarity.influence_rule is not None:
            state["influence.weights"] = torch.tensor(self.inter.weights, dtype=torch.float64)
        for slot, head in self.inter.bank_slots(active_only=False) if self.inter else []:
            if head.has_banks:
                for f, bank in enumerate(head.banks):
                    state.update({f"{slot}.fold{f}.{k}": v for k, v in bank.to_tensors().items()})
        return state

    def load_extra_state(self, state: dict[str, torch.Tensor]) -> None:
        if not state:
            return
        self.folds = FoldAssignment.from_tensors(
            {k.split(".", 1)[1]: v for k, v in state.items() if k.startswith("folds.")}
        )
        if "influence.weights" in state:
            self.inter.set_weights(state["influence.weights"].tolist())
        for slot, head in self.inter.bank_slots(active_only=False) if self.inter else []:
            per_fold: dict[int, dict] = defaultdict(dict)
            for key, value in state.items():
                if key.startswith(f"{slot}."):
                    _, fold, name = key.split(".", 2)
                    per_fold[int(fold.removeprefix("fold"))][name] = value
            if per_fold:
                head.install([head.bank_cls.from_tensors(per_fold[f]) for f in sorted(per_fold)])

    def _bank_meta(self) -> dict:
        c = self.config
        return {
            "similarity_config": self.similarity.bank_signature(),
            "sizes": {"d": c.d, "max_len": c.max_len, "num_c": c.num_c, "K": c.K},
        }

    def save_banks(self, path: str | Path, train: KTDataset | None = None) -> None:
        """Write every bank to `<path>.pt` + `<path>.json` (no pickle, atomic, the .json records
        the .pt's SHA-256); `train` records which training students built them."""
        meta = {"similarity": self.config.similarity, **self._bank_meta()}
        meta["banks"] = self.bank_stats().to_dict(orient="records")
        write_banks(path, self.extra_state(), meta, train)

    def load_banks(
        self, path: str | Path, train: KTDataset | None = None, trust_code: bool = False
    ) -> None:
        """Restore banks written by `save_banks` (checked: SHA-256, the config they depend on,
        the model sizes and, given `train`, the training students). An old bank file whose
        similarity config names a module outside kt_lib is refused without `trust_code`."""

        def old_signature(meta: dict) -> dict:  # written before the typed config
            refuse_untrusted_config(meta, Path(path).with_suffix(".json"), trust_code)
            with quiet():  # not used up: the user still sees them where the config is given
                return load_simakt_config(meta["similarity"], warn=False).bank_signature()

        expected = {"similarity": self.config.similarity, **self._bank_meta()}
        self.load_extra_state(read_banks(path, expected, train, old_signature))

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

    def bank_folds(self, batch: Batch) -> torch.Tensor:
        """[B] the bank fold each row reads (0 for every row when no head reads a bank); the
        causality audit perturbs and compares one fold's rows at a time (kt_lib.audit)."""
        return self._folds_for(batch)

    def block3_extra_heads(
        self, batch: Batch, hq: torch.Tensor, hs: torch.Tensor, need_weights: bool
    ) -> tuple[ExtraHeads | None, dict[str, torch.Tensor]]:
        """The inter-student heads' outputs from Block 3's own queries (its last h heads'
        slices of W_Q hq), and their attention maps when asked."""
        if self.inter is None:
            return None, {}
        states = None
        if self.inter.uses_states:
            states = (
                hs if self.similarity.memory.encoder == "block2" else self._encoder_states(batch)
            )
        ctx = HeadContext(
            hq,
            hs,
            states,
            batch.q,
            self._folds_for(batch),
            batch.uid,
            need_weights,
            start=batch.start,
            span=self.config.max_len,
        )
        queries = self.block3.attn.queries(hq)[:, -len(self.inter) :]  # [B, h, L, Dh]
        out, maps = self.inter(queries, ctx)
        return ExtraHeads(out), maps


def _bank_fold_size(dataset: KTDataset, memory) -> int:
    """Students in the smallest bank: those long enough for the banks (`memory.min_length`)
    outside one cross-fitting fold, as `SimAKT.build_banks` will build them (0: no bank)."""
    try:
        folds = FoldAssignment.make(dataset.uids, memory.folds, memory.seed)
    except ValueError:  # fewer students than folds: build_banks says so
        return 0
    kept = [s.uid for s in dataset.students if len(s) >= memory.min_length]
    if not kept:
        return 0
    own = folds.fold_of(torch.as_tensor(kept, dtype=torch.long))
    return min(len(kept) - int((own == f).sum()) for f in range(folds.n_folds))


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
