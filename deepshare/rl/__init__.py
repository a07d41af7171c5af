"""Training the learned policies with RLlib: the env, the RLModule, the driver and Tune sweeps.

The only layer that imports ``ray.rllib``; what it trains is served by the policies layer.
"""

import gymnasium

ENV_ID = "DeepShare-v0"
"""The scheduling environment's Gymnasium id: ``gymnasium.make("DeepShare-v0", config={...})`` once
``deepshare.rl`` is imported, or ``gymnasium.make("deepshare.rl:DeepShare-v0")`` from anywhere
(Gymnasium imports the module before the lookup). ``config`` is an :class:`~deepshare.rl.env.EnvConfig` mapping."""

if ENV_ID not in gymnasium.registry:  # registered once; the env module is imported on the first make
    gymnasium.register(id=ENV_ID, entry_point="deepshare.rl.env:DeepShareEnv")
