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


def test_a_resume_with_a_new_total_runs_its_first_step_on_the_new_schedule() -> None:
    """`resume --max-steps 60` of a run that ended at 40: step 41 ran at the old schedule's LR
    (the optimizer's, from the checkpoint) and step 42 on the new one's, a jump in between."""
    import torch

    from hyperlaunch.train.optim import build_scheduler, follow_schedule

    def trained(total: int, steps: int) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LambdaLR]:
        optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1e-3)
        scheduler = build_scheduler(optimizer, lr=1e-3, min_lr=1e-4, warmup=2, total=total)
        for _ in range(steps):
            optimizer.step()
            scheduler.step()
        return optimizer, scheduler

    old_optimizer, old_scheduler = trained(40, 40)
    same_optimizer, same = trained(40, 0)
    same_optimizer.load_state_dict(old_optimizer.state_dict())
    same.load_state_dict(old_scheduler.state_dict())
    follow_schedule(same)
    assert same.get_last_lr() == old_scheduler.get_last_lr(), "the same schedule: the same LR, to the bit"
    new_optimizer, longer = trained(60, 0)
    new_optimizer.load_state_dict(old_optimizer.state_dict())
    longer.load_state_dict(old_scheduler.state_dict())
    follow_schedule(longer)
    expected = 1e-3 * lr_factor(40, warmup=2, total=60, min_ratio=0.1)
    assert longer.get_last_lr() == [pytest.approx(expected)] and new_optimizer.param_groups[0]["lr"] == pytest.approx(expected)
