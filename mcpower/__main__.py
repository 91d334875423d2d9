"""`python -m mcpower`: the `mcpower` command.

`python -m` puts the working folder first on the module path, where a `typer.py` or `socket.py`
of whatever folder the command runs in would shadow the real module. It comes off before anything
else is imported (`mcpower` itself and what Python loaded at start-up cannot be helped: use the
`mcpower` command, or `python -P -m mcpower`, in a folder you do not trust).
"""

import os
import sys

if sys.path and not getattr(sys.flags, "safe_path", False) and sys.path[0] in ("", os.getcwd()):
    del sys.path[0]

from mcpower.cli import main  # after the working folder is off the path

main()
