"""`pip install .` into a fresh virtual environment gives a working `mla-explorer` (pyproject.toml).

The project is copied to a temporary folder and installed into a new venv, with `--no-deps`:
its dependencies (numpy, streamlit, plotly, pandas, jsonschema, torch) are lent from the test's
own environment through a .pth file, so nothing is downloaded and torch is not installed twice.
Every check then runs from an empty folder outside the checkout, so the installed copy (its
mla_core, presets in mla_core/data, and the app in mla_explorer/) is what answers:
- each `python -m mla_core` subcommand is an `mla-explorer` subcommand: same JSON, same
  one-line error with exit status 2;
- `mla-explorer app` serves the app: `/_stcore/health` answers "ok" on a loopback port;
- the installed app.py runs its default page (AppTest) and shows the core's figure.
"""
import json
import os
import shutil
import signal
import site
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from conftest import ROOT

pytestmark = pytest.mark.timeout(600)

IGNORE = shutil.ignore_patterns(".git", ".venv", "var", "out", "build", "dist", "*.egg-info", "__pycache__",
                                ".pytest_cache", ".hypothesis", "benchmarks", "tests", "screenshots")


def _venv_python(venv: str) -> str:
    return os.path.join(venv, "bin", "python")


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(venv folder, an empty working folder, an environment for subprocesses)."""
    base = tmp_path_factory.mktemp("install")
    src = base / "src"
    shutil.copytree(ROOT, src, ignore=IGNORE, symlinks=False)
    venv = str(base / "venv")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", venv], check=True, timeout=120)
    py = _venv_python(venv)
    purelib = subprocess.run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    lent = [p for p in site.getsitepackages() if os.path.isdir(p)]
    with open(os.path.join(purelib, "_mla_explorer_test_deps.pth"), "w") as f:
        f.write("\n".join(lent) + "\n")
    work = base / "work"
    (work / "home").mkdir(parents=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "MLA_EXPLORER", "VIRTUAL_ENV"))}
    env.update(HOME=str(work / "home"), PATH=os.path.join(venv, "bin") + os.pathsep + env.get("PATH", ""),
               PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_INPUT="1")
    p = subprocess.run([py, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--no-index", str(src)],
                       capture_output=True, text=True, cwd=work, env=env, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    return venv, str(work), env


def _run(installed, *args, timeout=120):
    venv, work, env = installed
    return subprocess.run([os.path.join(venv, "bin", "mla-explorer"), *args], capture_output=True, text=True,
                          cwd=work, env=env, timeout=timeout)


def _checkout(*args):
    return subprocess.run([sys.executable, "-m", "mla_core", *args], capture_output=True, text=True, cwd=ROOT,
                          env=dict(os.environ, PYTHONPATH=ROOT), timeout=120)


def test_the_installed_copy_is_what_runs(installed):
    venv, work, env = installed
    code = ("import mla_core, mla_core.presets as p, mla_core.entry as e; "
            "print(mla_core.__file__); print(p.DATA_DIR); print(e.app_root())")
    p = subprocess.run([_venv_python(venv), "-c", code], capture_output=True, text=True, cwd=work, env=env)
    assert p.returncode == 0, p.stderr
    core, data, app = p.stdout.split("\n")[:3]
    for path in (core, data, app):
        assert path.startswith(venv) and not path.startswith(ROOT), path
    assert data.endswith(os.path.join("mla_core", "data")) and app.endswith("mla_explorer")
    # Every module of the checkout's core, ui and pages is in the installed copy (a package
    # added later without being listed in pyproject.toml fails here).
    site_dir = os.path.dirname(os.path.dirname(core))
    for folder, dest in (("mla_core", "mla_core"), ("ui", os.path.join("mla_explorer", "ui")),
                         ("pages", os.path.join("mla_explorer", "pages"))):
        for dirpath, _, files in os.walk(os.path.join(ROOT, folder)):
            if "__pycache__" in dirpath:
                continue
            for name in files:
                if name.endswith((".py", ".json")):
                    rel = os.path.relpath(os.path.join(dirpath, name), os.path.join(ROOT, folder))
                    assert os.path.exists(os.path.join(site_dir, dest, rel)), f"{folder}/{rel} not installed"
    for name in ("models.json", "gpus.json", "claims.json"):
        assert os.path.exists(os.path.join(data, name))
    assert os.path.exists(os.path.join(app, ".streamlit", "config.toml"))
    assert os.path.exists(os.path.join(app, "docs", "model.md"))
    # pip sees the declared dependencies satisfied.
    p = subprocess.run([_venv_python(venv), "-m", "pip", "check"], capture_output=True, text=True, cwd=work, env=env)
    assert "mla-explorer" not in p.stdout.lower(), p.stdout


@pytest.mark.parametrize("args", [
    ("kv", "--model", "deepseek-v3", "--context", "131072", "--kv-dtype", "bf16"),
    ("kv", "--attention", "mla", "--layers", "60", "--heads", "128", "--kv-lora-rank", "512", "--rope-dim", "64",
     "--context", "1"),
    ("capacity", "--model", "deepseek-v3", "--gpu", "h200", "--num-gpus", "8", "--tp", "8", "--kv-dtype", "fp8",
     "--context", "131072"),
    ("roofline", "--model", "deepseek-v3", "--gpu", "h800", "--context", "32768", "--batch", "64"),
    ("presets",),
])
def test_subcommands_give_the_same_json(installed, args):
    got = _run(installed, *args, "--json")
    assert got.returncode == 0, got.stderr
    want = _checkout(*args, "--json")
    assert json.loads(got.stdout) == json.loads(want.stdout)


def test_the_pinned_figures_and_a_table(installed):
    r = json.loads(_run(installed, "kv", "--model", "deepseek-v3", "--context", "131072", "--kv-dtype", "bf16",
                        "--json").stdout)
    assert r["kv_bytes_per_token"] == 70272 and r["kv_cache_bytes"] == 9210691584
    table = _run(installed, "capacity", "--model", "deepseek-v3", "--gpu", "h200", "--num-gpus", "8", "--tp", "8",
                 "--kv-dtype", "fp8", "--context", "131072").stdout
    assert "whole requests of 128K tokens at once  11" in table and "1,490,752 tokens" in table


def test_every_subcommand_is_there_and_errors_are_one_line(installed):
    from mla_core.cli import COMMANDS

    for command in COMMANDS:  # a subcommand added to mla_core.cli appears by itself
        p = _run(installed, command, "--help")
        assert p.returncode == 0 and "usage:" in p.stdout.lower(), (command, p.stderr[-500:])
    p = _run(installed, "kv", "--model", "no-such-model", "--context", "10")
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1 and "Traceback" not in p.stderr
    assert p.stderr.startswith("mla-explorer kv: error:")
    assert "docs/model.md" in _run(installed, "--help").stdout


def test_bench_measures_from_the_installed_copy(installed):
    # The smallest real run (torch on the CPU): a copy and an absorbed MLA decode step.
    p = _run(installed, "bench", "--device", "cpu", "--batch", "1", "--context", "64", "--heads", "2",
             "--gqa-groups", "1", "--stream-bytes", "1M", "--matmul-n", "64", "--reps", "3", "--budget-s", "0.05",
             "--kernels", "copy,mla_absorbed_decode", "--no-progress", "--json", timeout=300)
    assert p.returncode == 0, p.stderr[-1000:]
    result = json.loads(p.stdout)
    assert [r["kernel"] for r in result["results"]] == ["copy", "mla_absorbed_decode"]
    assert all(r["median_s"] > 0 for r in result["results"])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_app_serves_health_from_the_installed_copy(installed):
    venv, work, env = installed
    port = _free_port()
    # No --server.address: the shipped .streamlit/config.toml beside the installed app.py must keep
    # the server on loopback, as `make app` does.
    proc = subprocess.Popen([os.path.join(venv, "bin", "mla-explorer"), "app", "--server.port", str(port)],
                            cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        body, deadline = None, time.monotonic() + 90
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=5) as r:
                    body = r.read().decode()
                    break
            except OSError:
                time.sleep(0.5)
        assert body == "ok", f"no health answer; server said: {proc.stdout.read() if proc.poll() is not None else ''}"
    finally:
        os.killpg(proc.pid, signal.SIGTERM)  # the server we started, and only it
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
    said = proc.stdout.read()
    assert f"http://127.0.0.1:{port}" in said and "Network URL" not in said, said
    assert "usage statistics" not in said, said  # gatherUsageStats = false, from the same file


def test_installed_app_runs_its_default_page(installed):
    venv, work, env = installed
    code = (
        "import os, sys\n"
        "from streamlit.testing.v1 import AppTest\n"
        "at = AppTest.from_file(os.path.join(sys.argv[1], 'app.py'), default_timeout=120).run()\n"
        "assert not at.exception, [x.message for x in at.exception]\n"
        "import html, re\n"
        "for h in at.get('html'):\n"
        "    for label, value in re.findall(r'data-label=\"([^\"]*)\" data-value=\"([^\"]*)\"', h.proto.body):\n"
        "        print(f'{html.unescape(label)}: {html.unescape(value)}')\n"
    )
    app = subprocess.run([_venv_python(venv), "-c", "import mla_core.entry as e; print(e.app_root())"],
                         capture_output=True, text=True, cwd=work, env=env).stdout.strip()
    p = subprocess.run([_venv_python(venv), "-c", code, app], capture_output=True, text=True, cwd=work, env=env,
                       timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    # The same page of the checkout shows the same figures.
    want = subprocess.run([sys.executable, "-c", code, ROOT], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert want.returncode == 0, want.stderr[-2000:]
    assert p.stdout == want.stdout
    assert "KV bytes per token: 68.6 KiB" in p.stdout.splitlines()  # DeepSeek-V3 at bf16: 70,272 B


def test_app_help_of_the_installed_command_says_what_the_app_is(installed):
    p = _run(installed, "app", "--help")
    assert p.returncode == 0, p.stderr[-1000:]
    assert p.stdout.startswith("usage: mla-explorer app [streamlit run options]\n\nServe the MLA explorer in a browser")
    assert "\nOptions:\n" in p.stdout and "--server.port" in p.stdout


def test_the_installed_benchmark_page_gives_the_installed_copys_advice(installed):
    venv, work, env = installed
    code = (
        "import os, sys\n"
        "from streamlit.testing.v1 import AppTest\n"
        "at = AppTest.from_file(os.path.join(sys.argv[1], 'app.py'), default_timeout=120).run()\n"
        "at.switch_page('pages/benchmark.py').run()\n"
        "assert not at.exception, [x.message for x in at.exception]\n"
        "print(' '.join(str(e.proto) for e in at.main))\n"
    )
    app = _run_py(installed, "import mla_core.entry as e; print(e.app_root())").stdout.strip()
    p = subprocess.run([_venv_python(venv), "-c", code, app], capture_output=True, text=True, cwd=work,
                       env=dict(env, MLA_EXPLORER_HISTORY=os.path.join(work, "h.sqlite3")), timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    for absent in ("requirements.txt", "benchmarks/gpu_h200.sh", "tests/fixtures/engines"):
        assert absent not in p.stdout, absent  # an installed copy has none of them
    assert "mla-explorer bench --device cuda --out result.json" in p.stdout
    setup = json.loads(_run_py(installed, "import json, mla_core.install as i; print(json.dumps(i.setup().to_dict()))")
                       .stdout)
    assert setup["checkout"] is False and setup["torch_install"] == "pip install 'mla-explorer[bench]'"
    assert setup["h200_script"] is None and setup["engine_samples"] is None


def test_the_store_ships_with_its_schemas(installed):
    code = ("import os, mla_core.store.schema as s; print(sorted(os.path.basename(p) for p in s.SCHEMA_PATHS.values() "
            "if os.path.isfile(p)))")
    assert _run_py(installed, code).stdout.strip() == str(sorted(
        ["result.schema.json", "collectives.schema.json", "engine.schema.json", "profile.schema.json"]))


def _run_py(installed, code: str):
    venv, work, env = installed
    return subprocess.run([_venv_python(venv), "-c", code], capture_output=True, text=True, cwd=work, env=env,
                          timeout=120)
