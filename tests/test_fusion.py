"""The fused fp32 graph: kept only when it gives the plain graph's hidden states (fast, with stand-ins),
and really fused and the same on the packaged model (slow)."""

from __future__ import annotations

import collections
import logging
import sys
from pathlib import Path

import numpy as np
import pytest

from mcpower.embedding import fusion, resolve_model
from mcpower.embedding.export import export_onnx


@pytest.fixture
def plain(tmp_path: Path) -> Path:
    path = tmp_path / "model-r2.onnx"
    path.write_bytes(b"the plain graph")
    return path


def test_a_graph_the_optimiser_cannot_read_is_kept_plain(
    plain: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    out = tmp_path / "model-r2-fused.onnx"
    with caplog.at_level(logging.INFO, logger="mcpower"):
        fusion.fuse(plain, out, resolve_model())
    assert out.read_bytes() == b"the plain graph"
    assert any("kept the plain ONNX graph, not fused" in r.getMessage() for r in caplog.records)


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


def test_the_child_says_why_it_kept_the_plain_graph(
    plain: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A child that fails, or takes too long, leaves the plain graph, with its last words as the reason."""
    script = tmp_path / "child.py"
    script.write_text("import sys, time\nsys.stderr.write('noise\\nValueError: differs\\n')\nsys.exit(1)\n")
    monkeypatch.setattr(fusion, "python_command", lambda *args: ([sys.executable, str(script)], str(tmp_path)))
    out = tmp_path / "model-r2-fused.onnx"
    with caplog.at_level(logging.INFO, logger="mcpower"):
        fusion.fuse(plain, out, resolve_model())
    assert out.read_bytes() == b"the plain graph"
    assert "not fused (ValueError: differs)" in caplog.text

    script.write_text("import time\ntime.sleep(60)\n")
    monkeypatch.setattr(fusion, "TIMEOUT_S", 0.5)
    out.unlink()
    with caplog.at_level(logging.INFO, logger="mcpower"):
        fusion.fuse(plain, out, resolve_model())
    assert out.read_bytes() == b"the plain graph" and "not done in 0.5 s" in caplog.text


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
