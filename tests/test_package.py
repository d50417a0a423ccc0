"""Unit tests of the student package, and of the grader's helpers that need no notebook run."""

import os
import subprocess
import sys

import nbformat
import pytest

import raydata_course as rc
from raydata_course import cluster, layout
from raydata_course.data import load_digits_table, load_wine_table, write_parquet_files
from raydata_course.notebooks import is_stripped, strip_outputs
from raydata_course.units import MiB
from raydata_grader import answers, mutants, paths


# ----------------------------------------------------------------------------- cluster


def test_import_has_no_side_effects():
    code = (
        "import sys, os; before = set(os.listdir('.'));"
        "import raydata_course, raydata_course.cluster, raydata_course.data, raydata_course.layout;"
        "assert 'ray' not in sys.modules or not __import__('ray').is_initialized();"
        "assert set(os.listdir('.')) == before; print('clean')"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "clean"


def test_wrong_ray_version_is_a_clear_error(monkeypatch):
    import ray

    monkeypatch.setattr(ray, "__version__", "2.55.1")
    with pytest.raises(rc.RayVersionError, match=r"pinned to Ray 2\.60\.0, but Ray 2\.55\.1.*make setup"):
        rc.check_ray_version()
    with pytest.raises(rc.RayVersionError):
        rc.setup()


def test_default_cluster_size_clamps_to_the_machine(monkeypatch):
    import psutil

    class Mem:
        available = 64 * 1024**3

    monkeypatch.setattr(psutil, "virtual_memory", lambda: Mem)
    size = rc.default_cluster_size()
    assert size.object_store_memory_bytes == 2 * 1024**3  # capped
    assert size.num_cpus >= 4
    Mem.available = 1500 * MiB
    assert rc.default_cluster_size().object_store_memory_bytes == 375 * MiB  # 25 %
    Mem.available = 300 * MiB
    with pytest.raises(rc.ClusterTooSmallError, match="MiB of RAM is available"):
        rc.default_cluster_size()


def test_the_grader_can_give_every_graded_notebook_the_same_default_cluster(monkeypatch):
    from raydata_course.layout import GRADING_CPUS, MACHINE_CPUS_ENV

    monkeypatch.setattr("os.cpu_count", lambda: 64)
    assert rc.default_cluster_size().num_cpus == 64
    monkeypatch.setenv(MACHINE_CPUS_ENV, str(GRADING_CPUS))
    assert rc.default_cluster_size().num_cpus == GRADING_CPUS == 4
    monkeypatch.setenv(MACHINE_CPUS_ENV, "2")
    assert rc.default_cluster_size().num_cpus == 4  # still at least the course's minimum
    monkeypatch.setenv(MACHINE_CPUS_ENV, "lots")
    with pytest.raises(ValueError, match="whole number of CPUs"):
        rc.default_cluster_size()


def test_long_temp_root_is_rejected_before_ray_starts():
    with pytest.raises(ValueError, match="unix sockets"):
        rc.setup(temp_root="/tmp/" + "x" * 60)


def test_sizes_must_be_positive():
    with pytest.raises(ValueError, match="num_cpus must be a positive number"):
        rc.setup(num_cpus=0)


def test_is_interactive_honours_headless(monkeypatch):
    monkeypatch.setenv(layout.HEADLESS_ENV, "1")
    assert cluster.is_interactive() is False


def test_setup_describes_the_shared_cluster(ray_cluster):
    import ray.data

    assert ray_cluster.num_cpus == 4
    assert ray_cluster.object_store_memory_bytes == 1024**3
    assert not ray_cluster.connected_to_existing
    assert ray_cluster.temp_root == os.environ[layout.TEMP_ROOT_ENV]
    assert ray.data.DataContext.get_current().enable_progress_bars is False
    assert "Ray 2.60.0" in str(ray_cluster)
    assert cluster.ray_processes(), "the running cluster's processes should be found"


def test_setup_connects_when_ray_address_is_set(ray_cluster):
    code = (
        "import raydata_course as rc; s = rc.setup(num_cpus=99);"
        "print(s.connected_to_existing, s.num_cpus, s.temp_root); rc.shutdown()"
    )
    env = {**os.environ, "RAY_ADDRESS": ray_cluster.address}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["True", "4", "None"]
    assert "ignores num_cpus" in out.stderr


def test_too_small_cluster_is_a_clear_error(ray_cluster):
    with pytest.raises(rc.ClusterTooSmallError, match="needs at least 64 CPUs"):
        rc.setup(require_num_cpus=64)


def test_object_store_stats_sees_a_put(ray_cluster):
    import numpy as np
    import ray

    from raydata_course.measure import object_store_stats

    before = object_store_stats()
    ref = ray.put(np.zeros(16 * MiB, dtype=np.uint8))
    after = object_store_stats()
    assert after.used_bytes - before.used_bytes >= 16 * MiB
    assert after.num_local_objects >= before.num_local_objects + 1
    del ref


def test_course_root_is_found_and_a_wrong_root_is_refused(tmp_path, monkeypatch):
    from raydata_course.jupyter import main

    root = layout.course_root()
    assert (root / "chapters").is_dir() and (root / "exercises").is_dir()
    (tmp_path / "exercises").mkdir()
    assert layout.course_root(tmp_path, needs=("exercises",)) == tmp_path.resolve()
    monkeypatch.setenv(layout.COURSE_ROOT_ENV, str(tmp_path))
    assert layout.course_root() == root  # the override lacks chapters/: not the course
    with pytest.raises(SystemExit, match="is not the course folder: it needs chapters/ and exercises/"):
        main(["--root", str(tmp_path), "--no-browser"])
    with pytest.raises(ValueError, match="not an assignment id"):
        layout.exercise_notebook("../../etc/passwd")


# -------------------------------------------------------------------------------- data


def test_wine_table_is_the_real_data():
    table = load_wine_table()
    assert table.num_rows == 178
    assert table.num_columns == 14
    assert sorted(set(table["cultivar"].to_pylist())) == [0, 1, 2]
    assert table["alcohol"].to_pylist()[0] == pytest.approx(14.23)  # first row of the UCI file


def test_digits_table_shape():
    table = load_digits_table()
    assert table.num_rows == 1797
    assert len(table["pixels"][0]) == 64
    assert max(table["pixels"].combine_chunks().flatten().to_pylist()) == 16


def test_write_parquet_files_splits_evenly(tmp_path):
    import pyarrow.parquet as pq

    paths = write_parquet_files(load_wine_table(), tmp_path / "w", 8)
    counts = [pq.read_metadata(p).num_rows for p in paths]
    assert len(paths) == 8 and sum(counts) == 178 and max(counts) - min(counts) <= 1


def test_write_parquet_files_refuses_to_mix_with_old_files(tmp_path):
    write_parquet_files(load_wine_table(), tmp_path, 2)
    with pytest.raises(FileExistsError, match="already holds 2 Parquet"):
        write_parquet_files(load_wine_table(), tmp_path, 2)
    with pytest.raises(ValueError, match="num_files must be between 1 and 178"):
        write_parquet_files(load_wine_table(), tmp_path / "x", 0)


# ----------------------------------------------------------------------------- grading


def test_reference_answers_strip_the_markers():
    found = answers.reference_answers("data01")
    assert set(found) == {"block_row_counts_answer", "make_blocks_answer", "write_files_answer", "first_rows_by_answer"}
    assert all("### BEGIN SOLUTION" not in a and "### END SOLUTION" not in a for a in found.values())
    assert "repartition" in found["make_blocks_answer"]


def test_fill_answers_rejects_unknown_cells():
    nb = nbformat.read(paths.release_notebook("data01"), as_version=4)
    with pytest.raises(KeyError, match="no answer cell with grade_id"):
        answers.fill_answers(nb, {"nope": "x = 1"})


def test_mutant_fixtures_name_real_cells():
    nb = nbformat.read(paths.source_notebook("data01"), as_version=4)
    grade_ids = {c.metadata["nbgrader"]["grade_id"] for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade")}
    found = [m for m in mutants.load_mutants("data01") if not m.name.startswith("ok")]  # ok*: correct answers
    assert len(found) >= 3
    for m in found:
        assert m.fails and m.fails <= grade_ids, f"{m.name}: FAILS must name grade cells"
        assert m.description, f"{m.name} needs a docstring saying which mistake it makes"
    for assignment in paths.ASSIGNMENTS:
        for m in mutants.load_mutants(assignment):
            # a fixture that fails nothing is a correct answer, and says so by its name
            assert bool(m.fails) != m.name.startswith("ok"), f"{assignment}/{m.name}: FAILS empty iff named ok*"
        assert m.description, f"{m.name} needs a docstring saying which mistake it makes"


def test_strip_outputs_keeps_nbgrader_metadata():
    nb = nbformat.read(paths.source_notebook("data01"), as_version=4)
    nb.cells[1].outputs = [nbformat.v4.new_output("stream", name="stdout", text="x")]
    nb.cells[1].execution_count = 3
    stripped = strip_outputs(nb)
    assert is_stripped(stripped) and not is_stripped(nb)
    assert [c.metadata.get("nbgrader") for c in stripped.cells] == [c.metadata.get("nbgrader") for c in nb.cells]


def test_image_source_blocks_are_what_source_block_rows_says():
    """The "files" of chapter 04 and data04: 64 rows only when 64 divides the row count.

    Checked against the read tasks Ray 2.60 itself plans for ``image_source``'s
    ``ray.data.range(n, override_num_blocks=ceil(n / 64))`` (8-byte ids: no read task's
    output is split further), without running them.
    """
    from ray.data._internal.datasource.range_datasource import RangeDatasource

    from raydata_course.chapters.ch04_backpressure import ROWS_PER_FILE, source_block_rows

    for num_rows in (256, 288, 100, 1, 1003):
        tasks = RangeDatasource(num_rows).get_read_tasks(-(-num_rows // ROWS_PER_FILE))
        assert [t.metadata.num_rows for t in tasks] == source_block_rows(num_rows), num_rows
    assert source_block_rows(288) == [57, 57, 57, 57, 57, 3]


def test_known_harmless_worker_lines_are_dropped_and_others_kept(ray_cluster, capsys):
    """rc.setup wraps the driver's printer of worker output: Ray Train's State-API warning (the
    course's clusters run no dashboard) is dropped, every other line is printed."""
    from ray._private.worker import global_worker_stdstream_dispatcher as dispatcher

    from raydata_course._util import KNOWN_NOISE, drop_known_noise

    assert drop_known_noise() is True  # already wrapped by setup(); wrapping again changes nothing
    printers = [h for name, h in dispatcher.handlers if name == "ray_print_logs"]
    assert len(printers) == 1 and printers[0].drops_known_noise
    noise = KNOWN_NOISE[0][1] + ". State API may be temporarily unavailable. Continuing to monitor."
    printers[0]({"ip": "127.0.0.1", "pid": 4242, "job": "01000000", "is_err": False, "actor_name": "Probe",
                 "task_name": None, "lines": [noise, "a real warning: disk almost full"]})
    out = capsys.readouterr().out
    assert "a real warning: disk almost full" in out and KNOWN_NOISE[0][1] not in out
    # Ray Train's own deprecated call, as a DatasetManager prints it: both lines go, a real
    # deprecation warning about something else stays
    deprecation = [".../ray/data/_internal/execution/interfaces/execution_options.py:436: RayDeprecationWarning: "
                   "`ExecutionOptions.exclude_resources` is deprecated and will be removed after January 2027.",
                   "    self.exclude_resources = exclude_resources",
                   "x.py:1: RayDeprecationWarning: `use_legacy_thing` is deprecated"]
    printers[0]({"ip": "127.0.0.1", "pid": 4243, "job": "01000000", "is_err": True, "actor_name": "DatasetManager",
                 "task_name": None, "lines": deprecation})
    captured = capsys.readouterr()
    out = captured.out + captured.err
    assert "use_legacy_thing" in out and "exclude_resources" not in out, out
