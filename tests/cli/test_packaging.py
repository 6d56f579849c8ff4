"""Packaging: the wheel carries every package and the Worker templates; the optional
extras (`serve`, `keyring`) really are optional; light commands never load wasmtime."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.cli import ROOT, cli_env, run_cli, serving

SHIPPED = ("pyproject.toml", "README.md", "workbench", "engines", "worker_templates")
NOT_COPIED = shutil.ignore_patterns("__pycache__", "node_modules", ".wrangler", "*.pyc")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel `pip wheel` builds from a copy of the tree (offline: the test extra
    installs the build backend), with stray installs and a token in the templates."""
    source = tmp_path_factory.mktemp("source")
    for name in SHIPPED:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, source / name, ignore=NOT_COPIED)
        else:
            shutil.copy(ROOT / name, source / name)
    gateway = source / "worker_templates" / "gateway"
    (gateway / "node_modules" / "left-pad").mkdir(parents=True)
    (gateway / "node_modules" / "left-pad" / "index.js").write_text("module.exports = 1\n")
    (gateway / ".dev.vars").write_text("WORKBENCH_TOKEN=never-ship-me\n")
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
         str(source), "-w", str(out)],
        check=True, capture_output=True, timeout=600, cwd=source,
    )  # fmt: skip
    (built,) = out.glob("sandbox_workbench-*.whl")
    return built


def test_the_wheel_holds_every_package_and_the_templates(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    templates = "workbench/worker_templates/"
    for expected in (
        "gateway/wrangler.jsonc",
        "gateway/src/index.ts",
        "gateway/package-lock.json",
        "gateway/.gitignore",
        "runtime/index.js",
        "runtime/wrangler.jsonc",
        "versions.json",
        "check-versions.mjs",
    ):
        assert templates + expected in names
    assert not [name for name in names if "node_modules" in name or ".dev.vars" in name]
    missing = sorted(
        str(directory.relative_to(ROOT))
        for top in ("workbench", "engines")
        for directory in (ROOT / top).rglob("*")
        if directory.is_dir()
        and "__pycache__" not in directory.parts
        and any(directory.glob("*.py"))
        and not any(name.startswith(f"{directory.relative_to(ROOT).as_posix()}/") for name in names)
    )
    assert missing == []


def test_gateway_init_finds_the_templates_in_the_installed_wheel(
    wheel: Path, tmp_path: Path
) -> None:
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    env = cli_env(tmp_path)
    env.pop("PYTHONPATH")
    probe = (
        f"import sys; sys.path.insert(0, {str(site)!r})\n"
        "from workbench.deploy.templates import templates_root\n"
        "print(templates_root())\n"
        "from workbench.cli.main import main\n"
        "main()\n"
    )
    rendered = subprocess.run(
        [sys.executable, "-c", probe, "gateway", "init", str(tmp_path / "deploy"),
         "--bindings", "python"],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60,
    )  # fmt: skip
    assert rendered.returncode == 0, rendered.stderr
    assert rendered.stdout.splitlines()[0] == str(site / "workbench" / "worker_templates")
    assert (tmp_path / "deploy" / "gateway" / "wrangler.jsonc").is_file()
    assert (tmp_path / "deploy" / "runtime" / "python" / "index.js").is_file()


def loaded_modules(env: dict[str, str], *args: str) -> set[str]:
    """Top-level modules imported by one CLI invocation (in a fresh interpreter)."""
    probe = (
        "import atexit, json, sys\n"
        "atexit.register(lambda: print('MODULES=' + json.dumps("
        "sorted({m.split('.')[0] for m in sys.modules})), file=sys.stderr))\n"
        "from workbench.cli.main import main\n"
        "main()\n"
    )
    completed = subprocess.run(
        [sys.executable, "-c", probe, *args],
        capture_output=True, text=True, env=env, cwd=ROOT, timeout=120,
    )  # fmt: skip
    line = completed.stderr.splitlines()[-1]
    assert line.startswith("MODULES="), completed.stderr
    return set(json.loads(line.removeprefix("MODULES=")))


def test_light_commands_do_not_load_engines(tmp_path: Path) -> None:
    env = cli_env(tmp_path)
    for args in (("--help",), ("locate",), ("profiles", "list"), ("run", "--help")):
        loaded = loaded_modules(env, *args)
        assert not {"wasmtime", "textual", "httpx"} & loaded, args
    added = loaded_modules(
        env, "profiles", "add", "s", "--url", "https://s.example", "--token-env", "T"
    )
    assert "wasmtime" not in added
    assert "wasmtime" in loaded_modules(env, "engines", "list")  # the probe sees imports


def test_a_remote_run_does_not_load_wasmtime(tmp_path: Path) -> None:
    token = "test-token-0123456789"
    env = cli_env(tmp_path, SANDBOX_WORKBENCH_TOKEN=token, DEV_TOKEN=token)
    with serving(env, "--data-dir", str(tmp_path / "served")) as (_, url):
        run_cli(env, "profiles", "add", "dev", "--url", url, "--token-env", "DEV_TOKEN")
        for chosen in (("-b", "PYTHON"), ("-l", "python")):
            loaded = loaded_modules(env, "run", "-p", "dev", *chosen, "-c", "6 * 7")
            assert "wasmtime" not in loaded, chosen


WITHOUT_EXTRAS = (
    "import sys\n"
    "sys.modules.update(httptools=None, uvloop=None, keyring=None)  # not installed\n"
    "from workbench.cli.main import main\n"
    "main()\n"
)


def test_serve_and_profiles_work_without_the_optional_extras(tmp_path: Path) -> None:
    token = "test-token-0123456789"
    env = cli_env(tmp_path, SANDBOX_WORKBENCH_TOKEN=token, DEV_TOKEN=token)
    served = subprocess.Popen(
        [sys.executable, "-c", WITHOUT_EXTRAS, "serve", "--port", "0",
         "--data-dir", str(tmp_path / "served")],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
    )  # fmt: skip
    try:
        assert served.stdout is not None
        first = served.stdout.readline()
        assert "listening on http://127.0.0.1:" in first, first + served.stdout.read()
        url = first.split("listening on ", 1)[1].split()[0]
        run_cli(env, "profiles", "add", "dev", "--url", url, "--token-env", "DEV_TOKEN")
        listed = run_cli(env, "sandboxes", "list", "-p", "dev")
        assert (listed.returncode, listed.stdout) == (0, "no sandboxes\n")
    finally:
        served.terminate()
        served.wait(timeout=20)
    keyring = subprocess.run(
        [sys.executable, "-c", WITHOUT_EXTRAS, "profiles", "add", "k", "--url",
         "https://k.example", "--keyring", "--token-stdin"],
        input="a-token\n", capture_output=True, text=True, env=env, timeout=60,
    )  # fmt: skip
    assert keyring.returncode == 1
    assert "pip install 'sandbox-workbench[keyring]'" in keyring.stderr
    assert "Traceback" not in keyring.stderr


def test_a_local_command_loads_only_the_daemons_client(tmp_path: Path, perl_engine: None) -> None:
    env = cli_env(tmp_path)
    for args in (("run", "-s", "s", "-b", "PERL", "-c", "1"), ("sandboxes", "list")):
        loaded = loaded_modules(env, *args)
        assert "workbench" in loaded and not {"wasmtime", "textual", "httpx", "uvicorn"} & loaded
