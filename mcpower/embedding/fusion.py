"""The fp32 export with each transformer layer fused into onnxruntime's own kernels.

onnxruntime's session optimiser leaves a traced BERT-like graph at ~250 small nodes (MatMul, Add,
Reshape, Transpose, Softmax ...); its transformer optimiser (``onnxruntime.transformers``, shipped
in the wheel, pure Python over ``onnx``) rewrites each layer into ``Attention``,
``SkipLayerNormalization`` and ``BiasGelu``, and the embeddings into ``EmbedLayerNormalization``:
46 nodes for all-MiniLM-L6-v2. The vectors are the same (largest difference in a hidden state
2e-6); a query is embedded in 0.93-0.99x the time and the session loads in ~0.75x
(docs/benchmarks.md, "The query model").

The fused graph is made once from the plain export, like the int8 one, in a child interpreter
(its memory goes back to the system after), and kept only if it gives the plain graph's hidden
states on a probe batch of real, padded texts. When it is not made, ``fuse`` says whether for good
(a model the optimiser fails on or misreads: another architecture, another attention layout; or a
child that ran for TIMEOUT_S, a wait not to be repeated on every start) or for a reason that may
pass (the child was killed, ran out of memory or disk, or could not start); export.py decides what
the cache keeps. It takes the plain export's place in the cache; the int8 export is still quantised
from the plain graph: the quantiser cannot read the fused one.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from mcpower.embedding.model import ModelSpec
from mcpower.isolated import python_command

if TYPE_CHECKING:
    from numpy.typing import NDArray

logger = logging.getLogger(__name__)

# Largest difference allowed between a fused and a plain hidden state: float32 re-associated sums
# differ by ~1e-6 (2.4e-6 measured for all-MiniLM-L6-v2, 1.0e-6 for multilingual-e5-small); a
# misread layer differs by whole units.
TOLERANCE = 1e-3
# The child's time, at most: multilingual-e5-small (470 MB) takes ~20 s on 2 cores.
TIMEOUT_S = 600.0
# Real texts of several lengths and scripts, so the probe batch is padded and crosses the model's
# window (a misread attention mask or position offset shows in the padded rows).
_PROBE = (
    "how do I add a dependency?",
    "Die Katze sitzt auf der Matte, und der Hund schläft vor dem Kamin.",
    "検索は速くなければならない。",
    "Dendritic arbors adjust their geometry to compensate for variations in synaptic input. " * 40,
)


class NotFused(Exception):
    """The fused graph was not made, ``why``; ``lasting`` when the model cannot be fused (the
    optimiser fails on it, or its graph gives other hidden states) or the child ran out of time,
    not when the cause may pass."""

    def __init__(self, why: str, lasting: bool) -> None:
        super().__init__(why)
        self.why, self.lasting = why, lasting


# The child's exit statuses: the model cannot be fused; the child ran out of memory or disk, or
# misses a module (a cause that may pass). Any other (a signal, a crash) counts as the second.
_CANNOT, _NOT_NOW = 1, 3


def fuse(plain: Path, out: Path, spec: ModelSpec) -> None:
    """Write to ``out`` the fused graph of the export at ``plain``, checked to give the same hidden
    states. The work is done in a child interpreter (mcpower/isolated.py): the optimiser holds the
    whole graph several times over (3.8 GB at its peak for multilingual-e5-small's 470 MB), and a
    server that made it in its own process kept ~800 MB of that afterwards.

    Raises:
        NotFused: the graph was not made (why, and whether for good).
    """
    logger.info(
        "fusing the layers of the ONNX export of %s, once (seconds; later runs reuse it)",
        spec.name,
        extra={"event": "model.fuse", "notice": True},
    )
    command, cwd = python_command(
        "mcpower.embedding.fusion", str(plain), str(out), str(spec.path), str(spec.max_tokens), spec.query_prompt
    )
    try:
        done = subprocess.run(
            command,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            timeout=TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise NotFused(f"not done in {TIMEOUT_S:g} s", lasting=True) from None  # not a wait to repeat
    except OSError as e:  # no memory to start it, no interpreter
        raise NotFused(f"the child process did not start ({e.strerror or e})", lasting=False) from e
    code = done.returncode
    if code != 0:
        said = _last_line(done.stderr)
        raise NotFused(said or (f"killed by signal {-code}" if code < 0 else f"exit status {code}"), code == _CANNOT)
    logger.debug("%s: fused ONNX graph checked against the plain one", spec.name)


def main(argv: list[str]) -> None:
    """The child's work (``fuse``): argv is the plain graph, the fused one to write, the model's
    folder, its window in word pieces and its query prompt. Exits with the reason on stderr if the
    fused graph cannot be made or does not give the plain graph's hidden states (1), or if it was
    not made for a cause that may pass (3: out of memory or disk, a module missing)."""
    plain, out, folder, max_tokens, prompt = argv
    try:
        fused_and_checked(Path(plain), Path(out), Path(folder), int(max_tokens), prompt)
    except (MemoryError, OSError, ImportError) as e:
        _exit(e, _NOT_NOW)
    except Exception as e:  # the optimiser's own errors are of every kind; any of them means "plain"
        _exit(e, _CANNOT)


def _exit(e: BaseException, code: int) -> None:
    sys.stderr.write(f"{type(e).__name__}: {_last_line(str(e).encode())}\n")
    sys.exit(code)


def fused_and_checked(plain: Path, out: Path, folder: Path, max_tokens: int, prompt: str) -> None:
    """Write the fused graph of ``plain`` to ``out`` and check it against ``plain`` on the probe batch.

    Raises:
        ValueError: its hidden states differ from the plain graph's.
    """
    _write_fused(plain, out, _shape(folder))
    feeds = _probe(folder, max_tokens, prompt)
    if not np.allclose(_hidden(plain, feeds), _hidden(out, feeds), rtol=0, atol=TOLERANCE):
        raise ValueError("its hidden states differ from the plain graph's")


def _last_line(data: bytes) -> str:
    lines = [line for line in data.decode("utf-8", "replace").splitlines() if line.strip()]
    return lines[-1].strip()[:200] if lines else ""


def _shape(folder: Path) -> tuple[int, int]:
    """Attention heads and hidden size from the model's config.json; 0 lets the optimiser read them
    from the graph."""
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
        return int(config.get("num_attention_heads") or 0), int(config.get("hidden_size") or 0)
    except (OSError, ValueError, TypeError, AttributeError):
        return 0, 0


def _write_fused(plain: Path, out: Path, shape: tuple[int, int]) -> None:
    with onnxruntime_tools():
        import onnx
        from onnxruntime.transformers.optimizer import optimize_by_fusion

        # The fusions only (what optimize_model does at opt_level 0, without its temporary folder,
        # left behind when a fusion fails): the session applies its own optimisations at load, as
        # for the plain graph (a graph saved after those would be tied to this CPU).
        fused = optimize_by_fusion(onnx.load(str(plain)), "bert", num_heads=shape[0], hidden_size=shape[1])
        fused.save_model_to_file(str(out))


@contextmanager
def onnxruntime_tools() -> Iterator[None]:
    """Room for onnxruntime's Python tools (the transformer optimiser, the quantiser): they append
    their folder to ``sys.path`` (their modules import each other by bare names like
    ``constants``), which is undone after, and log their steps through the root logger or loggers
    of those bare names, which are kept from the user's handlers meanwhile."""
    path = list(sys.path)
    root = logging.getLogger()
    hush = _NotOnnxruntime()
    hushed = [root, *root.handlers]  # a handler's filter also sees records other loggers pass up
    for f in hushed:
        f.addFilter(hush)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        sys.path[:] = path
        for f in hushed:
            f.removeFilter(hush)


class _NotOnnxruntime(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return "onnxruntime" not in record.pathname


def _probe(folder: Path, max_tokens: int, prompt: str) -> dict[str, NDArray[np.int64]]:
    from tokenizers import Tokenizer

    from mcpower.embedding.base import tokenizer_padding

    tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    tok.enable_truncation(max_tokens)
    tok.enable_padding(**tokenizer_padding(tok, folder))
    encs = tok.encode_batch([prompt + t for t in _PROBE])
    return {
        "input_ids": np.array([e.ids for e in encs], dtype=np.int64),
        "attention_mask": np.array([e.attention_mask for e in encs], dtype=np.int64),
        "token_type_ids": np.array([e.type_ids for e in encs], dtype=np.int64),
    }


def _hidden(graph: Path, feeds: dict[str, NDArray[np.int64]]) -> NDArray[np.float32]:
    """The graph's last hidden states at the batch's real (unpadded) tokens."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    session: Any = ort.InferenceSession(str(graph), opts, providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    hidden = session.run(None, {n: feeds[n] for n in names})[0]
    return np.asarray(hidden * feeds["attention_mask"][..., None], dtype=np.float32)
