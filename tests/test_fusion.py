"""The fused fp32 graph: kept only when it gives the plain graph's hidden states, tried again a bounded
number of times when it failed for a cause that may pass (fast, with stand-ins), and really fused and
the same on the packaged model (slow)."""

from __future__ import annotations

import collections
import logging
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from mcpower.embedding import ModelSpec, fusion, resolve_model
from mcpower.embedding import export as export_module
from mcpower.embedding.export import FUSE_TRIES, export_onnx
from mcpower.embedding.fusion import NotFused


@pytest.fixture
def plain(tmp_path: Path) -> Path:
    path = tmp_path / "model-r2.onnx"
    path.write_bytes(b"the plain graph")
    return path


def test_a_graph_the_optimiser_cannot_read_is_not_fused_for_good(plain: Path, tmp_path: Path) -> None:
    with pytest.raises(NotFused) as e:
        fusion.fuse(plain, tmp_path / "model-r2-fused.onnx", resolve_model())
    assert e.value.lasting and e.value.why  # the child's last words: the optimiser's error


@pytest.mark.parametrize("difference", [0.0, 0.5])
def test_a_fused_graph_is_kept_only_if_its_hidden_states_are_the_plain_ones(
    plain: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, difference: float
) -> None:
    """What the child decides (fused_and_checked), with stand-ins for the optimiser and the model."""
    out, spec = tmp_path / "model-r2-fused.onnx", resolve_model()
    hidden = np.linspace(-3, 3, 24, dtype=np.float32).reshape(2, 3, 4)
    monkeypatch.setattr(fusion, "_write_fused", lambda plain, out, shape: out.write_bytes(b"fused"))
    monkeypatch.setattr(
        fusion, "_hidden", lambda graph, feeds: hidden + (difference if graph.read_bytes() == b"fused" else 0)
    )
    if difference:
        with pytest.raises(ValueError, match="hidden states differ"):
            fusion.fused_and_checked(plain, out, spec.path, spec.max_tokens, spec.query_prompt)
    else:
        fusion.fused_and_checked(plain, out, spec.path, spec.max_tokens, spec.query_prompt)


@pytest.mark.parametrize(
    ("child", "why", "lasting"),
    [
        ("import sys\nsys.stderr.write('noise\\nValueError: differs\\n')\nsys.exit(1)\n", "ValueError: differs", True),
        ("import sys\nsys.stderr.write('MemoryError: \\n')\nsys.exit(3)\n", "MemoryError:", False),
        ("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n", "killed by signal 9", False),
        ("import sys\nsys.exit(7)\n", "exit status 7", False),
        ("import time\ntime.sleep(60)\n", "not done in 0.5 s", True),  # a wait not repeated on every start
    ],
    ids=["cannot", "out-of-memory", "killed", "crashed", "timed-out"],
)
def test_the_child_says_why_and_whether_for_good(
    plain: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, child: str, why: str, lasting: bool
) -> None:
    """A child that cannot fuse the model exits 1: for good, as is one that ran out of time (a wait
    not to repeat on every start). One killed, out of memory or crashed may do better another time."""
    script = tmp_path / "child.py"
    script.write_text(child)
    monkeypatch.setattr(fusion, "python_command", lambda *args: ([sys.executable, str(script)], str(tmp_path)))
    if why.startswith("not done"):  # the others keep the default: a slow start must not time them out
        monkeypatch.setattr(fusion, "TIMEOUT_S", 0.5)
    with pytest.raises(NotFused) as e:
        fusion.fuse(plain, tmp_path / "model-r2-fused.onnx", resolve_model())
    assert (e.value.why, e.value.lasting) == (why, lasting)


def test_a_child_that_does_not_start_may_start_another_time(
    plain: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(fusion, "python_command", lambda *args: ([str(tmp_path / "no-python")], str(tmp_path)))
    with pytest.raises(NotFused, match="did not start") as e:
        fusion.fuse(plain, tmp_path / "model-r2-fused.onnx", resolve_model())
    assert not e.value.lasting


@pytest.mark.parametrize(
    ("error", "code"), [(ValueError("differs"), 1), (MemoryError(), 3), (OSError(28, "No space left"), 3)]
)
def test_the_childs_exit_status_tells_a_lasting_failure_from_a_passing_one(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], error: Exception, code: int
) -> None:
    monkeypatch.setattr(fusion, "fused_and_checked", raising(error))
    with pytest.raises(SystemExit) as e:
        fusion.main(["plain", "out", "folder", "256", ""])
    assert e.value.code == code and capsys.readouterr().err.startswith(type(error).__name__)


def raising(error: Exception) -> Callable[..., None]:
    """A stand-in that raises ``error`` whatever it is called with."""

    def fail(*args: object) -> None:
        raise error

    return fail


@pytest.fixture
def exports(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Stand-in exports (b"plain"), counted."""
    made: list[Path] = []

    def export(spec: ModelSpec, tmp: Path) -> None:
        made.append(tmp)
        tmp.write_bytes(b"plain")

    monkeypatch.setattr(export_module, "_export_fp32", export)
    return made


def test_a_fusion_that_may_pass_is_tried_again_and_the_plain_graph_used_meanwhile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, exports: list[Path], caplog: pytest.LogCaptureFixture
) -> None:
    spec, outcomes = resolve_model(), [NotFused("killed by signal 9", lasting=False), None]
    folder = tmp_path / "onnx" / spec.fingerprint

    def fuse(plain: Path, out: Path, spec: ModelSpec) -> None:
        if (outcome := outcomes.pop(0)) is not None:
            raise outcome
        out.write_bytes(plain.read_bytes() + b"+fused")

    monkeypatch.setattr(export_module, "fuse", fuse)
    with caplog.at_level(logging.INFO, logger="mcpower"):
        meanwhile = export_onnx(spec, tmp_path)
    assert meanwhile.name == "model-r2.onnx" and meanwhile.read_bytes() == b"plain"
    assert export_onnx(spec, tmp_path, fused=False) == meanwhile  # verified against its sidecar
    assert "not fused this time (killed by signal 9)" in caplog.text and "1 of 3 tries" in caplog.text

    fused = export_onnx(spec, tmp_path)  # the next load tries again, from the kept export
    assert fused.name == "model-r2-fused.onnx" and fused.read_bytes() == b"plain+fused"
    assert len(exports) == 1 and not outcomes
    assert sorted(p.name for p in folder.iterdir()) == [".lock", fused.name, fused.name + ".sha256"]


def test_a_fusion_that_keeps_failing_is_given_up_after_so_many_tries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, exports: list[Path]
) -> None:
    spec, tried = resolve_model(), []

    def fuse(plain: Path, out: Path, spec: ModelSpec) -> None:
        tried.append(plain)
        raise NotFused("killed by signal 9", lasting=False)

    monkeypatch.setattr(export_module, "fuse", fuse)
    loaded = [export_onnx(spec, tmp_path).name for _ in range(FUSE_TRIES + 2)]
    assert loaded == ["model-r2.onnx"] * (FUSE_TRIES - 1) + ["model-r2-fused.onnx"] * 3
    assert len(tried) == FUSE_TRIES and len(exports) == 1
    assert (tmp_path / "onnx" / spec.fingerprint / "model-r2-fused.onnx").read_bytes() == b"plain"


@pytest.mark.parametrize("count", [b"", b"not a number", b"-5", b"1.5", b"\xff\xfe"])
def test_a_damaged_count_of_tries_counts_as_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, exports: list[Path], count: bytes
) -> None:
    spec = resolve_model()
    monkeypatch.setattr(export_module, "fuse", raising(NotFused("killed", lasting=False)))
    assert export_onnx(spec, tmp_path).name == "model-r2.onnx"
    tries = tmp_path / "onnx" / spec.fingerprint / "model-r2-fused.onnx.tries"
    tries.write_bytes(count)
    assert export_onnx(spec, tmp_path).name == "model-r2.onnx" and tries.read_bytes() == b"1"


def test_a_model_that_cannot_be_fused_keeps_its_plain_graph_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, exports: list[Path], caplog: pytest.LogCaptureFixture
) -> None:
    spec = resolve_model()
    monkeypatch.setattr(export_module, "fuse", raising(NotFused("ValueError: x", lasting=True)))
    with caplog.at_level(logging.INFO, logger="mcpower"):
        kept = export_onnx(spec, tmp_path)
    assert kept.name == "model-r2-fused.onnx" and kept.read_bytes() == b"plain"
    assert "kept the plain ONNX graph, not fused (ValueError: x)" in caplog.text
    assert not kept.with_name("model-r2-fused.onnx.tries").exists()


def test_the_probe_is_a_padded_batch_of_real_text_with_the_models_prompt() -> None:
    spec = resolve_model()
    feeds = fusion._probe(spec.path, spec.max_tokens, spec.query_prompt)
    lengths = feeds["attention_mask"].sum(axis=1)
    assert feeds["input_ids"].shape == feeds["attention_mask"].shape == feeds["token_type_ids"].shape
    assert lengths.min() < lengths.max() == feeds["input_ids"].shape[1] == spec.max_tokens  # padded, truncated
    assert fusion._shape(spec.path) == (12, 384)


def test_the_heads_and_width_fall_back_to_the_graphs_own(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("[not a config]")
    assert fusion._shape(tmp_path) == (0, 0)
    assert fusion._shape(tmp_path / "missing") == (0, 0)


def test_onnxruntime_tools_leave_sys_path_and_the_users_log_as_they_were(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    path = list(sys.path)

    def record(where: str) -> logging.LogRecord:
        return logging.LogRecord("fusion_base", logging.WARNING, where, 1, "Fused Attention: 6", None, None)

    with caplog.at_level(logging.INFO):
        with fusion.onnxruntime_tools():
            sys.path.append("/site-packages/onnxruntime/transformers")
            logging.getLogger("fusion_base").handle(record("/site-packages/onnxruntime/transformers/fusion_base.py"))
            logging.getLogger("mcpower.x").handle(record("/work/mcpower/x.py"))
        logging.getLogger("fusion_base").handle(record("/site-packages/onnxruntime/transformers/fusion_base.py"))

    assert sys.path == path
    assert [r.pathname for r in caplog.records] == [
        "/work/mcpower/x.py",
        "/site-packages/onnxruntime/transformers/fusion_base.py",  # after: the filter is gone again
    ]


# --- slow: the packaged model ----------------------------------------------------------------------


@pytest.mark.slow
def test_the_packaged_model_is_fused_and_gives_the_same_hidden_states(tmp_path_factory: pytest.TempPathFactory) -> None:
    import onnx

    spec, cache = resolve_model(), tmp_path_factory.mktemp("onnx-cache")
    fused = export_onnx(spec, cache)
    plain = export_onnx(spec, cache, fused=False)  # exported again: not kept beside the fused graph

    ops = collections.Counter(n.op_type for n in onnx.load(str(fused), load_external_data=False).graph.node)
    assert ops["Attention"] == ops["BiasGelu"] == 6 and ops["EmbedLayerNormalization"] == 1
    feeds = fusion._probe(spec.path, spec.max_tokens, spec.query_prompt)
    assert np.abs(fusion._hidden(plain, feeds) - fusion._hidden(fused, feeds)).max() < 1e-4
