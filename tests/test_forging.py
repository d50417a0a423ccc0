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
    # a module or class laundered through an expression before it is changed
    "for-loop alias": "import raydata_course.judging.helpers\nfor h in [rc.judging.helpers]:\n    h.is_instance = None",
    "for-loop alias of a class": "for T in [SlowTrainer]:\n    T.step = None",
    "list-subscript alias": "T = [SlowTrainer][0]\nT.step = None",
    "getattr of a submodule": "h = getattr(rc, 'chapters').ch04_backpressure\nh.measure_configured_run = None",
    "parameter default": "def fix(T=SlowTrainer):\n    T.step = None\nfix()",
    "with-as": "import contextlib\nwith contextlib.nullcontext(SlowTrainer) as T:\n    T.step = None",
    "conditional alias": "T = SlowTrainer if True else None\nT.step = None",
    "tuple unpacking": "T, = (SlowTrainer,)\nT.step = None",
    "comprehension": "[T for T in [SlowTrainer]][0].step = None",
    "class attribute": "class Box:\n    T = SlowTrainer\nBox.T.step = None",
    "decorator argument": "def install(T):\n    def deco(f):\n        T.step = f\n        return f\n    return deco\n"
                          "@install(SlowTrainer)\ndef step(self, batch):\n    pass",
    "call-rooted target": "(lambda: SlowTrainer)().step = None",
    "own function returns a class": "def get():\n    return SlowTrainer\nT = get()\nT.step = None",
    "submodule in a list": "mods = [rc.chapters.ch04_backpressure]\nmods[0].measure_configured_run = None",
    "type of an argument": "def train(ds, trainer):\n    type(trainer).problems = property(lambda self: [])",
    "type kept in a name": "def train(ds, trainer):\n    T = type(trainer)\n    T.problems = property(lambda self: [])",
    "setattr as a value": "put = setattr\nput(SlowTrainer, 'step', None)",
    "map over setattr": "list(map(setattr, [SlowTrainer], ['step'], [None]))",
    "reduce over getattr": "import functools\nh = functools.reduce(getattr, ['chapters', 'ch04_backpressure'], rc)",
    "attrgetter": "import operator\nids = operator.attrgetter('_ids')",
    "abc register": "from ray.data.collate_fn import CollateFn\nCollateFn.register(int)",
    # the grader's code and hooks in the kernel
    "grader helpers by name": "x = rc.judging",
    "grader helpers in a string": "import logging.config\nlogging.config.dictConfig({'version': 1, 'filters': {'f': {'()': "
                                  "'raydata_course.judging.helpers.is_instance'}}})",
    "executor callback spy": "def configure(ctx):\n    ctx.custom_execution_callback_classes = list(ctx.custom_execution_callback_classes)",
    # unpickling through libraries
    "pandas read_pickle": "import pandas as pd\npd.read_pickle('x.pkl')",
    "numpy allow_pickle": "np.load('x.npy', allow_pickle=True)",
    "torch weights_only off": "import torch\ntorch.load('x.pt', weights_only=False)",
    "ray's cloudpickle": "import ray.cloudpickle as cp\ncp.loads(b'')",
    "ray's cloudpickle by attribute": "ray.cloudpickle.loads(b'')",
    "joblib": "import joblib\njoblib.load('x')",
    # what logging keeps (the grader reads Ray Data's warnings)
    "logging filter": "import logging\nlogging.getLogger('ray.data._internal.util').addFilter(lambda r: False)",
    "logger handle replaced": "import logging\nlogging.getLogger('ray.data').handle = lambda r: None",
    "logger propagate": "import logging\nlogging.getLogger('ray.data._internal.util').propagate = False",
    "logging dictConfig": "import logging.config\nlogging.config.dictConfig({'version': 1})",
    # names a locked cell uses, bound again
    "imported helper redefined": "_measure = measure_configured_run\ndef measure_configured_run(*a, **k):\n    return _measure(*a, **k)",
    "imported class shadowed": "class SlowTrainer(SlowTrainer):\n    problems = []",
    "imported name assigned": "measure_configured_run = lambda *a, **k: None",
    "imported name imported again": "from raydata_course.chapters.ch03_pools import local_setup_events as measure_configured_run",
    # what the judge observes, imitated
    "a decoy split coordinator": "@ray.remote\nclass SplitCoordinator:\n    def get(self):\n        return 1",
    "a decoy pool actor": "class MapWorker:\n    pass",
    "a task named like a write": "@ray.remote\ndef w():\n    pass\nw.options(name='Write').remote()",
    "a private copy of the model": "import shutil\nshutil.copy('model.pt', '/tmp/m.pt')",
    "the model's bytes": "from pathlib import Path\nblob = Path('model.pt').read_bytes()",
    "bytes in memory": "import io\nbuf = io.BytesIO(b'')",
    "binary open": "with open('model.pt', 'rb') as f:\n    blob = f.read()",
    # laundering through a call that is handed a container, and library calls that set by name
    "next(iter([class]))": "T = next(iter([SlowTrainer]))\nT.step = None",
    "sum with a class start": "T = sum([], SlowTrainer)\nT.step = None",
    "a course module's module attribute": "from raydata_course.chapters import ch04_backpressure as bp\n"
                                          "clock = next(iter([bp.time]))\nclock.perf_counter = None",
    "logger class laundered": "import logging\nL = next(iter([logging.Logger]))\nL.warning = lambda *a, **k: None",
    "update_wrapper assigned": "import functools\nclass Src:\n    def step(self, batch):\n        pass\n"
                               "functools.update_wrapper(SlowTrainer, Src, assigned=('step',), updated=())",
    "wraps with updated": "import functools\ndeco = functools.wraps(SlowTrainer, updated=('__dict__',))",
    "Formatter get_field": "import string\ng = string.Formatter().get_field('0.__globals__', [measure_configured_run], {})[0]",
    "pydoc locate": "import pydoc\nh = pydoc.locate('raydata_course.' + 'chapters')",
    "pkgutil resolve_name": "import pkgutil\nclock = pkgutil.resolve_name('time')",
    "pytest monkeypatch": "import pytest\npytest.MonkeyPatch().setattr('time.perf_counter', None)",
    "pandas accessor": "import pandas as pd\n@pd.api.extensions.register_dataframe_accessor('sample')\nclass S:\n"
                       "    def __init__(self, df):\n        self.df = df",
    "a module written then imported": "from pathlib import Path\nPath('wine_utils.py').write_text('x = 1')\nimport wine_utils",
    "a start-up hook": "from pathlib import Path\nPath('zz.pth').write_text('import os')",
    "star import": "from raydata_course.chapters.ch04_backpressure import *",
    "match capture": "match 1:\n    case SlowTrainer:\n        pass",
    "match mapping capture": "match {'t': 1}:\n    case {'t': measure_configured_run}:\n        pass",
    "a task name computed": "@ray.remote\ndef w():\n    pass\nw.options(name='Wri' + 'te').remote()",
    "a namespace updated": "globals().update(SlowTrainer=object)",
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
    "display settings": "import pandas as pd\nimport matplotlib.pyplot as plt\nimport torch\npd.options.display.max_rows = 10\n"
                        "plt.rcParams['figure.figsize'] = (8, 3)\ntorch.backends.cudnn.deterministic = True",
    "a context's setting by call": "ray.data.DataContext.get_current().enable_progress_bars = False",
    "a UDF handed to a helper": "def decoded(ds, fn, rows):\n    return ds.map_batches(fn, batch_size=rows)\n"
                                "out = decoded(ray.data.range(4), np.sqrt, 2)",
    "batches changed in a loop": "for batch in ray.data.range(4).iter_batches(batch_size=2):\n    batch['id'] = batch['id'] * 2",
    "arrays filled": "pred = np.zeros(4).astype(np.int64)\npred[pred < 1] = -1\nn = len(pred)\nout = np.zeros((n, 2), np.float32)\nout[0, 1] = 1.0",
    "a model's layers": "import torch\nclass Net(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n"
                        "        self.fc = torch.nn.Linear(64, 10)\nnet = Net()\nnet.fc.weight.requires_grad = True",
    "a quieter logger": "import logging\nlogging.getLogger('ray').setLevel(logging.ERROR)",
    "a docstring that says Write": "def write_files(table, folder, n):\n    \"\"\"Write table as n Parquet files.\"\"\"\n    return []",
    "a text file": "with open('notes.txt', 'w') as f:\n    f.write('x')",
    "library defaults": "import torch\ndef train(ds, dtype=np.float64, optimizer_cls=torch.optim.Adam):\n    return dtype",
    "a class attribute dtype": "class P:\n    dtype = np.float32\nP.verbose = False",
    "reduce over arrays": "import functools\ntotal = functools.reduce(np.add, [np.ones(2), np.ones(2)])",
    "a namedtuple's methods": "from collections import namedtuple\nT = namedtuple('T', 'a b')\nt = T(1, 2)._replace(a=3)\n"
                              "d = t._asdict()",
    "memory measured": "import gc\nimport tracemalloc\nimport resource\ngc.collect()\ntracemalloc.start()\n"
                       "peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss",
    "the same class from its public path": "from ray.data.dataset import MaterializedDataset\nfrom ray.data import MaterializedDataset",
    "a context printed": "print(vars(ray.data.DataContext.get_current().execution_options))",
    "an own logger": "import logging\nlog = logging.getLogger('wine')\nlog.propagate = False\nlog.addFilter(lambda r: True)",
    "says Write": "print('Write', 3, 'files')",
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
