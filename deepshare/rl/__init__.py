"""Training the learned policies with RLlib: the env, the RLModule, the driver and Tune sweeps.

The only layer that imports ``ray.rllib``; what it trains is served by the policies layer.
"""
