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

# The public name of a leaf-spine fabric's parameters (`from testbed import LeafSpine`):
# what a user chooses; `leaf_spine(params)` derives the rest.
LeafSpine = TopologyParams

__all__ = [
    "Fabric",
    "FibEntry",
    "Interface",
    "LeafSpine",
    "Link",
    "NextHop",
    "Node",
    "TopologyError",
    "TopologyParams",
    "leaf_spine",
]
