"""Wire timestamps: epoch milliseconds formatted exactly like JavaScript `toISOString()`."""

from __future__ import annotations

import re
import time

__all__ = ["iso_from_ms", "iso_now", "ms_from_iso"]

_MAX_MS = 8_640_000_000_000_000  # JavaScript Date range (±100,000,000 days)


def _civil_from_days(days: int) -> tuple[int, int, int]:
    """Proleptic Gregorian (year, month, day) for days since 1970-01-01 (H. Hinnant)."""
    z = days + 719468
    era = z // 146097
    doe = z - era * 146097
    yoe = (doe - doe // 1460 + doe // 36524 - doe // 146096) // 365
    y = yoe + era * 400
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    d = doy - (153 * mp + 2) // 5 + 1
    m = mp + 3 if mp < 10 else mp - 9
    return (y + 1 if m <= 2 else y), m, d


def _days_from_civil(y: int, m: int, d: int) -> int:
    """Days since 1970-01-01 for a proleptic Gregorian date (inverse of the above)."""
    y -= m <= 2
    era = y // 400
    yoe = y - era * 400
    doy = (153 * (m + (-3 if m > 2 else 9)) + 2) // 5 + d - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468


def iso_from_ms(ms: int | float) -> str:
    """Format epoch ms exactly like JavaScript ``Date#toISOString()``.

    Years outside 0..9999 use the six-digit signed form (``+012345-...``); values
    outside the JavaScript Date range raise ``ValueError`` (JS throws ``RangeError``).
    """
    ms = int(ms // 1) if isinstance(ms, float) else ms
    if not -_MAX_MS <= ms <= _MAX_MS:
        raise ValueError("Invalid time value")
    days, rem = divmod(ms, 86_400_000)
    y, mo, d = _civil_from_days(days)
    hh, rem = divmod(rem, 3_600_000)
    mi, rem = divmod(rem, 60_000)
    ss, mss = divmod(rem, 1000)
    year = f"{y:04d}" if 0 <= y <= 9999 else f"{'-' if y < 0 else '+'}{abs(y):06d}"
    return f"{year}-{mo:02d}-{d:02d}T{hh:02d}:{mi:02d}:{ss:02d}.{mss:03d}Z"


def iso_now() -> str:
    """The current UTC time, like JavaScript ``new Date().toISOString()``."""
    return iso_from_ms(time.time_ns() // 1_000_000)


_ISO_RE = re.compile(r"([+-]\d{6}|\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?Z")


def ms_from_iso(text: str) -> int:
    """Parse a ``toISOString()``-style UTC timestamp back to epoch ms."""
    m = _ISO_RE.fullmatch(text)
    if m is None:
        raise ValueError(f"Not an ISO timestamp: {text!r}")
    y, mo, d, hh, mi, ss = (int(g) for g in m.groups()[:6])
    frac = (m.group(7) or "0")[:3].ljust(3, "0")
    days = _days_from_civil(y, mo, d)
    return ((days * 24 + hh) * 60 + mi) * 60_000 + ss * 1000 + int(frac)
