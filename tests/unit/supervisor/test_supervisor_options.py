"""The supervisor's command line, declared once (hyperlaunch.core.supervisor_options): what the
batch script writes, the supervisor reads back as the same value, word for word, and the reader
keeps its defaults and its errors."""

from __future__ import annotations

import shlex

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hyperlaunch.core.supervisor_options import HYPERPOD_MODES, SupervisorOptions
from hyperlaunch.job.defaults import job_spec
from hyperlaunch.job.spec import JobSpec
from hyperlaunch.script.render import render_sbatch, supervisor_options

PATHS = {"checkpoint_dir": "/fsx/checkpoints", "log_dir": "/fsx/logs", "run_dir": "/fsx/runs/demo/"}

# A value argparse reads as a value: a word that starts with `-` would read as a flag (the
# batch script never writes one: srun's flags take the `--srun-flag=` form).
_value = st.text(min_size=1).filter(lambda word: not word.startswith("-"))
_node = _value.filter(lambda word: "," not in word)


@st.composite
def _options(draw: st.DrawFn) -> SupervisorOptions:
    return SupervisorOptions(
        run_dir=draw(_value),
        checkpoint_dir=draw(_value),
        checkpoint_lock=draw(_value),
        max_restarts=draw(st.integers(-3, 2**31)),
        launch_command=tuple(draw(st.lists(st.text(), min_size=1, max_size=4))),
        restarts_in_allocation=draw(st.integers(-3, 50)),
        spare_nodes=draw(st.integers(-3, 50)),
        exclude=tuple(draw(st.lists(_node, max_size=3))),
        hyperpod=draw(st.sampled_from(HYPERPOD_MODES)),
        hyperpod_dir=draw(st.just("") | _value),
        nccl_check=draw(st.booleans()),
        require_efa=draw(st.booleans()),
        script_name=draw(st.just("") | _value),
        srun_flags=tuple(draw(st.lists(st.text(), max_size=4))),
        keepers=draw(st.integers(0, 16)),
        snapshot_every=draw(st.integers(0, 1000)),
    )


@given(_options())
def test_what_the_script_writes_the_supervisor_reads_back_word_for_word(options: SupervisorOptions) -> None:
    argv = options.argv()
    read = SupervisorOptions.from_argv(argv)
    assert read == options
    assert read.argv() == argv
    assert [word for line in options.lines() for word in line] == argv[: argv.index("--")]


@pytest.mark.parametrize(
    "spec",
    [
        job_spec(model="qwen3_tiny", torchrun="torchrun", **PATHS),
        job_spec(
            model="qwen3_0_6b", nodes=2, spare_nodes=1, instance_type="p5.48xlarge", gres_gpus="on", hyperpod="auto",
            require_efa=True, exclude=("node4", "node 5"), max_restarts=7, restarts_in_allocation=3, **PATHS,
        ),
        job_spec(
            script="/home/me/proj/train/main.py", name="exp1", nodes=2, code_root="/home/me/proj",
            code_dir="/fsx/runs/demo/.hyperlaunch/code-0123456789abcdef", trainer_args=("--lr", "3e-4"), torchrun="torchrun", **PATHS,
        ),
    ],
)
def test_the_rendered_script_runs_the_supervisor_with_the_specs_options(spec: JobSpec) -> None:
    script = render_sbatch(spec)
    command = script[script.index("exec ") :].replace("\\\n", " ")
    words = shlex.split(command)
    assert SupervisorOptions.from_argv(words[3:]) == supervisor_options(spec)


_REQUIRED = ["--run-dir", "/r/", "--checkpoint-dir", "/c", "--checkpoint-lock", "/c/lock", "--max-restarts", "2"]


def test_the_reader_keeps_its_defaults() -> None:
    read = SupervisorOptions.from_argv([*_REQUIRED, "--", "torchrun", "--", "x"])
    assert read == SupervisorOptions(
        run_dir="/r", checkpoint_dir="/c", checkpoint_lock="/c/lock", max_restarts=2, launch_command=("torchrun", "--", "x"),
        restarts_in_allocation=0, spare_nodes=0, exclude=(), hyperpod="off", hyperpod_dir="", nccl_check=False,
        require_efa=False, script_name="", srun_flags=(),
    )
    assert SupervisorOptions.from_argv(["--run-dir", "///", *_REQUIRED[2:], "--", "t"]).run_dir == "/"
    read = SupervisorOptions.from_argv([*_REQUIRED, "--require-efa", "--exclude", "a,,b", "--srun-flag=--label", "--", "t"])
    assert (read.nccl_check, read.require_efa, read.exclude, read.srun_flags) == (True, True, ("a", "b"), ("--label",))


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (_REQUIRED, "hyperlaunch supervisor: no launch command: pass it after --"),
        ([*_REQUIRED, "--"], "hyperlaunch supervisor: the launch command after -- is empty"),
    ],
)
def test_the_reader_says_what_is_missing(argv: list[str], message: str) -> None:
    with pytest.raises(SystemExit, match=message):
        SupervisorOptions.from_argv(argv)


def test_the_reader_refuses_what_argparse_refuses(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in ([*_REQUIRED, "--hyperpod", "maybe", "--", "t"], [*_REQUIRED[2:], "--", "t"]):
        with pytest.raises(SystemExit) as stopped:
            SupervisorOptions.from_argv(argv)
        assert stopped.value.code == 2
    assert "hyperlaunch-supervisor: error: the following arguments are required: --run-dir" in capsys.readouterr().err


def test_a_job_that_snapshots_into_memory_runs_a_keeper_on_each_node_and_tells_its_trainer() -> None:
    from hyperlaunch.script.render import trainer_argv

    spec = job_spec(model="qwen3_tiny", nodes=2, torchrun="torchrun", memory_checkpoint_every=5, **PATHS)
    options = supervisor_options(spec)
    assert (options.keepers, options.snapshot_every) == (spec.procs_per_node, 5)
    assert ("--keepers", str(spec.procs_per_node)) in options.lines() and ("--snapshot-every", "5") in options.lines()
    assert trainer_argv(spec)[-2:] == ["--memory-checkpoint-every", "5"]
    off = job_spec(model="qwen3_tiny", torchrun="torchrun", **PATHS)
    assert (supervisor_options(off).keepers, supervisor_options(off).snapshot_every) == (0, 0)
    assert "--memory-checkpoint-every" not in trainer_argv(off)


def test_a_script_job_that_snapshots_into_memory_runs_keepers_and_its_arguments_stay_its_own() -> None:
    spec = job_spec(module="mypkg.train", nodes=2, torchrun="torchrun", memory_checkpoint_every=3, trainer_args=("--steps", "9"), **PATHS)
    options = supervisor_options(spec)
    assert (options.keepers, options.snapshot_every) == (spec.procs_per_node, 3)
    assert "--memory-checkpoint-every" not in options.launch_command
