"""The live scheduler: run distributed training jobs on a Ray cluster under a placement policy.

``spec`` (the job spec), ``journal`` (SQLite state machine), ``cluster`` (Ray nodes -> topology),
``launcher`` + ``worker`` + ``entry`` (placement groups, one worker actor and process per GPU),
``loop`` (journal -> view -> policy -> actions, through the ``ports.Launcher`` it is given), ``api`` + ``models`` (HTTP, behind the guards of
:mod:`deepshare.infra.httpauth`), ``token`` (the API's admin bearer token), ``tenancy`` (``--tenants``: tenants' tokens, their jobs,
admission around the policy, reloads), ``logs`` (rank logs under the state
folder), ``statelock`` + ``private`` (one scheduler per state folder; folders created 0700), ``metrics`` (Prometheus), ``defaults`` (what the loop and its command line share), ``service`` (:func:`~deepshare.runtime.service.run_scheduler`, which ``deepshare scheduler start`` calls), ``localcluster``
(``--local``, on loopback), ``httpclient``; the commands are :mod:`deepshare.cli.scheduler`.
The job's side is :mod:`deepshare.job`. See ``docs/scheduler.md``.
"""
