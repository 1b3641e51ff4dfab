"""The code snapshot a job runs from: what it holds (git's view of the work tree, or a folder's
files), that it names its content, and that writing it is whole or nothing. Real git, in tmp_path."""

from __future__ import annotations

import json
import os
import subprocess
import threading
from pathlib import Path

import pytest

from hyperlaunch.core.errors import CodeSnapshotTooLarge, InvalidInput
from hyperlaunch.job import code_snapshot as cs

_GIT = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", "-c", "init.defaultBranch=main",
        "-c", "commit.gpgsign=false"]


def git(repo: Path, *args: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    done = subprocess.run([*_GIT, "-C", str(repo), *args], env=env, capture_output=True, text=True, check=True)
    return done.stdout.strip()


def files_of(tree: dict[str, str], root: Path) -> Path:
    for rel, text in tree.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


@pytest.fixture()
def repo(tmp_path: Path) -> Path:
    """A repository with one commit: train.py, a package, .gitignore keeping out data/ and *.pt."""
    root = files_of({"train.py": "print('hi')\n", "pkg/model.py": "X = 1\n", ".gitignore": "data/\n*.pt\n"},
                    tmp_path / "repo")
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "first")
    return root


def paths(snapshot: cs.Snapshot) -> list[str]:
    return [f.path for f in snapshot.files]


@pytest.mark.slow
def test_a_clean_repo_is_its_tracked_files_at_head(repo: Path) -> None:
    snapshot = cs.take(repo)

    assert paths(snapshot) == [".gitignore", "pkg/model.py", "train.py"]
    commit = git(repo, "rev-parse", "HEAD")
    assert (snapshot.commit, snapshot.dirty, snapshot.root) == (commit, False, repo.resolve())
    assert snapshot.describe().startswith(f"git {commit[:8]}, 3 files, ")


@pytest.mark.slow
def test_untracked_files_are_in_ignored_ones_out_and_the_tree_is_dirty(repo: Path) -> None:
    files_of({"new.py": "Y = 2\n", "data/big.bin": "x" * 100, "ckpt.pt": "w", "pkg/model.py": "X = 3\n"}, repo)

    snapshot = cs.take(repo)

    assert paths(snapshot) == [".gitignore", "new.py", "pkg/model.py", "train.py"]
    assert snapshot.dirty is True and snapshot.describe().startswith(f"git {git(repo, 'rev-parse', 'HEAD')[:8]} (dirty), ")


@pytest.mark.slow
def test_a_tracked_file_deleted_in_the_work_tree_is_left_out(repo: Path) -> None:
    (repo / "pkg" / "model.py").unlink()

    assert paths(cs.take(repo)) == [".gitignore", "train.py"]


@pytest.mark.slow
def test_a_script_in_a_subfolder_takes_the_whole_repository(repo: Path) -> None:
    snapshot = cs.take(repo / "pkg")

    assert snapshot.root == repo.resolve() and "train.py" in paths(snapshot)


@pytest.mark.slow
def test_a_repository_without_a_commit_has_none(tmp_path: Path) -> None:
    root = files_of({"train.py": "1\n"}, tmp_path)
    git(root, "init", "-q")

    snapshot = cs.take(root)

    assert (snapshot.commit, snapshot.dirty, paths(snapshot)) == (None, True, ["train.py"])


@pytest.mark.slow
def test_the_users_git_variables_cannot_redirect_git(repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GIT_DIR", str(tmp_path / "elsewhere"))
    monkeypatch.setenv("GIT_WORK_TREE", str(tmp_path))

    snapshot = cs.take(repo)

    assert snapshot.commit is not None and paths(snapshot) == [".gitignore", "pkg/model.py", "train.py"]


@pytest.mark.slow
def test_a_folder_outside_git_is_its_files_less_caches(tmp_path: Path) -> None:
    root = files_of({"train.py": "1\n", "lib/util.py": "2\n", "lib/__pycache__/util.cpython-311.pyc": "b",
                     "old.pyc": "b", ".git/HEAD": "not a repo"}, tmp_path / "code")

    snapshot = cs.take(root)

    assert paths(snapshot) == ["lib/util.py", "train.py"]
    assert (snapshot.commit, snapshot.dirty) == (None, None)
    assert snapshot.describe() == f"folder {root}, 2 files, 4 B, sha256 {snapshot.digest[:8]}"


@pytest.mark.slow
def test_a_jobs_own_files_in_a_run_folder_inside_the_project_are_not_code(tmp_path: Path, repo: Path) -> None:
    """./runs (the default run folder) inside the script's folder: between planning and
    submitting, submit writes the supervisor there, and the snapshot must come out the same."""
    for root in (files_of({"train.py": "1\n"}, tmp_path / "plain"), repo):
        before = cs.take(root)
        files_of({"runs/train/.hyperlaunch/supervisor-1.pyz": "zip", "runs/train/.hyperlaunch/code-1/train.py": "1\n"}, root)
        after = cs.take(root)
        assert after.name == before.name and not any(".hyperlaunch" in path for path in paths(after)), paths(after)


def _job_output(root: Path, checkpoints: str = "checkpoints", logs: str = "logs", run: str = "runs/train") -> list[str]:
    """What a job leaves in its output folders inside the project: a 120 MB checkpoint (sparse),
    its lock and pointer, a log, metrics. The folders, absolute, as the JobSpec holds them."""
    files_of({f"{checkpoints}/.hyperlaunch-lock-train": "1", f"{checkpoints}/train-latest": "train-100steps\n",
              f"{logs}/train_7.out": "step 1\n", f"{run}/metrics.jsonl": "{}\n"}, root)
    (root / checkpoints / "train-100steps").mkdir()
    with open(root / checkpoints / "train-100steps" / "__0_0.distcp", "wb") as out:
        out.truncate(120_000_000)
    return [str(root / checkpoints), str(root / logs), str(root / run)]


@pytest.mark.slow
def test_the_jobs_output_folders_inside_the_project_are_not_code(tmp_path: Path, repo: Path) -> None:
    """./checkpoints, ./logs and ./runs/<job> (the defaults) hold what earlier jobs wrote: left
    out, the next submit's snapshot is the same, under the size limit, and the tree not dirty."""
    for root in (files_of({"train.py": "1\n"}, tmp_path / "plain"), repo):
        before = cs.take(root)
        outputs = _job_output(root)

        after = cs.take(root, outputs=outputs)

        assert after == before, paths(after)
        assert after.dirty is (False if root == repo else None)


@pytest.mark.slow
def test_other_jobs_run_folders_inside_the_project_are_not_code(tmp_path: Path, repo: Path) -> None:
    """./runs/<other job> (a job of another name, or another --run-dir) holds that job's
    metrics and tracker files: left out like this job's own, and the tree not dirty for them.
    A tracked file there stays code."""
    for root in (files_of({"train.py": "1\n"}, tmp_path / "plain"), repo):
        before = cs.take(root)
        files_of({"runs/other/.hyperlaunch/supervisor-1.pyz": "zip", "runs/other/metrics.jsonl": "{}\n",
                  "runs/other/tb/events.out.tfevents.1": "x" * 1000, "exp/b/.hyperlaunch/code-1/train.py": "1\n",
                  "exp/b/wandb/run-1/files/output.log": "log\n"}, root)
        outputs = _job_output(root)
        after = cs.take(root, outputs=outputs)
        assert after == before, paths(after)
        assert after.dirty is (False if root == repo else None)
    files_of({"runs/notes.py": "2\n"}, repo)  # beside run folders, not in one: code
    assert "runs/notes.py" in paths(cs.take(repo, outputs=outputs))
    files_of({"runs/other/keep.py": "3\n"}, repo)
    git(repo, "add", "runs/other/keep.py")
    assert "runs/other/keep.py" in paths(cs.take(repo, outputs=outputs))


@pytest.mark.slow
def test_a_python_environment_inside_the_project_is_not_code(tmp_path: Path, repo: Path) -> None:
    """A .venv (or a conda env) beside the script, not ignored: its packages were copied, and
    a few hundred MB of them made every submit refuse the snapshot as too large."""
    for root in (files_of({"train.py": "1\n"}, tmp_path / "plain"), repo):
        before = cs.take(root)
        files_of({".venv/pyvenv.cfg": "home = /usr/bin\n", ".venv/lib/python3.11/site-packages/torch/__init__.py": "x" * 1000,
                  "envs/c/conda-meta/history": "h\n", "envs/c/lib/python3.11/site-packages/np.py": "y\n"}, root)
        after = cs.take(root)
        assert after == before, paths(after)
    files_of({"tools/pyvenv.cfg.example": "3\n"}, repo)  # only the marker's exact name says venv
    assert "tools/pyvenv.cfg.example" in paths(cs.take(repo))


@pytest.mark.slow
def test_output_folders_are_left_out_whatever_their_names(tmp_path: Path, repo: Path) -> None:
    """The spec's folders, not the default names: and only those, so a ./logs of the user's own
    stays code when the job logs elsewhere."""
    files_of({"logs/parse_logs.py": "2\n"}, repo)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "logs")
    outputs = _job_output(repo, checkpoints="store/ckpt", logs="slurm-out", run="exp/a")
    outputs.append(str(tmp_path / "elsewhere"))  # outside the project: nothing to leave out

    snapshot = cs.take(repo, outputs=outputs)

    assert paths(snapshot) == [".gitignore", "logs/parse_logs.py", "pkg/model.py", "train.py"]
    assert snapshot.dirty is False
    files_of({"exp/notes.py": "3\n"}, repo)  # beside the run folder, not in it: code
    assert "exp/notes.py" in paths(cs.take(repo, outputs=outputs)) and cs.take(repo, outputs=outputs).dirty


@pytest.mark.slow
def test_tracked_code_in_an_output_folder_stays_in_the_snapshot(repo: Path) -> None:
    """git tracks `logs/parse_logs.py`: code the job may import, though the job logs to ./logs
    too. What the job wrote there beside it (untracked) is left out."""
    files_of({"logs/parse_logs.py": "2\n"}, repo)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "logs")
    outputs = _job_output(repo)

    snapshot = cs.take(repo, outputs=outputs)

    assert paths(snapshot) == [".gitignore", "logs/parse_logs.py", "pkg/model.py", "train.py"]
    assert snapshot.dirty is False
    files_of({"logs/parse_logs.py": "3\n"}, repo)  # a tracked file changed there is a change
    assert cs.take(repo, outputs=outputs).dirty is True


@pytest.mark.slow
def test_an_output_folder_that_is_the_project_itself_leaves_it_whole(tmp_path: Path) -> None:
    root = files_of({"train.py": "1\n"}, tmp_path / "code")

    assert paths(cs.take(root, outputs=[str(root), str(tmp_path)])) == ["train.py"]


@pytest.mark.slow
def test_links_inside_the_root_are_copied_as_files_others_left_out(tmp_path: Path) -> None:
    outside = files_of({"secret.txt": "s\n", "dir/a.py": "a\n"}, tmp_path / "outside")
    root = files_of({"train.py": "1\n", "lib/real.py": "2\n"}, tmp_path / "code")
    (root / "inside.py").symlink_to("lib/real.py")
    (root / "out.txt").symlink_to(outside / "secret.txt")
    (root / "outdir").symlink_to(outside / "dir")
    (root / "lib" / "loop").symlink_to(root)
    (root / "dangling").symlink_to(root / "nothing")

    snapshot = cs.take(root)
    path, _ = cs.write(snapshot, tmp_path / "store")

    assert paths(snapshot) == ["inside.py", "lib/real.py", "train.py"]
    copied = path / "inside.py"
    assert not copied.is_symlink() and copied.read_text() == "2\n"


@pytest.mark.slow
def test_a_fifo_is_left_out_without_blocking(tmp_path: Path) -> None:
    root = files_of({"train.py": "1\n"}, tmp_path / "code")
    os.mkfifo(root / "pipe")
    result: list[cs.Snapshot] = []

    worker = threading.Thread(target=lambda: result.append(cs.take(root)), daemon=True)
    worker.start()
    worker.join(timeout=10)

    assert result and paths(result[0]) == ["train.py"]


@pytest.mark.slow
def test_too_large_names_the_largest_files_and_the_flag_in_one_line(tmp_path: Path) -> None:
    root = files_of({"train.py": "1\n"}, tmp_path / "code")
    (root / "data").mkdir()
    for name, mb in (("data/x.bin", 2), ("ckpt.pt", 1)):
        with open(root / name, "wb") as out:
            out.truncate(mb * 1_000_000 + 100_000)

    with pytest.raises(CodeSnapshotTooLarge) as caught:
        cs.take(root, limit_mb=1)

    message = caught.value.one_line()
    assert message == str(caught.value) and "\n" not in message
    assert f"code snapshot of {root} is 3.2 MB, over the 1 MB limit: largest data/x.bin (2.1 MB), ckpt.pt (1.1 MB)" in message
    assert "--code-limit-mb" in message and isinstance(caught.value, InvalidInput)
    assert cs.take(root, limit_mb=4).total_bytes == 3_200_002


@pytest.mark.parametrize("limit_mb", [0, -5])
def test_a_limit_below_one_mb_is_refused(tmp_path: Path, limit_mb: int) -> None:
    with pytest.raises(InvalidInput, match="--code-limit-mb must be at least 1"):
        cs.take(files_of({"a.py": "1"}, tmp_path), limit_mb=limit_mb)


@pytest.mark.slow
def test_a_folder_with_no_files_is_refused(tmp_path: Path) -> None:
    files_of({"__pycache__/a.pyc": "b"}, tmp_path)

    with pytest.raises(InvalidInput, match="no files to copy"):
        cs.take(tmp_path)


@pytest.mark.slow
def test_the_digest_names_the_content_path_and_executable_bit(tmp_path: Path) -> None:
    root = files_of({"train.py": "print(1)\n", "run.sh": "echo\n"}, tmp_path)
    first = cs.take(root)
    assert cs.take(root) == first

    (root / "train.py").write_text("print(2)\n")
    edited = cs.take(root)
    (root / "run.sh").chmod(0o755)
    executable = cs.take(root)
    (root / "run.sh").rename(root / "run2.sh")
    renamed = cs.take(root)

    assert len({first.name, edited.name, executable.name, renamed.name}) == 4
    assert first.name == f"code-{first.digest[:16]}" and len(first.digest) == 64


@pytest.mark.slow
def test_write_copies_once_with_modes_and_info(tmp_path: Path) -> None:
    root = files_of({"train.py": "1\n", "bin/run.sh": "echo\n"}, tmp_path / "code")
    (root / "bin" / "run.sh").chmod(0o775)
    (root / "train.py").chmod(0o600)
    snapshot = cs.take(root)
    store = tmp_path / "store"

    path, created = cs.write(snapshot, store)
    again, created_again = cs.write(cs.take(root), store)

    assert (created, created_again, again) == (True, False, store / snapshot.name)
    assert (path / "train.py").stat().st_mode & 0o777 == 0o644
    assert (path / "bin" / "run.sh").stat().st_mode & 0o777 == 0o755
    assert (path / "bin").stat().st_mode & 0o777 == 0o755 and path.stat().st_mode & 0o777 == 0o755
    info = cs.read_info(path)
    assert info is not None and info["digest"] == snapshot.digest and info["files"] == 2
    assert (info["commit"], info["dirty"], info["root"], info["total_bytes"]) == (None, None, str(root), 7)
    assert sorted(os.listdir(store)) == [snapshot.name]


@pytest.mark.slow
def test_a_rename_that_loses_the_race_returns_the_winners_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    snapshot = cs.take(files_of({"train.py": "1\n"}, tmp_path / "code"))
    store = tmp_path / "store"
    rename = os.rename

    def other_process_first(src: str, dst: str) -> None:
        monkeypatch.setattr(os, "rename", rename)
        cs.write(snapshot, store)  # the other submit
        rename(src, dst)

    monkeypatch.setattr(os, "rename", other_process_first)

    assert cs.write(snapshot, store) == (store / snapshot.name, False)
    assert os.listdir(store) == [snapshot.name]


@pytest.mark.parametrize("error", [OSError(28, "No space left on device"), RuntimeError("boom")])
@pytest.mark.slow
def test_a_failed_write_leaves_nothing_behind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, error: Exception) -> None:
    snapshot = cs.take(files_of({"a.py": "1\n", "b.py": "2\n"}, tmp_path / "code"))
    store = tmp_path / "store"
    calls = []

    def fail_second(fd: int, mode: int) -> None:
        calls.append(fd)
        if len(calls) == 2:
            raise error

    monkeypatch.setattr(os, "fchmod", fail_second)

    with pytest.raises(InvalidInput if isinstance(error, OSError) else RuntimeError) as caught:
        cs.write(snapshot, store)

    assert os.listdir(store) == []
    if isinstance(error, OSError):
        assert "No space left on device" in str(caught.value) and "\n" not in str(caught.value)


@pytest.mark.slow
def test_code_changed_between_take_and_write_is_refused(tmp_path: Path) -> None:
    root = files_of({"train.py": "print(1)\n", "b.py": "2\n"}, tmp_path / "code")
    snapshot = cs.take(root)
    (root / "train.py").write_text("print(2)\n")

    with pytest.raises(InvalidInput, match="changed while it was copied; submit again"):
        cs.write(snapshot, tmp_path / "store")
    (root / "train.py").unlink()
    with pytest.raises(InvalidInput, match="changed while it was copied"):
        cs.write(snapshot, tmp_path / "store")

    assert os.listdir(tmp_path / "store") == []


def test_read_info_is_none_for_anything_but_a_json_object(tmp_path: Path) -> None:
    assert cs.read_info(tmp_path) is None
    (tmp_path / cs.INFO_FILE).write_text("[1, 2]")
    assert cs.read_info(tmp_path) is None
    (tmp_path / cs.INFO_FILE).write_text("{not json")
    assert cs.read_info(tmp_path) is None
    (tmp_path / cs.INFO_FILE).write_text(json.dumps({"digest": "d"}) + " " * 1_000_001)
    assert cs.read_info(tmp_path) is None
    (tmp_path / cs.INFO_FILE).write_text(json.dumps({"digest": "d"}))
    assert cs.read_info(tmp_path) == {"digest": "d"}


@pytest.mark.slow
def test_a_folder_of_more_files_than_a_project_holds_is_refused_before_it_is_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cs, "MAX_FILES", 3)
    for name in "abcd":
        (tmp_path / f"{name}.py").write_text("x\n")
    with pytest.raises(CodeSnapshotTooLarge) as caught:
        cs.take(tmp_path)
    assert "would hold over 3 files" in str(caught.value) and "\n" not in str(caught.value)
    (tmp_path / "d.py").unlink()
    assert len(cs.take(tmp_path).files) == 3
