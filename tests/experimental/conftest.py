"""The experimental rewrites' fixtures: `store`, the state store provider a parametrized test runs on."""
from __future__ import annotations

from typing import Any

import pytest
from pyspark.sql import SparkSession

from sluice._conf import spec, state_store_providers
from support.session import session_conf


@pytest.fixture
def store(request: pytest.FixtureRequest, spark: SparkSession) -> Any:
    # "cache": sluice's record cache in front of its default delegate (RocksDB)
    providers = {**state_store_providers(), "cache": spec()["caching_provider"]}
    with session_conf(spark, {"spark.sql.streaming.stateStore.providerClass": providers[request.param]}):
        yield request.param
