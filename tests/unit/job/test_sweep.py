"""Sweeps (issue 29): the grid's rules, the array job's script and elements file (golden), the
supervisor finding its element, and `sweep` / `status` / `resume` / `cancel` through the real
CLI with stub sbatch, squeue, sacct and scancel."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from hyperlaunch.core.errors import InvalidInput
from hyperlaunch.job import sweep as rules
from hyperlaunch.job.defaults import job_spec
from hyperlaunch.runs import jobs
from hyperlaunch.script import supervisor_bundle
from hyperlaunch.script.render_sweep import render_sweep
from hyperlaunch.slurm import arrays as slurm_arrays
from hyperlaunch.slurm import runner as slurm_runner
from hyperlaunch.supervisor import sweep_element
from tests.support.cli_runner import one_error_line, run_cli, stub_slurm

GOLDEN = Path(__file__).parents[1] / "golden"
BASE = job_spec(
    model="qwen3_0_6b", nodes=2, instance_type="p5.48xlarge", checkpoint_dir="/fsx/ckpt", log_dir="/fsx/logs",
    run_dir="/fsx/runs/lr sweep", max_steps=1000, tracker=("tensorboard",), trainer_args=("--warmup-steps", "50"), gres_gpus="on",
)


def _sweep(grid: list[str], parallel: int | None = 2) -> rules.Sweep:
    members = rules.elements(rules.parse_grid(grid))
    return rules.Sweep(members, tuple(e.index for e in members), parallel)


def test_a_grid_is_every_combination_first_key_slowest() -> None:
    members = rules.elements(rules.parse_grid(["lr=1e-4,3e-4,1e-3", "seed=1,2"]))
    assert [e.suffix for e in members] == [
        "lr1e-4-seed1", "lr1e-4-seed2", "lr3e-4-seed1", "lr3e-4-seed2", "lr1e-3-seed1", "lr1e-3-seed2",
    ]
    assert [e.index for e in members] == list(range(6))
    assert members[3].flags == ("--lr", "3e-4", "--seed", "2")
    assert rules.element_name(BASE, members[2]) == "qwen3_0_6b-lr3e-4-seed1"


@pytest.mark.parametrize(
    ("grid", "message"),
    [
        (["lr"], "write KEY=V1,V2"),
        (["--lr=1"], "a trainer option's name without its dashes"),
        (["lr=1,", "seed=1"], "lr has an empty value"),
        (["lr=1,1"], "lr lists a value twice"),
        (["lr=1", "lr=2"], "key lr is given twice"),
        (["max-steps=10,20"], "--max-steps is set by hyperlaunch for the whole sweep"),
        (["model-name=a,b"], "--model-name is set by hyperlaunch"),
        ([], "a sweep needs a grid"),
        ([f"a={','.join(map(str, range(40)))}", f"b={','.join(map(str, range(30)))}"], "1,200 elements; a sweep runs at most 1,000"),
    ],
)
def test_a_bad_grid_is_one_line_naming_what_is_valid(grid: list[str], message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        rules.parse_grid(grid)


def test_a_script_job_grids_over_its_own_options() -> None:
    assert rules.parse_grid(["max-steps=1,2"], script_job=True) == (("max-steps", ("1", "2")),)


def test_a_grid_file_is_a_toml_table_of_arrays(tmp_path: Path) -> None:
    path = tmp_path / "sweep.toml"
    path.write_text('[grid]\nlr = ["1e-4", "3e-4"]\nseed = [1, 2]\nwarmup-steps = [100]\n')
    assert rules.read_grid_file(path) == (("lr", ("1e-4", "3e-4")), ("seed", ("1", "2")), ("warmup-steps", ("100",)))
    path.write_text('[grid]\nlr = "1e-4"\n')
    with pytest.raises(InvalidInput, match="lr must be an array"):
        rules.read_grid_file(path)
    path.write_text("[grid\n")
    with pytest.raises(InvalidInput, match="not TOML"):
        rules.read_grid_file(path)
    path.write_text('lr = [1]\n')
    with pytest.raises(InvalidInput, match=r"only a \[grid\] table"):
        rules.read_grid_file(path)


def test_each_element_is_a_job_of_its_own() -> None:
    element = _sweep(["lr=3e-4", "seed=1"]).elements[0]
    spec = rules.element_spec(BASE, element)
    assert spec.derived.checkpoint_name == "qwen3_0_6b-lr3e-4-seed1"
    assert spec.output.run_dir == "/fsx/runs/lr sweep/lr3e-4-seed1" and spec.output.tensorboard_dir == "/fsx/runs/lr sweep/lr3e-4-seed1/tensorboard"
    assert spec.job.trainer_args == ("--warmup-steps", "50", "--lr", "3e-4", "--seed", "1", "--model-name", "qwen3_0_6b-lr3e-4-seed1")
    assert spec.job.job_name == BASE.job.job_name and spec.output.checkpoint_dir == BASE.output.checkpoint_dir
    script = job_spec(**{**BASE.to_flat(), "model": "", "max_steps": None, "trainer_args": (), "checkpoint_name": "", "module": "pkg.train", "name": "exp", "code_dir": "/fsx/code", "code_root": "/src"})
    element_script = rules.element_spec(script, element)
    assert element_script.derived.checkpoint_name == "exp-lr3e-4-seed1" and element_script.job.trainer_args[-4:] == ("--lr", "3e-4", "--seed", "1")


def test_values_a_name_cannot_tell_apart_are_refused() -> None:
    with pytest.raises(InvalidInput, match="would both be named qwen3_0_6b-tagA_B"):
        rules.unique_names(BASE, _sweep(["tag=A/B,A:B"]).elements)


def test_the_array_value_lists_ranges_and_the_parallel_limit() -> None:
    assert rules.array_value(range(6), 2) == "0-5%2"
    assert rules.array_value([1, 3, 4, 5, 9], None) == "1,3-5,9"
    assert slurm_arrays.expand_indices("1,3-5%2") == [1, 3, 4, 5]


@pytest.mark.slow
def test_golden_sweep_script_and_elements_file() -> None:
    rendered = render_sweep(BASE, _sweep(["lr=1e-4,3e-4", "seed=1,2"]))
    files = {"sweep.sbatch": rendered.script, "sweep-elements.json": rendered.elements_text}
    for name, text in files.items():
        # The bundle's name hashes its code, which changes with every line of it (as test_render).
        text = text.replace("0.1.0", "VERSION").replace(supervisor_bundle.bundle_name(), "supervisor-HASH.pyz")
        golden = GOLDEN / name
        if os.environ.get("UPDATE_GOLDEN"):
            golden.write_text(text)
        assert text == golden.read_text(), f"{name} changed; if intended: UPDATE_GOLDEN=1 pytest tests/unit/job/test_sweep.py -k golden"
    assert "#SBATCH --array=0-3%2" in rendered.script
    assert rendered.elements_path.startswith("/fsx/runs/lr sweep/.hyperlaunch/sweep-")
    assert "HYPERLAUNCH_TRACKER_RUN_ID" not in rendered.script, "each element has its own tracker run, in the elements file"
    assert subprocess.run(["bash", "-n"], input=rendered.script, text=True).returncode == 0


def test_the_supervisor_finds_its_element_by_the_array_task(tmp_path: Path) -> None:
    rendered = render_sweep(BASE, _sweep(["lr=1e-4,3e-4", "seed=1,2"]))
    path = tmp_path / "elements.json"
    path.write_text(rendered.elements_text)
    argv, env = sweep_element.resolve([sweep_element.ELEMENTS_FLAG, str(path)], {"SLURM_ARRAY_TASK_ID": "2"})
    split = argv.index("--")
    assert argv[argv.index("--run-dir") + 1] == "/fsx/runs/lr sweep/lr3e-4-seed1"
    assert argv[split + 1:][-6:] == ["--lr", "3e-4", "--seed", "1", "--model-name", "qwen3_0_6b-lr3e-4-seed1"]
    assert env["HYPERLAUNCH_TENSORBOARD_DIR"] == "/fsx/runs/lr sweep/lr3e-4-seed1/tensorboard"
    assert sweep_element.resolve(["--run-dir", "x", "--", "t"], {}) == (["--run-dir", "x", "--", "t"], {})
    with pytest.raises(SystemExit, match="inside a Slurm job array"):
        sweep_element.resolve([sweep_element.ELEMENTS_FLAG, str(path)], {})
    with pytest.raises(SystemExit, match="no readable element 9"):
        sweep_element.resolve([sweep_element.ELEMENTS_FLAG, str(path)], {"SLURM_ARRAY_TASK_ID": "9"})
    path.write_text("{")
    with pytest.raises(SystemExit, match="cannot read the sweep's elements"):
        sweep_element.resolve([sweep_element.ELEMENTS_FLAG, str(path)], {"SLURM_ARRAY_TASK_ID": "0"})


def test_a_sweep_record_keeps_its_elements_and_runs() -> None:
    chosen = _sweep(["lr=1e-4,3e-4"])
    record = jobs.JobRecord(job_id="7", spec=BASE, submitted_at=1.0, sweep=rules.Sweep(chosen.elements, (1,), 2))
    again = jobs.JobRecord.from_json(json.loads(json.dumps(record.to_json())))
    assert again == record and again.sweep is not None and again.sweep.array == "1%2"
    element = again.element(1, "12")
    assert (element.job_id, element.spec.derived.checkpoint_name, element.log_paths[0].name) == ("12", "qwen3_0_6b-lr3e-4", "qwen3_0_6b_12.out")
    broken = record.to_json()
    broken["sweep"]["runs"] = [5]
    with pytest.raises(ValueError, match="indices of its elements"):
        jobs.JobRecord.from_json(broken)


# Stub Slurm: sbatch answers job 70 and keeps the script; squeue and sacct answer from files
# the test writes (_known: a job squeue still lists); scancel records what it was asked; sinfo and scontrol know no cluster.
_STUBS = {
    "sbatch": 'for arg in "$@"; do last=$arg; done\ncp "$last" "$STUB/submitted.sbatch"\necho "Submitted batch job $(cat "$STUB/next_id" 2>/dev/null || echo 70)"\n',
    "squeue": (
        'case "$*" in *" -r "*) cat "$STUB/squeue_r" 2>/dev/null;; *"--me"*) cat "$STUB/queue" 2>/dev/null;;\n'
        # One job's state (-j J --states=all): $STUB/states/J, else none (Slurm has forgotten it).
        '  *"-j "*) job=${*#*-j }; cat "$STUB/states/${job%% *}" 2>/dev/null;; esac\nexit 0\n'
    ),
    "sacct": 'cat "$STUB/sacct.out" 2>/dev/null\nexit 0\n',
    "scancel": 'echo "$*" >> "$STUB/scancel.calls"\n',
    # No cluster to ask about its nodes: the real sinfo and scontrol, where installed, retry
    # a missing slurm.conf for a minute.
    "sinfo": "exit 1\n",
    "scontrol": "exit 1\n",
}


@pytest.fixture()
def stub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = stub_slurm(tmp_path / "stub", {name: "#!/bin/sh\n" + text for name, text in _STUBS.items()}, tmp_path, monkeypatch)
    monkeypatch.setenv("HYPERLAUNCH_HOME", str(tmp_path / "home"))
    return folder


_ARGS = ["sweep", "--model", "qwen3_tiny", "--max-steps", "10", "--grid", "lr=1e-3,3e-3", "--grid", "seed=1,2", "--max-parallel", "2"]


@pytest.mark.slow
def test_sweep_submits_one_array_job_and_records_it(stub: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    result = run_cli([*_ARGS, "--json", "--", "--seq-len", "32"], monkeypatch)
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["job_id"] == "70" and doc["array"] == "0-3%2"
    assert [e["name"] for e in doc["elements"]] == [f"qwen3_tiny-lr{lr}-seed{seed}" for lr in ("1e-3", "3e-3") for seed in (1, 2)]
    assert [e["task"] for e in doc["elements"]] == ["70_0", "70_1", "70_2", "70_3"]
    script = (stub / "submitted.sbatch").read_text()
    assert "#SBATCH --array=0-3%2" in script
    elements_file = script.split("--elements ")[1].strip()
    assert json.loads(Path(elements_file).read_text())["elements"][3]["name"] == "qwen3_tiny-lr3e-3-seed2"
    record = jobs.load("70")
    assert record.sweep is not None and record.sweep.runs == (0, 1, 2, 3)


@pytest.mark.slow
def test_bad_sweep_input_is_one_line_and_submits_nothing(stub: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for args, parts in (
        (["sweep", "--model", "qwen3_tiny", "--grid", "lr=abc,1"], ("sweep element 0", "--lr", "abc")),
        (["sweep", "--model", "qwen3_tiny", "--grid", "lr=1", "--grid-file", "x.toml"], ("--grid and --grid-file",)),
        (["sweep", "--model", "qwen3_tiny", "--grid-file", "missing.toml"], ("missing.toml", "cannot read")),
        (["sweep", "--model", "qwen3_tiny", "--grid", "data=a,b"], ("--data is set by hyperlaunch",)),
    ):
        one_error_line(run_cli(args, monkeypatch), 2, *parts)
    assert not (stub / "submitted.sbatch").exists() and not (tmp_path / "runs").exists() and not (tmp_path / "home" / "jobs" / "70").exists()


@pytest.mark.slow
def test_status_opens_a_sweep_and_resume_resubmits_what_did_not_complete(stub: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert run_cli([*_ARGS, "--", "--seq-len", "32"], monkeypatch).exit_code == 0
    # Elements 0 and 3 completed; 1 was cancelled while it ran; 2 was cancelled before it
    # started, which leaves no trace in Slurm (22.05: in neither sacct nor squeue).
    (stub / "sacct.out").write_text(
        "70_0|71|COMPLETED\n70_1|72|CANCELLED by 0\n70_3|73|COMPLETED\n"
        "71|COMPLETED|node1|2026-01-01T00:00:00|2026-01-01T00:01:00|0:0|60|\n"
    )
    shown = run_cli(["status", "70"], monkeypatch)
    assert shown.exit_code == 0, shown.stderr
    assert "sweep 70: 4 x qwen3_tiny" in shown.stdout and "70_2" in shown.stdout and "qwen3_tiny-lr3e-3-seed1" in shown.stdout
    assert "CANCELLED (before it started)" in shown.stdout.splitlines()[6], shown.stdout
    one_error_line(run_cli(["logs", "70_2"], monkeypatch), 2, "element 70_2 was cancelled before it started", "resume 70")
    doc = json.loads(run_cli(["status", "70", "--json"], monkeypatch).stdout)
    assert doc["sweep"] is True and [e["state"] for e in doc["elements"]] == ["COMPLETED", "CANCELLED", "CANCELLED", "COMPLETED"]
    assert [e["job_id"] for e in doc["elements"]] == ["71", "72", None, "73"]
    listed = run_cli(["status"], monkeypatch).stdout
    assert "qwen3_tiny sweep x4" in listed and listed.count("\n") == 2
    (stub / "next_id").write_text("80")
    resumed = run_cli(["resume", "70", "--json"], monkeypatch)
    assert resumed.exit_code == 0, resumed.stderr
    assert json.loads(resumed.stdout)["array"] == "1-2%2"
    assert "#SBATCH --array=1-2%2" in (stub / "submitted.sbatch").read_text()
    record = jobs.load("80")
    assert record.resumed_from == "70" and record.sweep is not None and record.sweep.runs == (1, 2)
    (stub / "next_id").write_text("81")
    text = run_cli(["resume", "70"], monkeypatch).stdout
    assert "resuming sweep 70 as sweep 81: 2 x" in text and "hyperlaunch logs 81_1 -f" in text, text
    # Resumed since: its hint names where it ran, not a resume that would run it a third time.
    one_error_line(run_cli(["logs", "70_2"], monkeypatch), 2, "element 70_2 was cancelled before it started", "it ran as 81_2")


@pytest.mark.slow
def test_resume_takes_one_element_of_a_sweep(stub: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert run_cli([*_ARGS], monkeypatch).exit_code == 0
    (stub / "sacct.out").write_text("70_0|71|COMPLETED\n70_1|72|FAILED\n70_2|73|COMPLETED\n70_3|74|COMPLETED\n")
    (stub / "next_id").write_text("80")
    resumed = run_cli(["resume", "70_1", "--json"], monkeypatch)
    assert resumed.exit_code == 0, resumed.stderr
    assert json.loads(resumed.stdout)["array"] == "1%2" and "#SBATCH --array=1%2" in (stub / "submitted.sbatch").read_text()
    record = jobs.load("80")
    assert record.resumed_from == "70" and record.sweep is not None and record.sweep.runs == (1,)
    one_error_line(run_cli(["resume", "70_0"], monkeypatch), 2, "element 70_0 completed; nothing to resume", "--max-steps N")
    one_error_line(run_cli(["resume", "70_9"], monkeypatch), 2, "no element 9")
    (stub / "next_id").write_text("81")
    further = run_cli(["resume", "70_0", "--max-steps", "20", "--json"], monkeypatch)
    assert further.exit_code == 0, further.stderr
    assert json.loads(further.stdout)["array"] == "0%2" and jobs.load("81").spec.job.max_steps == 20
    # A new --max-steps trains every completed element further; without it, one that did not complete.
    (stub / "next_id").write_text("82")
    assert json.loads(run_cli(["resume", "70", "--max-steps", "20", "--json"], monkeypatch).stdout)["array"] == "0-3%2"
    (stub / "next_id").write_text("83")
    assert json.loads(run_cli(["resume", "70", "--json"], monkeypatch).stdout)["array"] == "1%2"
    (stub / "squeue_r").write_text("70_2|73|RUNNING\n")
    one_error_line(run_cli(["resume", "70_2", "--max-steps", "30"], monkeypatch), 11, "element 70_2 is still in the queue", "cancel 70_2")
    assert json.loads(run_cli(["resume", "70_1", "--json"], monkeypatch).stdout)["array"] == "1%2"  # another element still runs
    # Sweep 80 (resumed from 70) ran element 1 alone: element 0 is 70's.
    (stub / "squeue_r").write_text("")
    one_error_line(run_cli(["resume", "80_0"], monkeypatch), 2, "sweep 80 did not run element 0: it ran 80_1", "resume 70_0")


@pytest.mark.slow
def test_resume_waits_while_an_element_is_in_the_queue(stub: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert run_cli([*_ARGS], monkeypatch).exit_code == 0
    (stub / "squeue_r").write_text("70_2|70|PENDING\n70_3|70|PENDING\n70_0|71|RUNNING\n70_1|72|RUNNING\n")
    one_error_line(run_cli(["resume", "70"], monkeypatch), 11, "70_0, 70_1, 70_2, 70_3", "still has element(s) in the queue")
    (stub / "queue").write_text("70_[2-3%2]|70|PENDING\n70_0|71|RUNNING\n")
    again = run_cli([*_ARGS], monkeypatch)
    one_error_line(again, 11, "element 70_2 (PENDING) already trains qwen3_tiny-lr3e-3-seed1", "cancel 70_2")


@pytest.mark.slow
def test_resume_of_a_cancelled_element_goes_ahead_while_the_others_run(stub: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """70_0 cancelled; 70_1 runs as job 72 and 70_2 as job 70, the array's own id: `resume 70_0`
    was refused as 'job 70 (RUNNING) already trains' 70_0's name, with a hint to cancel the sweep."""
    assert run_cli([*_ARGS], monkeypatch).exit_code == 0
    (stub / "sacct.out").write_text("70_0|71|CANCELLED\n70_1|72|RUNNING\n70_2|70|RUNNING\n70_3|74|COMPLETED\n")
    (stub / "squeue_r").write_text("70_1|72|RUNNING\n70_2|70|RUNNING\n")
    (stub / "queue").write_text("70_1|72|RUNNING\n70_2|70|RUNNING\n")
    (stub / "next_id").write_text("80")
    resumed = run_cli(["resume", "70_0", "--json"], monkeypatch)
    assert resumed.exit_code == 0, resumed.stderr
    assert json.loads(resumed.stdout)["array"] == "0%2"
    # The element that still runs is refused, by its own name and element.
    one_error_line(run_cli(["resume", "70_2"], monkeypatch), 11, "element 70_2 is still in the queue", "cancel 70_2")


@pytest.mark.slow
def test_elements_not_started_say_why_they_wait(stub: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert run_cli([*_ARGS], monkeypatch).exit_code == 0
    (stub / "squeue_r").write_text("70_2|70|PENDING\n70_3|70|PENDING\n70_0|71|RUNNING\n70_1|72|RUNNING\n")
    (stub / "queue").write_text("70_[2-3%2]|70|PENDING|JobArrayTaskLimit\n70_0|71|RUNNING|None\n70_1|72|RUNNING|None\n")
    shown = run_cli(["status", "70"], monkeypatch).stdout
    assert shown.count("PENDING (JobArrayTaskLimit)") == 2, shown
    assert "  pending:    JobArrayTaskLimit (a sweep's element waits for a slot: --max-parallel elements run at once)" in shown
    doc = json.loads(run_cli(["status", "70", "--json"], monkeypatch).stdout)
    assert [e.get("pending_reason") for e in doc["elements"]] == [None, None, "JobArrayTaskLimit", "JobArrayTaskLimit"]


@pytest.mark.slow
def test_cancel_takes_a_sweep_or_one_element(stub: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert run_cli([*_ARGS], monkeypatch).exit_code == 0
    _known(stub, "70_3", "RUNNING")
    _known(stub, "70", "COMPLETED\nRUNNING\nPENDING")  # a line a task
    assert "cancelled element 70_3 of sweep 70; resume it with: hyperlaunch resume 70_3" in run_cli(["cancel", "70_3"], monkeypatch).stdout
    assert "cancelled sweep 70" in run_cli(["cancel", "70"], monkeypatch).stdout
    assert (stub / "scancel.calls").read_text().split() == ["70_3", "70"]
    one_error_line(run_cli(["cancel", "70_9"], monkeypatch), 2, "no element 9")
    # Once every task has ended, scancel would say nothing and exit 0: the truth is said instead.
    (stub / "states" / "70").write_text("COMPLETED\nCANCELLED\n")
    assert run_cli(["cancel", "70"], monkeypatch).stdout == "sweep 70 already ended (COMPLETED): nothing to cancel\n"
    (stub / "states" / "70").unlink()
    assert run_cli(["cancel", "70"], monkeypatch).stdout == "sweep 70 already ended: nothing to cancel\n"
    assert (stub / "scancel.calls").read_text().split() == ["70_3", "70"]


def _known(stub: Path, job: str, state: str = "PENDING") -> None:
    (stub / "states").mkdir(exist_ok=True)
    (stub / "states" / job).write_text(state + "\n")


@pytest.mark.slow
def test_a_sweep_behind_a_job_says_what_it_waits_for_and_why_it_never_runs(stub: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _known(stub, "5", "RUNNING")
    submitted = run_cli([*_ARGS, "--after", "5:ok"], monkeypatch)
    assert submitted.exit_code == 0, submitted.stderr
    assert "#SBATCH --dependency=afterok:5" in (stub / "submitted.sbatch").read_text()
    (stub / "queue").write_text("70_[0-3%2]|70|PENDING\n5|5|RUNNING\n")
    (stub / "squeue_r").write_text("70_[0-3%2]|70|PENDING\n")
    waiting = run_cli(["status", "70"], monkeypatch).stdout
    assert "PENDING (after 5)" in waiting.splitlines()[0] and "waits for:  job 5 (to complete; RUNNING)" in waiting
    assert waiting.count("PENDING (after 5)") == 5, waiting  # the header and each element
    # Job 5 failed; Slurm cancelled the whole array (--kill-on-invalid-dep) before any task ran.
    (stub / "queue").write_text("")
    (stub / "squeue_r").write_text("")
    (stub / "sacct.out").write_text(
        "70_[0-3%2]|70|CANCELLED by 0\n"
        "5|5|FAILED\n"
        "70|CANCELLED by 0|None assigned|None|2026-01-01T00:00:08|0:0|0|\n"
    )
    listed = run_cli(["status"], monkeypatch).stdout
    assert "CANCELLED (never runs: job 5 FAILED)" in listed, listed
    doc = json.loads(run_cli(["status", "70", "--json"], monkeypatch).stdout)
    assert doc["never_runs"] == "job 5 ended FAILED; this one waited for it to complete (--after 5:ok)"
    assert doc["waits_for"] == [{"job": "5", "kind": "ok", "state": "FAILED"}] and doc["state"] == "CANCELLED"
    shown = run_cli(["status", "70"], monkeypatch).stdout
    assert "never runs: job 5 ended FAILED" in shown and shown.count("CANCELLED (never runs: job 5 FAILED)") == 5, shown


@pytest.mark.slow
def test_export_takes_one_element_of_a_sweep(stub: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert run_cli([*_ARGS], monkeypatch).exit_code == 0
    _known(stub, "70")
    (stub / "next_id").write_text("80")  # the export is a job of its own, recorded as such
    queued = run_cli(["export", "70_1", "--slurm", "--after", "70", "--json"], monkeypatch)
    assert queued.exit_code == 0, queued.stderr
    assert "--name qwen3_tiny-lr1e-3-seed2 " in (stub / "submitted.sbatch").read_text()
    assert json.loads(queued.stdout)["log"].endswith("export-qwen3_tiny-lr1e-3-seed2-latest-80.out")
    one_error_line(run_cli(["export", "70"], monkeypatch), 2, "job 70 is a sweep of 4 trainings: export one element, 70_N")
    one_error_line(run_cli(["export", "70_4"], monkeypatch), 2, "no element 4")


@pytest.mark.slow
def test_a_job_behind_a_sweep_never_runs_when_one_element_failed(stub: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert run_cli([*_ARGS], monkeypatch).exit_code == 0
    _known(stub, "70")
    (stub / "next_id").write_text("80")
    behind = run_cli(["submit", "--model", "qwen3_tiny", "--max-steps", "5", "--after", "70:ok", "--checkpoint-dir", "after"], monkeypatch)
    assert behind.exit_code == 0, behind.stderr
    # Element 3 ran under the array's own id and completed; element 1 failed: afterok:70 fails.
    (stub / "sacct.out").write_text(
        "70_0|71|COMPLETED\n70_1|72|FAILED\n70_2|74|COMPLETED\n70_3|70|COMPLETED\n"
        "70|COMPLETED|node1|2026-01-01T00:00:00|2026-01-01T00:01:00|0:0|60|\n"
        "80|CANCELLED by 0|None assigned|None|2026-01-01T00:01:00|0:0|0|\n"
    )
    doc = json.loads(run_cli(["status", "80", "--json"], monkeypatch).stdout)
    assert doc["waits_for"] == [{"job": "70", "kind": "ok", "state": "FAILED"}]
    assert doc["never_runs"] == "job 70 ended FAILED; this one waited for it to complete (--after 70:ok)"


@pytest.mark.slow
def test_plot_takes_one_element_of_a_sweep(stub: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from hyperlaunch.core.metrics_records import METRICS_FILE

    assert run_cli([*_ARGS], monkeypatch).exit_code == 0
    (stub / "sacct.out").write_text("70_0|71|COMPLETED\n71|COMPLETED|node1|2026-01-01T00:00:00|2026-01-01T00:01:00|0:0|60|\n")
    element = jobs.load("70").element(0, "71")
    run_dir = Path(element.spec.output.run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    steps = [{"type": "step", "step": n, "loss": 3.0 - n / 10, "time": 1000.0 + n, "job_id": "71", "restart": 0, "round": 0} for n in (1, 2)]
    (run_dir / METRICS_FILE).write_text("".join(json.dumps(s) + "\n" for s in steps))
    drawn = run_cli(["plot", "70_0", "--json"], monkeypatch)
    assert drawn.exit_code == 0, drawn.stderr
    assert [p["value"] for p in json.loads(drawn.stdout)["loss"]] == [2.9, 2.8]
    one_error_line(run_cli(["plot", "70"], monkeypatch), 2, "job 70 is a sweep", "hyperlaunch plot 70_0")


@pytest.mark.slow
def test_plot_and_status_of_a_resumed_element_go_back_to_the_element_it_resumed(stub: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Sweep 80 resumed element 0 of sweep 70: its element resumes 70_0 (job 71), not sweep 70,
    whose base run folder holds no metrics: plot showed only the resumed steps."""
    from hyperlaunch.core.metrics_records import METRICS_FILE

    assert run_cli([*_ARGS], monkeypatch).exit_code == 0
    (stub / "sacct.out").write_text("70_0|71|CANCELLED\n")
    (stub / "next_id").write_text("80")
    assert run_cli(["resume", "70_0"], monkeypatch).exit_code == 0
    (stub / "sacct.out").write_text(
        "70_0|71|CANCELLED\n80_0|81|COMPLETED\n"
        "71|CANCELLED|node1|2026-01-01T00:00:00|2026-01-01T00:01:00|0:0|60|\n"
        "81|COMPLETED|node1|2026-01-01T00:02:00|2026-01-01T00:03:00|0:0|60|\n"
    )
    element = jobs.load("80").element(0, "81")
    assert element.resumed_from == "70_0"
    run_dir = Path(element.spec.output.run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    steps = [{"type": "step", "step": n, "loss": 3.0 - n / 10, "time": 1000.0 + n, "job_id": job, "restart": 0, "round": 0}
             for n, job in ((1, "71"), (2, "71"), (3, "81"), (4, "81"))]
    (run_dir / METRICS_FILE).write_text("".join(json.dumps(s) + "\n" for s in steps))
    drawn = run_cli(["plot", "80_0", "--json"], monkeypatch)
    assert drawn.exit_code == 0, drawn.stderr
    doc = json.loads(drawn.stdout)
    assert [p["step"] for p in doc["loss"]] == [1, 2, 3, 4] and doc["metrics"] == [str(run_dir / METRICS_FILE)]
    shown = run_cli(["status", "80_0"], monkeypatch).stdout
    assert "  resumes element 70_0" in shown
    assert "\n  element:    80_0 of sweep 80: lr=1e-3, seed=1\n" in shown, "an element's view says whose it is"
    doc = json.loads(run_cli(["status", "80_0", "--json"], monkeypatch).stdout)
    assert (doc["element"], doc["element_values"]) == ("80_0", {"lr": "1e-3", "seed": "1"})
    assert "element_of" not in json.loads((Path(os.environ["HYPERLAUNCH_HOME"]) / "jobs" / "80" / "record.json").read_text())


def _checkpoints(root: Path, name: str, *steps: int) -> None:
    from tests.support.checkpoint_folders import make_checkpoint, point

    for step in steps:
        make_checkpoint(root, name, step)
    point(root, name, f"{name}-{steps[-1]}steps")


@pytest.mark.slow
def test_a_sweep_over_elements_already_trained_says_they_continue(stub: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same grid again in the same folder: each element went on from its old -latest, and
    --max-steps 10 behind step 60 trained nothing, all unsaid."""
    _checkpoints(tmp_path / "checkpoints", "qwen3_tiny-lr1e-3-seed1", 60)
    result = run_cli([*_ARGS, "--dry-run"], monkeypatch)
    assert result.exit_code == 0, result.stderr
    assert f"1 element(s) continue from a checkpoint already in {tmp_path / 'checkpoints'}" in result.stderr
    assert "  0: qwen3_tiny-lr1e-3-seed1-60steps; --max-steps 10 is not past step 60: it trains no further" in result.stderr
    assert "continue from" not in run_cli([*_ARGS, "--dry-run", "--checkpoint-dir", str(tmp_path / "fresh")], monkeypatch).stderr


def _left(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir() if p.is_dir())


@pytest.mark.slow
def test_checkpoints_of_a_sweep_are_its_elements_never_the_base_models(stub: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A new user's `checkpoints 70 --prune 2 --yes` removed qwen3_tiny-10steps (another job's,
    # named as the sweep's base model) and none of the sweep's own.
    assert run_cli([*_ARGS], monkeypatch).exit_code == 0
    root = Path(jobs.load("70").spec.output.checkpoint_dir)
    _checkpoints(root, "qwen3_tiny", 10, 20, 30)
    _checkpoints(root, "qwen3_tiny-lr1e-3-seed1", 10, 20, 30)
    _checkpoints(root, "qwen3_tiny-lr3e-3-seed2", 10, 20)
    pruned = run_cli(["checkpoints", "70", "--prune", "2", "--yes", "--json"], monkeypatch)
    assert pruned.exit_code == 0, pruned.stderr
    assert _left(root) == [
        "qwen3_tiny-10steps", "qwen3_tiny-20steps", "qwen3_tiny-30steps",  # another job's: untouched
        "qwen3_tiny-lr1e-3-seed1-20steps", "qwen3_tiny-lr1e-3-seed1-30steps", "qwen3_tiny-lr3e-3-seed2-10steps", "qwen3_tiny-lr3e-3-seed2-20steps",
    ]
    assert [(m["model"], m["checkpoints"]) for m in json.loads(pruned.stdout)["models"]] == [
        ("qwen3_tiny-lr1e-3-seed1", ["qwen3_tiny-lr1e-3-seed1-10steps"]), ("qwen3_tiny-lr3e-3-seed2", []),
    ]
    listed = json.loads(run_cli(["checkpoints", "70", "--json"], monkeypatch).stdout)
    assert [m["model"] for m in listed["models"]] == [f"qwen3_tiny-lr{lr}-seed{seed}" for lr in ("1e-3", "3e-3") for seed in (1, 2)]
    assert [len(m["checkpoints"]) for m in listed["models"]] == [2, 0, 0, 2]
    shown = run_cli(["checkpoints", "70"], monkeypatch)
    assert "of 2 of the sweep's elements: qwen3_tiny-lr1e-3-seed2, qwen3_tiny-lr3e-3-seed1" in shown.stderr
    assert "qwen3_tiny-lr1e-3-seed1-30steps" in shown.stdout and "qwen3_tiny-30steps" not in shown.stdout
    said = run_cli(["checkpoints", "70", "--prune", "1"], monkeypatch).stdout.splitlines()
    assert [line.split(" (")[0] for line in said] == [
        "qwen3_tiny-lr1e-3-seed1: would remove 1 checkpoint", "qwen3_tiny-lr3e-3-seed2: would remove 1 checkpoint", "pass --yes as well to remove them",
    ]
    assert len(_left(root)) == 7
    one_error_line(run_cli(["checkpoints", "70", "--copy-to", "s3://b/p"], monkeypatch), 2, "job 70 is a sweep", "70_N")


@pytest.mark.slow
def test_checkpoints_of_one_element_by_its_task_or_its_own_job_id(stub: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert run_cli([*_ARGS], monkeypatch).exit_code == 0
    root = Path(jobs.load("70").spec.output.checkpoint_dir)
    _checkpoints(root, "qwen3_tiny", 10, 20)
    _checkpoints(root, "qwen3_tiny-lr1e-3-seed1", 10, 20)
    _checkpoints(root, "qwen3_tiny-lr1e-3-seed2", 10, 20, 30)
    listed = json.loads(run_cli(["checkpoints", "70_0", "--json"], monkeypatch).stdout)
    assert [m["model"] for m in listed["models"]] == ["qwen3_tiny-lr1e-3-seed1"] and len(listed["models"][0]["checkpoints"]) == 2
    pruned = run_cli(["checkpoints", "70_0", "--prune", "1", "--yes", "--json"], monkeypatch)
    assert pruned.exit_code == 0, pruned.stderr
    assert json.loads(pruned.stdout)["checkpoints"] == ["qwen3_tiny-lr1e-3-seed1-10steps"]
    (stub / "sacct.out").write_text("70_0|71|COMPLETED\n70_1|72|COMPLETED\n")
    text = run_cli(["checkpoints", "72", "--prune", "1", "--yes"], monkeypatch).stdout
    assert text.startswith("qwen3_tiny-lr1e-3-seed2: removed 2 checkpoints"), text
    assert _left(root) == ["qwen3_tiny-10steps", "qwen3_tiny-20steps", "qwen3_tiny-lr1e-3-seed1-20steps", "qwen3_tiny-lr1e-3-seed2-30steps"]


@pytest.mark.slow
def test_an_elements_own_job_id_names_the_element(stub: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # `status 70` lists element 70_1 as job 72, and its log is <name>_72.out: `status 72` is it.
    assert run_cli([*_ARGS], monkeypatch).exit_code == 0
    (stub / "sacct.out").write_text("70_0|71|COMPLETED\n70_1|72|RUNNING\n60_0|75|COMPLETED\n")
    as_task = run_cli(["status", "70_1", "--json"], monkeypatch)
    as_job = run_cli(["status", "72", "--json"], monkeypatch)
    assert as_job.exit_code == 0, as_job.stderr
    assert json.loads(as_job.stdout) == json.loads(as_task.stdout) and json.loads(as_job.stdout)["job_id"] == "72"
    log = jobs.load("70").element(1, "72").log_paths[0]
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text("step 1 loss 3.0\n")
    assert run_cli(["logs", "72"], monkeypatch).stdout == "step 1 loss 3.0\n"
    _known(stub, "70_1", "RUNNING")
    assert "cancelled element 70_1 of sweep 70; resume it with: hyperlaunch resume 70_1" in run_cli(["cancel", "72"], monkeypatch).stdout
    assert (stub / "scancel.calls").read_text().split() == ["70_1"]
    one_error_line(run_cli(["status", "99"], monkeypatch), 7, "no recorded job 99")
    one_error_line(run_cli(["status", "75"], monkeypatch), 7, "no recorded job 75: Slurm ran it as task 60_0 of job array 60")
    monkeypatch.setenv("SLURM_CONF", str(tmp_path / "gone.conf"))  # Slurm unreachable: the old answer
    one_error_line(run_cli(["status", "72"], monkeypatch), 7, "no recorded job 72")


def test_an_array_task_is_found_by_its_own_job_id_only(monkeypatch: pytest.MonkeyPatch) -> None:
    # sacct -j 70 lists the array's tasks, one of which may have run under the array's own id.
    answers = {"72": "70_1|72\n", "70": "70_3|70\n70_0|71\n", "5": "5|5\n"}
    monkeypatch.setattr(slurm_runner, "run", lambda args, **_: slurm_runner.Result(tuple(args), 0, answers[args[args.index("-j") + 1]], ""))
    assert [slurm_arrays.array_task_of(job) for job in ("72", "70", "5")] == [("70", 1), None, None]
    monkeypatch.setattr(slurm_runner, "run", lambda args, **_: slurm_runner.Result(tuple(args), 1, "", "sacct: error: no accounting"))
    assert slurm_arrays.array_task_of("72") is None
