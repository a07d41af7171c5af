"""The placement service: a policy behind HTTP on Ray Serve, and its Python client.

``schemas`` (the request and response), ``translate`` (request <-> :class:`ClusterView`),
``engine`` (one loaded policy deciding, without HTTP, within a
:class:`~deepshare.core.deadline.Deadline`), ``api`` + ``middleware`` + ``workers`` + ``limits`` (the app, :class:`~deepshare.serving.api.PlacementAPI`, and its
bounds), ``deployment`` + ``settings`` (Serve), ``service`` (:func:`~deepshare.serving.service.run_service`: Ray, Serve and
signals, what ``deepshare serve`` calls), ``metrics``, ``client`` (:class:`PlacementClient`).
See ``docs/placement-service.md``.
"""
