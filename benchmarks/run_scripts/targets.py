"""doctor targets for the same step the run scripts take (benchmarks/run_gpu.sh checks
that `gobrrr run` and `gobrrr doctor` read one step alike)."""

import torch
from transformers import GPT2Config, GPT2LMHeadModel


def gpt2_train(batch_size: int = 8, device: str = "cuda", seq_len: int = 512):
    """train_gpt2.py's step: the model, optimizer groups and clipping alike, one batch."""
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_positions=seq_len)).to(device).train()
    decay = [q for _, q in model.named_parameters() if q.dim() >= 2]
    no_decay = [q for _, q in model.named_parameters() if q.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}], lr=3e-4,
                            betas=(0.9, 0.95))
    ids = torch.randint(0, model.config.vocab_size, (batch_size, seq_len), device=device)

    def step(ids):
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.detach()

    return step, (ids,)
