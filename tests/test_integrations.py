"""The trainer callbacks (gobrrr.integrations): the real HF Trainer and Lightning Trainer
on CPU, tiny models, a few steps. Each optimizer step is a step; the window is
`gobrrr run`'s; the report says where the steps came from and carries the phases."""

import json
import textwrap

import pytest
import torch

from gobrrr.schema import validate

# 1 warm-up, 3 timed, 1 + 1 profiled: 6 optimizer steps close the window
WINDOW = {"warmup": 1, "steps": 3, "profiled": 1}
NEED = 6


pytestmark = pytest.mark.usefixtures("cached_cpu_ceilings")  # tests/conftest.py

def _hf_trainer(tmp_path, callback, max_steps, accumulation=1):
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=128,
                                  n_positions=32)
    model = transformers.GPT2LMHeadModel(cfg)
    g = torch.Generator().manual_seed(0)
    data = [{"input_ids": ids, "labels": ids}
            for ids in torch.randint(0, 128, (64, 16), generator=g)]
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path / "out"), max_steps=max_steps, per_device_train_batch_size=4,
        gradient_accumulation_steps=accumulation, learning_rate=1e-3, weight_decay=0.1,
        report_to=[], save_strategy="no", logging_strategy="no", disable_tqdm=True,
        use_cpu=True, dataloader_num_workers=0, seed=0,
        optim="adamw_torch")  # not the fused default: the fused remedy applies
    return transformers.Trainer(model=model, args=args, train_dataset=data,
                                callbacks=[callback])


def test_hf_trainer_steps_are_its_optimizer_steps(tmp_path, capsys):
    from gobrrr.integrations.hf import GobrrrCallback

    cb = GobrrrCallback(**WINDOW, json=tmp_path / "r.json", quiet=True)
    # two micro-batches per optimizer step: still one step each
    _hf_trainer(tmp_path, cb, max_steps=NEED + 2, accumulation=2).train()
    d = json.loads((tmp_path / "r.json").read_text())
    validate(d, "report")
    assert d["workload"]["script"]["steps_from"] == "hf_trainer"
    assert d["steps"]["count"] == 3
    # the one warm-up step has no start to time it from
    assert d["steps"]["series"]["part"] == ["timed"] * 3 + ["profiled"] * 2
    assert {"forward", "backward", "optimizer"} <= set(d["phases"])
    assert sum(p["seconds"] for p in d["phases"].values()) == pytest.approx(
        d["budget"]["wall_s"], rel=1e-9)
    # the Trainer's own AdamW with its two groups (decay, no decay), in the snippet
    fused = next(r for r in d["remedies"] if r["spec"] == "fused_optimizer")
    assert "torch.optim.AdamW([" in fused["how"] and '"weight_decay": 0.1' in fused["how"]
    assert cb.report is not None
    out = capsys.readouterr().out
    assert "gobrrr run" in out  # the terminal report when training ended


def test_hf_training_too_short_for_the_window_says_so(tmp_path, capsys):
    from gobrrr.integrations.hf import GobrrrCallback

    cb = GobrrrCallback(**WINDOW, json=tmp_path / "r.json", quiet=True)
    _hf_trainer(tmp_path, cb, max_steps=NEED - 1).train()
    assert cb.report is None and not (tmp_path / "r.json").exists()
    err = capsys.readouterr().err
    assert "gobrrr: training ended after 5 step(s)" in err and "the window needs 6" in err


def test_hf_stop_after_ends_training_once_the_report_is_written(tmp_path):
    from gobrrr.integrations.hf import GobrrrCallback

    cb = GobrrrCallback(**WINDOW, stop_after=True, print_report=False, quiet=True)
    trainer = _hf_trainer(tmp_path, cb, max_steps=50)
    trainer.train()
    assert cb.report is not None
    assert trainer.state.global_step == NEED


def test_bad_options_are_one_clear_error():
    from gobrrr.integrations.session import CallbackOptions

    with pytest.raises(ValueError, match="steps must be an integer >= 1, not 0"):
        CallbackOptions(steps=0)


LIGHTNING_MODULE = textwrap.dedent('''
    import torch
    from torch import nn

    def make(L):
        class Regressor(L.LightningModule):
            def __init__(self):
                super().__init__()
                self.net = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 1))
            def training_step(self, batch, batch_idx):
                x, y = batch
                return nn.functional.mse_loss(self.net(x), y)
            def configure_optimizers(self):
                return torch.optim.SGD(self.parameters(), lr=0.01, momentum=0.9)
        return Regressor
''')


def _lightning_fit(package, callback, max_steps, accumulation=1):
    L = pytest.importorskip(package)
    ns: dict = {}
    exec(LIGHTNING_MODULE, ns)
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    ds = torch.utils.data.TensorDataset(torch.randn(256, 16, generator=g),
                                        torch.randn(256, 1, generator=g))
    loader = torch.utils.data.DataLoader(ds, batch_size=8)
    trainer = L.Trainer(max_steps=max_steps, accumulate_grad_batches=accumulation,
                        accelerator="cpu", devices=1, logger=False,
                        enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, callbacks=[callback])
    trainer.fit(ns["make"](L)(), loader)
    return trainer


@pytest.mark.parametrize("package,module", [
    ("lightning.pytorch", "gobrrr.integrations.lightning"),
    ("pytorch_lightning", "gobrrr.integrations.pytorch_lightning")])
def test_lightning_steps_are_its_optimizer_steps(tmp_path, package, module):
    pytest.importorskip(package)
    import importlib

    cb = importlib.import_module(module).GobrrrCallback(**WINDOW, json=tmp_path / "r.json",
                                                        print_report=False, quiet=True)
    # three batches per optimizer step: global_step counts the optimizer steps
    trainer = _lightning_fit(package, cb, max_steps=NEED + 1, accumulation=3)
    assert trainer.global_step == NEED + 1
    d = json.loads((tmp_path / "r.json").read_text())
    validate(d, "report")
    assert d["workload"]["script"]["steps_from"] == "lightning"
    assert d["steps"]["count"] == 3
    # the loader's wait is measured (Lightning iterates a plain DataLoader)
    assert d["data_loading"]["host_s"] > 0
    assert {"forward", "backward", "optimizer"} <= set(d["phases"])
    assert sum(p["seconds"] for p in d["phases"].values()) == pytest.approx(
        d["budget"]["wall_s"], rel=1e-9)


def test_under_gobrrr_run_the_callback_stays_out_of_the_way(tmp_path):
    # gobrrr run's own window measures the same optimizer steps: one report, the run's
    from gobrrr.integrations.hf import GobrrrCallback
    from gobrrr.marks import ACTIVE

    cb = GobrrrCallback(**WINDOW, quiet=True)
    ACTIVE.append(object())  # a running script's watcher
    try:
        _hf_trainer(tmp_path, cb, max_steps=NEED)
        cb.session.begin(torch.nn.Linear(2, 2))
    finally:
        ACTIVE.pop()
    assert cb.session.passive and cb.session.window is None
