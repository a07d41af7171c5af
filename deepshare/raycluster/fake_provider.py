"""Ray's fake multi-node node provider, naming each node it starts (``deepshare.io/node-name``).

The live scheduler names nodes by that label (else by IP, which every fake node shares), so
each node gets ``<node type>-<k>`` with k counting up from 1 over the provider's life. Loaded
by the autoscaler as an external provider: ``provider: {type: external, module:
deepshare.raycluster.fake_provider.NamedFakeProvider}``; it needs ``RAY_FAKE_CLUSTER=1``.
"""

from __future__ import annotations

from typing import Any

from ray.autoscaler.tags import TAG_RAY_USER_NODE_TYPE

from deepshare.infra.raycompat import fake_multi_node_provider, fake_node_number
from deepshare.raycluster.fake_autoscaling import NAME_LABEL

FakeMultiNodeProvider: Any = fake_multi_node_provider()  # Ray's private class: raycompat says why


class NamedFakeProvider(FakeMultiNodeProvider):
    def _create_node_with_resources_and_labels(self, node_config: Any, tags: Any, count: int, resources: Any,
                                               labels: Any) -> None:
        name = f"{tags[TAG_RAY_USER_NODE_TYPE]}-{fake_node_number(self)}"  # the id the parent takes next
        super()._create_node_with_resources_and_labels(node_config, tags, count, resources,
                                                       {**(labels or {}), NAME_LABEL: name})
