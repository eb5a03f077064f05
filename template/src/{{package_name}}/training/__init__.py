"""The training loop and what a run is made of: ``trainer.py`` (``train``, ``Trainer.fit``) -> ``engine.py``
(``train_step``, ``evaluate``) -> ``optimizer.step()``; the run state a checkpoint holds, optimizer and
schedule, EMA, stop signals, the run lock, and loading a trained model (``inference.py``).

Imports data, models, outputs and the core; never commands or sweeps.
"""
