from __future__ import annotations

import argparse

import pytest

from lance_spark_ops.spark.files.compaction_options import CompactionOptions
from lance_spark_ops.spark.runtime.cli import add_dataclass_options, options_from_args


def test_flags_from_options() -> None:
    ap = argparse.ArgumentParser()
    add_dataclass_options(ap, CompactionOptions)
    args = ap.parse_args(["--target-rows-per-fragment", "40000", "--compaction-mode", "try_binary_copy",
                          "--materialize-deletions", "false", "--excluded-fragment-ids", "3", "4",
                          "--materialize-deletions-threshold", "0.25"])
    opts = options_from_args(args, CompactionOptions)
    assert opts.target_rows_per_fragment == 40000
    assert opts.compaction_mode == "try_binary_copy"
    assert opts.materialize_deletions is False
    assert opts.excluded_fragment_ids == (3, 4)
    assert opts.materialize_deletions_threshold == 0.25
    assert opts.max_rows_per_group == 1024


def test_bad_bool() -> None:
    ap = argparse.ArgumentParser()
    add_dataclass_options(ap, CompactionOptions)
    with pytest.raises(SystemExit):
        ap.parse_args(["--dry-run", "maybe"])
