"""A preparation shared by several nodes (hyperlaunch.data.prepare: plan_shares, prepare_share,
finish_shares): the shares together give the very folder one prepare-data gives, a share that
did not run leaves no manifest and is named, and running the steps again continues."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from hyperlaunch.core.errors import DataError, InvalidInput
from hyperlaunch.data import prepared_data as fmt
from hyperlaunch.data.prepare import finish_shares, plan_shares, prepare, prepare_share
from hyperlaunch.data.tokenizer import LoadedTokenizer, load_tokenizer
from tests.support.token_corpus import _docs, _stream, _write_jsonl


@pytest.fixture(scope="module")
def offline() -> LoadedTokenizer:
    return load_tokenizer("offline")


def _inputs(tmp_path: Path) -> list[Path]:
    docs = _docs(400, seed=3)
    (tmp_path / "in").mkdir()
    return [_write_jsonl(tmp_path / "in" / "a.jsonl", docs[:250]), _write_jsonl(tmp_path / "in" / "b.jsonl", docs[250:])]


def test_three_shares_make_the_folder_one_process_makes(tmp_path: Path, offline: LoadedTokenizer) -> None:
    inputs = _inputs(tmp_path)
    alone = prepare(inputs, tmp_path / "alone", offline, workers=1, shard_mb=0.002)
    out = tmp_path / "shared"
    assert plan_shares(inputs, out, offline, workers=1, shard_mb=0.002) is None
    assert fmt.is_unfinished(out)
    results = [prepare_share(out, offline, share=i, shares=3, workers=1) for i in range(3)]
    assert sum(r.units for r in results) == len(alone.manifest.shards) and all(r.units for r in results)
    assert sum(r.tokens for r in results) == alone.manifest.tokens
    finished = finish_shares(out, offline)
    assert finished.status == "prepared" and finished.manifest.tokens == alone.manifest.tokens
    assert _stream(out) == _stream(tmp_path / "alone")
    assert [s.sha256 for s in finished.manifest.shards] == [s.sha256 for s in alone.manifest.shards]
    assert sorted(p.name for p in out.iterdir() if not p.name.startswith(("tokens-", "docs-"))) == [".lock", "manifest.json"]
    # Every step again: nothing to do, the folder as it was.
    assert plan_shares(inputs, out, offline, workers=1, shard_mb=0.002).status == "already prepared"  # type: ignore[union-attr]
    assert prepare_share(out, offline, share=1, shares=3).units == 0
    assert finish_shares(out, offline).status == "already prepared"


def test_a_share_that_did_not_run_is_named_and_the_same_steps_again_finish(tmp_path: Path, offline: LoadedTokenizer) -> None:
    inputs = _inputs(tmp_path)
    out = tmp_path / "shared"
    plan_shares(inputs, out, offline, workers=1, shard_mb=0.002)
    prepare_share(out, offline, share=0, shares=2, workers=1)
    with pytest.raises(DataError, match=r"units in .* have no finished shard \(units 1, 3, 5"):
        finish_shares(out, offline)
    assert not fmt.is_prepared(out)
    # The job submitted again: the plan is read back, share 0 has nothing left, share 1 runs.
    assert plan_shares(inputs, out, offline, workers=1, shard_mb=0.002) is None
    assert prepare_share(out, offline, share=0, shares=2, workers=1).units == 0
    assert prepare_share(out, offline, share=1, shares=2, workers=1).units > 0
    assert finish_shares(out, offline).manifest.tokens == prepare(inputs, tmp_path / "alone", offline, workers=1, shard_mb=0.002).manifest.tokens


@pytest.mark.slow
def test_the_steps_refuse_what_they_cannot_do_in_one_line(tmp_path: Path, offline: LoadedTokenizer) -> None:
    inputs = _inputs(tmp_path)
    with pytest.raises(DataError, match="has no plan"):
        prepare_share(tmp_path / "never-planned", offline, share=0, shares=2)
    with pytest.raises(DataError, match="has no plan"):
        finish_shares(tmp_path / "never-planned", offline)
    assert not (tmp_path / "never-planned").exists()
    with pytest.raises(InvalidInput, match="expected 0 <= share < shares"):
        prepare_share(tmp_path, offline, share=2, shares=2)
    out = tmp_path / "shared"
    plan_shares(inputs, out, offline, workers=1, shard_mb=0.002)
    with fmt.locked(out, wait=False, shared=True):  # a node at work on its share
        assert _in_another_process("prepare_share(out, tok, share=1, shares=2, workers=1)", out) == ""
        for step in ("finish_shares(out, tok)", "prepare([], out, tok)"):
            assert "another process is preparing data into" in _in_another_process(step, out)
    with fmt.locked(out, wait=False):  # a plain prepare-data into the same folder
        assert "another process is preparing data into" in _in_another_process("prepare_share(out, tok, share=0, shares=2)", out)


def _in_another_process(call: str, out: Path) -> str:
    """`call` in a child process (fcntl locks are per process): its DataError, or ''."""
    code = (
        "import sys; from pathlib import Path\n"
        "from hyperlaunch.data.prepare import finish_shares, prepare, prepare_share\n"
        "from hyperlaunch.data.tokenizer import load_tokenizer\n"
        "from hyperlaunch.core.errors import DataError\n"
        f"out, tok = Path({str(out)!r}), load_tokenizer('offline')\n"
        "try:\n"
        f"    {call}\n"
        "except DataError as err:\n"
        "    print(err)\n"
    )
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
