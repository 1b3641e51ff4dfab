"""The trainer flags the CLI reads inside a job's verbatim trainer arguments."""

from __future__ import annotations

from hyperlaunch.job import trainer_args as targs


def test_a_value_is_read_in_both_forms_and_the_last_one_wins() -> None:
    assert targs.value_of(("--model-name", "a"), targs.MODEL_NAME) == "a"
    assert targs.value_of(("--model-name=b",), targs.MODEL_NAME) == "b"
    assert targs.value_of(("--model-name", "a", "--model-name=b"), targs.MODEL_NAME) == "b"
    assert targs.value_of(("--model-name",), targs.MODEL_NAME) is None
    assert targs.value_of(("--model-names", "x"), targs.MODEL_NAME) is None


def test_flags_are_removed_with_their_values_in_both_forms() -> None:
    args = ("--lr", "1", "--from-scratch", "--resume-from", "/c/x-5steps", "--resume-from=/y", "--seed", "3")
    assert targs.without(args, targs.RESUME_OVERRIDES) == ("--lr", "1", "--seed", "3")
