"""Regenerate amqpscope/dissect/generated/*.py from the shipped spec XML (tests/test_generated_fresh.py
checks that the checked-in files are what this writes).

Usage: python tools/generate_codecs.py [--out DIR]
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from amqpscope.dissect.compiler import main

if __name__ == "__main__":
    raise SystemExit(main())
