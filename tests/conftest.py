"""Shared fixtures: one Ray cluster per test session, in a private temp folder.

The session's temp folder is exported as RAYDATA_COURSE_TMPDIR before anything starts Ray,
so every cluster the tests start (the shared one, and each notebook's own) lives under it,
and the session-end check can prove that no Ray process outlived the suite.
"""

import os
import shutil
import time
from pathlib import Path

import pytest

from raydata_course.cluster import ray_processes
from raydata_course.layout import HEADLESS_ENV, REQUIRE_SANDBOX_ENV, TEMP_ROOT_ENV

SESSION_TEMP_ROOT = f"/tmp/rdc-t{os.getpid()}"
os.environ[TEMP_ROOT_ENV] = SESSION_TEMP_ROOT
os.environ[HEADLESS_ENV] = "1"
os.environ.pop("RAY_ADDRESS", None)


@pytest.fixture(scope="session")
def sandbox_support():
    """What this machine can sandbox (:func:`raydata_grader.kernel_sandbox.probe`).

    Tests that grade in the sandbox take this fixture. Where the machine cannot sandbox (no
    bubblewrap, macOS), they are skipped with the reason; ``.ci/run`` sets
    ``RAYDATA_COURSE_REQUIRE_SANDBOX=1``, which makes that a failure instead.
    """
    from raydata_grader.kernel_sandbox import probe

    support = probe()
    if not support.available:
        if os.environ.get(REQUIRE_SANDBOX_ENV) == "1":
            pytest.fail(f"{REQUIRE_SANDBOX_ENV}=1, but this machine cannot sandbox: {support.why}")
        pytest.skip(f"no sandbox on this machine ({support.why}): install bubblewrap to run the grader's tests")
    return support


@pytest.fixture(scope="session")
def playground_site():
    """``make playground``, once per test run for all its workers (``support.playground_site``):
    ``build/playground/`` and its build summary. The first build needs PyPI and the npm
    registry, so only slow tests take this fixture."""
    from support.playground_site import build_once

    return build_once(Path(__file__).resolve().parents[1])


@pytest.fixture(scope="session")
def stand_in_bundle(tmp_path_factory):
    """The student bundle as ``make student-bundle`` builds it, but with a stand-in for the
    playground's site (``support.playground_site.stand_in_site``): no network, no site build."""
    from raydata_grader.bundle import build_bundle
    from support.playground_site import stand_in_site

    root = Path(__file__).resolve().parents[1]
    where = tmp_path_factory.mktemp("stand-in-bundle")
    site = stand_in_site(where / "site", sorted((root / "playground").glob("*.ipynb")))
    return build_bundle(where / "student-bundle.zip", root, site=site)


@pytest.fixture(scope="session")
def ray_cluster():
    """A local cluster in this process (4 CPUs, 1 GiB object store); yields its session.

    Grading tests pass its address to the kernels they start (RAY_ADDRESS), so each graded
    notebook connects instead of paying for its own cluster start.
    """
    import raydata_course as rc

    session = rc.setup(num_cpus=4, object_store_memory_bytes=1024**3)
    yield session
    rc.shutdown()


def pytest_sessionfinish(session, exitstatus):
    """Fail the run if any Ray process started under this session's temp folder survives."""
    import ray

    if ray.is_initialized():
        ray.shutdown()
    deadline = time.monotonic() + 20
    left = ray_processes(SESSION_TEMP_ROOT)
    while left and time.monotonic() < deadline:
        time.sleep(0.5)
        left = ray_processes(SESSION_TEMP_ROOT)
    if left:
        import psutil

        for proc in left:
            try:
                psutil.Process(proc["pid"]).kill()
            except psutil.Error:
                pass
        listing = "\n".join(f"  pid {p['pid']}: {p['cmdline']}" for p in left)
        print(f"\nERROR: {len(left)} Ray process(es) outlived the test session (now killed):\n{listing}")
        session.exitstatus = 1
    if session.exitstatus == 0 and not left:
        shutil.rmtree(SESSION_TEMP_ROOT, ignore_errors=True)  # Ray's logs are kept only for a failed run
    elif os.path.isdir(SESSION_TEMP_ROOT):
        print(f"\nRay's logs for this session are kept in {SESSION_TEMP_ROOT}")
