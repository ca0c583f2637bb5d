"""Reading and checking a scenario: YAML without surprises, then shape, then meaning.

A scenario is checked completely before anything is built: first its shape (the models of
`testbed.scenario.schema`, unknown keys forbidden), then its meaning against the fabric it
describes (host and switch names, link adjacency, event times inside the run). Both kinds of
mistake surface as one `ScenarioError` whose message starts with the key path, e.g.
``events[2].link: spine1 and spine2 are not adjacent``, so a typo costs the user a second, not a
torn-down fabric. Every independent mistake comes out in one pass: the meaning of the parts
whose shape is right is checked even when another part's is wrong
(`testbed.scenario.sound_parts`); a check that reads a wrong part waits and says so
(``events[2].link: not checked until topology is valid``). Validation computes the topology
with the pure `topologies` module only: it needs no root, creates nothing and takes
milliseconds.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from contracts.schema import format_loc, reason_of
from contracts.trace import TraceError
from contracts.workloads import WorkloadSpecError, check_hosts
from testbed.scenario.capture import capture_ports
from testbed.scenario.key_paths import SweepError, grid, point_data
from testbed.scenario.random_failures import RandomFailureSpec, targets
from testbed.scenario.schema import (
    ACTIONS,
    ENDPOINT_TRANSPORT_NAMES,
    EVENT_MODELS,
    TRANSPORTS,
    WORKLOAD_KINDS,
    WORKLOAD_MODELS_BY_KIND,
    AllreduceWorkload,
    BulkWorkload,
    CaptureSpec,
    CcSpec,
    Event,
    Expect,
    Flap,
    Impair,
    IncastWorkload,
    LinkEvent,
    PlaneEvent,
    Scenario,
    SwitchEvent,
    TopologySpec,
    TraceWorkload,
    TransportSpec,
    Workload,
)
from testbed.scenario.sound_parts import SoundParts, sound_parts
from testbed.scenario.trace_workload import trace_graph
from testbed.scenario.transports import KERNEL_TRANSPORTS
from topologies import Fabric, TopologyError


@dataclass(frozen=True)
class Issue:
    """One mistake: the key path, the reason, and where in the file (1-based) when known."""

    path: str
    reason: str
    line: int | None = None
    col: int | None = None

    def text(self, source: str | None) -> str:
        where = ""
        if source and self.line is not None:
            where = f"{source}:{self.line}:{self.col}: "
        elif source:
            where = f"{source}: "
        return f"{where}{self.path}: {self.reason}" if self.path else f"{where}{self.reason}"


class ScenarioError(ValueError):
    """A scenario is invalid. `str()` is one line per mistake found, each
    ``[file:line:col: ]key.path: reason``, then one line per check that waits for another part
    to be valid (`waiting`: ``events[2].link: not checked until topology is valid``); `path` and
    `reason` are the first mistake's."""

    def __init__(
        self,
        path: str,
        reason: str,
        source: str | None = None,
        issues: Sequence[Issue] | None = None,
        waiting: Sequence[Issue] = (),
    ) -> None:
        self.issues = list(issues) if issues else [Issue(path, reason)]
        self.waiting = list(waiting)
        self.path, self.reason = self.issues[0].path, self.issues[0].reason
        self.source = source
        super().__init__("\n".join(i.text(source) for i in [*self.issues, *self.waiting]))

    def located(self, source: str, positions: Mapping[tuple, tuple[int, int]]) -> ScenarioError:
        """The same mistakes, named in file `source` at their line and column."""

        def placed(issues: list[Issue]) -> list[Issue]:
            out = [Issue(i.path, i.reason, *_position_of(i.path, positions)) for i in issues]
            out.sort(key=lambda i: (i.line is None, i.line or 0, i.col or 0))  # the file's order
            return out

        issues = placed(self.issues)
        return ScenarioError(issues[0].path, issues[0].reason, source, issues, placed(self.waiting))


class _Checks:
    """Runs the checks of meaning: each independent one runs and every mistake it finds is
    noted; one that reads a part that is not valid (`unsound`) waits, and says so."""

    def __init__(self, unsound: set[str]) -> None:
        self.unsound = unsound
        self.issues: list[Issue] = []
        self.waiting: list[Issue] = []

    def run(
        self,
        path: str,
        check: Callable[[], None],
        needs: Sequence[str] = (),
        what: str = "",
        quiet: bool = False,
    ) -> bool:
        """Run `check` unless a part it `needs` is unsound: then note (unless `quiet`) that
        `path` (`what` of it) waits. True if it ran and found nothing."""
        blocked = [part for part in needs if part in self.unsound]
        if blocked:
            if not quiet:
                verb = "are" if len(blocked) > 1 or blocked[0] in _PLURAL_PARTS else "is"
                parts = " and ".join(blocked)
                self.waiting.append(Issue(path, f"{what}not checked until {parts} {verb} valid"))
            return False
        found = len(self.issues)
        _collect(self.issues, check)
        return len(self.issues) == found


_PLURAL_PARTS = frozenset({"events", "random_failures"})


def _collect(issues: list[Issue], check: Callable[[], None]) -> None:
    """Run one independent check; a mistake it finds is noted and checking goes on."""
    try:
        check()
    except ScenarioError as exc:
        issues.extend(exc.issues)


def load_scenario(path: str | Path) -> Scenario:
    """Read and fully validate a scenario file; raise one ScenarioError naming every mistake
    found, each with its file, line, column and key path."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ScenarioError("", f"cannot read: {exc.strerror or exc}", str(path)) from None
    try:
        data = yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        if mark is None:
            raise ScenarioError("yaml", problem, str(path)) from None
        issue = Issue("yaml", problem, mark.line + 1, mark.column + 1)
        raise ScenarioError("yaml", problem, str(path), [issue]) from None
    w = data.get("workload") if isinstance(data, dict) else None
    if isinstance(w, dict) and w.get("kind") == "trace" and isinstance(w.get("file"), str):
        # A trace file named in a scenario is found beside the scenario, wherever it runs from.
        w["file"] = str(path.parent / w["file"])
    try:
        return validate(data)
    except ScenarioError as exc:
        raise exc.located(str(path), key_positions(text)) from None


def validate(data: Any) -> Scenario:
    """Validate a parsed scenario (a dict); raise one ScenarioError naming every mistake found:
    all shape mistakes and, on the parts whose shape is right, every meaning check that fails,
    at once. Only a check that reads a part that is wrong waits (a host name on an invalid
    topology), and the error says it waits."""
    if not isinstance(data, dict):
        raise ScenarioError("", f"a scenario must be a mapping of keys, got {type(data).__name__}")
    try:
        scenario = Scenario.model_validate(data)
    except ValidationError as exc:
        issues = _shape_issues(exc, data)
        parts = sound_parts(data, [_strip_tags(tuple(e["loc"])) for e in exc.errors()])
    else:
        issues, parts = [], SoundParts.whole(scenario)
    waiting: list[Issue] = []
    if parts is not None:
        checks = _check_meaning(parts, sweep=not issues)
        issues += checks.issues
        waiting = checks.waiting
    if issues:
        issues, waiting = _in_order(issues, data), _in_order(waiting, data)
        raise ScenarioError(issues[0].path, issues[0].reason, issues=issues, waiting=waiting)
    return scenario


def _in_order(issues: list[Issue], data: dict) -> list[Issue]:
    """`issues` in the order of the top-level keys they name, as written (a key that is not
    written last); issues of one key in the order they were found."""
    order = {str(key): n for n, key in enumerate(data)}

    def rank(issue: Issue) -> int:
        top = _PATH_PART.match(issue.path)
        return order.get(top.group(0), len(order)) if top else -1

    return sorted(issues, key=rank)


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
    ("capture",): list(CaptureSpec.model_fields),
}


def _strip_tags(loc: tuple) -> tuple:
    """Drop the discriminator tag pydantic inserts: ('events', 0, 'loss', 'percent')."""
    if len(loc) >= 2 and loc[0] == "workload" and loc[1] in WORKLOAD_KINDS:
        return loc[:1] + loc[2:]
    if len(loc) >= 3 and loc[0] == "events" and isinstance(loc[1], int) and loc[2] in ACTIONS:
        return loc[:2] + loc[3:]
    if len(loc) >= 3 and loc[0] == "transport" and loc[2] in ("bare", "spec"):
        return loc[:2] + loc[3:]
    return loc


def _shape_issues(exc: ValidationError, data: dict) -> list[Issue]:
    """Every shape mistake, one issue each, in the file's order of keys."""
    errors = exc.errors(include_url=False)
    # A misspelt key also makes the key it should have been "missing": the misspelling is the
    # cause, so a "required" beside an unknown key of the same mapping is not repeated.
    misspelt_in = {
        _strip_tags(tuple(e["loc"]))[:-1] for e in errors if e["type"] == "extra_forbidden"
    }
    issues: list[Issue] = []
    for err in errors:
        loc = _strip_tags(tuple(err["loc"]))
        if err["type"] == "missing" and loc[:-1] in misspelt_in:
            continue
        issue = _issue_of(err, loc, data)
        if issue not in issues:
            issues.append(issue)
    return issues


def _issue_of(err: Any, loc: tuple, data: dict) -> Issue:
    kind, value = err["type"], err.get("input")
    path = format_loc(loc)
    if kind == "extra_forbidden":
        return Issue(path, "unknown key" + _did_you_mean(loc, data))
    if kind == "missing":
        return Issue(path, "required")
    if kind == "union_tag_invalid":
        field = "kind" if loc[0] == "workload" else "action"
        allowed = WORKLOAD_KINDS if field == "kind" else ACTIONS
        return Issue(
            f"{path}.{field}",
            f"unknown {field} {_tag_value(value, field)!r} (one of {', '.join(allowed)})",
        )
    if kind == "union_tag_not_found":
        field = "kind" if loc[0] == "workload" else "action"
        # No tag, so no model to name the unknown keys: a key that looks like the tag is the
        # likelier mistake (`acton:`) than a tag that was left out.
        typo = difflib.get_close_matches(field, [str(k) for k in (value or {})], n=1)
        if isinstance(value, dict) and typo:
            return Issue(f"{path}.{typo[0]}", f"unknown key (did you mean {field!r}?)")
        return Issue(f"{path}.{field}", "required")
    if kind == "literal_error" and loc[:1] == ("transport",) and loc[-1] == "name":
        names = ", ".join(ENDPOINT_TRANSPORT_NAMES)
        return Issue(path, f"{value!r} cannot be configured (a configuration is of: {names})")
    if kind == "literal_error" and loc[:1] == ("transport",):
        where = "transport" if isinstance(data.get("transport"), str) else path
        return Issue(where, f"unknown transport {value!r} (one of {', '.join(TRANSPORTS)})")
    return Issue(path, reason_of(err))


def _tag_value(value: Any, field: str) -> Any:
    return value.get(field) if isinstance(value, dict) else value


def _did_you_mean(loc: tuple, data: dict) -> str:
    parent, key = loc[:-1], loc[-1]
    known = _KNOWN_KEYS.get(parent)
    if parent[:1] == ("transport",):
        known = list((TransportSpec if len(parent) <= 2 else CcSpec).model_fields)
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


def _check_meaning(p: SoundParts, sweep: bool = True) -> _Checks:
    """Everything the schema cannot know: names, adjacency, times, and sensible expectations.
    Every independent check (the topology's ranges, the workload's hosts, each event's time
    and names, each expectation) runs on the parts that are sound, and every mistake found is
    reported; a check that reads a part that is not (names on an invalid topology, times
    against an invalid duration) waits and says so. The sweep's points are checked only on
    a sound base (`sweep`)."""
    sc = p.sc
    checks = _Checks(set(p.unsound))
    fabric: Fabric | None = None
    if "topology" not in checks.unsound:
        try:
            fabric = sc.fabric()
        except TopologyError as exc:
            key, _, reason = str(exc).partition(": ")
            checks.issues.append(Issue(f"topology.{key}", reason))
            checks.unsound.add("topology")
    topo = ("topology",)
    w = p.workload
    if w is not None and _names_hosts(w):
        checks.run("workload", lambda: _check_workload_hosts(w, fabric), topo, "host names ")
    checks.run("topology", lambda: _check_two_hosts(fabric), topo, quiet=True)
    if "workload" not in checks.unsound and isinstance(sc.workload, TraceWorkload):
        _check_trace(checks, sc)
    for i, event in p.events:
        path = f"events[{i}]"
        checks.run(f"{path}.at", partial(_check_event_time, path, event, sc), ("duration_s",))
        names = partial(_check_event_names, path, event, sc, fabric)
        checks.run(f"{path}.{_named_by(event)}", names, topo)
    for i, spec in p.random:
        path = f"random_failures[{i}]"
        checks.run(path, partial(_check_random, path, spec, sc, fabric), topo, "names ")
        start = partial(_check_random_start, path, spec, sc)
        checks.run(f"{path}.from_s", start, ("duration_s",))
    if "random_failures" not in checks.unsound:
        # Each spec's own line already says it waits for the topology.
        checks.run("random_failures", lambda: _check_random_overlap(sc, fabric), topo, quiet=True)
    if "expect" not in checks.unsound:
        _check_expect(checks, sc)
    n = sc.emulation.time_dilation
    if "emulation" not in checks.unsound and n != "auto" and n > 1:
        checks.run("emulation.time_dilation", lambda: _check_emulation(sc), ("transport",))
    if "capture" not in checks.unsound and sc.capture.ports:
        checks.run("capture.ports", lambda: _check_capture(sc, fabric), topo)
    if sweep and sc.sweep and not checks.issues and not checks.unsound:
        # Each point is checked as a scenario: only a sound base.
        checks.run("sweep", lambda: _check_sweep(sc))
    return checks


def _names_hosts(w: Workload) -> bool:
    """Does the workload name hosts of its own (else only the fabric's count matters)?"""
    if isinstance(w, BulkWorkload | IncastWorkload):
        return True
    return getattr(w, "hosts", "all") != "all" or bool(getattr(w, "stragglers", None))


def _check_workload_hosts(w: Workload, fabric: Fabric | None) -> None:
    assert fabric is not None  # run only on a valid topology
    hosts = fabric.hosts()
    try:
        check_hosts(w, hosts, "workload")
    except WorkloadSpecError as exc:
        raise ScenarioError(exc.path, exc.reason) from None
    if isinstance(w, IncastWorkload) and w.srcs == "all" and len(hosts) < 2:
        raise ScenarioError("workload.srcs", "the fabric has no host besides the destination")


def _check_two_hosts(fabric: Fabric | None) -> None:
    assert fabric is not None  # run only on a valid topology
    if len(fabric.hosts()) < 2:
        raise ScenarioError("topology.hosts_per_leaf", "a workload needs at least two hosts")


def _check_trace(checks: _Checks, sc: Scenario) -> None:
    """A trace workload: its transports (endpoint ones), its time unit, then its file, read
    for the scenario's ranks (which the topology gives)."""
    w = sc.workload
    assert isinstance(w, TraceWorkload)

    def endpoint_transports() -> None:
        kernel = [t for t in sc.transports if t in KERNEL_TRANSPORTS]
        if kernel:
            raise ScenarioError(
                "workload.kind",
                f"a trace runs in the endpoint processes; {kernel[0]} is a kernel transport",
            )

    def time_unit() -> None:
        if w.time_unit == "cycles" and w.cycle_ghz is None:
            raise ScenarioError("workload.cycle_ghz", "time_unit cycles needs the clock in GHz")
        if w.format == "astra-text" and w.time_unit is None:
            raise ScenarioError(
                "workload.time_unit", "say what the file's times count: ns, us, ms or cycles"
            )

    def graph() -> None:
        try:
            trace_graph(sc)
        except TraceError as exc:
            raise ScenarioError("workload.file", str(exc)) from None

    checks.run("workload.kind", endpoint_transports, ("transport",))
    if checks.run("workload.time_unit", time_unit):
        checks.run("workload.file", graph, ("topology",))


def _check_expect(checks: _Checks, sc: Scenario) -> None:
    w, expect = sc.workload, sc.expect

    def steps() -> None:
        if not isinstance(w, AllreduceWorkload | TraceWorkload):
            raise ScenarioError(
                "expect.max_p100_over_p50", f"needs step times; the {w.kind} workload has no steps"
            )

    def a_failure() -> None:
        if not any(e.is_failure for e in [*sc.events, *_drawn(sc)]):
            raise ScenarioError("expect.max_failover_ms", "the timeline has no failure event")

    if expect.max_p100_over_p50 is not None:
        checks.run("expect.max_p100_over_p50", steps, ("workload",))
    if expect.max_failover_ms is not None and not any(e.is_failure for e in sc.events):
        # Nothing written fails: the rest of the timeline must be known to say none does.
        needs = ["events", "random_failures"] + (["topology"] if sc.random_failures else [])
        checks.run("expect.max_failover_ms", a_failure, needs)


def _check_sweep(sc: Scenario) -> None:
    """Every point of the sweep must be a valid scenario, before anything of any is built."""
    sweep_scenarios(sc, sc.sweep or {})


def sweep_scenarios(
    sc: Scenario, sweep: Mapping[str, Sequence[Any]]
) -> list[tuple[dict[str, Any], Scenario]]:
    """(values, scenario) for every point of `sweep`'s grid over `sc` (without its own sweep),
    each validated completely; the first mistake is a ScenarioError at ``sweep.KEY``."""
    base = sc.model_dump(mode="python", exclude_none=True)
    base.pop("sweep", None)
    try:
        for key, values in sweep.items():
            if not values:
                raise SweepError(key, "give at least one value")
            point_data(base, {key: values[0]})  # a path naming nothing fails before the grid
    except SweepError as exc:
        raise ScenarioError(f"sweep.{exc.key}", exc.reason) from None
    points = []
    for values in grid(sweep):
        try:
            points.append((values, validate(point_data(base, values))))
        except ScenarioError as exc:
            key = ", ".join(values)
            shown = ", ".join(f"{k} = {v!r}" for k, v in values.items())
            raise ScenarioError(f"sweep.{key}", f"at {shown}: {exc.path}: {exc.reason}") from None
    return points


def _check_emulation(sc: Scenario) -> None:
    """A kernel transport reads the kernel's clocks, which nobody can dilate: a given N > 1
    cannot run it (under `auto`, the runner decides once N is known)."""
    n = sc.emulation.time_dilation
    kernel = [t for t in sc.transports if t in KERNEL_TRANSPORTS]
    if n != "auto" and n > 1 and kernel:
        raise ScenarioError(
            "transport",
            f"{kernel[0]} runs on the kernel's clocks, which cannot be dilated; "
            f"emulation.time_dilation {n:g} needs 1 for it",
        )


def _check_capture(sc: Scenario, fabric: Fabric) -> None:
    try:
        capture_ports(fabric, sc.capture.ports, "capture.ports")
    except ValueError as exc:
        path, _, reason = str(exc).partition(": ")
        raise ScenarioError(path, reason) from None


def _named_by(event: Event) -> str:
    """The key that names what an event acts on."""
    if isinstance(event, LinkEvent):
        return "link"
    return "node" if isinstance(event, SwitchEvent) else "plane"


def _check_event_time(path: str, event: Event, sc: Scenario) -> None:
    at = float(event.at)  # as validation gives it, for an event built as written too
    if at >= sc.duration_s:
        when = "at" if at == sc.duration_s else "after"
        raise ScenarioError(
            f"{path}.at", f"{at!r} is {when} the end (duration_s {sc.duration_s:g})"
        )
    if isinstance(event, Flap) and event.end_s > sc.duration_s:
        raise ScenarioError(
            f"{path}.count",
            f"the flap runs until {event.end_s:g} s, after the end (duration_s {sc.duration_s:g})",
        )


def _check_event_names(path: str, event: Event, sc: Scenario, fabric: Fabric | None) -> None:
    assert fabric is not None  # run only on a valid topology
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
        if isinstance(event, Impair):
            for src, dst in [event.direction] if event.direction else [(a, b), (b, a)]:
                if fabric.nodes[src].kind == "host":
                    raise ScenarioError(
                        f"{path}.direction",
                        f"{src} is a host, which has no switch to impair what it sends: give "
                        f"direction: [{dst}, {src}] (impairments act at a sending switch)",
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


def _drawn(sc: Scenario) -> list:
    """The random failures' events, or none if a spec names something the fabric lacks (its
    own check reports that)."""
    try:
        return sc.random_events()
    except Exception:  # noqa: BLE001 - reported by _check_random
        return []


def _check_random(path: str, spec: RandomFailureSpec, sc: Scenario, fabric: Fabric | None) -> None:
    """Names against the fabric, one issue per mistake."""
    assert fabric is not None  # run only on a valid topology
    issues: list[Issue] = []
    if isinstance(spec.links, list):
        for j, (a, b) in enumerate(spec.links):
            where = f"{path}.links[{j}]"
            missing = [n for n in (a, b) if n not in fabric.nodes]
            if missing:
                hint = _plane_hint(missing[0], sc)
                issues.append(Issue(where, f"no node named {missing[0]}{hint}"))
                continue
            try:
                fabric.link_between(a, b)
            except TopologyError:
                issues.append(Issue(where, f"{a} and {b} are not adjacent"))
    if isinstance(spec.switches, list):
        for j, name in enumerate(spec.switches):
            node = fabric.nodes.get(name)
            if node is None or node.kind == "host":
                what = "a host, not a switch" if node else f"not a switch{_plane_hint(name, sc)}"
                issues.append(Issue(f"{path}.switches[{j}]", f"{name} is {what}"))
    if isinstance(spec.planes, list):
        for j, plane in enumerate(spec.planes):
            if plane > sc.topology.planes:
                issues.append(
                    Issue(
                        f"{path}.planes[{j}]",
                        f"no plane {plane} (topology.planes {sc.topology.planes})",
                    )
                )
    if issues:
        raise ScenarioError(issues[0].path, issues[0].reason, issues=issues)


def _check_random_start(path: str, spec: RandomFailureSpec, sc: Scenario) -> None:
    if spec.from_s >= sc.duration_s:
        raise ScenarioError(
            f"{path}.from_s",
            f"{spec.from_s:g} is not before the end (duration_s {sc.duration_s:g})",
        )


def _check_random_overlap(sc: Scenario, fabric: Fabric | None) -> None:
    """Two failure processes on one element would repair each other's failures."""
    assert fabric is not None  # run only on a valid topology
    seen: dict[str, int] = {}
    for i, spec in enumerate(sc.random_failures):
        try:
            elements = targets(fabric, spec)
        except Exception:  # noqa: BLE001 - reported by _check_random
            continue
        for e in elements:
            key = "-".join(sorted(map(str, e))) if isinstance(e, list) else str(e)
            if key in seen and seen[key] != i:
                raise ScenarioError(
                    f"random_failures[{i}]",
                    f"{key} is already failed at random by random_failures[{seen[key]}]",
                )
            seen[key] = i


def _plane_hint(name: str, sc: Scenario) -> str:
    planes = sc.topology.planes
    if planes > 1 and re.fullmatch(r"(leaf|spine)\d+", name):
        return f" (with {planes} planes switch names end in p1..p{planes}, e.g. {name}p1)"
    return ""


# ----- where a key is in the file ----------------------------------------------------------------


def key_positions(text: str) -> dict[tuple, tuple[int, int]]:
    """(line, column), 1-based, of every key and list item of a YAML document, by key path:
    ``("events", 2, "link")`` -> where ``link:`` is written in the third event."""
    positions: dict[tuple, tuple[int, int]] = {}
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        return positions

    def walk(node: yaml.Node, path: tuple) -> None:
        if isinstance(node, yaml.MappingNode):
            for key_node, value_node in node.value:
                key = path + (key_node.value,)
                positions[key] = (key_node.start_mark.line + 1, key_node.start_mark.column + 1)
                walk(value_node, key)
        elif isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                positions[path + (i,)] = (item.start_mark.line + 1, item.start_mark.column + 1)
                walk(item, path + (i,))

    if root is not None:
        positions[()] = (root.start_mark.line + 1, root.start_mark.column + 1)
        walk(root, ())
    return positions


_PATH_PART = re.compile(r"([^.\[\]]+)|\[(\d+)\]")


def _position_of(path: str, positions: Mapping[tuple, tuple[int, int]]) -> tuple[int, int] | tuple:
    """Where `path` (``events[2].link``) is written; for a missing key, where its mapping is."""
    if not positions:
        return ()
    parts: tuple = tuple(int(index) if index else name for name, index in _PATH_PART.findall(path))
    while parts not in positions and parts:
        parts = parts[:-1]
    return positions.get(parts, ())
