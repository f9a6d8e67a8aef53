"""Reading YAML and JSON that comes from outside: what PyYAML and `json` let through unchecked.

Every parser of a user's file (scenario, profile, agent config) and of a JSON annotation goes
through here, so that a hostile or broken document is a one-line error with its place, never a
traceback or a hang. Found by fuzzing (docs/security.md, "Fuzzing"). Decisions:

- `SafeLoader` is PyYAML's safe loader plus four checks. Nesting deeper than `MAX_DEPTH` is an
  error (PyYAML's composer recurses once per level and dies with RecursionError near 500).
  A scalar that PyYAML resolves but cannot build (`2026-13-45` as a timestamp, an integer of
  more than 4,300 digits, which Python refuses to convert) is an error at that scalar, not a
  ValueError from inside PyYAML. An alias to a node that contains it (a recursive document)
  is an error: no config means one. And aliases may not blow the document up ("billion
  laughs"): the tree as the parser's callers walk it, each alias counted in full, may hold at
  most `ALIAS_EXPANSION` times the nodes written (and at least `MIN_EXPANDED_NODES`), the
  same idea as go-yaml's alias-ratio check that kubectl relies on.
- All of these are raised as `yaml.MarkedYAMLError`s with a mark, so callers keep their one
  `except yaml.YAMLError` and their own message format.
- `loads_json` is `json.loads` with the two failures `json` does not report as
  `JSONDecodeError`: deep nesting (RecursionError) and over-long integers (ValueError).
- `printable` writes a key or name from the document into an error message on one line.
"""

from __future__ import annotations

import json
from typing import Any, Callable

import yaml

from gpufleet.model.errors import ModelError

MAX_DEPTH = 100
"""Deepest nesting of mappings and lists, aliases followed; no config or scenario needs 20."""
ALIAS_EXPANSION = 10
MAX_INT_BITS = 14_000
"""About 4,200 decimal digits: an integer Python can still print (its limit is 4,300)."""
MIN_EXPANDED_NODES = 10_000


def printable(text: object) -> str:
    """`text` as is when it prints on one line, else its Python repr (escapes and quotes)."""
    s = str(text)
    return s if s.isprintable() else repr(s)


def _short(value: str) -> str:
    return repr(value) if len(value) <= 40 else repr(value[:40]) + "..."


def _reason(exc: Exception) -> str:
    """One line for a ValueError of Python's own (`int()`'s digit limit reads as advice to call
    sys.set_int_max_str_digits, which is no help to the person who wrote the file)."""
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return "a number of more than 4,300 digits" if text.startswith("Exceeds the limit") else text


def _construct(base: Callable[[yaml.Node, bool], Any], node: yaml.Node, deep: bool) -> Any:
    try:
        value = base(node, deep)
        if isinstance(value, int) and value.bit_length() > MAX_INT_BITS:
            # 0xfff... of 5,000 digits: int() takes hex of any length, and then every `{value!r}`
            # in an error message fails with ValueError (Python prints no more than 4,300 digits).
            raise ValueError("Exceeds the limit")
        return value
    except (ValueError, OverflowError, AttributeError, TypeError) as exc:
        # Implicit timestamps (2026-13-45) and integers of more than 4,300 digits land here, and
        # explicit tags on text they do not fit (`!!timestamp x` is an AttributeError in PyYAML).
        text = _short(node.value) if isinstance(node, yaml.ScalarNode) else "this value"
        why = _reason(exc) if isinstance(exc, (ValueError, OverflowError)) else "not in that form"
        raise yaml.constructor.ConstructorError(
            None, None, f"cannot read {text} as {node.tag.rsplit(':', 1)[-1]}: {why}", node.start_mark) from None


class Constructor(yaml.constructor.SafeConstructor):
    """PyYAML's safe constructor; a scalar it resolves but cannot build is a ConstructorError."""

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        return _construct(super().construct_object, node, deep)


class SafeLoader(yaml.SafeLoader):
    """`yaml.SafeLoader` with the checks of this module."""

    def __init__(self, stream: str | bytes) -> None:
        super().__init__(stream)
        self._depth = 0

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        return _construct(super().construct_object, node, deep)

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        if self.check_event(yaml.AliasEvent):
            return super().compose_node(parent, index)
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                event: yaml.Event = self.peek_event()  # type: ignore[no-untyped-call]
                mark: yaml.Mark = event.start_mark  # type: ignore[assignment]  # always the pure-Python Mark here
                raise yaml.composer.ComposerError(None, None, f"nesting deeper than {MAX_DEPTH} levels", mark)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def compose_document(self) -> yaml.Node | None:
        node = super().compose_document()
        if node is not None:
            check_aliases(node)
        return node


def check_aliases(root: yaml.Node) -> None:
    """Raise a ComposerError if aliases make `root` recursive, too deep or too big when expanded.

    One iterative depth-first walk over the node graph (no recursion: the graph may be deep),
    computing for each node its depth and its size with every alias expanded."""
    depth: dict[int, int] = {}
    size: dict[int, int] = {}
    entered: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        children = _children(node)
        if done:
            depth[key] = 1 + max((depth[id(c)] for c in children), default=0)
            size[key] = 1 + sum(size[id(c)] for c in children)
            entered.discard(key)
            if depth[key] > MAX_DEPTH:
                raise yaml.composer.ComposerError(None, None, f"aliases nest this deeper than {MAX_DEPTH} levels",
                                                  node.start_mark)
            continue
        if key in depth:
            continue
        if key in entered:
            raise yaml.composer.ComposerError(None, None, "an alias refers to a node that contains it",
                                              node.start_mark)
        entered.add(key)
        stack.append((node, True))
        stack.extend((c, False) for c in children if id(c) not in depth)
    limit = max(ALIAS_EXPANSION * len(depth), MIN_EXPANDED_NODES)
    if size[id(root)] > limit:
        raise yaml.composer.ComposerError(None, None, f"aliases expand the document to {size[id(root)]:,} values, "
                                                      f"more than {limit:,}; write the repeated parts out",
                                          root.start_mark)


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    return []


def safe_load(text: str) -> Any:
    """`yaml.safe_load` with this module's checks; every failure is a `yaml.YAMLError`."""
    return yaml.load(text, Loader=SafeLoader)  # noqa: S506 (SafeLoader is a safe loader)


def compose(text: str) -> yaml.Node | None:
    """`yaml.compose` with this module's checks; every failure is a `yaml.YAMLError`."""
    return yaml.compose(text, Loader=SafeLoader)


def loads_json(text: str | bytes, where: str) -> Any:
    """`json.loads`; anything it cannot read is a ModelError(`where`, "is not valid JSON: ...")."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ModelError(where, f"is not valid JSON: {exc}") from None
    except RecursionError:
        raise ModelError(where, "is not valid JSON: nested too deeply") from None
    except (ValueError, TypeError) as exc:  # an integer of more than 4,300 digits; bytes not UTF-8
        raise ModelError(where, f"is not valid JSON: {_reason(exc)}") from None
