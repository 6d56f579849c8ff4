"""Every Worker `gateway init` renders builds with `wrangler deploy --dry-run` (bundling,
no network), its version check first: at the pinned versions it builds, at any other it
refuses with one clear line. The unpublished packages are the stand-ins of
tests/workerd/standins/, installed under their names and versions."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tests.workerd.harness import (
    TEMPLATES,
    Standin,
    installed_dependencies,
    missing_node_tools,
    pinned_standins,
    render_with_standins,
    wrangler_command,
    wrangler_env,
)
from workbench.deploy.versions import load_versions

pytestmark = pytest.mark.skipif(missing_node_tools() is not None, reason=str(missing_node_tools()))

DRY_RUN_TIMEOUT = 180.0
CHECK_PASSED = "version check: every @sandbox-workers package is at its pinned version"


def dry_run(worker: Path, scratch: Path) -> subprocess.CompletedProcess[str]:
    """`wrangler deploy --dry-run` in the Worker's directory, as its README says."""
    return subprocess.run(
        wrangler_command(installed_dependencies(), "deploy", "--dry-run", "--outdir", "dist"),
        cwd=worker,
        capture_output=True,
        text=True,
        timeout=DRY_RUN_TIMEOUT,
        env=wrangler_env(scratch),
    )


def workers(deploy: Path) -> list[Path]:
    return [deploy / "gateway", *sorted((deploy / "runtime").iterdir())]


def render(scratch: Path, bindings: Sequence[str], standins: list[Standin], **options: Any) -> Path:
    return render_with_standins(scratch, bindings, standins, installed_dependencies(), **options)


def test_every_rendered_worker_builds_at_the_pinned_versions(tmp_path: Path) -> None:
    deploy = render(tmp_path, ["JAVASCRIPT", "PYTHON", "PERL", "RUBY"], pinned_standins())
    for worker in workers(deploy):
        built = dry_run(worker, tmp_path)
        output = built.stdout + built.stderr
        assert built.returncode == 0, f"{worker.name}:\n{output[-4000:]}"
        assert CHECK_PASSED in output, output[-4000:]
        assert (worker / "dist" / "index.js").is_file()
        if worker.name == "gateway":
            for binding in ("JAVASCRIPT", "PYTHON", "PERL", "RUBY"):
                assert f"env.{binding} (sandbox-{binding.lower()})" in output
        elif worker.name == "ruby":
            assert "env.INTERPRETER" not in output
        else:
            assert "env.INTERPRETER (Interpreter)" in output


def test_named_stateless_and_custom_bindings_build(tmp_path: Path) -> None:
    deploy = render(
        tmp_path,
        ["PYTHON", "SCRATCH=perl"],
        pinned_standins(),
        name_prefix="acme",
        services={"SCRATCH": "acme-scratchpad"},
        stateless=True,
    )
    outputs = {}
    for worker in workers(deploy):
        built = dry_run(worker, tmp_path)
        outputs[worker.name] = built.stdout + built.stderr
        assert built.returncode == 0, f"{worker.name}:\n{outputs[worker.name][-4000:]}"
    assert "env.SCRATCH (acme-scratchpad)" in outputs["gateway"]
    assert "env.PYTHON (acme-python)" in outputs["gateway"]
    assert "env.INTERPRETER" not in outputs["python"] + outputs["scratch"]


def test_a_core_at_another_version_does_not_build(tmp_path: Path) -> None:
    pinned = load_versions(TEMPLATES).core
    standins = [
        replace(standin, version="0.1.9") if standin.package == "@sandbox-workers/core" else standin
        for standin in pinned_standins()
    ]
    deploy = render(tmp_path, ["PYTHON"], standins)
    built = dry_run(deploy / "gateway", tmp_path)
    assert built.returncode != 0
    output = built.stdout + built.stderr
    assert (
        "version check: @sandbox-workers/core 0.1.9 is installed, but this Worker is pinned "
        f"to {pinned} (the tested set): install {pinned}"
    ) in output
    assert not (deploy / "gateway" / "dist").exists()
    # The runtime, at its pinned version, still builds.
    assert dry_run(deploy / "runtime" / "python", tmp_path).returncode == 0


def test_a_missing_runtime_package_does_not_build(tmp_path: Path) -> None:
    standins = [s for s in pinned_standins() if s.package != "@sandbox-workers/ruby"]
    deploy = render(tmp_path, ["RUBY"], standins)
    built = dry_run(deploy / "runtime" / "ruby", tmp_path)
    assert built.returncode != 0
    pinned = load_versions(TEMPLATES).runtime("ruby")
    assert (
        "version check: @sandbox-workers/ruby is not installed: "
        f"npm install --no-save @sandbox-workers/ruby@{pinned}"
    ) in built.stdout + built.stderr
