"""Seed 000's Step 2 similarity modules, accepted as written: an adapter to the head interface.

# B batch, L steps, D model dim, Dh head dim, F bank folds, M bank entries
The seed's interface (`BaseSimilarityModule`): `__init__(d_model, d_head, **config)`,
`build_memory_bank(historical_trajectories, save_path=None)`, `compute_similarity(query_states,
memory_bank)` and `forward(hq, hs) -> [B, L, Dh]`. A class with it, named by `type: custom` and
`module_path` (its keyword arguments under `params`, as the seed's `_load_custom_module` passes
them), runs inside a `SeedModuleHead`:

- banks: per fold, `memory_size` training students of the OTHER folds (farthest-first, as the KNN
  bank) are encoded and handed to `build_memory_bank` as [M, D]; what the module then holds in its
  buffers (or returns: kept as its buffer `memory_bank`) is kept per fold and swapped in for the
  rows that read that fold, so a training student never meets its own log.
- causality: the seed's `forward(hq, hs)` may mix steps freely (a mean over the sequence reads
  later responses), so the adapter calls it on each prefix (steps <= t) and keeps step t: L calls
  per fold. A class that declares `causal = True` (its output at t reads steps <= t only) is
  called once; the causality audit tests that claim like any other.
- trust: a `module_path` outside kt_lib is code; loading it from a file needs `trust_code=True`
  (`kt_lib.trust`), as for every custom head.
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any, ClassVar

import torch
from torch import nn

from ...config import require
from ...memory.banks import KNNBank
from .base import CLASS_ADAPTERS, BankBuild, BaseSimilarityHead, HeadContext, HeadSpec

SEED_METHODS = ("build_memory_bank", "compute_similarity", "forward")
ADAPTER_MEMORY_SIZE = 200  # students per fold handed to build_memory_bank (the seed's default)


def is_seed_module(obj: Any) -> bool:
    """A class with seed 000's module interface (and not already a workbook head)."""
    return (
        isinstance(obj, type)
        and issubclass(obj, nn.Module)
        and not issubclass(obj, BaseSimilarityHead)
        and all(callable(getattr(obj, m, None)) for m in SEED_METHODS)
    )


def _kwargs_of(module_cls: type) -> tuple[dict[str, Any], bool]:
    """(keyword arguments with defaults after d_model, d_head; whether it takes **config)."""
    params = list(inspect.signature(module_cls.__init__).parameters.values())[1:]
    named = {
        p.name: p.default
        for p in params[2:]
        if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.default is not p.empty
    }
    return named, any(p.kind is p.VAR_KEYWORD for p in params)


def _params_cls(module_cls: type) -> type:
    """A params dataclass of the module's own keyword arguments plus `memory_size`."""
    named, _ = _kwargs_of(module_cls)
    named.setdefault("memory_size", ADAPTER_MEMORY_SIZE)

    def hint(value):
        return type(value) if type(value) in (int, float, str, bool) else Any

    fields = [(k, hint(v), dataclasses.field(default=v)) for k, v in named.items()]

    def validate(self) -> None:
        m = self.memory_size
        require(isinstance(m, int) and m >= 1, f"memory_size must be >= 1, got {m}")

    return dataclasses.make_dataclass(
        f"{module_cls.__name__}Params", fields, namespace={"validate": validate}
    )


class SeedModuleHead(BaseSimilarityHead):
    """Runs a seed-000-style similarity module as an inter-student head (see the module doc)."""

    module_cls: ClassVar[type]
    bank_cls = KNNBank

    def __init__(self, d_model: int, d_head: int, spec: HeadSpec, num_c: int):
        super().__init__(d_model, d_head, spec, num_c)
        named, var_kw = _kwargs_of(self.module_cls)
        given = {f.name: getattr(self.p, f.name) for f in dataclasses.fields(self.p)}
        kwargs = {k: v for k, v in given.items() if k in named or var_kw}
        self.module = self.module_cls(d_model, d_head, **kwargs)
        self._fold_memory: list[dict[str, torch.Tensor]] = []
        self._loaded: int | None = None

    def build_bank(self, build: BankBuild) -> KNNBank:
        return KNNBank.build(build.members, self.p.memory_size, build.seed, with_sequences=False)

    def _install(self, banks: list[KNNBank]) -> None:
        ref = next(self.module.parameters(), None)
        self._fold_memory, self._loaded = [], None
        for bank in banks:
            enc = bank.encodings
            if ref is not None:
                enc = enc.to(device=ref.device, dtype=ref.dtype)
            with torch.no_grad():
                out = self.module.build_memory_bank(enc)
            if isinstance(out, torch.Tensor):  # the seed's Step 1 modules return their bank
                self.module.register_buffer("memory_bank", out.detach(), persistent=False)
            self._fold_memory.append(
                {n: b.detach().clone() for n, b in self.module.named_buffers()}
            )

    def _load_fold(self, f: int, device: torch.device) -> None:
        """Put fold f's memory into the module's buffers (what its forward reads)."""
        if self._loaded == f:
            return
        for name, tensor in self._fold_memory[f].items():
            owner, _, leaf = name.rpartition(".")
            target = self.module.get_submodule(owner) if owner else self.module
            setattr(target, leaf, tensor.to(device))
        self._loaded = f

    def _causal(self, hq: torch.Tensor, hs: torch.Tensor) -> torch.Tensor:
        """[B, L, Dh]: step t from the module run on steps <= t only."""
        if getattr(self.module_cls, "causal", False):
            return self._checked(self.module(hq, hs), hq)
        steps = [self._checked(self.module(hq[:, : t + 1], hs[:, : t + 1]), hq[:, : t + 1])[:, t]
                 for t in range(hq.shape[1])]  # fmt: skip
        return torch.stack(steps, dim=1)

    def _checked(self, out: torch.Tensor, hq: torch.Tensor) -> torch.Tensor:
        want = (*hq.shape[:2], self.d_head)
        if not isinstance(out, torch.Tensor) or tuple(out.shape) != want:
            got = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
            raise ValueError(
                f"{self.module_cls.__name__}.forward(hq, hs) must return [B, L, d_head] = "
                f"{list(want)}, got {got}"
            )
        return out

    def forward(self, query: torch.Tensor, ctx: HeadContext) -> torch.Tensor:
        out = query.new_zeros(query.shape)  # [B, L, Dh]
        for f in ctx.fold.unique().tolist():  # F is small; each fold's rows run together
            rows = (ctx.fold == f).nonzero(as_tuple=True)[0]
            self._load_fold(f, query.device)
            out[rows] = self._causal(ctx.hq[rows], ctx.hs[rows]).to(out.dtype)
        return out


_ADAPTED: dict[type, type[SeedModuleHead]] = {}


def seed_adapter(obj: Any) -> type[SeedModuleHead] | None:
    """The head class running seed-style module class `obj` (None: not a seed module)."""
    if not is_seed_module(obj):
        return None
    if obj not in _ADAPTED:
        attrs = {"module_cls": obj, "params_cls": _params_cls(obj), "__module__": __name__}
        _ADAPTED[obj] = type(f"SeedModule_{obj.__name__}", (SeedModuleHead,), attrs)
    return _ADAPTED[obj]


CLASS_ADAPTERS.append(seed_adapter)
