"""A location-aware view of a YAML document, so every error names file, line and key.

`yaml.safe_load` forgets where a value came from; `yaml.compose` keeps a mark on every
node. `Loc` wraps one node with its dotted path (`jobs[2].resources.limits`) and converts
it to a Python value on request, raising `ModelError("file:line: path", problem)`. It also
rejects what `safe_load` would accept silently: duplicate keys (the last would win) and
keys a mapping does not know (a typo would otherwise be ignored).
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

import yaml

from gpufleet.model import ModelError, documents, read_text


def compose(path: Path) -> Loc:
    """The document root of `path`; YAML syntax errors become ModelErrors with their line."""
    try:
        root = documents.compose(read_text(path))
    except yaml.MarkedYAMLError as exc:
        line = exc.problem_mark.line + 1 if exc.problem_mark else 1
        raise ModelError(f"{path}:{line}", f"invalid YAML: {exc.problem}") from exc
    except yaml.YAMLError as exc:  # the reader's: a character YAML does not allow
        raise ModelError(f"{path}:1", f"invalid YAML: {str(exc).splitlines()[0]}") from None
    if root is None:
        raise ModelError(f"{path}:1", "the file holds no YAML document")
    return Loc(root, str(path), "", documents.Constructor())


class Loc:
    """One YAML node, where it is, and typed accessors that fail with that location."""

    def __init__(self, node: yaml.Node, file: str, path: str, constructor: documents.Constructor):
        self.node = node
        self.file = file
        self.path = path
        self._constructor = constructor

    @property
    def where(self) -> str:
        return f"{self.file}:{self.node.start_mark.line + 1}: {self.path or '(document)'}"

    def error(self, problem: str) -> ModelError:
        return ModelError(self.where, problem)

    def mapping(self, known: Iterable[str] = (), required: Iterable[str] = ()) -> dict[str, Loc]:
        """Keys to located values. `known` empty = any string keys (labels, resource lists)."""
        if not isinstance(self.node, yaml.MappingNode):
            raise self.error(f"expected a mapping, got {self._kind()}")
        allowed = set(known)
        result: dict[str, Loc] = {}
        for key_node, value_node in self.node.value:
            key = Loc(key_node, self.file, self.path, self._constructor).scalar()
            key_text, shown = str(key), documents.printable(key)
            child = Loc(value_node, self.file, f"{self.path}.{shown}" if self.path else shown, self._constructor)
            if allowed and key_text not in allowed:
                raise child.error(f"unknown key; expected one of {', '.join(sorted(allowed))}")
            if key_text in result:
                raise child.error("duplicate key")
            result[key_text] = child
        for key in required:
            if key not in result:
                raise self.error(f"missing required key {key!r}")
        return result

    def sequence(self) -> list[Loc]:
        if not isinstance(self.node, yaml.SequenceNode):
            raise self.error(f"expected a list, got {self._kind()}")
        return [Loc(n, self.file, f"{self.path}[{i}]", self._constructor) for i, n in enumerate(self.node.value)]

    def is_scalar(self) -> bool:
        return isinstance(self.node, yaml.ScalarNode)

    def scalar(self) -> object:
        if not isinstance(self.node, yaml.ScalarNode):
            raise self.error(f"expected a single value, got {self._kind()}")
        try:
            value: object = self._constructor.construct_object(self.node)
        except yaml.YAMLError as exc:  # a tag it does not know (!foo), a timestamp 2026-13-45, ...
            raise self.error(getattr(exc, "problem", None) or str(exc).splitlines()[0]) from None
        return value

    def text(self) -> str:
        value = self.scalar()
        if not isinstance(value, str) or not value:
            raise self.error(f"expected a non-empty string, got {value!r}")
        return value

    def integer(self, minimum: int = 0, maximum: int | None = None) -> int:
        value = self.scalar()
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.error(f"expected a whole number, got {value!r}")
        if value < minimum:
            raise self.error(f"must be at least {minimum}, got {value}")
        if maximum is not None and value > maximum:
            raise self.error(f"must be at most {maximum:,}, got {value:,}")
        return value

    def seconds(self) -> float:
        value = self.scalar()
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < float("inf"):
            raise self.error(f"expected a non-negative number of seconds, got {value!r}")
        return float(value)

    def boolean(self) -> bool:
        value = self.scalar()
        if not isinstance(value, bool):
            raise self.error(f"expected true or false, got {value!r}")
        return value

    def quantity(self) -> str | int:
        """A Kubernetes quantity as `model.units` takes it (YAML may read `0.5` as a float)."""
        value = self.scalar()
        if isinstance(value, float):
            return repr(value)
        if isinstance(value, bool) or not isinstance(value, (str, int)):
            raise self.error(f"expected a quantity such as 500m, 4Gi or 2, got {value!r}")
        return value

    def label(self) -> str:
        """A Kubernetes string value (label, taint or toleration value); YAML numbers become their text."""
        value = self.scalar()
        if value is None or isinstance(value, bool):
            raise self.error(f"expected a string value, got {value!r} (quote it)")
        return str(value)

    def strings(self) -> dict[str, str]:
        """A string-to-string mapping (labels, nodeSelector)."""
        return {key: loc.label() for key, loc in self.mapping().items()}

    def _kind(self) -> str:
        if isinstance(self.node, yaml.MappingNode):
            return "a mapping"
        return "a list" if isinstance(self.node, yaml.SequenceNode) else "a single value"
