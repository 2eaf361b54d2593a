"""Run this checkout's ``amqpscope`` command: ``python tests/run_cli.py sniff …``.

The package's ``amqpscope.cli`` is the ``cli/`` directory of the tree it was installed from; tests
and benchmarks of a checkout (a worktree, say) must run that checkout's commands, so ``cli/`` is
taken from next to this file whatever the installed package points at.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import amqpscope.cli  # noqa: E402 - after the path above

amqpscope.cli.__path__[:] = [str(ROOT / "cli")]

from amqpscope.cli.main import main  # noqa: E402

if __name__ == "__main__":
    sys.argv[0] = "amqpscope"
    main()
