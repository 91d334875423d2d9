"""Headless Chromium for the web pages' tests (tests/test_web_browser.py), driven by Selenium.

- **Which browser**: Debian's ``chromium`` and ``chromium-driver`` (``/usr/bin/chromium``,
  ``/usr/bin/chromedriver``; ``.ci/run`` installs them), or any Chromium with its matching
  chromedriver named by ``MCPOWER_TEST_CHROMIUM`` / ``MCPOWER_TEST_CHROMEDRIVER`` or found on PATH.
  Nothing is ever downloaded: Selenium is handed both paths, so Selenium Manager (which would fetch a
  browser or driver) is not run -- and if Selenium ever tried, the test fails (``_no_selenium_manager``).
- **Where there is none**: every test marked ``browser`` is skipped with the reason (``-ra`` prints it,
  and a summary line counts them); with ``MCPOWER_TESTS_REQUIRE_BROWSER=1`` (``.ci/run`` sets it) they
  fail instead, so CI cannot pass without having run them.
- **Each test** gets :class:`Page`: the one session browser (new headless, a fresh profile in tmp,
  ``--no-sandbox`` only as root) reset to a laptop viewport, light scheme, no cookies. The browser's
  console is read after the test: any error there fails it (``Page.allow_console`` for the ones a test
  provokes on purpose). ``Page.screenshots`` saves the page at laptop and phone width, light and dark,
  under ``test-artifacts/screenshots/`` (gitignored; ``MCPOWER_TEST_ARTIFACTS`` moves it) for a person
  to look at. ``Page.axe`` runs axe-core (npm, installed into tests/browser/node_modules on first use)
  and returns its serious and critical violations.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from server_fixtures import REPO_ROOT, TESTS_DIR, npm_install

REQUIRE = os.environ.get("MCPOWER_TESTS_REQUIRE_BROWSER", "") not in ("", "0")
ARTIFACTS = Path(os.environ.get("MCPOWER_TEST_ARTIFACTS") or REPO_ROOT / "test-artifacts")
AXE_DIR = TESTS_DIR / "browser"  # package.json pinning axe-core; node_modules/ gitignored
# The two widths the pages must read well at: a common laptop, and a phone (iPhone 12-15 in CSS pixels).
VIEWPORTS = {"laptop": (1366, 900), "phone": (390, 844)}
SCHEMES = ("light", "dark")
AXE_IMPACTS = ("serious", "critical")  # what fails a test; minor and moderate ones are printed only
# Chromium's network services (component updates, sync, safe browsing...): off, so the browser talks to
# the server under test and nothing else.
QUIET_FLAGS = (
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-default-apps",
    "--disable-sync",
    "--disable-extensions",
    "--disable-features=Translate,OptimizationHints,MediaRouter",
    "--no-first-run",
    "--no-default-browser-check",
    "--metrics-recording-only",
    "--disable-dev-shm-usage",  # small /dev/shm in containers
    "--disable-gpu",
)


def _find(env: str, *names: str) -> str | None:
    given = os.environ.get(env)
    if given:
        return given if os.access(given, os.X_OK) else None
    for name in names:
        found = shutil.which(name) or (f"/usr/bin/{name}" if os.access(f"/usr/bin/{name}", os.X_OK) else None)
        if found:
            return found
    return None


def browser_paths() -> tuple[str, str] | str:
    """(chromium, chromedriver), or why they cannot be used."""
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (pip install -e '.[test]')"
    chromium = _find("MCPOWER_TEST_CHROMIUM", "chromium", "chromium-browser", "google-chrome")
    driver = _find("MCPOWER_TEST_CHROMEDRIVER", "chromedriver")
    if chromium is None or driver is None:
        return (
            "no Chromium and chromedriver found (Debian/Ubuntu: apt-get install chromium chromium-driver; "
            "elsewhere set MCPOWER_TEST_CHROMIUM and MCPOWER_TEST_CHROMEDRIVER)"
        )
    return chromium, driver


def unavailable(reason: str) -> None:
    """Skip the test, or fail it where the browser tests are required (CI)."""
    if REQUIRE:
        pytest.fail(f"browser tests required (MCPOWER_TESTS_REQUIRE_BROWSER) but: {reason}", pytrace=False)
    pytest.skip(f"browser: {reason}")


# ---------------------------------------------------------------- the browser


def _no_selenium_manager() -> None:
    """Selenium Manager downloads browsers and drivers: make any call to it an error, and tell it to stay offline."""
    from selenium.webdriver.common import selenium_manager

    def refuse(self: Any, args: list[str]) -> dict[str, str]:
        raise AssertionError(f"Selenium Manager was asked for a browser or driver ({args}); it must not run")

    selenium_manager.SeleniumManager.binary_paths = refuse  # type: ignore[method-assign]
    os.environ["SE_OFFLINE"] = "true"


@pytest.fixture(scope="session")
def chromium(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One headless Chromium for the session (a WebDriver), or a skip saying why there is none."""
    paths = browser_paths()
    if isinstance(paths, str):
        unavailable(paths)
        raise AssertionError("unreachable")
    binary, driver_path = paths
    _no_selenium_manager()
    from selenium import webdriver
    from selenium.common.exceptions import WebDriverException
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = binary
    options.add_argument("--headless=new")
    options.add_argument(f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}")
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        options.add_argument("--no-sandbox")  # Chromium refuses to start its sandbox as root
    for flag in QUIET_FLAGS:
        options.add_argument(flag)
    w, h = VIEWPORTS["laptop"]
    options.add_argument(f"--window-size={w},{h}")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    log = tmp_path_factory.mktemp("chromedriver") / "chromedriver.log"
    try:
        driver = webdriver.Chrome(service=Service(executable_path=driver_path, log_output=str(log)), options=options)
    except WebDriverException as e:
        unavailable(f"Chromium did not start ({binary}, {driver_path}): {e.msg or e}"[:600])
        raise AssertionError("unreachable") from e
    driver.set_page_load_timeout(60)
    driver.set_script_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()


# Counts window.alert/confirm/prompt/print before any page script runs (the count lives in the page:
# a navigation starts it again at 0, which the test checks separately).
_TRAP = """
window.__mcpowerDialogs = 0;
for (const name of ["alert", "confirm", "prompt", "print"]) {
  window[name] = function () { window.__mcpowerDialogs += 1; return null; };
}
"""


@dataclass
class Page:
    """The browser, reset for one test, with the checks every test makes."""

    driver: Any
    name: str
    allowed: list[re.Pattern[str]] = field(default_factory=list)
    console: list[dict[str, Any]] = field(default_factory=list)
    scripts: list[str] = field(default_factory=list)  # added by trap_dialogs, removed after the test

    def allow_console(self, pattern: str) -> None:
        """A console error this test provokes on purpose (e.g. the 401 of a refused page)."""
        self.allowed.append(re.compile(pattern))

    def read_console(self) -> list[dict[str, Any]]:
        """The console entries since the last read (the driver's log is drained by reading it)."""
        entries = self.driver.get_log("browser")
        self.console.extend(entries)
        return list(entries)

    def console_errors(self) -> list[str]:
        self.read_console()
        return [
            e["message"]
            for e in self.console
            if e.get("level") == "SEVERE" and not any(p.search(e["message"]) for p in self.allowed)
        ]

    def viewport(self, width: int, height: int, mobile: bool = False) -> None:
        self.driver.execute_cdp_cmd(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": mobile},
        )

    def scheme(self, scheme: str) -> None:
        """Light or dark, and reduced motion: smooth scrolling would leave a scroll half done when a test looks."""
        features = [
            {"name": "prefers-color-scheme", "value": scheme},
            {"name": "prefers-reduced-motion", "value": "reduce"},
        ]
        self.driver.execute_cdp_cmd("Emulation.setEmulatedMedia", {"media": "", "features": features})

    def screenshots(self, label: str = "") -> list[Path]:
        """The page as it is now at each width and scheme, saved as PNGs; restores laptop, light."""
        folder = ARTIFACTS / "screenshots"
        folder.mkdir(parents=True, exist_ok=True)
        stem = re.sub(r"[^A-Za-z0-9_.-]+", "-", f"{self.name}{'-' + label if label else ''}").strip("-")
        saved = []
        for where, (w, h) in VIEWPORTS.items():
            self.viewport(w, h, mobile=where == "phone")
            for scheme in SCHEMES:
                self.scheme(scheme)
                self.driver.execute_async_script("requestAnimationFrame(() => requestAnimationFrame(arguments[0]))")
                path = folder / f"{stem}-{w}-{scheme}.png"
                assert self.driver.save_screenshot(str(path)), path
                saved.append(path)
        self.viewport(*VIEWPORTS["laptop"])
        self.scheme("light")
        return saved

    def trap_dialogs(self) -> None:
        """From the next navigation on, window.alert & co. count instead of opening (see dialogs())."""
        added = self.driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": _TRAP})
        self.scripts.append(added["identifier"])

    def dialogs(self) -> int:
        """How many dialogs the current document tried to open (0 if it was loaded before trap_dialogs)."""
        return int(self.driver.execute_script("return window.__mcpowerDialogs || 0"))

    def axe(self, source: str) -> list[dict[str, Any]]:
        """axe-core's violations on the current page (WCAG 2.x A/AA and best practice), serious or worse."""
        self.driver.execute_script(source)
        result = self.driver.execute_async_script(
            "const done = arguments[arguments.length - 1];"
            "axe.run(document, {resultTypes: ['violations']})"
            ".then(r => done(JSON.stringify(r.violations)), e => done(JSON.stringify({error: String(e)})));"
        )
        violations = json.loads(result)
        assert not isinstance(violations, dict), violations
        return [v for v in violations if v.get("impact") in AXE_IMPACTS]


@pytest.fixture
def page(chromium: Any, request: pytest.FixtureRequest) -> Iterator[Page]:
    """The session's browser, reset (blank page, no cookies, laptop, light); fails the test on console errors."""
    driver = chromium
    driver.get("about:blank")
    driver.execute_cdp_cmd("Network.clearBrowserCookies", {})
    driver.get_log("browser")  # drop what earlier tests left
    p = Page(driver, request.node.name)
    p.viewport(*VIEWPORTS["laptop"])
    p.scheme("light")
    yield p
    for identifier in p.scripts:
        driver.execute_cdp_cmd("Page.removeScriptToEvaluateOnNewDocument", {"identifier": identifier})
    errors = p.console_errors()
    driver.get("about:blank")
    assert not errors, f"console errors in the browser: {errors}"


def format_violations(violations: list[dict[str, Any]]) -> str:
    return "\n".join(
        f"{v['impact']}: {v['id']} ({v['help']}) at {[n.get('target') for n in v.get('nodes', [])][:5]}"
        for v in violations
    )


@pytest.fixture(scope="session")
def axe_source() -> str:
    """axe-core's axe.min.js, installed from npm into tests/browser/node_modules on first use."""
    script = AXE_DIR / "node_modules" / "axe-core" / "axe.min.js"
    if not script.exists():
        if shutil.which("node") is None or shutil.which("npm") is None:
            unavailable("node and npm are needed to install axe-core (the accessibility audit)")
        try:
            npm_install(AXE_DIR, timeout=120)
        except pytest.skip.Exception as e:  # no node/npm or no registry: skip, or fail where required
            unavailable(f"axe-core could not be installed: {e.msg}")
    if not script.exists():
        unavailable(f"axe-core was not installed into {AXE_DIR / 'node_modules'}")
    return script.read_text(encoding="utf-8")


# ---------------------------------------------------------------- making skips visible


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    config.stash[_BROWSER_TESTS] = [item.nodeid for item in items if item.get_closest_marker("browser")]


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    """One line saying how many browser tests ran, and why the others did not."""
    ids = set(config.stash.get(_BROWSER_TESTS, []))
    if not ids:
        return
    counts: dict[str, int] = {}
    reasons: set[str] = set()
    for outcome in ("passed", "failed", "skipped", "error"):
        for report in terminalreporter.stats.get(outcome, []):
            if getattr(report, "nodeid", None) in ids and (report.when == "call" or outcome != "passed"):
                counts[outcome] = counts.get(outcome, 0) + 1
                if outcome == "skipped" and isinstance(report.longrepr, tuple):
                    reasons.add(str(report.longrepr[2]).removeprefix("Skipped: "))
    line = ", ".join(f"{n} {k}" for k, n in sorted(counts.items())) or "none reported"
    terminalreporter.write_line(f"browser tests ({len(ids)} collected): {line}")
    for reason in sorted(reasons):
        terminalreporter.write_line(f"  skipped because {reason}")


_BROWSER_TESTS = pytest.StashKey[list[str]]()
