"""`on_report`: how the main screen (and its handler mixins) subscribe to the messages that
workers post (`workbench.tui.messages`)."""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any, Protocol, TypeVar, cast

from textual import on
from textual.message import Message
from textual.widget import Widget

ReportHandler = TypeVar("ReportHandler", bound=Callable[..., Any])


class ReportReceiver(Protocol):
    """A screen whose layout hangs under `tabs` (the main screen)."""

    @property
    def tabs(self) -> Widget: ...


def on_report(message_type: type[Message]) -> Callable[[ReportHandler], ReportHandler]:
    """`@on(message_type)` for a worker's report: skipped when it arrives after the layout
    is gone (app exit)."""

    def decorate(handler: ReportHandler) -> ReportHandler:
        @wraps(handler)
        def guarded(screen: ReportReceiver, message: Message) -> Any:
            if not screen.tabs.is_attached:
                return None
            return handler(screen, message)

        return cast(ReportHandler, on(message_type)(guarded))

    return decorate
