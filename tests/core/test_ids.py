"""Sandbox id validation (spec 8.1), and the note a checkpoint restore leaves in a history."""

import pytest

from workbench.api import ValidationFailedError
from workbench.protocol.ids import (
    normalize_id,
    restore_note,
    restored_checkpoint,
    validate_sandbox_id,
)


@pytest.mark.parametrize("good", ["a", "user-1", "A.b_c", "x" * 63, "Www1"])
def test_valid(good: str) -> None:
    validate_sandbox_id(good)


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ("", 'Invalid sandbox id "": must match /^[A-Za-z0-9._-]{1,63}$/'),
        ("x" * 64, f'Invalid sandbox id "{"x" * 64}": must match /^[A-Za-z0-9._-]{{1,63}}$/'),
        ("a/b", 'Invalid sandbox id "a/b": must match /^[A-Za-z0-9._-]{1,63}$/'),
        ("ab\n", 'Invalid sandbox id "ab\n": must match /^[A-Za-z0-9._-]{1,63}$/'),
        ("-ab", 'Invalid sandbox id "-ab": cannot start or end with a hyphen'),
        ("ab-", 'Invalid sandbox id "ab-": cannot start or end with a hyphen'),
        ("WWW", "Invalid sandbox id \"WWW\": 'WWW' is a reserved name"),
        ("cloudflare", "Invalid sandbox id \"cloudflare\": 'cloudflare' is a reserved name"),
    ],
)
def test_invalid(bad: str, message: str) -> None:
    with pytest.raises(ValidationFailedError) as ei:
        validate_sandbox_id(bad)
    assert ei.value.message == message
    assert ei.value.http_status == 400 and ei.value.code == "VALIDATION_FAILED"


def test_normalize() -> None:
    assert normalize_id("User-A") == "user-a"
    assert normalize_id("User-A", normalize=False) == "User-A"


def test_a_restore_note_names_its_checkpoint_and_nothing_else_does() -> None:
    for language in ("javascript", "python", "perl", "ruby"):
        assert restored_checkpoint(restore_note(language, "v1.2_x-y")) == "v1.2_x-y"
    assert restore_note("javascript", "a") == "// restored checkpoint a"
    assert restore_note("perl", "a") == "# restored checkpoint a"
    for code in (
        "# restored checkpoint ../x",
        "print 1 # restored checkpoint a",
        "# restored checkpoint",
    ):
        assert restored_checkpoint(code) is None
