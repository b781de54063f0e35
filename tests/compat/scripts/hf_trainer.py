"""Hugging Face `Trainer` with `TraceMLCallback`: a 2-layer GPT-2 built from a config (no
download), random tokens, gradient accumulation 2, 6 optimizer steps."""

import sys

import _common
import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

from traceml.integrations import TraceMLCallback

_common.seed()
config = GPT2Config(n_layer=2, n_head=2, n_embd=32, vocab_size=128, n_positions=32)
model = GPT2LMHeadModel(config)
tokens = torch.randint(0, 128, (48, 16))
data = [{"input_ids": t, "labels": t} for t in tokens]
args = TrainingArguments(
    output_dir=sys.argv[1],
    max_steps=6,
    per_device_train_batch_size=4,
    gradient_accumulation_steps=2,
    report_to=[],
    save_strategy="no",
    logging_strategy="no",
    disable_tqdm=True,
    use_cpu=True,
    seed=0,
    dataloader_num_workers=0,
)
callback = TraceMLCallback()
out = Trainer(model=model, args=args, train_dataset=data, callbacks=[callback]).train()
print(f"optimizer_steps={out.global_step}")
_common.report(out.training_loss, model)
