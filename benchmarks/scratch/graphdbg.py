import torch
from torch import nn
from torch.profiler import profile, ProfilerActivity, record_function
mlp = nn.Sequential(nn.Linear(512, 512), nn.GELU(), nn.Linear(512, 512)).cuda()
x = torch.randn(16, 512, device="cuda")
with torch.no_grad():
    s = torch.cuda.Stream(); s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3): mlp(x)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g): y = mlp(x)
    for _ in range(3): g.replay()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        with record_function("WIN"):
            g.replay(); torch.cuda.synchronize()
ev = prof.events()
for e in ev:
    print(repr(e.name)[:60], e.device_type, "id", getattr(e, "id", None), "lcid", getattr(e, "linked_correlation_id", None), "kernels", [k.name[:30] for k in getattr(e, "kernels", [])][:3], "parent", getattr(getattr(e, "cpu_parent", None), "name", None))
