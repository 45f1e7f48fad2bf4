"""BERT masked-LM from a small config, AdamW, 3 steps."""
import torch
from transformers import BertConfig, BertForMaskedLM
torch.manual_seed(0)
cfg = BertConfig(vocab_size=512, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128)
model = BertForMaskedLM(cfg)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
ids = torch.randint(0, 512, (4, 16))
for step in range(3):
    out = model(input_ids=ids, labels=ids)
    out.loss.backward(); opt.step(); opt.zero_grad()
    print(step, round(out.loss.item(), 5))
