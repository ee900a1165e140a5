"""gobrrr.settings: the user's precision settings survive gobrrr, through the API they
used. On torch >= 2.9 writing a legacy TF32 flag after the new per-backend API was used
(even writing back its own value) breaks `torch.get_float32_matmul_precision()`."""

import pytest
import torch

from gobrrr import settings


@pytest.fixture(autouse=True)
def _restore_torch_state():
    saved = settings.snapshot()
    yield
    settings.restore(saved)


@pytest.mark.parametrize("user", ["highest", "high", "medium"])
def test_matmul_precision_survives_tf32_block_and_error(user):
    torch.set_float32_matmul_precision(user)
    with pytest.raises(ValueError), settings.tf32(True):
        assert settings.tf32_enabled("matmul") and settings.tf32_enabled("conv")
        raise ValueError("the workload failed")
    assert torch.get_float32_matmul_precision() == user  # readable: no mixed-API state
    assert settings.tf32_enabled("matmul") == (user != "highest")


def test_legacy_flag_set_by_the_user_survives():
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = False
    with settings.tf32(False):
        assert not settings.tf32_enabled("matmul")
    with settings.preserved():
        torch.backends.cudnn.benchmark = not torch.backends.cudnn.benchmark
    assert torch.backends.cuda.matmul.allow_tf32 is True
    assert torch.backends.cudnn.allow_tf32 is False
    assert torch.get_float32_matmul_precision() == "high"


@pytest.mark.skipif(not settings.has_precision_api(), reason="torch < 2.9")
def test_new_api_set_by_the_user_survives():
    torch.backends.cuda.matmul.fp32_precision = "tf32"
    torch.backends.cudnn.conv.fp32_precision = "ieee"
    with settings.tf32(True):
        assert settings.tf32_enabled("conv")
    assert torch.backends.cuda.matmul.fp32_precision == "tf32"
    assert torch.backends.cudnn.conv.fp32_precision == "ieee"
    assert settings.tf32_enabled("matmul") and not settings.tf32_enabled("conv")


def test_grad_mode_cudnn_and_inductor_config_are_restored():
    import torch._inductor.config as inductor

    before = (torch.is_grad_enabled(), torch.backends.cudnn.benchmark, inductor.freezing)
    with settings.preserved():
        torch.set_grad_enabled(False)
        torch.backends.cudnn.benchmark = not before[1]
        inductor.freezing = not before[2]
    assert (torch.is_grad_enabled(), torch.backends.cudnn.benchmark,
            inductor.freezing) == before


def test_dynamo_counters_of_the_user_come_back():
    from torch._dynamo.utils import counters

    counters["frames"]["total"] += 7  # the user's own compiles, counted before gobrrr
    mine = dict(counters["frames"])
    with settings.preserved():
        counters.clear()  # gobrrr reads its own compiles from zero
        counters["frames"]["total"] += 1
    assert dict(counters["frames"]) == mine


def test_transformers_once_logging_is_skipped_by_dynamo_inside_the_block():
    """transformers' Logger.warning_once in a compiled function is a graph break (a GPT-2
    built from a config warns about its loss_type in every forward with labels); inside
    once_logging_ignored dynamo skips it, and the set is as it was after the block."""
    import logging

    import torch
    import torch._dynamo
    import transformers.utils.logging  # noqa: F401 - puts warning_once on logging.Logger
    from torch._dynamo.utils import counters

    from gobrrr.settings import ignored_logging_name, once_logging_ignored

    name = ignored_logging_name()
    assert name is not None
    ignored = getattr(torch._dynamo.config, name)
    assert logging.Logger.warning_once not in ignored
    log = logging.getLogger("gobrrr-test-once")

    def fn(x: torch.Tensor) -> torch.Tensor:
        log.warning_once("said once")
        return x * 2

    def breaks() -> int:
        torch._dynamo.reset()
        counters.clear()
        torch.compile(fn, backend="eager")(torch.ones(3))
        return sum(counters["graph_break"].values())

    assert breaks() == 1
    with once_logging_ignored():
        assert logging.Logger.warning_once in ignored
        assert breaks() == 0
    assert logging.Logger.warning_once not in ignored
    torch._dynamo.reset()


def test_once_logging_block_drops_only_the_metrics_loggers_unsortable_set_traceback(
        caplog: pytest.LogCaptureFixture) -> None:
    """torch 2.11 sorts every set of dynamo's config into each compile's metrics; with
    functions in one that raises, logged at ERROR per compile. Inside the block that
    record is dropped; any other error of that logger, and the same one after the
    block, still reaches the user."""
    import logging

    import transformers.utils.logging  # noqa: F401 - puts warning_once on logging.Logger

    from gobrrr.settings import once_logging_ignored

    log = logging.getLogger("torch._dynamo.metrics_context")

    def fail(exc: Exception) -> None:
        try:
            raise exc
        except Exception:
            log.exception("Unexpected exception logging compilation metrics")

    unsortable = TypeError("'<' not supported between instances of "
                           "'functools._lru_cache_wrapper' and 'functools._lru_cache_wrapper'")
    with caplog.at_level(logging.ERROR, logger="torch._dynamo.metrics_context"):
        with once_logging_ignored():
            fail(unsortable)
            fail(TypeError("Object of type _lru_cache_wrapper is not JSON serializable"))
            fail(ValueError("something else"))
        fail(TypeError("'<' not supported between instances of 'a' and 'b'"))
    errors = [str(r.exc_info[1]) for r in caplog.records if r.exc_info]
    assert errors == ["something else", "'<' not supported between instances of 'a' and 'b'"]


def test_metrics_trip_is_read_from_dynamos_own_config_writer(monkeypatch):
    """True where dynamo's config writer raises on the functions in the set (torch 2.11
    sorts every set), False where it writes (torch 2.13 leaves the set out); the set is
    as it was either way."""
    import logging

    import torch._dynamo.config as dynamo
    import torch._dynamo.utils as dynamo_utils
    import transformers.utils.logging  # noqa: F401 - puts warning_once on logging.Logger

    from gobrrr.settings import ignored_logging_name, metrics_trip_on_ignored_functions

    name = ignored_logging_name()
    assert name is not None
    ignored = getattr(dynamo, name)
    before = set(ignored)

    def sorts_every_set() -> str:
        return str(sorted(getattr(dynamo, name)))

    monkeypatch.setattr(dynamo_utils, "_get_dynamo_config_for_logging", sorts_every_set)
    assert metrics_trip_on_ignored_functions() is True
    assert logging.Logger.warning_once not in ignored and set(ignored) == before
    monkeypatch.setattr(dynamo_utils, "_get_dynamo_config_for_logging", lambda: "{}")
    assert metrics_trip_on_ignored_functions() is False
    monkeypatch.delattr(dynamo_utils, "_get_dynamo_config_for_logging")
    assert metrics_trip_on_ignored_functions() is False
    assert set(ignored) == before


def test_inductors_tf32_advice_is_quiet_inside_the_block_and_only_it():
    import warnings

    advice = settings.TF32_ADVICE + ". Consider setting `torch.set_float32_matmul_precision`"
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with settings.tf32_advice_quiet():
            warnings.warn(advice, stacklevel=1)
            warnings.warn("another warning", stacklevel=1)
        warnings.warn(advice, stacklevel=1)
    assert [str(x.message) for x in seen] == ["another warning", advice]


def test_a_compile_candidate_holds_the_tf32_advice_quiet():
    from gobrrr.remedies.base import Candidate, Context
    from gobrrr.remedies.compiled import compile_candidate

    cand = Candidate(lambda: None, (), {}, [], [], [])
    ctx = Context(device="cpu")
    out = compile_candidate(cand, ctx, None)
    assert settings.tf32_advice_quiet in out.switches


@pytest.mark.cuda
def test_an_fp32_compile_on_a_tf32_gpu_does_not_advise_tf32_inside_the_block():
    import warnings

    import torch._inductor.compile_fx as compile_fx
    import torch._inductor.config as inductor_config

    if torch.cuda.get_device_capability() < (8, 0):
        pytest.skip("no TF32 tensor cores: Inductor gives no advice")

    def compiled_linear() -> None:
        torch._dynamo.reset()
        compile_fx._warn_tf32_disabled.cache_clear()  # once a process otherwise
        x = torch.randn(64, 64, device="cuda")
        # Inductor advises in codegen, which a cache hit skips (the control's graph is
        # the first one's: on the H100 it advised nothing, session am)
        with inductor_config.patch(force_disable_caches=True):
            torch.compile(lambda a: (a @ a).relu())(x)

    with settings.tf32(False), warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with settings.tf32_advice_quiet():
            compiled_linear()
        inside = [str(x.message) for x in seen if settings.TF32_ADVICE in str(x.message)]
        compiled_linear()  # the control: Inductor advises without the block
        after = [str(x.message) for x in seen if settings.TF32_ADVICE in str(x.message)]
    assert inside == [] and len(after) == 1
