"""The one meaning of "inter heads off": the inter-student heads removed from Block 3.

Every inter head at influence weight 0 outputs zeros and builds no bank: Block 3 keeps its intra
heads (same count and width) and W_O reads zeros where the inter heads were. It is not
DTransformer with n_heads intra heads. The `no_inter_student` preset is the 6 + 2 presets'
layout with both heads off, hence their matched baseline.
"""

from __future__ import annotations

import warnings

import pytest
import torch
import yaml

from kt_lib import reports
from kt_lib.audit import random_batch
from kt_lib.heads.simakt_config import load_simakt_config
from kt_lib.models import build_model

SIZES = dict(num_c=10, num_pid=0, d=32, n_heads=8, max_len=16)


def simakt(similarity, seed: int = 0):
    torch.manual_seed(seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "every inter head has influence 0"
        return build_model("simakt", preset="tiny", similarity=similarity, **SIZES).eval()


def batch():
    b = random_batch(SIZES["num_c"], B=3, L=12, seed=1)
    b.uid = torch.arange(3)
    return b


def test_inter_off_is_the_no_inter_student_preset_for_the_6_plus_2_presets():
    off = load_simakt_config("no_inter_student")
    for preset in ("position_weighted_dual", "cluster_only", "knn_only", "dual_modular"):
        mine = load_simakt_config(preset).inter_off()
        assert mine.n_intra(8) == off.n_intra(8) == 6
        assert [h.influence_weight for h in mine.heads] == [0.0, 0.0]
        with torch.no_grad():
            a, b = simakt(mine)(batch()).logits, simakt(off)(batch()).logits
        torch.testing.assert_close(a, b, rtol=0, atol=0)  # same computation, bit for bit


def test_nothing_of_an_off_head_reaches_the_output():
    """Randomising every parameter of the inter heads leaves the logits as they were."""
    model = simakt("no_inter_student")
    with torch.no_grad():
        before = model(batch()).logits
        for p in model.inter.parameters():
            p.normal_()
        after = model(batch()).logits
    torch.testing.assert_close(before, after, rtol=0, atol=0)
    assert model.n_intra == 6 and not model.inter.bank_heads  # no bank is built


def test_inter_off_drops_a_size_rule_and_is_a_setting():
    rule = load_simakt_config(
        {
            "intra_heads": 7,
            "inter_heads": [{"type": "cluster", "n_clusters": 50}],
            "influence_rule": {"large": {"cluster": 2.0}, "small": {"cluster": 0.5}},
        }
    )
    assert rule.influence_rule is not None
    off = rule.inter_off()
    assert off.influence_rule is None and all(h.influence_weight == 0 for h in off.heads)
    base = load_simakt_config({"base": "position_weighted_dual", "inter_weight": 0})
    assert [h.influence_weight for h in base.heads] == [0.0, 0.0]


def test_the_full_profile_pairs_each_simakt_variant_with_its_inter_off_baseline():
    root = reports.ROOT
    full = yaml.safe_load((root / "notebooks" / "params" / "full.yaml").read_text())
    params = reports.notebook_params(full, root / "notebooks" / "10_compare_models.ipynb")
    variants = params["variants"]

    def similarity(label):
        if label == "simakt":
            return load_simakt_config("position_weighted_dual")
        spec = variants.get(label, {})
        return load_simakt_config(spec["similarity"]) if spec.get("model") == "simakt" else None

    simakt_pairs = [(a, b) for a, b in params["pairs"] if similarity(a) is not None]
    on = [(a, b) for a, b in simakt_pairs if any(h.influence_weight for h in similarity(a).heads)]
    assert len(on) >= 4
    for a, b in on:
        mine, theirs = similarity(a).inter_off(), similarity(b)
        assert theirs is not None, (a, b)
        assert theirs.n_intra(8) == mine.n_intra(8), (a, b)
        assert [h.influence_weight for h in theirs.heads] == [0.0] * len(mine.heads), (a, b)


@pytest.mark.parametrize("preset", ["position_weighted_dual", "knn_only"])
def test_an_off_baseline_differs_from_its_variant(preset):
    with torch.no_grad():
        on = simakt(preset)
        on.prepare(_students())
        a = on(batch()).logits
        b = simakt(load_simakt_config(preset).inter_off())(batch()).logits
    assert not torch.equal(a, b)


def _students():
    from kt_lib.data.synthetic import simulate

    return simulate(num_students=300, seq_len=12, num_c=SIZES["num_c"], seed=0).data
