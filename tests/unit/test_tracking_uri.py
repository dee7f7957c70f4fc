"""tracking.uri checked before anything trains, and relative sqlite paths made absolute."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlplat.registry import ConfigError
from rlplat.tracking.settings import absolute_sqlite_uri, check_tracking_uri


@pytest.mark.parametrize(
    "uri",
    ["sqlite:///m.db", "http://host:5000", "https://host/mlflow", "postgresql+psycopg2://u@h/db", "databricks",
     "databricks://profile", "mssql://u@h/db"],
)  # fmt: skip
def test_stores_mlflow_has_pass(uri):
    check_tracking_uri(uri)


@pytest.mark.parametrize(
    "uri,needle",
    [("nonsense://x", "no MLflow store has the scheme 'nonsense'"), ("file:///tmp/mlruns", "refuses file stores"),
     ("mlruns", "refuses file stores")],
)  # fmt: skip
def test_stores_mlflow_refuses_are_refused(uri, needle, monkeypatch):
    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)
    with pytest.raises(ConfigError, match=needle):
        check_tracking_uri(uri)


def test_a_file_store_passes_where_mlflow_is_told_to_allow_it(monkeypatch):
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    check_tracking_uri("file:///tmp/mlruns")


def test_relative_sqlite_paths_are_made_absolute_and_the_rest_kept(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert absolute_sqlite_uri("sqlite:///rel/m.db") == f"sqlite:///{tmp_path / 'rel' / 'm.db'}"
    assert absolute_sqlite_uri("sqlite+pysqlite:///m.db") == f"sqlite+pysqlite:///{tmp_path / 'm.db'}"
    for kept in ("sqlite:////abs/m.db", "sqlite:///:memory:", "http://host:5000", "databricks"):
        assert absolute_sqlite_uri(kept) == kept
    assert Path(absolute_sqlite_uri("sqlite:///m.db?mode=ro").removeprefix("sqlite:///")).is_absolute()
