"""T5 from a small config: generate with a KV cache under no_grad (inference loop)."""
import torch
from transformers import T5Config, T5ForConditionalGeneration
torch.manual_seed(0)
cfg = T5Config(vocab_size=512, d_model=64, d_kv=16, d_ff=128, num_layers=2, num_heads=4,
               decoder_start_token_id=0, pad_token_id=0, eos_token_id=1)
model = T5ForConditionalGeneration(cfg).eval()
ids = torch.randint(2, 512, (2, 12))
with torch.no_grad():
    out = model.generate(ids, max_new_tokens=8, do_sample=False, min_new_tokens=8)
print(out.tolist())
