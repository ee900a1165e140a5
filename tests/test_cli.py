"""The command line: exit codes, JSON on stdout, one-line errors."""

import json
import subprocess
import sys

import pytest
import torch
from click.testing import CliRunner

from gobrrr.cli import cli


def run(*args):
    return CliRunner().invoke(cli, list(args))


def test_version():
    r = run("--version")
    assert r.exit_code == 0 and "0.1.0" in r.output


def test_help_does_not_import_torch():
    code = ("import sys; from gobrrr.cli import cli; "
            "sys.argv=['gobrrr','--help'];\n"
            "try:\n    cli()\nexcept SystemExit:\n    pass\n"
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.stdout.strip().endswith("False"), out.stdout + out.stderr


def test_python_dash_m():
    out = subprocess.run([sys.executable, "-m", "gobrrr", "--version"],
                         capture_output=True, text=True)
    assert out.returncode == 0 and "0.1.0" in out.stdout


def test_unknown_flag_is_usage_error():
    r = run("calibrate", "--no-such-flag")
    assert r.exit_code == 2


def test_unknown_device_is_usage_error():
    r = run("calibrate", "--device", "tpu")
    assert r.exit_code == 2


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-CUDA error")
def test_cuda_without_cuda_is_one_line_error():
    r = run("calibrate", "--device", "cuda")
    assert r.exit_code == 2
    lines = [x for x in r.output.splitlines() if x.strip()]
    assert len(lines) == 1 and "no CUDA device" in lines[0]


def test_calibrate_json_keys():
    r = run("calibrate", "--device", "cpu", "--json", "-q")
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert "fp32" in data["peak_flops_per_s"]
    assert data["bandwidth_bytes_per_s"] > 0
    assert data["op_overhead_s"] > 0
    assert data["fingerprint"]["torch"] == torch.__version__


def test_help_tells_the_two_budgets_apart():
    doctor = " ".join(run("doctor", "--help").output.split())
    optimize = " ".join(run("optimize", "--help").output.split())
    assert "Sampling seconds per measurement" in doctor and "optimize's --budget-s" in doctor
    assert "whole run of remedies" in optimize and "per measurement (that is doctor's" \
        in optimize
