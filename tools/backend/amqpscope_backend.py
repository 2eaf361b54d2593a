"""The build backend of pyproject.toml: setuptools' own, with its editable installs' notice left out.

Every editable install of a flat layout (amqpscope/ and cli/ at the top of the checkout) makes
setuptools emit an ``InformationOnly`` warning ("Editable installation. Please be careful with
folders in your working directory..."), which pip prints as a dozen lines of warning on every
``pip install -e .``. It asks nothing of the user: it is filtered out here, and only it.
"""

from __future__ import annotations

import warnings
from typing import Any

from setuptools import build_meta
from setuptools.build_meta import *  # noqa: F403 - every other hook is setuptools' own
from setuptools.warnings import InformationOnly


def build_editable(wheel_directory: str, config_settings: dict[str, Any] | None = None,
                   metadata_directory: str | None = None) -> str:  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", InformationOnly)
        return build_meta.build_editable(wheel_directory, config_settings, metadata_directory)
