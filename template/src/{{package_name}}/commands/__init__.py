"""The commands other than training itself (``cli.py`` dispatches): export, similar and sweep.

They sit on top: they may import everything below them (sweeps, training, data, models, outputs, core).
"""
