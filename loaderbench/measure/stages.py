"""The stage profile: where one sample's time goes (`loaderbench profile`).

`profile_stages` times a dataset's samples stage by stage and returns a `model.StageRecord`;
analysis/stages.py turns it into the table. What it recognises, it times by intercepting the
call for the duration of one timed fetch (and puts everything back after it):

- read: `open()` of a file for reading in binary mode (the open, its `read`/`readinto` calls and
  its close), `torchvision.io.read_file`;
- decode: PIL's `Image.open`, `ImageFile.load` (the decode proper) and `Image.convert` (outside a
  transform), torchvision.io's `decode_*` and `read_image`;
- each transform of a torchvision `Compose` (v1 or v2) found on the dataset's attributes (or a
  lone torchvision transform in a `transform` attribute), named by its class;
- the rest of `__getitem__`: what is left, attributed by a profiler pass (cProfile) that sees
  only the code outside the recognised stages: its top functions by self time.
Then per batch: the collate function; in the main process, receiving a built batch from a
worker, pinning it and the H2D copy.

NOTE [stage profile]
    Self time: a stage nested in another (the file reads inside PIL's decode, PIL's decode of a
    lazily opened image inside the first transform that touches its pixels) counts for the inner
    stage only, so the stages of a sample add up to its `__getitem__`. CPU time is the calling
    thread's (`time.thread_time`), and so is the time it was runnable but queued for a CPU
    (Linux's /proc/thread-self/schedstat, RunQueueClock): wall above CPU splits into queued
    (other load on the machine: on a shared 2-core machine most of a stage's wall time could
    be that) and blocked (I/O, a lock, a sleep). Work torch spreads over intra-op threads
    shows as less CPU than it used (the profile builds the samples with the threads a worker
    has, 1 unless --worker-threads).
    The profile's own cost: the samples timed with the interceptions take turns with as many
    other samples of the dataset fetched without them, and the two means are set side by side.
    Other samples, not the same ones again: a sample fetched a second time finds its file in
    the page cache (a read from the device the first time) and its bytes in the CPU's caches
    (reading an 8 MB file from the page cache again right away took 3-9% less CPU time on the
    2-core machine), which would flatter whichever fetch came second; each
    sample is fetched once in a pass (while the dataset has enough of them), so neither set
    finds the other's data in a cache, and taking turns makes drift and other load hit both
    alike. The intercepting is a few function calls per stage (microseconds against
    milliseconds); cProfile costs far more for Python-heavy code, which is why the stage times
    never come from its pass (its own cost is measured the same way).
    What is not seen: reads through a file opened before `__getitem__` (an open HDF5, LMDB or
    zip handle), through `os.read` or `mmap`, decoders other than PIL's and torchvision's, and
    names imported with `from torchvision.io import decode_jpeg` in modules other than the
    dataset's own: their time is in the rest, where the profiler pass names the functions.
"""

from __future__ import annotations

import builtins
import cProfile
import functools
import io
import os
import pstats
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from loaderbench.model import (
    DECODER_TIMING,
    BatchTiming,
    FunctionTime,
    LoaderSettings,
    SampleTiming,
    Stage,
    StageKind,
    StageRecord,
)

Clock = Callable[[], float]

READ = "read"
DECODE = "decode"
REST = "rest of __getitem__"
REST_ITER = "rest of __iter__"
"""The rest of a sample's time for an IterableDataset (each sample is `next()` of its iterator)."""
COLLATE = "collate"
RECEIVE = "receive"
PIN = "pin"
H2D = "H2D"

_THIS_FILE = os.path.normcase(os.path.abspath(__file__))
CAPTURE = 16  # JPEGs kept for the decoders' timing (measure/alternatives.py)


# ---------------------------------------------------------------------------------------------
# The timer: nested stages, self time, one owning thread.


def _zero() -> float:
    return 0.0


class _Frame:
    """A stage running now: its start on the three clocks, and the time of the stages inside it."""

    __slots__ = ("name", "kind", "wall0", "cpu0", "queued0", "child_wall", "child_cpu", "child_queued")

    def __init__(self, name: str, kind: StageKind, wall0: float, cpu0: float, queued0: float) -> None:
        self.name, self.kind, self.wall0, self.cpu0, self.queued0 = name, kind, wall0, cpu0, queued0
        self.child_wall = self.child_cpu = self.child_queued = 0.0


@dataclass
class Taken:
    """What a StageTimer recorded between two `take()`s: per stage, self seconds of wall, of the
    thread's CPU and queued for a CPU, and calls; decode calls per decoder."""

    wall_s: dict[str, float]
    cpu_s: dict[str, float]
    queued_s: dict[str, float]
    calls: dict[str, int]
    decoders: dict[str, int]


class StageTimer:
    """Times named stages of the owning thread, nested ones as self time (NOTE [stage profile]).

    `call(name, kind, fn, args, kwargs)` runs `fn` as stage `name` while the timer is `armed`
    and the caller is the owning thread; otherwise (and when `name` is already the innermost
    stage: a decode that calls itself) it just calls `fn`. `take()` hands back and clears what
    was recorded. `on_enter` / `on_exit` are called when the outermost stage starts and ends
    (the profiler pass pauses cProfile there). The clocks are parameters so tests can drive it:
    `wall`, the thread's `cpu`, and `queued`, the thread's seconds queued for a CPU (None: not
    measured, RunQueueClock).
    """

    def __init__(self, wall: Clock = time.perf_counter, cpu: Clock = time.thread_time,
                 queued: Clock | None = None) -> None:
        self.wall = wall
        self.cpu = cpu
        self.queued: Clock = queued or _zero
        self.measures_queue = queued is not None
        self.owner = threading.get_ident()
        self.armed = False
        self.on_enter: Callable[[], None] | None = None
        self.on_exit: Callable[[], None] | None = None
        self._stack: list[_Frame] = []
        self._reset()

    def _reset(self) -> None:
        self.wall_s: dict[str, float] = {}
        self.cpu_s: dict[str, float] = {}
        self.queued_s: dict[str, float] = {}
        self.calls: Counter[str] = Counter()
        self.decoders: Counter[str] = Counter()

    def active(self) -> bool:
        """Whether a call now would be timed (armed, on the owning thread)."""
        return self.armed and threading.get_ident() == self.owner

    def inside(self, kind: StageKind) -> bool:
        """Whether a stage of `kind` is running now."""
        return any(f.kind is kind for f in self._stack)

    def call(self, name: str, kind: StageKind, fn: Callable[..., Any], args: tuple[Any, ...],
             kwargs: dict[str, Any]) -> Any:
        if not self.active() or (self._stack and self._stack[-1].name == name):
            return fn(*args, **kwargs)
        if not self._stack and self.on_enter is not None:
            self.on_enter()
        frame = _Frame(name, kind, self.wall(), self.cpu(), self.queued())
        self._stack.append(frame)
        try:
            return fn(*args, **kwargs)
        finally:
            wall_s, cpu_s = self.wall() - frame.wall0, self.cpu() - frame.cpu0
            queued_s = self.queued() - frame.queued0
            self._stack.pop()
            self.wall_s[name] = self.wall_s.get(name, 0.0) + wall_s - frame.child_wall
            self.cpu_s[name] = self.cpu_s.get(name, 0.0) + cpu_s - frame.child_cpu
            if self.measures_queue:
                self.queued_s[name] = self.queued_s.get(name, 0.0) + queued_s - frame.child_queued
            self.calls[name] += 1
            if self._stack:
                parent = self._stack[-1]
                parent.child_wall += wall_s
                parent.child_cpu += cpu_s
                parent.child_queued += queued_s
            elif self.on_exit is not None:
                self.on_exit()

    def take(self) -> Taken:
        """What was recorded since the last take; cleared."""
        out = Taken(self.wall_s, self.cpu_s, self.queued_s, dict(self.calls), dict(self.decoders))
        self._reset()
        return out


# ---------------------------------------------------------------------------------------------
# File reads.


class _TimedFileIO(io.FileIO):
    """A file opened for reading whose reads are the read stage (open() hands it out wrapped in
    the usual BufferedReader, so callers see an ordinary binary file)."""

    _lb_timer: StageTimer | None = None

    def readinto(self, b: Any) -> Any:
        t = self._lb_timer
        if t is None:
            return super().readinto(b)
        return t.call(READ, StageKind.READ, super().readinto, (b,), {})

    def read(self, size: int | None = -1) -> Any:
        t = self._lb_timer
        if t is None:
            return super().read(size)
        return t.call(READ, StageKind.READ, super().read, (size,), {})

    def readall(self) -> Any:
        t = self._lb_timer
        if t is None:
            return super().readall()
        return t.call(READ, StageKind.READ, super().readall, (), {})

    def close(self) -> None:
        t = self._lb_timer
        if t is None or self.closed:
            return super().close()
        t.call(READ, StageKind.READ, super().close, (), {})


def _is_binary_read(mode: Any) -> bool:
    return isinstance(mode, str) and "b" in mode and set(mode) <= set("rb")


def _timed_open(timer: StageTimer, original: Callable[..., Any]) -> Callable[..., Any]:
    def open_(file: Any, mode: str = "r", buffering: int = -1, *args: Any, **kwargs: Any) -> Any:
        if not timer.active() or not _is_binary_read(mode) or args or set(kwargs) - {"closefd", "opener"} \
                or isinstance(file, int):
            return original(file, mode, buffering, *args, **kwargs)

        def opened() -> Any:
            raw = _TimedFileIO(file, "r", **kwargs)
            raw._lb_timer = timer
            if buffering == 0:
                return raw
            return io.BufferedReader(raw, buffering if buffering > 1 else io.DEFAULT_BUFFER_SIZE)

        return timer.call(READ, StageKind.READ, opened, (), {})

    return open_


# ---------------------------------------------------------------------------------------------
# Transforms found on the dataset.


class TimedTransform:
    """One transform of a Compose, timed as its own stage."""

    def __init__(self, name: str, transform: Any, timer: StageTimer) -> None:
        self.name = name
        self.transform = transform
        self.timer = timer

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.timer.call(self.name, StageKind.TRANSFORM, self.transform, args, kwargs)

    def __repr__(self) -> str:
        return repr(self.transform)


_SKIP_MODULES = ("torch", "numpy", "pandas", "PIL", "builtins", "h5py", "lmdb", "zipfile", "tarfile",
                 "io", "threading", "multiprocessing", "collections", "pathlib", "typing")


def _is_compose(obj: Any) -> bool:
    """A torchvision Compose (v1 or v2)."""
    cls = type(obj)
    return (cls.__name__ == "Compose" and cls.__module__.startswith("torchvision.transforms")
            and isinstance(getattr(obj, "transforms", None), (list, tuple)))


def _is_torchvision_transform(obj: Any) -> bool:
    return callable(obj) and type(obj).__module__.startswith("torchvision.transforms") and not isinstance(obj, type)


def _walkable(obj: Any) -> bool:
    """Objects whose attributes may hold the dataset's transforms: datasets, a torchvision
    StandardTransform, the user's own objects (not torch's, numpy's, ... internals)."""
    if isinstance(obj, (type, str, bytes, bytearray, int, float, bool)) or callable(obj) and not hasattr(obj, "__dict__"):
        return False
    if not hasattr(obj, "__dict__") or type(obj).__name__ == "module":
        return False
    root = type(obj).__module__.partition(".")[0]
    if root == "torch":
        from torch.utils.data import Dataset

        return isinstance(obj, Dataset)
    if root == "torchvision":
        return type(obj).__name__ == "StandardTransform" or type(obj).__module__.startswith("torchvision.datasets")
    return root not in _SKIP_MODULES


def _transform_name(t: Any) -> str:
    if isinstance(t, functools.partial):
        t = t.func
    if isinstance(t, type) or hasattr(t, "__code__"):
        name = str(getattr(t, "__name__", "transform"))
        return "lambda" if name == "<lambda>" else name
    return type(t).__name__


@dataclass
class _Found:
    """What `find_transforms` found: Compose objects (their transforms list is swapped for timed
    ones) and lone transforms in a `transform`-like attribute (the attribute is swapped)."""

    composes: list[Any] = field(default_factory=list)
    lone: list[tuple[Any, str, Any]] = field(default_factory=list)


_TRANSFORM_ATTRS = ("transform", "transforms", "target_transform", "augment", "augmentation", "aug")


def find_transforms(dataset: Any, max_depth: int = 3) -> _Found:
    """The torchvision Compose objects (and lone torchvision transforms in an attribute named
    like `transform`) on `dataset`'s attributes, looked for in datasets it wraps (`Subset`,
    `ConcatDataset`), in a `StandardTransform` and in the user's own objects, `max_depth`
    attributes deep. Each object is found once, however many attributes point at it."""
    found = _Found()
    seen: set[int] = set()

    def visit(obj: Any, depth: int) -> None:
        if id(obj) in seen:
            return
        seen.add(id(obj))
        try:
            items = list(vars(obj).items())
        except TypeError:
            return
        for attr, value in items:
            if _is_compose(value):
                if id(value) not in seen:
                    seen.add(id(value))
                    found.composes.append(value)
            elif attr in _TRANSFORM_ATTRS and _is_torchvision_transform(value):
                found.lone.append((obj, attr, value))
            elif depth < max_depth and isinstance(value, (list, tuple)) and len(value) <= 64:
                for v in value:
                    if _walkable(v):
                        visit(v, depth + 1)
            elif depth < max_depth and _walkable(value):
                visit(value, depth + 1)

    if _walkable(dataset) or hasattr(dataset, "__dict__"):
        visit(dataset, 0)
    return found


# ---------------------------------------------------------------------------------------------
# The interceptions of one dataset.


_TV_DECODERS = ("decode_jpeg", "decode_image", "decode_png", "decode_webp", "decode_gif", "decode_avif",
                "decode_heic", "read_image")


def _sniff(data: Any) -> str:
    """The image format of encoded bytes in a uint8 tensor ('' when unknown)."""
    try:
        head = bytes(data[:4].tolist())
    except (AttributeError, TypeError, ValueError, RuntimeError):
        return ""
    if head[:2] == b"\xff\xd8":
        return "JPEG"
    if head == b"\x89PNG":
        return "PNG"
    return ""


class Interceptions:
    """Everything the stage profile intercepts for one dataset: built once, put in place for
    each timed fetch by `with interceptions:` and taken out after it (the module attributes,
    methods, Compose lists and attributes it swapped get their originals back).

    `stages` lists the sample stages it can record, in pipeline order: read, decode, then the
    transforms found (named by class, `#2` added to a repeated name). `where` is the stages'
    `where` ("worker" or "main").
    """

    def __init__(self, dataset: Any, timer: StageTimer, *, where: str) -> None:
        self.timer = timer
        self.where = where
        self._patches: list[tuple[Any, str, Any, Any]] = []  # (owner, attribute, original, replacement)
        self._installed = False
        names: Counter[str] = Counter()
        transform_stages: list[Stage] = []

        def stage_name(t: Any) -> str:
            base = _transform_name(t)
            names[base] += 1
            return base if names[base] == 1 else f"{base} #{names[base]}"

        objects: list[tuple[str, Any]] = []

        def wrap_list(compose: Any, first: bool) -> None:
            wrapped: list[Any] = []
            for t in compose.transforms:
                if _is_compose(t):
                    wrap_list(t, first)
                    wrapped.append(t)
                    continue
                name = stage_name(t)
                transform_stages.append(Stage(name, StageKind.TRANSFORM.value, where))
                wrapped.append(TimedTransform(name, t, timer))
                if first:
                    objects.append((name, t))
            self._patches.append((compose, "transforms", compose.transforms, wrapped))

        found = find_transforms(dataset)
        for k, compose in enumerate(found.composes):
            wrap_list(compose, k == 0)
        lone_wrappers: dict[int, TimedTransform] = {}
        for owner, attr, t in found.lone:
            if id(t) not in lone_wrappers:
                name = stage_name(t)
                transform_stages.append(Stage(name, StageKind.TRANSFORM.value, where))
                lone_wrappers[id(t)] = TimedTransform(name, t, timer)
            self._patches.append((owner, attr, t, lone_wrappers[id(t)]))
        self.transforms = transform_stages
        if not objects and lone_wrappers:
            objects = [(w.name, w.transform) for w in lone_wrappers.values()][:1]
        # The transforms themselves, (stage name, transform) in pipeline order (the first
        # Compose found, opened up; else a lone transform): what measure/alternatives.py times
        # again after each decoder.
        self.transform_objects: list[tuple[str, Any]] = objects
        # JPEG bytes the decoders are given, kept while a list is set here (at most CAPTURE).
        self.capture: list[bytes] | None = None
        self.stages = [Stage(READ, StageKind.READ.value, where), Stage(DECODE, StageKind.DECODE.value, where),
                       *transform_stages]
        originals: dict[int, Any] = {}  # id(original function) -> replacement, for the module scan
        opener = _timed_open(timer, builtins.open)
        self._patches.append((builtins, "open", builtins.open, opener))
        if io.open is builtins.open:
            self._patches.append((io, "open", io.open, opener))
        originals[id(builtins.open)] = opener
        self._pil(originals)
        self._torchvision(originals)
        self._module_globals(dataset, originals)

    # -- decoders ---------------------------------------------------------------------------

    def _pil(self, originals: dict[int, Any]) -> None:
        if "PIL.Image" not in sys.modules:
            return
        from PIL import Image, ImageFile

        Image.preinit()
        timer = self.timer
        open_orig = Image.open

        def pil_open(*args: Any, **kwargs: Any) -> Any:
            if self.capture is not None and len(self.capture) < CAPTURE and timer.active():
                self._keep(args[0] if args else kwargs.get("fp"))
            im = timer.call(DECODE, StageKind.DECODE, open_orig, args, kwargs)
            if timer.active():
                timer.decoders[f"PIL {getattr(im, 'format', None) or 'image'}"] += 1
            return im

        self._patches.append((Image, "open", open_orig, pil_open))
        originals[id(open_orig)] = pil_open

        def load_of(orig: Callable[..., Any]) -> Callable[..., Any]:
            def load(im: Any, *args: Any, **kwargs: Any) -> Any:
                return timer.call(DECODE, StageKind.DECODE, orig, (im, *args), kwargs)

            return load

        classes: list[type] = [ImageFile.ImageFile]
        pending = list(ImageFile.ImageFile.__subclasses__())
        while pending:
            cls = pending.pop()
            pending.extend(cls.__subclasses__())
            if "load" in cls.__dict__:
                classes.append(cls)
        for cls in classes:
            orig = cls.__dict__["load"]
            self._patches.append((cls, "load", orig, load_of(orig)))
        convert_orig = Image.Image.convert

        def convert(im: Any, *args: Any, **kwargs: Any) -> Any:
            if timer.inside(StageKind.TRANSFORM):  # a transform's own conversion is the transform's work
                return convert_orig(im, *args, **kwargs)
            return timer.call(DECODE, StageKind.DECODE, convert_orig, (im, *args), kwargs)

        self._patches.append((Image.Image, "convert", convert_orig, convert))

    def _torchvision(self, originals: dict[int, Any]) -> None:
        mod = sys.modules.get("torchvision.io.image")
        if mod is None:
            return
        owners = [mod] + [m for m in (sys.modules.get("torchvision.io"),) if m is not None]
        timer = self.timer

        def decoder(name: str, orig: Callable[..., Any]) -> Callable[..., Any]:
            def decode(*args: Any, **kwargs: Any) -> Any:
                if (self.capture is not None and len(self.capture) < CAPTURE and timer.active() and args
                        and name in ("decode_jpeg", "decode_image", "read_image")):
                    first = args[0]
                    for item in first if isinstance(first, (list, tuple)) else [first]:
                        self._keep(item)
                if timer.active() and not timer.inside(StageKind.DECODE):
                    fmt = {"decode_jpeg": "JPEG", "decode_png": "PNG"}.get(name) or (
                        _sniff(args[0]) if args and name == "decode_image" else "")
                    device = kwargs.get("device")
                    where = f" on {device}" if device is not None and str(device) != "cpu" else ""
                    timer.decoders[f"torchvision.io {name}{' ' + fmt if fmt else ''}{where}"] += 1
                return timer.call(DECODE, StageKind.DECODE, orig, args, kwargs)

            return decode

        def reader(orig: Callable[..., Any]) -> Callable[..., Any]:
            def read_file(*args: Any, **kwargs: Any) -> Any:
                return timer.call(READ, StageKind.READ, orig, args, kwargs)

            return read_file

        for name in (*_TV_DECODERS, "read_file"):
            orig = getattr(mod, name, None)
            if orig is None:
                continue
            replacement = reader(orig) if name == "read_file" else decoder(name, orig)
            originals[id(orig)] = replacement
            for owner in owners:
                if getattr(owner, name, None) is orig:
                    self._patches.append((owner, name, orig, replacement))

    def _module_globals(self, dataset: Any, originals: dict[int, Any]) -> None:
        """Names bound in the dataset's own modules (`from torchvision.io import decode_jpeg`)
        to a function intercepted here are swapped too."""
        done = {(id(o), a) for o, a, _, _ in self._patches}
        for cls in type(dataset).__mro__:
            module = sys.modules.get(cls.__module__)
            if module is None or cls.__module__.partition(".")[0] in ("builtins", "torch", "typing"):
                continue
            for name, value in list(vars(module).items()):
                replacement = originals.get(id(value))
                if replacement is not None and (id(module), name) not in done:
                    self._patches.append((module, name, value, replacement))
                    done.add((id(module), name))

    def _keep(self, source: Any) -> None:
        """Keep the JPEG in `source` (a decoder's input) for the decoders' timing."""
        from loaderbench.measure.alternatives import jpeg_of

        if self.capture is not None and len(self.capture) < CAPTURE:
            data = jpeg_of(source)
            if data is not None:
                self.capture.append(data)

    # -- in place for one fetch ---------------------------------------------------------------

    def __enter__(self) -> Interceptions:
        for owner, attr, _, replacement in self._patches:
            setattr(owner, attr, replacement)
        self._installed = True
        self.timer.armed = True
        return self

    def __exit__(self, *exc: Any) -> None:
        self.timer.armed = False
        for owner, attr, original, _ in reversed(self._patches):
            setattr(owner, attr, original)
        self._installed = False


# ---------------------------------------------------------------------------------------------
# One sample, twice: with and without the interceptions.


class RunQueueClock:
    """Seconds the calling thread has spent runnable but waiting for a CPU (the second field
    of Linux's /proc/thread-self/schedstat, in ns), read with one pread on a file kept open;
    `read()` is None where the file is missing. Made in the thread it measures."""

    def __init__(self) -> None:
        try:
            self._fd: int | None = os.open("/proc/thread-self/schedstat", os.O_RDONLY)
        except OSError:
            self._fd = None

    @property
    def available(self) -> bool:
        return self._fd is not None

    def read(self) -> float | None:
        if self._fd is None:
            return None
        try:
            return int(os.pread(self._fd, 128, 0).split()[1]) / 1e9
        except (OSError, IndexError, ValueError):
            return None

    def seconds(self) -> float:
        """`read()`, 0.0 where it cannot be read."""
        return self.read() or 0.0

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class BatchClock:
    """Times the per-batch stages of the thread that made it: wall, the thread's CPU, and its
    time queued for a CPU (RunQueueClock), into a BatchTiming."""

    def __init__(self) -> None:
        self.queue = RunQueueClock()

    def time(self, timing: BatchTiming, name: str, fn: Callable[..., Any], *args: Any) -> Any:
        """`fn(*args)`, timed as stage `name` of `timing`."""
        q0 = self.queue.read()
        w0, c0 = time.perf_counter(), time.thread_time()
        out = fn(*args)
        timing.wall_s[name] = time.perf_counter() - w0
        timing.cpu_s[name] = time.thread_time() - c0
        q1 = self.queue.read()
        if q0 is not None and q1 is not None:
            timing.queued_s[name] = q1 - q0
        return out


class SampleProfiler:
    """Fetches samples of one dataset with and without the interceptions (NOTE [stage
    profile]); used in this process and, with --in-worker, inside a DataLoader worker. Made in
    the thread that fetches (`queued`: that thread's seconds queued for a CPU, a RunQueueClock's
    by default; None in tests: not measured)."""

    def __init__(self, dataset: Any, *, where: str, wall: Clock = time.perf_counter,
                 cpu: Clock = time.thread_time, queued: Clock | None | str = "run queue") -> None:
        self.dataset = dataset
        if queued == "run queue":
            clock = RunQueueClock()
            queued = clock.seconds if clock.available else None
        self.timer = StageTimer(wall, cpu, queued if callable(queued) else None)
        self.wall, self.cpu = wall, cpu
        self.interceptions = Interceptions(dataset, self.timer, where=where)
        self.last_queued_s: float | None = None

    def staged(self, fetch: Callable[[], Any]) -> tuple[Any, SampleTiming, dict[str, int]]:
        """`fetch()` with the interceptions in place: (item, its timing, decoder calls)."""
        timer = self.timer
        timer.take()
        with self.interceptions:
            q0, w0, c0 = timer.queued(), self.wall(), self.cpu()
            item = fetch()
            w1, c1, q1 = self.wall(), self.cpu(), timer.queued()
        t = timer.take()
        return item, SampleTiming(
            wall_s=t.wall_s, cpu_s=t.cpu_s, getitem_wall_s=w1 - w0, getitem_cpu_s=c1 - c0, calls=t.calls,
            queued_s=t.queued_s, getitem_queued_s=q1 - q0 if timer.measures_queue else None), t.decoders

    def plain(self, fetch: Callable[[], Any]) -> tuple[Any, float]:
        """`fetch()` with nothing intercepted: (item, wall seconds); the seconds its thread was
        queued for a CPU meanwhile are in `last_queued_s` (None where not measured)."""
        queued = self.timer.queued
        q0, w0 = queued(), self.wall()
        item = fetch()
        wall_s = self.wall() - w0
        self.last_queued_s = queued() - q0 if self.timer.measures_queue else None
        return item, wall_s


# ---------------------------------------------------------------------------------------------
# The profiler pass over the rest of __getitem__.


def _function_label(key: tuple[str, int, str]) -> str:
    filename, line, name = key
    if filename == "~":
        return name.strip("<>")
    return name


def _location(key: tuple[str, int, str]) -> str:
    filename, line, _ = key
    return "~" if filename == "~" else f"{os.path.basename(filename)}:{line}"


def _ours(key: tuple[str, int, str]) -> bool:
    filename, _, name = key
    if filename == "~":
        return "_lsprof.Profiler" in name or name in ("<built-in method time.perf_counter>",
                                                      "<built-in method time.thread_time>")
    return os.path.normcase(os.path.abspath(filename)) == _THIS_FILE


def top_functions(stats: dict[Any, Any], top: int) -> list[FunctionTime]:
    """The `top` functions by self time in cProfile's raw stats (`pstats.Stats(...).stats`:
    key (file, line, name) -> (primitive calls, calls, self s, cumulative s, callers)), this
    module's own functions left out; a built-in names the Python function that spent most of
    its time calling it."""
    rows: list[FunctionTime] = []
    for key, (_, calls, self_s, _, callers) in stats.items():
        if _ours(key):
            continue
        called_from = None
        if key[0] == "~" and callers:  # a built-in: only the calls from code outside this module
            theirs = {c: v for c, v in callers.items() if not _ours(c)}
            self_s = sum(v[2] for v in theirs.values())
            calls = sum(v[1] for v in theirs.values())
            if theirs:
                best = max(theirs.items(), key=lambda kv: kv[1][2])[0]
                called_from = f"{_function_label(best)} ({_location(best)})"
        if self_s <= 0:
            continue
        rows.append(FunctionTime(function=_function_label(key), location=_location(key), self_s=float(self_s),
                                 calls=int(calls), called_from=called_from))
    rows.sort(key=lambda r: -r.self_s)
    return rows[:top]


# ---------------------------------------------------------------------------------------------
# The DataLoader pass: receive (and, --in-worker, the samples in a worker).


class LoaderDataset:
    """The dataset as the profile's DataLoader sees it: items pass through unchanged, or, with
    `in_worker`, every other one is fetched by a `SampleProfiler` made in the worker and the
    others plainly (NOTE [stage profile]); each comes back as (item, its timing as a dict or
    None, decoder calls, plain wall seconds or None)."""

    def __init__(self, dataset: Any, *, in_worker: bool) -> None:
        self.dataset = dataset
        self.in_worker = in_worker
        self._profiler: SampleProfiler | None = None
        self._count = 0

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int) -> Any:
        if not self.in_worker:
            return self.dataset[index]
        ds = self.dataset
        if self._profiler is None:  # this worker's first item: a warm-up, untimed (see profile_stages)
            item = ds[index]
            self._profiler = SampleProfiler(ds, where="worker")
            return item, None, {}, None
        self._count += 1
        if self._count % 2:
            item, timing, decoders = self._profiler.staged(lambda: ds[index])
            return item, timing.to_dict(), decoders, None
        item, wall_s = self._profiler.plain(lambda: ds[index])
        return item, None, {}, wall_s


class LoaderCollate:
    """The collate function of the profile's DataLoader: returns (batch, samples) with the real
    collate's batch; with `in_worker`, splits the timings off the items first (LoaderDataset),
    times the real collate and returns (batch, timings, plain wall seconds, decoder calls, the
    batch's BatchTiming as a dict with the collate in it)."""

    def __init__(self, collate: Callable[[list[Any]], Any], *, in_worker: bool) -> None:
        self.collate = collate
        self.in_worker = in_worker
        self._clock: BatchClock | None = None

    def __call__(self, items: list[Any]) -> Any:
        if not self.in_worker:
            return self.collate(items), len(items)
        if self._clock is None:  # made in the worker, for the worker's thread
            self._clock = BatchClock()
        timings = [x[1] for x in items if x[1] is not None]
        plain = [x[3] for x in items if x[3] is not None]
        decoders: Counter[str] = Counter()
        for x in items:
            decoders.update(x[2])
        timing = BatchTiming(samples=len(items), wall_s={}, cpu_s={})
        batch = self._clock.time(timing, COLLATE, self.collate, [x[0] for x in items])
        return batch, timings, plain, dict(decoders), timing.to_dict()


def _set_threads(threads: int, worker_id: int) -> None:
    import torch

    torch.set_num_threads(threads)


class _IndexSampler:
    """The profile's indices, in order, as a DataLoader sampler."""

    def __init__(self, indices: list[int]) -> None:
        self.indices = indices

    def __len__(self) -> int:
        return len(self.indices)

    def __iter__(self) -> Iterator[int]:
        return iter(self.indices)


# ---------------------------------------------------------------------------------------------
# The whole profile.


@dataclass(frozen=True)
class ProfilePlan:
    """What one profile measures: `samples` per pass, within `time_budget_s` seconds;
    `in_worker`: the sample stages timed in a DataLoader worker rather than in this process;
    `top`: functions kept from the profiler pass (`attribute` False: no profiler pass);
    `seed`: of the sample indices; `device`: 'cpu' or 'cuda:N' (pin and H2D need CUDA);
    `receive_batches`: batches timed by the receive probe; `alternatives`: also time what the
    what-ifs beyond the settings need (measure/alternatives.py: the JPEG decoders on the
    dataset's own images, nvJPEG on a CUDA device, a batched fetch)."""

    samples: int = 200
    time_budget_s: float = 20.0
    in_worker: bool = False
    top: int = 10
    seed: int = 0
    device: str = "cpu"
    receive_batches: int = 5
    attribute: bool = True
    alternatives: bool = False


def _indices(length: int, count: int, seed: int) -> list[int]:
    import numpy as np

    rng = np.random.default_rng(seed)
    if length <= 0:
        return []
    out: list[int] = []
    while len(out) < count:
        out.extend(int(i) for i in rng.permutation(length)[: count - len(out)])
    return out


class _Deadlines:
    """The budget's parts: each phase ends at its share of the budget (from the start) or
    when its work is done; the last one at the budget itself."""

    def __init__(self, budget_s: float, shares: dict[str, float], clock: Clock) -> None:
        self.clock = clock
        self.start = clock()
        self.ends = {k: self.start + budget_s * v for k, v in shares.items()}

    def over(self, phase: str) -> bool:
        return self.clock() >= self.ends[phase]


def profile_stages(
    dataset: Any,
    settings: LoaderSettings,
    plan: ProfilePlan,
    *,
    collate_fn: Callable[[list[Any]], Any] | None = None,
    clock: Clock = time.perf_counter,
) -> StageRecord:
    """Profile where `dataset`'s samples spend their time, for DataLoader `settings`
    (num_workers, batch_size, pin_memory, prefetch_factor, mp_context, worker_threads,
    main_threads are used); see NOTE [stage profile].

    Passes, each ending at its share of `plan.time_budget_s` or when done:
      1. (not in a worker) `plan.samples` samples timed in this process, in turn with as many
         other samples fetched without the interceptions; every `batch_size` of them
         collated, then pinned (with pin_memory) and copied to the device (CUDA), timed;
      2. (num_workers > 0) a DataLoader of `settings`: `next()` timed on batches already built
         (receive); with `plan.in_worker` (a map-style dataset) its workers time the samples
         and the collate, and the main process pins and copies the batches it receives;
      3. the profiler pass: cProfile over `__getitem__` outside the recognised stages, in turn
         with samples fetched without it.
    With num_workers > 0 the samples are built with the worker's intra-op threads
    (`worker_threads`, torch's 1 by default), else the main process's.
    Returns the raw `StageRecord`. Raises what the dataset, the collate function or the
    DataLoader raise; ValueError for an empty dataset.
    """
    import torch
    from torch.utils.data import IterableDataset, default_collate

    collate = collate_fn or default_collate
    t_start = clock()
    iterable = isinstance(dataset, IterableDataset)
    workers = settings.num_workers
    where = "worker" if workers > 0 else "main"
    cuda = plan.device.startswith("cuda")
    in_worker = bool(workers and plan.in_worker and not iterable)  # an IterableDataset: in this process
    if in_worker:
        shares = {"loader": 0.75, "attribution": 1.0}
    elif workers:
        shares = {"samples": 0.6, "loader": 0.8, "attribution": 1.0}
    else:
        shares = {"samples": 0.75, "attribution": 1.0}
    if plan.alternatives:
        shares = _shares_with_alternatives(in_worker=in_worker, workers=workers > 0, attribute=plan.attribute)
    elif not plan.attribute:  # no profiler pass: the passes before it share its time
        last = max(v for k, v in shares.items() if k != "attribution") if len(shares) > 1 else 1.0
        shares = {k: v / last for k, v in shares.items() if k != "attribution"}
    deadlines = _Deadlines(plan.time_budget_s, shares, clock)
    if not iterable and len(dataset) == 0:
        raise ValueError("the dataset is empty: nothing to profile")
    # Two fetches per timed sample (timed, plain) in pass 1 and again in the profiler pass, and
    # three warm-up fetches: all of different samples while the dataset has enough.
    drawn = [] if iterable else _indices(len(dataset), 4 * plan.samples + 3, plan.seed)
    first, second, warm = drawn[: 2 * plan.samples], drawn[2 * plan.samples: 4 * plan.samples], drawn[-3:]
    threads = (settings.worker_threads or 1) if workers else settings.main_threads
    threads_before = torch.get_num_threads()
    record = StageRecord(stages=[], samples=[], batches=[], settings=settings, device=plan.device,
                         sampled_in="a DataLoader worker" if in_worker else "this process",
                         torch_threads=threads if threads is not None else threads_before,
                         time_budget_s=plan.time_budget_s, iterable=iterable)
    decoders: Counter[str] = Counter()
    device = torch.device(plan.device)

    batch_clock = BatchClock()

    def main_side(batch: Any, timing: BatchTiming) -> None:
        """Pin (pin_memory) and copy (CUDA) one batch, timed (the copy to its end: synchronised)."""
        if not cuda:
            return
        from torch.utils.data._utils.pin_memory import pin_memory

        from loaderbench.workload.batch import move_to_device

        def copy(b: Any) -> Any:
            out = move_to_device(b, device, non_blocking=settings.pin_memory)
            torch.cuda.synchronize(device)
            return out

        torch.cuda.synchronize(device)
        if settings.pin_memory:
            batch = batch_clock.time(timing, PIN, pin_memory, batch, device)
        moved = batch_clock.time(timing, H2D, copy, batch)
        del moved

    try:
        if threads is not None:
            torch.set_num_threads(threads)
        # Warm-up, untimed and before anything is intercepted: the first fetches pay one-off
        # costs (imports, lazy opens, thread pools), and a decoder the dataset imports on its
        # first use is then there to intercept.
        source = iter(dataset) if iterable else None
        for i in (warm or [0, 0, 0])[:2]:
            item = next(source) if source is not None else dataset[i]  # type: ignore[call-overload]
            del item
        profiler = SampleProfiler(dataset, where=where)
        record.stages = [*profiler.interceptions.stages,
                         Stage(REST_ITER if iterable else REST, StageKind.REST.value, where),
                         Stage(COLLATE, StageKind.COLLATE.value, where),
                         Stage(RECEIVE, StageKind.RECEIVE.value, "main"), Stage(PIN, StageKind.PIN.value, "main"),
                         Stage(H2D, StageKind.H2D.value, "main")]
        threads_now = threads if threads is not None else threads_before
        if not in_worker:
            _in_process(profiler, dataset, first, warm or [0, 0, 0], iterable, settings.batch_size, collate, record,
                        decoders, deadlines, main_side, plan.samples, batch_clock)
        # The alternatives need the decoders pass 1 saw: right after it (before the DataLoader's
        # receive, which the sweep measures itself), or after the DataLoader pass in a worker.
        if plan.alternatives and not in_worker:
            _alternatives(profiler, dataset, first + second, iterable, settings, plan, record, decoders, deadlines,
                          threads_now)
        if workers:
            _loader_pass(dataset, first, iterable, settings, plan, collate, record, decoders, deadlines,
                         main_side, batch_clock)
        if plan.alternatives and in_worker:
            _alternatives(profiler, dataset, first + second, iterable, settings, plan, record, decoders, deadlines,
                          threads_now)
        if plan.attribute:
            _attribution(profiler, dataset, second or None, record, deadlines, plan)
    finally:
        torch.set_num_threads(threads_before)
    record.decoders = dict(decoders)
    record.wall_s = clock() - t_start
    return record


def _shares_with_alternatives(*, in_worker: bool, workers: bool, attribute: bool) -> dict[str, float]:
    """Where each pass of a profile with the alternatives ends, as a share of the budget, in the
    order they run: the samples (weight 0.6: their tail needs a few hundred), the alternatives
    (0.2), the DataLoader (0.2), the profiler pass (0.25); the passes that run share the whole
    budget in those proportions."""
    order = [*([] if in_worker else [("samples", 0.6), ("alternatives", 0.2)]),
             *([("loader", 0.2)] if workers else []), *([("alternatives", 0.2)] if in_worker else []),
             *([("attribution", 0.25)] if attribute else [])]
    total = sum(w for _, w in order)
    out, at = {}, 0.0
    for name, w in order:
        at += w / total
        out[name] = at
    return out


def _alternatives(profiler: SampleProfiler, dataset: Any, indices: list[int], iterable: bool,
                  settings: LoaderSettings, plan: ProfilePlan, record: StageRecord, decoders: Counter[str],
                  deadlines: _Deadlines, threads: int) -> None:
    """The pass of `profile_stages` with `plan.alternatives` (measure/alternatives.py): a
    map-style dataset without `__getitems__` asked for several samples at once; where the
    passes before saw JPEGs decoded, a few more samples fetched to keep their JPEGs, the two CPU
    decoders timed on them with the dataset's transforms, and nvJPEG on a CUDA device."""
    from loaderbench.measure import alternatives as alt

    def over() -> bool:
        return deadlines.over("alternatives")

    def cut() -> bool:  # over, and the decoders left untimed for it (ProfileCost.cut_short)
        if over():
            record.cut_short.append(DECODER_TIMING)
            return True
        return False

    if not iterable and not over():
        record.batched_fetch = alt.probe_batched_fetch(dataset, indices[::-1], items=min(16, settings.batch_size),
                                                       over=over)
    if not any("JPEG" in d or "decode_jpeg" in d for d in decoders) or cut():
        return
    kept: list[bytes] = []
    profiler.interceptions.capture = kept
    it = iter(dataset) if iterable else None
    try:
        for k in range(2 * CAPTURE):
            if len(kept) >= CAPTURE or over():
                break
            i = indices[k % len(indices)] if indices else 0
            try:
                fetch: Callable[[], Any] = (functools.partial(next, it) if it is not None
                                            else functools.partial(dataset.__getitem__, i))
                item, _, _ = profiler.staged(fetch)
            except StopIteration:
                break
            del item
    finally:
        profiler.interceptions.capture = None
    record.jpegs_captured = len(kept)
    if cut() or not kept:
        return
    record.decoder_timing = alt.time_decoders(kept, profiler.interceptions.transform_objects, threads=threads,
                                              over=over)
    if plan.device.startswith("cuda") and not cut():
        record.gpu_decode = alt.time_gpu_decode(kept, settings.batch_size, plan.device)


def timed_turn(k: int, count: int, iterable: bool) -> bool:
    """Whether fetch `k` (of 2 x `count`) is the timed one of a pass that times `count` samples in
    turn with as many others: every other fetch of a map-style dataset; an IterableDataset's first
    `count` items, then `count` more (its items are consecutive: a stream that finishes items a
    block at a time pays a block's cost in one item, and with fetches taken in turn blocks of an
    even length would put every such item on the same side).

    >>> [timed_turn(k, 3, False) for k in range(6)], [timed_turn(k, 3, True) for k in range(6)]
    ([True, False, True, False, True, False], [True, True, True, False, False, False])
    """
    return k < count if iterable else k % 2 == 0


def _in_process(profiler: SampleProfiler, dataset: Any, indices: list[int], warm: list[int], iterable: bool,
                batch_size: int, collate: Callable[[list[Any]], Any], record: StageRecord, decoders: Counter[str],
                deadlines: _Deadlines, main_side: Callable[[Any, BatchTiming], None], count: int,
                clock: BatchClock) -> None:
    """Pass 1 of `profile_stages`: `count` samples timed in this process, in turn with as many
    fetched plainly (`indices`: two per timed sample; an IterableDataset's in two runs,
    `timed_turn`); every `batch_size` items collated, pinned and copied."""
    it = iter(dataset) if iterable else None

    def fetch(i: int) -> Callable[[], Any]:
        return (lambda: next(it)) if it is not None else (lambda: dataset[i])  # type: ignore[arg-type]

    try:
        profiler.staged(fetch(warm[2]))  # the interceptions' own first use, untimed
    except StopIteration:
        return
    items: list[Any] = []
    for k in range(2 * count):
        if deadlines.over("samples"):
            record.cut_short.append("samples")
            break
        i = indices[k % len(indices)] if indices else 0
        try:
            if timed_turn(k, count, iterable):
                item, timing, dec = profiler.staged(fetch(i))
                record.samples.append(timing)
                decoders.update(dec)
            else:
                item, wall_s = profiler.plain(fetch(i))
                record.plain_s.append(wall_s)
                if profiler.last_queued_s is not None:
                    record.plain_queued_s.append(profiler.last_queued_s)
        except StopIteration:
            break
        items.append(item)
        del item
        if len(items) == batch_size:
            _collate_batch(items, collate, record, main_side, clock)
            items = []
    if items:
        _collate_batch(items, collate, record, main_side, clock)


def _collate_batch(items: list[Any], collate: Callable[[list[Any]], Any], record: StageRecord,
                   main_side: Callable[[Any, BatchTiming], None], clock: BatchClock) -> None:
    timing = BatchTiming(samples=len(items), wall_s={}, cpu_s={})
    batch = clock.time(timing, COLLATE, collate, items)
    main_side(batch, timing)
    record.batches.append(timing)


def _loader_pass(dataset: Any, indices: list[int], iterable: bool, settings: LoaderSettings, plan: ProfilePlan,
                 collate: Callable[[list[Any]], Any], record: StageRecord, decoders: Counter[str],
                 deadlines: _Deadlines, main_side: Callable[[Any, BatchTiming], None], clock: BatchClock) -> None:
    """Pass 2 of `profile_stages`: a DataLoader of `settings`; `next()` timed on built batches."""
    from loaderbench.measure.introspect import _tracking_loader_class, stop_workers

    kwargs: dict[str, Any] = {
        "batch_size": settings.batch_size,
        "num_workers": settings.num_workers,
        "collate_fn": LoaderCollate(collate, in_worker=plan.in_worker),
        "prefetch_factor": settings.prefetch_factor or 2,
    }
    if settings.mp_context:
        kwargs["multiprocessing_context"] = settings.mp_context
    if _takes_in_order():
        kwargs["in_order"] = False  # next() takes whichever batch came first (NOTE in _wait_for_a_batch)
    if settings.worker_threads:
        kwargs["worker_init_fn"] = functools.partial(_set_threads, settings.worker_threads)
    if not iterable:
        # in a worker: a warm-up item per worker, then timed and plain items in turn
        wanted = 2 * plan.samples + settings.num_workers if plan.in_worker else plan.receive_batches * settings.batch_size
        kwargs["sampler"] = _IndexSampler((indices * (wanted // max(1, len(indices)) + 1))[:wanted])
        source: Any = LoaderDataset(dataset, in_worker=plan.in_worker)
    else:
        source = dataset  # an IterableDataset's items are timed in this process only
        kwargs["collate_fn"] = LoaderCollate(collate, in_worker=False)
    loader = _tracking_loader_class()(source, **kwargs)
    in_worker = plan.in_worker and not iterable
    it = iter(loader)
    received = 0
    try:
        while True:
            if deadlines.over("loader"):
                record.cut_short.append("loader")
                break
            if not in_worker and received >= plan.receive_batches:
                break
            _wait_for_a_batch(loader, lambda: deadlines.over("loader"))
            if deadlines.over("loader") and (received or not in_worker):
                # the budget ended while the batch was still being built: next() would time the
                # wait for a worker, not the receive (NOTE [timing the receive])
                record.cut_short.append("loader")
                break
            received_timing = BatchTiming(samples=0, wall_s={}, cpu_s={})
            try:
                out = clock.time(received_timing, RECEIVE, next, it)
            except StopIteration:
                break
            received += 1
            if in_worker:
                batch, timings, plain, dec, collated = out
                record.samples.extend(SampleTiming.from_dict(t) for t in timings)
                record.plain_s.extend(plain)
                decoders.update(dec)
                timing = BatchTiming.from_dict(collated)
                for part in ("wall_s", "cpu_s", "queued_s"):
                    getattr(timing, part).update(getattr(received_timing, part))
                main_side(batch, timing)
                del batch
            else:
                timing = received_timing
                timing.samples = int(out[1])
            record.batches.append(timing)
            del out
    finally:
        stop_workers(loader)


def _takes_in_order() -> bool:
    import inspect

    from torch.utils.data import DataLoader

    return "in_order" in inspect.signature(DataLoader).parameters


def _wait_for_a_batch(loader: Any, over: Callable[[], bool], poll_s: float = 0.005) -> None:
    """Return once a built batch is waiting in the pipe from the workers (or `over()`).

    NOTE [timing the receive]
        The receive is what `next()` costs the main process for a batch a worker has sent:
        reading its message, unpickling it, mapping its tensors' shared memory. Timed on a
        batch that is not there yet, it would be the wait for a worker. The loader's ready
        count (introspect.ready_batches) is not enough: a worker's queue counts a batch when
        `put()` is called, before its feeder thread has copied the tensors into shared memory
        and written the message (about a second, once, for 64 images of 224x224 with two
        spawned workers on a loaded 2-core machine). So this waits until the result pipe is
        readable: the message is written from a buffer pickled whole, its tensors already in
        shared memory. And the profile's DataLoader takes batches in the order they come
        (`in_order=False`, torch >= 2.6): in order, `next()` could read one worker's batch and
        then wait for another's. Where the pipe cannot be reached (torch internals that
        differ), a batch is waited for by the ready count, then 50 ms more.
    """
    from loaderbench.measure.introspect import ready_batches

    it = getattr(loader, "last_iterator", None)
    queue = getattr(it, "_data_queue", None)
    reader = getattr(queue, "_reader", None)
    if reader is not None and hasattr(reader, "poll"):
        while not over():
            try:
                if reader.poll(poll_s):
                    return
            except (OSError, EOFError, ValueError):
                return
        return
    t0 = time.perf_counter()
    while (ready_batches(loader) or 0) < 1 and not over() and time.perf_counter() - t0 < 5.0:
        time.sleep(poll_s)
    time.sleep(0.05)


def _attribution(profiler: SampleProfiler, dataset: Any, indices: list[int] | None, record: StageRecord,
                 deadlines: _Deadlines, plan: ProfilePlan) -> None:
    """Pass 3 of `profile_stages`: cProfile over `__getitem__`, paused inside the recognised
    stages, on up to `plan.samples` samples in turn with as many fetched without it (for the
    profiler's cost); `indices`: two per profiled sample (None: an IterableDataset's next items,
    in two runs as `timed_turn` says)."""
    prof = cProfile.Profile()
    timer = profiler.timer
    timer.on_enter, timer.on_exit = prof.disable, prof.enable
    it = iter(dataset) if indices is None else None
    getitem_s = stages_s = plain_s = 0.0
    done = plain_done = 0
    try:
        for k in range(2 * plan.samples if indices is None else len(indices)):
            if deadlines.over("attribution"):
                record.cut_short.append("attribution")
                break
            fetch: Callable[[], Any] = (
                (lambda: next(it)) if it is not None  # type: ignore[arg-type]
                else functools.partial(dataset.__getitem__, indices[k])  # type: ignore[index]
            )
            try:
                if not timed_turn(k, plan.samples if indices is None else len(indices) // 2, indices is None):
                    item, wall_s = profiler.plain(fetch)
                    plain_s += wall_s
                    plain_done += 1
                    del item
                    continue
                timer.take()
                with profiler.interceptions:
                    w0 = time.perf_counter()
                    prof.enable()
                    try:
                        item = fetch()
                    finally:
                        prof.disable()
                    getitem_s += time.perf_counter() - w0
                del item
            except StopIteration:
                break
            stages_s += sum(timer.take().wall_s.values())
            done += 1
    finally:
        timer.on_enter = timer.on_exit = None
    if not done:
        return
    stats = pstats.Stats(prof).stats  # type: ignore[attr-defined]
    record.functions = top_functions(stats, plan.top)
    record.attribution_samples = done
    record.attribution_getitem_s = getitem_s
    record.attribution_stages_s = stages_s
    record.attribution_plain_samples = plain_done
    record.attribution_plain_s = plain_s
