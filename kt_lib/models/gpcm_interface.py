"""Seed 002's interface to the GPCM models: thin adapters over the registry models.

The models themselves (`GPCMConfig`, `ModularGPCMConfig`, the registry's `GPCMModel`
"attention_gpcm" and `ModularGPCMModel` "modular_attention_gpcm") live in
kt_lib.models.attention_gpcm. Here, as kt_lib.models.sakt's `SAKT` does for seed 004:
`AttentionGPCM(n_questions, n_responses=4, embed_dim=512, **config_fields)` and
`ModularAttentionGPCM(n_questions, n_responses, embed_dim, attention_config,
attention_mechanisms, fusion_method)` (or either with a config), `model(questions, responses,
mask=None) -> [B, L, K]` probabilities beside `model(batch) -> ModelOutput`, and
`get_attention_weights()`; `create_attention_gpcm` is the seed's factory, `load_seed_config` /
`create_model_from_config` read its YAML format (kt_lib.heads.ordinal.config). Each adapter is
its registry model (same weights, same checkpoints: `load_model` gives the registry class).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from ..config import from_dict
from ..data.dataset import Batch, KTDataset
from ..heads.ordinal import AttentionConfig
from ..heads.ordinal.config import SEED_MECHANISMS, read_seed_config, seed_model_fields
from .attention_gpcm import (
    CausalRefinement,
    GPCMConfig,
    GPCMModel,
    ModularGPCMConfig,
    ModularGPCMModel,
    PipelineEncoder,
)
from .base import MODELS, ModelOutput

__all__ = [
    "SEED_MECHANISMS",
    "AttentionGPCM",
    "CausalRefinement",
    "GPCMConfig",
    "GPCMModel",
    "ModularAttentionGPCM",
    "ModularGPCMConfig",
    "ModularGPCMModel",
    "PipelineEncoder",
    "SeedSetup",
    "create_attention_gpcm",
    "create_model_from_config",
    "load_seed_config",
    "seed_batch",
]


def _int_tensor(name: str, t) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor [B, L], got {type(t).__name__}")
    if t.dim() != 2:
        raise ValueError(f"{name} must be [B, L], got shape {tuple(t.shape)}")
    if t.dtype.is_floating_point or t.dtype.is_complex or t.dtype == torch.bool:
        raise ValueError(f"{name} must hold integer ids, got dtype {t.dtype}")
    return t


def seed_batch(
    questions: torch.Tensor,
    responses: torch.Tensor,
    num_c: int,
    K: int,
    mask: torch.Tensor | None = None,
) -> Batch:
    """Seed 002's (questions, responses) [B, L] checked into a `Batch` (errors name the tensor).

    `mask` [B, L] bool marks real steps (None: all real); padded steps may hold any value (e.g.
    -1) and are set to the padding id 0; real steps must have questions in [0, num_c) and
    responses in [0, K).
    """
    q = _int_tensor("questions", questions)
    r = _int_tensor("responses", responses)
    if r.shape != q.shape:
        raise ValueError(f"responses {tuple(r.shape)} and questions {tuple(q.shape)} differ")
    if r.device != q.device:
        raise ValueError(f"responses on {r.device} but questions on {q.device}")
    if q.shape[1] == 0:
        raise ValueError("questions and responses have no steps (L = 0)")
    if mask is None:
        mask = torch.ones_like(q, dtype=torch.bool)
    elif not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool or mask.shape != q.shape:
        got = (mask.dtype, tuple(mask.shape)) if isinstance(mask, torch.Tensor) else type(mask)
        raise ValueError(f"mask must be a bool tensor of shape {tuple(q.shape)}, got {got}")
    mask = mask.to(q.device)
    for name, t, n in (("questions", q, num_c), ("responses", r, K)):
        real = t[mask]
        if real.numel() and (int(real.min()) < 0 or int(real.max()) >= n):
            raise ValueError(
                f"{name} must lie in [0, {n - 1}] on real steps, got {int(real.min())}.."
                f"{int(real.max())} (mark padded steps with mask=)"
            )
    return Batch(q=q.masked_fill(~mask, 0).long(), r=r.masked_fill(~mask, 0).long(), mask=mask)


class AttentionGPCM(GPCMModel):
    """Seed 002's AttentionGPCM over the registry model "attention_gpcm".

    `AttentionGPCM(config)` or `AttentionGPCM(n_questions, n_responses=4, embed_dim=512,
    **config_fields)`; called with a Batch it is the registry model, with (questions,
    responses) it returns probabilities [B, L, K].
    """

    def __init__(
        self,
        config: GPCMConfig | int | None = None,
        n_responses: int | None = None,
        embed_dim: int | None = None,
        *,
        n_questions: int | None = None,
        **config_fields,
    ):
        if not isinstance(config, GPCMConfig):
            seed_args = {"n_responses": n_responses, "embed_dim": embed_dim}
            config = self._seed_config(config, n_questions, seed_args, config_fields)
        elif n_questions is not None or n_responses is not None or embed_dim is not None:
            raise TypeError(f"pass a {type(config).__name__} or seed 002's arguments, not both")
        elif config_fields:
            raise TypeError(f"unexpected arguments {sorted(config_fields)} beside a config")
        super().__init__(config)

    @classmethod
    def _seed_config(cls, positional, n_questions, seed_args: dict, config_fields: dict):
        """The config for seed 002's constructor arguments (first positional = n_questions)."""
        if positional is not None and n_questions is not None:
            raise TypeError("n_questions given twice (positionally and by keyword)")
        n_questions = positional if positional is not None else n_questions
        if n_questions is None:
            raise TypeError(f"{cls.__name__} needs a config or n_questions (seed 002's interface)")
        modular = issubclass(cls.config_cls, ModularGPCMConfig)
        fields_ = seed_model_fields(
            n_questions,
            **seed_args,
            config_fields=config_fields,
            where=cls.__name__,
            modular=modular,
        )
        return from_dict(cls.config_cls, fields_, source=cls.__name__)

    def forward(
        self,
        batch: Batch | torch.Tensor,
        responses: torch.Tensor | None = None,
        return_attention: bool = False,
        *,
        mask: torch.Tensor | None = None,
    ) -> ModelOutput | torch.Tensor:
        """`forward(batch) -> ModelOutput` (logits [B, L, K]), or seed 002's
        `forward(questions, responses, mask=None) -> probabilities [B, L, K]`."""
        if not isinstance(batch, Batch):
            if responses is None:
                raise TypeError("forward takes a Batch, or seed 002's (questions, responses)")
            if return_attention:
                raise ValueError("with (questions, responses) read maps by get_attention_weights()")
            seed = seed_batch(batch, responses, self.config.num_c, self.config.K, mask)
            return self.probabilities(self.forward(seed))
        if responses is not None or mask is not None:
            raise TypeError("a Batch carries its responses and mask: pass the Batch alone")
        return super().forward(batch, return_attention)

    @torch.no_grad()
    def get_attention_weights(
        self,
        questions: torch.Tensor | Batch | None = None,
        responses: torch.Tensor | None = None,
        *,
        mask: torch.Tensor | None = None,
    ) -> dict[str, torch.Tensor]:
        """Attention maps name -> [B, H, L, L] of the last forward's inputs (seed 002), or of
        the given Batch / (questions, responses); computed as in evaluation (no dropout)."""
        if questions is None or isinstance(questions, Batch):
            return super().get_attention_weights(questions)
        batch = seed_batch(questions, responses, self.config.num_c, self.config.K, mask)
        return super().get_attention_weights(batch)


class ModularAttentionGPCM(AttentionGPCM, ModularGPCMModel):
    """Seed 002's ModularAttentionGPCM over the registry model "modular_attention_gpcm".

    `ModularAttentionGPCM(config)` or `ModularAttentionGPCM(n_questions, n_responses=4,
    embed_dim=512, attention_config=None, attention_mechanisms=None, fusion_method='concat',
    **config_fields)`.
    """

    def __init__(
        self,
        config: ModularGPCMConfig | int | None = None,
        n_responses: int | None = None,
        embed_dim: int | None = None,
        attention_config: AttentionConfig | dict | None = None,
        attention_mechanisms: list[str] | None = None,
        fusion_method: str | None = None,
        *,
        n_questions: int | None = None,
        **config_fields,
    ):
        seed_args = {
            "n_responses": n_responses,
            "embed_dim": embed_dim,
            "attention_config": attention_config,
            "mechanisms": attention_mechanisms,
            "fusion_method": fusion_method,
        }
        if not isinstance(config, ModularGPCMConfig):
            config = self._seed_config(config, n_questions, seed_args, config_fields)
        elif n_questions is not None or any(v is not None for v in seed_args.values()):
            raise TypeError("pass a ModularGPCMConfig or seed 002's arguments, not both")
        elif config_fields:
            raise TypeError(f"unexpected arguments {sorted(config_fields)} beside a config")
        super().__init__(config)


SEED_CLASSES = {"attention_gpcm": AttentionGPCM, "modular_attention_gpcm": ModularAttentionGPCM}


# --- seed 002 entry points -------------------------------------------------------------------


def create_attention_gpcm(
    n_questions: int,
    n_responses: int = 4,
    attention_type: str = "modular",
    mechanisms: list[str] | None = None,
    fusion_method: str | None = None,
    embed_dim: int | None = None,
    attention_config: AttentionConfig | dict | None = None,
    **config_fields,
) -> AttentionGPCM:
    """Seed 002's factory: 'modular' -> ModularAttentionGPCM, 'basic' -> AttentionGPCM.

    `config_fields` are further GPCMConfig / ModularGPCMConfig fields (e.g. n_layers, loss).
    """
    if attention_type == "basic":
        if mechanisms is not None or attention_config is not None or fusion_method is not None:
            raise ValueError(
                "mechanisms, fusion_method and attention_config apply to attention_type='modular'"
            )
        return AttentionGPCM(n_questions, n_responses, embed_dim, **config_fields)
    if attention_type == "modular":
        return ModularAttentionGPCM(
            n_questions,
            n_responses,
            embed_dim,
            attention_config,
            mechanisms,
            fusion_method,
            **config_fields,
        )
    raise ValueError(f"Unknown attention type: {attention_type!r}; expected 'modular' or 'basic'")


@dataclass
class SeedSetup:
    """A seed-002 YAML file resolved into a registry model config and training settings."""

    model: str  # registry name: attention_gpcm or modular_attention_gpcm
    config: GPCMConfig  # validated model config (gradient_checkpointing from the file)
    train: dict  # TrainConfig overrides: lr, batch_size, epochs, precision (mixed_precision)

    def build(self) -> AttentionGPCM:
        """The seed-002 class of `model` (an AttentionGPCM or ModularAttentionGPCM)."""
        return SEED_CLASSES[self.model](self.config)


def load_seed_config(
    source: str | Path | dict, dataset: KTDataset | None = None, **overrides
) -> SeedSetup:
    """Seed 002's YAML (attention / model / training sections) as a model config and training
    settings, with clear errors naming the file and key (see kt_lib.heads.ordinal.config).

    With `dataset`, the vocabulary comes from the data (n_questions is replaced; n_responses must
    match its K). `overrides` are model config fields applied last (e.g. d=16 for a smoke run).
    """
    f = read_seed_config(source)
    name, fields_ = f.model_fields(dataset, **overrides)
    config = from_dict(MODELS[name].config_cls, fields_, source=f.source)
    return SeedSetup(name, config, dict(f.train))


def create_model_from_config(
    source: str | Path | dict, dataset: KTDataset | None = None, **overrides
) -> AttentionGPCM:
    """Seed 002's `ConfigLoader.create_model_from_config`: a model from its YAML format."""
    return load_seed_config(source, dataset, **overrides).build()
