"""An ordinary ResNet-50 training script with a slow input pipeline: images decoded and
augmented on the host, one sample at a time (random-resized crop, flip, normalize), in a
DataLoader with num_workers=0 by default, as many first scripts have it. gobrrr runs it
unchanged (benchmarks/run_gpu.sh); run again with --num-workers N (its top remedy) and
--timing-out, the measured gain is set beside the predicted one.
"""

import argparse
import json
import time

import torch
import torch.nn.functional as F
import torchvision
from torch.utils.data import DataLoader, Dataset

MEAN = torch.tensor([0.485, 0.456, 0.406]).view(3, 1, 1)
STD = torch.tensor([0.229, 0.224, 0.225]).view(3, 1, 1)


class Images(Dataset):
    """Synthetic "decoded JPEGs" (uint8, 3 x 320 x 320) through a host-side transform."""

    def __init__(self, n: int, size: int = 224) -> None:
        self.n, self.size = n, size

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        g = torch.Generator().manual_seed(i)
        img = torch.randint(0, 256, (3, 320, 320), dtype=torch.uint8, generator=g)
        x = img.float().div_(255)
        h = int(torch.randint(160, 320, (), generator=g))
        top, left = (int(v) for v in torch.randint(0, 320 - h + 1, (2,), generator=g))
        x = x[:, top:top + h, left:left + h]
        x = F.interpolate(x[None], size=(self.size, self.size), mode="bilinear",
                          align_corners=False)[0]
        if torch.rand((), generator=g) < 0.5:
            x = x.flip(-1)
        x = (x - MEAN) / STD
        return x, int(torch.randint(0, 1000, (), generator=g))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--num-workers", type=int, default=0)
    p.add_argument("--pin-memory", action="store_true")
    p.add_argument("--timing-out", default=None)
    p.add_argument("--time-from", type=int, default=5)
    a = p.parse_args()
    torch.manual_seed(0)
    model = torchvision.models.resnet50().cuda().train()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
    loader = DataLoader(Images(a.steps * a.batch_size), batch_size=a.batch_size,
                        shuffle=True, num_workers=a.num_workers, pin_memory=a.pin_memory)
    t0 = None
    waits: list[float] = []  # each step's wait for its batch, as the script sees it
    it = iter(loader)
    for step in range(len(loader)):
        t_wait = time.perf_counter()
        x, y = next(it)
        waits.append(time.perf_counter() - t_wait)
        if step == a.time_from:
            torch.cuda.synchronize()
            t0 = time.perf_counter()
        x, y = x.cuda(non_blocking=True), y.cuda(non_blocking=True)
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    torch.cuda.synchronize()
    if a.timing_out and t0 is not None:
        n = a.steps - a.time_from
        json.dump({"steps": n, "step_s": (time.perf_counter() - t0) / n, "waits_s": waits},
                  open(a.timing_out, "w"))
    print(f"final loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
