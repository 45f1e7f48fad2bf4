"""Hugging Face Trainer, 3 steps of GPT-2 (small config, no weights) on an in-memory dataset."""
import tempfile

import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments
from transformers.trainer_callback import PrinterCallback


class Tokens(torch.utils.data.Dataset):
    def __init__(self, n, vocab):
        g = torch.Generator().manual_seed(1)
        self.ids = torch.randint(0, vocab, (n, 32), generator=g)

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


torch.manual_seed(0)
cfg = GPT2Config(n_layer=2, n_embd=128, n_head=4, vocab_size=1000, n_positions=64)
model = GPT2LMHeadModel(cfg)
print(f"param_bytes={sum(p.numel() * p.element_size() for p in model.parameters())}")
with tempfile.TemporaryDirectory() as out:
    targs = TrainingArguments(
        output_dir=out, max_steps=3, per_device_train_batch_size=2, logging_steps=1,
        report_to=[], use_cpu=True, save_strategy="no", seed=0, dataloader_num_workers=0,
        disable_tqdm=True,
    )
    trainer = Trainer(model=model, args=targs, train_dataset=Tokens(16, cfg.vocab_size))
    trainer.remove_callback(PrinterCallback)  # its log line has wall times in it
    result = trainer.train()
    for rec in trainer.state.log_history:
        if "loss" in rec:
            print(f"step {rec['step']} loss {rec['loss']!r}")
    print(f"train_loss {result.training_loss!r}")
