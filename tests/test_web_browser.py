"""The web pages in a real browser: headless Chromium (tests/browser_fixtures.py) over `mcpower serve --http`.

One server process (the fake embedder, tests/http_fixtures.py) serves three datasets: the FastAPI docs
from shared/bench (all 155 pages), ``hostile`` (a document whose path, title and text are made to
attack the page) and ``broken`` (an unreadable manifest). Two more servers start where a test needs
them: one with a token (the login), one with ``--watch`` (live state). Every test fails on a console
error, and saves screenshots at laptop and phone width, light and dark, under test-artifacts/.
Elements are found by the ``data-testid`` hooks documented in docs/web.md.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest
from browser_fixtures import ARTIFACTS, Page, format_violations, unavailable
from conftest import FakeEmbedder
from http_fixtures import TOKEN, HttpServer, write_http_launcher
from server_fixtures import add_broken_dataset, subprocess_env, write_launcher

from mcpower.ingestion import IngestOptions, ingest

pytestmark = pytest.mark.browser

# shared/ lies beside the checkout (CI's clone) or at /work/shared (a worktree elsewhere)
FASTAPI = (
    next(
        (p for p in (Path(__file__).resolve().parents[2] / "shared", Path("/work/shared")) if p.is_dir()),
        Path("shared"),
    )
    / "bench/docs-fastapi/corpus"
)
QUERY = "how do I declare a path parameter"
WAIT = 60.0  # seconds for anything to appear: a deadline that tells a hang, not a speed
PAGE_BYTES = 100_000  # issue 21: "pages under ~100 KB" (a page and its static files, uncompressed)

# Markup, script URLs, direction overrides and zero-width characters where the page shows dataset
# data: the document's folder names and file name (its path), its first heading (the title) and body
# (the snippet and the document view), and the dataset's name and description.
RLO, ZWSP = "\u202e", "\u200b"
HOSTILE_DIR = f"a<script>alert(2)<{'/'}script>{RLO}gnp.{ZWSP}x<img src=x onerror=alert(3)>"
HOSTILE_FILE = f"evil{RLO}dm.exe.md"
HOSTILE_TEXT = f"""# <script>alert(1)</script> Quokkahostile {RLO}eltit{ZWSP} <img src=x onerror=alert(4)>

Quokkahostile body: <script>alert(5)</script> and [click me](javascript:alert(6)) and
<a href="javascript:alert(7)">a link</a> and <img src=x onerror="alert(8)"> and <svg onload=alert(9)>
<iframe src="javascript:alert(10)"></iframe> {RLO}evil\u202c zero{ZWSP}width \u2066isolate\u2069 javascript:alert(11)
<meta http-equiv="refresh" content="0;url=javascript:alert(12)"> <form action="javascript:alert(13)"><button>go</button></form>
"""


# ---------------------------------------------------------------- data and servers


def build(root: Path) -> Path:
    """The three datasets under ``root/datasets``: FastAPI docs, hostile, broken."""
    if not FASTAPI.is_dir():
        unavailable(f"needs the FastAPI docs at {FASTAPI}")
    datasets = root / "datasets"
    fake = FakeEmbedder()
    ingest(FASTAPI, datasets, IngestOptions(dataset_id="fastapi", name="FastAPI docs"), embedder=fake)
    folder = root / "src" / "hostile"
    (folder / HOSTILE_DIR).mkdir(parents=True)
    (folder / HOSTILE_DIR / HOSTILE_FILE).write_text(HOSTILE_TEXT, encoding="utf-8")
    options = IngestOptions(
        dataset_id="hostile", name=f"<b>Hostile</b> {RLO}", description="<script>alert(14)</script> x\u200by"
    )
    ingest(folder, datasets, options, embedder=fake)
    add_broken_dataset(datasets)
    return datasets


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("web")
    build(root)
    return root


@pytest.fixture(scope="module")
def server(root: Path) -> Iterator[HttpServer]:
    """`mcpower serve --http` on the three datasets, no token (loopback)."""
    srv = HttpServer(write_http_launcher(root), root / "datasets", token=None)
    yield srv
    srv.stop()


def wait(page: Page, condition: Any, message: str, timeout: float = WAIT) -> Any:
    """Poll ``condition(driver)`` until it is truthy; an element replaced meanwhile (the live list) is asked again."""
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.support.ui import WebDriverWait

    waiting = WebDriverWait(
        page.driver, timeout, poll_frequency=0.05, ignored_exceptions=(StaleElementReferenceException,)
    )
    return waiting.until(condition, message)


def by(testid: str) -> tuple[str, str]:
    return ("css selector", f'[data-testid="{testid}"]')


def one(page: Page, testid: str, within: Any = None) -> Any:
    return (within or page.driver).find_element(*by(testid))


def every(page: Page, testid: str, within: Any = None) -> list[Any]:
    return list((within or page.driver).find_elements(*by(testid)))


def open_page(page: Page, url: str, ready: str) -> None:
    """Load ``url`` and wait until the element ``ready`` (a data-testid) is there."""
    from selenium.webdriver.support import expected_conditions as ec

    page.driver.get(url)
    wait(page, ec.presence_of_element_located(by(ready)), f"no {ready} on {url}")


def click(page: Page, element: Any) -> None:
    """Scroll the element to the middle of the window and click it, as a person would."""
    page.driver.execute_script("arguments[0].scrollIntoView({block: 'center', behavior: 'instant'})", element)
    element.click()


def in_viewport(page: Page, element: Any) -> bool:
    return bool(
        page.driver.execute_script(
            "const r = arguments[0].getBoundingClientRect();"
            "return r.height > 0 && r.top >= 0 && r.bottom <= window.innerHeight;",
            element,
        )
    )


def record_weight(page: Page, name: str) -> dict[str, int]:
    """The bytes of the page and the files it loaded (Resource Timing; not the live list's own fetches),
    uncompressed as served, and what gzip would make of each; saved to test-artifacts/page-weight.json."""
    files = page.driver.execute_async_script(
        """
        const done = arguments[arguments.length - 1];
        const entries = performance.getEntriesByType('navigation').concat(performance.getEntriesByType('resource'))
          .filter(e => !['fetch', 'xmlhttprequest', 'beacon'].includes(e.initiatorType));
        const gzip = async url => {
          const body = await (await fetch(url, {cache: 'force-cache'})).blob();
          return (await new Response(body.stream().pipeThrough(new CompressionStream('gzip'))).arrayBuffer()).byteLength;
        };
        Promise.all(entries.map(async e => [e.name, e.decodedBodySize, e.encodedBodySize, await gzip(e.name)]))
          .then(done, err => done(String(err)));
        """
    )
    assert isinstance(files, list), files
    weight = {
        "files": len(files),
        "bytes": sum(f[1] for f in files),  # bodies uncompressed
        "sent": sum(f[2] for f in files),  # bodies as the server sent them (it does not compress)
        "gzip": sum(f[3] for f in files),  # bodies gzip-compressed (what a compressing proxy would send)
    }
    out = ARTIFACTS / "page-weight.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    known = json.loads(out.read_text(encoding="utf-8")) if out.exists() else {}
    known[name] = {**weight, "urls": [urlparse(f[0]).path for f in files]}
    out.write_text(json.dumps(known, indent=2) + "\n", encoding="utf-8")
    return weight


def cli_search(root: Path, dataset: str, query: str) -> dict[str, Any]:
    """`mcpower search DATASET QUERY --json` in a subprocess, with the same fake embedder as the server."""
    launcher = write_launcher(root)
    done = subprocess.run(
        [sys.executable, str(launcher), "search", dataset, query, "--json", "--datasets-dir", str(root / "datasets")],
        capture_output=True,
        text=True,
        env=subprocess_env(),
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)  # type: ignore[no-any-return]


# ---------------------------------------------------------------- the datasets page


def test_datasets_page_lists_real_and_broken_datasets(page: Page, server: HttpServer) -> None:
    open_page(page, server.base + "/", "dataset")
    cards = {card.get_attribute("data-dataset-id"): card for card in every(page, "dataset")}
    assert set(cards) == {"fastapi", "hostile", "broken"}

    fastapi = cards["fastapi"]
    assert fastapi.get_attribute("data-status") == "ready"
    assert one(page, "dataset-status", fastapi).text == "ready"
    assert one(page, "dataset-documents", fastapi).text == "155"
    assert ".md" in one(page, "dataset-types", fastapi).text

    weight = record_weight(page, "datasets")
    assert weight["bytes"] < PAGE_BYTES, weight

    broken = cards["broken"]
    assert broken.get_attribute("data-status") == "error"
    twin = json.loads(page.driver.execute_script("return fetch('/?format=json').then(r => r.text())"))
    expected = next(d for d in twin["datasets"] if d["id"] == "broken")
    assert one(page, "dataset-error-code", broken).text == expected["error_code"] == "INVALID_MANIFEST"
    assert one(page, "dataset-fix", broken).is_displayed()
    assert "mcpower ingest" in one(page, "dataset-fix", broken).text
    page.screenshots()


def test_slash_focuses_the_search_box(page: Page, server: HttpServer) -> None:
    from selenium.webdriver.common.action_chains import ActionChains

    open_page(page, server.base + "/search", "search-input")
    page.driver.execute_script("document.activeElement.blur()")
    ActionChains(page.driver).send_keys("/").perform()
    assert page.driver.switch_to.active_element == one(page, "search-input")
    assert one(page, "search-input").get_attribute("value") == ""  # the "/" was not typed into it

    # On the datasets page, which has no box, "/" opens the search page with its box.
    open_page(page, server.base + "/", "dataset")
    ActionChains(page.driver).send_keys("/").perform()
    wait(page, lambda d: urlparse(d.current_url).path == "/search", "'/' did not open the search page")


def test_the_keyboard_reaches_everything_with_a_visible_focus(page: Page, server: HttpServer) -> None:
    """Tab first reaches the skip link, which jumps to the content; every focused control shows a ring."""
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.keys import Keys

    open_page(page, server.base + f"/search?q={QUERY}&dataset=fastapi", "result")
    ActionChains(page.driver).send_keys(Keys.TAB).perform()
    skip = page.driver.switch_to.active_element
    assert skip.get_attribute("href").endswith("#main") and skip.is_displayed()
    outlines = []
    for _ in range(8):  # the skip link, the header's links, the search box, its button...
        outlines.append(
            page.driver.execute_script(
                "const e = document.activeElement, s = getComputedStyle(e);"
                "return [e.tagName, s.outlineStyle, s.outlineWidth, s.boxShadow];"
            )
        )
        ActionChains(page.driver).send_keys(Keys.TAB).perform()
    unringed = [o for o in outlines if o[1] == "none" and o[3] == "none"]
    assert not unringed, outlines
    open_page(page, server.base + "/search", "search-input")
    ActionChains(page.driver).send_keys(Keys.TAB, Keys.ENTER).perform()
    wait(page, lambda d: d.switch_to.active_element.get_attribute("id") == "main", "the skip link did not move focus")


def test_the_basic_search_works_without_javascript(page: Page, server: HttpServer, root: Path) -> None:
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.keys import Keys

    page.driver.execute_cdp_cmd("Emulation.setScriptExecutionDisabled", {"value": True})
    try:
        open_page(page, server.base + "/search", "search-input")
        ActionChains(page.driver).send_keys("/").perform()  # the page's script is off: "/" does nothing
        assert page.driver.switch_to.active_element != one(page, "search-input")
        one(page, "search-input").send_keys(QUERY, Keys.ENTER)
        wait(page, lambda d: d.find_elements(*by("result")), "no results without JavaScript")
        first = cli_search(root, "fastapi", QUERY)["results"][0]
        ids = [r.get_attribute("data-result-id") for r in every(page, "result")]
        assert first["result_id"] in ids
        one(page, "result-link", every(page, "result")[ids.index(first["result_id"])]).click()
        wait(page, lambda d: d.find_elements(*by("passage-line")), "no document without JavaScript")
    finally:
        page.driver.execute_cdp_cmd("Emulation.setScriptExecutionDisabled", {"value": False})


# ---------------------------------------------------------------- search and document


def search_in_browser(page: Page, server: HttpServer, dataset: str, query: str) -> list[Any]:
    """Type the query into the search page's form, as a person does; the results shown."""
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import Select

    open_page(page, server.base + "/search", "search-input")
    if not one(page, "search-dataset").is_displayed():  # in the folded "Options"
        page.driver.find_element("css selector", "details.options > summary").click()
    Select(one(page, "search-dataset")).select_by_value(dataset)
    one(page, "search-input").send_keys(query, Keys.ENTER)
    wait(page, lambda d: d.find_elements(*by("results")), f"no results section for {query!r}")
    return every(page, "result")


def test_search_returns_first_what_the_cli_returns_first(page: Page, server: HttpServer, root: Path) -> None:
    cli = cli_search(root, "fastapi", QUERY)
    results = search_in_browser(page, server, "fastapi", QUERY)
    assert results, "the page showed no results"
    first = results[0]
    assert first.get_attribute("data-result-id") == cli["results"][0]["result_id"]
    assert one(page, "result-path", first).text == cli["results"][0]["path"]
    assert one(page, "result-title", first).text == cli["results"][0]["title"]
    assert [r.get_attribute("data-result-id") for r in results] == [r["result_id"] for r in cli["results"]]
    assert one(page, "result-snippet", first).find_elements("css selector", "mark"), "no matched word marked"
    assert one(page, "search-time").is_displayed()

    # The search has a URL of its own: loading it again shows the same results, and Back returns.
    query = parse_qs(urlparse(page.driver.current_url).query)
    assert query["q"] == [QUERY] and query["dataset"] == ["fastapi"]
    weight = record_weight(page, "search")
    assert weight["bytes"] < PAGE_BYTES, weight
    page.screenshots()
    shared = page.driver.current_url
    page.driver.back()
    wait(page, lambda d: urlparse(d.current_url).query == "", "Back did not return to the empty search page")
    open_page(page, shared, "result")
    assert every(page, "result")[0].get_attribute("data-result-id") == cli["results"][0]["result_id"]


def test_a_result_opens_its_passage_highlighted(page: Page, server: HttpServer, root: Path) -> None:
    cli = cli_search(root, "fastapi", QUERY)["results"][0]
    results = search_in_browser(page, server, "fastapi", QUERY)
    one(page, "result-link", results[0]).click()
    wait(page, lambda d: d.find_elements(*by("passage-line")), "the document shows no highlighted passage")

    assert one(page, "document").get_attribute("data-result-id") == cli["result_id"]
    assert one(page, "doc-path").text == cli["path"]
    lines = every(page, "passage-line")
    numbers = [int(line.get_attribute("data-line")) for line in lines]
    assert numbers == list(range(cli["lines"]["start"], cli["lines"]["end"] + 1))
    assert all(line.is_displayed() for line in lines)
    assert in_viewport(page, lines[0]), "the passage is not scrolled into view"
    passage = "\n".join(line.text for line in lines)
    first_snippet_line = cli["snippet"].splitlines()[0].strip()
    assert first_snippet_line and first_snippet_line[:40] in passage
    # Highlighted: the passage's lines look different from the lines around them.
    colors = page.driver.execute_script(
        "const l = arguments[0], other = document.querySelector('#L' + (Number(l.dataset.line) - 1));"
        "return [getComputedStyle(l).backgroundColor, other && getComputedStyle(other).backgroundColor];",
        lines[0],
    )
    assert colors[0] != colors[1], colors
    weight = record_weight(page, "doc")
    assert weight["bytes"] < PAGE_BYTES, weight
    page.screenshots()

    # The chunk boundaries, on demand.
    assert not every(page, "chunk-boundary")
    click(page, one(page, "doc-chunks-toggle"))
    wait(page, lambda d: d.find_elements(*by("chunk-boundary")), "no chunk boundaries shown")
    assert every(page, "chunk-row")
    page.screenshots("chunks")


# ---------------------------------------------------------------- hostile text


def assert_inert(page: Page, origin: str) -> None:
    """Nothing from the dataset became markup, a script, a handler or a link out of the page."""
    from selenium.common.exceptions import NoAlertPresentException

    assert page.dialogs() == 0
    with pytest.raises(NoAlertPresentException):
        page.driver.switch_to.alert  # noqa: B018 - raises unless a dialog is open
    found = page.driver.execute_script(
        """
        const all = [...document.querySelectorAll('*')];
        return {
          scripts: [...document.scripts].map(s => s.getAttribute('src')),
          handlers: all.flatMap(e => [...e.attributes].filter(a => a.name.startsWith('on')).map(a => e.tagName + ' ' + a.name)),
          links: [...document.querySelectorAll('[href],[src],[action],[formaction]')]
            .map(e => e.getAttribute('href') || e.getAttribute('src') || e.getAttribute('action') || e.getAttribute('formaction')),
          embedded: [...document.querySelectorAll('img,svg,iframe,object,embed,meta[http-equiv],base,form:not([data-testid])')].map(e => e.outerHTML),
        };
        """
    )
    assert found["scripts"] == ["/static/web.js"], found["scripts"]
    assert found["handlers"] == [], found["handlers"]
    assert not [u for u in found["links"] if not u.startswith(("/", "#")) or u.startswith("//")], found["links"]
    assert found["embedded"] == [], found["embedded"]
    assert urlparse(page.driver.current_url).netloc == urlparse(origin).netloc


def test_hostile_document_text_renders_inert(page: Page, server: HttpServer) -> None:
    page.trap_dialogs()
    # The datasets page: the hostile name and description are text.
    open_page(page, server.base + "/", "dataset")
    card = page.driver.find_element("css selector", '[data-dataset-id="hostile"]')
    assert "<b>Hostile</b>" in one(page, "dataset-name", card).text
    assert_inert(page, server.base)

    results = search_in_browser(page, server, "hostile", "quokkahostile")
    assert len(results) == 1
    title, path = one(page, "result-title", results[0]).text, one(page, "result-path", results[0]).text
    assert "<script>alert(1)</script>" in title and "U+202E" in title  # shown, as text, the override made visible
    assert "<img src=x onerror=alert(3)>" in path and "U+202E" in path and "U+200B" in path
    shown = results[0].get_attribute("textContent")  # the excerpt and the whole passage (folded)
    assert "click me" in shown and "javascript:alert(11)" in shown  # a link's words, a bare URL as text
    assert_inert(page, server.base)
    page.screenshots("search")

    one(page, "result-link", results[0]).click()
    wait(page, lambda d: d.find_elements(*by("passage-line")), "the hostile document did not open")
    text = one(page, "doc-text").text
    for attack in ("<script>alert(5)</script>", '<a href="javascript:alert(7)">', "<svg onload=alert(9)>"):
        assert attack in text
    assert_inert(page, server.base)
    page.screenshots("doc")

    # Following every link on the page leads to this server's pages, never to a script or elsewhere.
    doc_url = page.driver.current_url
    hrefs = [a.get_attribute("href") for a in page.driver.find_elements("css selector", "a[href]")]
    for href in hrefs:
        page.driver.get(href)
        assert urlparse(page.driver.current_url).netloc == urlparse(server.base).netloc, href
        assert page.dialogs() == 0, href
    page.driver.get(doc_url)
    assert page.dialogs() == 0


# ---------------------------------------------------------------- a token


@pytest.fixture(scope="module")
def token_server(root: Path) -> Iterator[HttpServer]:
    srv = HttpServer(write_http_launcher(root), root / "datasets", token=TOKEN)
    yield srv
    srv.stop()


def test_a_token_protected_server_asks_for_the_token(page: Page, token_server: HttpServer) -> None:
    from selenium.webdriver.common.keys import Keys

    # Refused requests the test makes on purpose log "Failed to load resource ... 401" in the console.
    page.allow_console(r"status of 401")
    base = token_server.base
    open_page(page, base + "/search?q=path", "login-form")
    assert urlparse(page.driver.current_url).path == "/login"
    assert not every(page, "result") and not every(page, "dataset")
    refused = page.driver.execute_script(
        "return Promise.all(['/?format=json', '/search?q=x&format=json', '/', '/doc?id=fastapi:0']"
        ".map(u => fetch(u, {redirect: 'manual'}).then(r => [u, r.status, r.type])))"
    )
    assert all(status in (0, 401, 303) and status != 200 for _, status, _ in refused), refused  # 0: a redirect
    page.screenshots("login")

    one(page, "login-token").send_keys("not-the-token", Keys.ENTER)
    wait(page, lambda d: d.find_elements(*by("login-error")), "a wrong token was not refused")
    assert not every(page, "dataset")

    one(page, "login-token").send_keys(TOKEN, Keys.ENTER)
    wait(page, lambda d: d.find_elements(*by("results")), "signing in did not lead on to the search asked for")
    # A page session (a __Host- cookie the browser keeps from http://127.0.0.1, a secure context),
    # never the token itself.
    cookie = next(c for c in page.driver.get_cookies() if c["name"] == "__Host-mcpower_session")
    assert cookie["httpOnly"] and cookie["secure"] and cookie["sameSite"] == "Strict", cookie
    assert cookie["path"] == "/" and not cookie.get("domain", "").startswith(".") and TOKEN not in cookie["value"]
    assert "mcpower_session" not in page.driver.execute_script("return document.cookie")
    open_page(page, base + "/", "dataset")
    assert {c.get_attribute("data-dataset-id") for c in every(page, "dataset")} == {"fastapi", "hostile", "broken"}

    one(page, "logout").click()
    wait(page, lambda d: d.find_elements(*by("login-form")), "signing out did not return to the login")
    page.driver.get(base + "/")
    wait(page, lambda d: d.find_elements(*by("login-form")), "the pages still answer after signing out")


# ---------------------------------------------------------------- live state


def test_a_watched_edit_appears_without_a_reload(page: Page, tmp_path: Path) -> None:
    if not FASTAPI.is_dir():
        unavailable(f"needs the FastAPI docs at {FASTAPI}")
    source = tmp_path / "src"
    source.mkdir()
    for name in ("async.md", "features.md", "environment-variables.md"):
        shutil.copy(FASTAPI / name, source / name)
    datasets = tmp_path / "datasets"
    ingest(source, datasets, IngestOptions(dataset_id="live", name="Live docs"), embedder=FakeEmbedder())
    srv = HttpServer(write_http_launcher(tmp_path), datasets, "--watch", token=None)
    try:
        srv.wait_event("watch.start", timeout=WAIT)
        open_page(page, srv.base + "/", "dataset")
        card = '[data-dataset-id="live"] [data-testid="dataset-documents"]'
        assert page.driver.find_element("css selector", card).text == "3"
        page.driver.execute_script("window.__sameDocument = true")  # gone if the page reloads

        shutil.copy(FASTAPI / "benchmarks.md", source / "benchmarks.md")
        wait(
            page,
            lambda d: d.find_element("css selector", card).text == "4",  # the list is replaced as a whole
            "the datasets page did not show the re-indexed counts",
        )
        assert page.driver.execute_script("return window.__sameDocument") is True, "the page was reloaded"
        counts = '[data-dataset-id="live"] [data-testid="dataset-last-reindex-counts"]'
        wait(page, lambda d: "1 added" in d.find_element("css selector", counts).text, "no counts of the re-index")
        page.screenshots()
    finally:
        srv.stop()


# ---------------------------------------------------------------- accessibility


@pytest.mark.parametrize("which", ["datasets", "search", "doc", "login", "error"])
def test_accessibility_audit(
    page: Page, axe_source: str, server: HttpServer, token_server: HttpServer, root: Path, which: str
) -> None:
    """axe-core on each page, light and dark: no serious or critical violation (contrast included)."""
    result_id = cli_search(root, "fastapi", QUERY)["results"][0]["result_id"] if which == "doc" else ""
    url, ready = {
        "datasets": (server.base + "/", "dataset"),
        "search": (server.base + "/search?" + f"q={QUERY}&dataset=fastapi", "result"),
        "doc": (server.base + f"/doc?id={result_id}#passage", "passage-line"),
        "login": (token_server.base + "/login", "login-form"),
        "error": (server.base + "/doc?id=fastapi:0000000000000000", "error"),
    }[which]
    if which == "error":
        page.allow_console(r"status of 404")
    open_page(page, url, ready)
    for scheme in ("light", "dark"):
        page.scheme(scheme)
        violations = page.axe(axe_source)
        assert not violations, f"{which} ({scheme}):\n{format_violations(violations)}"
    if which == "error":
        page.screenshots()
