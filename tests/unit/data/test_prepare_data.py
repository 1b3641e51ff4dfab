"""`hyperlaunch prepare-data` and hyperlaunch.data.prepare: every input format becomes the token
stream the tokenizer gives, with document boundaries and a manifest; a killed run continues
to the same result; a finished folder is never rewritten silently."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from hyperlaunch.core.errors import DataError
from hyperlaunch.data import prepared_data as fmt
from hyperlaunch.data import sources as data_sources
from hyperlaunch.data.prepare import prepare
from hyperlaunch.data.tokenizer import LoadedTokenizer, load_tokenizer
from tests.support.cli_runner import run_cli
from tests.support.token_corpus import _docs, _stream, _write_jsonl

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def offline() -> LoadedTokenizer:
    return load_tokenizer("offline")



def _expected(tokenizer: LoadedTokenizer, docs: list[str]) -> list[int]:
    return [t for ids in tokenizer.encode_batch(docs) for t in [*ids, tokenizer.eos_id]]


def test_prepare_writes_the_token_stream_boundaries_and_a_manifest(tmp_path: Path, offline: LoadedTokenizer) -> None:
    docs = _docs(300)
    jsonl = _write_jsonl(tmp_path / "a.jsonl", docs[:100])
    folder = tmp_path / "more"
    folder.mkdir()
    (folder / "b.txt").write_text("\n\n".join(docs[100:200]) + "\n")  # blank lines separate documents
    (folder / "c.txt").write_text("\n".join(docs[200:]) + "\n")  # none: one document per line
    (folder / ".hidden.txt").write_text("not read")
    result = prepare([jsonl, folder], tmp_path / "out", offline, workers=1, shard_mb=0.002)
    tokens, ends = _stream(tmp_path / "out")
    assert tokens == _expected(offline, docs)
    lengths = [len(ids) + 1 for ids in offline.encode_batch(docs)]
    assert ends == list(np.cumsum(lengths))
    m = result.manifest
    assert (result.status, m.tokens, m.documents, m.dtype, m.eos_id) == ("prepared", len(tokens), 300, "uint16", offline.eos_id)
    assert m.max_token_id == max(tokens) and len(m.shards) > 3
    assert m.tokenizer == offline.identity and m.tokenizer["name"] == "offline"
    assert [Path(s["path"]).name for s in m.sources] == ["a.jsonl", "b.txt", "c.txt"]
    stat = jsonl.stat()
    assert (m.sources[0]["size"], m.sources[0]["mtime_ns"]) == (stat.st_size, stat.st_mtime_ns)
    for shard in m.shards:
        assert hashlib.sha256((tmp_path / "out" / shard.tokens_file).read_bytes()).hexdigest() == shard.sha256
    assert sorted(p.name for p in (tmp_path / "out").iterdir() if not p.name.startswith(("tokens-", "docs-"))) == [
        ".lock", "manifest.json"
    ], "no plan or shard markers left once finished"


def test_parquet_and_save_to_disk_inputs(tmp_path: Path, offline: LoadedTokenizer) -> None:
    datasets = pytest.importorskip("datasets")
    pq = pytest.importorskip("pyarrow.parquet")
    import pyarrow as pa

    docs = _docs(120, seed=1)
    pq.write_table(pa.table({"body": docs[:60], "n": list(range(60))}), tmp_path / "a.parquet", row_group_size=7)
    datasets.DatasetDict({"train": datasets.Dataset.from_dict({"body": docs[60:]})}).save_to_disk(str(tmp_path / "ds"))
    prepare([tmp_path / "a.parquet", tmp_path / "ds"], tmp_path / "out", offline, text_field="body", workers=1, shard_mb=0.0005)
    assert _stream(tmp_path / "out")[0] == _expected(offline, docs)
    with pytest.raises(DataError, match=r"no column 'text' \(see --text-field\); columns: body, n"):
        prepare([tmp_path / "a.parquet"], tmp_path / "out2", offline)


def test_without_pyarrow_a_parquet_input_is_one_line_naming_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, offline: LoadedTokenizer
) -> None:
    (tmp_path / "a.parquet").write_bytes(b"PAR1")
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    monkeypatch.setattr(data_sources, "_OPENED", {})
    result = run_cli(["prepare-data", str(tmp_path / "a.parquet"), "--tokenizer", "offline", "-o", str(tmp_path / "o")], monkeypatch)
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [
        f"hyperlaunch: error: {tmp_path / 'a.parquet'} is a .parquet file, but pyarrow is not installed "
        "(pip install 'hyperlaunch[data]')"
    ]


def test_the_result_does_not_depend_on_the_number_of_workers(tmp_path: Path, offline: LoadedTokenizer) -> None:
    jsonl = _write_jsonl(tmp_path / "a.jsonl", _docs(400, seed=2))
    one = prepare([jsonl], tmp_path / "one", offline, workers=1, shard_mb=0.004)
    two = prepare([jsonl], tmp_path / "two", offline, workers=2, shard_mb=0.004)  # two spawned processes
    assert _stream(tmp_path / "one") == _stream(tmp_path / "two")
    assert [s.sha256 for s in one.manifest.shards] == [s.sha256 for s in two.manifest.shards]


def test_a_large_vocabulary_is_stored_as_uint32(tmp_path: Path) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = [f"w{i}" for i in range(70_000)]
    backend = Tokenizer(models.WordLevel({"<eos>": 0, "<unk>": 1, **{w: i + 2 for i, w in enumerate(words)}}, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="<eos>", unk_token="<unk>").save_pretrained(str(tmp_path / "tok"))
    tokenizer = load_tokenizer(str(tmp_path / "tok"))
    assert tokenizer.vocab_size == 70_002 and tokenizer.name == str(tmp_path / "tok")
    (tmp_path / "a.txt").write_text("w0 w69999\nw5\n")
    result = prepare([tmp_path / "a.txt"], tmp_path / "out", tokenizer, workers=1)
    assert result.manifest.dtype == "uint32" and result.manifest.max_token_id == 70_001
    assert _stream(tmp_path / "out")[0] == [2, 70_001, 0, 7, 0]


def test_a_finished_folder_is_never_rewritten_silently(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    jsonl = _write_jsonl(tmp_path / "a.jsonl", _docs(50))
    args = ["prepare-data", str(jsonl), "--tokenizer", "offline", "--output", str(tmp_path / "out"), "--workers", "1"]
    first = run_cli([*args, "--json"], monkeypatch)
    assert first.exit_code == 0, first.stderr
    document = json.loads(first.stdout)  # exactly one JSON document
    assert (document["status"], document["dtype"], document["sources"]) == ("prepared", "uint16", 1)
    manifest = tmp_path / "out" / fmt.MANIFEST_FILE
    written = manifest.stat().st_mtime_ns
    again = run_cli(args, monkeypatch)
    assert again.exit_code == 0 and again.stdout.startswith(f"already prepared: {tmp_path / 'out'} holds"), again.output
    assert manifest.stat().st_mtime_ns == written
    os.utime(jsonl, ns=(time.time_ns(), time.time_ns() + 10**9))  # the same file, changed
    changed = run_cli(args, monkeypatch)
    assert changed.exit_code == 2 and len(changed.stderr.splitlines()) == 1
    assert "already holds data prepared from other sources" in changed.stderr and "--overwrite" in changed.stderr
    assert manifest.stat().st_mtime_ns == written
    replaced = run_cli([*args, "--overwrite", "--json"], monkeypatch)
    assert replaced.exit_code == 0 and json.loads(replaced.stdout)["status"] == "prepared", replaced.stderr
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "todo.md").write_text("mine")
    foreign = run_cli([*args[:-4], "--output", str(tmp_path / "notes"), "--overwrite"], monkeypatch)
    assert foreign.exit_code == 2 and "holds other files (todo.md)" in foreign.stderr
    assert (tmp_path / "notes" / "todo.md").read_text() == "mine"


def test_a_preparation_that_failed_before_any_shard_does_not_block_the_corrected_input(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A bad line failed it after the plan was written: fixing the file and running again asked
    for --overwrite, for a folder that held no data."""
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "ok"}\nnot json\n')
    args = ["prepare-data", str(bad), "--tokenizer", "offline", "--output", str(tmp_path / "out"), "--workers", "1"]
    failed = run_cli(args, monkeypatch)
    assert failed.exit_code == 2, failed.output
    _write_jsonl(bad, _docs(20))
    os.utime(bad, ns=(time.time_ns(), time.time_ns() + 10**9))
    fixed = run_cli([*args, "--json"], monkeypatch)
    assert fixed.exit_code == 0, fixed.stderr
    assert json.loads(fixed.stdout)["status"] == "prepared"


@pytest.mark.slow
def test_a_killed_prepare_continues_to_the_same_result(tmp_path: Path, offline: LoadedTokenizer) -> None:
    jsonl = _write_jsonl(tmp_path / "a.jsonl", _docs(6000, seed=3))
    whole = prepare([jsonl], tmp_path / "whole", offline, workers=1, shard_mb=0.02)
    cmd = [sys.executable, "-m", "hyperlaunch", "prepare-data", str(jsonl), "--tokenizer", "offline",
           "--output", str(tmp_path / "out"), "--workers", "1", "--shard-mb", "0.02", "--json"]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TOKENIZERS_PARALLELISM": "false"}
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not list((tmp_path / "out").glob("shard-*.json")):
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.communicate()
    done_before = len(list((tmp_path / "out").glob("shard-*.json")))
    assert not (tmp_path / "out" / fmt.MANIFEST_FILE).exists() and 0 < done_before < len(whole.manifest.shards)
    resumed = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    assert resumed.returncode == 0, resumed.stderr
    document = json.loads(resumed.stdout)
    assert document["status"] == "continued" and document["shards_reused"] >= done_before
    assert _stream(tmp_path / "out") == _stream(tmp_path / "whole")
    finished = fmt.read_manifest(tmp_path / "out")
    assert finished is not None and finished.shards == whole.manifest.shards and finished.identity() == whole.manifest.identity()


def test_prepare_data_names_its_tokenizer_one_way(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    jsonl = _write_jsonl(tmp_path / "a.jsonl", _docs(5))
    both = run_cli(["prepare-data", str(jsonl), "-o", str(tmp_path / "o"), "--tokenizer", "offline", "--model", "qwen3_tiny"], monkeypatch)
    neither = run_cli(["prepare-data", str(jsonl), "-o", str(tmp_path / "o")], monkeypatch)
    assert both.exit_code == neither.exit_code == 2 and "exclude each other" in both.stderr and "name the tokenizer" in neither.stderr
    by_model = run_cli(["prepare-data", str(jsonl), "-o", str(tmp_path / "o"), "--model", "qwen3_tiny", "--json"], monkeypatch)
    assert by_model.exit_code == 0 and json.loads(by_model.stdout)["tokenizer"]["name"] == "offline", by_model.stderr


def test_an_unreachable_named_tokenizer_is_one_line_with_a_hint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    jsonl = _write_jsonl(tmp_path / "a.jsonl", _docs(5))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    result = run_cli(["prepare-data", str(jsonl), "-o", str(tmp_path / "o"), "--model", "qwen3_0_6b"], monkeypatch)
    assert result.exit_code == 2
    (line,) = result.stderr.splitlines()
    assert line.startswith("hyperlaunch: error: --tokenizer Qwen/Qwen3-0.6B cannot be loaded: not in the local Hugging Face cache")
    for hint in ("--local-dir", "HF_HOME", "HF_TOKEN", "--tokenizer offline"):
        assert hint in line
    assert not (tmp_path / "o").exists()


def test_the_tokenizer_identity_is_its_contents(tmp_path: Path, offline: LoadedTokenizer) -> None:
    offline.save(tmp_path / "copy")
    assert load_tokenizer(str(tmp_path / "copy")).sha256 == offline.sha256, "the same tokenizer, saved elsewhere"
    from transformers import AutoTokenizer

    grown = AutoTokenizer.from_pretrained(str(tmp_path / "copy"))
    grown.add_tokens(["<|new|>"])
    grown.save_pretrained(str(tmp_path / "grown"))
    assert load_tokenizer(str(tmp_path / "grown")).sha256 != offline.sha256


def test_training_checks_the_tokenizer_and_the_vocabulary_in_one_line(tmp_path: Path, offline: LoadedTokenizer) -> None:
    prepare([_write_jsonl(tmp_path / "a.jsonl", _docs(20))], tmp_path / "out", offline, workers=1)
    manifest = fmt.read_manifest(tmp_path / "out")
    assert manifest is not None
    fmt.check_tokenizer(manifest, offline.identity, tmp_path / "out")
    other = {**offline.identity, "name": "/models/llama", "sha256": "f" * 64}
    with pytest.raises(DataError) as mismatch:
        fmt.check_tokenizer(manifest, other, tmp_path / "out")
    assert mismatch.value.one_line() == (
        f"--data {tmp_path / 'out'} was prepared with tokenizer offline (sha256 {offline.sha256[:12]}), this job uses "
        "/models/llama (sha256 ffffffffffff) (train with --tokenizer offline, or prepare the data with --tokenizer /models/llama)"
    )
    fmt.check_vocabulary(manifest, manifest.max_token_id + 1, "qwen3_tiny", tmp_path / "out")
    with pytest.raises(DataError, match=f"holds token id {manifest.max_token_id}, but tiny has only {manifest.max_token_id} embeddings"):
        fmt.check_vocabulary(manifest, manifest.max_token_id, "tiny", tmp_path / "out")


def _prepare_data_without(blocked: list[str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """`hyperlaunch prepare-data` of a small JSONL file in a Python where `blocked` cannot be imported."""
    code = (
        "import sys\n"
        "class NotInstalled:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        f"        if name.partition('.')[0] in {blocked!r}:\n"
        "            raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n"
        "sys.meta_path.insert(0, NotInstalled())\n"
        "sys.argv = ['hyperlaunch', *sys.argv[1:]]\n"
        "from hyperlaunch.cli import main\n"
        "main()\n"
    )
    jsonl = _write_jsonl(tmp_path / "a.jsonl", _docs(5))
    return subprocess.run(
        [sys.executable, "-c", code, "prepare-data", str(jsonl), "--tokenizer", "offline", "-o", str(tmp_path / "o")],
        cwd=ROOT, capture_output=True, text=True, check=False,
    )


@pytest.mark.slow
def test_without_the_data_extra_prepare_data_says_so_in_one_line(tmp_path: Path) -> None:
    result = _prepare_data_without(["numpy", "tokenizers", "transformers", "torch"], tmp_path)
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        "hyperlaunch: error: tokenizing needs tokenizers (and transformers for a Hugging Face tokenizer) (pip install 'hyperlaunch[data]')"
    ]


@pytest.mark.slow
def test_prepare_data_runs_where_torch_is_not_installed(tmp_path: Path) -> None:
    """A login node with the `data` extra and no torch prepares data (tokenizing needs none)."""
    result = _prepare_data_without(["torch"], tmp_path)
    assert result.returncode == 0, result.stderr
    assert any((tmp_path / "o").iterdir())


def test_a_prepared_folder_brings_its_tokenizer_to_submit_and_the_trainer(tmp_path: Path, offline: LoadedTokenizer) -> None:
    """qwen3_0_6b's own tokenizer would fail the trainer's manifest check on data prepared with
    another one: submit and the trainer both default to the manifest's."""
    from hyperlaunch.job import trainer_args as targs
    from hyperlaunch.job.plan import plan_job

    prepare([_write_jsonl(tmp_path / "a.jsonl", _docs(20))], tmp_path / "out", offline, workers=1)
    plan = plan_job({"model": "qwen3_0_6b", "data": str(tmp_path / "out")}, cwd=tmp_path, environ={}, user_config=tmp_path / "u.toml")
    chosen = {s.name: (s.value, s.source) for s in plan.settings}
    assert chosen["tokenizer"] == ("offline", "the tokenizer --data was prepared with (its manifest.json)")
    assert targs.value_of(plan.spec.job.trainer_args, "--tokenizer") == "offline"
    raw = plan_job({"model": "qwen3_0_6b", "data": str(tmp_path / "a.jsonl")}, cwd=tmp_path, environ={}, user_config=tmp_path / "u.toml")
    assert {s.name: s.value for s in raw.settings}["tokenizer"] != "offline"



def test_the_summary_counts_one_shard_as_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, offline: LoadedTokenizer) -> None:
    jsonl = tmp_path / "few.jsonl"
    jsonl.write_text("".join(json.dumps({"text": f"document {i}"}) + "\n" for i in range(5)))
    result = run_cli(["prepare-data", str(jsonl), "-o", str(tmp_path / "o"), "--tokenizer", "offline"], monkeypatch)
    assert result.exit_code == 0, result.output
    assert "(5 documents, 1 shard, uint16, tokenizer offline)" in result.stdout, result.stdout
