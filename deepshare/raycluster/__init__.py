"""Ray-cluster tooling: the cluster YAMLs' keys, fake local clusters, and Ray's autoscaler.

``cluster_yaml`` (validate launcher YAMLs and KubeRay manifests, turn their GPU worker types into
an autoscaling spec), ``labels`` (the ``deepshare.io/*`` node labels and fabric resources),
``fakecluster`` and ``fake_autoscaling`` + ``fake_provider`` (multi-node Ray clusters on this
machine that stop only what they started), ``demand_bridge`` (the live scheduler's queued
demand handed to ``request_resources``). The pure autoscaling model is
:mod:`deepshare.core.autoscaling`; the ``deepshare cluster`` commands are :mod:`deepshare.cli.cluster`.
"""
