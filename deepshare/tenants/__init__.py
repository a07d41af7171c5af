"""Tenants: queues with GPU quotas, cohorts that borrow and lend, priorities, fair share (issue 38).

* :mod:`~deepshare.tenants.spec` — the tenants file (``--tenants``) and :class:`Tenants`;
* :mod:`~deepshare.tenants.quota` — usage per queue against quotas (:class:`Ledger`);
* :mod:`~deepshare.tenants.admission` — which queued jobs a policy may see;
* :mod:`~deepshare.tenants.reclaim` — preemption for quotas (reclaim, priority);
* :mod:`~deepshare.tenants.wrapper` — :class:`Admitted`, all of it around any policy, and
  :func:`admitted` and :func:`around_policy`, which put it where each policy needs it;
* :mod:`~deepshare.tenants.orders` — fairness-aware orders (``drf``, ``themis``);
* :mod:`~deepshare.tenants.fairness` — per-tenant shares and finish-time fairness of a run.

A layer between the core and the policies: it imports only the core, and the policy registry
registers its orders. ``docs/tenants.md`` is the user's guide.
"""

from deepshare.tenants.admission import Admission, admit
from deepshare.tenants.quota import Ledger
from deepshare.tenants.spec import Queue, TenantToken, Tenants, load_tenants, parse_tenants
from deepshare.tenants.wrapper import Admitted, admitted, around_policy

__all__ = ["Admission", "Admitted", "Ledger", "Queue", "TenantToken", "Tenants", "admit", "admitted", "around_policy", "load_tenants", "parse_tenants"]
