"""Pinned, checked and visible versions: the one tested set `gateway init` renders
(worker_templates/versions.json), and the versions every backend reports.

The Worker gateway's own reports, the version check of each rendered Worker's build and a
runtime of another protocol are exercised in workerd (tests/workerd/).
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import jsonschema_rs
import pytest

from tests.cli import cli_env, one_error_line, run_cli
from tests.serve_process import ServeProcess, serve_process
from workbench import __version__
from workbench.api import VersionReport
from workbench.backends.local import open_local_backend
from workbench.deploy.templates import TEMPLATES_ENV, render
from workbench.deploy.versions import load_versions

ROOT = Path(__file__).resolve().parent.parent
TEMPLATES = ROOT / "worker_templates"
OPENAPI = ROOT / "docs" / "gateway-openapi.json"
LANGUAGES = ("javascript", "python", "perl", "ruby")
EXACT = re.compile(r"\d+\.\d+\.\d+(?:-[0-9A-Za-z.-]+)?")
PACKAGE_SPEC = re.compile(r'"(@sandbox-workers/[a-z]+)"\s*:\s*"([^"]*)"')
"""Every `"@sandbox-workers/x": "<spec>"` pair of a rendered file."""


def versions_file() -> dict[str, Any]:
    data = json.loads((TEMPLATES / "versions.json").read_text())
    assert isinstance(data, dict)
    return data


def rendered_specs(directory: Path) -> dict[str, set[str]]:
    """Each `@sandbox-workers/*` package → every spec the rendered JSON files give it."""
    specs: dict[str, set[str]] = {}
    for path in directory.rglob("*.json"):
        for name, spec in PACKAGE_SPEC.findall(path.read_text()):
            specs.setdefault(name, set()).add(spec)
    return specs


# ----- the set -------------------------------------------------------------------------


def test_the_set_pins_the_core_and_every_runtime_exactly() -> None:
    data = versions_file()
    packages = data["packages"]
    assert set(packages) == {"@sandbox-workers/core"} | {
        f"@sandbox-workers/{language}" for language in LANGUAGES
    }
    assert all(EXACT.fullmatch(version) for version in packages.values()), packages
    assert data["interpreterProtocol"] == 1
    # Where it comes from: the reference repository's own template pin.
    assert data["source"]["repository"] == "syumai/sandbox-workers"
    assert data["source"]["pin"] == "scripts/template-pin.json"
    assert re.fullmatch(r"[0-9a-f]{40}", data["source"]["commit"])


def test_gateway_init_renders_the_set_and_no_range(tmp_path: Path) -> None:
    completed = run_cli(cli_env(tmp_path), "gateway", "init", str(tmp_path / "deploy"))
    assert completed.returncode == 0, completed.stderr
    packages = versions_file()["packages"]
    specs = rendered_specs(tmp_path / "deploy")
    # package.json of every Worker, and the gateway's lockfile: only the pinned version.
    assert specs == {name: {version} for name, version in packages.items()}
    for language in LANGUAGES:
        worker = tmp_path / "deploy" / "runtime" / language
        manifest = json.loads((worker / "package.json").read_text())
        pinned = packages[f"@sandbox-workers/{language}"]
        assert manifest["peerDependencies"] == {f"@sandbox-workers/{language}": pinned}
        readme = (worker / "README.md").read_text()
        assert f"**`@sandbox-workers/{language}` {pinned}**" in readme
        assert f"npm install --no-save @sandbox-workers/{language}@{pinned}" in readme
    readme = (tmp_path / "deploy" / "gateway" / "README.md").read_text()
    for name, version in packages.items():
        assert f"| `{name}` | {version} |" in readme
    core = packages["@sandbox-workers/core"]
    assert f"npm install --no-save @sandbox-workers/core@{core}" in completed.stdout


def test_the_checked_in_gateway_agrees_with_the_set(tmp_path: Path) -> None:
    """The gateway template is also used as it is (type check, lockfile install): its
    pins and its README's versions block must be the rendered ones."""
    render(tmp_path, ["PYTHON"])
    for name in ("package.json", "package-lock.json", "README.md"):
        assert (TEMPLATES / "gateway" / name).read_text() == (
            tmp_path / "gateway" / name
        ).read_text(), name


@pytest.fixture
def templates_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private copy of the templates, used by `render` and `gateway init`."""
    copy = tmp_path / "templates"
    shutil.copytree(TEMPLATES, copy, ignore=shutil.ignore_patterns("node_modules"))
    monkeypatch.setenv(TEMPLATES_ENV, str(copy))
    return copy


def test_the_renderer_takes_the_set_from_versions_json(
    templates_copy: Path, tmp_path: Path
) -> None:
    path = templates_copy / "versions.json"
    data = json.loads(path.read_text())
    data["packages"]["@sandbox-workers/core"] = "0.3.1"
    data["packages"]["@sandbox-workers/perl"] = "0.3.2-rc.1"
    path.write_text(json.dumps(data))
    env = cli_env(tmp_path, **{TEMPLATES_ENV: str(templates_copy)})
    completed = run_cli(env, "gateway", "init", str(tmp_path / "out"), "--bindings", "PERL")
    assert completed.returncode == 0, completed.stderr
    assert "pinned: @sandbox-workers/core 0.3.1, @sandbox-workers/perl 0.3.2-rc.1" in (
        completed.stdout
    )
    assert rendered_specs(tmp_path / "out") == {
        "@sandbox-workers/core": {"0.3.1"},
        "@sandbox-workers/perl": {"0.3.2-rc.1"},
    }
    assert (
        "| `@sandbox-workers/core` | 0.3.1 |"
        in (tmp_path / "out" / "gateway" / "README.md").read_text()
    )


@pytest.mark.parametrize("bad", ["^0.2.0", "~0.2.0", "*", "latest", "0.2", ">=0.2.0 <1"])
def test_a_range_in_the_set_is_refused_in_one_line(
    templates_copy: Path, tmp_path: Path, bad: str
) -> None:
    path = templates_copy / "versions.json"
    data = json.loads(path.read_text())
    data["packages"]["@sandbox-workers/python"] = bad
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match="must be one exact version"):
        load_versions(templates_copy)
    env = cli_env(tmp_path, **{TEMPLATES_ENV: str(templates_copy)})
    completed = run_cli(env, "gateway", "init", str(tmp_path / "out"))
    assert completed.returncode == 1
    assert f"@sandbox-workers/python must be one exact version, not {bad!r}" in (
        one_error_line(completed)
    )
    assert not (tmp_path / "out").exists()


# ----- what the backends report --------------------------------------------------------


def response_validator(path: str) -> Any:
    """The OpenAPI document's 200 schema of `GET path`."""
    document = json.loads(OPENAPI.read_text())
    pointer = path.replace("/", "~1")
    ref = f"#/paths/{pointer}/get/responses/200/content/application~1json/schema"
    return jsonschema_rs.validator_for({**document, "$ref": ref})


def assert_reports_the_workbench_core(health: dict[str, Any], listed: dict[str, Any]) -> None:
    core = {"name": "sandbox-workbench", "version": __version__, "interpreterProtocol": 1}
    assert health["core"] == core
    assert listed["core"] == core
    assert health["runtimes"] == listed["runtimes"]
    assert [entry["binding"] for entry in health["runtimes"]] == [
        "JAVASCRIPT",
        "PYTHON",
        "PERL",
        "RUBY",
    ]
    for entry in health["runtimes"]:
        assert entry["protocol"] == 1
        assert entry["engine"]  # the engine's own version string
    response_validator("/v1/health").validate(health)
    response_validator("/v1/runtimes").validate(listed)
    report = VersionReport.read(health)
    assert (report.core, report.interpreter_protocol, report.warnings) == (
        f"sandbox-workbench {__version__}",
        1,
        [],
    )


async def test_the_local_backend_reports_its_versions(tmp_path: Path) -> None:
    backend = open_local_backend(tmp_path / "data", embedded=True)
    try:
        health = await backend.health()
        listed = await backend.transport.request("GET", "/v1/runtimes")
        assert_reports_the_workbench_core(health, json.loads(listed.body))
    finally:
        await backend.aclose()


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    with serve_process(tmp_path_factory.mktemp("versions-serve")) as process:
        yield process


def test_serve_reports_its_versions(served: ServeProcess) -> None:
    health = httpx.get(f"{served.url}/v1/health").json()
    listed = httpx.get(
        f"{served.url}/v1/runtimes", headers={"authorization": f"Bearer {served.token}"}
    ).json()
    assert_reports_the_workbench_core(health, listed)


def test_a_report_names_each_runtime_of_another_protocol() -> None:
    answer = {
        "ok": True,
        "version": "0.1.0",
        "protocol": 1,
        "core": {"name": "@sandbox-workers/core", "version": "0.2.0", "interpreterProtocol": 1},
        "runtimes": [
            {"binding": "PYTHON", "language": "python", "engine": "CPython 3.14.6 / goccy v0.2.0",
             "contexts": True, "protocol": 1},
            {"binding": "PERL", "language": "perl", "engine": "Perl 5.44.0 / goccy v0.3.0",
             "contexts": True, "protocol": 2},
        ],
    }  # fmt: skip
    report = VersionReport.read(answer)
    assert report.core == "@sandbox-workers/core 0.2.0"
    assert [runtime.binding for runtime in report.mismatched] == ["PERL"]
    assert report.warnings == [
        "runtime PERL (Perl 5.44.0 / goccy v0.3.0) speaks interpreter protocol 2, but "
        "@sandbox-workers/core 0.2.0 expects 1: its code contexts will fail; deploy the "
        "runtime at the pinned version (sandbox-workbench gateway init)"
    ]
    # A server older than the versions report, or an answer of another shape: nothing.
    older = VersionReport.read({"ok": True, "version": "0.0.9", "protocol": 1})
    assert (older.core, older.interpreter_protocol, older.warnings) == ("", None, [])
    assert VersionReport.read(["not", "an", "object"]).warnings == []
    # A protocol no int holds (`1e999` parses as infinity) raised OverflowError (review).
    infinite = json.loads(json.dumps(answer).replace('"protocol": 2', '"protocol": 1e999'))
    assert VersionReport.read(infinite).warnings == []
