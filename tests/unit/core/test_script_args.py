"""Placeholders in a script job's arguments (hyperlaunch.core.script_args): the job's folders,
its name and the checkpoint to resume from, filled each round; a resume form that vanishes on a
first start; other braces left alone; a typo refused at submit."""

from __future__ import annotations

from hyperlaunch.core.script_args import fill, unknown_placeholder

VALUES = {"checkpoint_dir": "/ck", "run_dir": "/runs/exp", "name": "exp", "nodes": "4", "resume": "/ck/exp-40steps"}


def test_the_job_folders_name_and_resume_path_are_filled_inside_any_argument() -> None:
    args = ["--output_dir", "{checkpoint_dir}/hf", "--log={run_dir}/tb", "--tag", "{name}-{name}", "--from", "{resume}", "--trainer.num_nodes={nodes}"]
    assert fill(args, VALUES) == ["--output_dir", "/ck/hf", "--log=/runs/exp/tb", "--tag", "exp-exp", "--from", "/ck/exp-40steps", "--trainer.num_nodes=4"]


def test_the_resume_form_gives_its_words_where_there_is_a_checkpoint_and_nothing_on_a_first_start() -> None:
    args = ["--lr", "1e-4", "{resume?--resume_from_checkpoint {resume}}", "--seed", "1"]
    assert fill(args, VALUES) == ["--lr", "1e-4", "--resume_from_checkpoint", "/ck/exp-40steps", "--seed", "1"]
    assert fill(args, {**VALUES, "resume": ""}) == ["--lr", "1e-4", "--seed", "1"]


def test_other_braces_and_escaped_names_stay_as_written() -> None:
    args = ['{"lr": {"max": 1}}', "${HOME}/data", "{{checkpoint_dir}}", "{}", "plain"]
    assert fill(args, VALUES) == ['{"lr": {"max": 1}}', "${HOME}/data", "{checkpoint_dir}", "{}", "plain"]
    assert unknown_placeholder(args) is None


def test_a_name_that_is_no_placeholder_is_one_line_with_the_closest_and_the_valid_ones() -> None:
    refused = unknown_placeholder(["--out", "{checkpoint_dri}/hf"])
    assert refused is not None and "\n" not in refused
    assert "{checkpoint_dri} is no placeholder (did you mean {checkpoint_dir}?)" in refused and "{resume?WORDS}" in refused
    assert "did you mean {resume}" in (unknown_placeholder(["{resume?--from {resum}}"]) or "")
    assert unknown_placeholder(["{epochs}"]) is not None
