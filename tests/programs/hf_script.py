"""A Hugging Face Trainer script as its community writes them (run_clm.py's shape), plus sweepq's one line.

    python hf_script.py --output_dir out --num_train_epochs 4 --report_to none --use_cpu

A tiny GPT-2 built from a config (no download) learns a synthetic language:
each sequence counts up from a random token with a random stride. Under sweepq
the callback reports progress, logs and checkpoints, and resumes from the
verified checkpoint; on its own the same script trains as it always did.

--hold_file is test scaffolding: training waits at the step that file names, for
as long as it names it, so that a test acts on the program mid-fit without racing it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
from transformers import (
    GPT2Config,
    GPT2LMHeadModel,
    HfArgumentParser,
    Trainer,
    TrainerCallback,
    TrainingArguments,
    set_seed,
)

from sweepq.integrations.transformers import SweepqCallback


@dataclass
class ModelArguments:
    vocab_size: int = field(default=64)
    n_embd: int = field(default=16)
    n_layer: int = field(default=2)
    n_head: int = field(default=2)


@dataclass
class DataArguments:
    seq_len: int = field(default=16)
    n_train: int = field(default=32)
    n_eval: int = field(default=16)
    dataset_seed: int = field(default=1234)
    hold_file: str | None = field(default=None, metadata={"help": "test scaffolding: wait at the step it names"})


class CountingDataset(torch.utils.data.Dataset):
    def __init__(self, n: int, seq_len: int, vocab: int, seed: int) -> None:
        g = torch.Generator().manual_seed(seed)
        start = torch.randint(0, vocab, (n, 1), generator=g)
        stride = torch.randint(1, 4, (n, 1), generator=g)
        self.ids = (start + stride * torch.arange(seq_len)) % vocab

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


class HoldAtStep(TrainerCallback):
    def __init__(self, path: str) -> None:
        self.path = Path(path)

    def _names(self, step: int) -> bool:
        return self.path.exists() and self.path.read_text().strip() == str(step)

    def on_step_end(self, args, state, control, **kwargs):
        if self._names(state.global_step):
            print(f"holding at step {state.global_step}", flush=True)
            while self._names(state.global_step):
                time.sleep(0.02)


def main() -> None:
    parser = HfArgumentParser((ModelArguments, DataArguments, TrainingArguments))  # type: ignore[arg-type]
    model_args, data_args, training_args = parser.parse_args_into_dataclasses()
    set_seed(training_args.seed)

    config = GPT2Config(
        vocab_size=model_args.vocab_size,
        n_positions=data_args.seq_len,
        n_embd=model_args.n_embd,
        n_layer=model_args.n_layer,
        n_head=model_args.n_head,
        bos_token_id=0,
        eos_token_id=0,
    )
    model = GPT2LMHeadModel(config)
    vocab = model_args.vocab_size
    train_dataset = CountingDataset(data_args.n_train, data_args.seq_len, vocab, data_args.dataset_seed)
    eval_dataset = CountingDataset(data_args.n_eval, data_args.seq_len, vocab, data_args.dataset_seed + 1)

    sq = SweepqCallback()
    trainer = Trainer(
        model=model, args=training_args, train_dataset=train_dataset, eval_dataset=eval_dataset, callbacks=[sq]
    )
    if data_args.hold_file:
        trainer.add_callback(HoldAtStep(data_args.hold_file))

    train_result = trainer.train(resume_from_checkpoint=sq.resume_from)
    trainer.save_model()
    trainer.log_metrics("train", train_result.metrics)
    trainer.save_metrics("train", train_result.metrics)
    trainer.save_state()

    metrics = trainer.evaluate()
    trainer.log_metrics("eval", metrics)
    trainer.save_metrics("eval", metrics)


if __name__ == "__main__":
    main()
