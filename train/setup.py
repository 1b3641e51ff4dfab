"""Builds a ready-to-run job from a config: process group, data, sharded model with its
weights, optimizer, schedule, checkpointer, and the state to resume from."""

from __future__ import annotations

import dataclasses
import functools
import os
import time
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from hyperlaunch.core import checkpoints as rules
from hyperlaunch.core import gpu_memory, recommend
from hyperlaunch.core.checkpoint_resume import ResumeChoice
from hyperlaunch.core.errors import DiskFull, InvalidInput
from hyperlaunch.core.metrics_records import TrainerEvent
from hyperlaunch.core.models import ModelSpec
from hyperlaunch.core.trackers import Ending
from hyperlaunch.data.prepared_data import manifest_tokenizer
from hyperlaunch.data.tokenizer import LoadedTokenizer, load_tokenizer
from hyperlaunch.runtime import records
from hyperlaunch.runtime.signals import StopRequest
from hyperlaunch.runtime.snapshots import MemorySnapshots, told_to_restore
from hyperlaunch.runtime.watchdog import NO_WATCHDOG, HangLimits, HangWatchdog

from . import STARTED_AT, float8, losses
from . import data as data_mod
from .checkpointing import Checkpointer
from .config import TrainConfig
from .corpus import agree_everywhere, open_corpus
from .distributed import Dist, build_mesh, init_distributed, resolve_device, shutdown
from .hf_export import export_checkpoint
from .hooks import NO_HOOKS, TrainerHooks
from .host_memory import return_freed_memory
from .loop import Trainer
from .memory_snapshot import TrainerSnapshots
from .metrics import MetricsLog, warn
from .modeling import ModelSource, build_meta_model, init_weights, load_pretrained, resolve_model
from .optim import build_optimizer, build_scheduler
from .periodic_export import PeriodicExport
from .sharding import ShardingOptions, shard_model
from .sharding import describe as describe_sharding
from .state import TrainState
from .tied_embedding import use_in_place_embedding_grad


@dataclass
class Job:
    trainer: Trainer
    state: TrainState
    source: ModelSource
    tokenizer: LoadedTokenizer
    cfg: TrainConfig
    d: Dist
    ending: Ending = Ending.FAILED
    """How this process ended, as the trackers' runs record it: FINISHED once the training
    reached its last step (and exported, if asked), REQUEUED after a stop signal's save."""

    def export(self) -> Path:
        """`<model>-final/`: the last checkpoint (the training ends on one) as a Hugging Face
        model, written by rank 0 from disk as `hyperlaunch export` writes any step."""
        checkpointer = self.trainer.checkpointer
        name = self.source.spec.name
        target = rules.final_dir(self.cfg.checkpoint_dir, name)
        unwritten: DiskFull | None = None
        if self.d.is_main:
            assert checkpointer.last_saved_step is not None
            if checkpointer.exports is not None:
                checkpointer.exports.finish()
            checkpoint = rules.checkpoint_path(self.cfg.checkpoint_dir, name, checkpointer.last_saved_step)
            try:
                export_checkpoint(checkpoint, target, hf_config=self.source.hf_config, tokenizer=self.tokenizer, overwrite=True)
            except DiskFull as full:
                # The training is done and its last checkpoint whole: a full disk under the
                # export must not make it a failed job (a final one, never retried).
                unwritten = full
        torch.distributed.barrier()
        if unwritten is not None:
            warn(f"the training is complete and saved ({checkpoint.name}); its Hugging Face export was not written: {unwritten.one_line()}")
            self.trainer.metrics.event(TrainerEvent.EXPORT_FAILED, unwritten.one_line(), path=str(target))
        else:
            self.trainer.metrics.event(TrainerEvent.EXPORTED, f"exported Hugging Face model to {target}", path=str(target))
        return target

    def close(self) -> None:
        self.trainer.checkpointer.close()
        if self.trainer.snapshots is not None:
            self.trainer.snapshots.close()
        tracked = records.trackers(self.cfg.run_dir) if self.d.is_main else None
        if tracked is not None:
            tracked.close(self.ending)
        shutdown()


def model_origin(source: ModelSource) -> str:
    """Where the model's numbers come from, as the settings printout says it."""
    return f"{source.pretrained_dir}/config.json" if source.pretrained_dir is not None else f"preset {source.spec.name}"


def with_recommended(cfg: TrainConfig, source: ModelSource) -> TrainConfig:
    """`cfg` with every option left unset filled as hyperlaunch.core.recommend decides: the same
    choice `submit` writes into a job's command line."""
    gpu = cfg.device == "cuda" or (cfg.device == "auto" and torch.cuda.is_available())
    pretrained = source.pretrained_dir
    own_tokenizer = pretrained is not None and (pretrained / "tokenizer_config.json").exists()
    memory = torch.cuda.get_device_properties(0).total_memory / 1024**3 if gpu and torch.cuda.is_available() else None
    settings = recommend.recommended(
        source.spec, origin=model_origin(source), gpu=gpu, hardware="GPU nodes" if gpu else "CPU nodes",
        data_given=cfg.data is not None, model_tokenizer=str(pretrained) if own_tokenizer else None,
        data_tokenizer=manifest_tokenizer(cfg.data),
        gpu_memory_gib=memory, world=int(os.environ.get("WORLD_SIZE", "1")),
        given={
            name: getattr(cfg, name)
            for name in ("seq_len", "micro_batch_size", "activation_checkpointing", "grad_accum", "cpu_offload")
            if getattr(cfg, name) is not None
        },
        checkpoints=cfg.checkpoints,
    )
    return cfg.with_defaults({setting.name: setting.value for setting in settings})


def tracked_params(cfg: TrainConfig, model: str, world_size: int) -> dict[str, object]:
    """What the trackers record once per run: every option (the recommended defaults filled in)
    and the job's shape."""
    params: dict[str, object] = {field.name: _plain(getattr(cfg, field.name)) for field in dataclasses.fields(cfg)}
    params.update({"job/model": model, "job/world_size": world_size})
    for name, env in (("job/nodes", "SLURM_JOB_NUM_NODES"), ("job/job_id", "SLURM_JOB_ID")):
        if os.environ.get(env):
            params[name] = os.environ[env]
    return params


def _plain(value: object) -> object:
    return value if value is None or isinstance(value, (bool, int, float, str)) else str(value)


def _gpu_choices(cfg: TrainConfig, device: torch.device, is_main: bool) -> str:
    """The loss kind this run builds; raises where this device cannot run what was asked for
    (--loss liger/cce, --float8 without a GPU that has float8 tensor cores)."""
    loss_kind, loss_note = losses.resolve(cfg.loss, device)
    if loss_note and is_main:
        warn(loss_note)
    if cfg.float8:
        cuda = device.type == "cuda"
        float8.check_device(torch.cuda.get_device_capability(device) if cuda else None,
                            torch.cuda.get_device_name(device) if cuda else "")
    return loss_kind


def _fsdp_layout(cfg: TrainConfig, spec: ModelSpec, d: Dist, *, seq_len: int, micro_batch: int) -> gpu_memory.Layout:
    """--reshard-after-forward and --fsdp-groups as given; what they leave open as
    hyperlaunch.core.gpu_memory.layout decides for this many ranks and this GPU's memory (a CPU
    process: as without a GPU, one group kept on one rank). Where the GPU's memory changed the
    choice, one line says so."""
    total_gib = torch.cuda.get_device_properties(d.device).total_memory / gpu_memory.GIB if d.device.type == "cuda" else None
    run: dict[str, typing.Any] = {
        "seq_len": seq_len, "micro_batch": micro_batch, "activation_checkpointing": bool(cfg.activation_checkpointing),
        "world": d.world_size, "grad_accum": cfg.grad_accum, "cpu_offload": bool(cfg.cpu_offload),
    }
    choose = functools.partial(
        gpu_memory.layout, spec, **run, prefetch=cfg.prefetch, reshard_after_forward=cfg.reshard_after_forward,
        one_group=None if cfg.fsdp_groups is None else cfg.fsdp_groups == "one",
    )
    chosen = choose(gpu_memory_gib=total_gib)
    if total_gib is None or not d.is_main:
        return chosen
    unbounded = choose(gpu_memory_gib=None)

    def beyond(wanted: gpu_memory.Layout) -> str:
        needed = gpu_memory.estimate_gib(
            spec, **run, reshard_after_forward=wanted.reshard_after_forward, one_group=wanted.one_group
        )
        return (f"the run would need about {needed:.0f} GiB, more than the {gpu_memory.HEADROOM:.0%} of "
                f"this GPU's {total_gib:.0f} GiB the trainer plans for")

    if chosen.reshard_after_forward and not unbounded.reshard_after_forward:
        warn(
            f"resharding after forward on one GPU: with {spec.name}'s gathered bf16 parameters "
            f"({gpu_memory.gathered_bytes(spec) / gpu_memory.GIB:.1f} GiB) kept until backward, "
            f"{beyond(gpu_memory.Layout(False, False))} (--no-reshard-after-forward keeps them anyway)"
        )
    elif unbounded.one_group and not chosen.one_group:
        reduced = gpu_memory.reduced_at_once_bytes(spec, world=1, grad_accum=cfg.grad_accum) / gpu_memory.GIB
        warn(
            f"an FSDP group per decoder block on one GPU: one group for {spec.name} reduces every gradient at once "
            f"at the end of backward, through {reduced:.1f} GiB of buffers, and with them "
            f"{beyond(gpu_memory.Layout(False, True))} (--fsdp-groups one asks for it anyway)"
        )
    return chosen


def build(cfg: TrainConfig, resume: ResumeChoice, *, is_main: bool, hooks: TrainerHooks = NO_HOOKS) -> Job:
    # From the start: a stop signal during the build (the save signal reaches the trainers
    # directly, and may come early) is kept for the first step, not lost or fatal.
    stop = StopRequest()
    stop.install()
    source = resolve_model(cfg.model, cfg.model_name)
    spec = source.spec
    build_started = time.time()
    cfg = with_recommended(cfg, source)
    seq_len, micro_batch = cfg.seq_len, cfg.micro_batch_size
    assert seq_len is not None and micro_batch is not None and cfg.max_steps is not None and cfg.sharding is not None
    too_long = recommend.sequence_warning(spec, seq_len)
    if too_long and is_main:
        warn(too_long)

    # The device and what only a GPU runs, before anything is read or written: one line if this
    # node lacks them.
    device = resolve_device(cfg.device)
    loss_kind = _gpu_choices(cfg, device, is_main)

    # Every rank loads the same tokenizer or fails (no fallback: hyperlaunch.data.tokenizer), and
    # finds or prepares the data before the process group exists (train/corpus.py).
    tokenizer = load_tokenizer(str(cfg.tokenizer))
    if tokenizer.vocab_size > spec.vocab_size:
        raise InvalidInput(
            f"the tokenizer has {tokenizer.vocab_size} tokens but {spec.name} only {spec.vocab_size} embeddings"
        )
    corpus = open_corpus(cfg, tokenizer, spec, is_main=is_main)
    data_ready = time.time()

    d = init_distributed(device, async_checkpoint=cfg.async_checkpoint)
    data_info = agree_everywhere(d, corpus, tokenizer)
    if d.device.type == "cpu":
        return_freed_memory()
    # The preset's bf16 recommendation is for GPUs; a CPU run stays fp32 unless asked.
    mixed_precision = cfg.mixed_precision or (spec.mixed_precision if d.device.type == "cuda" else "fp32")
    torch.manual_seed(cfg.seed + d.rank)
    metrics = MetricsLog(cfg.run_dir, enabled=d.is_main)
    if resume.warning and d.is_main:
        warn(resume.warning)

    splits = data_mod.split_validation(corpus.stream, seq_len, cfg.val_fraction, micro_batch * d.world_size * cfg.grad_accum)
    batcher = data_mod.Batcher(
        data=splits.train, sampler=data_mod.GlobalSampler(len(splits.train), cfg.seed),
        micro_batch_size=micro_batch, rank=d.rank, world_size=d.world_size,
        grad_accum=cfg.grad_accum, overfit=cfg.overfit_batch,
    )
    val_batches = data_mod.ValidationBatches(splits.val, micro_batch, d.rank, d.world_size, cfg.val_batches)

    model = build_meta_model(source.hf_config)
    float8_linears = float8.convert_to_float8(model) if cfg.float8 else 0
    use_in_place_embedding_grad(model)
    losses.use_loss(model, loss_kind, compiled=cfg.compile)
    mesh = build_mesh(d, cfg.sharding, cfg.hsdp_shard_size)
    fsdp_layout = _fsdp_layout(cfg, spec, d, seq_len=seq_len, micro_batch=micro_batch)
    shard_model(
        model, mesh,
        ShardingOptions(
            sharding=cfg.sharding, mixed_precision=mixed_precision, cpu_offload=bool(cfg.cpu_offload),
            activation_checkpointing=bool(cfg.activation_checkpointing), prefetch=cfg.prefetch, compile=cfg.compile,
            reshard_after_forward=fsdp_layout.reshard_after_forward, one_group=fsdp_layout.one_group,
        ),
    )
    sharding_info = {**describe_sharding(model, mesh), "loss": loss_kind, "float8_linears": float8_linears}
    model.to_empty(device="cpu" if cfg.cpu_offload else d.device)
    if source.pretrained_dir is not None and resume.path is None:
        load_pretrained(model, source.pretrained_dir, d.is_main)
        metrics.event(TrainerEvent.PRETRAINED_LOADED, f"loaded pretrained weights from {source.pretrained_dir}")
    else:
        init_weights(model, cfg.seed)

    optimizer = build_optimizer(model, cfg.lr, (cfg.beta1, cfg.beta2), cfg.weight_decay)
    scheduler = build_scheduler(optimizer, lr=cfg.lr, min_lr=cfg.min_lr, warmup=cfg.warmup_steps, total=cfg.max_steps)
    exports = PeriodicExport(
        every=cfg.export_every, ckpt_dir=cfg.checkpoint_dir, name=spec.name, hf_config=source.hf_config,
        tokenizer=tokenizer, metrics=metrics, enabled=d.is_main,
    )
    checkpointer = Checkpointer(
        ckpt_dir=cfg.checkpoint_dir, spec=spec, model=model, optimizer=optimizer, scheduler=scheduler,
        dist_info=d, metrics=metrics, keep_last=cfg.keep_last, async_save=cfg.async_checkpoint, hooks=hooks,
        export_info={"hf_config": typing.cast(Any, source.hf_config).to_dict(), "tokenizer": tokenizer.name}, exports=exports,
    )
    state = TrainState()
    built = time.time()
    snapshots = memory_snapshots(cfg, checkpointer, d, metrics)
    restore = told_to_restore() if snapshots is not None else None
    if restore is not None and snapshots is not None:
        step, sources, taken = restore
        state = snapshots.restore(step, sources, taken)
    elif resume.path is not None:
        state = checkpointer.load(resume.path)
    startup = {
        "process_start": STARTED_AT,
        "imports_s": build_started - STARTED_AT,
        "data_s": data_ready - build_started,
        "build_s": built - build_started,
        "load_s": time.time() - built,
    }
    if restore is not None:
        metrics.event(
            TrainerEvent.RESUMED, f"resumed from step {state.step} (the memory snapshot) on {d.world_size} rank(s)",
            step=state.step, source="memory", world_size=d.world_size, sharding=sharding_info, startup=startup, data=data_info,
        )
    elif resume.path is not None:
        metrics.event(
            TrainerEvent.RESUMED, f"resumed from step {state.step} ({resume.path.name}) on {d.world_size} rank(s)",
            step=state.step, path=str(resume.path), world_size=d.world_size, sharding=sharding_info,
            startup=startup, data=data_info,
        )
    else:
        metrics.event(TrainerEvent.STARTED, f"training {spec.name} from step 0 on {d.world_size} rank(s)",
            world_size=d.world_size, sharding=sharding_info, startup=startup, data=data_info,
        )

    tracked = records.trackers(cfg.run_dir) if d.is_main else None
    if tracked is not None:
        tracked.params(tracked_params(cfg, spec.name, d.world_size))

    trainer = Trainer(
        spec=spec, d=d, model=model, optimizer=optimizer, scheduler=scheduler, batcher=batcher,
        val_batches=val_batches, checkpointer=checkpointer, metrics=metrics, stop=stop,
        seq_len=seq_len, max_steps=cfg.max_steps,
        checkpoint_every=cfg.checkpoint_every or 0, checkpoints=cfg.checkpoints,
        log_every=cfg.log_every, val_every=cfg.val_every or 0, grad_clip=cfg.grad_clip,
        prefetch=cfg.prefetch, mixed_precision=mixed_precision, hooks=hooks, read_late=d.device.type == "cuda",
        watchdog=HangWatchdog(HangLimits(cfg.hang_timeout, cfg.hang_floor), rank=d.rank, metrics=metrics)
        if cfg.hang_timeout else NO_WATCHDOG,
        snapshots=snapshots,
    )
    return Job(trainer=trainer, state=state, source=source, tokenizer=tokenizer, cfg=cfg, d=d)


def memory_snapshots(cfg: TrainConfig, checkpointer: Checkpointer, d: Dist, metrics: MetricsLog) -> TrainerSnapshots | None:
    """This rank's side of the memory snapshots where the job runs keepers (it tells where in
    SNAPSHOTS_ENV): taken every --memory-checkpoint-every steps, else at the job's interval (0:
    none), and one restored where RESTORE_ENV names it. None without keepers: nothing is kept in
    memory."""
    snapshots = MemorySnapshots.of_this_round(d.rank, metrics, cfg.memory_checkpoint_every)
    return None if snapshots is None else TrainerSnapshots(checkpointer, snapshots)
