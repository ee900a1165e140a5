"""An ordinary data-parallel training script, as a user writes one for torchrun: the
process group from torchrun's environment, the model (random weights) wrapped in
DistributedDataParallel, a DistributedSampler, a warm-up LambdaLR, gradient clipping.
GPT-2 (config-built; AdamW with decay and no-decay groups) by default, or torchvision's
ResNet-50 (`--model resnet50`: SGD with momentum and weight decay, 224 x 224 images,
1000 classes). gobrrr runs it unchanged under torchrun (issue 27;
benchmarks/run4_x2.sh):

    torchrun --nproc-per-node 2 -m gobrrr run --json r.json \\
        benchmarks/run_scripts/train_ddp.py --steps 40 [--model resnet50]

On a machine without CUDA it runs on gloo with a small GPT-2 (--small is implied), for a
smoke test of the same path.
"""

import argparse
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler
from transformers import GPT2Config, GPT2LMHeadModel


class Images(Dataset):
    """3 x 224 x 224 images and labels from a pool of 64 drawn once: drawing each sample
    on the host (150k normal floats) took the step on one H200 to 141 ms, 74% overhead
    (session p), which would hide the communication this script is run to see."""

    def __init__(self, n: int, classes: int = 1000, pool: int = 64) -> None:
        g = torch.Generator().manual_seed(0)
        self.n = n
        self.images = torch.randn(pool, 3, 224, 224, generator=g)
        self.labels = torch.randint(0, classes, (pool,), generator=g)

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        j = i % len(self.labels)
        return self.images[j], self.labels[j]


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
    p.add_argument("--batch-size", type=int, default=None,
                   help="per rank; default 8 (GPT-2), 64 (ResNet-50)")
    p.add_argument("--seq-len", type=int, default=512)
    p.add_argument("--small", action="store_true", help="2 layers, 128 wide, vocab 1024")
    p.add_argument("--model", choices=("gpt2", "resnet50"), default="gpt2")
    a = p.parse_args()
    cuda = torch.cuda.is_available()
    if cuda:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    dist.init_process_group("nccl" if cuda else "gloo")
    device = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")
    if a.batch_size is None:
        a.batch_size = 64 if a.model == "resnet50" else 8
    if a.model == "resnet50":
        loss = _resnet50(a, device, cuda)
    else:
        loss = _gpt2(a, device, cuda)
    if dist.get_rank() == 0:
        print(f"final loss {loss.item():.6f}")
    dist.destroy_process_group()


def _gpt2(a: argparse.Namespace, device: torch.device, cuda: bool) -> torch.Tensor:
    small = a.small or not cuda
    seq = 64 if small and a.seq_len == 512 else a.seq_len
    torch.manual_seed(0)  # the same initial weights on every rank (DDP broadcasts rank 0's)
    cfg = (GPT2Config(n_layer=2, n_embd=128, n_head=4, vocab_size=1024, n_positions=seq)
           if small else GPT2Config(n_positions=seq))
    model = DDP(GPT2LMHeadModel(cfg).to(device).train(),
                device_ids=[device.index] if cuda else None)
    named = list(model.module.named_parameters())
    opt = torch.optim.AdamW([{"params": [q for _, q in named if q.dim() >= 2],
                              "weight_decay": 0.1},
                             {"params": [q for _, q in named if q.dim() < 2],
                              "weight_decay": 0.0}], lr=3e-4, betas=(0.9, 0.95))
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 10))
    data = Tokens(a.steps * a.batch_size * dist.get_world_size(), seq, cfg.vocab_size)
    loss = torch.zeros(())
    for ids in _loader(data, a.batch_size):
        ids = ids.to(device, non_blocking=True)
        loss = model(input_ids=ids, labels=ids).loss
        _update(loss, model, opt, sched)
    return loss


def _resnet50(a: argparse.Namespace, device: torch.device, cuda: bool) -> torch.Tensor:
    import torchvision

    torch.manual_seed(0)
    model = DDP(torchvision.models.resnet50().to(device).train(),
                device_ids=[device.index] if cuda else None)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 10))
    data = Images(a.steps * a.batch_size * dist.get_world_size())
    loss = torch.zeros(())
    for images, labels in _loader(data, a.batch_size):
        images = images.to(device, non_blocking=True)
        labels = labels.to(device, non_blocking=True)
        loss = torch.nn.functional.cross_entropy(model(images), labels)
        _update(loss, model, opt, sched)
    return loss


def _loader(data: Dataset, batch_size: int) -> DataLoader:
    return DataLoader(data, batch_size=batch_size,
                      sampler=DistributedSampler(data, shuffle=True, seed=1))


def _update(loss: torch.Tensor, model: torch.nn.Module, opt: torch.optim.Optimizer,
            sched: torch.optim.lr_scheduler.LambdaLR) -> None:
    """backward, clipping, the optimizer and its warm-up schedule, zeroed gradients."""
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    sched.step()
    opt.zero_grad(set_to_none=True)


if __name__ == "__main__":
    main()
