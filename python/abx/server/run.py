"""What envd and ``abx-server --python`` run: ``python3 /opt/abx/python/abx/server/run.py --fd N
MODULE.py`` (docs/python.md), i.e. ``abx.server.worker.main``.

A script is compiled at every start, a module imported from the package is not (the bundle
ships its ``__pycache__``): this script is the few lines that put the package on ``sys.path``
and import the worker, which saved ~5 ms of each worker's start in a sandbox (issue 37).
"""

import os
import sys

# The folder holding abx/, in place of this script's own folder (abx/server).
sys.path[0] = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from abx.server.worker import main  # noqa: E402

sys.exit(main(sys.argv[1:]))
