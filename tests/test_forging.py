"""The scan for code that could forge a reported fact: what it flags, and what it must not.

Every forging snippet below is a way a student's cell could change how the kernel computes
what it reports to the judge (a clock, a course helper, a class's identity, a load count, a
write guard); each must be flagged. The reference solutions, every mutant but the one that
tampers with the grader, and the independent correct answers (``ok*`` mutants) must not be.
No kernel runs: the scan only reads.
"""

from __future__ import annotations

import nbformat
import pytest

from raydata_grader.answers import reference_submission
from raydata_grader.forging import RULES, find_forging
from raydata_grader.mutants import load_mutants, mutant_submission
from raydata_grader.paths import ASSIGNMENTS, release_notebook

#: Mutants that tamper with the grader on purpose (their docstring says so).
TAMPERING_MUTANTS = {("data01", "m7_patch_grader")}

SETUP = "import time\nimport numpy as np\nimport ray\nimport raydata_course as rc\n" \
        "from raydata_course.chapters.ch04_backpressure import SlowTrainer, measure_configured_run\n"

FORGING = {
    "clock": "import time\ntime.perf_counter = lambda: 0.0",
    "clock through an alias": "t = time\nt.perf_counter = lambda: 0.0",
    "clock through from-import of the module": "from time import perf_counter\nimport time as clock\nclock.perf_counter = perf_counter",
    "clock by setattr": "setattr(time, 'perf_' + 'counter', lambda: 0.0)",
    "helper replaced": "import raydata_course.judging.helpers as h\nh.best_time_s = lambda *a, **k: 0.001",
    "helper replaced through the package": "rc.judging.helpers.best_time_s = lambda *a, **k: 0.001",
    "helper replaced from a submodule import": "from raydata_course.judging import helpers\nhelpers.best_time_s = None",
    "course class patched": "SlowTrainer.step = lambda self, batch: None",
    "module in a list": "mods = [time]\nmods[0].perf_counter = None",
    "module handed to a function": "def patch(m):\n    m.perf_counter = None\npatch(time)",
    "class handed to own function": "def patch(cls):\n    cls.step = None\npatch(SlowTrainer)",
    "module returned": "def clock():\n    return time\nclock().perf_counter = None",
    "sys.modules": "import sys\nsys.modules['time'] = None",
    "builtins": "import builtins\nbuiltins.isinstance = lambda *a: True",
    "__builtins__": "__builtins__.isinstance = lambda *a: True",
    "ctypes": "import ctypes\nctypes.pythonapi.PyFrame_LocalsToFast",
    "gc referrers": "import gc\nfor ref in gc.get_referrers(rc):\n    pass",
    "class identity": "class Fake:\n    pass\nFake.__module__ = 'ray.data.collate_fn'",
    "class identity in body": "class CollateFn:\n    __module__ = 'ray.data.collate_fn'",
    "class qualname": "class X:\n    __qualname__ = 'NumpyBatchCollateFn'",
    "__class__ assignment": "def f(x):\n    x.__class__ = int",
    "__class__ read of another object": "def f(trainer):\n    return trainer.__class__",
    "instancecheck hook": "class Meta(type):\n    def __instancecheck__(cls, obj):\n        return True",
    "metaclass mro": "class Meta(type):\n    def mro(cls):\n        return [cls, object]",
    "type with three args": "Fake = type('CollateFn', (), {})",
    "exec": "exec('import time; time.perf_counter = None')",
    "eval": "eval('1')",
    "compile": "code = compile('x = 1', 'f', 'exec')",
    "__import__": "m = __import__('time')",
    "importlib": "import importlib\nm = importlib.import_module('ti' + 'me')",
    "importlib reload": "import importlib\nimportlib.reload(np)",
    "computed getattr": "f = getattr(time, 'perf_' + 'counter')",
    "globals": "globals()['x'] = 1",
    "vars of a module": "vars(time)['perf_counter'] = None",
    "frame": "import sys\nf = sys._getframe(1)",
    "frame via traceback": "try:\n    1 / 0\nexcept Exception as e:\n    g = e.__traceback__.tb_frame.f_back.f_globals",
    "inspect": "import inspect\ninspect.currentframe()",
    "settrace": "import sys\nsys.settrace(None)",
    "mock": "from unittest import mock\nmock.patch('time.perf_counter')",
    "private attribute of a course object": "def train(ds, trainer):\n    trainer._ids.extend(range(10))",
    "private Ray module": "from ray._private import worker",
    "subprocess": "import subprocess\nsubprocess.run(['true'])",
    "os.system": "import os\nos.system('true')",
    "proc path": "open('/proc/self/status').read()",
    "ipython hook": "get_ipython().ast_transformers.append(None)",
    "shell escape": "!ls /",
    "cell magic": "%%bash\nls /",
    "forging inside %time": "%time time.perf_counter = None",
    "unpickling": "import pickle\npickle.loads(b'')",
    "environment": "import os\nos.environ['RAY_DATA_X'] = '1'",
    "write guard switched off": "import pyarrow.parquet as pq\nfrom unittest import mock\nmock.patch.stopall()",
    "writer restored": "import pyarrow.parquet as pq\nimport pyarrow.parquet.core as core\npq.write_table = core.write_table",
}

HONEST = {
    "a UDF": "def phenol_ratio(batch):\n    out = dict(batch)\n    out['r'] = batch['a'] / batch['b']\n    return out",
    "a callable class": "class Predictor:\n    def __init__(self, path):\n        self._model = load(path)\n        self.n = 0\n"
                         "    def __call__(self, batch):\n        self.n += 1\n        return {'p': self._model(batch)}",
    "configure a context": "def configure(ctx):\n    ctx.execution_options.resource_limits = ctx.execution_options.resource_limits.copy(\n"
                           "        object_store_memory=64 * 2**20)\n    ctx.target_max_block_size = 8 * 2**20",
    "threads": "from concurrent.futures import ThreadPoolExecutor\nimport threading\nlock = threading.Lock()",
    "timing with %time": "%time x = np.arange(10).sum()",
    "type name": "name = type(3).__name__",
    "own repr": "class A:\n    def __repr__(self):\n        return self.__class__.__name__",
    "getattr with a literal": "x = getattr(np, 'float32')",
    "isinstance": "ok = isinstance(np.zeros(2), np.ndarray)",
    "a data context": "ctx = ray.data.DataContext.get_current()\nctx.execution_options.preserve_order = True",
    "seeding": "np.random.seed(0)\nimport torch\ntorch.manual_seed(0)",
    "pathlib": "from pathlib import Path\npaths = sorted(str(p) for p in Path('.').glob('*.parquet'))",
}


def _notebook(code: str):
    return nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(SETUP), nbformat.v4.new_code_cell(code)])


@pytest.mark.parametrize("name", sorted(FORGING))
def test_every_way_to_forge_is_flagged(name):
    findings = find_forging(_notebook(FORGING[name]))
    assert findings, f"{name!r} was not flagged"
    assert all(f.rule in RULES for f in findings)
    assert all(f.cell == "cell 2" for f in findings), [f.describe() for f in findings]


@pytest.mark.parametrize("name", sorted(HONEST))
def test_honest_code_is_not_flagged(name):
    assert find_forging(_notebook(HONEST[name])) == [], [f.describe() for f in find_forging(_notebook(HONEST[name]))]


def test_the_instructors_locked_cells_are_not_scanned():
    """A release's locked cells are put back by nbgrader: only the student's cells are read."""
    release = nbformat.read(release_notebook("data04"), as_version=4)
    findings = find_forging(reference_submission("data04"), release)
    assert findings == []
    # ... while the same notebook read without its release flags nothing either (the set-up is plain)
    assert find_forging(reference_submission("data04")) == []


def test_a_finding_quotes_its_line():
    nb = _notebook("x = 1\ntime.perf_counter = lambda: 0.0  # fast")
    (finding,) = find_forging(nb)
    assert finding.line == 2 and finding.code == "time.perf_counter = lambda: 0.0  # fast"
    assert "cell 2, line 2 (patches-imported" in finding.describe()


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_references_and_mutants_are_not_flagged(assignment):
    """Honest answers never land in review: the reference, every mutant (wrong answers that do not
    tamper) and every ``ok*`` answer read clean."""
    release = nbformat.read(release_notebook(assignment), as_version=4)
    assert find_forging(reference_submission(assignment), release) == []
    flagged = {}
    for mutant in load_mutants(assignment):
        findings = find_forging(mutant_submission(assignment, mutant), release)
        if findings:
            flagged[mutant.name] = [f.describe() for f in findings]
    expected = {name for a, name in TAMPERING_MUTANTS if a == assignment}
    assert set(flagged) == expected, flagged
