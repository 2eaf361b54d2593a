"""A real local Spark session for the batch-job tests: started once per test run, local[2].

Spark is started lazily, by the first test that asks for ``spark``; decoder tests never pay for
it. Everything binds to loopback (spark-notes §2) and the Python workers run this interpreter.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    pytest.importorskip("pyspark")
    pytest.importorskip("pyarrow")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from amqpscope.spark.job import get_session

    warehouse = tmp_path_factory.mktemp("spark-warehouse")
    session = get_session("local[2]", conf=(
        ("spark.sql.shuffle.partitions", "2"),
        ("spark.default.parallelism", "2"),
        ("spark.sql.warehouse.dir", str(warehouse)),
        ("spark.driver.memory", "1g"),
    ), app="amqpscope-tests")  # fmt: skip
    yield session
    session.stop()
