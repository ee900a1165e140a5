"""gobrrr's version: one source (pyproject reads it statically; the package, the CLI and
every report read it from here)."""

__version__ = "0.1.0"
