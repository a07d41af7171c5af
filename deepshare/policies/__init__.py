"""Scheduling policies: one protocol, a registry of heuristics and learned policies (and plug-ins)."""

from deepshare.policies.base import Policy
from deepshare.policies.registry import PolicyInfo, make_policy, policy_info, policy_names, register

__all__ = ["Policy", "PolicyInfo", "make_policy", "policy_info", "policy_names", "register"]
