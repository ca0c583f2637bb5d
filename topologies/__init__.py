"""Pure fabric descriptions: no root, no Mininet."""

from topologies.leaf_spine import (
    Fabric,
    FibEntry,
    Interface,
    Link,
    NextHop,
    Node,
    TopologyError,
    TopologyParams,
    leaf_spine,
)

__all__ = [
    "Fabric",
    "FibEntry",
    "Interface",
    "Link",
    "NextHop",
    "Node",
    "TopologyError",
    "TopologyParams",
    "leaf_spine",
]
