"""The Worker templates: rendering (`workbench.deploy.templates`), `gateway init`'s
options, and the gateway type check."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.cli import cli_env, one_error_line, run_cli
from workbench import __version__
from workbench.deploy.templates import parse_bindings, plan_runtimes, render, templates_root

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
        "gateway/tsconfig.standin.json",
        "gateway/README.md",
        "gateway/.gitignore",
        "gateway/src/index.ts",
        "gateway/src/registry.ts",
        "gateway/types/sandbox-workers-core.d.ts",
        "gateway/check-versions.mjs",
        "runtime/python/wrangler.jsonc",
        "runtime/python/index.js",
        "runtime/python/package.json",
        "runtime/python/README.md",
        "runtime/python/check-versions.mjs",
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


def test_rendered_runtimes_follow_spec_11_2(tmp_path: Path) -> None:
    render(tmp_path, ["JAVASCRIPT", "PYTHON", "PERL", "RUBY"])
    for language in ("javascript", "python", "perl", "ruby"):
        directory = tmp_path / "runtime" / language
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
        # Every build runs the version check first.
        assert config["build"] == {"command": "node check-versions.mjs"}
        assert (directory / "check-versions.mjs").read_bytes() == (
            TEMPLATES / "check-versions.mjs"
        ).read_bytes()
        readme = (directory / "README.md").read_text()
        assert "{{" not in readme and "}}" not in readme
        assert f"Service Binding to `sandbox-{language}`" in readme


def test_gateway_version_is_its_package_version_and_the_workbenchs() -> None:
    package = json.loads((TEMPLATES / "gateway" / "package.json").read_text())
    source = (TEMPLATES / "gateway" / "src" / "index.ts").read_text()
    assert 'import manifest from "../package.json";' in source
    assert "const VERSION = manifest.version;" in source
    assert package["version"] == __version__


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
    assert parse_bindings(["python", " Ruby "]) == {"PYTHON": "python", "RUBY": "ruby"}
    assert parse_bindings(["scratch = Python", "PY_2=perl"]) == {
        "SCRATCH": "python",
        "PY_2": "perl",
    }
    with pytest.raises(ValueError, match="Unknown runtime binding 'COBOL'"):
        parse_bindings(["COBOL"])
    with pytest.raises(ValueError, match="Unknown language 'cobol' for binding 'X'"):
        parse_bindings(["X=cobol"])
    with pytest.raises(ValueError, match="Invalid binding name '2X'"):
        parse_bindings(["2x=python"])
    with pytest.raises(ValueError, match="Invalid binding name 'A-B'"):
        parse_bindings(["a-b=python"])
    for taken in ("REGISTRY", "RUNTIME_BINDINGS", "WORKBENCH_TOKEN", "SANDBOX_FILE_API"):
        with pytest.raises(ValueError, match=f"Binding name '{taken}' is taken by the gateway"):
            parse_bindings([f"{taken}=python"])
    with pytest.raises(ValueError, match="Duplicate runtime binding 'PYTHON'"):
        parse_bindings(["PYTHON", "python=python"])
    with pytest.raises(ValueError, match="at least one"):
        parse_bindings([])
    with pytest.raises(TypeError):
        parse_bindings("PYTHON")


def test_worker_names_prefix_services_and_stateless() -> None:
    default = plan_runtimes(["PYTHON", "RUBY", "SCRATCH_PAD=python"])
    assert [(w.binding, w.language, w.name, w.contexts, w.directory) for w in default] == [
        ("PYTHON", "python", "sandbox-python", True, "runtime/python"),
        ("RUBY", "ruby", "sandbox-ruby", False, "runtime/ruby"),
        ("SCRATCH_PAD", "python", "sandbox-scratch-pad", True, "runtime/scratch_pad"),
    ]
    chosen = plan_runtimes(
        ["PYTHON", "PERL"], name_prefix="acme", services={"perl": "perl-box"}, stateless=True
    )
    assert [(w.name, w.contexts) for w in chosen] == [("acme-python", False), ("perl-box", False)]
    with pytest.raises(ValueError, match="--service RUBY: no such binding"):
        plan_runtimes(["PYTHON"], services={"RUBY": "x"})
    with pytest.raises(ValueError, match="Invalid Worker name 'Bad_Name'"):
        plan_runtimes(["PYTHON"], services={"PYTHON": "Bad_Name"})
    with pytest.raises(ValueError, match="Invalid Worker name '-x-python'"):
        plan_runtimes(["PYTHON"], name_prefix="-x")
    with pytest.raises(ValueError, match="would both target the Worker 'same'"):
        plan_runtimes(["PYTHON", "PERL"], services={"PYTHON": "same", "PERL": "same"})


def test_render_names_stateless_and_custom_bindings(tmp_path: Path) -> None:
    render(
        tmp_path,
        ["PYTHON", "SCRATCH=python", "RUBY"],
        name_prefix="acme",
        services={"SCRATCH": "acme-scratchpad"},
        stateless=True,
    )
    gateway = _jsonc((tmp_path / "gateway" / "wrangler.jsonc").read_text())
    assert isinstance(gateway, dict)
    assert gateway["name"] == "acme-gateway"
    assert gateway["services"] == [
        {"binding": "PYTHON", "service": "acme-python"},
        {"binding": "SCRATCH", "service": "acme-scratchpad"},
        {"binding": "RUBY", "service": "acme-ruby"},
    ]
    assert gateway["vars"]["RUNTIME_BINDINGS"] == "PYTHON,SCRATCH,RUBY"
    assert "acme-gateway" in (tmp_path / "gateway" / "README.md").read_text()
    for directory, binding, name in [
        ("python", "PYTHON", "acme-python"),
        ("scratch", "SCRATCH", "acme-scratchpad"),
    ]:
        worker = tmp_path / "runtime" / directory
        config = _jsonc((worker / "wrangler.jsonc").read_text())
        assert isinstance(config, dict)
        assert config["name"] == name
        assert "durable_objects" not in config and "migrations" not in config
        assert (worker / "index.js").read_text() == (
            'export { default } from "@sandbox-workers/python";\n'
        )
        readme = (worker / "README.md").read_text()
        assert f"Binding `{binding}` (sandbox-workers spec 11.2)" in readme
        assert "Rendered stateless" in readme
        assert json.loads((worker / "package.json").read_text())["name"] == name


def test_gateway_init_options_on_the_command_line(tmp_path: Path) -> None:
    env = cli_env(tmp_path)
    target = tmp_path / "deploy"
    completed = run_cli(
        env, "gateway", "init", str(target), "--bindings", "PYTHON,SCRATCH=ruby",
        "--name-prefix", "team", "--service", "SCRATCH=team-rb", "--stateless",
    )  # fmt: skip
    assert completed.returncode == 0, completed.stderr
    assert "pinned: @sandbox-workers/core 0.2.0, @sandbox-workers/python 0.2.0, " in (
        completed.stdout
    )
    assert "runtime/python/ (Worker team-python, stateless)" in completed.stdout
    assert "runtime/scratch/ (Worker team-rb, stateless)" in completed.stdout
    assert "npm install --no-save @sandbox-workers/core@0.2.0" in completed.stdout
    scratch = _jsonc((target / "runtime" / "scratch" / "wrangler.jsonc").read_text())
    assert isinstance(scratch, dict)
    assert scratch["name"] == "team-rb"
    # The existing flags alone render what they always did (plus the pins).
    plain = tmp_path / "plain"
    completed = run_cli(env, "gateway", "init", str(plain), "--bindings", "PERL")
    assert completed.returncode == 0, completed.stderr
    assert sorted(path.name for path in (plain / "runtime").iterdir()) == ["perl"]
    config = _jsonc((plain / "runtime" / "perl" / "wrangler.jsonc").read_text())
    assert isinstance(config, dict)
    assert config["name"] == "sandbox-perl" and "durable_objects" in config
    gateway = _jsonc((plain / "gateway" / "wrangler.jsonc").read_text())
    assert isinstance(gateway, dict)
    assert gateway["name"] == "sandbox-workbench-gateway"


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--service", "RUBY=x"], "--service RUBY: no such binding"),
        (["--name-prefix", "Team"], "Invalid Worker name 'Team-python'"),
        (["--bindings", "X=cobol"], "Unknown language 'cobol' for binding 'X'"),
    ],
)
def test_gateway_init_refuses_bad_choices_in_one_line(
    tmp_path: Path, arguments: list[str], message: str
) -> None:
    completed = run_cli(
        cli_env(tmp_path), "gateway", "init", str(tmp_path / "d"), "--bindings", "PYTHON",
        *arguments,
    )  # fmt: skip
    assert completed.returncode == 2  # a usage error, as every other refused flag
    assert message in one_error_line(completed)
    assert not (tmp_path / "d").exists()


def test_gateway_init_service_needs_binding_and_name(tmp_path: Path) -> None:
    completed = run_cli(
        cli_env(tmp_path), "gateway", "init", str(tmp_path / "d"), "--service", "PYTHON"
    )
    assert completed.returncode == 2
    assert "Traceback" not in completed.stderr
    assert "Invalid value for --service: 'PYTHON' is not BINDING=NAME" in completed.stderr
    assert not (tmp_path / "d").exists()


@pytest.mark.skipif(shutil.which("npm") is None, reason="npm is not installed: cannot type-check")
def test_gateway_template_type_checks(tmp_path: Path) -> None:
    """`worker_templates/check.sh`: `npm ci` + `tsc --noEmit` on the gateway template, with
    the stand-in declaration while `@sandbox-workers/core` is not installed. Installed, the
    package's own types are checked: one that lacks the `Sandbox` the template re-exports
    fails the check, and one that has it passes."""
    completed = subprocess.run(
        ["bash", str(TEMPLATES / "check.sh")],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert completed.returncode == 0, completed.stdout + completed.stderr
    assert "the stand-in types: @sandbox-workers/core is not installed" in completed.stdout

    # A copy of the template whose node_modules also holds a core package (links to the
    # installed packages, so nothing is installed again).
    gateway = TEMPLATES / "gateway"
    copy = tmp_path / "gateway"
    shutil.copytree(gateway, copy, ignore=shutil.ignore_patterns("node_modules"))
    modules = copy / "node_modules"
    modules.mkdir()
    for entry in (gateway / "node_modules").iterdir():
        (modules / entry.name).symlink_to(entry)
    core = modules / "@sandbox-workers" / "core"
    core.mkdir(parents=True)
    (core / "package.json").write_text(
        '{"name": "@sandbox-workers/core", "version": "0.2.0", "types": "index.d.ts"}'
    )
    tsc = [str(gateway / "node_modules" / ".bin" / "tsc"), "--noEmit", "-p", "tsconfig.json"]

    def check(declaration: str) -> subprocess.CompletedProcess[str]:
        (core / "index.d.ts").write_text(declaration)
        return subprocess.run(tsc, cwd=copy, capture_output=True, text=True, timeout=300)

    missing = check("export declare const version: string;\n")
    assert missing.returncode != 0
    assert "has no exported member 'Sandbox'" in missing.stdout
    present = check(
        "export declare class Sandbox implements DurableObject {\n"
        "  constructor(state: DurableObjectState, env: unknown);\n"
        "  fetch(request: Request): Promise<Response>;\n"
        "  alarm(): Promise<void>;\n"
        "}\n"
    )
    assert present.returncode == 0, present.stdout + present.stderr
