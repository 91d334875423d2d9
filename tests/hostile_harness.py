"""Runs fault-table cases (tests/hostile_cases.py) against one ``mcpower serve --stdio`` and judges them.

One server (fake embedder) serves the whole datasets root: protocol, tool and resource cases go to
it over real stdio; a dataset case is also checked through an in-process Registry and
``mcpower validate``. Whatever the case, it passes only if the expected outcome came back within
the time limit, with no absolute path of the test's folders in anything the client or the log saw,
no traceback in the log, the server process alive, and a search of each good dataset still
answering normally.
"""

from __future__ import annotations

import contextlib
import json
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from conftest import FakeEmbedder
from hostile_cases import (
    BROKEN_BASE,
    GOOD_SEARCHES,
    SEARCH,
    TIMEOUT,
    Broken,
    Case,
    NoReply,
    ResourceError,
    ResourceOk,
    RpcError,
    RpcResult,
    ToolError,
    ToolOk,
    TopResult,
    build_root,
)
from server_fixtures import StdioServer, subprocess_env, write_launcher

from mcpower.errors import McpowerError
from mcpower.registry import Registry
from mcpower.search import search


@dataclass
class Verdict:
    case: Case
    observed: str
    problems: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def passed(self) -> bool:
        return not self.problems


class Wire(StdioServer):
    """A StdioServer that also knows each response's size on the wire."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._sized = 0
        self.sizes: dict[Any, int] = {}

    def size_of(self, msg_id: Any) -> int:
        while self._sized < len(self.stdout_lines):
            line = self.stdout_lines[self._sized]
            self._sized += 1
            with contextlib.suppress(ValueError):
                self.sizes[json.loads(line).get("id")] = len(line)
        return self.sizes.get(msg_id, -1)


def within(seconds: float, fn: Callable[[], Any]) -> Any:
    """``fn()`` in a worker thread; TimeoutError if it has not returned after ``seconds`` (it is left behind)."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = fn()
        except BaseException as e:  # handed to the caller
            box["error"] = e

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(seconds)
    if worker.is_alive():
        raise TimeoutError(f"no answer within {seconds:g} s")
    if "error" in box:
        raise box["error"]
    return box.get("value")


def _clip(text: str, n: int = 90) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 1] + "…"


class Harness:
    """The datasets root, one stdio server over it, and the checks every case shares."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.datasets, self.outside = build_root(base)
        self.secrets = sorted({str(base), str(base.resolve())}, key=len)
        launcher = write_launcher(base)
        self.server = Wire(
            [sys.executable, str(launcher), "serve", "--stdio", "--datasets-dir", str(self.datasets)],
            env=subprocess_env(),
        )
        self.server.initialize(timeout=60)
        self._top: dict[TopResult, str] = {}
        self.registry: Registry | None = None

    def close(self) -> None:
        if self.registry is not None:
            self.registry.close()
        self.server.close_stdin()
        try:
            self.server.wait_exit(10)
        finally:
            self.server.stop()

    # -- one case

    def run(self, case: Case) -> Verdict:
        out0, err0 = len(self.server.stdout_lines), len(self.server.stderr_lines)
        started = time.monotonic()
        verdict = Verdict(case, "")
        try:
            if case.where == "stdio":
                self._stdio(case, verdict)
            elif case.where == "tool":
                self._tool(case, verdict)
            elif case.where == "resource":
                self._resource(case, verdict)
            else:
                self._dataset(case, verdict)
        except (AssertionError, TimeoutError, OSError) as e:  # no answer in time, or the pipe broke
            verdict.problems.append(f"{type(e).__name__}: {_clip(str(e), 300)}")
            verdict.observed = verdict.observed or "no answer"
        verdict.seconds = time.monotonic() - started
        self._after(verdict, out0, err0)
        return verdict

    def _after(self, verdict: Verdict, out0: int, err0: int) -> None:
        """The checks every case shares: still alive, still serving, nothing leaked."""
        if self.server.proc.poll() is not None:
            verdict.problems.append(f"server exited with {self.server.proc.returncode}")
            return
        for dataset, query, path in GOOD_SEARCHES:
            try:
                result = self.server.call_tool(SEARCH, {"query": query, "dataset": dataset}, timeout=TIMEOUT)
                top = result["structuredContent"]["results"][0]["path"]
                if result.get("isError") or top != path:
                    verdict.problems.append(f"search of {dataset} after the case: {_clip(json.dumps(result))}")
            except (AssertionError, KeyError, IndexError) as e:
                verdict.problems.append(f"search of {dataset} after the case failed: {_clip(str(e), 300)}")
        time.sleep(0.02)  # let stderr catch up with stdout
        for name, lines in (
            ("response", self.server.stdout_lines[out0:]),
            ("log line", self.server.stderr_lines[err0:]),
        ):
            for line in lines:
                if any(s.encode() in line for s in self.secrets):
                    verdict.problems.append(f"{name} leaks an absolute path: {_clip(line.decode('utf-8', 'replace'))}")
        for line in self.server.stderr_lines[err0:]:
            try:
                record = json.loads(line)
            except ValueError:
                verdict.problems.append(
                    f"stderr line that is not a JSON log record: {_clip(line.decode('utf-8', 'replace'))}"
                )
                continue
            if "exception" in record:
                verdict.problems.append(f"traceback in the log: {_clip(record['exception'], 200)}")

    # -- protocol

    def _stdio(self, case: Case, v: Verdict) -> None:
        s, want = self.server, case.want
        seen = len(s.received)
        before = s.request("ping")
        s.send_raw(case.payload)
        after = s.request("ping")
        s.wait_for(after, TIMEOUT)
        if isinstance(want, (RpcResult, RpcError)) and getattr(want, "id", None) is not None:
            s.wait_for(want.id, TIMEOUT)
        replies = [m for m in s.received[seen:] if m.get("id") not in (before, after)]
        v.observed = "; ".join(_describe_rpc(m) for m in replies) or "no reply"
        if isinstance(want, NoReply):
            if replies:
                v.problems.append("expected no reply")
        elif len(replies) != 1:
            v.problems.append(f"expected one reply, got {len(replies)}")
        elif isinstance(want, RpcResult):
            if "result" not in replies[0] or replies[0].get("id") != want.id:
                v.problems.append(f"expected a result for id {want.id}")
        else:
            assert isinstance(want, RpcError)
            error = replies[0].get("error") or {}
            if error.get("code") != want.code or replies[0].get("id") != want.id or not error.get("message"):
                v.problems.append(f"expected {want.describe()}")

    # -- tools

    def _tool(self, case: Case, v: Verdict) -> None:
        s, want = self.server, case.want
        name, arguments = case.payload
        arguments = {k: self._resolve(x) if isinstance(x, TopResult) else x for k, x in arguments.items()}
        msg_id = s.request("tools/call", {"name": name, "arguments": arguments})
        reply = s.wait_for(msg_id, TIMEOUT)
        size = s.size_of(msg_id)
        result = reply.get("result")
        if result is None:
            v.observed = _describe_rpc(reply)
            v.problems.append("expected a tools/call result, got a JSON-RPC error")
            return
        data = result.get("structuredContent") or {}
        if result.get("isError"):
            error = data.get("error") or {}
            v.observed = f"isError {error.get('code')}: {_clip(str(error.get('message')), 70)}"
        elif "results" in data:
            meta = data["meta"]
            v.observed = f"{data['status']}, {meta['count']} results" + (
                ", low_confidence" if meta["low_confidence"] else ""
            )
        else:
            v.observed = f"result, {len(data.get('content', ''))} characters" + (
                ", truncated" if data.get("truncated") else ""
            )
        v.observed += f", {_kb(size)}"
        if isinstance(want, ToolError):
            if not result.get("isError") or (data.get("error") or {}).get("code") != want.code:
                v.problems.append(f"expected {want.describe()}")
            elif not str(result["content"][0]["text"]).startswith(want.code):
                v.problems.append("the text content does not start with the code")
        else:
            assert isinstance(want, ToolOk)
            if result.get("isError"):
                v.problems.append("expected a result, got isError")
                return
            if "results" in data:
                if data["meta"]["count"] < want.min_results:
                    v.problems.append(f"expected at least {want.min_results} results")
                if want.low_confidence is not None and data["meta"]["low_confidence"] != want.low_confidence:
                    v.problems.append(f"expected low_confidence {want.low_confidence}")
            if want.contains is not None and want.contains not in data.get("content", ""):
                v.problems.append(f"content lacks {want.contains!r}")
        if size > want.max_bytes:
            v.problems.append(f"response of {size} bytes, over {want.max_bytes}")

    def _resolve(self, ref: TopResult) -> str:
        if ref not in self._top:
            result = self.server.call_tool(
                SEARCH, {"query": ref.query, "dataset": ref.dataset, "path": ref.path, "mode": "keyword"}, TIMEOUT
            )
            self._top[ref] = result["structuredContent"]["results"][0]["result_id"]
        return self._top[ref]

    # -- resources

    def _resource(self, case: Case, v: Verdict) -> None:
        s, want = self.server, case.want
        msg_id = s.request("resources/read", {"uri": case.payload})
        reply = s.wait_for(msg_id, TIMEOUT)
        size = s.size_of(msg_id)
        if "error" in reply:
            v.observed = f"{_describe_rpc(reply)}, {_kb(size)}"
            if not isinstance(want, ResourceError) or reply["error"].get("code") != -32602:
                v.problems.append(f"expected {want.describe()}")
            if size > 16_384:
                v.problems.append(f"error response of {size} bytes")
            return
        text = reply["result"]["contents"][0].get("text", "")
        v.observed = f"text of {len(text):,} characters, {_kb(size)}"
        if not isinstance(want, ResourceOk) or not text.startswith(want.starts) or size > want.max_bytes:
            v.problems.append(f"expected {want.describe()}")

    # -- datasets

    def _dataset(self, case: Case, v: Verdict) -> None:
        want = case.want
        assert isinstance(want, Broken)
        if self.registry is None:  # shared, like the server's: good stores load once
            self.registry = within(
                TIMEOUT, lambda: Registry(self.datasets, embedder_factory=lambda model: FakeEmbedder())
            )
        got = self._registry_checks(case.id, want, self.registry, v)
        cli = self._validate(case.id, want, v)
        listed = self._server_checks(case.id, want, v)
        v.observed = f"{got}; validate {cli}; server {listed}"

    def _registry_checks(self, dataset: str, want: Broken, registry: Registry, v: Verdict) -> str:
        def attempt() -> McpowerError | None:
            try:
                registry.store(dataset)
                if want.at_search:
                    search(registry, "bread", dataset=dataset)
            except McpowerError as e:
                return e
            return None

        error = within(TIMEOUT, attempt)
        if error is None:
            v.problems.append("Registry loaded the broken dataset")
            return "Registry: loaded"
        if error.code != want.code or want.reason not in error.message:
            v.problems.append(f"Registry: {error.code} {error.message!r}, expected {want.code} naming {want.reason!r}")
        for good, query, path in GOOD_SEARCHES:
            response = within(TIMEOUT, lambda g=good, q=query: search(registry, q, dataset=g))
            if not response.results or response.results[0].path != path:
                v.problems.append(f"Registry search of {good} failed beside it")
        everything = within(TIMEOUT, lambda: search(registry, "sourdough starter"))
        if dataset in everything.meta.datasets or BROKEN_BASE not in everything.meta.datasets:
            v.problems.append(f"search of all datasets covered {everything.meta.datasets}")
        return f"{error.code}: {_clip(error.message, 110)}"

    def _validate(self, dataset: str, want: Broken, v: Verdict) -> str:
        from typer.testing import CliRunner

        from mcpower.cli.app import app

        result = within(
            TIMEOUT, lambda: CliRunner().invoke(app, ["validate", "--datasets-dir", str(self.datasets), dataset])
        )
        lines = result.stdout.strip().splitlines()
        expected = 0 if want.at_search else 1
        if result.exit_code != expected or len(lines) != 1 or "Traceback" in result.output:
            v.problems.append(f"validate: exit {result.exit_code}, output {_clip(result.output, 200)!r}")
        elif expected == 1 and not (lines[0].startswith("error ") and f" {dataset}: " in lines[0]):
            v.problems.append(f"validate row: {lines[0]!r}")
        if any(s in result.output for s in self.secrets):
            v.problems.append("validate output leaks an absolute path")
        good = within(
            TIMEOUT, lambda: CliRunner().invoke(app, ["validate", "--datasets-dir", str(self.datasets), BROKEN_BASE])
        )
        if good.exit_code != 0:
            v.problems.append(f"validate {BROKEN_BASE} beside it: {_clip(good.output, 200)!r}")
        return f"exit {result.exit_code}"

    def _server_checks(self, dataset: str, want: Broken, v: Verdict) -> str:
        s = self.server
        result = s.call_tool(SEARCH, {"query": "sourdough", "dataset": dataset}, timeout=TIMEOUT)
        code = (result.get("structuredContent", {}).get("error") or {}).get("code")
        if not result.get("isError") or code != want.code:
            v.problems.append(f"server search: {_clip(json.dumps(result), 200)}")
        listed = s.call_tool("knowledge_list_datasets", {}, timeout=TIMEOUT)["structuredContent"]["datasets"]
        row = next((d for d in listed if d["id"] == dataset), None)
        status = {d["id"]: d["status"] for d in listed}
        # A model that does not fit the vectors is a search-time error; the files themselves are sound.
        if row is None or (row["status"] != "error" or not row.get("error")) != want.at_search:
            v.problems.append(f"list_datasets row: {row}")
        if status.get(BROKEN_BASE) != "ready" or status.get("handbook") != "ready":
            v.problems.append(f"good datasets listed as {status.get(BROKEN_BASE)}, {status.get('handbook')}")
        return f"isError {code}, listed {row['status'] if row else 'missing'}"


def _describe_rpc(m: dict[str, Any]) -> str:
    msg_id = "null" if m.get("id") is None else _clip(str(m.get("id")), 24)
    if "error" in m:
        return f"error {m['error'].get('code')} id {msg_id}: {_clip(str(m['error'].get('message')), 60)}"
    return f"result id {msg_id}"


def _kb(size: int) -> str:
    return f"{size / 1000:,.1f} KB" if size >= 0 else "size unknown"
