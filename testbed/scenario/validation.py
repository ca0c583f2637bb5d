"""Reading and checking a scenario: YAML without surprises, then shape, then meaning.

A scenario is checked completely before anything is built: first its shape (the models of
`testbed.scenario.schema`, unknown keys forbidden), then its meaning against the fabric it
describes (host and switch names, link adjacency, event times inside the run). Both kinds of
mistake surface as one `ScenarioError` whose message starts with the key path, e.g.
``events[2].link: spine1 and spine2 are not adjacent``, so a typo costs the user a second, not a
torn-down fabric. Validation computes the topology with the pure `topologies` module only: it
needs no root, creates nothing and takes milliseconds.
"""

from __future__ import annotations

import difflib
import re
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from contracts.schema import format_loc, reason_of
from contracts.workloads import WorkloadSpecError, check_hosts
from testbed.scenario.schema import (
    ACTIONS,
    EVENT_MODELS,
    TRANSPORTS,
    WORKLOAD_KINDS,
    WORKLOAD_MODELS_BY_KIND,
    AllreduceWorkload,
    Event,
    Expect,
    Flap,
    IncastWorkload,
    LinkEvent,
    PlaneEvent,
    Scenario,
    SwitchEvent,
    TopologySpec,
)
from topologies import Fabric, TopologyError


class ScenarioError(ValueError):
    """A scenario is invalid. `str()` is one line: ``[file: ]key.path: reason``."""

    def __init__(self, path: str, reason: str, source: str | None = None) -> None:
        self.path = path
        self.reason = reason
        self.source = source
        head = f"{source}: " if source else ""
        super().__init__(f"{head}{path}: {reason}" if path else f"{head}{reason}")


def load_scenario(path: str | Path) -> Scenario:
    """Read and fully validate a scenario file; raise one ScenarioError naming file and key."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ScenarioError("", f"cannot read: {exc.strerror or exc}", str(path)) from None
    try:
        data = yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark is not None else "yaml"
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ScenarioError(where, problem, str(path)) from None
    try:
        return validate(data)
    except ScenarioError as exc:
        raise ScenarioError(exc.path, exc.reason, str(path)) from None


def validate(data: Any) -> Scenario:
    """Validate a parsed scenario (a dict); raise one ScenarioError naming the key path."""
    if not isinstance(data, dict):
        raise ScenarioError("", f"a scenario must be a mapping of keys, got {type(data).__name__}")
    try:
        scenario = Scenario.model_validate(data)
    except ValidationError as exc:
        raise _first_error(exc, data) from None
    _check_meaning(scenario)
    return scenario


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate keys, which PyYAML would silently overwrite."""


def _construct_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode) -> dict:
    seen: set = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r}", key_node.start_mark
            )
        seen.add(key)
    return loader.construct_mapping(node)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)

_KNOWN_KEYS: dict[tuple, list[str]] = {
    (): list(Scenario.model_fields),
    ("topology",): list(TopologySpec.model_fields),
    ("expect",): list(Expect.model_fields),
}


def _strip_tags(loc: tuple) -> tuple:
    """Drop the discriminator tag pydantic inserts: ('events', 0, 'loss', 'percent')."""
    if len(loc) >= 2 and loc[0] == "workload" and loc[1] in WORKLOAD_KINDS:
        return loc[:1] + loc[2:]
    if len(loc) >= 3 and loc[0] == "events" and isinstance(loc[1], int) and loc[2] in ACTIONS:
        return loc[:2] + loc[3:]
    return loc


def _first_error(exc: ValidationError, data: dict) -> ScenarioError:
    errors = exc.errors(include_url=False)
    # A misspelt key usually also makes a required one "missing"; the misspelling is the cause.
    err = next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])
    kind, loc, value = err["type"], _strip_tags(tuple(err["loc"])), err.get("input")
    path = format_loc(loc)
    if kind == "extra_forbidden":
        return ScenarioError(path, "unknown key" + _did_you_mean(loc, data))
    if kind == "missing":
        return ScenarioError(path, "required")
    if kind == "union_tag_invalid":
        field = "kind" if loc[0] == "workload" else "action"
        allowed = WORKLOAD_KINDS if field == "kind" else ACTIONS
        return ScenarioError(
            f"{path}.{field}",
            f"unknown {field} {_tag_value(value, field)!r} (one of {', '.join(allowed)})",
        )
    if kind == "union_tag_not_found":
        field = "kind" if loc[0] == "workload" else "action"
        return ScenarioError(f"{path}.{field}", "required")
    if kind == "literal_error" and loc[:1] == ("transport",):
        where = "transport" if isinstance(data.get("transport"), str) else path
        return ScenarioError(where, f"unknown transport {value!r} (one of {', '.join(TRANSPORTS)})")
    return ScenarioError(path, reason_of(err))


def _tag_value(value: Any, field: str) -> Any:
    return value.get(field) if isinstance(value, dict) else value


def _did_you_mean(loc: tuple, data: dict) -> str:
    parent, key = loc[:-1], loc[-1]
    known = _KNOWN_KEYS.get(parent)
    if known is None:
        node: Any = data
        for part in parent:
            node = node[part]
        known = _fields_of(parent, node)
    close = difflib.get_close_matches(str(key), known, n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _fields_of(parent: tuple, node: Any) -> list[str]:
    """Keys of the workload or event model that `node`'s tag selects (for "did you mean")."""
    tag_field, models = (
        ("kind", WORKLOAD_MODELS_BY_KIND)
        if parent[:1] == ("workload",)
        else ("action", EVENT_MODELS)
    )
    model = models.get(node.get(tag_field)) if isinstance(node, dict) else None
    return list(model.model_fields) if model is not None else []


def _check_meaning(sc: Scenario) -> None:
    """Everything the schema cannot know: names, adjacency, times, and sensible expectations."""
    try:
        fabric = sc.fabric()
    except TopologyError as exc:
        key, _, reason = str(exc).partition(": ")
        raise ScenarioError(f"topology.{key}", reason) from None
    hosts = fabric.hosts()
    w = sc.workload
    try:
        check_hosts(w, hosts, "workload")
    except WorkloadSpecError as exc:
        raise ScenarioError(exc.path, exc.reason) from None
    if isinstance(w, IncastWorkload) and w.srcs == "all" and len(hosts) < 2:
        raise ScenarioError("workload.srcs", "the fabric has no host besides the destination")
    if len(hosts) < 2:
        raise ScenarioError("topology.hosts_per_leaf", "a workload needs at least two hosts")

    for i, event in enumerate(sc.events):
        _check_event(f"events[{i}]", event, sc, fabric)

    if sc.expect.max_p100_over_p50 is not None and not isinstance(w, AllreduceWorkload):
        raise ScenarioError(
            "expect.max_p100_over_p50", f"needs step times; the {w.kind} workload has no steps"
        )
    if sc.expect.max_failover_ms is not None and not any(e.is_failure for e in sc.events):
        raise ScenarioError("expect.max_failover_ms", "the timeline has no failure event")


def _check_event(path: str, event: Event, sc: Scenario, fabric: Fabric) -> None:
    if event.at >= sc.duration_s:
        when = "at" if event.at == sc.duration_s else "after"
        raise ScenarioError(
            f"{path}.at", f"{event.at!r} is {when} the end (duration_s {sc.duration_s:g})"
        )
    if isinstance(event, LinkEvent):
        a, b = event.link
        for name in (a, b):
            if name not in fabric.nodes:
                raise ScenarioError(f"{path}.link", f"no node named {name}{_plane_hint(name, sc)}")
        if a == b:
            raise ScenarioError(f"{path}.link", f"both ends are {a}")
        try:
            fabric.link_between(a, b)
        except TopologyError:
            raise ScenarioError(f"{path}.link", f"{a} and {b} are not adjacent") from None
        if event.direction is not None and sorted(event.direction) != sorted(event.link):
            raise ScenarioError(
                f"{path}.direction",
                f"[{', '.join(event.direction)}] is not a direction of link [{a}, {b}]",
            )
        if isinstance(event, Flap) and event.end_s > sc.duration_s:
            raise ScenarioError(
                f"{path}.count",
                f"the flap runs until {event.end_s:g} s, after the end (duration_s {sc.duration_s:g})",
            )
    elif isinstance(event, SwitchEvent):
        node = fabric.nodes.get(event.node)
        if node is None:
            hint = _plane_hint(event.node, sc)
            raise ScenarioError(f"{path}.node", f"no switch named {event.node}{hint}")
        if node.kind == "host":
            raise ScenarioError(f"{path}.node", f"{event.node} is a host, not a switch")
    elif isinstance(event, PlaneEvent):
        planes = sc.topology.planes
        if event.plane > planes:
            raise ScenarioError(
                f"{path}.plane", f"no plane {event.plane} (topology.planes {planes})"
            )


def _plane_hint(name: str, sc: Scenario) -> str:
    planes = sc.topology.planes
    if planes > 1 and re.fullmatch(r"(leaf|spine)\d+", name):
        return f" (with {planes} planes switch names end in p1..p{planes}, e.g. {name}p1)"
    return ""
