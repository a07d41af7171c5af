"""Experiments: run policies (and autoscalers) on traces, evaluate them over seeds and suites,
and turn the results into tables and figures.

``scenario`` (one scenario, one or several policies: the code path behind ``simulate`` and
``compare``), ``evaluation`` (over seeds), ``suite`` (benchmark grids), ``report_format`` and
``plots`` (tables and figures), ``autoscale*`` (autoscaled simulations, the live autoscaling
experiment on a fake Ray cluster, their tables and figures). Sits above ``core``, ``policies``
and ``raycluster``; nothing below imports it.
"""
