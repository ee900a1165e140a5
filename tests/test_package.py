"""The installed package agrees with itself: one version, shown by `gobrrr --version`.

No build here (that is `make package-check`): these read the metadata of the install the
tests run against, so a version bumped in one place and not the other fails at once.
"""

from __future__ import annotations

import importlib.metadata

from click.testing import CliRunner

import gobrrr
from gobrrr.cli import cli


def test_version_matches_installed_metadata():
    # pyproject reads the version from gobrrr.__version__; the metadata pip wrote must agree
    # (a stale editable install, or a version typed into pyproject again, would not).
    assert gobrrr.__version__ == importlib.metadata.version("gobrrr")


def test_cli_version_prints_it():
    result = CliRunner().invoke(cli, ["--version"])
    assert result.exit_code == 0, result.output
    assert result.output.strip() == f"gobrrr, version {gobrrr.__version__}"
