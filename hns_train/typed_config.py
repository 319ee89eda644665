"""The one loader from nested mappings (parsed YAML, keyword overrides) to typed config
dataclasses: `RunConfig` and its sections (`hns_train.config`), `AgentConfig`
(`hns_train.agents.config`), `PoolConfig` (`hns_train.agents.pool`) and `GameConfig`
(`hns_train.envs.make_config`). It imports nothing of the package, so every folder may use it.

`from_dict(cls, data, prefix="", what=None)` builds dataclass `cls` from the mapping `data`
(None: every default). A field typed as another dataclass is loaded the same way, its keys
named with the dotted path (`prefix`, e.g. "pipeline."). Every value is checked against its
field's type hint; the only conversions are int -> float, a string that YAML 1.1 leaves
unparsed for a float without a dot ("1e-3") -> float, and a list -> tuple for tuple fields
(element by element). bool is never taken for an int or a float.

Errors are `FieldError` (a ValueError) that name the key and what is allowed:
- unknown keys: "unknown NetworkConfig fields ['network.lstm_size'] (did you mean
  'network.lstm_dim'?); allowed: [...]" (`what` replaces "NetworkConfig fields", e.g. "game
  parameter(s)"; the guess is the closest allowed name, where one is close);
- wrong types: "pipeline.n_actors='two' has type str; expected int";
- a ValueError of the class's own checks (`__post_init__`), prefixed with the section's path
  (nested sections only);
- a ZeroDivisionError of those checks, as the fields that are 0 and must not be.

Ranges: a numeric field typed `Annotated[int, Bounds(1)]` (or one of the aliases `AtLeast1`,
`NonNegativeInt`, `NonNegative`, `Positive`, `Unit`, `Finite`) states the values it allows
where it is declared (either end open or closed, odd numbers only where asked); a `(low, high)`
tuple field typed `Annotated[tuple[int, int], Bounds(0)]` holds two such values, low <= high;
a text field typed `Annotated[str, OneOf(names)]` names the values it takes (a tuple field
`Annotated[tuple[str, ...], OneOf(names)]` the values its items take); a field typed
`Annotated[str, OneOfOrClass(names, base)]` also takes an import path `package.module:Class`
naming a subclass of `base` in the user's own code (`game.task`, `agent.network.kind`):
`import_class(path, base, key)` resolves one, and its error names the module or class that is
missing or the class that is not a `base`, in one line.
`range_problems(obj)` checks every such field of a config, nested sections included, and says
for each one out of range what it must be; a float must also be finite. The run config reports
them all at once; a section that stands alone (`PoolConfig`, the Warp game's `BankConfig` and
`PhysicsConfig`) raises them from its own checks (`check_ranges`).

Meanings: a field's meaning is written once, as a `#:` comment in its class (at the end of its
line, or on the lines just above it, the convention Sphinx's autodoc reads too);
`field_docs(cls)` reads them for help texts such as `help(parallel_env)`.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib
import inspect
import itertools
import linecache
import math
import re
import types
import typing
from collections.abc import Mapping
from typing import Annotated, Any


class FieldError(ValueError):
    """A mapping that does not fit a config dataclass; the message names key and allowed."""


@dataclasses.dataclass(frozen=True)
class Bounds:
    """The values a numeric field allows: >= `low` (> `low` unless `inclusive`), <= `high`
    where one is given (< `high` unless `high_inclusive`), and odd numbers only where `odd`.
    On a `(low, high)` tuple field both ends must be allowed and low <= high."""

    low: float
    high: float | None = None
    inclusive: bool = True
    high_inclusive: bool = True
    odd: bool = False

    def problem(self, key: str, value: float | tuple[float, float]) -> str | None:
        """Why `value` of field `key` is not allowed, or None (a field that may be None: None
        is allowed)."""
        if value is None:
            return None
        if isinstance(value, float) and not math.isfinite(value):
            return f"{key}={value} must be a finite number"
        ends = value if isinstance(value, tuple) else (value,)
        if all(map(self.allows, ends)) and list(ends) == sorted(ends):
            return None
        low = ">=" if self.inclusive else ">"
        high = "" if self.high is None else f"{'<=' if self.high_inclusive else '<'} {self.high}"
        if isinstance(value, tuple):  # e.g. "(low, high) with 0 < low <= high < 1"
            allowed = f"(low, high) with {self.low} {low.replace('>', '<')} low <= high {high}"
        elif self.low == -math.inf:  # e.g. "< 0"
            allowed = high
        else:  # e.g. ">= 0 and < 1"
            allowed = f"{low} {self.low}" + (f" and {high}" if high else "")
        allowed = f"odd and {allowed}" if self.odd else allowed
        return f"{key}={value!r} is not allowed; it must be {allowed.rstrip()}"

    def allows(self, value: float) -> bool:
        above = value >= self.low if self.inclusive else value > self.low
        below = self.high is None or (
            value <= self.high if self.high_inclusive else value < self.high
        )
        return above and below and not (self.odd and value % 2 != 1)


@dataclasses.dataclass(frozen=True)
class OneOf:
    """The values a text field allows (checked with the ranges); on a tuple field, the values
    each of its items may take."""

    values: tuple[str, ...]

    def problem(self, key: str, value: str | tuple[str, ...]) -> str | None:
        """Why `value` of field `key` is not allowed, or None."""
        items = value if isinstance(value, tuple) else (value,)
        bad = [item for item in items if item not in self.values]
        if not bad:
            return None
        if isinstance(value, tuple):
            return f"{key}={value!r}: {bad} not among the allowed {self.values}"
        return f"{key}={value!r} is not one of {self.values}"


IMPORT_PATH = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*")


def is_import_path(text: object) -> bool:
    """Whether `text` has the form `package.module:Class`."""
    return isinstance(text, str) and IMPORT_PATH.fullmatch(text) is not None


def import_class(path: str, base: type | str, key: str) -> type:
    """The class the import path `path` (`package.module:Class`) names, a subclass of `base`
    (a class, or itself an import path, resolved first); ValueError in one line naming the
    setting `key`, and the module or class that is missing or of the wrong kind."""
    if isinstance(base, str):
        base = import_class(base, object, "base")
    if not is_import_path(path):
        raise ValueError(f"{key}={path!r} is not an import path of the form package.module:Class")
    module_name, class_name = path.split(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as err:
        if err.name and module_name.startswith(err.name):
            raise ValueError(
                f"{key}={path!r}: no module named {err.name!r} (is its folder on PYTHONPATH, "
                "or its package installed?)"
            ) from None
        raise ValueError(f"{key}={path!r}: importing {module_name} failed: {err}") from None
    except Exception as err:  # the user's module raised while it was imported
        raise ValueError(
            f"{key}={path!r}: importing {module_name} failed: {type(err).__name__}: {err}"
        ) from None
    found = getattr(module, class_name, None)
    if found is None:
        where = getattr(module, "__file__", None) or module_name
        raise ValueError(f"{key}={path!r}: module {module_name} ({where}) has no {class_name!r}")
    if not (isinstance(found, type) and issubclass(found, base)):
        what = "" if isinstance(found, type) else f"a {type(found).__name__}, "
        raise ValueError(
            f"{key}={path!r}: {class_name} is {what}not a subclass of "
            f"{base.__module__}.{base.__qualname__}"
        )
    return found


@dataclasses.dataclass(frozen=True)
class OneOfOrClass(OneOf):
    """A text field that takes one of `values` or the import path of a subclass of `base` (an
    import path itself, resolved when a value is checked: the config loads without it)."""

    base: str = ""

    def problem(self, key: str, value: str | tuple[str, ...]) -> str | None:
        if value in self.values:
            return None
        if not is_import_path(value):
            return (
                f"{key}={value!r} is not one of {self.values} or an import path "
                "package.module:Class"
            )
        try:
            import_class(value, self.base, key)
        except ValueError as err:
            return str(err)
        return None


AtLeast1 = Annotated[int, Bounds(1)]
NonNegativeInt = Annotated[int, Bounds(0)]
NonNegative = Annotated[float, Bounds(0)]
Positive = Annotated[float, Bounds(0, inclusive=False)]
Finite = Annotated[float, Bounds(-math.inf)]
Unit = Annotated[float, Bounds(0, 1)]


def bounds(cls: type, prefix: str = "") -> dict[str, Bounds | OneOf]:
    """The `Bounds` (or `OneOf`) of every field of dataclass `cls` that has one, by dotted key,
    nested sections included."""
    out = {}
    for name, hint in typing.get_type_hints(cls, include_extras=True).items():
        if dataclasses.is_dataclass(hint):
            out.update(bounds(hint, f"{prefix}{name}."))
        for extra in getattr(hint, "__metadata__", ()):
            if isinstance(extra, (Bounds, OneOf)):
                out[prefix + name] = extra
    return out


def range_problems(obj: Any, prefix: str = "") -> list[str]:
    """One message per field of the config `obj` whose value is outside its `Bounds` (or not
    one of its `OneOf`); the keys named start with `prefix` (the section `obj` is)."""
    out = []
    for key, allowed in bounds(type(obj), prefix).items():
        value = obj
        for part in key.removeprefix(prefix).split("."):
            value = getattr(value, part)
        problem = allowed.problem(key, value)
        if problem:
            out.append(problem)
    return out


def check_ranges(obj: Any, prefix: str = "") -> None:
    """ValueError naming every field of `obj` outside its range: for a config that stands alone
    and checks itself (`__post_init__`)."""
    problems = range_problems(obj, prefix)
    if problems:
        raise ValueError("; ".join(problems))


def field_docs(cls: type) -> dict[str, str]:
    """The `#:` comment of each field of dataclass `cls` that has one, by field name (see the
    module docstring); {} where the class's source cannot be read."""
    # the lines of its module, cached, from its class line to the next unindented code: help
    # texts are made at import, where inspect.getsource would parse the module for each class
    lines = linecache.getlines(inspect.getsourcefile(cls) or "")
    start = [k for k, line in enumerate(lines) if re.match(rf"class {cls.__name__}\b", line)]
    body = lines[start[0] + 1 :] if start else []
    names = {f.name for f in dataclasses.fields(cls)}
    docs: dict[str, str] = {}
    above: list[str] = []
    for line in itertools.takewhile(lambda line: line[0] in " \t\n#", body):
        code, marker, comment = line.partition("#:")
        code, comment = code.strip(), comment.strip()
        if marker and not code:  # a comment line above a field
            above.append(comment)
            continue
        name = code.partition(":")[0]
        if name in names and name not in docs:
            docs[name] = " ".join([*above, comment]).strip()
        above = []
    return {name: doc for name, doc in docs.items() if doc}


def from_dict(cls: type, data: Any, prefix: str = "", what: str | None = None) -> Any:
    """An instance of dataclass `cls` from the mapping `data` (see the module docstring)."""
    section = prefix.rstrip(".")
    where = section or cls.__name__
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise FieldError(f"{where} must be a mapping of its fields, got {data!r}")
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    unknown = sorted(set(data) - set(names))
    if unknown:
        what = what or f"{cls.__name__} fields"
        raise FieldError(
            f"unknown {what} {[prefix + k for k in unknown]}{did_you_mean(unknown, names, prefix)}"
            f"; allowed: {names}"
        )
    values = {}
    for name in names:
        if name not in data:
            continue
        hint, key = hints[name], prefix + name
        if dataclasses.is_dataclass(hint):
            values[name] = from_dict(hint, data[name], key + ".")
        else:
            values[name] = check_value(data[name], hint, key)
    try:
        return cls(**values)
    except ZeroDivisionError:  # a rule of the section divides by one of its fields
        zeros = [prefix + k for k, v in values.items() if type(v) in (int, float) and v == 0]
        raise FieldError(f"{where}: {zeros} must not be 0 (they divide other fields)") from None
    except FieldError:
        raise
    except ValueError as err:
        raise FieldError(f"{section}: {err}" if section else str(err)) from None


def did_you_mean(unknown: list[str], names: list[str], prefix: str = "") -> str:
    """ " (did you mean 'x.b'?)" for the allowed names closest to the unknown ones, or ""."""
    guesses = []
    for key in unknown:
        close = difflib.get_close_matches(str(key), names, n=1, cutoff=0.75)
        guesses += [f"{prefix}{c}" for c in close if f"{prefix}{c}" not in guesses]
    if not guesses:
        return ""
    return " (did you mean " + " or ".join(repr(g) for g in guesses) + "?)"


def check_value(value: Any, hint: Any, key: str) -> Any:
    """`value` converted as the module docstring says, or FieldError naming `key` and `hint`."""
    try:
        return _convert(value, hint)
    except TypeError:
        raise FieldError(
            f"{key}={value!r} has type {type(value).__name__}; expected {type_name(hint)}"
        ) from None


def fits(value: Any, hint: Any) -> bool:
    """Whether `value` already has the type `hint` asks for (an int counts as a float): whether
    `_convert` takes it without its other conversions."""
    try:
        _convert(value, hint, strict=True)
    except TypeError:
        return False
    return True


def type_name(hint: Any) -> str:
    if typing.get_origin(hint) in (dict, Mapping):
        return "a mapping"
    return hint.__name__ if isinstance(hint, type) else str(hint)


def _convert(value: Any, hint: Any, strict: bool = False) -> Any:
    """`value` as `hint`; TypeError when it does not fit. `strict`: int -> float only (no list
    taken for a tuple, no other mapping for a dict, no string for a float)."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        for arg in typing.get_args(hint):
            if fits(value, arg):
                return _convert(value, arg, strict)
        raise TypeError
    if origin is tuple and isinstance(value, tuple if strict else (list, tuple)):
        args = typing.get_args(hint)
        if len(args) == 2 and args[1] is Ellipsis:
            args = (args[0],) * len(value)
        if len(value) != len(args):
            raise TypeError
        return tuple(_convert(v, a, strict) for v, a in zip(value, args, strict=True))
    if origin in (dict, Mapping) and isinstance(value, origin if strict else Mapping):
        return dict(value)
    if hint is float and isinstance(value, str) and not strict:  # YAML 1.1 reads 1e-3 as text
        try:
            return float(value)
        except ValueError:
            raise TypeError from None
    if hint is Any:
        return value
    if hint in (int, float) and isinstance(value, bool):
        raise TypeError
    if hint is float and isinstance(value, int | float):
        return float(value)
    if isinstance(value, origin or hint):
        return value
    raise TypeError
