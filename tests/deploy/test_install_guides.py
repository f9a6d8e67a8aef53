"""docs/install/*.md (the cloud install guides) against the code: they drift, this fails.

Conventions the guides follow, and this test reads:

* A `helm install|upgrade|template` command whose chart is `charts/gpufleet` (in a fenced
  console/sh block; `\\` continues a line) may only `--set`/`--set-string` keys that
  `charts/gpufleet/values.schema.json` declares; under a map (`additionalProperties` is a
  schema, as for `agent.nodeSelector`) any key is one (`\\.` escapes a dot in it, as in helm),
  and a string value that `--set` would type (`true`, `1`) must come with `--set-string`.
  `--set` on other charts (the GPU Operator's) is not ours and is not checked.
* A fenced ```yaml block whose first line is `# values.yaml` holds gpufleet chart values:
  every key path must exist in the schema, and an `agent.config` in it must load as an agent
  config and plan the shipped GPU fixtures.
* Every other ```yaml document with `apiVersion` and `kind` is a Kubernetes object: built-in
  kinds validate against the Kubernetes schemas like `deploy/samples/` (strict); custom kinds
  are skipped only when listed in `SKIPPED_KINDS` with the reason.
* Every relative markdown link resolves to a file, and a `#fragment` to one of its headings.
* Every guide opens with its Status line saying it was not run on that platform.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import Any, Iterator

import pytest
import yaml

from gpufleet.agent import configsource, fake
from gpufleet.agent.inventory import inventory
from gpufleet.agent.plan import plan_resources
from tests.deploy import manifests
from tests.deploy.manifests import ROOT

GUIDES_DIR = ROOT / "docs" / "install"
CHART = ROOT / "charts" / "gpufleet"
GUIDES = ["README.md", "aks.md", "eks.md", "gke.md", "gpu-operator.md"]
LINKED_FROM = [ROOT / "docs" / "install.md"]
"""Other pages whose links into docs/install/ are checked too."""
VALUES_MARK = "# values.yaml"

SKIPPED_KINDS: dict[tuple[str, str], str] = {
    ("karpenter.sh/v1", "NodePool"): "Karpenter CRD: kubernetes-validate has no schema for it; "
                                     "the live Karpenter tests apply NodePools to the real CRD",
    ("karpenter.k8s.aws/v1", "EC2NodeClass"): "Karpenter AWS provider CRD: no schema in kubernetes-validate, "
                                              "and the AWS provider is not built here",
}

FENCE = re.compile(r"^```([\w-]*)[^\n]*\n(.*?)^```", re.M | re.S)
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
REF_LINK = re.compile(r"^\[[^\]]+\]:\s*(\S+)", re.M)


def _text(name: str) -> str:
    return (GUIDES_DIR / name).read_text()


def _blocks(text: str) -> Iterator[tuple[str, str]]:
    """(language, body) of every fenced block."""
    for m in FENCE.finditer(text):
        yield m.group(1).lower(), m.group(2)


def _schema() -> dict[str, Any]:
    schema: dict[str, Any] = json.loads((CHART / "values.schema.json").read_text())
    return schema


def _schema_lookup(path: list[str], schema: dict[str, Any]) -> tuple[dict[str, Any] | None, str | None]:
    """(the schema of the value at `path` (a.b.c), None) when the chart has that value, else
    (None, why not). The schema is None below a free-form object, where anything goes.

    A key is a value when a `properties` entry names it, or when the object it is in is a map:
    `additionalProperties` is a schema (agent.nodeSelector: any label key, a string value).
    An object with neither (`type: object` alone, like `resources`) is free-form below.
    """
    node = schema
    for i, part in enumerate(path):
        props = node.get("properties")
        extra = node.get("additionalProperties", True)
        if props is not None and part in props:
            node = props[part]
        elif isinstance(extra, dict):
            node = extra  # a map: every key is allowed, its value follows `extra`
        elif props is None and node.get("type") == "object" and extra is not False:
            return None, None  # a free-form object (resources): anything below is allowed
        elif props is None:
            return None, f"{'.'.join(path)}: {'.'.join(path[:i])} has no keys"
        else:
            where = ".".join(path[:i]) or "the top level"
            return None, f"{'.'.join(path)}: no key {part!r} under {where} (known: {', '.join(sorted(props))})"
    return node, None


def _schema_problem(path: list[str], schema: dict[str, Any]) -> str | None:
    """Why `path` (a.b.c) is not a value of the chart, or None when it is."""
    return _schema_lookup(path, schema)[1]


HELM_TYPED = re.compile(r"^(true|false|null|-?[1-9]\d*|0)$")
"""What `helm --set` turns into a bool, null or integer (`--set-string` keeps it a string)."""


def _set_problem(flag: str, key: str, value: str, schema: dict[str, Any]) -> str | None:
    """Why `flag key=value` on charts/gpufleet would fail the chart's schema, or None."""
    node, why = _schema_lookup(_set_path(key), schema)
    if why:
        return why
    if flag == "--set" and node and node.get("type") == "string" and HELM_TYPED.match(value):
        return f"{key}={value}: --set makes {value!r} a {'null' if value == 'null' else 'non-string'}, " \
               f"the chart wants a string: use --set-string"
    return None


# -- helm commands -----------------------------------------------------------------------------

def _commands(text: str) -> Iterator[list[str]]:
    """Shell commands of console/sh/bash blocks, `$ ` prompts removed, `\\` lines joined."""
    for lang, body in _blocks(text):
        if lang not in ("console", "sh", "bash", "shell"):
            continue
        joined = re.sub(r"\\\n", " ", body)
        for line in joined.splitlines():
            line = line.strip()
            if lang == "console":
                if not line.startswith("$ "):
                    continue
                line = line[2:]
            for part in re.split(r"\s(?:&&|;)\s", line.split(" # ")[0]):
                try:
                    words = shlex.split(part)
                except ValueError as exc:  # a quote spanning lines (a JSON argument): not helm's
                    if part.split()[0] == "helm":
                        raise AssertionError(f"cannot split command {part!r}: {exc}") from None
                    continue
                if words:
                    yield words


def _gpufleet_helm_sets(text: str) -> Iterator[tuple[str, str, str]]:
    """(flag, key, value) of every --set/--set-string in a helm command installing charts/gpufleet."""
    for words in _commands(text):
        if words[0] != "helm" or len(words) < 2 or words[1] not in ("install", "upgrade", "template"):
            continue
        if not any(w.rstrip("/") == "charts/gpufleet" for w in words):
            continue
        for i, w in enumerate(words):
            for flag in ("--set", "--set-string"):
                if w == flag:
                    key, _, value = words[i + 1].partition("=")
                    yield flag, key, value
                elif w.startswith(flag + "="):
                    key, _, value = w[len(flag) + 1:].partition("=")
                    yield flag, key, value


def _set_path(key: str) -> list[str]:
    """`a.b[0].c` -> [a, b, c] (list indices do not name schema properties); `\\.` escapes a dot."""
    parts = re.split(r"(?<!\\)\.", key)
    return [re.sub(r"\[\d+\]$", "", p).replace("\\.", ".") for p in parts]


@pytest.mark.parametrize("guide", GUIDES)
def test_every_helm_set_on_the_gpufleet_chart_is_a_chart_value(guide: str) -> None:
    schema = _schema()
    problems = [f"{flag} {key}: {why}" for flag, key, value in _gpufleet_helm_sets(_text(guide))
                if (why := _set_problem(flag, key, value, schema))]
    assert problems == [], f"{guide}: " + "; ".join(problems)


def test_the_guides_install_the_gpufleet_chart_with_values() -> None:
    """The check above is not vacuous: the guides do install the chart and set values."""
    sets = [_set_path(key) for g in GUIDES for _, key, _ in _gpufleet_helm_sets(_text(g))]
    for wanted in ("image.repository", "karpenter.enabled", "agent.enabled", "agent.runtimeClassName"):
        assert wanted.split(".") in sets, wanted
    assert any(path[:2] == ["agent", "nodeSelector"] and len(path) == 3 for path in sets)


_GUIDE_SNIPPET = """```console
$ helm install gpufleet charts/gpufleet --namespace gpufleet-system \\
    {}
```
"""


@pytest.mark.parametrize(("flags", "problem"), [
    ("--set image.repository=r --set agent.enabled=false --set agent.runtimeClassName=nvidia", None),
    ("--set-string 'agent.nodeSelector.cloud\\.google\\.com/gke-accelerator=nvidia-l4'", None),
    ("--set-string agent.nodeSelector.accelerator=nvidia", None),
    ("--set=agent.nodeSelector.pool=gpu --set scheduler.resources.limits.cpu=4", None),
    ("--set agent.nodeSelectr.pool=gpu", "no key 'nodeSelectr' under agent"),
    ("--set agent.colour=blue", "no key 'colour' under agent"),
    ("--set dashboard.host=0.0.0.0", "no key 'host' under dashboard"),
    ("--set nodeSelector.pool=gpu", "no key 'nodeSelector' under the top level"),
    ("--set image.tag.major=1", "image.tag has no keys"),
    ("--set agent.nodeSelector.cloud.google.com/gke-accelerator=x", "agent.nodeSelector.cloud has no keys"),
    ("--set 'agent.nodeSelector.nvidia\\.com/gpu\\.present=true'", "use --set-string"),
    ("--set agent.runtimeClassName=null", "use --set-string"),
])
def test_the_set_check_accepts_map_keys_and_rejects_unknown_keys(flags: str, problem: str | None) -> None:
    """Keys under agent.nodeSelector (a map of label to string) are free; elsewhere a key the
    schema does not name is an error, as helm's schema check makes it."""
    schema = _schema()
    found = [why for flag, key, value in _gpufleet_helm_sets(_GUIDE_SNIPPET.format(flags))
             if (why := _set_problem(flag, key, value, schema))]
    if problem is None:
        assert found == []
    else:
        assert len(found) == 1 and problem in found[0], found


def test_a_values_block_may_name_node_selector_labels_but_not_unknown_keys() -> None:
    schema = _schema()
    ok = {"agent": {"nodeSelector": {"cloud.google.com/gke-accelerator": "nvidia-l4"}, "runtimeClassName": "nvidia"},
          "dashboard": {"enabled": True, "port": 8081}}
    assert [p for p in _leaf_paths(ok, []) if _schema_problem(p, schema)] == []
    bad = {"agent": {"nodeSelectors": {"pool": "gpu"}}}
    assert [_schema_problem(p, schema) for p in _leaf_paths(bad, [])] == [
        "agent.nodeSelectors.pool: no key 'nodeSelectors' under agent (known: config, enabled, "
        "nodeSelector, resources, runtimeClassName)"]


# -- values blocks -----------------------------------------------------------------------------

def _values_blocks(text: str) -> Iterator[dict[str, Any]]:
    for lang, body in _blocks(text):
        if lang in ("yaml", "yml") and body.lstrip().startswith(VALUES_MARK):
            doc = yaml.safe_load(body)
            assert isinstance(doc, dict), f"a {VALUES_MARK} block must be a mapping"
            yield doc


def _leaf_paths(node: Any, prefix: list[str]) -> Iterator[list[str]]:
    if isinstance(node, dict) and node:
        for k, v in node.items():
            yield from _leaf_paths(v, [*prefix, str(k)])
    else:
        yield prefix


@pytest.mark.parametrize("guide", GUIDES)
def test_every_values_block_uses_chart_values_only(guide: str) -> None:
    schema = _schema()
    for values in _values_blocks(_text(guide)):
        problems = [why for path in _leaf_paths(values, []) if (why := _schema_problem(path, schema))]
        assert problems == [], f"{guide}: " + "; ".join(problems)


@pytest.mark.parametrize("guide", GUIDES)
def test_an_agent_config_in_a_values_block_loads_and_plans(guide: str) -> None:
    for values in _values_blocks(_text(guide)):
        text = (values.get("agent") or {}).get("config")
        if not text:
            continue
        config = configsource.load_text(text, f"{guide} agent.config")
        assert config.warnings == ()
        for fixture in fake.fixture_names():
            backend = fake.load_fixture(fixture)
            assert plan_resources(inventory(backend.system(), backend.devices()), config), fixture


def test_there_is_a_values_block() -> None:
    assert any(list(_values_blocks(_text(g))) for g in GUIDES), f"no {VALUES_MARK} block: convention unused"


# -- Kubernetes objects ------------------------------------------------------------------------

def _objects(text: str) -> Iterator[dict[str, Any]]:
    for lang, body in _blocks(text):
        if lang not in ("yaml", "yml") or body.lstrip().startswith(VALUES_MARK):
            continue
        for doc in yaml.safe_load_all(body):
            if isinstance(doc, dict) and "apiVersion" in doc and "kind" in doc:
                yield doc


@pytest.mark.parametrize("guide", GUIDES)
def test_every_kubernetes_object_validates_or_is_a_named_skip(guide: str) -> None:
    for obj in _objects(_text(guide)):
        if (obj["apiVersion"], obj["kind"]) in SKIPPED_KINDS:
            continue
        assert manifests.validate_builtin(obj) == "1.34", f"{guide}: {manifests.key(obj)}"


def test_gpu_pods_in_the_guides_are_gpufleets() -> None:
    pods = [(g, o) for g in GUIDES for o in _objects(_text(g)) if o["kind"] == "Pod"]
    assert pods
    for guide, pod in pods:
        assert pod["spec"].get("schedulerName") == "gpufleet", f"{guide}: {manifests.key(pod)}"


def test_the_skip_list_names_only_kinds_the_guides_use() -> None:
    used = {(o["apiVersion"], o["kind"]) for g in GUIDES for o in _objects(_text(g))}
    assert set(SKIPPED_KINDS) <= used, f"stale entries: {set(SKIPPED_KINDS) - used}"


# -- links -------------------------------------------------------------------------------------

def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"`([^`]*)`", r"\1", heading.strip()).lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    text = FENCE.sub("", path.read_text())
    return {_slug(m.group(1)) for m in re.finditer(r"^#{1,6}\s+(.+?)\s*#*$", text, re.M)}


def _relative_links(path: Path) -> Iterator[str]:
    text = FENCE.sub("", path.read_text())
    text = re.sub(r"`[^`\n]*`", "", text)
    for target in [*LINK.findall(text), *REF_LINK.findall(text)]:
        if not re.match(r"^[a-z][a-z0-9+.-]*:", target):  # not http:, https:, mailto:
            yield target


@pytest.mark.parametrize("page", [GUIDES_DIR / g for g in GUIDES] + LINKED_FROM, ids=lambda p: p.name)
def test_every_relative_link_resolves(page: Path) -> None:
    problems = []
    for target in _relative_links(page):
        file_part, _, fragment = target.partition("#")
        dest = (page.parent / file_part).resolve() if file_part else page
        if not dest.exists():
            problems.append(f"{target}: no file {dest.relative_to(ROOT) if dest.is_relative_to(ROOT) else dest}")
        elif fragment and dest.suffix == ".md" and fragment not in _anchors(dest):
            problems.append(f"{target}: no heading with anchor #{fragment} in {dest.name}")
    assert problems == [], f"{page.name}: " + "; ".join(problems)


def test_docs_install_md_links_every_guide() -> None:
    text = (ROOT / "docs" / "install.md").read_text()
    for guide in GUIDES:
        assert f"(install/{guide})" in text, guide


# -- status --------------------------------------------------------------------------------------

@pytest.mark.parametrize("guide", GUIDES)
def test_every_guide_says_it_was_not_run_there(guide: str) -> None:
    head = "\n".join(_text(guide).splitlines()[:6])
    assert "Status" in head and "NOT" in head, f"{guide}: no Status line saying it was not run"
