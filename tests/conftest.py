"""Shared fixtures: a CLI runner with a fixed terminal width, golden files, CUDA skip."""

from __future__ import annotations

from pathlib import Path

import pytest

import golden_invariants

GOLDEN_DIR = Path(__file__).parent / "golden"
DATA_DIR = Path(__file__).parent / "data"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--update-golden", action="store_true", default=False,
                     help="rewrite tests/golden/* from the current output instead of comparing")


# Tests measured at 5 s or more on the 2-core machine (pytest --durations): they run in
# `make test-slow` (CI runs it too), so that `make test` stays under 3 minutes on 2 cores.
SLOW_TESTS = (
    "tests/test_convert.py::test_a_killed_dcp_replace_leaves_old_or_new_and_the_next_run_cleans_up",
    "tests/test_convert.py::test_two_converts_to_one_out_the_second_fails",
    "tests/test_convert.py::test_ctrl_c_during_a_dcp_convert_is_exit_130_without_output",
    "tests/test_bench.py::test_cli_zoo_model_end_to_end_json",
    "tests/test_bench.py::test_cli_saved_comparison_refuses_other_json",
    "tests/test_bench.py::test_cli_compares_two_saved_results_without_running",
    "tests/test_bench.py::test_max_batch_search_with_a_fake_allocator",
    "tests/test_bench.py::test_cli_table_csv_and_samples",
    "tests/test_trace_torchvision_all.py::test_builder_traces_with_default_input[regnet_y_128gf]",
    "tests/test_flops.py::test_cross_check_shows_three_counters",
    "tests/test_memory.py::test_cli_sweep_and_fit_rows",
    "tests/test_weights_origin.py::test_bench_says_what_it_timed",
    "tests/test_export.py::test_the_exporter_report_is_written_only_when_asked_and_never_over_a_file",
    "tests/test_features.py::test_two_concurrent_runs_one_folder_never_corrupt_it",
    "tests/test_features.py::test_kill_before_the_shard_recovers_a_readable_folder",
    "tests/test_cli.py::test_closed_pipe_exits_quietly_with_0",
    "tests/test_report_page.py::test_comparison_throughput_cell_names_the_batch",
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    slow = pytest.mark.slow
    for item in items:
        if item.nodeid.startswith(SLOW_TESTS):
            item.add_marker(slow)
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs CUDA (run on a GPU machine)")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _fixed_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "160")
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.delenv("TORCHINSPECT_DEBUG", raising=False)


@pytest.fixture
def runner():
    from typer.testing import CliRunner

    return CliRunner()


@pytest.fixture
def invoke(runner):
    """invoke(args...) -> Result, running the real `inspect` app."""
    from torchinspect.cli.app import app

    def _invoke(*args: str, **kw):
        return runner.invoke(app, [str(a) for a in args], **kw)

    return _invoke


@pytest.fixture
def golden(request: pytest.FixtureRequest):
    """golden(name, text): compare text with tests/golden/NAME (or rewrite it). Either way the
    text must hold golden_invariants.problems() first: column sums equal the totals."""
    update = request.config.getoption("--update-golden")

    def _check(name: str, text: str) -> None:
        path = GOLDEN_DIR / name
        broken = golden_invariants.problems(text)  # checked before a golden is written
        if broken:
            pytest.fail(f"{name}: the output breaks the golden invariants ({'; '.join(broken)})"
                        + ("; not written" if update else ""))
        if not update and not path.exists():
            pytest.fail(f"golden file {path} is missing; run pytest --update-golden to write it")
        if update:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            return
        expected = path.read_text()
        assert text == expected, f"output differs from {path}; review and run pytest --update-golden"

    return _check
