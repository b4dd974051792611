"""`loaderbench.sweep(dataset, ...)`: the sweep from Python, with the options of the command.

    run = loaderbench.sweep(my_dataset, num_workers=[0, 2, 4], batch_size=64, step="sleep:20")
    run = loaderbench.sweep(my_dataset, step=make_step, loader=StatefulDataLoader,
                            loader_args={"snapshot_every_n_steps": [1000, 1]})
    run.recommendation.dataloader_call     # the DataLoader(...) line
    run.frame                              # pandas, one row per config and repeat
    run.save("runs/mine.json")

Both the command and this function build a `SweepConfig` through `config.build_config` (every
option parsed by the one parser its `config.OPTIONS` entry declares) and run it with
`orchestrate.execute_sweep`.

NOTE [a Dataset object in the measuring process]
    Every config is measured in a separate process (`python -m loaderbench.measure.child`, one
    warm process or a fresh one per config: measure/isolation.py), which builds its dataset
    from the JSON job it is given: a kind and its keys, or an importable `MODULE:FACTORY` with
    keyword arguments (datasets.build_import). A Dataset *object* has no name to be built by.
    So it is pickled to a temporary file, and the job names the factory `load_pickled` here
    with that file's path: each measuring process unpickles its own copy, as a spawned
    DataLoader worker would. That needs the object to pickle (no lambdas, open files or
    generators in it) and its class to be importable by name in a fresh interpreter: a class
    defined in `__main__` (a script, a notebook) is not, and is refused with the way out
    (move the class into a module, or pass a factory). The file is removed when the sweep
    ends; the result file keeps the class name (`kwargs.name`), so the run cannot be repeated
    from the file (`check`): pass a factory for that. Running the object in this process
    instead was rejected: it would lose the isolation every other measurement has (thread
    settings, the CUDA allocator, crashed or hung workers).
"""

from __future__ import annotations

import os
import pickle
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loaderbench.conclusions import Recommendation
from loaderbench.errors import DataError, UsageError
from loaderbench.orchestration.config import OPTIONS, SweepConfig, build_config
from loaderbench.results import ResultSet

PICKLED_FACTORY = "loaderbench.orchestration.api:load_pickled"
_KINDS_BY_NAME = ("synthetic", "folder", "tensor")


_API_NAMES = {("compute", "step"): "step", ("loader", "class"): "loader", ("loader", "args"): "loader_args"}


def _options() -> dict[str, Any]:
    """Python keyword -> config Option: the option's TOML key (`step` for the compute step,
    `loader` and `loader_args` for the [loader] table; the top-level `seed`, not the
    dataset's)."""
    out: dict[str, Any] = {}
    for o in OPTIONS:
        if o.section == "dataset" and o.key == "kind":
            continue  # the dataset argument
        name = _API_NAMES.get((o.section, o.key), o.key)
        if name in out and not o.cli:
            continue
        out[name] = o
    return out


def load_pickled(path: str, name: str | None = None) -> Any:
    """The dataset factory of a pickled Dataset object (NOTE [a Dataset object in the measuring
    process]): unpickle `path`. `name` (its class) is for people reading the result file."""
    with open(path, "rb") as fh:
        return pickle.load(fh)


def _pickle_dataset(dataset: Any, folder: str | None = None) -> tuple[str, str]:
    """Pickle `dataset` to a new temporary file; (its path, `module.Class`). DataError when it
    cannot be rebuilt in a fresh process."""
    cls = type(dataset)
    name = f"{cls.__module__}.{cls.__qualname__}"
    if cls.__module__ == "__main__" or "<locals>" in cls.__qualname__:
        raise DataError(
            f"loaderbench.sweep(dataset): the dataset's class {cls.__qualname__} is defined in "
            f"{'__main__' if cls.__module__ == '__main__' else 'a function'}, so the measuring process "
            "cannot import it; move the class into a module, or pass a factory (a function, or "
            "'module:factory')"
        )
    try:
        data = pickle.dumps(dataset, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as exc:  # noqa: BLE001 - pickle raises many kinds (PicklingError, TypeError, AttributeError)
        raise DataError(
            f"loaderbench.sweep(dataset): the {cls.__qualname__} object cannot be pickled to the measuring "
            f"process ({type(exc).__name__}: {exc}); pass a factory instead (a function, or 'module:factory')"
        ) from None
    fd, path = tempfile.mkstemp(prefix="loaderbench-dataset-", suffix=".pkl", dir=folder)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    return path, name


def _factory_ref(fn: Callable[..., Any], what: str = "dataset", fix: str = "or pass the Dataset object it returns") -> str:
    """`module:qualname` of a function or class the measuring process can import, else
    DataError naming the argument `what` (and `fix`)."""
    module = getattr(fn, "__module__", None)
    qual = getattr(fn, "__qualname__", None)
    if not module or not qual or module == "__main__" or "<" in qual:
        raise DataError(
            f"loaderbench.sweep({what}): the {'factory' if what == 'dataset' else what} {qual or fn!r} is not "
            "importable by name from a fresh process (defined in __main__, a lambda or a local function); "
            f"define it in a module{', ' + fix if fix else ''}"
        )
    return f"{module}:{qual}"


def _by_name(name: str, value: Any) -> Any:
    """An option given as a Python object, as the command takes it: `step` a factory (function
    or class) -> 'step:module:name', `loader` a class or factory -> 'module:name'; anything
    else (strings, lists, dicts) unchanged."""
    if name == "step" and callable(value) and not isinstance(value, str):
        return "step:" + _factory_ref(value, "step", "")
    if name == "loader" and callable(value) and not isinstance(value, str):
        return _factory_ref(value, "loader", "")
    return value


@dataclass
class SweepRun:
    """What `loaderbench.sweep()` returns: the analysed `result_set` and where it was saved."""

    result_set: ResultSet
    path: Path

    @property
    def recommendation(self) -> Recommendation | None:
        """The knee (settings, findings, `dataloader_call`), or None when nothing was measured."""
        return self.result_set.recommendation

    @property
    def frame(self) -> Any:
        """A pandas DataFrame: one row per config and repeat (analysis.frame.to_frame)."""
        from loaderbench.analysis.frame import to_frame

        return to_frame(self.result_set)

    def save(self, path: str | Path) -> Path:
        """Write the result file to `path` (a .json file: UsageError otherwise; OutputError
        when it cannot be written); returns the path."""
        from loaderbench.results import check_result_path, save_results

        path = Path(path)
        check_result_path(path)
        save_results(self.result_set, path)
        return path


def build_api_config(dataset: Any, options: dict[str, Any]) -> tuple[SweepConfig, str | None]:
    """The SweepConfig of `loaderbench.sweep(dataset, **options)` and the temporary file of a
    pickled dataset (None otherwise). `dataset`: a kind name (synthetic, folder, tensor), a
    'module:factory' string, a factory (function or class, called with `dataset_kwargs`) or a
    Dataset object. Options are the sweep command's, by their TOML key; a list or a comma
    string for the grid axes. UsageError for an unknown option or a bad value."""
    known = _options()
    overrides: dict[str, dict[str, Any]] = {}
    kwargs = dict(options.pop("dataset_kwargs", None) or {})
    for name, value in options.items():
        if value is None:
            continue
        opt = known.get(name)
        if opt is None:
            raise UsageError(
                f"loaderbench.sweep(): unknown option {name!r}; the options are {', '.join(sorted(known))}, dataset_kwargs"
            )
        try:
            parsed = opt.parse(_by_name(name, value))
        except ValueError as exc:
            raise UsageError(f"loaderbench.sweep({name}=...): {exc}") from None
        overrides.setdefault(opt.section, {})[opt.key] = parsed
    pickled = None
    from torch.utils.data import Dataset, IterableDataset

    if isinstance(dataset, str):
        kind = dataset
    elif isinstance(dataset, (Dataset, IterableDataset)) or (hasattr(dataset, "__getitem__") and hasattr(dataset, "__len__")
                                                          and not callable(dataset)):
        pickled, name = _pickle_dataset(dataset)
        kind, kwargs = PICKLED_FACTORY, {"path": pickled, "name": name}
    elif callable(dataset):
        kind = _factory_ref(dataset)
    else:
        raise TypeError(
            f"loaderbench.sweep(dataset): expected a Dataset, a factory (function or 'module:factory') or a kind "
            f"({', '.join(_KINDS_BY_NAME)}), got {type(dataset).__name__}"
        )
    overrides.setdefault("dataset", {})["kind"] = kind
    if kwargs:
        overrides["dataset"]["kwargs"] = kwargs
    try:
        return build_config(None, overrides), pickled
    except BaseException:
        if pickled:
            Path(pickled).unlink(missing_ok=True)
        raise


def sweep(dataset: Any, /, **options: Any) -> SweepRun:
    """`loaderbench.sweep(dataset, **options)`: the sweep of `dataset` (a Dataset object, a
    factory, or a kind) with the command's options by their TOML keys (see `build_api_config`);
    returns the analysed run (`.recommendation`, `.frame`, `.save()`). `step` also takes your
    step factory (a module-level function: `FACTORY(device)` returns the train step),
    `loader` your loader class (or a factory called like DataLoader) and `loader_args` its
    keyword arguments to sweep ({name: [values, in the order to prefer on a tie]}). Raises what
    the command reports in one line (LoaderbenchError subclasses) for bad input."""
    from loaderbench.orchestration.execute import execute_sweep

    return sweep_dataset(dataset, execute=execute_sweep, **options)


def sweep_dataset(dataset: Any, *, execute: Callable[..., tuple[ResultSet, Path]], observer: Any = None,
                  **options: Any) -> SweepRun:
    """Run the sweep on `dataset` (see `build_api_config`) with `execute`
    (orchestrate.execute_sweep) and return the analysed run. `output` (a .json path) is where the
    result file goes, as `--output`; by default results/<label>-<time>.json like the command.
    `observer`: an orchestrate.SweepObserver for progress (default: none).
    Raises what the command reports in one line (LoaderbenchError subclasses) for bad input,
    and KeyboardInterrupt after saving what was measured."""
    output = options.pop("output", None)
    config, pickled = build_api_config(dataset, options)
    saved = os.environ.get("PYTHONPATH")
    root = _import_root(type(dataset).__module__) if pickled else None
    if root is not None:  # the measuring processes import the dataset's module from where this one did
        os.environ["PYTHONPATH"] = os.pathsep.join([root, *([saved] if saved else [])])
    try:
        rs, path = execute(config, output=None if output is None else Path(output), observer=observer)
    finally:
        if pickled:
            Path(pickled).unlink(missing_ok=True)
        if root is not None:
            if saved is None:
                os.environ.pop("PYTHONPATH", None)
            else:
                os.environ["PYTHONPATH"] = saved
    if not any(r.status == "ok" for r in rs.results):
        from loaderbench.errors import NothingMeasured, nothing_measured_line

        first = next(((r.settings.key(), r.error) for r in rs.results if r.error), None)
        raise NothingMeasured("loaderbench.sweep: " + nothing_measured_line([r.detail or "" for r in rs.results],
                                                                            first, path))
    return SweepRun(rs, path)


def _import_root(module: str) -> str | None:
    """The sys.path folder `module` was imported from (its file's folder, up one per package
    level), or None when it has no file (built in) or is not loaded."""
    mod = sys.modules.get(module)
    file = getattr(mod, "__file__", None)
    if not file:
        return None
    path = Path(file).resolve()
    depth = len(module.split(".")) - (0 if path.name == "__init__.py" else 1)
    return str(path.parents[depth])
