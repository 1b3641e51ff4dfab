"""The learning-rate schedule (train/optim.py): linear warmup, cosine decay to min_lr."""

from __future__ import annotations

import pytest

from hyperlaunch.train.optim import lr_factor


def test_warmup_rises_linearly_to_the_peak() -> None:
    assert [lr_factor(s, warmup=4, total=20, min_ratio=0.1) for s in range(4)] == [0.25, 0.5, 0.75, 1.0]


def test_cosine_decay_reaches_min_ratio_at_total_and_stays() -> None:
    factors = [lr_factor(s, warmup=4, total=20, min_ratio=0.1) for s in range(4, 30)]
    assert factors[0] == pytest.approx(1.0)
    assert all(a >= b for a, b in zip(factors, factors[1:]))  # noqa: B905  (assertions stay as written)
    assert lr_factor(12, warmup=4, total=20, min_ratio=0.1) == pytest.approx(0.55)  # half way
    assert lr_factor(20, warmup=4, total=20, min_ratio=0.1) == pytest.approx(0.1)
    assert lr_factor(29, warmup=4, total=20, min_ratio=0.1) == pytest.approx(0.1)


def test_no_warmup_starts_at_the_peak() -> None:
    assert lr_factor(0, warmup=0, total=10, min_ratio=0.0) == pytest.approx(1.0)
