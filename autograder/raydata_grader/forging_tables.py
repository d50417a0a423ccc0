"""The tables of :mod:`raydata_grader.forging`: its rules, what each looks for, and a finding.

Names of modules, calls and attributes that a forging cell would use, kept apart from the
code that reads a cell (:mod:`raydata_grader.forging_rules`) and follows its names
(:mod:`raydata_grader.forging_flow`).
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

__all__ = ["RULES", "IMPOSTOR_NAMES", "Finding"]

RULES = ("patches-imported", "module-as-value", "imported-handed-over", "dynamic-attribute", "runs-hidden-code",
         "introspection", "class-identity", "private-attribute", "processes", "kernel-hooks", "rebinds-imported",
         "logging-hooks", "grader-internals", "impostor-name", "copies-files")

#: Calls that run code the grader cannot read, or unpickle it.
_HIDDEN_CODE_CALLS = {"exec", "eval", "compile", "__import__", "breakpoint"}
_HIDDEN_CODE_MODULES = {"pickle", "cloudpickle", "dill", "marshal", "runpy", "codeop", "shelve", "copyreg", "joblib",
                        "jsonpickle", "_pickle", "pickletools"}
#: Calls (by attribute name) that unpickle whatever they are given.
_UNPICKLING_ATTRS = {"read_pickle", "unsafe_load", "full_load", "load_pickle"}
#: Builtins that reach attributes or run code: as values (kept, passed, mapped) they hide a call.
_DYNAMIC_BUILTINS = {"setattr", "getattr", "delattr", "hasattr", "vars", "globals", "locals", "exec", "eval",
                     "compile", "__import__", "breakpoint"}
#: Library calls that reach an attribute by a name given as data.
_DYNAMIC_ATTRS = {("operator", "attrgetter"), ("operator", "methodcaller"), ("operator", "setitem"),
                  ("operator", "delitem")}
#: Calls that change what logging keeps (the grader reads Ray Data's warnings from the log).
_LOGGING_CALLS = {"addFilter", "removeFilter", "dictConfig", "fileConfig", "listen", "setLoggerClass",
                  "setLogRecordFactory", "removeHandler"}
#: Attributes of a logger or handler that decide what it keeps.
_LOGGING_ATTRS = {"propagate", "disabled", "handle", "callHandlers", "filters", "handlers", "filter", "emit",
                  "manager", "isEnabledFor", "getEffectiveLevel", "makeRecord", "root"}
#: The names the judge sees Ray's processes by (``ray::SplitCoordinator.get``, ``ray::MapWorker(...)``,
#: ``ray::Write``): a class, function or task of the notebook's own by such a name imitates them.
IMPOSTOR_NAMES = ("SplitCoordinator", "MapWorker", "Write", "ReadRange", "StreamingExecutor")
_IMPOSTOR_TEXT = re.compile(r"SplitCoordinator|MapWorker|^\s*ray::")
#: Calls that copy a file or hold its bytes (a private copy of a file whose opens the judge counts).
_COPY_CALLS = {("shutil", "copy"), ("shutil", "copy2"), ("shutil", "copyfile"), ("shutil", "copyfileobj"),
               ("shutil", "copytree"), ("shutil", "move"), ("os", "link"), ("os", "symlink"), ("os", "sendfile"),
               ("os", "copy_file_range"), ("os", "read"), ("os", "open"), ("io", "BytesIO"), ("io", "FileIO"),
               ("mmap", "mmap")}
_COPY_ATTRS = {"read_bytes", "write_bytes", "save_classifier", "hardlink_to", "symlink_to", "link_to"}
#: Imported things a notebook may set (display and determinism settings); nothing the judge reads.
_SETTABLE = ("pandas.options", "pandas.set_option", "torch.backends", "matplotlib.rcParams",
             "matplotlib.pyplot.rcParams", "numpy.set_printoptions")
#: The grader's own package inside the course (what the judge calls in the kernel).
_GRADER_PACKAGE = "raydata_course.judging"
#: Ray's hooks that the judge installs its own probes through.
_GRADER_HOOK_ATTRS = {"custom_execution_callback_classes"}
#: Modules that reach the interpreter's insides.
_INTROSPECTION_MODULES = {"ctypes", "inspect", "importlib", "builtins", "__builtin__", "_ctypes", "unittest",
                          "mock", "weakref", "_thread", "sysconfig", "site", "atexit", "pydoc", "pkgutil", "pytest",
                          "_pytest", "code", "zipimport"}
_INTROSPECTION_ATTRS = {
    ("sys", "modules"), ("sys", "_getframe"), ("sys", "settrace"), ("sys", "setprofile"), ("sys", "meta_path"),
    ("sys", "path_hooks"), ("sys", "path_importer_cache"), ("sys", "addaudithook"), ("sys", "_current_frames"),
    ("sys", "exc_info"), ("sys", "exception"), ("sys", "last_traceback"), ("sys", "setrecursionlimit"),
    ("sys", "setswitchinterval"), ("sys", "path"), ("threading", "settrace"), ("threading", "setprofile"),
    ("threading", "_active"), ("types", "FunctionType"), ("types", "CodeType"), ("types", "ModuleType"),
    ("types", "MethodType"), ("types", "CellType"), ("types", "FrameType"), ("types", "TracebackType"),
    ("os", "putenv"), ("os", "unsetenv"), ("concurrent.futures", "ProcessPoolExecutor"),
    ("abc", "ABCMeta"), ("logging", "config"), ("gc", "get_referrers"), ("gc", "get_referents"),
    ("gc", "get_objects"), ("gc", "callbacks"), ("resource", "setrlimit"), ("resource", "prlimit"),
    ("string", "Formatter"),
}
#: Calls (by attribute name) that set attributes, or reach them, by a name given as data.
_NAMED_ACCESS_CALLS = {"get_field", "resolve_name", "locate", "MonkeyPatch", "monkeypatch", "update_wrapper",
                       "register_dataframe_accessor", "register_series_accessor", "register_index_accessor",
                       "register_extension_dtype", "register_serializer", "format_field", "attrgetter",
                       "methodcaller"}
#: Mutators of a namespace reached through vars(), globals() or locals().
_NAMESPACE_MUTATORS = {"update", "pop", "setdefault", "clear", "popitem", "__setitem__", "__delitem__"}
#: A namedtuple's public methods, underscored so as not to clash with its fields.
_NAMEDTUPLE_API = {"_asdict", "_replace", "_fields", "_make", "_field_defaults"}
#: A string naming a Python file or an interpreter start-up hook: code written to import later.
_PYTHON_FILE_TEXT = re.compile(r"\.(py|pyc|pth|so)\s*$|sitecustomize|usercustomize")
_FRAME_ATTRS = {"f_back", "f_globals", "f_locals", "f_builtins", "f_code", "f_trace", "tb_frame", "tb_next",
                "gi_frame", "cr_frame", "ag_frame", "gi_code", "cr_code"}
#: Dunders that reach a class's identity or an object's insides (reading ``__name__``,
#: ``__doc__``, ``__version__`` or calling ``__init__``/``__call__`` is fine).
_IDENTITY_DUNDERS = {"__class__", "__bases__", "__mro__", "__dict__", "__subclasses__", "__code__", "__globals__",
                     "__closure__", "__defaults__", "__kwdefaults__", "__builtins__", "__setattr__", "__delattr__",
                     "__getattribute__", "__self__", "__func__", "__wrapped__", "__loader__", "__spec__",
                     "__import__", "__reduce__", "__reduce_ex__", "__setstate__", "__init_subclass__",
                     "__set_name__"}
_SET_IDENTITY = {"__module__", "__qualname__", "__name__"}
_ISINSTANCE_HOOKS = {"__instancecheck__", "__subclasscheck__", "__subclasshook__", "__getattribute__", "__class__",
                     "__init_subclass__", "__set_name__", "__class_getitem__", "__prepare__"}
_PROCESS_MODULES = {"subprocess", "multiprocessing", "pty", "signal", "setproctitle", "prctl",
                    "concurrent.futures.process", "fcntl", "mmap", "socket", "asyncio.subprocess"}
_PROCESS_OS_CALLS = {"system", "popen", "fork", "forkpty", "kill", "killpg", "setsid", "setpgid", "execv", "execve",
                     "execl", "execle", "execlp", "execlpe", "execvp", "execvpe", "spawnl", "spawnle", "spawnlp",
                     "spawnlpe", "spawnv", "spawnve", "spawnvp", "spawnvpe", "posix_spawn", "posix_spawnp",
                     "pidfd_open", "sched_setaffinity", "setpriority", "nice", "register_at_fork"}
_KERNEL_MODULES = {"IPython", "ipykernel", "jupyter_client", "zmq", "traitlets", "nbclient", "nbformat", "nbgrader"}
_SAFE_MAGICS = {"time", "timeit", "matplotlib"}
#: Control characters, shown as "?" in a quoted line (it goes to terminals and pages).
_CONTROL_CHARS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029]")
_DANGEROUS_ROOTS = (_HIDDEN_CODE_MODULES | _INTROSPECTION_MODULES | _PROCESS_MODULES | _KERNEL_MODULES)


@dataclass(frozen=True)
class Finding:
    """One line of a submission that could forge a reported fact.

    Attributes:
        cell: the cell's grade id (an answer cell), or ``"cell N"`` (1-based) for a cell the
            student added.
        line: the line number within the cell (1-based).
        code: the line as written (stripped, at most 200 characters).
        rule: one of :data:`RULES`.
        why: what the line does, in a few words.
    """

    cell: str
    line: int
    code: str
    rule: str
    why: str

    def describe(self) -> str:
        """One line for the instructor: where, the rule, why, and the code."""
        return f"{self.cell}, line {self.line} ({self.rule}: {self.why}): {self.code}"


def _root(node: ast.AST) -> ast.AST:
    """The base of an attribute or subscript chain (``a`` for ``a.b[c].d``)."""
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Starred)):
        node = node.value
    return node


def _dotted(node: ast.AST) -> str | None:
    """``"a.b.c"`` for a chain of names and attributes, else None."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None
