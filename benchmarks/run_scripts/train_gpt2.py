"""An ordinary GPT-2 training script, as a user writes one: a config-built model (random
weights), AdamW with decay and no-decay parameter groups, a warm-up LambdaLR, gradient
clipping, a DataLoader of token sequences. gobrrr runs it unchanged
(benchmarks/run_gpu.sh): `gobrrr run benchmarks/run_scripts/train_gpt2.py --steps 40`.

--out writes what the run computed (the final loss and a hash of every parameter), for
the byte-identity check; --timing-out the steps per second from --time-from on (the
overhead benchmark), apart, since times differ run to run. Two plain runs on a GPU differ
already (nondeterministic kernels: SDPA's backward, atomics): --deterministic asks torch
for deterministic algorithms and eager attention, so that two runs can be equal bytes.
"""

import argparse
import hashlib
import json
import os
import time

import torch
from torch.utils.data import DataLoader, Dataset
from transformers import GPT2Config, GPT2LMHeadModel


class Tokens(Dataset):
    def __init__(self, n: int, seq_len: int, vocab: int) -> None:
        self.n, self.seq_len, self.vocab = n, seq_len, vocab

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> torch.Tensor:
        g = torch.Generator().manual_seed(i)
        return torch.randint(0, self.vocab, (self.seq_len,), generator=g)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--seq-len", type=int, default=512)
    p.add_argument("--num-workers", type=int, default=0)
    p.add_argument("--out", default=None)
    p.add_argument("--timing-out", default=None)
    p.add_argument("--time-from", type=int, default=10)
    p.add_argument("--deterministic", action="store_true")
    a = p.parse_args()
    if a.deterministic:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.use_deterministic_algorithms(True)
    torch.manual_seed(0)
    cfg = GPT2Config(n_positions=a.seq_len,
                     attn_implementation="eager" if a.deterministic else "sdpa")
    model = GPT2LMHeadModel(cfg).cuda().train()
    decay = [q for n, q in model.named_parameters() if q.dim() >= 2]
    no_decay = [q for n, q in model.named_parameters() if q.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}], lr=3e-4,
                            betas=(0.9, 0.95))
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 10))
    data = Tokens(a.steps * a.batch_size, a.seq_len, cfg.vocab_size)
    loader = DataLoader(data, batch_size=a.batch_size, shuffle=True,
                        generator=torch.Generator().manual_seed(1),
                        num_workers=a.num_workers)
    t0 = None
    for step, ids in enumerate(loader):
        if step == a.time_from:
            torch.cuda.synchronize()
            t0 = time.perf_counter()
        ids = ids.cuda(non_blocking=True)
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    if a.timing_out and t0 is not None:
        n = a.steps - a.time_from
        json.dump({"steps": n, "steps_per_s": n / (time.perf_counter() - t0)},
                  open(a.timing_out, "w"))
    if a.out:
        h = hashlib.sha256()
        for _, q in sorted(model.state_dict().items()):
            h.update(q.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
        json.dump({"final_loss": loss.item(), "params_sha256": h.hexdigest()},
                  open(a.out, "w"))
    print(f"final loss {loss.item():.6f}")


if __name__ == "__main__":
    main()
