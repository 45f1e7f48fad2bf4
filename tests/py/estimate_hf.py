# `memtrack estimate` on Hugging Face transformers (a GPT-2 built from a config, no weights):
#   generate     generate(max_new_tokens=5) from a 4-token prompt; prints the output's shape
#   checkpoint   two training steps with gradient_checkpointing_enable() (non-reentrant)
#   plain        the same two steps without checkpointing
#   mask         a Llama-style model in bf16, one step, with an attention mask of ones made on
#                the host: the mask check reads it, and takes the unpadded (flash) branch
import sys

import torch
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM
from transformers.utils import logging

logging.set_verbosity_error()
what = sys.argv[1]
if what == "mask":
    cfg = LlamaConfig(hidden_size=256, intermediate_size=688, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=4, vocab_size=1000)
    model = LlamaForCausalLM(cfg).to(torch.bfloat16).cuda()
    ids = torch.randint(0, 1000, (2, 256))
    out = model(input_ids=ids.cuda(), attention_mask=torch.ones_like(ids).cuda(), labels=ids.cuda())
    out.loss.backward()
    print("masked")
    sys.exit(0)
cfg = GPT2Config(n_layer=4, n_embd=256, n_head=4, vocab_size=1000, n_positions=512,
                 bos_token_id=0, eos_token_id=0)
model = GPT2LMHeadModel(cfg).cuda()
if what == "generate":
    model.eval()
    ids = torch.tensor([[1, 2, 3, 4]]).cuda()
    out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=5,
                         do_sample=False, pad_token_id=0)
    print("generated", tuple(out.shape))
else:
    if what == "checkpoint":
        model.gradient_checkpointing_enable()
    model.train()
    opt = torch.optim.AdamW(model.parameters())
    for _ in range(2):
        ids = torch.randint(0, 1000, (8, 256)).cuda()
        model(input_ids=ids, labels=ids).loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    print("trained")
