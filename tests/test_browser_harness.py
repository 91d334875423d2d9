"""The browser harness itself (tests/browser_fixtures.py): each check the web pages' tests rely on can fail.

Static pages as data: URLs, so these need the browser but no server.
"""

from __future__ import annotations

import struct
from pathlib import Path
from urllib.parse import quote

import pytest
from browser_fixtures import VIEWPORTS, Page

pytestmark = pytest.mark.browser


def html(body: str, head: str = "") -> str:
    return "data:text/html;charset=utf-8," + quote(
        f"<!doctype html><html lang='en'><head><title>t</title>{head}</head><body>{body}</body></html>"
    )


def png_size(path: Path) -> tuple[int, int]:
    width, height = struct.unpack(">II", path.read_bytes()[16:24])  # the IHDR chunk
    return width, height


def test_console_errors_are_collected(page: Page) -> None:
    page.driver.get(html("<script>console.error('harness-boom')</script>"))
    errors = page.console_errors()
    assert any("harness-boom" in e for e in errors), errors
    page.allow_console("harness-boom")  # provoked on purpose: the teardown check would fail the test
    assert page.console_errors() == []


def test_dialogs_are_counted_not_opened(page: Page) -> None:
    from selenium.common.exceptions import NoAlertPresentException

    page.trap_dialogs()
    page.driver.get(html("<script>alert(1); confirm('x')</script>"))
    assert page.dialogs() == 2
    with pytest.raises(NoAlertPresentException):
        page.driver.switch_to.alert  # noqa: B018 - the property raises when no dialog is open


def test_axe_reports_serious_violations(page: Page, axe_source: str) -> None:
    page.driver.get(html("<main><img src='data:,'><input type='text'></main>"))
    found = {v["id"] for v in page.axe(axe_source)}
    assert {"image-alt", "label"} <= found, found


def test_screenshots_at_both_widths_and_schemes(page: Page) -> None:
    page.driver.get(
        html(
            "<p>scheme</p>",
            head="<style>body{background:#fff} @media (prefers-color-scheme: dark){body{background:#000}}</style>",
        )
    )
    page.scheme("dark")
    dark = page.driver.execute_script("return getComputedStyle(document.body).backgroundColor")
    page.scheme("light")
    assert dark == "rgb(0, 0, 0)"
    saved = page.screenshots()
    assert len(saved) == 4
    sizes = {p.name.rsplit("-", 2)[1]: png_size(p) for p in saved}
    assert sizes == {str(w): (w, h) for w, h in VIEWPORTS.values()}
    laptop = VIEWPORTS["laptop"][0]
    light_png, dark_png = (next(p for p in saved if p.name.endswith(f"-{laptop}-{s}.png")) for s in ("light", "dark"))
    assert light_png.read_bytes() != dark_png.read_bytes()
