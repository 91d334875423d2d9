"""`mcpower token add / list / revoke`: the secret shown once, hashes only on disk, clear failures.
Over a running server (revocation without a restart): test_authorization.py."""

from __future__ import annotations

import json
import os
import threading
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from mcpower.cli.app import app
from mcpower.errors import McpowerError
from mcpower.server.auth.access import check_exposure
from mcpower.server.auth.tokens import NamedToken, digest, parse_expiry, read_tokens, write_tokens


def invoke(*args: str | Path, env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(app, [str(a) for a in args], env=env)


def assert_user_error(result: Result, *fragments: str) -> None:
    assert result.exit_code == 1, result.output
    assert result.stdout == "" and "Traceback" not in result.output
    assert result.stderr.startswith("Error: ") and len(result.stderr.strip().splitlines()) == 1, result.stderr
    for fragment in fragments:
        assert fragment in result.stderr, result.stderr


def test_add_prints_the_secret_once_and_keeps_only_its_hash(tmp_path: Path) -> None:
    tokens_file = tmp_path / "conf" / "tokens.json"
    added = invoke("token", "add", "alice", "-d", "eng-*", "--datasets", "hr", "--tokens-file", tokens_file)
    assert added.exit_code == 0, added.output
    secret = added.stdout.strip()
    assert secret.startswith("mcpw_") and len(secret) >= 40 and "\n" not in secret
    assert "shown only now" in added.stderr and secret not in added.stderr
    text = tokens_file.read_text(encoding="utf-8")
    assert secret not in text and digest(secret) in text
    assert tokens_file.stat().st_mode & 0o777 == 0o600
    [token] = read_tokens(tokens_file)
    assert (token.name, token.datasets, token.expires) == ("alice", ("eng-*", "hr"), None)
    other = invoke("token", "add", "bob", "-d", "*", "--tokens-file", tokens_file).stdout.strip()
    assert other != secret and [t.name for t in read_tokens(tokens_file)] == ["alice", "bob"]


def test_the_default_file_is_tokens_json_in_the_datasets_folder(tmp_path: Path) -> None:
    datasets = tmp_path / "kb"
    assert invoke("token", "add", "alice", "-d", "docs", "--datasets-dir", datasets).exit_code == 0
    assert [t.name for t in read_tokens(datasets / "tokens.json")] == ["alice"]
    env = {"MCPOWER_TOKENS_FILE": str(tmp_path / "elsewhere.json")}
    assert invoke("token", "add", "bob", "-d", "docs", env=env).exit_code == 0
    assert [t.name for t in read_tokens(tmp_path / "elsewhere.json")] == ["bob"]


def test_list_shows_names_datasets_expiry_and_never_a_secret_or_hash(tmp_path: Path) -> None:
    tokens_file = tmp_path / "tokens.json"
    now = datetime.now(timezone.utc)
    secret = invoke("token", "add", "alice", "-d", "eng-*", "--expires", "30d", "--tokens-file", tokens_file).stdout
    tokens = read_tokens(tokens_file)
    write_tokens(tokens_file, [*tokens, NamedToken("old", digest("x" * 40), ("*",), now, now - timedelta(hours=1))])
    listed = invoke("token", "list", "--tokens-file", tokens_file)
    assert listed.exit_code == 0, listed.output
    lines = listed.stdout.splitlines()
    assert lines[0].split()[:2] == ["NAME", "EXPIRES"]
    alice = next(line for line in lines if line.startswith("alice"))
    assert "eng-*" in alice and (now + timedelta(days=30)).strftime("%Y-%m-%d") in alice and "expired" not in alice
    assert "(expired)" in next(line for line in lines if line.startswith("old"))
    for t in read_tokens(tokens_file):
        assert t.sha256[:12] not in listed.output
    assert secret.strip() not in listed.output
    as_json = json.loads(invoke("token", "list", "--json", "--tokens-file", tokens_file).stdout)
    assert [(t["name"], t["expired"]) for t in as_json["tokens"]] == [("alice", False), ("old", True)]
    assert "sha256" not in json.dumps(as_json)


def test_list_columns_line_up_whatever_the_tokens(tmp_path: Path) -> None:
    """Each column starts at the same place on every line: an expired token's longer expiry, a long
    name or a metrics-only token shift nothing (28.6)."""
    tokens_file = tmp_path / "tokens.json"
    now = datetime.now(timezone.utc)
    alice = NamedToken("alice", digest("a" * 40), ("eng-*",), now, now + timedelta(days=30))
    scraper = NamedToken("prometheus-scraper-of-the-ops-team", digest("p" * 40), (), now, metrics=True)
    old = NamedToken("old", digest("x" * 40), ("docs", "hr-*"), now - timedelta(days=9), now - timedelta(hours=1))
    write_tokens(tokens_file, [alice, scraper, old])
    lines = invoke("token", "list", "--tokens-file", tokens_file).stdout.splitlines()
    assert len(lines) == 4
    header = lines[0]
    starts = [header.index(title) for title in ("EXPIRES", "CREATED", "METRICS", "DATASETS")]
    for line in lines[1:]:
        for start in starts:
            assert line[start - 2 : start] == "  " and line[start] != " ", (line, start)
    assert "(expired)" in lines[3] and lines[3].rstrip().endswith("docs, hr-*")
    scraper = lines[2]
    assert scraper[starts[2] :].startswith("yes") and scraper.rstrip().endswith("-")


def test_a_metrics_token_reads_the_metrics_and_nothing_else_unless_given_datasets(tmp_path: Path) -> None:
    tokens_file = tmp_path / "tokens.json"
    added = invoke("token", "add", "prom", "--metrics", "--tokens-file", tokens_file)
    assert added.exit_code == 0 and "for /metrics" in added.stderr, added.output
    both = invoke("token", "add", "ops", "--metrics", "-d", "eng-*", "--tokens-file", tokens_file)
    assert both.exit_code == 0 and "for datasets eng-* and /metrics" in both.stderr, both.output
    prom, ops = read_tokens(tokens_file)
    assert (prom.datasets, prom.metrics, ops.datasets, ops.metrics) == ((), True, ("eng-*",), True)
    assert json.loads(tokens_file.read_text())["tokens"][0]["metrics"] is True
    listed = json.loads(invoke("token", "list", "--json", "--tokens-file", tokens_file).stdout)["tokens"]
    assert [(t["name"], t["metrics"], t["datasets"]) for t in listed] == [("prom", True, []), ("ops", True, ["eng-*"])]


def test_revoke_removes_the_token(tmp_path: Path) -> None:
    tokens_file = tmp_path / "tokens.json"
    for name in ("alice", "bob"):
        invoke("token", "add", name, "-d", "docs", "--tokens-file", tokens_file)
    revoked = invoke("token", "revoke", "alice", "--tokens-file", tokens_file)
    assert revoked.exit_code == 0 and revoked.stdout == "", revoked.output
    assert [t.name for t in read_tokens(tokens_file)] == ["bob"]
    assert tokens_file.stat().st_mode & 0o777 == 0o600


@pytest.mark.parametrize(
    ("args", "fragments"),
    [
        (["add", "alice", "-d", "docs"], ["already a token named 'alice'", "revoke it first"]),
        (["add", "bob", "-d", "Eng_Docs"], ["'Eng_Docs' is not a dataset id or pattern"]),
        (["add", "bob", "-d", "eng-[ab]"], ["is not a dataset id or pattern"]),
        (["add", "token", "-d", "docs"], ["'token' cannot name a token"]),
        (["add", "bad name", "-d", "docs"], ["cannot name a token"]),
        (["add", "oauth:alice", "-d", "docs"], ["'oauth:alice' cannot name a token", "no ':'"]),
        (["add", "bob"], ["give the datasets", "--metrics"]),
        (["add", "bob", "-d", "docs", "--expires", "2001-01-01"], ["already past"]),
        (["add", "bob", "-d", "docs", "--expires", "soon"], ["--expires 'soon'", "30d"]),
        (["revoke", "nobody"], ["no token named 'nobody'", "token list"]),
    ],
)
def test_user_errors_are_one_clear_line(tmp_path: Path, args: list[str], fragments: list[str]) -> None:
    tokens_file = tmp_path / "tokens.json"
    invoke("token", "add", "alice", "-d", "docs", "--tokens-file", tokens_file)
    before = tokens_file.read_bytes()
    assert_user_error(invoke("token", *args, "--tokens-file", tokens_file), *fragments)
    assert tokens_file.read_bytes() == before


def test_a_file_others_can_write_or_a_malformed_one_is_refused(tmp_path: Path) -> None:
    tokens_file = tmp_path / "tokens.json"
    invoke("token", "add", "alice", "-d", "docs", "--tokens-file", tokens_file)
    if os.name == "posix":
        tokens_file.chmod(0o666)
        for args in (["list"], ["add", "bob", "-d", "docs"], ["revoke", "alice"]):
            assert_user_error(invoke("token", *args, "--tokens-file", tokens_file), "chmod 600")
        tokens_file.chmod(0o600)
    tokens_file.write_text('{"version": 1, "tokens": [{"name": "alice", "sha256": "short"}]}', encoding="utf-8")
    assert_user_error(invoke("token", "list", "--tokens-file", tokens_file), "is not valid", "sha256")
    tokens_file.write_text("not json", encoding="utf-8")
    assert_user_error(invoke("token", "add", "bob", "-d", "x", "--tokens-file", tokens_file), "is not valid")


def test_expiry_forms() -> None:
    now = datetime(2026, 1, 1, 12, tzinfo=timezone.utc)
    assert parse_expiry("30d", now) == now + timedelta(days=30)
    assert parse_expiry("12h", now) == now + timedelta(hours=12)
    assert parse_expiry("90m", now) == now + timedelta(minutes=90)
    assert parse_expiry("2w", now) == now + timedelta(weeks=2)
    assert parse_expiry("2026-12-31", now) == datetime(2026, 12, 31, tzinfo=timezone.utc)
    assert parse_expiry("2026-06-01T08:00:00+02:00", now) == datetime(2026, 6, 1, 6, tzinfo=timezone.utc)
    with pytest.raises(McpowerError, match="already past"):
        parse_expiry("0d", now)


def test_token_help_names_its_values() -> None:
    shown = invoke("token", "add", "--help").stdout
    assert "Usage: root token add [OPTIONS] NAME" in shown or "token add [OPTIONS] NAME" in shown
    assert "--datasets PATTERN" in shown and "--expires WHEN" in shown and "--tokens-file PATH" in shown


def test_named_tokens_count_as_auth_off_loopback_and_apply_to_http_only(tmp_path: Path) -> None:
    with pytest.raises(McpowerError, match="--tokens-file PATH"):
        check_exposure("0.0.0.0", None)
    check_exposure("0.0.0.0", None, tmp_path / "tokens.json")  # no error: named tokens are auth
    stdio = invoke("serve", "--tokens-file", tmp_path / "tokens.json")
    assert stdio.exit_code == 2 and "--tokens-file applies to --http only" in stdio.output


def test_two_adds_at_once_both_land(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first add, between reading the file and writing it back, starts a second: with the lock
    the second waits and reads what the first wrote; without it, one of the two would be lost."""
    from mcpower.cli import tokens as cli_tokens
    from mcpower.server.auth import tokens as token_file

    tokens_file = tmp_path / "tokens.json"
    real_read = token_file.read_tokens
    second = threading.Thread(target=cli_tokens.add, args=("bob", ["docs"], None, tokens_file, None))

    def read(path: Path) -> list[NamedToken]:
        found = real_read(path)
        if not second.is_alive() and second.ident is None:
            second.start()
            second.join(timeout=1.0)  # returns at once without the lock; with it, the second waits for us
        return found

    monkeypatch.setattr(token_file, "read_tokens", read)
    cli_tokens.add("alice", ["docs"], None, tokens_file, None)
    second.join(timeout=30)
    assert sorted(t.name for t in real_read(tokens_file)) == ["alice", "bob"]
