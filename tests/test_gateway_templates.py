"""The Worker templates: rendering (`workbench.gateway_templates`) and the gateway type check."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from workbench import __version__
from workbench.gateway_templates import normalize_bindings, render, templates_root

ROOT = Path(__file__).resolve().parent.parent
TEMPLATES = ROOT / "worker_templates"


def _jsonc(text: str) -> object:
    """Parse the templates' JSONC: whole-line `//` comments only, no trailing commas."""
    lines = [line for line in text.splitlines() if not line.lstrip().startswith("//")]
    return json.loads("\n".join(lines))


def test_templates_are_found_in_the_repository() -> None:
    assert templates_root() == TEMPLATES


def test_render_gateway_and_chosen_runtimes(tmp_path: Path) -> None:
    written = render(tmp_path, ["python", "RUBY"])

    relative = {path.relative_to(tmp_path).as_posix() for path in written}
    assert {
        "gateway/wrangler.jsonc",
        "gateway/package.json",
        "gateway/package-lock.json",
        "gateway/tsconfig.json",
        "gateway/README.md",
        "gateway/.gitignore",
        "gateway/src/index.ts",
        "gateway/src/registry.ts",
        "gateway/types/sandbox-workers-core.d.ts",
        "runtime/python/wrangler.jsonc",
        "runtime/python/index.js",
        "runtime/python/package.json",
        "runtime/python/README.md",
        "runtime/ruby/wrangler.jsonc",
        "runtime/ruby/index.js",
    } <= relative
    assert not any(name.startswith(("runtime/javascript", "runtime/perl")) for name in relative)
    assert not any("node_modules" in name for name in relative)
    assert all(path.is_file() for path in written)

    config = _jsonc((tmp_path / "gateway" / "wrangler.jsonc").read_text())
    assert isinstance(config, dict)
    assert config["services"] == [
        {"binding": "PYTHON", "service": "sandbox-python"},
        {"binding": "RUBY", "service": "sandbox-ruby"},
    ]
    assert config["vars"]["RUNTIME_BINDINGS"] == "PYTHON,RUBY"
    assert config["main"] == "src/index.ts"
    assert config["durable_objects"]["bindings"] == [
        {"name": "Sandbox", "class_name": "Sandbox"},
        {"name": "REGISTRY", "class_name": "SandboxRegistry"},
    ]
    assert config["migrations"] == [
        {"tag": "v1", "new_sqlite_classes": ["Sandbox", "SandboxRegistry"]}
    ]
    # Untouched files are byte-for-byte copies.
    for name in ("src/index.ts", "package-lock.json"):
        assert (tmp_path / "gateway" / name).read_bytes() == (
            TEMPLATES / "gateway" / name
        ).read_bytes()


def test_runtime_templates_follow_spec_11_2() -> None:
    for language in ("javascript", "python", "perl", "ruby"):
        directory = TEMPLATES / "runtime" / language
        config = _jsonc((directory / "wrangler.jsonc").read_text())
        assert isinstance(config, dict)
        assert config["name"] == f"sandbox-{language}"
        assert config["workers_dev"] is False
        assert config["preview_urls"] is False
        assert config["limits"] == {"cpu_ms": 2000}
        assert {"type": "Data", "globs": ["**/*.bin"], "fallthrough": True} in config["rules"]
        entry = (directory / config["main"]).read_text().strip()
        if language == "ruby":
            assert "durable_objects" not in config
            assert "migrations" not in config
            assert entry == 'export { default } from "@sandbox-workers/ruby";'
        else:
            assert config["durable_objects"]["bindings"] == [
                {"name": "INTERPRETER", "class_name": "Interpreter"}
            ]
            assert config["migrations"] == [{"tag": "v1", "new_sqlite_classes": ["Interpreter"]}]
            assert entry == f'export {{ default, Interpreter }} from "@sandbox-workers/{language}";'


def test_gateway_version_matches_the_workbench() -> None:
    package = json.loads((TEMPLATES / "gateway" / "package.json").read_text())
    source = (TEMPLATES / "gateway" / "src" / "index.ts").read_text()
    match = re.search(r'const VERSION = "([^"]+)"', source)
    assert match is not None
    assert match.group(1) == package["version"] == __version__


def test_render_refuses_to_overwrite(tmp_path: Path) -> None:
    existing = tmp_path / "runtime" / "python" / "index.js"
    existing.parent.mkdir(parents=True)
    existing.write_text("mine")
    with pytest.raises(FileExistsError, match=f"Refusing to overwrite {re.escape(str(existing))}"):
        render(tmp_path, ["PYTHON"])
    assert existing.read_text() == "mine"
    assert not (tmp_path / "gateway").exists()  # checked before anything is written


def test_render_refuses_dangling_symlinks(tmp_path: Path) -> None:
    link = tmp_path / "gateway" / "README.md"
    link.parent.mkdir(parents=True)
    link.symlink_to(tmp_path / "missing")
    with pytest.raises(FileExistsError, match="Refusing to overwrite"):
        render(tmp_path, ["JAVASCRIPT"])


def test_render_twice_refuses(tmp_path: Path) -> None:
    render(tmp_path, ["PERL"])
    with pytest.raises(FileExistsError):
        render(tmp_path, ["PERL"])


def test_render_renames_the_token_secret(tmp_path: Path) -> None:
    render(tmp_path, ["JAVASCRIPT"], token_secret_name="GATEWAY_TOKEN")
    source = (tmp_path / "gateway" / "src" / "index.ts").read_text()
    assert "env.GATEWAY_TOKEN" in source
    assert "WORKBENCH_TOKEN" not in source
    readme = (tmp_path / "gateway" / "README.md").read_text()
    assert "wrangler secret put GATEWAY_TOKEN" in readme
    with pytest.raises(ValueError, match="Invalid secret name"):
        render(tmp_path / "other", ["JAVASCRIPT"], token_secret_name="bad-name")


def test_binding_validation() -> None:
    assert normalize_bindings(["python", " Ruby "]) == ["PYTHON", "RUBY"]
    with pytest.raises(ValueError, match="Unknown runtime binding 'COBOL'"):
        normalize_bindings(["COBOL"])
    with pytest.raises(ValueError, match="Duplicate runtime binding 'PYTHON'"):
        normalize_bindings(["PYTHON", "python"])
    with pytest.raises(ValueError, match="at least one"):
        normalize_bindings([])
    with pytest.raises(TypeError):
        normalize_bindings("PYTHON")


@pytest.mark.skipif(shutil.which("npm") is None, reason="npm is not installed: cannot type-check")
def test_gateway_template_type_checks() -> None:
    """`worker_templates/check.sh`: `npm ci` + `tsc --noEmit` on the gateway template."""
    completed = subprocess.run(
        ["bash", str(TEMPLATES / "check.sh")],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert completed.returncode == 0, completed.stdout + completed.stderr
