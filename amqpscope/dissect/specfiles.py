"""Where the spec files are, and the error a spec file that cannot be loaded raises.

Apart from :mod:`amqpscope.dissect.spec` (the model and its parser) so that a command whose
compiled tables come from the cache (:mod:`amqpscope.dissect.cache`) starts without importing
the model at all.
"""

from __future__ import annotations

from pathlib import Path

DEFAULT_SPEC = "amqp0-9-1.xml"
# the package's files are on disk (the native core cannot be imported from a zip either)
_SPECS = Path(__file__).resolve().parent / "specs"


class SpecError(Exception):
    """A spec file that cannot be loaded; the message names the file, line and element."""


def bundled_spec_path(name: str = DEFAULT_SPEC) -> Path:
    """A spec file shipped with amqpscope (amqpscope/dissect/specs/)."""
    return _SPECS / name
