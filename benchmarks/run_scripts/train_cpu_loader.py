"""A small CPU training script bound by its input pipeline: train_resnet.py's per-sample
host transforms (synthetic "decoded JPEGs", random-resized crop, flip, normalize, all
torch ops on the host, large enough that each one runs as a parallel region on torch's
intra-op threads) in a DataLoader with num_workers=0, and a small CNN on CPU. Each step's
wait for its batch is recorded (--timing-out), with the step's start on the wall clock,
so that the steps after `gobrrr run`'s window can be set beside the same steps run plain
and beside the time its report process ran (benchmarks/run_after_window_cpu.py).

  python benchmarks/run_scripts/train_cpu_loader.py [--steps 120] [--batch-size 32]
                                                   [--timing-out F.json]
"""

import argparse
import json
import time

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset

MEAN = torch.tensor([0.485, 0.456, 0.406]).view(3, 1, 1)
STD = torch.tensor([0.229, 0.224, 0.225]).view(3, 1, 1)


class Images(Dataset):
    """Synthetic uint8 images (3 x src x src) through a host-side transform."""

    def __init__(self, n: int, src: int = 320, size: int = 224) -> None:
        self.n, self.src, self.size = n, src, size

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        g = torch.Generator().manual_seed(i)
        s = self.src
        img = torch.randint(0, 256, (3, s, s), dtype=torch.uint8, generator=g)
        x = img.float().div_(255)
        h = int(torch.randint(s // 2, s, (), generator=g))
        top, left = (int(v) for v in torch.randint(0, s - h + 1, (2,), generator=g))
        x = x[:, top:top + h, left:left + h]
        x = F.interpolate(x[None], size=(self.size, self.size), mode="bilinear",
                          align_corners=False)[0]
        if torch.rand((), generator=g) < 0.5:
            x = x.flip(-1)
        x = (x - MEAN) / STD
        return x, int(torch.randint(0, 10, (), generator=g))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=120)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--timing-out", default=None)
    a = p.parse_args()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 5, stride=4), nn.ReLU(),
                          nn.Conv2d(8, 16, 3, stride=2), nn.ReLU(),
                          nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loader = DataLoader(Images(a.steps * a.batch_size), batch_size=a.batch_size,
                        shuffle=True, num_workers=0)
    waits: list[float] = []  # each step's wait for its batch, as the script sees it
    starts: list[float] = []  # each step's start, time.time() (the wall clock)
    it = iter(loader)
    for _ in range(len(loader)):
        starts.append(time.time())
        t_wait = time.perf_counter()
        x, y = next(it)
        waits.append(time.perf_counter() - t_wait)
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    end = time.time()
    if a.timing_out:
        json.dump({"waits_s": waits, "starts": starts, "end": end,
                   "threads": torch.get_num_threads()}, open(a.timing_out, "w"))
    print(f"final loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
