"""A new Python interpreter that runs only this process's own mcpower, whatever folder it started in.

Used where work is better done in a child than here: reading an untrusted file (chunking/worker.py)
and fusing a model's graph (embedding/fusion.py: its memory goes back to the system when the child
ends). Not a fork (the parent runs the model's threads), and not multiprocessing's spawn, which
imports the caller's main script again and starts with ``-c`` (the working folder first on the
path). The interpreter is isolated (``-I``: neither the working folder, PYTHONPATH, the user's site
folder nor any PYTHON* variable shapes its path), it starts in mcpower's own folder, and a small
bootstrap gives it this process's module path (less the working folder), loads the very ``mcpower``
package this process runs, and calls ``main(argv)`` of the module named.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

# What the isolated interpreter runs first: this process's module path (argv 1, JSON), then the
# mcpower package found in exactly the folder this process loaded it from (argv 2), whatever else
# the path holds; then main(argv 4 on) of the module named by argv 3.
_BOOTSTRAP = """\
import importlib, importlib.machinery, importlib.util, json, sys
sys.path[:] = json.loads(sys.argv[1])
spec = importlib.machinery.PathFinder.find_spec("mcpower", [sys.argv[2]])
package = importlib.util.module_from_spec(spec)
sys.modules["mcpower"] = package
spec.loader.exec_module(package)
importlib.import_module(sys.argv[3]).main(sys.argv[4:])
"""


def python_command(module: str, *args: str) -> tuple[list[str], str]:
    """The command that runs ``module.main(list(args))`` (a module of mcpower) in an isolated
    interpreter, and the folder it starts in (mcpower's own: nothing opened by a relative name
    comes from the user's working folder)."""
    package = Path(os.path.abspath(__file__)).parent  # this module is mcpower/isolated.py
    here = os.path.realpath(os.getcwd())
    path = [p for p in sys.path if isinstance(p, str) and os.path.isabs(p) and os.path.realpath(p) != here]
    command = [sys.executable, "-I", "-c", _BOOTSTRAP, json.dumps(path), str(package.parent), module, *args]
    return command, str(package) if package.is_dir() else os.path.dirname(sys.executable) or os.sep
