"""Any checkpoint as a Hugging Face model: a qwen3_tiny training on the dev cluster, `hyperlaunch
export` of an intermediate step read back by transformers against the trainer's own state at
that step (loaded through DCP, an independent path), `--export-every` written during training,
`checkpoints` naming the exports, the refusals, and the exported folder as a new job's model."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.support.devcluster_helpers import DevCluster, wait_until
from tests.support.fault_helpers import MODEL, Job, submit
from tests.support.train_helpers import launch, tiny_args

pytestmark = pytest.mark.integration

STEPS = 30
EVERY = 10


@pytest.fixture(scope="module")
def trained(dev_cluster: DevCluster, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    workdir = tmp_path_factory.mktemp("exported")
    job = submit(dev_cluster, workdir, max_steps=STEPS, checkpoint_every=EVERY, extra=["--export-every", "20"])
    assert job.wait_final()["state"] == "COMPLETED"
    exported = dev_cluster.hyperlaunch("export", job.job_id, "--step", str(EVERY), "--json", cwd=workdir)
    assert exported.returncode == 0, exported.stderr
    listed = dev_cluster.hyperlaunch("checkpoints", "--checkpoint-dir", str(job.ckpt_dir), "--json", cwd=workdir)
    assert listed.returncode == 0, listed.stderr
    again = dev_cluster.hyperlaunch("export", job.job_id, "--step", str(EVERY), cwd=workdir)
    missing = dev_cluster.hyperlaunch("export", job.job_id, "--step", "7", cwd=workdir)
    broken = job.ckpt_dir / f"{MODEL}-15steps"
    shutil.copytree(job.ckpt_dir / f"{MODEL}-{EVERY}steps", broken)
    (broken / ".metadata").unlink()  # a save killed before DCP wrote its completion marker
    incomplete = dev_cluster.hyperlaunch("export", job.job_id, "--step", "15", cwd=workdir)
    precious = workdir / "precious"
    precious.mkdir()
    (precious / "notes.txt").write_text("important")
    foreign = dev_cluster.hyperlaunch("export", job.job_id, "--step", "10", "-o", str(precious), "--overwrite", cwd=workdir)
    foreign_by_slurm = dev_cluster.hyperlaunch("export", job.job_id, "--slurm", "-o", str(precious), "--overwrite", cwd=workdir)
    by_slurm = dev_cluster.hyperlaunch("export", job.job_id, "--step", "20", "--slurm", "-o", str(workdir / "by-slurm"), "--json", cwd=workdir)
    assert by_slurm.returncode == 0, by_slurm.stderr
    slurm_doc = json.loads(by_slurm.stdout)
    wait_until(lambda: (workdir / "by-slurm" / "hyperlaunch-export.json").exists() or not dev_cluster.run("squeue", "-h", "-j", slurm_doc["job_id"], check=False).strip(), 180, "the export job")
    return {
        "job": job, "doc": json.loads(exported.stdout), "listed": json.loads(listed.stdout), "again": again,
        "missing": missing, "incomplete": incomplete, "workdir": workdir, "slurm": slurm_doc,
        "foreign": foreign, "foreign_by_slurm": foreign_by_slurm, "precious": precious,
    }


def _trainer_model_at(checkpoint: Path, config_dir: Path) -> Any:
    """The trainer's weights at that checkpoint, read through DCP into a transformers model."""
    import torch.distributed.checkpoint as dcp
    from transformers import AutoConfig, AutoModelForCausalLM

    model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(config_dir))
    state = {f"model.{name}": tensor for name, tensor in model.state_dict().items()}
    dcp.load(state, checkpoint_id=str(checkpoint), no_dist=True)
    return model.eval()


def test_an_intermediate_step_loads_with_transformers_and_gives_the_trainers_logits(trained: dict[str, Any]) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    job: Job = trained["job"]
    output = Path(trained["doc"]["output"])
    assert output == job.ckpt_dir / f"{MODEL}-{EVERY}steps-hf" and trained["doc"]["step"] == EVERY
    for name in ("config.json", "generation_config.json", "model.safetensors", "tokenizer.json", "hyperlaunch-export.json"):
        assert (output / name).is_file(), name
    exported = AutoModelForCausalLM.from_pretrained(output).eval()
    reference = _trainer_model_at(job.ckpt_dir / f"{MODEL}-{EVERY}steps", output)
    batch = torch.tensor(AutoTokenizer.from_pretrained(output)("the same fixed batch of text, twice over")["input_ids"]).repeat(2, 1)
    with torch.no_grad():
        assert torch.equal(exported(batch).logits, reference(batch).logits)
    # The last step's export and the trainer's -final are the same weights, written by the same code.
    final = AutoModelForCausalLM.from_pretrained(job.ckpt_dir / f"{MODEL}-final").eval()
    last = _trainer_model_at(job.ckpt_dir / f"{MODEL}-{STEPS}steps", output)
    with torch.no_grad():
        assert torch.equal(final(batch).logits, last(batch).logits)


def test_export_every_wrote_its_steps_during_training_and_checkpoints_names_every_export(trained: dict[str, Any]) -> None:
    job: Job = trained["job"]
    assert (job.ckpt_dir / f"{MODEL}-20steps-hf" / "hyperlaunch-export.json").is_file()
    assert not (job.ckpt_dir / f"{MODEL}-30steps-hf").exists()  # 30 is no multiple of 20
    events = [json.loads(line) for line in (job.run_dir / "metrics.jsonl").read_text().splitlines() if '"exported"' in line]
    periodic = [e for e in events if e.get("step") == 20]
    assert len(periodic) == 1 and periodic[0]["blocked_s"] >= 0 and periodic[0]["bytes"] > 0
    (model,) = trained["listed"]["models"]
    by_step = {c["step"]: [Path(e["output"]).name for e in c["hf_exports"]] for c in model["checkpoints"]}
    assert by_step[EVERY] == [f"{MODEL}-{EVERY}steps-hf"]
    assert by_step[20] == [f"{MODEL}-20steps-hf"]
    assert f"{MODEL}-final" in by_step[STEPS]


def test_an_export_run_as_a_slurm_job_writes_the_same_files(trained: dict[str, Any]) -> None:
    job: Job = trained["job"]
    by_slurm = trained["workdir"] / "by-slurm"
    log = Path(trained["slurm"]["log"])
    assert (by_slurm / "hyperlaunch-export.json").is_file(), log.read_text() if log.exists() else "no log"
    here = job.ckpt_dir / f"{MODEL}-20steps-hf"  # --export-every's, fp32 too
    for name in ("model.safetensors", "config.json", "tokenizer.json"):
        assert (by_slurm / name).read_bytes() == (here / name).read_bytes(), name


def test_an_existing_output_a_missing_step_and_an_incomplete_checkpoint_are_refused(trained: dict[str, Any]) -> None:
    for result, code, words in (
        (trained["again"], 2, "exists; pass --overwrite"),
        (trained["missing"], 6, "complete steps: 10, 20, 30"),
        (trained["incomplete"], 6, "incomplete: no .metadata"),
        # --overwrite replaces an earlier export, never a folder of the user's own files.
        (trained["foreign"], 2, "holds files and is not a hyperlaunch export"),
        (trained["foreign_by_slurm"], 2, "holds files and is not a hyperlaunch export"),
    ):
        assert result.returncode == code, result.stderr
        (line,) = result.stderr.splitlines()
        assert line.startswith("hyperlaunch: error: ") and words in line, line
    assert not (trained["job"].ckpt_dir / f"{MODEL}-15steps-hf").exists()
    assert [p.name for p in trained["precious"].iterdir()] == ["notes.txt"]


def test_an_export_to_s3_lands_whole_and_is_recorded(trained: dict[str, Any], aws: Any, dev_cluster: DevCluster) -> None:
    aws.client("s3").create_bucket(Bucket="evals", CreateBucketConfiguration={"LocationConstraint": aws.region})
    env = {"AWS_ENDPOINT_URL": aws.endpoint, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": aws.region}
    job: Job = trained["job"]
    # Without the job (its record is in the fixture's home): the checkpoint records its model.
    result = dev_cluster.hyperlaunch(
        "export", "--checkpoint-dir", str(job.ckpt_dir), "--name", MODEL, "--step", "20", "--dtype", "bf16",
        "-o", "s3://evals/qwen/step20", "--json", cwd=trained["workdir"], extra_env=env,
    )
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    local = Path(doc["output"])
    objects = {o["Key"]: o["Size"] for o in aws.client("s3").list_objects_v2(Bucket="evals")["Contents"]}
    assert objects == {f"qwen/step20/{p.name}": p.stat().st_size for p in local.iterdir()}
    assert doc["s3"]["place"] == "s3://evals/qwen/step20" and doc["dtype"] == "bf16"
    listed = json.loads(dev_cluster.hyperlaunch("checkpoints", "--checkpoint-dir", str(job.ckpt_dir), "--json", cwd=trained["workdir"]).stdout)
    (checkpoint,) = [c for c in listed["models"][0]["checkpoints"] if c["step"] == 20]
    assert "s3://evals/qwen/step20" in [e["output"] for e in checkpoint["hf_exports"]]


def test_an_interrupted_export_leaves_no_folder_that_looks_complete(trained: dict[str, Any], tmp_path: Path) -> None:
    from hyperlaunch.data.tokenizer import load_tokenizer
    from hyperlaunch.train.hf_export import export_checkpoint

    job: Job = trained["job"]
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(trained["doc"]["output"])

    def interrupt(done: int, total: int) -> None:
        if done > total // 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        export_checkpoint(
            job.ckpt_dir / f"{MODEL}-20steps", tmp_path / "out", hf_config=config, tokenizer=load_tokenizer("offline"), progress=interrupt,
        )
    assert list(tmp_path.iterdir()) == []


def test_the_exported_folder_starts_a_new_training_from_those_weights(trained: dict[str, Any], tmp_path: Path) -> None:
    """Round trip: `--model <export>` trains from the exported weights: its first loss is the one
    of the trainer's own state at that step, saved by transformers itself."""
    job: Job = trained["job"]
    exported = Path(trained["doc"]["output"])
    reference = tmp_path / "reference"
    _trainer_model_at(job.ckpt_dir / f"{MODEL}-{EVERY}steps", exported).save_pretrained(reference)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(exported / name, reference / name)
    first = {}
    for label, model in (("exported", exported), ("reference", reference)):
        run = launch([*tiny_args(tmp_path / f"{label}-ckpt", steps=2)[2:], "--model", str(model)], run_dir=tmp_path / f"{label}-run", ranks=1)
        first[label] = run.steps()[1]["loss"]
    assert first["exported"] == first["reference"]


@pytest.mark.solo
def test_exporting_qwen3_0_6b_streams_in_less_than_half_the_models_memory(dev_cluster: DevCluster, tmp_path: Path) -> None:
    """The real 0.6B model, one step on two CPU nodes (its checkpoint is 7 GB with the optimizer
    state), then exported by the CLI: the exporter's peak resident memory, torch included, stays
    below half of the model's fp32 weights, which it never holds at once."""
    from hyperlaunch.core.models import get_preset

    submitted = dev_cluster.hyperlaunch(
        "submit", "--nodes", "2", "--model", "qwen3_0_6b", "--max-steps", "1", "--json", "--", "--no-export", cwd=tmp_path,
    )
    assert submitted.returncode == 0, submitted.stderr
    job = Job(dev_cluster, tmp_path, json.loads(submitted.stdout)["job_id"])
    try:
        assert job.wait_final(timeout=900)["state"] == "COMPLETED"
        exported = dev_cluster.hyperlaunch("export", job.job_id, "--json", cwd=tmp_path)
        assert exported.returncode == 0, exported.stderr
        doc = json.loads(exported.stdout)
        weights = get_preset("qwen3_0_6b").num_params * 4
        assert doc["bytes"] == weights and doc["shards"] == 3  # 1 GB shards and their index
        assert doc["peak_rss_bytes"] < weights / 2, f"peak {doc['peak_rss_bytes'] / 2**30:.2f} GiB of {weights / 2**30:.2f} GiB"
        index = json.loads((Path(doc["output"]) / "model.safetensors.index.json").read_text())
        assert index["metadata"]["total_size"] == weights and len(set(index["weight_map"].values())) == 3
    finally:
        # 10 GB of checkpoint and export: pytest keeps the last runs' folders, a disk would fill.
        shutil.rmtree(tmp_path / "checkpoints", ignore_errors=True)
