"""A training step that reaches its model and optimizer as module globals, the way a
script or notebook usually writes it."""

import torch

torch.manual_seed(3)
model = torch.nn.Linear(8, 8)
opt = torch.optim.SGD(model.parameters(), lr=0.5)
x = torch.randn(4, 8)


def step():
    opt.zero_grad()
    model(x).square().sum().backward()
    opt.step()
