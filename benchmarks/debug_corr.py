"""Which profiler fields link a CUDA kernel to its launch on this torch (debugging aid)."""
import torch
from torch.profiler import ProfilerActivity, profile

a = torch.randn(256, 256, device="cuda")
for _ in range(3):
    a @ a
torch.cuda.synchronize()
with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
    (a @ a).relu()
    torch.cuda.synchronize()
for e in prof.events():
    print(repr(e.name)[:40], e.device_type, "id", e.id, "linked", getattr(e, "linked_correlation_id", "NA"),
          "kernels", [k.name[:30] for k in e.kernels], "start", e.time_range.start)
