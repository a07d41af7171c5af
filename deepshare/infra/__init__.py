"""What every networked service of DeepShare shares: HTTP guards and a loopback-only local Ray.

``httpauth`` (bearer token, Host allow-list, JSON-only bodies, body limits and timeouts, as plain
ASGI middleware used by the placement service and the live scheduler) and ``localray`` (a local
Ray that listens on loopback only). Depends on nothing above ``core``.
"""
