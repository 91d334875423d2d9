"""The web pages (mcpower/web, docs/web.md) in process: every page and its JSON twin, the search
answering exactly as knowledge_search does, the document view, errors, access (token, cookie,
login, Host/Origin), security headers, hostile document text, page weight.

The real-browser tests (Chromium) are the ui helper's: tests/browser/."""

from __future__ import annotations

import html
import re
import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx2
import pytest
from asgi_fixtures import BASE, INITIALIZE, MCP_HEADERS, app_serving, asgi_client
from conftest import FakeEmbedder, write_files
from http_fixtures import TOKEN
from mcp import Client
from server_fixtures import add_broken_dataset

import mcpower.search
from mcpower.ingestion import IngestOptions, ingest
from mcpower.registry import Registry
from mcpower.server.app import KnowledgeServer, create_server
from mcpower.server.http import HttpOptions
from mcpower.web.login import local_target

pytestmark = pytest.mark.anyio

PAGES = ["/", "/search", "/search?q=toolkit", "/login"]


@asynccontextmanager
async def serving(registry: Registry, **options: Any) -> AsyncIterator[tuple[KnowledgeServer, Any]]:
    """The HTTP app (no token unless given) with its lifespan running."""
    async with app_serving(registry, HttpOptions(**{"token": None, **options})) as served:
        yield served


def web(app: Any, token: str | None = None, **headers: str) -> httpx2.AsyncClient:
    return asgi_client(app, token, **headers)


async def first_result(h: httpx2.AsyncClient, query: str = "zephyrine daemon", **params: str) -> dict[str, Any]:
    r = await h.get("/search", params={"q": query, "format": "json", **params})
    assert r.status_code == 200, r.text
    results: list[dict[str, Any]] = r.json()["response"]["results"]
    return results[0]


# ---------------------------------------------------------------- the pages and their twins


async def test_the_datasets_page_lists_every_dataset_with_its_state(registry: Registry, datasets: Path) -> None:
    add_broken_dataset(datasets)
    async with serving(registry) as (_, app), web(app) as h:
        data = (await h.get("/?format=json")).json()
        page = (await h.get("/")).text
    rows = {d["id"]: d for d in data["datasets"]}
    assert set(rows) == {"broken", "handbook", "recipes"}
    assert data["counts"] == {"ready": 2, "error": 1, "watched": 0, "indexing": 0}
    handbook = rows["handbook"]
    assert (handbook["documents"], handbook["chunks"], handbook["file_types"]) == (4, 12, {".md": 3, ".txt": 1})
    assert handbook["model"] == "fake-hash-embedder" and handbook["size_bytes"] > 0
    assert handbook["updated_at"] and handbook["created_at"] and handbook["watched"] is False
    assert str(datasets) not in str(data)  # the source folder is redacted, as for MCP clients
    broken = rows["broken"]
    assert broken["error_code"] == "INVALID_MANIFEST" and "manifest.json" in broken["problem"]
    assert broken["fix"] == "mcpower ingest SOURCE_FOLDER --id broken --replace"
    for text in ('data-dataset-id="handbook"', 'data-testid="dataset-fix"', "INVALID_MANIFEST", "12</dd>"):
        assert text in page


async def test_the_datasets_page_is_what_knowledge_list_datasets_says(registry: Registry, datasets: Path) -> None:
    add_broken_dataset(datasets)
    async with Client(create_server(registry)) as direct:
        listed = (await direct.call_tool("knowledge_list_datasets", {})).structured_content["datasets"]
    async with serving(registry) as (_, app), web(app) as h:
        rows = (await h.get("/?format=json")).json()["datasets"]
    assert [{k: r[k] for k in listed[i]} for i, r in enumerate(rows)] == listed


async def test_a_watched_dataset_shows_its_watch_and_last_reindex(registry: Registry, datasets: Path) -> None:
    from mcpower.layout import WatchClaim
    from mcpower.results import ReindexCounts, WatchState

    claim = WatchClaim.take(datasets / "recipes")
    assert claim is not None
    try:
        claim.write(
            WatchState(
                state="indexing",
                pid=1,
                since="2026-01-02T03:04:05+00:00",
                last_update="2026-01-02T04:05:06+00:00",
                last_counts=ReindexCounts(added=1, changed=2, removed=3, embedded=4, seconds=0.5),
            )
        )
        async with serving(registry) as (_, app), web(app) as h:
            data = (await h.get("/?format=json")).json()
            page = (await h.get("/")).text
    finally:
        claim.release()
    recipes = next(d for d in data["datasets"] if d["id"] == "recipes")
    assert (recipes["watched"], recipes["watch_state"], recipes["last_reindex"]) == (
        True,
        "indexing",
        "2026-01-02T04:05:06+00:00",
    )
    assert data["counts"]["indexing"] == 1
    assert recipes["last_reindex_counts"] == {"added": 1, "changed": 2, "removed": 3, "embedded": 4, "seconds": 0.5}
    assert 'data-testid="dataset-watch">indexing' in page and "2026-01-02 04:05 UTC" in page
    assert "1 added, 2 changed, 3 removed; 4 chunks embedded in 0.5 s" in page


async def test_a_dataset_whose_source_folder_is_gone_is_stale(
    registry: Registry, datasets: Path, tmp_path: Path
) -> None:
    write_files(tmp_path / "moved", {"a.md": "# A\n\nText.\n"})
    ingest(tmp_path / "moved", datasets, IngestOptions(dataset_id="moved"), embedder=FakeEmbedder())
    shutil.rmtree(tmp_path / "moved")
    async with serving(registry) as (_, app), web(app) as h:
        rows = {d["id"]: d for d in (await h.get("/?format=json")).json()["datasets"]}
        page = (await h.get("/")).text
    assert (rows["moved"]["stale"], rows["moved"]["stale_reason"]) == (True, "folder gone")
    assert rows["moved"]["fix"] == "mcpower ingest NEW_FOLDER --id moved --replace"
    assert rows["handbook"]["stale"] is None and rows["handbook"]["problem"] is None
    assert page.count('data-testid="dataset-stale"') == 1


async def test_the_search_twin_is_knowledge_searchs_answer(registry: Registry) -> None:
    arguments = {"query": "zephyrine toolkit", "top_k": 4, "mode": "hybrid", "folder": "guide", "max_tokens": 2000}
    arguments |= {"offset": 0, "group": "passages"}  # the page asks for paging, and says how it groups
    async with Client(create_server(registry)) as direct:
        want = (await direct.call_tool("knowledge_search", arguments)).structured_content
    async with serving(registry) as (_, app), web(app) as h:
        params = {"q": "zephyrine toolkit", "k": "4", "mode": "hybrid", "folder": "guide", "max_tokens": "2000"}
        got = (await h.get("/search", params={**params, "format": "json"})).json()
    response = got["response"]
    assert response["meta"].pop("duration_ms") >= 0 and want["meta"].pop("duration_ms") >= 0
    # The estimate counts the characters of duration_ms too (0.9 or 12.34): within a token or two.
    assert abs(response["meta"].pop("estimated_tokens") - want["meta"].pop("estimated_tokens")) <= 3
    assert response == want
    assert got["form"]["q"] == "zephyrine toolkit" and got["error"] is None


async def test_the_search_page_shows_results_as_a_person_reads_them(registry: Registry) -> None:
    async with serving(registry) as (_, app), web(app) as h:
        data = (await h.get("/search", params={"q": "quokka diagnostics", "format": "json"})).json()
        page = (await h.get("/search", params={"q": "quokka diagnostics"})).text
    top = data["response"]["results"][0]
    assert top["path"] == "guide/usage.md"
    assert f'href="/doc?id={quote(top["result_id"], safe="")}#passage"' in page
    assert "<mark>quokka</mark>" in page and "<mark>diagnostics</mark>" in page
    assert f'value="{top["score"]}"' in page  # the score's bar (a <meter>)
    assert html.escape(top["heading_path"], quote=False) in page
    assert 'data-testid="search-time"' in page


async def test_low_confidence_and_paging_are_shown(registry: Registry) -> None:
    async with serving(registry) as (_, app), web(app) as h:
        weak = await h.get("/search", params={"q": "xylophone unrelated words"})
        data = (await h.get("/search", params={"q": "toolkit", "k": "1", "format": "json"})).json()
        paged = await h.get("/search", params={"q": "toolkit", "k": "1"})
    assert 'data-testid="low-confidence"' in weak.text or 'data-testid="no-results"' in weak.text
    assert data["next_url"] == "/search?q=toolkit&mode=hybrid&k=1&group=passages&offset=1"
    assert html.escape(data["next_url"]) in paged.text


async def test_the_document_view_highlights_the_passage(registry: Registry) -> None:
    async with serving(registry) as (_, app), web(app) as h:
        top = await first_result(h, "zephyrine daemon option", dataset="handbook", group="none")
        data = (await h.get("/doc", params={"id": top["result_id"], "format": "json"})).json()
        page = (await h.get("/doc", params={"id": top["result_id"]})).text
        chunked = (await h.get("/doc", params={"id": top["result_id"], "chunks": "1"})).text
    start, end = top["lines"]["start"], top["lines"]["end"]
    window = data["window"]
    assert data["source"]["lines"] == top["lines"] and window["passage"] == top["lines"]
    highlighted = [line["n"] for line in window["lines"] if line["passage"]]
    assert highlighted == list(range(start, end + 1))
    marked = [int(n) for n in re.findall(r'id="L(\d+)" data-line="\d+" data-testid="passage-line"', page)]
    assert marked == highlighted
    assert page.index('id="passage"') < page.index(f'id="L{start}"')
    source = (Path(registry.root or "").parent / "src" / "handbook" / "guide" / "install.md").read_text().split("\n")
    assert [line["text"] for line in window["lines"]] == source[window["first"] - 1 : window["last"]]
    assert 'data-testid="chunk-boundary"' not in page
    assert chunked.count('data-testid="chunk-boundary"') == len(window["chunks"]) > 1
    assert 'aria-current="true"' in chunked


async def test_a_huge_document_is_shown_a_window_at_a_time(registry: Registry, datasets: Path, tmp_path: Path) -> None:
    lines = [f"line {n} " + ("filler words " * 40) for n in range(1, 6001)]
    lines[3000] = "the needle ostrich is here"
    write_files(tmp_path / "big", {"big.txt": "\n".join(lines) + "\n"})
    ingest(tmp_path / "big", datasets, IngestOptions(dataset_id="big"), embedder=FakeEmbedder())
    registry.scan()
    async with serving(registry) as (_, app), web(app) as h:
        top = await first_result(h, "needle ostrich", dataset="big")
        page = await h.get("/doc", params={"id": top["result_id"]})
        data = (await h.get("/doc", params={"id": top["result_id"], "format": "json"})).json()
        later = (await h.get("/doc", params={"id": top["result_id"], "from": "5990", "format": "json"})).json()
    assert len(page.content) < 100_000
    window = data["window"]
    assert window["first"] <= 3001 <= window["last"] and window["total_lines"] == 6001
    assert window["previous"] is not None and window["next"] is not None
    assert 'data-testid="doc-next"' in page.text and 'data-testid="doc-previous"' in page.text
    assert later["window"]["first"] == 5990 and later["window"]["next"] is None


@pytest.mark.parametrize(
    ("url", "status", "code"),
    [
        ("/search?q=x&dataset=nope", 404, "DATASET_NOT_FOUND"),
        ("/search?q=x&k=0", 400, "INVALID_TOP_K"),
        ("/search?q=x&k=many", 400, "INVALID_TOP_K"),
        ("/search?q=x&mode=fast", 400, "INVALID_QUERY"),
        ("/doc?id=nope", 404, "RESULT_NOT_FOUND"),
        ("/doc?id=recipes:00000000000000ff", 404, "RESULT_NOT_FOUND"),
        ("/doc", 400, "INVALID_ARGUMENT"),
    ],
)
async def test_errors_are_pages_with_a_4xx_status(registry: Registry, url: str, status: int, code: str) -> None:
    async with serving(registry) as (_, app), web(app) as h:
        page = await h.get(url)
        twin = await h.get(url + ("&" if "?" in url else "?") + "format=json")
    assert page.status_code == twin.status_code == status
    assert "text/html" in page.headers["content-type"] and code in page.text and "Traceback" not in page.text
    assert twin.json()["error"]["code"] == code


# ---------------------------------------------------------------- access


async def test_with_a_token_no_page_answers_without_it(registry: Registry) -> None:
    async with serving(registry, token=TOKEN) as (_, app), web(app) as h:
        for url in ["/", "/search?q=toolkit", "/doc?id=recipes:00000000000000ff"]:
            r = await h.get(url)
            assert r.status_code == 303 and r.headers["location"] == "/login?next=" + quote(url, safe="")
            twin = await h.get(url + ("&" if "?" in url else "?") + "format=json")
            assert twin.status_code == 401 and "WWW-Authenticate" in twin.headers
            wrong = await h.get(url, headers={"Authorization": "Bearer wrong"})
            assert wrong.status_code == 303
        login = await h.get("/login?next=/search")
        assert login.status_code == 200 and 'data-testid="login-form"' in login.text
        for url in ["/static/web.css", "/static/web.js", "/static/favicon.svg", "/favicon.ico"]:
            assert (await h.get(url)).status_code == 200, url  # the login page needs them
    async with serving(registry, token=TOKEN) as (_, app), web(app, token=TOKEN) as h:
        assert (await h.get("/")).status_code == 200  # the bearer header works too
        assert (await h.get("/search?q=toolkit&format=json")).status_code == 200


async def test_login_sets_a_cookie_the_pages_take_and_mcp_does_not(registry: Registry) -> None:
    """The cookie is a page session of its own: a random id, never the token, in a __Host- cookie,
    taken by the pages only; sent to /mcp, as a cookie or as a bearer token, it is refused."""
    async with serving(registry, token=TOKEN) as (_, app), web(app) as h:
        refused = await h.post("/login", data={"token": "wrong", "next": "/search"})
        assert refused.status_code == 401 and 'data-testid="login-error"' in refused.text
        assert "set-cookie" not in refused.headers
        r = await h.post("/login", data={"token": TOKEN, "next": "/search?q=toolkit"}, headers={"Origin": BASE})
        assert r.status_code == 303 and r.headers["location"] == "/search?q=toolkit"
        cookie = r.headers.get_list("set-cookie")[0]
        for attribute in ("__Host-mcpower_session=", "HttpOnly", "SameSite=strict", "Secure", "Path=/"):
            assert attribute.lower() in cookie.lower(), cookie
        assert "domain" not in cookie.lower() and TOKEN not in " ".join(r.headers.get_list("set-cookie"))
        session = cookie.split(";")[0].partition("=")[2]
        assert len(session) >= 43  # 256 random bits, URL-safe
        jar = {"Cookie": f"__Host-mcpower_session={session}"}
        assert (await h.get("/", headers=jar)).status_code == 200
        assert (await h.get("/search?q=toolkit&format=json", headers=jar)).status_code == 200
        mcp = await h.post("/mcp", json=INITIALIZE, headers={**MCP_HEADERS, **jar})
        assert mcp.status_code == 401
        as_bearer = await h.post("/mcp", json=INITIALIZE, headers={**MCP_HEADERS, "Authorization": f"Bearer {session}"})
        assert as_bearer.status_code == 401
        for raw in (f"__Host-mcpower_session={TOKEN}", f"mcpower_token={TOKEN}"):  # the token is no session
            assert (await h.get("/", headers={"Cookie": raw})).status_code == 303
        out = await h.post("/logout", headers={**jar, "Origin": BASE})
        assert out.status_code == 303 and out.headers["location"] == "/login"
        gone = out.headers.get_list("set-cookie")
        assert any(c.startswith('__Host-mcpower_session=""') and "max-age=0" in c.lower() for c in gone), gone
        assert any(c.startswith('mcpower_token=""') for c in gone), gone  # the old token cookie goes too
        assert (await h.get("/", headers=jar)).status_code == 303  # ended on the server: the cookie opens nothing


async def test_a_page_shows_who_is_signed_in(registry: Registry) -> None:
    async with serving(registry, token=TOKEN) as (_, app), web(app, token=TOKEN) as h:
        page = (await h.get("/")).text
        missing = await h.get("/doc?id=recipes:00000000000000ff")  # an error page keeps the header
        unrouted = await h.get("/no-such-page")
    # the all-datasets MCPOWER_TOKEN is the operator, as the operator would say it
    assert 'data-testid="logout"' in page and "Signed in as <bdi>operator</bdi>" in page
    assert missing.status_code == 404 and "Signed in as <bdi>operator</bdi>" in missing.text
    assert unrouted.status_code == 404 and "Signed in as <bdi>operator</bdi>" in unrouted.text


async def test_a_path_no_route_answers_gets_the_pages_404_with_the_signed_in_header(registry: Registry) -> None:
    async with serving(registry, token=TOKEN) as (_, app), web(app) as h:
        r = await h.post("/login", data={"token": TOKEN, "next": "/"}, headers={"Origin": BASE})
        jar = {"Cookie": r.headers.get_list("set-cookie")[0].split(";")[0]}
        signed = await h.get("/no-such-page", headers=jar)  # a browser's sign-in session, not a bearer header
        twin = await h.get("/no-such-page?format=json", headers=jar)
        browser = {"Accept": "text/html,application/xhtml+xml,*/*;q=0.8"}
        stranger = await h.get("/no-such-page", headers=browser)  # a browser without a session signs in first
        program = await h.get("/no-such-page")  # a program (no HTML asked for) gets the 401 saying what to send
        mcp = await h.post("/mcp", json=INITIALIZE, headers={**MCP_HEADERS, **jar})  # the session is still no MCP token
    assert signed.status_code == 404 and 'data-testid="error-code"' in signed.text and "NOT_FOUND" in signed.text
    for part in ("Signed in as <bdi>operator</bdi>", 'data-testid="nav-search"', 'data-testid="logout"'):
        assert part in signed.text
    assert twin.status_code == 404 and twin.json()["error"]["code"] == "NOT_FOUND"
    assert stranger.status_code == 303 and stranger.headers["location"] == "/login?next=%2Fno-such-page"
    assert program.status_code == 401 and mcp.status_code == 401
    async with serving(registry) as (_, app), web(app) as h:  # no token needed: the plain page, nav and no sign-in
        plain = await h.get("/no-such-page")
    assert plain.status_code == 404 and 'data-testid="nav-search"' in plain.text and "Signed in" not in plain.text


async def test_the_login_page_has_no_links_that_lead_back_to_it(registry: Registry) -> None:
    async with serving(registry, token=TOKEN) as (_, app), web(app) as h:
        login = (await h.get("/login?next=/search")).text
        again = (await h.post("/login", data={"token": "wrong", "next": "/"}, headers={"Origin": BASE})).text
    for text in (login, again):
        assert 'data-testid="login-form"' in text
        assert 'data-testid="nav-search"' not in text and 'href="/"' not in text
        # nor any other: every link stays on the login page (or its assets); a page behind the sign-in bounces back
        links = re.findall(r'(?:href|action)="([^"]*)"', text)
        assert links and all(link.startswith(("/static/", "#", "/login")) for link in links), links


@pytest.mark.parametrize(
    ("headers", "status"),
    [
        ({"Origin": "http://evil.example"}, 403),  # refused by the gate, as for /mcp
        ({"Origin": "http://127.0.0.1:9999"}, 403),  # another port of this host: same-site, not same-origin
        ({"Sec-Fetch-Site": "cross-site"}, 403),
        ({"Origin": "null"}, 403),  # an opaque origin (what no-referrer would make browsers send)
        ({"Origin": BASE}, 303),
        ({}, 303),  # not a browser
    ],
)
async def test_login_and_logout_posts_only_from_this_servers_pages(
    registry: Registry, headers: dict[str, str], status: int
) -> None:
    async with serving(registry, token=TOKEN) as (_, app), web(app) as h:
        signed_in = await h.post("/login", data={"token": TOKEN, "next": "/"}, headers={"Origin": BASE})
        jar = {"Cookie": signed_in.headers.get_list("set-cookie")[0].split(";")[0]}
        login = await h.post("/login", data={"token": TOKEN, "next": "/"}, headers=headers)
        logout = await h.post("/logout", headers={**headers, **jar})
        still = await h.get("/", headers=jar)
    assert login.status_code == status and logout.status_code == status
    assert ("set-cookie" in login.headers) == (status == 303)
    assert still.status_code == (303 if status == 303 else 200)  # a refused logout ends nothing


async def test_host_checks_apply_to_the_pages(registry: Registry) -> None:
    async with serving(registry) as (_, app), web(app) as h:
        assert (await h.get("/", headers={"Host": "evil.example"})).status_code == 421
        assert (await h.get("/search?q=x", headers={"Origin": "http://evil.example"})).status_code == 403


@pytest.mark.parametrize(
    ("given", "target"),
    [
        ("/search?q=a%20b", "/search?q=a%20b"),
        ("/", "/"),
        ("//evil.example/x", "/"),
        ("https://evil.example", "/"),
        ("/\\evil.example", "/"),
        ("javascript:alert(1)", "/"),
        ("/ok\r\nSet-Cookie: x=1", "/"),
        ("", "/"),
        (None, "/"),
    ],
)
def test_next_is_a_local_path_only(given: str | None, target: str) -> None:
    assert local_target(given) == target


async def test_a_form_that_is_not_the_login_form_is_refused(registry: Registry) -> None:
    async with serving(registry, token=TOKEN) as (_, app), web(app) as h:
        many = await h.post(
            "/login",
            content="&".join(f"f{n}=1" for n in range(50)) + f"&token={TOKEN}",
            headers={"Content-Type": "application/x-www-form-urlencoded"},
        )
        json_body = await h.post("/login", json={"token": TOKEN})
    assert many.status_code == json_body.status_code == 401 and "set-cookie" not in many.headers


async def test_login_never_redirects_off_the_server(registry: Registry) -> None:
    async with serving(registry, token=TOKEN) as (_, app), web(app) as h:
        r = await h.post("/login", data={"token": TOKEN, "next": "//evil.example/"})
        form = await h.get("/login", params={"next": "https://evil.example/"})
    assert r.headers["location"] == "/" and 'name="next" value="/"' in form.text


async def test_without_a_token_login_sends_you_on(registry: Registry) -> None:
    async with serving(registry) as (_, app), web(app) as h:
        r = await h.get("/login?next=/search")
    assert r.status_code == 303 and r.headers["location"] == "/search"


async def test_no_web_serves_mcp_only(registry: Registry) -> None:
    async with serving(registry, web=False) as (_, app), web(app) as h:
        assert (await h.get("/")).status_code == 404
        assert (await h.get("/static/web.css")).status_code == 404
        assert (await h.get("/healthz")).status_code == 200


# ---------------------------------------------------------------- headers, hostile text, weight


async def test_refusals_and_redirects_carry_them_too_but_not_mcp(registry: Registry) -> None:
    async with serving(registry, token=TOKEN) as (_, app), web(app) as h:
        answers = [
            await h.get("/"),
            await h.get("/?format=json"),
            await h.get("/nope"),
            await h.get("/", headers={"Host": "evil.example"}),
        ]
        mcp = await h.post("/mcp", json=INITIALIZE, headers={**MCP_HEADERS, "Authorization": f"Bearer {TOKEN}"})
    assert [r.status_code for r in answers] == [303, 401, 401, 421]
    assert all("frame-ancestors 'none'" in r.headers["content-security-policy"] for r in answers)
    assert mcp.status_code == 200 and "content-security-policy" not in mcp.headers


async def test_every_answer_carries_the_security_headers(registry: Registry) -> None:
    async with serving(registry) as (_, app), web(app) as h:
        rid = (await first_result(h))["result_id"]
        urls = [*PAGES, f"/doc?id={rid}", "/?format=json", "/doc?id=nope", "/static/web.js", "/static/nope.js", "/nope"]
        for url in urls:
            r = await h.get(url)
            csp = r.headers["content-security-policy"]
            assert "default-src 'self'" in csp and "frame-ancestors 'none'" in csp and "unsafe-inline" not in csp
            assert r.headers["x-content-type-options"] == "nosniff"
            assert r.headers["referrer-policy"] == "same-origin"
            if "text/html" in r.headers.get("content-type", ""):
                assert (
                    "<script>" not in r.text
                    and " style=" not in r.text
                    and " on" not in re.sub(r">[^<]*<", "><", r.text)
                )


HOSTILE = {
    "evil\u202egnp.md": (
        "# Harpsichord <script>alert('title')</script>\u200b\u202e\n\n"
        "Tune the harpsichord. <img src=x onerror=alert(1)> [click me](javascript:alert(2)) "
        '<a href="javascript:alert(3)">x</a> "quoted" & \u2066isolated\u2069 text\u200b.\n'
    ),
    "safe/zero\u200bwidth.md": "# Normal title\n\nAnother harpsichord passage with a <b>bold</b> claim.\n",
}


@pytest.fixture
def hostile(datasets: Path, tmp_path: Path, registry: Registry) -> Registry:
    write_files(tmp_path / "hostile", HOSTILE)
    options = IngestOptions(dataset_id="hostile", name="Evil <i>name</i>\u202e", description="<script>x</script>")
    ingest(tmp_path / "hostile", datasets, options, embedder=FakeEmbedder())
    registry.scan()
    return registry


async def test_hostile_document_text_is_inert(hostile: Registry) -> None:
    async with serving(hostile) as (_, app), web(app) as h:
        results = (await h.get("/search", params={"q": "harpsichord", "dataset": "hostile", "format": "json"})).json()
        pages = [
            (await h.get("/")).text,
            (await h.get("/search", params={"q": "harpsichord", "dataset": "hostile"})).text,
        ]
        for r in results["response"]["results"]:
            pages.append((await h.get("/doc", params={"id": r["result_id"], "chunks": "1"})).text)
    assert len(pages) == 4
    for page in pages:
        assert "<script>" not in page and "<img" not in page and "<b>" not in page and "<i>" not in page
        assert 'href="javascript' not in page and "onerror=" not in page.replace("onerror=alert", "")
        for ch in ("\u202e", "\u200b", "\u2066", "\u2069"):
            assert ch not in page  # shown as a mark, never applied
        assert re.findall(r'href="([^"]*)"', page) == [
            u for u in re.findall(r'href="([^"]*)"', page) if u.startswith(("/", "#"))
        ]
    assert "&lt;script&gt;alert(&#39;title&#39;)&lt;/script&gt;" in pages[1]
    assert "\u27e8U+202E\u27e9" in pages[1] and "\u27e8U+200B\u27e9" in pages[1]
    assert "Evil &lt;i&gt;name&lt;/i&gt;" in pages[0]
    assert any("javascript:alert(2)" in p for p in pages[2:])  # shown as text


async def test_a_value_of_hidden_characters_cannot_swell_a_page() -> None:
    from mcpower.web.text import visible

    shown = str(visible("a" + "\u200b\u200c" * 5000 + "b"))
    assert len(shown) < 2000 and "9,976 more hidden characters removed" in shown


async def test_pages_weigh_under_100_kb(registry: Registry) -> None:
    async with serving(registry) as (_, app), web(app) as h:
        rid = (await first_result(h))["result_id"]
        for url in [*PAGES, f"/doc?id={rid}", f"/doc?id={rid}&chunks=1", "/static/web.css", "/static/web.js"]:
            assert len((await h.get(url)).content) < 100_000, url


# ---------------------------------------------------------------- which datasets a caller sees


async def test_a_restricted_caller_sees_only_its_datasets_on_every_page(registry: Registry, tmp_path: Path) -> None:
    from datetime import datetime, timezone

    from mcpower.server.auth.tokens import NamedToken, digest, write_tokens

    cook = "cook-secret-0123456789abcdef0123456789"
    tokens_file = tmp_path / "tokens.json"
    write_tokens(tokens_file, [NamedToken("cook", digest(cook), ("recipes",), datetime.now(timezone.utc))])
    async with serving(registry, tokens_file=tokens_file) as (_, app), web(app, token=cook) as h:
        listed = (await h.get("/?format=json")).json()["datasets"]
        page = (await h.get("/")).text
        search = (await h.get("/search", params={"q": "toolkit", "format": "json"})).json()
        form = (await h.get("/search")).text
        hidden = await h.get("/search", params={"q": "toolkit", "dataset": "handbook", "format": "json"})
        unknown = await h.get("/search", params={"q": "toolkit", "dataset": "nope", "format": "json"})
    async with serving(registry) as (_, app), web(app) as h:
        rid = (await first_result(h, "zephyrine", dataset="handbook"))["result_id"]
    async with serving(registry, tokens_file=tokens_file) as (_, app), web(app) as h:
        signed_in = await h.post("/login", data={"token": cook, "next": "/"})
        jar = {"Cookie": signed_in.headers.get_list("set-cookie")[0].split(";")[0]}
        doc = await h.get("/doc", params={"id": rid, "format": "json"}, headers=jar)
        missing = await h.get("/doc", params={"id": rid.replace(":", "x:", 1), "format": "json"}, headers=jar)
        cookie_page = (await h.get("/?format=json", headers=jar)).json()["datasets"]
    assert [d["id"] for d in listed] == [d["id"] for d in cookie_page] == ["recipes"]
    assert "handbook" not in page and "handbook" not in form and "Signed in as <bdi>cook</bdi>" in page
    assert search["response"]["meta"]["datasets"] == ["recipes"]
    assert {r["dataset"] for r in search["response"]["results"]} == {"recipes"}
    # Another caller's dataset answers exactly as an unknown one (no existence leak).
    assert hidden.status_code == unknown.status_code == 404
    assert hidden.json()["error"]["message"].replace("handbook", "nope") == unknown.json()["error"]["message"]
    assert doc.status_code == missing.status_code == 404
    assert doc.json()["error"]["code"] == "RESULT_NOT_FOUND" and "zephyrine" not in doc.text


async def test_a_pdf_result_opens_at_its_page(registry: Registry, datasets: Path, tmp_path: Path) -> None:
    import format_fixtures as ff

    write_files(tmp_path / "pdfs", {"manual.pdf": ff.pdf([["Lumenator manual."], ["Calibrate the zephyrine lens."]])})
    ingest(tmp_path / "pdfs", datasets, IngestOptions(dataset_id="pdfs"), embedder=FakeEmbedder())
    registry.scan()
    async with serving(registry) as (_, app), web(app) as h:
        top = await first_result(h, "calibrate lens", dataset="pdfs", group="none")
        data = (await h.get("/doc", params={"id": top["result_id"], "format": "json"})).json()
        page = (await h.get("/doc", params={"id": top["result_id"]})).text
        results = (await h.get("/search", params={"q": "calibrate lens", "dataset": "pdfs", "group": "none"})).text
    assert data["source"]["pages"] == top["pages"] == {"start": 1, "end": 2}  # one chunk over both pages
    assert 'data-testid="doc-pages">1–2<' in page and "· pages 1–2" in results


MKDOCS_PAGE = (
    "# Middleware { #middleware }\n\n"
    "## Advanced middleware { #advanced-middleware }\n\n"
    + "".join(f"Filler sentence number {i} about nothing in particular. " for i in range(30))
    + "The **ocelot** handler wraps every request; see [the guide](https://example.org/guide).\n\n"
    "```python\napp.add_middleware(OcelotMiddleware)\n```\n\n"
    "| option | meaning |\n|---|---|\n| `strict` | refuse <b>unknown</b> hosts |\n"
)


async def test_a_result_reads_as_an_excerpt_without_markdown_and_the_whole_passage_on_demand(
    registry: Registry, datasets: Path, tmp_path: Path
) -> None:
    ingest(
        write_files(tmp_path / "site", {"middleware.md": MKDOCS_PAGE}),
        datasets,
        IngestOptions(dataset_id="site"),
        embedder=FakeEmbedder(),
    )
    registry.scan()
    async with serving(registry) as (server, app), web(app) as h:
        page = (await h.get("/search", params={"q": "ocelot handler", "dataset": "site"})).text
        async with Client(server) as agent:  # an agent's snippet: no attribute blocks either
            found = await agent.call_tool("knowledge_search", {"query": "ocelot handler", "dataset": "site"})
    snippets = [r["snippet"] for r in found.structured_content["results"]]
    assert snippets and not any("{ #" in s for s in snippets)
    result = page[page.index('data-testid="result-snippet"') :]
    excerpt = result[: result.index("</p>")]
    assert "<mark>ocelot</mark>" in excerpt and len(excerpt) < 600  # the part around the match, short
    assert "Filler sentence number 0 " not in excerpt
    assert 'data-testid="result-more"' in result and "<details" in page  # the whole passage, without JavaScript
    for raw in ("{ #", "*", "```", "|---", "](https://", "<b>unknown", "&lt;b&gt;", "## ", "///", "{*"):
        assert raw not in page[page.index('class="results"') :], raw
    assert "option · meaning" in page and "app.add_middleware(OcelotMiddleware)" in page


async def test_a_result_with_a_web_address_links_to_the_original(
    registry: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = mcpower.search.search
    given = [""]

    def crawled(*args: Any, **kwargs: Any) -> Any:  # as a crawled site's results carry their page's url
        response = real(*args, **kwargs)
        for result in response.results:
            result.url = given[0]
        return response

    monkeypatch.setattr(mcpower.search, "search", crawled)
    cases = {
        "https://example.org/guide/usage": True,
        "javascript:alert(1)": False,
        "data:text/html,<b>x</b>": False,
        "https://example.org/a b": False,
    }
    async with serving(registry) as (_, app), web(app) as h:
        for url, linked in cases.items():
            given[0] = url
            page = (await h.get("/search", params={"q": "quokka diagnostics"})).text
            assert ('data-testid="result-url"' in page) is linked, url
            if linked:
                assert f'href="{url}" rel="noopener noreferrer nofollow"' in page
            assert 'href="javascript:' not in page and 'href="data:' not in page


def test_no_web_is_a_flag_and_a_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    from mcpower.cli.app import app as cli
    from mcpower.config import Settings

    refused = CliRunner().invoke(cli, ["serve", "--no-web"])
    assert refused.exit_code == 2 and "--http only" in refused.output
    assert Settings.load().web is True
    monkeypatch.setenv("MCPOWER_WEB", "0")
    assert Settings.load().web is False
    assert Settings.load(web=True).web is True  # the flag wins
