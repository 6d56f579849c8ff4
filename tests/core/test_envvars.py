"""Env var validators per entry point and layering (spec 2.2.1, 2.4, 10)."""

import pytest

from workbench.api import ValidationFailedError
from workbench.core import envvars as ev


def msg(fn: object, body: dict[str, object]) -> str:
    with pytest.raises(ValidationFailedError) as ei:
        fn(body)  # type: ignore[operator]
    assert ei.value.http_status == 400
    return ei.value.message


def test_runtime_lenient() -> None:
    assert ev.runtime_env_vars({}) is None
    out = ev.runtime_env_vars({"envVars": {"A": "1", "bad-key": "x", "N": None, "_b": ""}})
    assert out == {"A": "1", "_b": ""}
    assert msg(ev.runtime_env_vars, {"envVars": []}) == "envVars must be an object"
    assert msg(ev.runtime_env_vars, {"envVars": None}) == "envVars must be an object"
    assert msg(ev.runtime_env_vars, {"envVars": {"bad-key": 1}}) == "envVars values must be strings"


def test_execute_strict_allows_null() -> None:
    assert ev.execute_env_vars({"envVars": {"A": None, "B": "x"}}) == {"A": None, "B": "x"}
    assert msg(ev.execute_env_vars, {"envVars": {"1A": "x"}}) == "Invalid envVars key: 1A"
    assert msg(ev.execute_env_vars, {"envVars": {"A": 1}}) == "envVars values must be strings"
    # JavaScript property order: integer-like keys are visited first
    assert msg(ev.execute_env_vars, {"envVars": {"A": 1, "7": "x"}}) == "Invalid envVars key: 7"


def test_contexts_rejects_null() -> None:
    assert ev.context_env_vars({"envVars": {"A": "x"}}) == {"A": "x"}
    assert msg(ev.context_env_vars, {"envVars": {"A": None}}) == "envVars values must be strings"
    assert msg(ev.context_env_vars, {"envVars": {"a b": "x"}}) == "Invalid envVars key: a b"


def test_env_required() -> None:
    assert msg(ev.env_request_vars, {}) == "envVars is required"
    assert msg(ev.env_request_vars, {"envVars": None}) == "envVars must be an object"
    assert ev.env_request_vars({"envVars": {"A": None}}) == {"A": None}


def test_interpreter_flat() -> None:
    assert ev.interpreter_env_vars({"envVars": {"a-b": "x"}}) == {"a-b": "x"}
    assert (
        msg(ev.interpreter_env_vars, {"envVars": {"A": None}}) == "envVars values must be strings"
    )


def test_layering() -> None:
    assert ev.layer_env({"A": "s", "B": "s"}, {"B": "c", "C": "c"}, {"C": None, "D": "d"}) == {
        "A": "s",
        "B": "c",
        "D": "d",
    }
    assert ev.layer_env(None, None, None) == {}
    assert ev.apply_env_update({"A": "1", "B": "2"}, {"A": None, "C": "3"}) == {"B": "2", "C": "3"}
