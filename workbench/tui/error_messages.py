"""Failures as one line for a notification or a transcript cell."""

from __future__ import annotations

from workbench.api import SandboxError
from workbench.config import ConfigError
from workbench.profiles import BackendUnavailableError, UnknownProfileError


class Declined(Exception):
    """An operation the workbench declined before asking the backend: its message is
    shown as it is."""


def describe_error(error: Exception) -> str:
    """One line for a notification: the server's message, code and status."""
    if isinstance(error, Declined | ConfigError | UnknownProfileError | BackendUnavailableError):
        return str(error)  # sentences for the user, which the class name would only muddle
    if isinstance(error, SandboxError):
        if error.http_status == 401:
            return f"unauthorized (HTTP 401): check the profile's token. {error.message}"
        if error.code == "CONNECTION_FAILED":  # no answer came: no status to show (QA)
            return error.message
        return f"{error.message} ({error.code}, HTTP {error.http_status})"
    return f"{type(error).__name__}: {error}"
