"""Value parsers for flags and TOML keys: each takes a raw value (a string from the command line, or
a TOML value) and returns the parsed value, or raises ValueError saying what is allowed. No
loaderbench imports: the registries in model.py and orchestration/config.py are built from these."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

Parser = Callable[[Any], Any]
MP_CONTEXTS = ("fork", "spawn", "forkserver")


def int_in(lo: int, hi: int) -> Parser:
    """An integer from `lo` to `hi` (a bool is not one; a float only when whole)."""

    def parse(v: Any) -> int:
        if isinstance(v, bool):
            raise ValueError(f"expected an integer from {lo} to {hi}")
        if isinstance(v, str):
            v = v.strip()
        try:
            n = int(v)
        except (TypeError, ValueError):
            raise ValueError(f"expected an integer from {lo} to {hi}, got {v!r}") from None
        if isinstance(v, float) and v != n:
            raise ValueError(f"expected an integer from {lo} to {hi}, got {v!r}")
        if not lo <= n <= hi:
            raise ValueError(f"expected an integer from {lo} to {hi}, got {n}")
        return n

    return parse


def float_in(lo: float, hi: float) -> Parser:
    """A number from `lo` to `hi`; `5%` is 0.05."""
    span = f"a number from {lo:g} to {hi:g}" + (f" ({lo * 100:g}% to {hi * 100:g}%)" if hi <= 1.0 else "")

    def parse(v: Any) -> float:
        if isinstance(v, bool):
            raise ValueError(f"expected {span}")
        try:
            x = float(str(v).strip().rstrip("%")) / (100.0 if str(v).strip().endswith("%") else 1.0)
        except ValueError:
            raise ValueError(f"expected {span}, got {v!r}") from None
        if math.isnan(x) or not lo <= x <= hi:
            raise ValueError(f"expected {span}, got {v!r}")
        return x

    return parse


def boolean(v: Any) -> bool:
    """on/off, true/false, yes/no, 1/0."""
    if isinstance(v, bool):
        return v
    s = str(v).strip().lower()
    if s in ("on", "true", "yes", "1"):
        return True
    if s in ("off", "false", "no", "0"):
        return False
    raise ValueError(f"expected on/off (or true/false), got {v!r}")


def choice(options: Sequence[str]) -> Parser:
    """One of `options`, as written."""

    def parse(v: Any) -> str:
        s = str(v).strip()
        if s not in options:
            raise ValueError(f"expected one of {', '.join(options)}, got {v!r}")
        return s

    return parse


def string(v: Any) -> str:
    """Any string (a TOML number is refused)."""
    if not isinstance(v, str):
        raise ValueError(f"expected a string, got {v!r}")
    return v


def paths(v: Any) -> str | list[str]:
    """One path (a string) or several (a TOML list, or the flag given more than once): one path
    stays a string, several a list in the order given (repeats dropped)."""
    raw = [v] if isinstance(v, str) else v
    if not isinstance(raw, (list, tuple)) or not raw or not all(isinstance(p, str) and p.strip() for p in raw):
        raise ValueError(f"expected a path or a list of paths, got {v!r}")
    out = list(dict.fromkeys(p.strip() for p in raw))
    return out[0] if len(out) == 1 else out


def list_of(item: Parser, *, dedupe: bool = True) -> Parser:
    """A comma list (`0,2,4`) or a TOML list of `item` values, in the order given (repeats
    dropped with `dedupe`)."""

    def parse(v: Any) -> tuple[Any, ...]:
        raw = [p for p in v.split(",")] if isinstance(v, str) else v
        if not isinstance(raw, (list, tuple)):
            raw = [raw]
        raw = [p.strip() if isinstance(p, str) else p for p in raw]
        if not raw or any(p == "" for p in raw):
            raise ValueError("expected a non-empty comma list (e.g. 0,2,4)")
        out: list[Any] = []
        for p in raw:
            x = item(p)
            if not dedupe or x not in out:
                out.append(x)
        return tuple(out)

    return parse


def mp_context(v: Any) -> str | None:
    """fork, spawn or forkserver; `default` (or `none`) is the platform default (None)."""
    s = str(v).strip()
    if s in ("default", "none", ""):
        return None
    if s not in MP_CONTEXTS:
        raise ValueError(f"expected one of {', '.join(MP_CONTEXTS)}, got {v!r}")
    return s


def size(v: Any) -> tuple[int, int]:
    """WxH such as 500x375 (or a pair)."""
    if isinstance(v, (list, tuple)) and len(v) == 2:
        w, h = v
    else:
        parts = str(v).lower().replace(",", "x").split("x")
        if len(parts) != 2:
            raise ValueError(f"expected WxH such as 500x375, got {v!r}")
        w, h = parts
    return (int_in(8, 16384)(w), int_in(8, 16384)(h))


def shape(v: Any) -> tuple[int, ...]:
    """Up to 8 positive dimensions such as 3,64,64."""
    dims = list_of(int_in(1, 1 << 20), dedupe=False)(v)
    if len(dims) > 8:
        raise ValueError("expected at most 8 dimensions such as 3,64,64")
    return dims


def any_value(v: Any) -> Any:
    """Anything (a TOML table of keyword arguments)."""
    return v
