"""The network: a backbone (the built-in CNN, a torchvision model, or yours from ``extensions``) and a head.

Imports the core (and ``extensions`` for your backbones); nothing of data, training or outputs.
"""
