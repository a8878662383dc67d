"""Build every memory bank a SimAKT configuration needs, once per dataset:

    kt memory build --data-dir DIR --data-format FMT --out DIR
        [--similarity PRESET|FILE|FILE:NAME] [--set KEY=VALUE ...]
        [--preset default|tiny|paper] [--d D] [--n-heads H] [--max-len L] [--seed S] [--fold K]
        [--num-students N --seq-len T]   (synthetic data only)

The training split of `kt_lib.data.load_bundle(data_dir, data_format, fold, seed)` (the split a
training run with the same arguments uses) goes through the configuration's trajectory encoder,
and every active head's banks are built, one per cross-fitting fold. They are written to
`<out>/<dataset>.pt` (tensors, no pickle) and `<out>/<dataset>.json` (the configuration they
depend on, the model sizes, a SHA-256 of the training students' ids, statistics, and the .pt's
SHA-256), atomically. A model whose similarity config sets `memory: {bank_dir: <out>}` loads
them in `prepare(train)` by the training set's dataset name, after checking all of that.

Only the heuristic encoder can be prebuilt: `block2` banks depend on the model's weights.
(This entry point builds a SimAKT model to encode students, hence its import of kt_lib.models;
the library modules of kt_lib.memory never import models.)
"""

from __future__ import annotations

import argparse
import warnings
from pathlib import Path

import torch
import yaml

from ..data import load_bundle
from ..heads.simakt_config import load_simakt_config
from ..memory.bank_files import bank_file, dataset_name
from ..models import build_model


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="kt memory", description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="build and save the banks of a SimAKT configuration")
    b.add_argument("--data-dir", default=None, help="dataset folder or file (none: synthetic)")
    b.add_argument(
        "--data-format", default="auto", help="auto | line3 | line4 | pykt | log | synthetic"
    )
    b.add_argument("--out", required=True, help="folder for <dataset>.pt / <dataset>.json")
    b.add_argument(
        "--similarity", default="position_weighted_dual", help="preset, file or file:name"
    )
    b.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="change a setting of the config (SimilarityConfig.with_settings), e.g. n_clusters=8",
    )
    b.add_argument("--preset", default="default", help="model sizes: default | tiny | paper")
    b.add_argument("--d", type=int, default=None, help="model dim (default: the preset's)")
    b.add_argument("--n-heads", type=int, default=None, help="heads (default: the preset's)")
    b.add_argument("--max-len", type=int, default=None, help="window length (bank sequence steps)")
    b.add_argument(
        "--seed", type=int, default=None, help="split seed (as in the training run; default 0)"
    )
    b.add_argument("--fold", type=int, default=None, help="fold of the split (as in training)")
    b.add_argument("--name", default=None, help="dataset name (default: the bundle's)")
    b.add_argument("--num-students", type=int, default=None, help="synthetic: students")
    b.add_argument("--seq-len", type=int, default=None, help="synthetic: steps per student")
    return p


def build(args: argparse.Namespace) -> Path:
    """Build and save the banks; returns the path written (without suffix)."""
    fmt = "synthetic" if args.data_dir is None and args.data_format == "auto" else args.data_format
    given = {"num_students": args.num_students, "seq_len": args.seq_len}
    kw = {k: v for k, v in given.items() if v is not None}
    if kw and fmt != "synthetic":  # read by the simulator only: refused, not ignored
        flags = ", ".join(f"--{k.replace('_', '-')}" for k in kw)
        raise SystemExit(f"{flags}: simulator settings; this build reads {fmt} data")
    sizes = {"d": args.d, "n_heads": args.n_heads, "max_len": args.max_len}
    sizes = {k: v for k, v in sizes.items() if v is not None}
    for k, v in {**kw, **sizes}.items():
        if v < 1:
            raise SystemExit(f"--{k.replace('_', '-')} {v}: must be >= 1")
    seed = 0 if args.seed is None else args.seed
    bundle = load_bundle(args.data_dir, fmt, fold=args.fold, seed=seed, **kw)
    if args.seed is not None and not bundle.seeded:  # refused, not ignored
        raise SystemExit(
            f"--seed {args.seed}: this split is fixed by the files ({bundle.protocol}); no seed "
            "changes it"
        )
    changes = {}
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"--set takes KEY=VALUE, got {item!r}")
        try:
            changes[key.strip()] = yaml.safe_load(value)
        except yaml.YAMLError as exc:
            raise SystemExit(f"--set {item!r}: the value is not YAML ({exc})") from None
    similarity = load_simakt_config(args.similarity).with_settings(**changes)
    model = build_model(
        "simakt", dataset=bundle.train, preset=args.preset, similarity=similarity, **sizes
    )
    sim = model.similarity
    if model.inter is None or not model.inter.bank_heads:
        raise SystemExit(
            f"{args.similarity}: no active inter-student head reads a bank (none, or every "
            "influence_weight is 0): nothing to build"
        )
    if sim.memory.encoder != "heuristic":
        raise SystemExit(
            f"{args.similarity}: encoder {sim.memory.encoder!r} banks depend on the model's "
            "weights; only the heuristic encoder's banks can be prebuilt"
        )
    name = args.name or dataset_name(bundle.train)
    path = bank_file(args.out, name)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("default", UserWarning)
        model.apply_influence_rule(len(bundle.train))
        model.build_banks(bundle.train)
    model.save_banks(path, bundle.train)
    print(bundle.protocol)
    print(f"{len(bundle.train)} training students -> {path.with_suffix('.pt')}")
    print(model.bank_stats().to_string(index=False))
    return path


def main(argv: list[str] | None = None) -> Path:
    args = _parser().parse_args(argv)
    return build(args)


if __name__ == "__main__":
    main()
