"""`Intl` in JavaScript (spec 9.1 lists `intl` among the runtime's capabilities): numbers,
dates, plurals, relative times, lists, segments and collation in `en`, `ja` and `de`, and
`toLocaleString` through them; statelessly and in a context, on every backend."""

from __future__ import annotations

import json

import pytest

from workbench.api import Backend, SandboxClient

EXPECTED = [  # (expression, its value)
    (
        'new Intl.NumberFormat("en-US", {style: "currency", currency: "USD"}).format(1234.5)',
        "$1,234.50",
    ),
    ('(1234).toLocaleString("en-US")', "1,234"),
    ('(1234567.891).toLocaleString("de-DE")', "1.234.567,891"),
    (
        'new Intl.NumberFormat("ja-JP", {style: "currency", currency: "JPY"}).format(1234)',
        "￥1,234",
    ),
    (
        'new Intl.DateTimeFormat("en", {dateStyle: "full", timeZone: "UTC"}).format(new Date(0))',
        "Thursday, January 1, 1970",
    ),
    (
        'new Intl.DateTimeFormat("ja", {dateStyle: "long", timeZone: "Asia/Tokyo"})'
        ".format(new Date(0))",
        "1970年1月1日",
    ),
    (
        'new Intl.DateTimeFormat("de", {dateStyle: "long", timeZone: "UTC"}).format(new Date(0))',
        "1. Januar 1970",
    ),
    ('new Date(0).toLocaleDateString("en-US", {timeZone: "UTC"})', "1/1/1970"),
    # Time zones unpack when first asked for: summer and winter in New York.
    (
        'new Intl.DateTimeFormat("en", {timeZone: "America/New_York", timeStyle: "short"})'
        ".format(Date.UTC(2026, 6, 1, 16))",
        "12:00\u202fPM",
    ),
    (
        'new Date(Date.UTC(2026, 0, 1, 16)).toLocaleTimeString("en", '
        '{timeZone: "America/New_York", timeStyle: "short"})',
        "11:00\u202fAM",
    ),
    # Every IANA zone and link, not only the common ones.
    (
        '["Europe/Kyiv", "Europe/Kiev", "Etc/GMT+5", "America/Sitka", "America/Indianapolis"]'
        '.map((timeZone) => new Intl.DateTimeFormat("en", {timeZone, timeStyle: "short"})'
        ".format(Date.UTC(2026, 0, 15, 12))).join()",
        "2:00\u202fPM,2:00\u202fPM,7:00\u202fAM,3:00\u202fAM,7:00\u202fAM",
    ),
    # Ranges use the fallback pattern (documented): ICU leaves out the second "Jan".
    (
        'new Intl.DateTimeFormat("en", {month: "short", day: "numeric", timeZone: "UTC"})'
        ".formatRange(0, 3 * 86400000)",
        "Jan 1\u2009\u2013\u2009Jan 4",
    ),
    ('new Intl.PluralRules("en").select(1)', "one"),
    ('new Intl.PluralRules("de").select(2)', "other"),
    ('new Intl.RelativeTimeFormat("de").format(-1, "day")', "vor 1 Tag"),
    ('new Intl.RelativeTimeFormat("ja").format(2, "hour")', "2 時間後"),
    ('new Intl.ListFormat("en").format(["a", "b", "c"])', "a, b, and c"),
    ('new Intl.ListFormat("de").format(["a", "b", "c"])', "a, b und c"),
    ('[...new Intl.Segmenter("en", {granularity: "word"}).segment("Hi you")].length', 3),
    ('["b", "a", "Ä", "A"].sort(new Intl.Collator("de").compare).join("")', "aAÄb"),
    ('["a10", "a2"].sort(new Intl.Collator("en", {numeric: true}).compare).join()', "a2,a10"),
    ('"a".localeCompare("B")', -1),
    # Kept formatters change nothing: the same call twice, another option, an invalid
    # date, a getter read on every call (such options are never kept), BigInt.
    (
        '[1, 2].map(() => new Date(0).toLocaleString("de", {timeZone: "UTC"})).join(" | ")',
        "1.1.1970, 00:00:00 | 1.1.1970, 00:00:00",
    ),
    ('new Date(0).toLocaleString("de", {timeZone: "Asia/Tokyo"})', "1.1.1970, 09:00:00"),
    ('new Date(NaN).toLocaleString("en")', "Invalid Date"),
    # Digits skip NumberFormat only where they would be the same: Latin, whole, from 0.
    (
        'new Intl.DateTimeFormat("en-US", {timeZone: "UTC", year: "2-digit", month: "2-digit",'
        ' day: "2-digit", hour: "2-digit", minute: "2-digit", second: "2-digit",'
        " fractionalSecondDigits: 2}).format(1e12 + 7)",
        "09/09/01, 01:46:40.00\u202fAM",
    ),
    (
        'new Intl.DateTimeFormat("en-u-nu-arab", {timeZone: "UTC", day: "numeric"}).format(1e12)',
        "\u0669",
    ),
    (
        "(() => { let reads = 0; const options = {get timeZone() { reads++; return 'UTC' }};"
        ' new Date(0).toLocaleTimeString("en", options);'
        ' new Date(0).toLocaleTimeString("en", options); return reads })()',
        2,
    ),
    ('(12345678901234567890n).toLocaleString("en")', "12,345,678,901,234,567,890"),
]
CODE = "[\n" + ",\n".join(expression for expression, _ in EXPECTED) + "\n]"


@pytest.mark.usefixtures("javascript_engine")
async def test_intl_formats_in_en_ja_and_de(backend: Backend, sandbox: SandboxClient) -> None:
    stateless = await backend.run_code(CODE, binding="JAVASCRIPT")
    assert stateless.error is None, stateless.error
    context = await sandbox.interpreter.create_code_context("JAVASCRIPT")
    in_context = await sandbox.interpreter.run_code(CODE, context=context)
    assert in_context.error is None, in_context.error
    for result in (stateless, in_context):
        values = result.results[-1].json if result.results[-1].is_json else None
        assert values is not None, result.results
        got = dict(zip([expression for expression, _ in EXPECTED], values, strict=True))
        assert got == dict(EXPECTED), json.dumps(got, ensure_ascii=False, indent=1)


@pytest.mark.usefixtures("javascript_engine")
async def test_a_hundred_date_formats_fit_in_one_run(backend: Backend) -> None:
    """`toLocaleString` keeps the formatters it makes (a new one costs about 3M of the 50M
    fuel), and a new one chooses its pattern once per set of fields: 100 fit in a run."""
    code = (
        "const out = [];"
        "for (let i = 0; i < 100; i++)"
        ' out.push(new Date(i * 1e9).toLocaleString("en-US", {timeZone: "UTC"}));'
        "out.at(-1)"
    )
    result = await backend.run_code(code, binding="JAVASCRIPT")
    assert result.error is None, result.error
    assert result.results[-1].text == "'2/19/1973, 8:00:00\u202fPM'"
    assert result.usage is not None and result.usage.fuel_consumed < result.usage.fuel_limit * 0.7
