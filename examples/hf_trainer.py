"""A Hugging Face Trainer script as the transformers docs teach it, with nothing of hyperlaunch in
it: HfArgumentParser reads TrainingArguments from the command line, Trainer saves checkpoint-N
folders into --output_dir and resumes from --resume_from_checkpoint.

Under hyperlaunch it resumes after a lost node with no line changed: the job's `out` lands in the
run's working folder, hyperlaunch counts each checkpoint-N it finds as progress, and hands the
newest complete one to the next start through the argument that is left out on the first:

    hyperlaunch submit --script examples/hf_trainer.py --nodes 2 -- \\
        --output_dir out --max_steps 40 --save_steps 10 --report_to none \\
        '{resume?--resume_from_checkpoint {resume}}'

A small Qwen3 built from its config and made-up tokens keep it to CPUs and off the network;
--step_seconds slows each step (the tests use it to kill a node between checkpoints)."""

import time
from dataclasses import dataclass, field

import torch
from transformers import (
    AutoModelForCausalLM,
    HfArgumentParser,
    Qwen3Config,
    Trainer,
    TrainerCallback,
    TrainingArguments,
)


@dataclass
class ScriptArguments:
    step_seconds: float = field(default=0.0, metadata={"help": "Sleep this long after each step."})
    samples: int = field(default=512, metadata={"help": "Made-up training sequences."})


class Tokens(torch.utils.data.Dataset):
    """Fixed made-up sequences: the same data on every start."""

    def __init__(self, count: int, length: int = 32, vocab: int = 256) -> None:
        self.ids = torch.randint(0, vocab, (count, length), generator=torch.Generator().manual_seed(0))

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, index: int) -> dict:
        return {"input_ids": self.ids[index], "labels": self.ids[index]}


class Slow(TrainerCallback):
    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def on_step_end(self, args, state, control, **kwargs):
        time.sleep(self.seconds)


def main() -> None:
    script, training = HfArgumentParser((ScriptArguments, TrainingArguments)).parse_args_into_dataclasses()
    config = Qwen3Config(vocab_size=256, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, head_dim=16)
    torch.manual_seed(training.seed)
    model = AutoModelForCausalLM.from_config(config)
    callbacks = [Slow(script.step_seconds)] if script.step_seconds else []
    trainer = Trainer(model=model, args=training, train_dataset=Tokens(script.samples), callbacks=callbacks)
    trainer.train(resume_from_checkpoint=training.resume_from_checkpoint)


if __name__ == "__main__":
    main()
