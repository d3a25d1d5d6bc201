"""What this copy of the project is, and the advice that follows from it (stdlib only; no torch).

A checkout (`make app`, `make test`: app.py, ui/ and requirements.txt beside `mla_core`) holds
the `benchmarks/` scripts and `tests/fixtures/`; a pip-installed copy (`pip install
mla-explorer`, its app shipped as `mla_explorer`, mla_core.entry) holds neither, and adds torch
through the `bench` extra of pyproject.toml. The Benchmark page and the command line give the
advice of the copy they run from, and say before anyone clicks that torch is missing.

    setup() -> Setup      checkout, torch_installed, torch_install, cli, h200_script,
                          engine_samples, measure_elsewhere
"""
from __future__ import annotations

import functools
import importlib.util
import os
from dataclasses import asdict, dataclass

from .entry import _checkout_root

TORCH_INSTALL = {"checkout": "pip install -r requirements.txt", "installed": "pip install 'mla-explorer[bench]'"}
H200_SCRIPT = "benchmarks/gpu_h200.sh"
ENGINE_SAMPLES = "tests/fixtures/engines"


@dataclass(frozen=True)
class Setup:
    """This copy: `checkout` (False: pip-installed); `torch_installed` (found on the path; it is
    not imported here); `torch_install`, the command that adds torch to this copy; `cli`, how
    its command line is spelt ('.venv/bin/python -m mla_core', as the README, or 'mla-explorer'); `h200_script` and
    `engine_samples`, the checkout's H200 script and engine-file samples (None where absent);
    `measure_elsewhere`, the command that makes a result on another machine to import here."""

    checkout: bool
    torch_installed: bool
    torch_install: str
    cli: str
    h200_script: str | None
    engine_samples: str | None
    measure_elsewhere: str

    def to_dict(self) -> dict:
        return asdict(self)


_TORCH_FOUND = False


def torch_installed() -> bool:
    """Whether torch can be found (importlib.util.find_spec: nothing is imported). Once found it
    stays found for the process (the app asks on every rerun); a missing torch is looked for again
    each time, so one installed while the server runs is seen."""
    global _TORCH_FOUND
    if not _TORCH_FOUND:
        try:
            _TORCH_FOUND = importlib.util.find_spec("torch") is not None
        except (ImportError, ValueError):
            return False
    return _TORCH_FOUND


@functools.lru_cache(maxsize=1)
def _this_copy() -> dict:
    """The Setup fields that cannot change while the process runs (the copy and its files)."""
    root = _checkout_root()
    checkout = root is not None

    def present(rel: str) -> str | None:
        return rel if checkout and os.path.exists(os.path.join(root, rel)) else None

    h200 = present(H200_SCRIPT)
    cli = ".venv/bin/python -m mla_core" if checkout else "mla-explorer"
    elsewhere = f"bash {h200}" if h200 else f"{cli} bench --device cuda --out result.json"
    return dict(checkout=checkout, torch_install=TORCH_INSTALL["checkout" if checkout else "installed"], cli=cli,
                h200_script=h200, engine_samples=present(ENGINE_SAMPLES), measure_elsewhere=elsewhere)


def setup() -> Setup:
    """This copy's Setup (see the class)."""
    return Setup(torch_installed=torch_installed(), **_this_copy())
