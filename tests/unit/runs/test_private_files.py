"""What hyperlaunch writes that can carry `--env` values or the environment is private to the
user, whatever the umask: job records and scripts, submitit's submission files and folders,
`render -o`. A submission that fails in any way leaves no copy of the script behind."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from hyperlaunch.core.errors import SlurmError
from hyperlaunch.runs import jobs
from hyperlaunch.slurm import runner as slurm_runner
from hyperlaunch.slurm import submission as slurm_submission
from tests.support.cli_runner import run_cli

SECRET = "hf_private-value-0600"


@pytest.fixture(autouse=True)
def _open_umask() -> Iterator[None]:
    """The usual login-node umask, under which files would be world-readable."""
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def _fake_sbatch(directory: Path, body: str = 'echo "Submitted batch job 6262"\n') -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    script = directory / "sbatch"
    script.write_text("#!/bin/sh\n" + body)
    script.chmod(0o755)
    return directory


def _submit(tmp_path: Path, stub: Path, monkeypatch: pytest.MonkeyPatch, *extra: str):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PATH", f"{stub}:{os.environ['PATH']}")
    (tmp_path / "slurm.conf").touch()
    monkeypatch.setenv("SLURM_CONF", str(tmp_path / "slurm.conf"))
    return run_cli(["submit", "-m", "qwen3_tiny", "--env", f"HF_TOKEN={SECRET}", *extra], monkeypatch)


def _assert_private(root: Path) -> list[Path]:
    """Every file under `root` is 0600 and every folder 0700; returns the files holding SECRET."""
    holding = []
    assert _mode(root) == 0o700, root
    for path in root.rglob("*"):
        if path.is_symlink():
            continue
        if path.is_dir():
            assert _mode(path) == 0o700, f"{path} is {oct(_mode(path))}"
        else:
            assert _mode(path) == 0o600, f"{path} is {oct(_mode(path))}"
            if SECRET.encode() in path.read_bytes():
                holding.append(path)
    return holding


@pytest.mark.slow
def test_a_submitted_jobs_files_are_private(tmp_path: Path, tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    stub = _fake_sbatch(tmp_path_factory.mktemp("stub"))
    result = _submit(tmp_path, stub, monkeypatch)
    assert result.exit_code == 0, result.output
    holding = _assert_private(jobs.jobs_dir())
    names = sorted(str(path.relative_to(jobs.jobs_dir())) for path in holding)
    assert names == [".submitit/6262_submission.sh", "6262/job.sbatch", "6262/record.json"]
    assert list(jobs.jobs_dir().rglob(".submission_file_*")) == [], "no temporary copy, not even a symlink"


@pytest.mark.slow
def test_folders_an_older_hyperlaunch_left_open_are_closed(tmp_path: Path, tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    (jobs.jobs_dir() / ".submitit").mkdir(parents=True)
    jobs.jobs_dir().chmod(0o755)
    (jobs.jobs_dir() / ".submitit").chmod(0o755)
    stub = _fake_sbatch(tmp_path_factory.mktemp("stub"))
    assert _submit(tmp_path, stub, monkeypatch).exit_code == 0
    _assert_private(jobs.jobs_dir())


def _leftovers(folder: Path) -> list[Path]:
    return [path for path in folder.rglob("*") if path.is_file() or path.is_symlink()] if folder.exists() else []


@pytest.mark.parametrize(
    "sbatch",
    [
        'echo "sbatch: error: invalid partition specified: gpu" >&2\nexit 1\n',  # refused
        "echo 'no job id in this answer'\n",  # accepted, but no id to record
    ],
)
@pytest.mark.slow
def test_a_failed_submission_leaves_no_copy_of_the_script(sbatch: str, tmp_path: Path) -> None:
    env = {"PATH": str(_fake_sbatch(tmp_path / "bin", sbatch))}
    with pytest.raises(SlurmError, match="invalid partition|answered with no job id"):
        slurm_submission.submit_script(f"#!/bin/bash\nexport HF_TOKEN={SECRET}\n", tmp_path / "jobs", env=env)
    assert _leftovers(tmp_path / "jobs") == []


@pytest.mark.slow
def test_an_sbatch_that_cannot_start_leaves_nothing(tmp_path: Path) -> None:
    bin_dir = _fake_sbatch(tmp_path / "bin")
    (bin_dir / "sbatch").write_text("#!/nonexistent/interpreter\n")
    with pytest.raises(SlurmError, match="sbatch could not be run"):
        slurm_submission.submit_script("#!/bin/bash\n", tmp_path / "jobs", env={"PATH": str(bin_dir)})
    assert _leftovers(tmp_path / "jobs") == []


def test_an_interrupted_submission_leaves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def interrupted(*args: object, **kwargs: object) -> slurm_runner.Result:
        raise KeyboardInterrupt

    monkeypatch.setattr(slurm_runner, "run", interrupted)
    with pytest.raises(KeyboardInterrupt):
        slurm_submission.submit_script("#!/bin/bash\n", tmp_path / "jobs", env={"PATH": str(tmp_path)})
    assert _leftovers(tmp_path / "jobs") == []


@pytest.mark.slow
def test_the_submission_file_is_private_while_sbatch_reads_it(tmp_path: Path) -> None:
    seen = tmp_path / "mode"
    bin_dir = _fake_sbatch(tmp_path / "bin", f'stat -c %a "$1" > {seen}\nstat -c %a "$(dirname "$1")" >> {seen}\necho "Submitted batch job 7"\n')
    assert slurm_submission.submit_script("#!/bin/bash\n", tmp_path / "jobs", env={"PATH": f"{bin_dir}:/usr/bin:/bin"}) == "7"
    assert seen.read_text().split() == ["600", "700"]


@pytest.mark.slow
def test_render_output_is_private(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    target = tmp_path / "job.sbatch"
    target.write_text("an older script\n")
    target.chmod(0o644)
    result = run_cli(["render", "-m", "qwen3_tiny", "--env", f"HF_TOKEN={SECRET}", "-o", str(target)], monkeypatch)
    assert result.exit_code == 0, result.output
    assert _mode(target) == 0o600 and SECRET in target.read_text()
    fresh = tmp_path / "new.sbatch"
    assert run_cli(["render", "-m", "qwen3_tiny", "-o", str(fresh)], monkeypatch).exit_code == 0
    assert _mode(fresh) == 0o600

