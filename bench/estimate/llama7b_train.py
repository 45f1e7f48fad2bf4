# A Llama-style model of about 7B parameters (Llama-2-7B's shape), built from its config (no
# weights), one AdamW training step on 1 x 512 tokens: too large for a laptop's memory, which
# `memtrack estimate` does not need. Prints the parameter count for the arithmetic check.
import torch
from transformers import LlamaConfig, LlamaForCausalLM

cfg = LlamaConfig(
    hidden_size=4096, intermediate_size=11008, num_hidden_layers=32, num_attention_heads=32,
    num_key_value_heads=32, vocab_size=32000, max_position_embeddings=4096,
)
model = LlamaForCausalLM(cfg).cuda()
n = sum(p.numel() for p in model.parameters())
print("parameters", n)
opt = torch.optim.AdamW(model.parameters(), lr=1e-5)
idx = torch.randint(0, cfg.vocab_size, (1, 512), device="cuda")
out = model(input_ids=idx, labels=idx)
out.loss.backward()
opt.step()
opt.zero_grad(set_to_none=True)
