"""AttentionGPCM and ModularAttentionGPCM: ordinal knowledge tracing with a GPCM output (seed 002).

# B batch, L steps, D model dim, H heads, K response categories, S summary dim, C concepts
Both models share one trunk:
    question stream   e_t = E_q(q_t) + P(t)              (known at t before the response)
    encoder           read_t from q at steps <= t and r at steps < t only
    memory            m_t = LSTM state after the interactions x_s = e_s + R(r_s), s < t
    summary state     s_t = tanh(W [read_t; m_t; e_t])   [B, L, S]
    ability           theta_t = w . s_t                   [B, L]
    GPCM layer        per-concept alpha > 0 and K-1 ordered thresholds -> logits [B, L, K]
- AttentionGPCM ("attention_gpcm"): interactions x_s = e_s + R(r_s) (R an ordinal response
  embedding) are refined by `n_layers` causal self-attention layers (s reads interactions <= s),
  then e_t reads the refined history at steps < t. The published AttentionGPCM refines with an
  unmasked nn.MultiheadAttention, so every prediction read future responses.
- ModularAttentionGPCM ("modular_attention_gpcm"): the encoder is `n_layers` stacked
  AttentionPipelines of registered ordinal mechanisms (kt_lib.heads.ordinal) fused by concat,
  weighted or mean; a pipeline's output at t reads r < t only, so stacking stays causal.
The recurrent memory stands in for the published model's DKVMN memory, which sits between its
attention refinement and its summary network (`memory=False` drops it: attention only).
With K = 2 the GPCM layer is a 2PL model, so both also run on binary data.
`create_attention_gpcm` is seed 002's factory; `load_seed_config` reads its YAML format.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F
from torch import nn

from ..config import from_dict, read_mapping, require
from ..data.dataset import Batch, KTDataset
from ..heads.gpcm import ORDINAL_LOSSES, GPCMHead, parse_loss
from ..heads.ordinal import (
    FUSIONS,
    MECHANISMS,
    AttentionConfig,
    AttentionContext,
    AttentionPipeline,
    AttentionRegistry,
    OrdinalEmbedding,
)
from ..nn import Dropout, TransformerLayer, causal_mask
from .base import MODELS, BaseConfig, KTModel, ModelOutput, build_model, register

SEED_MECHANISMS = ("ordinal_aware", "response_conditioned", "ordinal_pattern", "qwk_aligned")
CONFIG_DIR = Path(__file__).resolve().parents[1] / "configs" / "ordinal"
SEED_CONFIG = CONFIG_DIR / "attention_config.yaml"  # seed 002's YAML example, verbatim


@dataclass
class GPCMConfig(BaseConfig):
    """AttentionGPCM sizes (paper: the published AttentionGPCM's embed 64, 4 heads, 2 cycles)."""

    K: int = 4  # response categories (2: binary data, the GPCM layer is then a 2PL)
    d: int = 64  # model dim of the embeddings and attention
    n_heads: int = 4  # attention heads
    n_layers: int = 1  # causal refinement layers (modular: stacked pipelines)
    d_ff: int | None = None  # FFN inner dim of the refinement layers; None -> 4 * d
    d_summary: int = 50  # width of the summary state theta is read from
    memory: bool = True  # recurrent memory of past interactions in the summary (published: DKVMN)
    dropout: float = 0.1  # dropout on embeddings, attention and the summary
    max_len: int = 200  # longest window (learned positions)
    loss: str = "ce"  # prediction loss: "ce", "emd", "qwk" or a sum such as "ce+emd"
    ordinal_loss_weight: float = 1.0  # weight of the non-CE terms of `loss`

    def validate(self) -> None:
        super().validate()
        require(self.d > 0 and self.n_heads > 0, "d and n_heads must be > 0")
        require(self.d % self.n_heads == 0, f"d={self.d} not divisible by n_heads={self.n_heads}")
        require(self.n_layers >= 1, f"n_layers must be >= 1, got {self.n_layers}")
        require(self.d_summary > 0, f"d_summary must be > 0, got {self.d_summary}")
        require(0 <= self.dropout < 1, f"dropout must be in [0, 1), got {self.dropout}")
        require(self.max_len > 0, f"max_len must be > 0, got {self.max_len}")
        require(self.ordinal_loss_weight >= 0, "ordinal_loss_weight must be >= 0")
        try:
            parse_loss(self.loss)
        except KeyError as exc:
            raise ValueError(f"loss {self.loss!r}: {exc.args[0]}") from None

    @classmethod
    def tiny(cls, **kw):
        return cls(**{"d": 16, "n_heads": 2, "d_summary": 16, "max_len": 64, **kw})

    @classmethod
    def paper(cls, **kw):
        return cls(**{"d": 64, "n_heads": 4, "n_layers": 2, "d_summary": 50, **kw})


@dataclass
class ModularGPCMConfig(GPCMConfig):
    """ModularAttentionGPCM: the trunk above plus the mechanism pipeline (seed 002 defaults)."""

    n_layers: int = 1  # stacked pipelines
    mechanisms: list[str] = field(default_factory=lambda: list(SEED_MECHANISMS))  # registry names
    fusion: str = "concat"  # how mechanism outputs are fused: concat, weighted, mean
    distance_penalty: float = 0.5  # initial penalty per unit of ordinal distance
    window_size: int = 3  # ordinal_pattern's causal convolution window
    correct_threshold: int | None = None  # hierarchical_ordinal's initial cut; None -> K // 2

    def validate(self) -> None:
        super().validate()
        require(len(self.mechanisms) > 0, "mechanisms must name at least one mechanism")
        unknown = [m for m in self.mechanisms if m not in MECHANISMS]
        require(
            not unknown,
            f"unknown mechanism(s) {unknown}; valid: {AttentionRegistry.list_available()}",
        )
        require(self.fusion in FUSIONS, f"fusion must be one of {FUSIONS}, got {self.fusion!r}")
        self.attention_config().validate()

    def attention_config(self) -> AttentionConfig:
        """The AttentionConfig every mechanism of the pipeline is built with."""
        threshold = self.K // 2 if self.correct_threshold is None else self.correct_threshold
        return AttentionConfig(
            embed_dim=self.d,
            n_heads=self.n_heads,
            n_cats=self.K,
            dropout=self.dropout,
            distance_penalty=self.distance_penalty,
            window_size=self.window_size,
            correct_threshold=threshold,
        )


class CausalRefinement(nn.Module):
    """Self-attention over interactions (s reads <= s), then a strict-past read by the queries."""

    def __init__(self, c: GPCMConfig):
        super().__init__()
        d_ff = c.d_ff or 4 * c.d
        self.response_embedding = OrdinalEmbedding(c.K, c.d)
        self.layers = nn.ModuleList(
            TransformerLayer(c.d, c.n_heads, d_ff, c.dropout) for _ in range(c.n_layers)
        )
        self.read = TransformerLayer(c.d, c.n_heads, d_ff, c.dropout)

    def forward(self, e, r, mask, need_weights=False):
        """e [B, L, D] question stream, r [B, L], mask [B, L] -> read [B, L, D], maps."""
        L = e.shape[1]
        keys = mask.view(mask.shape[0], 1, 1, L)  # [B, 1, 1, L] valid keys
        inclusive = causal_mask(L, e.device) & keys
        strict = causal_mask(L, e.device, strict=True) & keys
        h = e + self.response_embedding(r)  # interactions: step s carries r_s
        maps = {}
        for i, layer in enumerate(self.layers):
            h, maps[f"refine{i}"] = layer(h, h, h, inclusive, need_weights)
        out, maps["read"] = self.read(e, h, h, strict, need_weights)
        return out, maps


class PipelineEncoder(nn.Module):
    """Stacked AttentionPipelines: each refines the question stream from responses < t."""

    def __init__(self, c: ModularGPCMConfig):
        super().__init__()
        att = c.attention_config()
        self.pipelines = nn.ModuleList(
            AttentionPipeline([AttentionRegistry.create(m, att) for m in c.mechanisms], c.fusion)
            for _ in range(c.n_layers)
        )

    def forward(self, e, r, mask, need_weights=False):
        h, maps = e, {}
        for i, pipeline in enumerate(self.pipelines):
            h, w = pipeline.run(AttentionContext(h, r, mask, {}), need_weights)
            prefix = f"block{i}/" if len(self.pipelines) > 1 else ""
            maps.update({prefix + k: v for k, v in w.items()})
        return h, maps


@register("attention_gpcm")
class AttentionGPCM(KTModel):
    """Causal attention encoder, summary state, GPCM output over K ordered categories."""

    config_cls = GPCMConfig
    ordinal = True

    def __init__(self, config: GPCMConfig):
        super().__init__(config)
        c = config
        self.q_embedding = nn.Embedding(c.num_c, c.d)
        self.pos_embedding = nn.Embedding(c.max_len, c.d)
        self.drop = Dropout(c.dropout)
        self.encoder = self.build_encoder()
        self.memory = nn.LSTM(c.d, c.d, batch_first=True) if c.memory else None
        self.memory_response = OrdinalEmbedding(c.K, c.d) if c.memory else None
        self.summary = nn.Sequential(
            nn.Linear((3 if c.memory else 2) * c.d, c.d_summary), nn.Tanh(), Dropout(c.dropout)
        )
        self.ability = nn.Linear(c.d_summary, 1)
        self.gpcm = GPCMHead(c.num_c, c.K)
        self.loss_parts = parse_loss(c.loss)

    def build_encoder(self) -> nn.Module:
        return CausalRefinement(self.config)

    def forward(self, batch: Batch, return_attention: bool = False) -> ModelOutput:
        L = batch.q.shape[1]
        if L > self.config.max_len:
            raise ValueError(f"sequence length {L} > max_len {self.config.max_len}")
        pos = torch.arange(L, device=batch.q.device)
        e = self.drop(self.q_embedding(batch.q) + self.pos_embedding(pos))  # [B, L, D]
        read, maps = self.encoder(e, batch.r, batch.mask, return_attention)
        parts = [read, e]
        if self.memory is not None:
            h, _ = self.memory(e + self.memory_response(batch.r))  # h_s has read r_s
            parts.append(F.pad(h[:, :-1], (0, 0, 1, 0)))  # shift: step t sees states of s < t
        theta = self.ability(self.summary(torch.cat(parts, dim=-1))).squeeze(-1)  # [B, L]
        g = self.gpcm(theta, batch.q)
        extras = {"theta": theta, "alpha": g.alpha, "thresholds": g.thresholds}
        return ModelOutput(
            logits=g.logits, attention=maps if return_attention else None, extras=extras
        )

    def loss(self, out: ModelOutput, batch: Batch, epoch: int = 0) -> dict[str, torch.Tensor]:
        """The configured prediction loss ('ce', 'emd', 'qwk' or a '+' sum) over valid steps."""
        m = batch.mask
        logits, y = out.logits[m], batch.r[m]
        parts = {name: ORDINAL_LOSSES[name](logits, y) for name in self.loss_parts}
        w = self.config.ordinal_loss_weight
        pred = sum(v if name == "ce" else w * v for name, v in parts.items())
        terms = {**(parts if len(parts) > 1 else {}), "pred": pred, **out.losses}
        terms["total"] = pred + sum(out.losses.values())
        return terms

    @torch.no_grad()
    def item_parameters(self) -> dict[str, np.ndarray]:
        """Learned per-concept discrimination alpha [C] and thresholds [C, K-1]."""
        alpha, thresholds = self.gpcm.item_parameters()
        return {"alpha": alpha.cpu().numpy(), "thresholds": thresholds.cpu().numpy()}


@register("modular_attention_gpcm")
class ModularAttentionGPCM(AttentionGPCM):
    """AttentionGPCM whose encoder is a pipeline of plug-in ordinal attention mechanisms."""

    config_cls = ModularGPCMConfig

    def build_encoder(self) -> nn.Module:
        return PipelineEncoder(self.config)

    @property
    def attention_pipeline(self) -> AttentionPipeline:
        """The (first) pipeline, as seed 002 names it."""
        return self.encoder.pipelines[0]


# --- seed 002 entry points -------------------------------------------------------------------

_ATTENTION_TO_MODEL = {  # AttentionConfig field -> ModularGPCMConfig field
    "embed_dim": "d",
    "n_heads": "n_heads",
    "n_cats": "K",
    "dropout": "dropout",
    "distance_penalty": "distance_penalty",
    "window_size": "window_size",
    "correct_threshold": "correct_threshold",
}


def _merge_attention_config(fields_: dict, attention_config, where: str) -> dict:
    """Model fields updated from an AttentionConfig/dict; clashing sizes raise ValueError."""
    if isinstance(attention_config, AttentionConfig):
        given = {f.name: getattr(attention_config, f.name) for f in fields(AttentionConfig)}
    else:
        valid = sorted(_ATTENTION_TO_MODEL)
        bad = sorted(set(attention_config) - set(valid))
        if bad:
            raise ValueError(f"{where}: unknown field(s) {bad} for AttentionConfig; valid: {valid}")
        given = dict(attention_config)
    out = dict(fields_)
    for key, value in given.items():
        target = _ATTENTION_TO_MODEL[key]
        if target in ("d", "K") and target in out and out[target] != value:
            model_key = {"d": "embed_dim", "K": "n_responses"}[target]
            raise ValueError(
                f"{where}: {key}={value} disagrees with the model's {model_key}={out[target]}"
            )
        out[target] = value
    return out


def create_attention_gpcm(
    n_questions: int,
    n_responses: int = 4,
    attention_type: str = "modular",
    mechanisms: list[str] | None = None,
    fusion_method: str = "concat",
    embed_dim: int | None = None,
    attention_config: AttentionConfig | dict | None = None,
    **config_fields,
) -> AttentionGPCM:
    """Seed 002's factory: 'modular' -> ModularAttentionGPCM, 'basic' -> AttentionGPCM.

    `config_fields` are further GPCMConfig / ModularGPCMConfig fields (e.g. n_layers, loss).
    """
    fields_ = {"num_c": n_questions, "K": n_responses, **config_fields}
    if embed_dim is not None:
        fields_["d"] = embed_dim
    if attention_type == "basic":
        if mechanisms is not None or attention_config is not None:
            raise ValueError("mechanisms and attention_config apply to attention_type='modular'")
        return build_model("attention_gpcm", **fields_)
    if attention_type == "modular":
        if attention_config is not None:
            fields_ = _merge_attention_config(fields_, attention_config, "attention_config")
        if mechanisms is not None:
            fields_["mechanisms"] = list(mechanisms)
        return build_model("modular_attention_gpcm", fusion=fusion_method, **fields_)
    raise ValueError(f"Unknown attention type: {attention_type!r}; expected 'modular' or 'basic'")


_SEED_SECTIONS = {
    "attention": {"type", "mechanisms", "fusion_method", "config"},
    "model": {"n_questions", "n_responses", "embed_dim"},
    "training": {
        "learning_rate",
        "batch_size",
        "epochs",
        "gradient_checkpointing",
        "mixed_precision",
    },
}


@dataclass
class SeedSetup:
    """A seed-002 YAML file resolved into a registry model config and training settings."""

    model: str  # registry name: attention_gpcm or modular_attention_gpcm
    config: GPCMConfig  # validated model config
    train: dict  # TrainConfig overrides (lr, batch_size, epochs)
    ignored: dict  # seed training switches kt_lib does not implement (checkpointing, fp16)

    def build(self) -> AttentionGPCM:
        return build_model(self.model, self.config)


def load_seed_config(
    source: str | Path | dict, dataset: KTDataset | None = None, **overrides
) -> SeedSetup:
    """Read seed 002's YAML (attention / model / training sections) with clear errors.

    With `dataset`, the vocabulary comes from the data (n_questions is replaced; n_responses must
    match its K). `overrides` are model config fields applied last (e.g. d=16 for a smoke run).
    """
    where = str(source) if not isinstance(source, dict) else "seed config"
    raw = read_mapping(source) if not isinstance(source, dict) else dict(source)
    unknown = sorted(set(raw) - set(_SEED_SECTIONS))
    if unknown:
        raise ValueError(f"{where}: unknown section(s) {unknown}; valid: {sorted(_SEED_SECTIONS)}")
    sec = {}
    for name, keys in _SEED_SECTIONS.items():
        value = raw.get(name) or {}
        if not isinstance(value, dict):
            raise ValueError(f"{where}: section {name!r} must be a mapping, got {value!r}")
        bad = sorted(set(value) - keys)
        if bad:
            raise ValueError(f"{where}: unknown key(s) {bad} in {name!r}; valid: {sorted(keys)}")
        sec[name] = value
    att, mod, tr = sec["attention"], sec["model"], sec["training"]
    number = lambda v: isinstance(v, (int, float)) and not isinstance(v, bool)
    count = lambda v: number(v) and isinstance(v, int) and v >= 1
    for key, ok, want in (  # seed training fields: type and range, before they reach fit
        ("learning_rate", lambda v: number(v) and 0 < v < np.inf, "a finite number > 0"),
        ("batch_size", count, "an integer >= 1"),
        ("epochs", count, "an integer >= 1"),
        ("gradient_checkpointing", lambda v: isinstance(v, bool), "true or false"),
        ("mixed_precision", lambda v: isinstance(v, bool), "true or false"),
    ):
        if key in tr and not ok(tr[key]):
            text = isinstance(tr[key], str) and key == "learning_rate"
            hint = " (YAML reads 1e-3 as text; write 1.0e-3)" if text else ""
            raise ValueError(f"{where}: training.{key} must be {want}, got {tr[key]!r}{hint}")

    kind = att.get("type", "modular")
    if kind not in ("modular", "basic"):
        raise ValueError(f"{where}: attention.type must be 'modular' or 'basic', got {kind!r}")
    fields_: dict = {}
    if dataset is not None:
        if "n_responses" in mod and mod["n_responses"] != dataset.K:
            raise ValueError(
                f"{where}: model.n_responses={mod['n_responses']} but the data has "
                f"K={dataset.K} categories"
            )
        fields_.update(num_c=dataset.num_c, K=dataset.K)
    elif "n_questions" not in mod:
        raise ValueError(f"{where}: model.n_questions is required (or pass dataset=)")
    else:
        fields_.update(num_c=mod["n_questions"], K=mod.get("n_responses", 4))
    if "embed_dim" in mod:
        fields_["d"] = mod["embed_dim"]
    name = "attention_gpcm"
    if kind == "modular":
        name = "modular_attention_gpcm"
        if "config" in att:
            if not isinstance(att["config"], dict):
                raise ValueError(f"{where}: attention.config must be a mapping")
            fields_ = _merge_attention_config(fields_, att["config"], f"{where}: attention.config")
        if "mechanisms" in att:
            mechs = att["mechanisms"]
            if not isinstance(mechs, list) or not all(isinstance(m, str) for m in mechs):
                raise ValueError(f"{where}: attention.mechanisms must be a list of names")
            fields_["mechanisms"] = mechs
        if "fusion_method" in att:
            fields_["fusion"] = att["fusion_method"]
    elif {"mechanisms", "config", "fusion_method"} & set(att):
        raise ValueError(f"{where}: attention.mechanisms/config/fusion_method need type: modular")
    fields_.update(overrides)
    config = from_dict(MODELS[name].config_cls, fields_, source=where)
    train = {
        k2: tr[k1]
        for k1, k2 in (("learning_rate", "lr"), ("batch_size", "batch_size"), ("epochs", "epochs"))
        if k1 in tr
    }
    ignored = {k: tr[k] for k in ("gradient_checkpointing", "mixed_precision") if k in tr}
    return SeedSetup(name, config, train, ignored)


def create_model_from_config(
    source: str | Path | dict, dataset: KTDataset | None = None, **overrides
) -> AttentionGPCM:
    """Seed 002's `ConfigLoader.create_model_from_config`: a model from its YAML format."""
    return load_seed_config(source, dataset, **overrides).build()


# --- analysis helpers ------------------------------------------------------------------------


@torch.no_grad()
def concept_theta_moments(
    model: AttentionGPCM,
    data: KTDataset,
    batch_size: int = 128,
    max_len: int = 200,
    device: str = "cpu",
) -> dict[str, np.ndarray]:
    """Mean and sd of the ability theta the model assigns on each concept over `data` [C]."""
    from ..data.dataset import BatchLoader

    was_training = model.training
    model.eval()
    C = model.config.num_c
    s0, s1, s2 = (torch.zeros(C, dtype=torch.float64) for _ in range(3))
    for batch in BatchLoader(data, batch_size, max_len):
        batch = batch.to(device)
        theta = model(batch).extras["theta"][batch.mask].double().cpu()
        q = batch.q[batch.mask].cpu()
        s0 += torch.bincount(q, minlength=C)
        s1.index_add_(0, q, theta)
        s2.index_add_(0, q, theta.square())
    model.train(was_training)
    n = s0.clamp_min(1)
    mean = s1 / n
    sd = (s2 / n - mean.square()).clamp_min(0).sqrt()
    unseen = s0 == 0
    mean[unseen], sd[unseen] = float("nan"), float("nan")
    return {"mean": mean.numpy(), "sd": sd.numpy()}


def item_parameter_recovery(
    model: AttentionGPCM,
    alpha_true: np.ndarray,
    thresholds_true: np.ndarray,
    theta_moments: dict[str, np.ndarray] | None = None,
) -> tuple[pd.DataFrame, dict[str, float]]:
    """Learned vs true GPCM parameters per concept: a long table and Pearson correlations.

    The scale and origin of theta are not identified, so learned parameters match the truth up to
    an affine map; Pearson correlation is invariant to it. Because theta also reads the current
    question, even the per-concept origin and scale are not identified: (theta + d_c, beta_c + d_c)
    predict the same. With `theta_moments` (from `concept_theta_moments` on the training data) the
    table also gives the parameters in the identified frame where the model's ability on each
    concept has mean 0 and sd 1 (thresholds (beta - mean) / sd, discrimination alpha * sd), the
    convention IRT uses for its ability distribution; correlations `*_anchored`.
    """
    learned = model.item_parameters()
    C, Km1 = thresholds_true.shape
    if learned["thresholds"].shape != (C, Km1):
        raise ValueError(f"model thresholds {learned['thresholds'].shape} vs truth {(C, Km1)}")
    thr, alpha = learned["thresholds"], learned["alpha"]
    frames = {"learned": (thr, alpha)}
    if theta_moments is not None:
        m, sd = theta_moments["mean"][:, None], theta_moments["sd"]
        frames["anchored"] = ((thr - m) / sd[:, None], alpha * sd)
    rows = []
    for c in range(C):
        for h in range(Km1):
            rows.append(
                {
                    "concept": c,
                    "parameter": f"beta_{h}",
                    "true": thresholds_true[c, h],
                    **{k: f[0][c, h] for k, f in frames.items()},
                }
            )
        rows.append(
            {
                "concept": c,
                "parameter": "alpha",
                "true": alpha_true[c],
                **{k: f[1][c] for k, f in frames.items()},
            }
        )
    table = pd.DataFrame(rows)
    is_alpha = table.parameter == "alpha"
    corr = {}
    for frame in frames:
        suffix = "" if frame == "learned" else f"_{frame}"
        for key, part in (("threshold_r", table[~is_alpha]), ("alpha_r", table[is_alpha])):
            ok = np.isfinite(part[frame])
            corr[key + suffix] = float(np.corrcoef(part.true[ok], part[frame][ok])[0, 1])
    return table, corr
